package kmsg

import (
	"reflect"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Record
	}{
		{"6,1,0,-;Command line: quiet\n", Record{Seq: 1, Facility: 0, Level: 6, Message: "Command line: quiet"}},
		{"3,458,26936657519,-;EXT4-fs (loop0): Remounting filesystem read-only\n",
			Record{Seq: 458, Level: 3, SinceBoot: 26936657519 * time.Microsecond, Message: "EXT4-fs (loop0): Remounting filesystem read-only"}},
		// A process's line: facility LOG_USER (8 = 1<<3 | 0).
		{"8,9,100,-;EXT4-fs (loop0): Remounting filesystem read-only\n", Record{Seq: 9, Facility: 1, Level: 0, SinceBoot: 100 * time.Microsecond,
			Message: "EXT4-fs (loop0): Remounting filesystem read-only"}},
		// Dictionary lines, escapes, extra header fields.
		{"4,77,5,c,caller=T1;tab\\x09here \\x5c end\n SUBSYSTEM=block\n DEVICE=b7:0\n", Record{Seq: 77, Level: 4, SinceBoot: 5 * time.Microsecond,
			Message: "tab\there \\ end", Fields: map[string]string{"SUBSYSTEM": "block", "DEVICE": "b7:0"}}},
	} {
		got, err := Parse([]byte(tc.in))
		if err != nil {
			t.Errorf("Parse(%q): %v", tc.in, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Parse(%q) = %+v, want %+v", tc.in, got, tc.want)
		}
	}
	for _, bad := range []string{"", "no header", "6,1,0;short\n", "x,1,0,-;m\n", "6,-1,0,-;m\n", "6,1,abc,-;m\n",
		"6,1,99999999999999999999,-;m\n"} {
		if _, err := Parse([]byte(bad)); err == nil {
			t.Errorf("Parse(%q): no error", bad)
		}
	}
}

// FuzzParse: no input panics, and what parses has a priority that splits
// back into its facility and level.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"6,1,0,-;Command line: quiet\n", "4,77,5,c,caller=T1;tab\\x09 \\x5\n SUBSYSTEM=block\n", "8,9,100,-;x", ";", "1,2,3,4;\\x"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := Parse(data)
		if err != nil {
			return
		}
		if r.Level < 0 || r.Level > 7 || r.Facility < 0 || r.SinceBoot < 0 {
			t.Fatalf("Parse(%q) = %+v", data, r)
		}
	})
}
