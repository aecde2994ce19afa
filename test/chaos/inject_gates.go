package chaos

import (
	"context"
	"fmt"
	"os/exec"
	"sync"
	"time"

	"k8s.io/utils/ptr"

	v1alpha1 "github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/test/prom"
)

// The gates fault: every pool's gate is a query on a real Prometheus of a
// gauge the run serves, one series per pool. GateFail turns a pool's
// series to failing for the fault's hold: grants wait meanwhile, and a
// node soaking (or a canary baking) then halts the pool. The undo turns
// the series back, waits until Prometheus answers with it, and, if the
// pool was halted, leaves the halt alone for haltReview (only the halt
// holds grants then) before resuming the pool with the real `nodeward
// resume`, as an operator would.

// gateMetric is the gauge each pool's gate queries.
const gateMetric = "chaos_gate_ok"

// gateTimeout bounds one gate evaluation: an evaluation begun before the
// series came back ends within it.
const gateTimeout = 2 * time.Second

// GateSignal is the health signal the pools' gates read.
type GateSignal struct {
	Target *prom.Target
	Prom   *prom.Prometheus
	// Resume runs `nodeward resume <pool>`.
	Resume func(ctx context.Context, pool string) error

	mu      sync.Mutex
	failing map[string]int // pool → GateFail faults holding it failing
}

// NewGateSignal serves every pool's series as passing.
func NewGateSignal(target *prom.Target, p *prom.Prometheus, pools []string, resume func(context.Context, string) error) *GateSignal {
	g := &GateSignal{Target: target, Prom: p, Resume: resume, failing: map[string]int{}}
	for _, name := range pools {
		target.Set(gateMetric, map[string]string{"pool": name}, 1)
	}
	return g
}

// Gates is the gate spec of pool: its series must be 1.
func (g *GateSignal) Gates(pool string) *v1alpha1.Gates {
	return &v1alpha1.Gates{Prometheus: g.Prom.URL, Timeout: gateTimeout.String(),
		Queries: []v1alpha1.GateQuery{{Name: "chaos-ok", Query: g.query(pool), Min: ptr.To("1")}}}
}

func (g *GateSignal) query(pool string) string {
	return fmt.Sprintf("%s{pool=%q}", gateMetric, pool)
}

// fail turns pool's series to failing; every fail is matched by one
// recover.
func (g *GateSignal) fail(pool string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.failing[pool]++
	g.Target.Set(gateMetric, map[string]string{"pool": pool}, 0)
}

// recover undoes one fail; it reports whether the series passes again
// (no other GateFail holds it failing).
func (g *GateSignal) recover(pool string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.failing[pool]--; g.failing[pool] > 0 {
		return false
	}
	delete(g.failing, pool)
	g.Target.Set(gateMetric, map[string]string{"pool": pool}, 1)
	return true
}

// NodewardResume is GateSignal.Resume for the nodeward binary at path.
func NodewardResume(nodeward, kubeconfig string) func(context.Context, string) error {
	return func(ctx context.Context, pool string) error {
		out, err := exec.CommandContext(ctx, nodeward, "resume", pool, "--kubeconfig", kubeconfig).CombinedOutput()
		if err != nil {
			return fmt.Errorf("nodeward resume %s: %w: %s", pool, err, out)
		}
		return nil
	}
}

// gateFail fails a pool's gate, preferring a worker pool with grants out
// (a node there may soak, and the halt is what the fault is after).
func (in *Injector) gateFail(ctx context.Context, r *Record, _ int) error {
	cands := in.poolsWithGrants()
	if len(cands) == 0 {
		cands = in.Pools
	}
	r.Victim = pick(append([]string(nil), cands...), r.Pick)
	in.Gate.fail(r.Victim)
	var once sync.Once
	in.later(ctx, r, r.Hold, func(ctx context.Context) error {
		passing := true
		once.Do(func() { passing = in.Gate.recover(r.Victim) })
		if !passing {
			in.setDetail(r, "another gate-fail holds the gate failing")
			return nil
		}
		return in.resumeAfterGate(ctx, r)
	})
	return nil
}

// haltReview is how long a halt stays after the gate passes again before
// the operator resumes the pool: the time in which only the halt stops
// grants, which a coordinator that lost it would spend granting.
const haltReview = 5 * time.Second

// resumeAfterGate waits until Prometheus serves r's pool series as
// passing, then, for as long as a gate evaluation begun before may still
// end (and the pass after it), resumes the pool haltReview after it is
// seen halted.
func (in *Injector) resumeAfterGate(ctx context.Context, r *Record) error {
	v, err := in.Gate.Prom.Value(ctx, in.Gate.query(r.Victim))
	if err != nil {
		return fmt.Errorf("read the gate of %s: %w", r.Victim, err)
	}
	if v != 1 {
		return fmt.Errorf("the gate of %s reads %v, not 1 yet", r.Victim, v)
	}
	var haltedAt time.Time
	resumed := 0
	for end := time.Now().Add(gateTimeout + 3*time.Second); ctx.Err() == nil; sleep(ctx, 500*time.Millisecond) {
		p, err := in.pool(ctx, r.Victim)
		if err != nil {
			return fmt.Errorf("read pool %s: %w", r.Victim, err)
		}
		halt := p.Annotations[v1alpha1.AnnotationHalted]
		switch {
		case halt == "" && time.Now().After(end):
			if resumed == 0 {
				in.setDetail(r, "not halted")
			}
			return nil
		case halt == "":
		case haltedAt.IsZero():
			haltedAt = time.Now()
		case time.Since(haltedAt) >= haltReview:
			if err := in.Gate.Resume(ctx, r.Victim); err != nil {
				return err
			}
			resumed++
			haltedAt = time.Time{}
			in.setDetail(r, fmt.Sprintf("halted (%s): resumed %s after the gate passed again", halt, haltReview))
		}
	}
	return ctx.Err()
}

// setDetail sets r's detail under the lock the run's log reads it with.
func (in *Injector) setDetail(r *Record, detail string) {
	in.mu.Lock()
	defer in.mu.Unlock()
	r.Detail = detail
}
