package kernelrules

import "strings"

// lineBuffer keeps the last size messages and presents them the way NPD's
// log buffer does: all size slots joined with "\n", oldest first, slots
// not yet filled contributing empty lines. Patterns are matched against
// that text, so a pattern may span up to size lines. Not safe for
// concurrent use; Matcher guards it.
type lineBuffer struct {
	slots  []string
	filled []bool
	next   int // slot the next message goes to; also the oldest slot
	// text is the joined buffer, made on demand: most rules match the
	// newest line alone.
	text  string
	stale bool
}

func newLineBuffer(size int) *lineBuffer {
	return &lineBuffer{slots: make([]string, size), filled: make([]bool, size)}
}

func (b *lineBuffer) push(message string) {
	b.slots[b.next] = message
	b.filled[b.next] = true
	b.next = (b.next + 1) % len(b.slots)
	b.stale = true
}

// joined is the buffer's text as of the last push.
func (b *lineBuffer) joined() string {
	if b.stale {
		b.text, b.stale = strings.Join(b.ordered(), "\n"), false
	}
	return b.text
}

// ordered returns the slots oldest first.
func (b *lineBuffer) ordered() []string {
	ordered := make([]string, 0, len(b.slots))
	ordered = append(ordered, b.slots[b.next:]...)
	return append(ordered, b.slots[:b.next]...)
}

// linesFrom returns the messages a match starting at byte offset start of
// the joined text spans, oldest first. The first is the first line that
// ends after start, so a match that begins on a line's newline starts at
// the next line, as NPD counts it; an empty match at the very end spans the
// last line. Unfilled slots are never returned: a match reaching back into
// them yields the filled lines only, again as NPD does.
func (b *lineBuffer) linesFrom(start int) []string {
	size := len(b.slots)
	end := -1 // offset of the newline after the current line
	first := size - 1
	for i := range size {
		end += len(b.slots[(b.next+i)%size]) + 1
		if end > start {
			first = i
			break
		}
	}
	var lines []string
	for i := first; i < size; i++ {
		slot := (b.next + i) % size
		if b.filled[slot] {
			lines = append(lines, b.slots[slot])
		}
	}
	return lines
}
