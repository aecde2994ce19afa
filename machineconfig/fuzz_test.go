package machineconfig

import (
	"errors"
	"strings"
	"testing"
)

// FuzzParse checks that Parse never panics, refuses only with a
// *FieldError, and that what it accepts is consistent: clean absolute file
// paths, safe unit names, and a config that reconciles with itself to an
// empty diff. The seed corpus is in testdata/fuzz/FuzzParse.
func FuzzParse(f *testing.F) {
	f.Add(mc(f, desiredIgn, map[string]any{"kernelArguments": []string{`a="b c" d`}}))
	f.Fuzz(func(t *testing.T, obj []byte) {
		c, err := Parse(obj)
		if err != nil {
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("not a FieldError: %v", err)
			}
			return
		}
		for _, file := range c.Files {
			if checkHostPath(file.Path) != nil {
				t.Fatalf("accepted path %q", file.Path)
			}
		}
		for _, u := range c.Units {
			if strings.Contains(u.Name, "/") {
				t.Fatalf("accepted unit name %q", u.Name)
			}
		}
		d, err := Reconcile(c, c)
		if err != nil || !d.Empty() {
			t.Fatalf("self-reconcile: %+v, %v", d, err)
		}
	})
}
