package main

import (
	"runtime"
	"strings"
	"testing"
)

// TestSetMaxProcs: --gomaxprocs sets the runtime's processors, 0 keeps
// Go's default, the environment's GOMAXPROCS wins over the flag's default
// but not over a given flag, and a negative count is refused by name.
// Not parallel: GOMAXPROCS is the process's.
func TestSetMaxProcs(t *testing.T) {
	before := runtime.GOMAXPROCS(0)
	t.Cleanup(func() { runtime.GOMAXPROCS(before) })
	reset := func() { runtime.GOMAXPROCS(3) }

	for _, c := range []struct {
		name  string
		n     int
		given bool
		env   string
		want  int
	}{
		{"default", 1, false, "", 1},
		{"given", 2, true, "", 2},
		{"zero keeps Go's default", 0, true, "", 3},
		{"environment over the default", 1, false, "4", 3},
		{"given flag over the environment", 2, true, "4", 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			reset()
			t.Setenv("GOMAXPROCS", c.env)
			if err := setMaxProcs(c.n, c.given); err != nil {
				t.Fatal(err)
			}
			if got := runtime.GOMAXPROCS(0); got != c.want {
				t.Errorf("GOMAXPROCS %d, want %d", got, c.want)
			}
		})
	}
	reset()
	err := setMaxProcs(-1, true)
	if err == nil || !strings.Contains(err.Error(), "--gomaxprocs -1") {
		t.Errorf("negative count: %v, want an error naming --gomaxprocs -1", err)
	}
	if got := runtime.GOMAXPROCS(0); got != 3 {
		t.Errorf("a refused count changed GOMAXPROCS to %d", got)
	}
}
