package v1alpha1

import (
	"strings"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestLeaderTermRoundTripsAndNamesTheBadField(t *testing.T) {
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "nodeward-system", Name: "nodeward-coordinator", UID: "u1"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("coord-a"), LeaseTransitions: ptr.To(int32(7))}}
	term := TermOf(lease)
	got, err := ParseLeaderTerm(term.String())
	if err != nil || got != term {
		t.Fatalf("round trip of %s: %+v, %v", term, got, err)
	}
	if ns, name := got.LeaseNamespaceName(); ns != "nodeward-system" || name != "nodeward-coordinator" {
		t.Fatalf("lease %s/%s", ns, name)
	}
	bad := map[string]string{
		`{"lease":"nodeward-coordinator","uid":"u","transitions":1,"holder":"h"}`: "lease",
		`{"lease":"ns/n","uid":"","transitions":1,"holder":"h"}`:                  "uid",
		`{"lease":"ns/n","uid":"u","transitions":-1,"holder":"h"}`:                "transitions",
		`{"lease":"ns/n","uid":"u","transitions":1,"holder":""}`:                  "holder",
		`{"lease":"ns/n","uid":"u","transitions":1,"holder":"h","extra":1}`:       "extra",
		`{"lease":"ns/n","uid":"u","transitions":1,"holder":"h"} {}`:              "trailing",
		`{"lease":"ns/n","uid":"u","transitions":1,"holder":"h"}}`:                "trailing",
		`7`: "want JSON",
	}
	for value, field := range bad {
		if _, err := ParseLeaderTerm(value); err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("ParseLeaderTerm(%s) = %v, want an error naming %q", value, err, field)
		}
	}
}

// FuzzParseLeaderTerm: whatever the annotation holds, parsing never panics,
// and a value it accepts is valid and encodes back to a value that parses to
// the same term.
func FuzzParseLeaderTerm(f *testing.F) {
	f.Add(`{"lease":"nodeward-system/nodeward-coordinator","uid":"u1","transitions":7,"holder":"coord-a"}`)
	f.Add(`{"lease":"a/b","uid":"x","transitions":0,"holder":"h/with/slashes"}`)
	f.Add(`{}`)
	f.Fuzz(func(t *testing.T, value string) {
		term, err := ParseLeaderTerm(value)
		if err != nil {
			return
		}
		if err := term.Validate(); err != nil {
			t.Fatalf("accepted %q but invalid: %v", value, err)
		}
		again, err := ParseLeaderTerm(term.String())
		if err != nil || again != term {
			t.Fatalf("re-encoding %+v: %+v, %v", term, again, err)
		}
	})
}
