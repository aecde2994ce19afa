package conditions

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/moby/sys/mountinfo"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"

	"github.com/nodeward/nodeward/kernelrules"
	"github.com/nodeward/nodeward/kmsg"
)

// kernelLog owns the kernel-log reader the kernel probes share: it reads
// /dev/kmsg from the look-back on, matches each of the kernel's records
// against the rules, sends a Warning Event for each temporary problem and
// keeps the permanent ones by condition until their cause is gone.
type kernelLog struct {
	cfg      KernelConfig
	procRoot string
	rules    *kernelrules.Matcher
	defaults map[corev1.NodeConditionType]kernelrules.Condition
	events   func(reason, message string)
	log      *slog.Logger
	now      func() time.Time
	// sinceBoot is the kernel's clock now, to date a record (kmsg.SinceBoot).
	sinceBoot func() time.Duration
	metrics   kernelMetrics

	start sync.Once
	stop  context.CancelFunc
	done  chan struct{}

	mu       sync.Mutex
	reader   *kmsg.Reader
	openErr  error
	problems map[corev1.NodeConditionType][]kernelProblem
	wakes    map[corev1.NodeConditionType]chan<- struct{}
	// lastSeq is the sequence number of the last kernel record handled.
	lastSeq uint64
	// cursor keeps lastSeq across restarts; reported is the sequence
	// number up to which temporary problems were already reported (by this
	// agent or the one before it in this boot).
	cursor   kernelCursor
	reported uint64
}

// kernelProblem is one permanent problem the kernel logged.
type kernelProblem struct {
	reason, message string
	// device is the block device the record names ("loop0"), for the
	// re-check of its mounts; empty when it names none.
	device string
	at     time.Time
	// confirmed: a re-check has seen the cause (the mount read-only).
	confirmed bool
}

// recheckSettle is how long a problem whose cause a re-check has not seen
// yet is kept: a problem clears only once its cause was seen and is gone,
// or was never seen in this long.
const recheckSettle = 5 * time.Second

type kernelMetrics struct {
	records  prometheus.Counter
	problems *prometheus.CounterVec
}

func newKernelLog(cfg KernelConfig, procRoot string, env *Env) *kernelLog {
	files := cfg.ruleFiles()
	l := &kernelLog{cfg: cfg, procRoot: procRoot, rules: kernelrules.NewMatcher(files...),
		cursor:   newKernelCursor(cfg.CursorFile, procRoot),
		defaults: map[corev1.NodeConditionType]kernelrules.Condition{}, now: env.now(),
		log: slog.Default(), events: func(string, string) {}, done: make(chan struct{}), sinceBoot: kmsg.SinceBoot,
		problems: map[corev1.NodeConditionType][]kernelProblem{}, wakes: map[corev1.NodeConditionType]chan<- struct{}{}}
	if env != nil && env.Log != nil {
		l.log = env.Log
	}
	if env != nil && env.Events != nil {
		l.events = env.Events
	}
	for _, f := range files {
		for _, c := range f.Conditions {
			if t, ok := npdConditions()[c.Type]; ok {
				if _, seen := l.defaults[t]; !seen {
					l.defaults[t] = c
				}
			}
		}
	}
	reg := env.registerer()
	l.metrics = kernelMetrics{
		records: prometheus.NewCounter(prometheus.CounterOpts{Name: "nodeward_kernel_log_records_total",
			Help: "Records of the kernel's own read from /dev/kmsg."}),
		problems: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "nodeward_kernel_problems_total",
			Help: "Kernel problems matched by the rules, by reason and type (temporary or permanent)."}, []string{"reason", "type"}),
	}
	lost := prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "nodeward_kernel_log_records_lost_total",
		Help: "Records the kernel's ring buffer overwrote before nodeward read them."}, func() float64 {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.reader == nil {
			return 0
		}
		return float64(l.reader.Lost())
	})
	reg.MustRegister(l.metrics.records, l.metrics.problems, lost)
	return l
}

