package rpmostree

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/nodeward/nodeward/osupdate"
)

// kinds maps each key seen in real deployments to its JSON kind.
func kinds(t *testing.T, data []byte, top, dep map[string]string) {
	t.Helper()
	var doc map[string]any
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	for k, v := range doc {
		top[k] = kindOf(v)
	}
	deps, _ := doc["deployments"].([]any)
	for _, d := range deps {
		for k, v := range d.(map[string]any) {
			dep[k] = kindOf(v)
		}
	}
}

func kindOf(v any) string {
	if v == nil {
		return "null"
	}
	return fmt.Sprintf("%T", v)
}

// TestStatusMatchesRealSchema checks the double's `status --json` against
// the three real outputs: every key it writes exists in them with the same
// JSON kind, and nodeward's parser reads it.
func TestStatusMatchesRealSchema(t *testing.T) {
	t.Parallel()
	files, _ := filepath.Glob("../../osupdate/testdata/status/*.json")
	if len(files) != 3 {
		t.Fatalf("found %d real fixtures, want 3", len(files))
	}
	realTop, realDep := map[string]string{}, map[string]string{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		kinds(t, data, realTop, realDep)
	}
	// Written by rpm-ostree only for a locked staged deployment; none of
	// the fixtures has one.
	realDep["finalization-locked"] = "bool"

	sum := "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	s := &State{OSName: "fedora-coreos",
		Deployments: []Deployment{{Checksum: sum, ImageRef: "ostree-unverified-registry:quay.io/x/y:1", Digest: "sha256:" + sum, Version: "1"}, {Checksum: sum, Serial: 1}},
		Staged:      &Deployment{Checksum: sum, ImageRef: "ostree-unverified-registry:quay.io/x/y:2", Digest: "sha256:" + sum},
		Locked:      true}
	for _, tx := range [][]string{nil, {"rebase", "client"}} {
		out, err := s.StatusJSON(tx)
		if err != nil {
			t.Fatal(err)
		}
		top, dep := map[string]string{}, map[string]string{}
		kinds(t, out, top, dep)
		for k, kind := range top {
			if rk, ok := realTop[k]; !ok || (rk != kind && rk != "null" && kind != "null") {
				t.Errorf("top-level key %q (%s) not in the real schema (%q)", k, kind, rk)
			}
		}
		for k, kind := range dep {
			if rk, ok := realDep[k]; !ok || rk != kind {
				t.Errorf("deployment key %q (%s) not in the real schema (%q)", k, kind, rk)
			}
		}
		st, err := osupdate.ParseStatus(out)
		if err != nil {
			t.Fatal(err)
		}
		if !st.FinalizationLocked || st.Staged() == nil || st.TransactionActive != (tx != nil) {
			t.Errorf("parsed double status: locked=%v staged=%v transaction=%v", st.FinalizationLocked, st.Staged(), st.TransactionActive)
		}
	}
}
