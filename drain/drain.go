package drain

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeward/nodeward/api/kube"
	"github.com/nodeward/nodeward/api/v1alpha1"
)

// ErrBlocked marks a drain given up under the Yield policy: pods still
// block it. The Result lists them.
var ErrBlocked = errors.New("drain blocked")

// Config wires a Drainer to a cluster and a node.
type Config struct {
	Client  *kube.Client
	Node    string
	Options Options
	// Log receives the drain's records, which do not name the node
	// themselves: the logger should (the agent's does; nil is the default
	// logger with the node).
	Log *slog.Logger
	// Metrics, Recorder (Events on the Node) and Progress are optional.
	Metrics  *Metrics
	Recorder *kube.Recorder
	Progress func(Progress)
	// ReportEvery is how often blockers are published (default 2 s).
	ReportEvery time.Duration
}

// Drainer drains one node.
type Drainer struct {
	cfg     Config
	client  *kube.Client
	node    string
	opts    Options
	log     *slog.Logger
	metrics *Metrics
	// evictSlots bounds the eviction requests in flight.
	evictSlots chan struct{}
	// budgets is the drain's place among the drains a budget refused.
	budgets *budgetQueue
}

// New validates cfg.
func New(cfg Config) (*Drainer, error) {
	if cfg.Client == nil || cfg.Node == "" {
		return nil, errors.New("drain: Client and Node are required")
	}
	if err := cfg.Options.Validate(); err != nil {
		return nil, fmt.Errorf("drain options: %w", err)
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default().With("node", cfg.Node)
	}
	if cfg.ReportEvery <= 0 {
		cfg.ReportEvery = 2 * time.Second
	}
	opts := cfg.Options.withDefaults()
	return &Drainer{cfg: cfg, client: cfg.Client, node: cfg.Node, opts: opts, log: cfg.Log,
		metrics: cfg.Metrics, evictSlots: make(chan struct{}, opts.Concurrency),
		budgets: &budgetQueue{first: budgetTurnFirst, decay: budgetTurnDecay}}, nil
}

// Result is what a drain did.
type Result struct {
	Plan                     *Plan
	Evicted, Deleted, Forced int
	// Blockers are the pods that still blocked the drain when it gave up.
	Blockers []Blocker
	Duration time.Duration
}

// Plan lists the node's pods and says what a drain would do with them.
func (d *Drainer) Plan(ctx context.Context) (*Plan, error) {
	list, err := d.client.Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: "spec.nodeName=" + d.node,
	})
	if err != nil {
		return nil, fmt.Errorf("list pods of node %s: %w", d.node, err)
	}
	pods := make([]*corev1.Pod, len(list.Items))
	for i := range list.Items {
		pods[i] = &list.Items[i]
	}
	return plan(d.node, pods, d.opts, time.Now())
}

// Run is the whole drain as `nodeward drain` does it: wait for pre-drain
// hooks, cordon, evict. Under Yield, a blocked drain lifts nodeward's own
// cordon before returning ErrBlocked.
func (d *Drainer) Run(ctx context.Context) (*Result, error) {
	// Refuse before cordoning: a refused drain changes nothing.
	p, err := d.Plan(ctx)
	if err != nil {
		return nil, err
	}
	if err := p.Err(); err != nil {
		return &Result{Plan: p}, err
	}
	if d.opts.DryRun {
		return &Result{Plan: p}, nil
	}
	err = WaitForHooks(ctx, d.client, d.node, PreDrain, func(h []Hook) {
		d.progress(Progress{Kind: ProgressBlocked, Message: PreDrain.Describe(h)})
	})
	if err != nil {
		return nil, err
	}
	byUs, err := d.Cordon(ctx)
	if err != nil {
		return nil, err
	}
	res, err := d.Drain(ctx)
	// Under Fail the node stays cordoned, as kubectl leaves it.
	if errors.Is(err, ErrBlocked) && byUs && d.opts.OnTimeout != Fail {
		if _, uerr := d.Uncordon(context.WithoutCancel(ctx), false); uerr != nil {
			return res, errors.Join(err, uerr)
		}
	}
	return res, err
}

// maxRounds bounds how many times a drain goes back for pods bound to the
// node after its last look: a controller that keeps binding pods to a
// cordoned node makes the node undrainable, which is reported as blocked.
const maxRounds = 10

// Drain evicts the node's pods batch by batch. It does not cordon: the
// caller does, so that its own records (the agent's state) come first.
//
// Pods bound to the node while it drains (a scheduler acting on a stale
// cache after an API server restart, a controller that sets nodeName) are
// drained too: the drain ends only when its watch shows no pod on the node
// that it has not moved, waited on or skipped.
func (d *Drainer) Drain(ctx context.Context) (*Result, error) {
	start := time.Now()
	res := &Result{}
	outcome := "failed"
	defer func() {
		res.Duration = time.Since(start)
		d.metrics.observe(outcome, res.Duration.Seconds())
	}()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	tracker := newPodTracker(d.client, d.node)
	if err := tracker.start(ctx); err != nil {
		return res, fmt.Errorf("drain node %s: %w", d.node, err)
	}
	r := &run{d: d, tracker: tracker, blockers: newBlockerSet(d), res: res, pdbs: newPDBWaker(ctx, d.client)}
	if d.opts.Timeout > 0 {
		r.timedOut = afterChan(ctx, d.opts.Timeout)
	}
	handled := map[types.UID]bool{}
	for round := 1; ; round++ {
		p, err := plan(d.node, unhandled(tracker.pods(), handled), d.opts, time.Now())
		if err != nil {
			outcome = "refused"
			return res, fmt.Errorf("plan the drain of node %s: %w", d.node, err)
		}
		if round > 1 && p.settled() {
			break
		}
		if round > maxRounds {
			outcome = "blocked"
			return res, fmt.Errorf("drain node %s: %w: pods keep being bound to it while it drains (%d rounds), last %s",
				d.node, ErrBlocked, maxRounds, p.describePods())
		}
		p.markHandled(handled)
		outcome, err = r.round(ctx, p, round)
		if err != nil || d.opts.DryRun {
			return res, err
		}
	}
	outcome = "drained"
	d.budgets.finished()
	d.metrics.setBlocked(0)
	done := fmt.Sprintf("drained %d pods in %s", res.Plan.Pods(), time.Since(start).Round(time.Millisecond))
	d.log.Info("drain finished", "pods", res.Plan.Pods(), "evicted", res.Evicted, "forced", res.Forced)
	d.event(corev1.EventTypeNormal, "Drained", done)
	d.setDrained(ctx, corev1.ConditionTrue, "Drained", done)
	return res, nil
}

