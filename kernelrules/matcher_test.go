package kernelrules

import (
	"fmt"
	"reflect"
	"sync"
	"testing"
)

// ruleFile builds a parsed one-rule file for matcher tests.
func ruleFile(t *testing.T, bufferSize int, pattern, suffix string) *File {
	t.Helper()
	data := fmt.Sprintf(`{"source": "test", "bufferSize": %d, "rules": [
		{"type": "temporary", "reason": "R", "pattern": %s, "patternGeneratedMessageSuffix": %s}]}`,
		bufferSize, jsonString(pattern), jsonString(suffix))
	file, err := Parse("test.json", []byte(data))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return file
}

// feed matches each message in turn and returns the lines of every match
// per message (nil where nothing matched).
func feed(m *Matcher, messages ...string) [][]string {
	var got [][]string
	for _, message := range messages {
		var lines []string
		for _, match := range m.Match(message) {
			lines = append(lines, match.Lines...)
		}
		got = append(got, lines)
	}
	return got
}

func TestMatchSemantics(t *testing.T) {
	for _, tc := range []struct {
		name       string
		bufferSize int
		pattern    string
		messages   []string
		want       [][]string
	}{
		{"matches to the end of the newest line only", 10, `foo`,
			[]string{"xx foo", "foo bar", "foo"},
			[][]string{{"xx foo"}, nil, {"foo"}}},
		{"an old line does not match again", 10, `boom`,
			[]string{"boom", "quiet", "quiet"},
			[][]string{{"boom"}, nil, nil}},
		{"a rule may span lines in the buffer", 3, `first\nsecond`,
			[]string{"first", "second", "third"},
			[][]string{nil, {"first", "second"}, nil}},
		{"a rule cannot span more lines than the buffer holds", 2, `a\nb\nc`,
			[]string{"a", "b", "c"},
			[][]string{nil, nil, nil}},
		{"a match reaching into unfilled slots spans the filled lines", 5, `(?s).*second`,
			[]string{"first", "second"},
			[][]string{nil, {"first", "second"}}},
		{"a match starting on a newline starts at the next line", 5, `\nsecond`,
			[]string{"first", "second"},
			[][]string{nil, {"second"}}},
		{"NPD anchors only the last branch of a top-level alternation", 10, `foo|bar`,
			[]string{"foo", "baz", "bar x"},
			[][]string{{"foo"}, {"foo", "baz"}, {"foo", "baz", "bar x"}}},
		{"surrounding whitespace is trimmed as NPD's kmsg watcher does", 1, `^done`,
			[]string{"  done \n"},
			[][]string{{"done"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := NewMatcher(ruleFile(t, tc.bufferSize, tc.pattern, ""))
			if got := feed(m, tc.messages...); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("matched lines per message\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

func TestMatchReportsSourceRuleAndNPDMessage(t *testing.T) {
	m := NewMatcher(ruleFile(t, 10, `first\nsecond`, "see runbook"))
	m.Match("first")
	matches := m.Match("second")
	if len(matches) != 1 {
		t.Fatalf("got %d matches, want 1", len(matches))
	}
	got := matches[0]
	if got.Source != "test" || got.Rule.Reason != "R" || got.Rule.Type != Temporary {
		t.Errorf("match = %+v", got)
	}
	if want := "first\nsecond; see runbook"; got.Message != want {
		t.Errorf("Message = %q, want %q", got.Message, want)
	}
}

func TestMatchKeepsOneBufferPerFile(t *testing.T) {
	twoLines := ruleFile(t, 10, `a\nb`, "")
	twoLines.Source = "two-lines"
	oneLine := ruleFile(t, 1, `a\nb`, "")
	oneLine.Source = "one-line"
	m := NewMatcher(twoLines, nil, oneLine)
	m.Match("a")
	matches := m.Match("b")
	if len(matches) != 1 || matches[0].Source != "two-lines" {
		t.Errorf("matches = %+v, want only two-lines (one-line's buffer holds 1 line)", matches)
	}
}

func TestNewMatcherSkipsUncompilableRuleInHandBuiltFile(t *testing.T) {
	file := &File{Source: "hand", Rules: []Rule{
		{Type: Temporary, Reason: "Bad", Pattern: `(`},
		{Type: Temporary, Reason: "Empty"},
		{Type: Temporary, Reason: "Good", Pattern: `ok`},
	}}
	matches := NewMatcher(file).Match("ok")
	if len(matches) != 1 || matches[0].Rule.Reason != "Good" {
		t.Errorf("matches = %+v, want only Good", matches)
	}
}

func TestMatchIsSafeForConcurrentUse(t *testing.T) {
	m := NewMatcher(ruleFile(t, 10, `hit \d+`, ""))
	var wg sync.WaitGroup
	var mu sync.Mutex
	hits := 0
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				n := len(m.Match(fmt.Sprintf("hit %d", g*1000+i)))
				mu.Lock()
				hits += n
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if hits != 800 {
		t.Errorf("hits = %d, want 800", hits)
	}
}
