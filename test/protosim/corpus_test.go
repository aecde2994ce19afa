package protosim

import (
	"strings"
	"testing"
)

func TestParseCorpus(t *testing.T) {
	text := "# header\n\n19   # a Degraded node kept the cordon\n  23#no space\n7\n31 extended # found in extended mode\n37 fenced # found in fenced mode\n41 machines # found in machines mode\n"
	got, err := parseCorpus(text)
	if err != nil {
		t.Fatal(err)
	}
	want := Corpus{{19, "a Degraded node kept the cordon", false, false, false}, {23, "no space", false, false, false},
		{7, "", false, false, false}, {31, "found in extended mode", true, false, false}, {37, "found in fenced mode", true, true, false},
		{41, "found in machines mode", true, true, true}}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("entry %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
	if m := got.maxSeed(); m != 41 {
		t.Errorf("maxSeed %d, want 41", m)
	}
}

func TestParseCorpusRejects(t *testing.T) {
	for _, text := range []string{
		"12 13 # two seeds on a line",
		"12 classic # an unknown mode marker",
		"x # not a number",
		"0 # seed 0 means no seed to -protosim.seed",
		"-4",
		"5 # first\n5 # again",
	} {
		if _, err := parseCorpus(text); err == nil {
			t.Errorf("parseCorpus(%q) accepted it", text)
		}
	}
}

// TestCorpusFileParses keeps the checked-in corpus readable: TestSimulate
// fails at once on a bad line, but only after the build of a long run.
func TestCorpusFileParses(t *testing.T) {
	c, err := readCorpus(corpusFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range c {
		if e.Found == "" {
			t.Errorf("corpus seed %d does not say what it found", e.Seed)
		}
	}
}

func TestFreshStartAboveCorpus(t *testing.T) {
	for _, tc := range []struct{ corpusMax, random uint64 }{
		{0, 0}, {19373, 0}, {19373, 1<<64 - 1}, {19373, freshRangeSpan}, {1 << 62, 1<<64 - 1},
	} {
		start := freshStart(tc.corpusMax, tc.random)
		if start <= tc.corpusMax {
			t.Errorf("freshStart(%d, %d) = %d, not above the corpus", tc.corpusMax, tc.random, start)
		}
		// A full soak range must not wrap around to the corpus's seeds.
		if end := start + 100_000; end < start {
			t.Errorf("freshStart(%d, %d) = %d wraps within a soak's range", tc.corpusMax, tc.random, start)
		}
	}
}

func TestCorpusLineParsesBack(t *testing.T) {
	res := &Result{Seed: 17974, Violations: []string{"grant on control-plane node cp-1 while control-plane node cp-2 is disrupted"}}
	line := corpusLine(res)
	c, err := parseCorpus(line)
	if err != nil {
		t.Fatalf("corpusLine %q does not parse: %v", line, err)
	}
	if len(c) != 1 || c[0].Seed != 17974 || !strings.Contains(c[0].Found, "cp-2") {
		t.Errorf("corpusLine %q parsed as %+v", line, c)
	}
}
