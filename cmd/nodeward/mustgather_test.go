package main

import (
	"slices"
	"testing"
)

// TestGatherArgs: invoked as the image's /usr/bin/gather (oc adm
// must-gather's convention) the binary runs must-gather into
// /must-gather, with the --since oc passes in MUST_GATHER_SINCE; under
// its own name the arguments are left alone.
func TestGatherArgs(t *testing.T) {
	t.Setenv("MUST_GATHER_SINCE", "2h0m0s")
	got := gatherArgs("/usr/bin/gather", []string{"--namespace=x"})
	want := []string{"must-gather", "--dest-dir=/must-gather", "--since=2h0m0s", "--namespace=x"}
	if !slices.Equal(got, want) {
		t.Errorf("as gather: %q, want %q", got, want)
	}
	if got := gatherArgs("/nodeward", []string{"status"}); !slices.Equal(got, []string{"status"}) {
		t.Errorf("as nodeward: %q", got)
	}
	t.Setenv("MUST_GATHER_SINCE", "")
	if got := gatherArgs("gather", nil); !slices.Equal(got, want[:2]) {
		t.Errorf("as gather without MUST_GATHER_SINCE: %q", got)
	}
}
