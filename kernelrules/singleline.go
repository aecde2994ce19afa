package kernelrules

import "regexp/syntax"

// A rule's pattern is matched against the whole buffer, joined, up to its
// end (NPD's semantics). Most patterns cannot match a newline: any match
// of theirs that ends at the end of the buffer lies within the newest
// line, so matching that line alone finds the same match, for a fraction
// of the work (the buffer need not even be joined): BenchmarkMatch
// measures both ways (docs/benchmarks.md, "The kernel log").

// singleLine reports whether every match of pattern (+ `\z`) against the
// joined buffer lies within its last line, so that matching the last line
// alone is the same: the pattern matches no newline and is not anchored at
// the start of the text (`^` without the m flag, `\A`), the one construct
// that tells the buffer's start from a line's. `\b` and `(?m)^` read a
// newline before the line as they read the start of text, so they do not
// matter.
//
// It looks at pattern + `\z` as compiled: only when that is a sequence
// ending at the end of the text must every match end there (NPD's `\z`
// binds only the last branch of a top-level alternation, whose other
// branches may match an older line).
func singleLine(pattern string) bool {
	re, err := syntax.Parse(pattern+`\z`, syntax.Perl)
	if err != nil {
		return false
	}
	re = re.Simplify()
	if re.Op != syntax.OpConcat || len(re.Sub) == 0 || re.Sub[len(re.Sub)-1].Op != syntax.OpEndText {
		return false
	}
	return !mayCrossLine(re)
}

func mayCrossLine(re *syntax.Regexp) bool {
	switch re.Op {
	case syntax.OpAnyChar, syntax.OpBeginText:
		return true
	case syntax.OpLiteral:
		for _, r := range re.Rune {
			if r == '\n' {
				return true
			}
		}
	case syntax.OpCharClass:
		for i := 0; i+1 < len(re.Rune); i += 2 {
			if re.Rune[i] <= '\n' && '\n' <= re.Rune[i+1] {
				return true
			}
		}
	}
	for _, sub := range re.Sub {
		if mayCrossLine(sub) {
			return true
		}
	}
	return false
}
