package kernelrules

import (
	"regexp"
	"strings"
	"sync"
)

// Match is one rule that matched the buffer after a message was added.
type Match struct {
	// Source is the matching rule's file's source ("kernel-monitor").
	Source string
	Rule   Rule
	// Lines are the buffered messages the match spans, oldest first; the
	// last is always the message just added.
	Lines []string
	// Message is what NPD would put in the event or condition: Lines
	// joined with "\n", then "; " and the rule's
	// patternGeneratedMessageSuffix if it has one.
	Message string
}

// Matcher matches kernel log messages against the rules of one or more
// files, each file with its own buffer of recent messages. It is safe for
// concurrent use: a mutex serialises Match, so messages enter the buffers
// in the order the calls take the lock.
type Matcher struct {
	mu      sync.Mutex
	streams []*stream
}

// stream is one file's rules and its buffer.
type stream struct {
	source string
	rules  []compiledRule
	buffer *lineBuffer
}

type compiledRule struct {
	rule    Rule
	pattern *regexp.Regexp
	// singleLine: every match lies within the newest line (singleline.go),
	// which is matched alone.
	singleLine bool
}

// NewMatcher builds a matcher for files, which should come from Parse or
// Defaults. A rule whose pattern does not compile (possible only in a File
// built by hand) is left out rather than panicking; Parse reports it.
func NewMatcher(files ...*File) *Matcher {
	m := &Matcher{}
	for _, file := range files {
		if file == nil {
			continue
		}
		m.streams = append(m.streams, newStream(file))
	}
	return m
}

func newStream(file *File) *stream {
	size := file.BufferSize
	if size <= 0 || size > MaxBufferSize {
		size = DefaultBufferSize
	}
	s := &stream{source: file.Source, buffer: newLineBuffer(size)}
	for _, rule := range file.Rules {
		pattern, err := compileAnchored(rule.Pattern)
		if err != nil {
			continue
		}
		s.rules = append(s.rules, compiledRule{rule: rule, pattern: pattern, singleLine: singleLine(rule.Pattern)})
	}
	return s
}

// Match adds message to every file's buffer and returns the rules that
// match, file by file in the order given to NewMatcher and rule by rule in
// file order. Surrounding whitespace is trimmed first, as NPD's kmsg
// watcher does.
func (m *Matcher) Match(message string) []Match {
	message = strings.TrimSpace(message)
	m.mu.Lock()
	defer m.mu.Unlock()
	var matches []Match
	for _, s := range m.streams {
		matches = s.match(message, matches)
	}
	return matches
}

func (s *stream) match(message string, matches []Match) []Match {
	s.buffer.push(message)
	for _, r := range s.rules {
		var lines []string
		if r.singleLine {
			if !r.pattern.MatchString(message) {
				continue
			}
			lines = []string{message}
		} else {
			loc := r.pattern.FindStringIndex(s.buffer.joined())
			if loc == nil {
				continue
			}
			lines = s.buffer.linesFrom(loc[0])
		}
		matches = append(matches, Match{
			Source:  s.source,
			Rule:    r.rule,
			Lines:   lines,
			Message: messageOf(lines, r.rule.PatternGeneratedMessageSuffix),
		})
	}
	return matches
}

func messageOf(lines []string, suffix string) string {
	message := strings.Join(lines, "\n")
	if suffix != "" {
		message += "; " + suffix
	}
	return message
}
