package protosim

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
)

// Corpus is every seed that ever failed (testdata/corpus.txt), each with
// what it found. A line is a seed, then optionally the mode marker
// "extended" or "fenced", then a comment after '#':
//
//	19    # a classic seed: plays DefaultScenario
//	4711 extended # found in extended mode: plays ExtendedScenario
//	4712 fenced # found in fenced mode: plays FencedScenario
//	4713 machines # found in machines mode: plays MachinesScenario
//
// A line without a marker is a classic seed (every seed found before the
// extended mode existed): it replays exactly the schedule it failed on,
// since the classic mode draws nothing from the extended stream. Blank
// lines and lines of comment only are skipped.
type Corpus []CorpusEntry

// CorpusEntry is one seed of the corpus, its mode and its comment.
type CorpusEntry struct {
	Seed  uint64
	Found string
	// Extended: the seed was found in extended mode and plays it.
	Extended bool
	// Fenced: the seed was found in fenced mode (extended too) and plays
	// it.
	Fenced bool
	// Machines: the seed was found in machines mode (fenced too) and
	// plays it.
	Machines bool
}

// extendedMarker and fencedMarker mark a corpus line found in those modes.
const (
	extendedMarker = "extended"
	fencedMarker   = "fenced"
	machinesMarker = "machines"
)

// scenario is the scenario the entry plays.
func (e CorpusEntry) scenario() Scenario {
	if e.Machines {
		return MachinesScenario()
	}
	if e.Fenced {
		return FencedScenario()
	}
	if e.Extended {
		return ExtendedScenario()
	}
	return DefaultScenario()
}

// readCorpus reads the corpus file at path.
func readCorpus(path string) (Corpus, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return parseCorpus(string(data))
}

// parseCorpus parses the corpus file's text. A seed listed twice is an
// error: it would be played twice, and its two comments would disagree.
func parseCorpus(text string) (Corpus, error) {
	var out Corpus
	seen := map[uint64]int{}
	for i, line := range strings.Split(text, "\n") {
		body, comment, _ := strings.Cut(line, "#")
		field := strings.Fields(body)
		if len(field) == 0 {
			continue
		}
		extended := len(field) == 2 && field[1] == extendedMarker
		fenced := len(field) == 2 && field[1] == fencedMarker
		machines := len(field) == 2 && field[1] == machinesMarker
		if len(field) > 1 && !extended && !fenced && !machines {
			return nil, fmt.Errorf("corpus line %d %q: one seed a line, optionally %q, %q or %q, then '#' and what it found",
				i+1, line, extendedMarker, fencedMarker, machinesMarker)
		}
		seed, err := strconv.ParseUint(field[0], 10, 64)
		if err != nil || seed == 0 {
			return nil, fmt.Errorf("corpus line %d %q: not a seed (a positive integer)", i+1, line)
		}
		if prev, dup := seen[seed]; dup {
			return nil, fmt.Errorf("corpus line %d: seed %d already on line %d", i+1, seed, prev)
		}
		seen[seed] = i + 1
		out = append(out, CorpusEntry{Seed: seed, Found: strings.TrimSpace(comment), Extended: extended || fenced || machines,
			Fenced: fenced || machines, Machines: machines})
	}
	return out, nil
}

// seeds are the corpus's seeds in file order.
func (c Corpus) seeds() []uint64 {
	out := make([]uint64, len(c))
	for i, e := range c {
		out[i] = e.Seed
	}
	return out
}

// entry is seed's entry, ok false when the corpus does not list it.
func (c Corpus) entry(seed uint64) (CorpusEntry, bool) {
	for _, e := range c {
		if e.Seed == seed {
			return e, true
		}
	}
	return CorpusEntry{}, false
}

// maxSeed is the largest seed of the corpus, 0 when it is empty.
func (c Corpus) maxSeed() uint64 {
	if len(c) == 0 {
		return 0
	}
	return slices.Max(c.seeds())
}
