package disruption

import (
	"strings"
	"testing"
)

func TestSafeRegistriesChange(t *testing.T) {
	reg := func(body string) string { return "[[registry]]\n" + body + "\n" }
	quay := `location = "quay.example/openshift"` + "\n"
	mirror := func(loc, pull string) string {
		s := "[[registry.mirror]]\nlocation = \"" + loc + "\"\n"
		if pull != "" {
			s += "pull-from-mirror = \"" + pull + "\"\n"
		}
		return s
	}
	digestMirror := reg(quay + mirror("m1.internal/ocp", "digest-only"))
	tests := []struct {
		name     string
		old, new string
		safe     bool
		why      string // a substring of why
	}{
		{name: "no file before or after", safe: true},
		{name: "unchanged", old: registriesBase, new: registriesBase, safe: true, why: "safe"},
		{name: "search registry appended", old: `unqualified-search-registries = ["a"]`, new: `unqualified-search-registries = ["a", "b"]`, safe: true},
		{name: "search registries reordered", old: `unqualified-search-registries = ["a", "b"]`, new: `unqualified-search-registries = ["b", "a"]`, why: "unqualified-search-registries"},
		{name: "search registry removed", old: `unqualified-search-registries = ["a", "b"]`, new: `unqualified-search-registries = ["a"]`, why: "unqualified-search-registries"},
		{name: "registry removed", old: digestMirror, new: "", why: "registry quay.example/openshift has been removed"},
		{name: "registry added with digest-only mirrors", new: digestMirror, safe: true},
		{name: "registry added with a tag mirror", new: reg(quay + mirror("m1.internal/ocp", "")), why: "registry quay.example/openshift has been added"},
		{name: "registry added mirror-by-digest-only without mirrors", new: reg(quay + "mirror-by-digest-only = true"), safe: true},
		{name: "blocked registry added", new: reg(quay + "blocked = true"), why: "has been added"},
		{name: "prefix keeps the scope, location changes", old: reg(`prefix = "quay.example"` + "\n" + quay), new: reg(`prefix = "quay.example"` + "\nlocation = \"other.example\"\n"), why: "location of registry quay.example"},
		{name: "blocked set", old: reg(quay), new: reg(quay + "blocked = true"), why: "blocked of registry"},
		{name: "insecure set", old: reg(quay), new: reg(quay + "insecure = true"), why: "insecure of registry"},
		{name: "digest-only mirror added", old: digestMirror, new: digestMirror + mirror("m2.internal/ocp", "digest-only"), safe: true},
		{name: "tag mirror added", old: digestMirror, new: digestMirror + mirror("m2.internal/ocp", "all"), why: "mirror m2.internal/ocp has been added"},
		{name: "mirror added to a mirror-by-digest-only registry", old: reg(quay + "mirror-by-digest-only = true\n" + mirror("m1.internal/ocp", "")),
			new: reg(quay + "mirror-by-digest-only = true\n" + mirror("m1.internal/ocp", "") + mirror("m2.internal/ocp", "")), safe: true},
		{name: "mirror removed", old: digestMirror + mirror("m2.internal/ocp", "digest-only"), new: digestMirror, why: "mirror m2.internal/ocp has been removed"},
		{name: "mirror made digest-only", old: reg(quay + mirror("m1.internal/ocp", "")), new: digestMirror, safe: true},
		{name: "mirror made to serve tags", old: digestMirror, new: reg(quay + mirror("m1.internal/ocp", "tag-only")), why: "pull-from-mirror of mirror m1.internal/ocp"},
		{name: "short-name mode is not looked at", old: registriesBase, new: strings.Replace(registriesBase, `short-name-mode = ""`, `short-name-mode = "enforcing"`, 1), safe: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			safe, why, err := SafeRegistriesChange([]byte(tc.old), []byte(tc.new))
			if err != nil {
				t.Fatal(err)
			}
			if safe != tc.safe {
				t.Errorf("safe = %v (%s), want %v", safe, why, tc.safe)
			}
			if !strings.Contains(why, tc.why) {
				t.Errorf("why %q, want it to contain %q", why, tc.why)
			}
		})
	}
}

func TestSafeRegistriesChangeBadTOML(t *testing.T) {
	for _, tc := range []struct{ old, new, which string }{
		{old: "[[registry]\n", which: "old"},
		{new: "unqualified-search-registries = 3\n", which: "new"},
	} {
		_, _, err := SafeRegistriesChange([]byte(tc.old), []byte(tc.new))
		if err == nil || !strings.Contains(err.Error(), "decoding the "+tc.which) {
			t.Errorf("error %v, want one about the %s file", err, tc.which)
		}
	}
}
