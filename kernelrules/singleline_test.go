package kernelrules

import (
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

// TestSingleLineIsExact: for every rule, matching the newest line alone
// where singleLine allows it gives exactly what matching the joined buffer
// gives (the matches, their lines, their messages), over random sequences
// of kernel-like lines, newlines-free as the kernel's messages are.
func TestSingleLineIsExact(t *testing.T) {
	patterns := []string{`\bfoo`, `(?m)^foo`, `^foo`, `[^)]+x`, `a\sb`, `foo|bar`, `(?s)o.x`, `o.x`, `x$`, `(?i)FOO bar`,
		`\d+ x`, `[^,\s]+, y`, `(?:foo\n)?bar`}
	for _, r := range Defaults().Rules {
		patterns = append(patterns, r.Pattern)
	}
	words := []string{"foo", "bar", "x", "y", "a", "b", ")", ",", " ", "1", "22", "o", "FOO", "EXT4-fs (loop0):", "Remounting filesystem read-only",
		"Killed process 42 (sh) total-vm:1kB, anon-rss:2kB, file-rss:3kB", "task kubelet:7 blocked for more than 120 seconds.", "I/O error, dev sda, sector 8"}
	rng := rand.New(rand.NewPCG(1, 2))
	singles := 0
	for _, p := range patterns {
		file := &File{Source: "t", BufferSize: 4, Rules: []Rule{{Type: Temporary, Reason: "R", Pattern: p}}}
		fast, whole := newStream(file), newStream(file)
		if len(fast.rules) == 0 {
			continue // matches an empty line: refused
		}
		if fast.rules[0].singleLine {
			singles++
		}
		whole.rules[0].singleLine = false
		for range 400 {
			var line []string
			for range 1 + rng.IntN(4) {
				line = append(line, words[rng.IntN(len(words))])
			}
			msg := strings.Join(line, " ")
			got, want := fast.match(msg, nil), whole.match(msg, nil)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("pattern %q (single line %v) on %q: got %+v, want %+v", p, fast.rules[0].singleLine, msg, got, want)
			}
		}
	}
	if singles < len(Defaults().Rules) {
		t.Errorf("%d patterns matched on the newest line alone: want at least every default rule's (%d)", singles, len(Defaults().Rules))
	}
}
