package conditions

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// psiPoller decides a PSI trigger's threshold from the kernel's stall
// totals instead of the kernel's events: where the kernel refuses the
// trigger's window (an agent without CAP_SYS_RESOURCE may only use
// multiples of 2 s), it reads the `total=` of the trigger's kind in
// /proc/pressure/<resource> every interval and compares the stall
// accumulated within the last window with the trigger's stall. The same
// threshold as the kernel's trigger, decided within one interval of being
// reached instead of at the kernel's next 2 s window.
//
// A wake-up costs an idle process 0.1 to 0.3 ms of CPU on a VM, whatever
// it then does (docs/benchmarks.md): ten a second are 0.2 % of a core. So
// the totals are read every interval only while they grow: after one
// window without stall the reading rests, at restInterval (five
// intervals, at most half a window), and the first growth it sees brings
// the short interval back. Stall onset is seen within one rest interval,
// before a threshold of several per cent of the window can accumulate
// from it; the rest readings stay in the ring, so no stall is lost.
type psiPoller struct {
	path      string
	kind      string        // "some" or "full"
	threshold time.Duration // stall within one window that is pressure
	window    time.Duration
	interval  time.Duration
	now       func() time.Time
	// crossed, when set, is called each time the stall within the window
	// reaches the threshold after being below it, before the wake-up.
	crossed func()
	// restInterval is the period of the readings without stall.
	restInterval time.Duration
	// fast is whether the totals are read every interval now (false:
	// every restInterval).
	fast atomic.Bool

	// The ring of samples is the run loop's own (step is not concurrent).
	ring  []psiTotal
	head  int // index of the next write
	count int
	buf   []byte
	// wasOver is whether the previous step found the threshold reached.
	wasOver bool
	// grew is when a step last found the total grown (or reset).
	grew time.Time

	mu sync.Mutex
	// lastOver is when a step last found the stall within the window at
	// or above the threshold (zero: never since the last reset).
	lastOver time.Time
	// lastStall is the stall within the window at the last good step.
	lastStall time.Duration
	// lastErr is the last step's reading problem (nil: it read well).
	lastErr error
}

// psiTotal is one reading: when, and the kind's stall total.
type psiTotal struct {
	at    time.Time
	total time.Duration
}

// newPSIPoller polls path for trigger's kind and threshold; trigger must be
// valid. The ring holds a window's worth of samples and two more.
func newPSIPoller(path, trigger string, interval time.Duration, now func() time.Time) (*psiPoller, error) {
	t, err := parsePSITrigger(trigger)
	if err != nil {
		return nil, fmt.Errorf("poll PSI totals for trigger %q: %w", trigger, err)
	}
	kind, stall, window := t.kind, t.stall, t.window
	if interval <= 0 || interval >= window {
		return nil, fmt.Errorf("poll PSI totals every %v: must be positive and shorter than the trigger's window %v", interval, window)
	}
	n := int((window+interval-1)/interval) + 2
	rest := max(min(5*interval, window/2), interval)
	return &psiPoller{path: path, kind: kind, threshold: stall, window: window, interval: interval,
		restInterval: rest, now: now, ring: make([]psiTotal, n), buf: make([]byte, 512)}, nil
}

// run reads the totals until ctx ends, every interval while they grow and
// every restInterval after a window without growth, and wakes the caller
// when the stall within the window crosses the threshold. It returns at once
// with the reason when the file cannot be opened.
func (p *psiPoller) run(ctx context.Context, wake chan<- struct{}) error {
	// One descriptor, read from offset 0 each time: no open, no
	// allocation per reading.
	fd, err := unix.Open(p.path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s to poll PSI totals: %w", p.path, err)
	}
	defer unix.Close(fd)
	read := func() ([]byte, error) {
		n, err := unix.Pread(fd, p.buf, 0)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", p.path, err)
		}
		return p.buf[:n], nil
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	p.fast.Store(true)
	p.grew = p.now()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		}
		if p.step(read) {
			wakeUp(wake)
		}
		// Fast while the total grows (or grew within the last window) or
		// the threshold is reached; resting otherwise.
		fast := p.wasOver || p.now().Sub(p.grew) < p.window
		p.fast.Store(fast)
		if fast {
			timer.Reset(p.interval)
		} else {
			timer.Reset(p.restInterval)
		}
	}
}

