package coordinator_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/nodeward/nodeward/coordinator"
	"github.com/nodeward/nodeward/test/cluster"
)

// leadership records who leads, and fails the test if two ever do at once.
type leadership struct {
	t       *testing.T
	mu      sync.Mutex
	current string
	history []string
	started map[string]time.Time
}

func newLeadership(t *testing.T) *leadership {
	return &leadership{t: t, started: map[string]time.Time{}}
}

// leaderOptions are timings short enough for tests, in client-go's
// proportions, for identity id on the Lease in namespace ns.
func leaderOptions(ns, id string) coordinator.LeaderConfig {
	return coordinator.LeaderConfig{Namespace: ns, Identity: id,
		LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 300 * time.Millisecond}
}

func (l *leadership) lead(id string) func(context.Context) {
	return func(ctx context.Context) {
		l.mu.Lock()
		if l.current != "" {
			l.t.Errorf("%s started leading while %s leads", id, l.current)
		}
		l.current = id
		l.history = append(l.history, id)
		l.started[id] = time.Now()
		l.mu.Unlock()
		<-ctx.Done()
		l.mu.Lock()
		l.current = ""
		l.mu.Unlock()
	}
}

func (l *leadership) leader() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.current
}

func TestLeaderElectionOneLeaderAtATimeAndHandOver(t *testing.T) {
	t.Parallel()
	cp, _ := setup(t)
	ns := cp.Namespace(t)
	rec := newLeadership(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stops := map[string]context.CancelFunc{}
	var wg sync.WaitGroup
	for i := range 3 {
		id := fmt.Sprintf("replica-%d", i)
		cctx, stop := context.WithCancel(ctx)
		stops[id] = stop
		opts := leaderOptions(ns, id)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := coordinator.RunLeading(cctx, cp.Kube(), opts, nil, rec.lead(id)); err != context.Canceled {
				t.Errorf("%s: RunLeading returned %v, want context.Canceled", id, err)
			}
		}()
	}
	// Each shutdown hands over to one of the others, at once thanks to the
	// release, until nobody is left.
	for round := range 3 {
		var first string
		cluster.WaitFor(t, 15*time.Second, "a leader", func(context.Context) (bool, error) {
			first = rec.leader()
			return first != "", nil
		})
		l, err := cp.Client().CoordinationV1().Leases(ns).Get(ctx, coordinator.LeaderLeaseName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := ptr.Deref(l.Spec.HolderIdentity, ""); got != first {
			t.Fatalf("round %d: %s leads but the Lease names %q", round, first, got)
		}
		if got := ptr.Deref(l.Spec.LeaseTransitions, -1); got != int32(round) {
			t.Errorf("round %d: leaseTransitions = %d", round, got)
		}
		stoppedAt := time.Now()
		stops[first]()
		delete(stops, first)
		if round == 2 {
			break
		}
		cluster.WaitFor(t, 15*time.Second, "a new leader", func(context.Context) (bool, error) {
			cur := rec.leader()
			return cur != "" && cur != first, nil
		})
		// A released Lease is taken well before a whole lease duration.
		next := rec.leader()
		if took := rec.started[next].Sub(stoppedAt); took >= leaderOptions(ns, next).LeaseDuration {
			t.Errorf("round %d: %s took over %v after the release, not at once", round, next, took)
		}
	}
	wg.Wait()
	if len(rec.history) != 3 {
		t.Errorf("leaders %v, want three distinct ones in turn", rec.history)
	}
}

// TestLeaderElectionWaitsOutAForeignLease: a Lease renewed by a replica
// that then died is taken only after its duration has passed on the
// contender's clock.
func TestLeaderElectionWaitsOutAForeignLease(t *testing.T) {
	t.Parallel()
	cp, _ := setup(t)
	ns := cp.Namespace(t)
	now := metav1.NewMicroTime(time.Now())
	if _, err := cp.Client().CoordinationV1().Leases(ns).Create(context.Background(), &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: coordinator.LeaderLeaseName},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("ghost"), LeaseDurationSeconds: ptr.To(int32(3)),
			AcquireTime: &now, RenewTime: &now},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	rec := newLeadership(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	opts := leaderOptions(ns, "heir")
	go func() { _ = coordinator.RunLeading(ctx, cp.Kube(), opts, nil, rec.lead("heir")) }()
	cluster.WaitFor(t, 15*time.Second, "the heir to lead", func(context.Context) (bool, error) {
		return rec.leader() == "heir", nil
	})
	if waited := rec.started["heir"].Sub(start); waited < 3*time.Second {
		t.Errorf("the ghost's 3 s Lease was taken after %v", waited)
	}
}

// TestLeaderElectionStepsDownWhenItCannotRenew: when someone else takes
// the Lease (here an intruder writing it directly), the leader's context
// ends within the renew deadline and RunLeading returns nil without
// touching the intruder's Lease.
func TestLeaderElectionStepsDownWhenItCannotRenew(t *testing.T) {
	t.Parallel()
	cp, _ := setup(t)
	ns := cp.Namespace(t)
	rec := newLeadership(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	opts := leaderOptions(ns, "leader")
	// A long lease keeps the intruder's claim valid for the whole test.
	opts.LeaseDuration = 30 * time.Second
	returned := make(chan error, 1)
	go func() { returned <- coordinator.RunLeading(ctx, cp.Kube(), opts, nil, rec.lead("leader")) }()
	cluster.WaitFor(t, 15*time.Second, "the leader to lead", func(context.Context) (bool, error) {
		return rec.leader() == "leader", nil
	})
	leases := cp.Client().CoordinationV1().Leases(ns)
	cluster.WaitFor(t, 10*time.Second, "the intruder's write", func(ctx context.Context) (bool, error) {
		l, err := leases.Get(ctx, coordinator.LeaderLeaseName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		now := metav1.NewMicroTime(time.Now())
		l.Spec.HolderIdentity, l.Spec.RenewTime, l.Spec.LeaseDurationSeconds = ptr.To("intruder"), &now, ptr.To(int32(30))
		_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
		return err == nil, nil // a conflict with a renewal: try again
	})
	taken := time.Now()
	select {
	case err := <-returned:
		if err != nil {
			t.Errorf("RunLeading returned %v after losing the Lease, want nil", err)
		}
	case <-time.After(opts.RenewDeadline + 5*time.Second):
		t.Fatal("the leader did not step down")
	}
	if rec.leader() != "" {
		t.Error("lead's context still open after RunLeading returned")
	}
	if d := time.Since(taken); d > opts.RenewDeadline+2*time.Second {
		t.Errorf("stepped down %v after the takeover; the renew deadline is %v", d, opts.RenewDeadline)
	}
	l, err := leases.Get(context.Background(), coordinator.LeaderLeaseName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := ptr.Deref(l.Spec.HolderIdentity, ""); got != "intruder" {
		t.Errorf("the Lease names %q after the leader stepped down, want the intruder's claim untouched", got)
	}
}

func TestLeaderElectionRefusesInconsistentTimings(t *testing.T) {
	t.Parallel()
	cp, _ := setup(t)
	bad := coordinator.LeaderConfig{Namespace: "x", Identity: "a", LeaseDuration: 2 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: time.Second}
	err := coordinator.RunLeading(context.Background(), cp.Kube(), bad, nil, func(context.Context) { t.Error("led") })
	if err == nil {
		t.Fatal("renew deadline above the lease duration accepted")
	}
}