// ensureStarted opens the reader and reads the look-back, once, before the
// first sample answers; then reads on in the background until close.
func (l *kernelLog) ensureStarted() {
	l.start.Do(func() {
		seq, ok, err := l.cursor.load()
		if err != nil {
			l.log.Warn("kernel log: temporary problems of the look-back may be reported again", "err", err)
		}
		if ok {
			l.mu.Lock()
			l.reported = seq
			l.mu.Unlock()
		}
		// No look-back is no record from before the start, by sequence
		// number: the kernel's clock and CLOCK_MONOTONIC differ by
		// milliseconds, which only a look-back of minutes can ignore.
		opts := kmsg.Options{Lookback: l.cfg.Lookback.Duration, FromEnd: l.cfg.Lookback.Duration == 0}
		r, err := kmsg.Open(opts)
		if err == nil {
			err = r.ReadAvailable(l.handle)
		}
		l.mu.Lock()
		l.reader, l.openErr = r, err
		l.mu.Unlock()
		if err != nil {
			close(l.done)
			return
		}
		ctx, cancel := context.WithCancel(context.Background())
		l.stop = cancel
		go l.readOn(ctx, r)
	})
}

// readOn reads records as the kernel logs them until ctx ends. A record it
// cannot parse or a failed read is logged and reading goes on: the kernel
// log is never given up on.
func (l *kernelLog) readOn(ctx context.Context, r *kmsg.Reader) {
	defer close(l.done)
	defer r.Close()
	for {
		rec, err := r.Next(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			l.log.Warn("kernel log", "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
		default:
			l.handle(rec)
		}
	}
}

// handle matches one of the kernel's records against the rules.
func (l *kernelLog) handle(rec kmsg.Record) {
	l.metrics.records.Inc()
	l.mu.Lock()
	l.lastSeq = rec.Seq
	// A record the agent before this one handled in this boot: its
	// permanent problems are found again, its Events were sent.
	reported := rec.Seq <= l.reported
	l.mu.Unlock()
	for _, m := range l.rules.Match(rec.Message) {
		if !reported {
			l.metrics.problems.WithLabelValues(m.Rule.Reason, string(m.Rule.Type)).Inc()
		}
		if m.Rule.Type == kernelrules.Temporary {
			if !reported {
				l.events(m.Rule.Reason, m.Message)
				if err := l.cursor.save(rec.Seq); err != nil {
					l.log.Warn("kernel log", "err", err)
				}
			}
			continue
		}
		cond := npdConditions()[m.Rule.Condition]
		l.mu.Lock()
		// Dated when the kernel logged it: a record of the look-back,
		// minutes old, is past recheckSettle at once.
		age := max(0, l.sinceBoot()-rec.SinceBoot)
		l.problems[cond] = append(l.problems[cond], kernelProblem{reason: m.Rule.Reason, message: m.Message,
			device: kernelrules.DeviceOf(m.Message), at: l.now().Add(-age)})
		wake := l.wakes[cond]
		l.mu.Unlock()
		l.log.Warn("kernel problem", "condition", cond, "reason", m.Rule.Reason, "message", m.Message)
		if wake != nil {
			wakeUp(wake)
		}
	}
}

// handledThrough is the sequence number of the last kernel record handled.
func (l *kernelLog) handledThrough() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lastSeq
}

