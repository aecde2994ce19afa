package conditions

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// pollFixture is a fixture /proc/pressure/memory whose totals the test
// advances, read by a poller of the default trigger ("full 75000 1000000")
// every 100 ms of a clock the test moves.
type pollFixture struct {
	t          *testing.T
	root, path string
	clock      time.Time
	some, full time.Duration
	poller     *psiPoller
	probe      *MemoryProbe
}

func newPollFixture(t *testing.T) *pollFixture {
	t.Helper()
	f := &pollFixture{t: t, clock: time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC), some: 3 * time.Second, full: time.Second}
	f.root = writeProc(t, map[string]string{"meminfo": meminfo(8<<20, 4<<20), "pressure/memory": ""})
	f.path = filepath.Join(f.root, "pressure", "memory")
	f.write()
	now := func() time.Time { return f.clock }
	cfg := DefaultConfig().Memory
	p, err := newPSIPoller(f.path, cfg.Trigger, cfg.PSIPollInterval.Duration, now)
	if err != nil {
		t.Fatal(err)
	}
	f.poller = p
	f.probe = NewMemoryProbe(cfg, f.root, &Env{Now: now})
	f.probe.poller.Store(p)
	return f
}

// write puts the totals in the file in place, in one write of a fixed
// length: a poller reading at the same time sees the old or the new file.
func (f *pollFixture) write() {
	content := fmt.Sprintf("some avg10=0.00 avg60=0.00 avg300=0.00 total=%015d\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=%015d\n",
		f.some.Microseconds(), f.full.Microseconds())
	file, err := os.OpenFile(f.path, os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		f.t.Fatal(err)
	}
	defer file.Close()
	if err := file.Truncate(int64(len(content))); err != nil {
		f.t.Fatal(err)
	}
	if _, err := file.WriteAt([]byte(content), 0); err != nil {
		f.t.Fatal(err)
	}
}