// step takes one reading and tells whether the threshold was crossed
// upwards by it. A reading that cannot be parsed, or a total below the
// previous one (a counter reset), empties the ring: no verdict is drawn
// across it, and a pressure already found keeps only its grace.
func (p *psiPoller) step(read func() ([]byte, error)) (crossed bool) {
	at := p.now()
	data, err := read()
	var total time.Duration
	if err == nil {
		total, err = parsePSITotal(data, p.kind)
	}
	if err == nil && p.count > 0 && total < p.newest().total {
		err = fmt.Errorf("PSI %s total went back from %v to %v (counter reset)", p.kind, p.newest().total, total)
		// Start again from this reading.
		p.count, p.wasOver, p.grew = 0, false, at
		p.push(psiTotal{at, total})
		p.setResult(time.Time{}, 0, err)
		return false
	}
	if err != nil {
		p.count, p.wasOver, p.grew = 0, false, at
		p.setResult(time.Time{}, 0, fmt.Errorf("poll PSI totals: %w", err))
		return false
	}
	if p.count == 0 || total > p.newest().total {
		p.grew = at
	}
	p.push(psiTotal{at, total})
	stall := p.stallWithinWindow()
	over := stall >= p.threshold
	crossed = over && !p.wasOver
	p.wasOver = over
	var overAt time.Time
	if over {
		overAt = at
	}
	p.setResult(overAt, stall, nil)
	if crossed && p.crossed != nil {
		p.crossed()
	}
	return crossed
}

func (p *psiPoller) push(s psiTotal) {
	p.ring[p.head] = s
	p.head = (p.head + 1) % len(p.ring)
	p.count = min(p.count+1, len(p.ring))
}

func (p *psiPoller) newest() psiTotal {
	return p.ring[(p.head-1+len(p.ring))%len(p.ring)]
}

// stallWithinWindow is the stall of the last window: the newest total less
// the total one window before the newest reading, interpolated between
// the two readings around that time (the oldest reading when the ring
// does not reach that far back: the stall of a shorter span).
func (p *psiPoller) stallWithinWindow() time.Duration {
	newest := p.newest()
	from := newest.at.Add(-p.window)
	after := newest
	for i := 1; i < p.count; i++ {
		s := p.ring[(p.head-1-i+2*len(p.ring))%len(p.ring)]
		if s.at.Before(from) {
			// s is before the window and after is within it: the total at
			// from lies between theirs.
			span := after.at.Sub(s.at)
			if span <= 0 {
				break
			}
			grown := after.total - s.total
			at := s.total + time.Duration(float64(grown)*float64(from.Sub(s.at))/float64(span))
			return newest.total - at
		}
		after = s
	}
	return newest.total - after.total
}

func (p *psiPoller) setResult(overAt time.Time, stall time.Duration, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !overAt.IsZero() {
		p.lastOver = overAt
	}
	p.lastStall, p.lastErr = stall, err
}

// verdict tells whether the threshold was reached within the last window
// and a half before now (the trigger path's grace: a detection is
// pressure for as long as a kernel event would be), with a phrase for the
// sample's message; a reading problem is said and is never pressure by
// itself.
func (p *psiPoller) verdict(now time.Time) (pressure bool, say string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pressure = !p.lastOver.IsZero() && now.Sub(p.lastOver) <= p.window+p.window/2
	switch {
	case p.lastErr != nil:
		say = p.lastErr.Error()
	case pressure:
		say = fmt.Sprintf("PSI %s stall reached %v within %v (polled; last %v)", p.kind, p.threshold, p.window, p.lastStall)
	default:
		say = fmt.Sprintf("PSI %s stall %v within the last %v (polled)", p.kind, p.lastStall.Round(time.Millisecond), p.window)
	}
	return pressure, say
}

// parsePSITotal reads the `total=` (µs) of kind's line in a PSI file.
func parsePSITotal(data []byte, kind string) (time.Duration, error) {
	for line := range bytes.SplitSeq(data, []byte{'\n'}) {
		rest, ok := bytes.CutPrefix(line, []byte(kind+" "))
		if !ok {
			continue
		}
		i := bytes.Index(rest, []byte("total="))
		if i < 0 {
			break
		}
		digits := rest[i+len("total="):]
		if j := bytes.IndexByte(digits, ' '); j >= 0 {
			digits = digits[:j]
		}
		us, err := strconv.ParseUint(string(digits), 10, 63)
		if err != nil || us > uint64(1<<63-1)/uint64(time.Microsecond) {
			return 0, fmt.Errorf("PSI %s total %q is not a count of microseconds", kind, digits)
		}
		return time.Duration(us) * time.Microsecond, nil
	}
	return 0, fmt.Errorf("no PSI %s total in %q", kind, truncate(data, 80))
}

func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}
