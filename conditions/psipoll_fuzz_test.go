package conditions

import (
	"strings"
	"testing"
)

// FuzzParsePSITotal: no content of /proc/pressure/memory makes the parser
// panic, and a total it returns is never negative.
func FuzzParsePSITotal(f *testing.F) {
	for _, s := range []string{
		"some avg10=0.00 avg60=0.00 avg300=0.00 total=123\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=45\n",
		"full total=18446744073709551615\n", "full avg10=1 total=\n", "some\nfull total=7", "",
	} {
		f.Add([]byte(s), "full")
		f.Add([]byte(s), "some")
	}
	f.Fuzz(func(t *testing.T, data []byte, kind string) {
		if strings.ContainsAny(kind, "\n") {
			return
		}
		total, err := parsePSITotal(data, kind)
		if err == nil && total < 0 {
			t.Fatalf("parsePSITotal(%q, %q) = %v", data, kind, total)
		}
	})
}
