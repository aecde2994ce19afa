package protosim

import (
	"crypto/rand"
	"encoding/binary"
	"flag"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var (
	seeds    = flag.Int("protosim.seeds", 2000, "how many fresh seeds TestSimulate plays (make soak: 100000)")
	firstArg = flag.Uint64("protosim.first", 0, "the first fresh seed; 0 draws it at random above the corpus on every run (pin it to replay a run's range)")
	oneSeed  = flag.Uint64("protosim.seed", 0, "replay this seed only, with its trace")
	classic  = flag.Bool("protosim.classic", false, "play -protosim.seed or the -protosim.first range in classic mode (fresh seeds play the extended mode; a corpus seed replayed with -protosim.seed plays its own mode)")
	// machines is off by default while the two coordinator bugs it finds
	// in about 10% of its seeds are open (docs/reliability.md, "Machines").
	machines = flag.Bool("protosim.machines", false, "play -protosim.seed or fresh seeds in machines mode (fenced, plus Machines deleted, replaced and failed)")
)

// corpusFile holds every seed that ever failed; TestSimulate replays it
// before the fresh range.
const corpusFile = "testdata/corpus.txt"

// reportedFailures is how many failing seeds of a range are reported in
// full (violations and replay line); the others are listed by seed only.
const reportedFailures = 10

// TestSimulate plays seeded schedules of the real agent state machine and
// the real coordinator planning code under faults and checks the protocol's
// invariants after every event. It plays the corpus (every seed that ever
// failed) and then a fresh range of -protosim.seeds seeds whose start is
// drawn at random on every run, so that each run of `make test` searches
// schedules no run played before instead of replaying a fixed range. A
// failure prints its seed, the one-line command that replays it and the
// line that adds it to the corpus.
//
// -protosim.seed replays one seed with its trace; -protosim.first pins the
// fresh range (the corpus is then not played: the command replays exactly
// the range a run printed). The corpus plays each seed in its own mode
// (corpus.go); fresh seeds play the extended mode, or the classic one with
// -protosim.classic.
func TestSimulate(t *testing.T) {
	corpus, err := readCorpus(corpusFile)
	if err != nil {
		t.Fatal(err)
	}
	if *oneSeed != 0 {
		sc := freshScenario()
		if e, ok := corpus.entry(*oneSeed); ok && !*classic {
			sc = e.scenario()
		}
		res := Run(*oneSeed, sc)
		for _, line := range res.Trace {
			t.Log(line)
		}
		report(t, res)
		return
	}
	if *seeds < 0 {
		t.Fatalf("-protosim.seeds=%d: a count of seeds, 0 or more", *seeds)
	}
	first := *firstArg
	if first == 0 {
		t.Run("corpus", func(t *testing.T) {
			results := playSeeds(t, corpus.plays())
			summarize(t, results, "", time.Time{})
		})
		first = freshStart(corpus.maxSeed(), randomUint64(t))
	}
	scenarios := freshScenarios()
	for i, sc := range scenarios {
		// The seeds are shared out: each mode plays a range of its own.
		count := *seeds / len(scenarios)
		if i == len(scenarios)-1 {
			count = *seeds - count*i
		}
		from := first + uint64(i*(*seeds/len(scenarios)))
		t.Run("fresh/"+modeName(sc), func(t *testing.T) {
			replay := fmt.Sprintf("go test ./test/protosim -run TestSimulate -protosim.first=%d -protosim.seeds=%d%s", from, count, modeFlag(sc))
			t.Logf("fresh seeds %d..%d (%s mode); replay this range: %s", from, from+uint64(count)-1, modeName(sc), replay)
			start := time.Now()
			results := playSeeds(t, seedRange(from, count, sc))
			summarize(t, results, replay, start)
		})
	}
}

// freshScenario is what one seed plays (-protosim.seed) when the corpus
// does not say: the fenced mode, unless -protosim.classic or
// -protosim.machines.
func freshScenario() Scenario {
	switch {
	case *classic:
		return DefaultScenario()
	case *machines:
		return MachinesScenario()
	}
	return FencedScenario()
}

// freshScenarios are what fresh seeds play: half the fenced mode and half
// the machines mode, unless a flag picks one.
func freshScenarios() []Scenario {
	if *classic || *machines {
		return []Scenario{freshScenario()}
	}
	return []Scenario{FencedScenario(), MachinesScenario()}
}

func modeName(sc Scenario) string {
	if sc.Machines {
		return "machines"
	}
	if sc.Fenced {
		return "fenced"
	}
	if sc.Extended {
		return "extended"
	}
	return "classic"
}

// modeFlag is the flag that replays sc's mode ("" for the fenced mode).
func modeFlag(sc Scenario) string {
	if sc.Machines {
		return " -protosim.machines"
	}
	if sc.Extended {
		return ""
	}
	return " -protosim.classic"
}

// play is one seed to play and the scenario it plays.
type play struct {
	seed uint64
	sc   Scenario
}

// plays are the corpus's seeds in file order, each in its mode.
func (c Corpus) plays() []play {
	out := make([]play, len(c))
	for i, e := range c {
		out[i] = play{e.Seed, e.scenario()}
	}
	return out
}

// freshRangeSpan is how far above the corpus a fresh range may start: wide
// enough that two runs almost never overlap (2^48 starts, 2,000 seeds a
// run), small enough that first+seeds never wraps a uint64.
const freshRangeSpan = 1 << 48

// freshStart is where a fresh range starts: above every corpus seed (the
// corpus is replayed anyway), at random within freshRangeSpan.
func freshStart(corpusMax, random uint64) uint64 {
	return corpusMax + 1 + random%freshRangeSpan
}

// randomUint64 draws from crypto/rand, not math/rand: a test binary's
// math/rand sequence may be seeded the same on every run.
func randomUint64(t *testing.T) uint64 {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatalf("drawing the fresh range: %v", err)
	}
	return binary.LittleEndian.Uint64(b[:])
}

