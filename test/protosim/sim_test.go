package protosim

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var (
	seeds    = flag.Int("protosim.seeds", 2000, "how many seeds TestSimulate plays (make soak: 100000)")
	firstArg = flag.Uint64("protosim.first", 1, "the first seed")
	oneSeed  = flag.Uint64("protosim.seed", 0, "replay this seed only, with its trace")
)

// TestSimulate plays seeded schedules of the real agent state machine and
// the real coordinator planning code under faults and checks the protocol's
// invariants after every event. A failure prints its seed and the one-line
// command that replays it.
func TestSimulate(t *testing.T) {
	if *oneSeed != 0 {
		res := Run(*oneSeed, DefaultScenario())
		for _, line := range res.Trace {
			t.Log(line)
		}
		report(t, res)
		return
	}
	start := time.Now()
	// Seeds are independent: play them on every core, report in order.
	results := make([]*Result, *seeds)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(*seeds); i = next.Add(1) - 1 {
				results[i] = Run(*firstArg+uint64(i), DefaultScenario())
			}
		})
	}
	wg.Wait()
	failed, events := 0, 0
	for _, res := range results {
		events += res.Events
		if res.Failed() {
			failed++
			if failed <= 3 {
				report(t, res)
			}
		}
	}
	t.Logf("%d seeds, %d events, %d failed, %s", *seeds, events, failed, time.Since(start).Round(time.Millisecond))
}

// TestCorpus replays every seed that once found a bug.
func TestCorpus(t *testing.T) {
	data, err := os.ReadFile("testdata/corpus.txt")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		field := strings.Fields(strings.SplitN(line, "#", 2)[0])
		if len(field) == 0 {
			continue
		}
		seed, err := strconv.ParseUint(field[0], 10, 64)
		if err != nil {
			t.Fatalf("corpus line %q: %v", line, err)
		}
		if res := Run(seed, DefaultScenario()); res.Failed() {
			report(t, res)
		}
	}
}

func report(t *testing.T, res *Result) {
	t.Helper()
	if !res.Failed() {
		return
	}
	msg := fmt.Sprintf("seed %d failed after %d events (faults %v)", res.Seed, res.Events, res.Faults)
	for _, v := range res.Violations {
		msg += "\n  violation: " + v
	}
	if res.Stuck != "" {
		msg += "\n  did not converge: " + res.Stuck
	}
	msg += fmt.Sprintf("\n  replay: go test ./test/protosim -run TestSimulate -protosim.seed %d -v", res.Seed)
	t.Error(msg)
}
