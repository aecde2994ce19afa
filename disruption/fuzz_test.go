package disruption

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
)

// FuzzPoliciesFrom feeds PoliciesFrom arbitrary JSON. It must never panic,
// every refusal is a *FieldError, and what it accepts survives StatusObject
// and back unchanged. The kept corpus is in testdata/fuzz/FuzzPoliciesFrom.
func FuzzPoliciesFrom(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		var obj map[string]any
		if json.Unmarshal(data, &obj) != nil {
			return
		}
		Ready(obj)
		p, err := PoliciesFrom(obj)
		if err != nil {
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("error %v is not a *FieldError", err)
			}
			return
		}
		again, err := PoliciesFrom(viaJSON(t, object(StatusObject(p))))
		if err != nil {
			t.Fatalf("the status of accepted policies %+v is refused: %v", p, err)
		}
		if !reflect.DeepEqual(normal(again), normal(p)) {
			t.Fatalf("round trip changed the policies:\n%+v\n%+v", p, again)
		}
	})
}

// normal makes an absent SSH key policy and an empty one the same: the
// status always has the sshkey object.
func normal(p Policies) Policies {
	if p.SSHKey == nil {
		p.SSHKey = []Action{}
	}
	return p
}