func seedRange(first uint64, n int, sc Scenario) []play {
	out := make([]play, n)
	for i := range out {
		out[i] = play{first + uint64(i), sc}
	}
	return out
}

// playSeeds plays list on every core (seeds are independent) and returns
// the results in list's order. A failing seed is logged as it is found, so
// that a long run (make soak) shows its findings before it ends.
func playSeeds(t *testing.T, list []play) []*Result {
	results := make([]*Result, len(list))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(len(list)); i = next.Add(1) - 1 {
				res := Run(list[i].seed, list[i].sc)
				if res.Failed() {
					t.Logf("failing seed %d: %s", res.Seed, res.FirstFinding())
				}
				results[i] = res
			}
		})
	}
	wg.Wait()
	return results
}

// summarize reports the failing results (the first reportedFailures in
// full) and, when replay is set (a fresh range), the lines that add them
// to the corpus.
func summarize(t *testing.T, results []*Result, replay string, start time.Time) {
	t.Helper()
	var failed []*Result
	events := 0
	for _, res := range results {
		events += res.Events
		if res.Failed() {
			failed = append(failed, res)
		}
	}
	for i, res := range failed {
		if i < reportedFailures {
			report(t, res)
		}
	}
	took := ""
	if !start.IsZero() {
		took = ", " + time.Since(start).Round(time.Millisecond).String()
	}
	t.Logf("%d seeds, %d events, %d failed%s", len(results), events, len(failed), took)
	if len(failed) == 0 || replay == "" {
		return
	}
	var add strings.Builder
	for _, res := range failed {
		fmt.Fprintf(&add, "\n%s", corpusLine(res))
	}
	t.Errorf("%d fresh seeds failed; replay the range: %s\nadd them to %s (then describe what each found):%s",
		len(failed), replay, "test/protosim/"+corpusFile, add.String())
}

// corpusLine is the line that adds res to the corpus: its seed and, as the
// comment to edit into what it found, its first violation.
func corpusLine(res *Result) string {
	mode := ""
	switch {
	case res.Machines:
		mode = " " + machinesMarker
	case res.Fenced:
		mode = " " + fencedMarker
	case res.Extended:
		mode = " " + extendedMarker
	}
	return fmt.Sprintf("%-6d%s # %s", res.Seed, mode, res.FirstFinding())
}

func report(t *testing.T, res *Result) {
	t.Helper()
	if !res.Failed() {
		return
	}
	msg := fmt.Sprintf("seed %d failed after %d events (faults %v)", res.Seed, res.Events, res.Faults)
	// An invariant broken once stays broken for many events: each
	// violation is listed once, with how many events saw it.
	seen := map[string]int{}
	var order []string
	for _, v := range res.Violations {
		if seen[v] == 0 {
			order = append(order, v)
		}
		seen[v]++
	}
	for _, v := range order {
		msg += "\n  violation: " + v
		if seen[v] > 1 {
			msg += fmt.Sprintf(" (%d events)", seen[v])
		}
	}
	if res.Stuck != "" {
		msg += "\n  did not converge: " + res.Stuck
	}
	flag := ""
	switch {
	case res.Machines:
		flag = " -protosim.machines"
	case !res.Extended:
		flag = " -protosim.classic"
	}
	msg += fmt.Sprintf("\n  replay: go test ./test/protosim -run TestSimulate -protosim.seed %d%s -v", res.Seed, flag)
	t.Error(msg)
}
