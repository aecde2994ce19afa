package chaos

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The halts: a pool whose update.nodeward.io/halted annotation names its
// config ("<config>:<message>", written when a gate fails while a node
// soaks or a canary bakes) grants nothing for that config until an
// operator resumes it (removes the annotation). A grant names its config
// too ("<config>-<unix>-<n>", docs/protocol.md), so the watcher needs no
// product code to tell which halt a grant ignored.
//
// Halts and grants are ordered by resourceVersion, not by when the two
// watches deliver them: the run has one etcd, whose revisions order every
// write across resources, and the halt must win over any grant written
// after it however late the pool watch delivers it. The check is made on
// the whole record (Violations), once both ends of a halt may be known.

// keyHalted is the pool annotation of a halt.
const keyHalted = "update.nodeward.io/halted"

// VHaltIgnored: a grant written in a pool, for the config the pool was
// halted for, after the halt and before the pool was resumed.
const VHaltIgnored = "grant-while-halted"

// haltSpan is one halt of a pool: written at resourceVersion from,
// removed (resumed, replaced, or the pool deleted) at to; to is 0 while
// it holds.
type haltSpan struct {
	pool, config, value string
	from, to            int64
	at                  time.Time
}

// grantSeen is a grant as first seen, with the resourceVersion of the
// write that added it.
type grantSeen struct {
	pool, node, grant string
	rv                int64
	at                time.Time
}

// haltLog is the watcher's record of halts and grants.
type haltLog struct {
	spans []haltSpan
	open  map[string]int // pool → index of its open span
	// poolRV is the last resourceVersion seen of each pool.
	poolRV map[string]int64
	grants []grantSeen
}

func parseRV(rv string) int64 {
	n, _ := strconv.ParseInt(rv, 10, 64)
	return n
}

// poolHalt records pool's halt annotation value (empty: none) as of
// resourceVersion rv. gap: learned from a relist, the change may have
// been made anywhere since the pool was last seen; a halt that ended
// then is taken to have ended as early as it can have, one that began as
// late, so that no grant is judged against a halt it may not have
// followed.
func (l *haltLog) poolHalt(pool, value string, rv int64, now time.Time, gap bool) {
	if l.open == nil {
		l.open, l.poolRV = map[string]int{}, map[string]int64{}
	}
	prev := l.poolRV[pool]
	l.poolRV[pool] = rv
	i, isOpen := l.open[pool]
	if isOpen && l.spans[i].value == value {
		return
	}
	if isOpen {
		l.spans[i].to = rv
		if gap {
			l.spans[i].to = prev
		}
		delete(l.open, pool)
	}
	if value == "" {
		return
	}
	config, _, _ := strings.Cut(value, ":")
	l.spans = append(l.spans, haltSpan{pool: pool, config: config, value: value, from: rv, at: now})
	l.open[pool] = len(l.spans) - 1
}

// poolGone ends pool's halt at rv; 0: the pool vanished in a watch gap,
// and its halt is taken to end where the pool was last seen.
func (l *haltLog) poolGone(pool string, rv int64) {
	if rv == 0 {
		rv = l.poolRV[pool]
	}
	if i, ok := l.open[pool]; ok {
		l.spans[i].to = rv
		delete(l.open, pool)
	}
}

// grant records a new grant of pool on node.
func (l *haltLog) grant(pool, node, grant string, rv int64, now time.Time) {
	l.grants = append(l.grants, grantSeen{pool: pool, node: node, grant: grant, rv: rv, at: now})
}

// grantConfig is the config a grant value names: all but its last two
// dash-separated fields (the unix time and the sequence number).
func grantConfig(grant string) string {
	for range 2 {
		i := strings.LastIndexByte(grant, '-')
		if i < 0 {
			return ""
		}
		grant = grant[:i]
	}
	return grant
}

// violations judges every grant against every halt of its pool.
func (l *haltLog) violations() []Violation {
	var out []Violation
	for _, g := range l.grants {
		config := grantConfig(g.grant)
		for _, s := range l.spans {
			if s.pool != g.pool || s.config != config || g.rv <= s.from || (s.to != 0 && g.rv >= s.to) {
				continue
			}
			until := "still halted"
			if s.to != 0 {
				until = fmt.Sprintf("resumed at resourceVersion %d", s.to)
			}
			out = append(out, Violation{At: g.at, Kind: VHaltIgnored, Pool: g.pool, Nodes: []string{g.node},
				Detail: fmt.Sprintf("grant %q written at resourceVersion %d; the pool was halted at resourceVersion %d (%s, seen %s): %q",
					g.grant, g.rv, s.from, until, s.at.Format("15:04:05.000"), s.value)})
		}
	}
	return out
}
