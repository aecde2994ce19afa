package kernelrules

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

// FuzzParse checks that Parse never panics and that whatever it accepts
// survives json.Marshal and Parse again unchanged, so a file the agent
// writes back (or logs) reads the same. Seeds live in
// testdata/fuzz/FuzzParse besides the ones added here.
func FuzzParse(f *testing.F) {
	f.Add([]byte(validFile))
	f.Add(defaultRules)
	f.Add([]byte(`{"source": "s", "rules": [{"type": "temporary", "reason": "R", "pattern": "a\\nb"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse("fuzz.json", data)
		if err != nil {
			if file != nil {
				t.Fatalf("Parse returned a file with error %v", err)
			}
			return
		}
		encoded, err := json.Marshal(file)
		if err != nil {
			t.Fatalf("marshalling a parsed file: %v", err)
		}
		again, err := Parse("fuzz.json", encoded)
		if err != nil {
			t.Fatalf("a parsed file does not parse once marshalled: %v\n%s", err, encoded)
		}
		reencoded, err := json.Marshal(again)
		if err != nil {
			t.Fatalf("marshalling the re-parsed file: %v", err)
		}
		// Compared as JSON because an empty list and a missing one both
		// marshal to nothing and read back as nil.
		if !bytes.Equal(encoded, reencoded) || !reflect.DeepEqual(file.Rules, again.Rules) {
			t.Fatalf("round trip changed the file:\n%s\n%s", encoded, reencoded)
		}
		// Whatever parses must also be matchable without panicking.
		NewMatcher(file).Match("EXT4-fs (sda1): Remounting filesystem read-only")
	})
}
