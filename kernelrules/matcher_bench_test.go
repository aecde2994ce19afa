package kernelrules

import "testing"

// BenchmarkMatch: one kernel message matched against nodeward's default
// rules (a line that matches none, the common case), with the single-line
// rules on the newest line alone (as Match does) and, for the ratio, with
// every rule on the joined buffer (NPD's way).
func BenchmarkMatch(b *testing.B) {
	msg := "EXT4-fs (vda): mounted filesystem 5a4f0e2c-8b1d-4c1a-9f3e-2d6b7c8a9e10 r/w with ordered data mode. Quota mode: none."
	for _, mode := range []struct {
		name   string
		single bool
	}{{"newest-line", true}, {"joined-buffer", false}} {
		b.Run(mode.name, func(b *testing.B) {
			s := newStream(Defaults())
			for i := range s.rules {
				s.rules[i].singleLine = s.rules[i].singleLine && mode.single
			}
			for b.Loop() {
				s.match(msg, nil)
			}
		})
	}
}