func (f *pollFixture) writeRaw(content string) {
	if err := os.WriteFile(f.path, []byte(content), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

// tick moves the clock one interval, adds stall of full (and as much of
// some), and takes a reading; it returns whether the reading crossed the
// threshold.
func (f *pollFixture) tick(stall time.Duration) bool {
	f.clock = f.clock.Add(100 * time.Millisecond)
	f.full += stall
	f.some += stall
	f.write()
	return f.step()
}

func (f *pollFixture) step() bool {
	return f.poller.step(func() ([]byte, error) { return os.ReadFile(f.path) })
}

func (f *pollFixture) sample() Signal {
	return f.probe.Sample(context.Background())
}

func TestPSIPollerShareOverThresholdIsPressure(t *testing.T) {
	t.Parallel()
	f := newPollFixture(t)
	f.step()
	crossings := 0
	// 10 ms of full stall every 100 ms: 10 % of the time, over 7.5 %.
	for i := range 8 {
		if f.tick(10 * time.Millisecond) {
			crossings++
			if i != 7 {
				t.Fatalf("crossed at reading %d with %v stalled; want at the 8th (80 ms ≥ 75 ms)", i+1, 10*time.Millisecond*time.Duration(i+1))
			}
		}
	}
	for range 20 { // the stall goes on: no new crossing, still pressure
		if f.tick(10 * time.Millisecond) {
			crossings++
		}
	}
	if crossings != 1 {
		t.Fatalf("%d crossings, want 1", crossings)
	}
	s := f.sample()
	if s.Verdict != Unhealthy || !strings.Contains(s.Message, "PSI full stall reached 75ms within 1s (polled") {
		t.Fatalf("sample under a 10 %% stall: %v %q, want Unhealthy naming the polled stall", s.Verdict, s.Message)
	}
}

func TestPSIPollerShareUnderThresholdIsNone(t *testing.T) {
	t.Parallel()
	f := newPollFixture(t)
	f.step()
	// 7 ms of full stall every 100 ms: 70 ms in any 1 s, under 75 ms.
	for range 50 {
		if f.tick(7 * time.Millisecond) {
			t.Fatal("crossed the threshold at a 7 % stall")
		}
	}
	s := f.sample()
	if s.Verdict != Healthy || !strings.Contains(s.Message, "PSI full stall 70ms within the last 1s (polled)") {
		t.Fatalf("sample under a 7 %% stall: %v %q, want Healthy with the stall", s.Verdict, s.Message)
	}
}

func TestPSIPollerWindowSlides(t *testing.T) {
	t.Parallel()
	f := newPollFixture(t)
	f.step()
	// 40 ms now and 40 ms 1.1 s later: never 75 ms within one second.
	f.tick(40 * time.Millisecond)
	for range 10 {
		f.tick(0)
	}
	if f.tick(40 * time.Millisecond) {
		t.Fatal("crossed with two 40 ms stalls 1.1 s apart")
	}
	// 40 ms more 0.5 s later: 80 ms within the last second.
	for range 4 {
		f.tick(0)
	}
	if !f.tick(40 * time.Millisecond) {
		t.Fatal("no crossing with 80 ms of stall within 0.5 s")
	}
	if s := f.sample(); s.Verdict != Unhealthy {
		t.Fatalf("sample at the crossing: %v %q", s.Verdict, s.Message)
	}
	// The stall stops. The 80 ms stay within the window until the first
	// 40 ms leave it, 1 s after they came (0.5 s from now): the last
	// reading over the threshold is 0.4 s from now. The samples stay bad
	// for the trigger's grace, 1.5 windows after it.
	for range 4 {
		if f.tick(0); !f.poller.wasOver {
			t.Fatal("under the threshold while 80 ms are within the window")
		}
	}
	if f.tick(0); f.poller.wasOver {
		t.Fatal("over the threshold after the first 40 ms left the window")
	}
	for range 14 {
		f.tick(0)
	}
	if s := f.sample(); s.Verdict != Unhealthy {
		t.Fatalf("sample 1.5 s after the last reading over the threshold: %v %q, want Unhealthy", s.Verdict, s.Message)
	}
	f.tick(0)
	if s := f.sample(); s.Verdict != Healthy {
		t.Fatalf("sample 1.6 s after the last reading over the threshold: %v %q, want Healthy", s.Verdict, s.Message)
	}
	if f.tick(0) {
		t.Fatal("crossed without stall")
	}
}

func TestPSIPollerResetAndGarbageAreNeverPressure(t *testing.T) {
	t.Parallel()
	f := newPollFixture(t)
	f.step()
	f.tick(50 * time.Millisecond)
	// The counter goes back (a reset, or another file): no verdict across it.
	f.full = 0
	if f.tick(0) {
		t.Fatal("crossed at a counter reset")
	}
	s := f.sample()
	if s.Verdict != Healthy || !strings.Contains(s.Message, "counter reset") {
		t.Fatalf("sample after a reset: %v %q, want Healthy saying so", s.Verdict, s.Message)
	}
	// 50 ms before the reset and 40 after are not 90 within the window.
	if f.tick(40 * time.Millisecond) {
		t.Fatal("crossed adding stall from before the reset")
	}
	for _, garbage := range []string{"", "full avg10=0.00 total=lots\n", "some total=1\n", "full avg10=0.00 total=-5\n"} {
		f.clock = f.clock.Add(100 * time.Millisecond)
		f.writeRaw(garbage)
		if f.step() {
			t.Fatalf("crossed on %q", garbage)
		}
		s := f.sample()
		if s.Verdict == Unhealthy || !strings.Contains(s.Message, "poll PSI totals") {
			t.Fatalf("sample on %q: %v %q, want no pressure and the reading's problem", garbage, s.Verdict, s.Message)
		}
	}
	// Good readings again: a fresh start, which needs 75 ms of its own.
	f.full = 10 * time.Hour
	f.tick(0)
	for range 7 {
		if f.tick(10 * time.Millisecond) {
			t.Fatal("crossed before 75 ms of new stall")
		}
	}
	if !f.tick(10 * time.Millisecond) {
		t.Fatal("no crossing at 80 ms of stall after the garbage")
	}
}

// TestPSIPollerWakesAtTheCrossing runs the poller's own loop on the
// fixture: a crossing wakes the probe and counts as an event.
func TestPSIPollerWakesAtTheCrossing(t *testing.T) {
	t.Parallel()
	f := newPollFixture(t)
	f.poller.now = time.Now
	f.poller.crossed = f.probe.metrics.triggerEvents.Inc
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wake := make(chan struct{}, 1)
	done := make(chan error, 1)
	go func() { done <- f.poller.run(ctx, wake) }()
	time.Sleep(250 * time.Millisecond)
	f.full += 80 * time.Millisecond
	f.write()
	select {
	case <-wake:
	case err := <-done:
		t.Fatalf("poller ended: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("no wake-up after 80 ms of stall")
	}
	if got := testutil.ToFloat64(f.probe.metrics.triggerEvents); got != 1 {
		t.Errorf("nodeward_pressure_memory_trigger_events_total %v, want 1", got)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("poller after cancel: %v", err)
	}
}

func TestPSIPollIntervalValidation(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		yaml, want string
	}{
		{"memory: {psiPollInterval: 0}\n", "memory.psiPollInterval"},
		{"memory: {psiPollInterval: 1s}\n", "shorter than the trigger's window"},
		{"memory: {psiPollInterval: 1s, trigger: \"some 100000 2000000\"}\n", ""},
	} {
		_, err := ParseConfig([]byte(header + c.yaml))
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%q: %v, want %q", c.yaml, err, c.want)
		}
	}
	if _, err := newPSIPoller("/proc/pressure/memory", DefaultMemoryTrigger, time.Second, time.Now); err == nil {
		t.Error("a poller with the window as interval was accepted")
	}
}

// TestPSIPollerInterpolatesTheWindowsStart: readings late or irregular (a
// busy host) still measure one window: the total at its start lies
// between the readings around it.
func TestPSIPollerInterpolatesTheWindowsStart(t *testing.T) {
	t.Parallel()
	f := newPollFixture(t)
	f.step()
	at := func(d time.Duration, stall time.Duration) bool {
		f.clock = f.clock.Add(d)
		f.full += stall
		f.write()
		return f.step()
	}
	at(500*time.Millisecond, 50*time.Millisecond)
	// 1.2 s after the first reading: the window starts 0.2 s after it,
	// where 20 of the first 50 ms had accumulated (at an even rate); 30 of
	// them and 30 more are 60 ms within the window, under 75.
	if at(700*time.Millisecond, 30*time.Millisecond) {
		t.Fatal("crossed with 60 ms within the window")
	}
	if s := f.sample(); !strings.Contains(s.Message, "PSI full stall 60ms within the last 1s") {
		t.Fatalf("sample: %v %q, want 60 ms within the window", s.Verdict, s.Message)
	}
}

// TestPSIPollerRestsWithoutStall: without growth of the total for a window
// the reading slows to its rest interval, and the first growth it reads
// brings the short interval back, the readings of the rest kept.
func TestPSIPollerRestsWithoutStall(t *testing.T) {
	t.Parallel()
	f := newPollFixture(t)
	f.poller.now = time.Now
	if f.poller.restInterval != 500*time.Millisecond {
		t.Fatalf("rest interval %v, want 500ms (5 × 100 ms, at most half the 1 s window)", f.poller.restInterval)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wake := make(chan struct{}, 1)
	done := make(chan error, 1)
	go func() { done <- f.poller.run(ctx, wake) }()
	waitUntil(t, 5*time.Second, "the reading to rest", func() bool { return !f.poller.fast.Load() })
	f.full += 5 * time.Millisecond
	f.write()
	waitUntil(t, 5*time.Second, "the short interval back after growth", func() bool { return f.poller.fast.Load() })
	f.full += 75 * time.Millisecond
	f.write()
	select {
	case <-wake:
	case <-time.After(5 * time.Second):
		t.Fatal("no wake-up with 80 ms of stall since the rest")
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("poller after cancel: %v", err)
	}
}