// sample re-checks the condition's problems and says whether any holds.
func (l *kernelLog) sample(ctx context.Context, cond corev1.NodeConditionType) Signal {
	l.ensureStarted()
	s := Signal{Condition: cond, At: l.now()}
	l.mu.Lock()
	openErr := l.openErr
	problems := l.problems[cond]
	l.mu.Unlock()
	if openErr != nil {
		return unknown(s, "KernelLogUnreadable", openErr)
	}
	held := problems[:0:0]
	hostMounts := sync.OnceValues(l.hostMounts) // read once however many problems re-check
	for _, p := range problems {
		holds, err := stillHolds(p, hostMounts)
		if err != nil {
			return unknown(s, "RecheckFailed", fmt.Errorf("re-check %s on %q: %w", p.reason, p.device, err))
		}
		switch {
		case holds:
			p.confirmed = true
			held = append(held, p)
		case !p.confirmed && s.At.Sub(p.at) < recheckSettle:
			// The kernel logs before it acts: ext4 prints "Remounting
			// filesystem read-only" before it marks the filesystem so. A
			// cause not seen yet is given recheckSettle to show.
			held = append(held, p)
		}
	}
	l.mu.Lock()
	// Keep what holds, and what was added while the re-check ran.
	l.problems[cond] = append(held, l.problems[cond][len(problems):]...)
	l.mu.Unlock()
	if len(held) == 0 {
		d := l.defaults[cond]
		s.Verdict, s.Reason, s.Message = Healthy, d.Reason, d.Message
		if s.Reason == "" {
			s.Reason, s.Message = "NoKernelProblem", "the kernel logged no problem of this kind"
		}
		return s
	}
	last := held[len(held)-1]
	s.Verdict, s.Reason, s.Message = Unhealthy, last.reason, last.message
	if len(held) > 1 {
		s.Message = fmt.Sprintf("%s (and %d more)", last.message, len(held)-1)
	}
	return s
}

// watch registers the probe's wake-up and starts the reader.
func (l *kernelLog) watch(ctx context.Context, cond corev1.NodeConditionType, wake chan<- struct{}) error {
	l.mu.Lock()
	l.wakes[cond] = wake
	l.mu.Unlock()
	l.ensureStarted()
	l.mu.Lock()
	err := l.openErr
	l.mu.Unlock()
	if err != nil {
		return err
	}
	<-ctx.Done()
	return nil
}

// close stops the reader; later samples still answer from what was read.
func (l *kernelLog) close() {
	l.start.Do(func() { close(l.done) }) // never started: nothing to stop
	if l.stop != nil {
		l.stop()
	}
	<-l.done
}

// stillHolds re-checks a permanent problem where the kernel lets us: a
// filesystem remounted read-only holds while a mount of its device is
// read-only; an XFS shutdown while its device is mounted (a shut-down XFS
// stays so until unmounted). Any other problem (a hung task), or one whose
// record names no device, holds until the node reboots. mounts gives the
// host's mounts.
func stillHolds(p kernelProblem, mounts func() ([]*mountinfo.Info, error)) (bool, error) {
	check := map[string]func(*mountinfo.Info) bool{
		"FilesystemIsReadOnly": readOnly,
		"XFSShutdown":          func(*mountinfo.Info) bool { return true },
	}[p.reason]
	if check == nil || p.device == "" {
		return true, nil
	}
	all, err := mounts()
	if err != nil {
		return false, err
	}
	for _, m := range all {
		if m.Source == "/dev/"+p.device && check(m) {
			return true, nil
		}
	}
	return false, nil
}

// hostMounts reads the mounts of the host's PID 1.
func (l *kernelLog) hostMounts() ([]*mountinfo.Info, error) {
	f, err := os.Open(filepath.Join(l.procRoot, "1", "mountinfo"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	mounts, err := mountinfo.GetMountsFromReader(f, nil)
	if err != nil {
		return nil, fmt.Errorf("read the host's mounts: %w", err)
	}
	return mounts, nil
}

// readOnly: the mount or its filesystem is read-only; ext4 marks an
// emergency read-only remount "emergency_ro" among the superblock's options.
func readOnly(m *mountinfo.Info) bool {
	for _, opts := range []string{m.Options, m.VFSOptions} {
		for _, o := range strings.Split(opts, ",") {
			if o == "ro" || o == "emergency_ro" {
				return true
			}
		}
	}
	return false
}