// round drains the pods of one plan: the first one, or the pods bound to
// the node since. It returns the drain's outcome when the round ends it
// (refused, blocked, failed; drained for a dry run), else "".
func (r *run) round(ctx context.Context, p *Plan, round int) (outcome string, err error) {
	d, res := r.d, r.res
	if round == 1 {
		res.Plan = p
	} else {
		res.Plan.merge(p)
		d.log.Warn("pods were bound to the node while it drained; draining them too",
			"round", round, "pods", p.describePods())
		d.event(corev1.EventTypeWarning, "PodsBoundDuringDrain", truncate(fmt.Sprintf(
			"round %d: %s were bound to the node after the drain listed its pods", round, p.describePods())))
	}
	if err := p.Err(); err != nil {
		d.event(corev1.EventTypeWarning, "DrainRefused", truncate(err.Error()))
		d.setDrained(ctx, corev1.ConditionFalse, "DrainRefused", truncate(err.Error()))
		return "refused", err
	}
	if d.opts.DryRun {
		return "drained", nil
	}
	if round == 1 {
		msg := fmt.Sprintf("draining %d pods in %d batches", p.Pods(), len(p.Batches))
		d.log.Info("drain started", "pods", p.Pods(), "batches", len(p.Batches), "finished", len(p.Finished))
		d.event(corev1.EventTypeNormal, "DrainStarted", msg)
		// A drain retried after a blocked attempt keeps its blocking report
		// until the blockers change, instead of flapping back to Draining.
		if !d.drainedIs(ctx, corev1.ConditionFalse, "DrainBlocked") {
			d.setDrained(ctx, corev1.ConditionFalse, "Draining", msg)
		}
		go r.blockers.loop(ctx, d.cfg.ReportEvery)
	}
	if err := d.deleteFinished(ctx, p.Finished, res); err != nil {
		return "failed", err
	}
	for _, b := range p.Batches {
		d.progress(Progress{Kind: ProgressBatch, Batch: b.Label(), Message: fmt.Sprintf("%d pods", len(b.Pods))})
		if err := r.batch(ctx, b); err != nil {
			r.blockers.publish(context.WithoutCancel(ctx))
			res.Blockers = r.blockers.list()
			switch {
			case errors.Is(err, ErrBlocked):
				return "blocked", fmt.Errorf("drain node %s: %w: %s", d.node, ErrBlocked, summarize(res.Blockers, maxMessage))
			case len(res.Blockers) > 0 && ctx.Err() != nil:
				return "blocked", fmt.Errorf("drain node %s stopped while blocked: %w: %s", d.node, err, summarize(res.Blockers, maxMessage))
			}
			return "failed", err
		}
	}
	return "", nil // this round's pods are gone; the next round looks again
}

// Undrained lists, from a fresh read of the API server, the pods on the
// node that a drain would still move or refuses to: what must be gone
// before the node reboots.
func (d *Drainer) Undrained(ctx context.Context) ([]PodRef, error) {
	p, err := d.Plan(ctx)
	if err != nil {
		return nil, err
	}
	var out []PodRef
	for _, b := range p.Batches {
		for _, pp := range b.Pods {
			out = append(out, pp.Pod)
		}
	}
	for _, r := range p.Refused {
		out = append(out, r.Pod)
	}
	return out, nil
}

// ConditionDrained is the condition a drain reports on its node.
const ConditionDrained = v1alpha1.ConditionDrained

func (d *Drainer) deleteFinished(ctx context.Context, pods []PodRef, res *Result) error {
	for _, ref := range pods {
		uid := ref.UID
		err := d.client.Pods(ref.Namespace).Delete(ctx, ref.Name, metav1.DeleteOptions{
			Preconditions: &metav1.Preconditions{UID: &uid},
		})
		if err != nil && !ignorableGone(err) {
			return fmt.Errorf("delete finished pod %s: %w", ref, err)
		}
		res.Deleted++
		d.metrics.eviction("deleted")
		d.progress(Progress{Kind: ProgressDeleted, Pod: ref, Message: "finished pod deleted"})
	}
	return nil
}

// afterChan is closed after delay unless ctx ends first.
func afterChan(ctx context.Context, delay time.Duration) <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		t := time.NewTimer(delay)
		defer t.Stop()
		select {
		case <-t.C:
			close(ch)
		case <-ctx.Done():
		}
	}()
	return ch
}

func truncate(s string) string {
	if len(s) > maxMessage {
		return s[:maxMessage-3] + "..."
	}
	return s
}

// batch drains one batch: every pod at once, evictions bounded by
// evictSlots; the first pod that gives up (Yield) or fails stops the rest.
func (r *run) batch(ctx context.Context, b Batch) error {
	g, gctx := errgroup.WithContext(ctx)
	for _, pp := range b.Pods {
		g.Go(func() error { return r.pod(gctx, pp) })
	}
	return g.Wait()
}
