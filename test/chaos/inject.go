package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	v1alpha1 "github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/test/cluster"
)

// PoolLabel assigns worker nodes to a worker pool (its value is the
// pool's suffix, WorkerPools' keys).
const PoolLabel = "nodeward.chaos/pool"

// Injector applies a plan of faults to a running cluster.
type Injector struct {
	CP       *cluster.ControlPlane
	Client   kubernetes.Interface
	Dynamic  dynamic.Interface
	Watcher  *Watcher
	Machines map[string]*Machine
	Replicas []*Replica
	// Workers are the nodes that may move between the worker pools.
	Workers []string
	// WorkerPools maps a PoolLabel value to its UpdatePool's name.
	WorkerPools map[string]string
	// Pools are every pool's name (for target changes).
	Pools []string
	// NewTarget is the second OS image.
	NewTarget string
	// PinNamespace holds the PDB-blocking pods.
	PinNamespace string
	// Gate is the signal every pool's gate reads.
	Gate *GateSignal
	Log  func(format string, args ...any)

	mu      sync.Mutex
	records []*Record
	undos   sync.WaitGroup
	seq     int
}

// Record is what became of one planned fault.
type Record struct {
	Fault
	At       time.Time
	Victim   string
	Detail   string
	Skipped  bool
	InFlight bool      // the rollout was not finished when it was injected
	Undone   time.Time // when it was undone (restart healthy, uncordon, removal); zero if nothing to undo
}

func (r *Record) String() string {
	s := fmt.Sprintf("%s %-20s %-10s", r.At.Format("15:04:05.000"), r.Kind, r.Victim)
	if r.Skipped {
		s += " SKIPPED"
	}
	if r.Detail != "" {
		s += " " + r.Detail
	}
	if !r.Undone.IsZero() {
		s += fmt.Sprintf(" (undone after %s)", r.Undone.Sub(r.At).Round(time.Millisecond))
	}
	return s
}

// Run injects plan in order and returns once every fault is undone. An
// error is a harness failure (a control-plane component that does not come
// back), not a finding.
func (in *Injector) Run(ctx context.Context, plan []Fault) ([]*Record, error) {
	for _, f := range plan {
		sleep(ctx, f.Gap)
		if ctx.Err() != nil {
			break
		}
		r := &Record{Fault: f, At: time.Now(), InFlight: in.inFlight()}
		in.mu.Lock()
		in.records = append(in.records, r)
		in.seq++
		seq := in.seq
		in.mu.Unlock()
		err := in.apply(ctx, r, seq)
		in.mu.Lock() // a fault running in the background may be filling r
		line := r.String()
		in.mu.Unlock()
		in.Log("fault %d/%d: %s", seq, len(plan), line)
		if err != nil {
			in.undos.Wait()
			return in.Records(), fmt.Errorf("fault %s: %w", f.Kind, err)
		}
	}
	in.undos.Wait()
	return in.Records(), ctx.Err()
}

// Records returns the records so far.
func (in *Injector) Records() []*Record {
	in.mu.Lock()
	defer in.mu.Unlock()
	out := make([]*Record, len(in.records))
	copy(out, in.records)
	return out
}

func (in *Injector) inFlight() bool {
	for _, v := range in.Watcher.Nodes() {
		if !v.Updated() {
			return true
		}
	}
	return false
}

// later runs undo after hold in the background, retrying it until it
// succeeds or ctx ends, and stamps r.Undone.
func (in *Injector) later(ctx context.Context, r *Record, hold time.Duration, undo func(context.Context) error) {
	in.undos.Go(func() {
		sleep(ctx, hold)
		for ctx.Err() == nil {
			err := undo(ctx)
			if err == nil {
				break
			}
			in.Log("undo %s on %s: %v (retrying)", r.Kind, r.Victim, err)
			sleep(ctx, time.Second)
		}
		in.mu.Lock()
		r.Undone = time.Now()
		in.mu.Unlock()
	})
}

func pick(cands []string, p uint64) string {
	if len(cands) == 0 {
		return ""
	}
	sort.Strings(cands)
	return cands[p%uint64(len(cands))]
}

// candidates are the nodes the rollout has not reached yet (by the
// watcher's view) matching ok, or every node matching ok when none.
func (in *Injector) candidates(ok func(NodeView) bool, among []string) []string {
	allowed := map[string]bool{}
	for _, n := range among {
		allowed[n] = true
	}
	var pending, all []string
	for _, v := range in.Watcher.Nodes() {
		if !allowed[v.Name] || !ok(v) {
			continue
		}
		all = append(all, v.Name)
		if !v.Updated() {
			pending = append(pending, v.Name)
		}
	}
	if len(pending) > 0 {
		return pending
	}
	return all
}

func (in *Injector) allNodes() []string {
	names := make([]string, 0, len(in.Machines))
	for n := range in.Machines {
		names = append(names, n)
	}
	return names
}

// faultInjector injects one kind of fault: it names r's victim, fills its
// detail or marks it skipped, and schedules the undo when the fault has
// one. seq is the fault's number in the run, for the names it creates.
type faultInjector func(in *Injector, ctx context.Context, r *Record, seq int) error

// faultInjectors maps each Kind to its injector; a function rather than a
// package variable so that nothing can change the table under a run.
func faultInjectors() map[Kind]faultInjector {
	return map[Kind]faultInjector{
		KillAgent:           (*Injector).killAgent,
		KillLeader:          (*Injector).killLeader,
		PauseLeader:         (*Injector).pauseLeader,
		KillAPIServer:       (*Injector).killAPIServer,
		KillEtcd:            (*Injector).killEtcd,
		Relabel:             (*Injector).relabel,
		LowerMaxUnavailable: (*Injector).lowerMaxUnavailable,
		ChangeTarget:        (*Injector).changeTarget,
		AdminCordon:         (*Injector).injectAdminCordon,
		PreDrainHook:        (*Injector).preDrainHook,
		PDBBlock:            (*Injector).injectPDBBlock,
		DeleteNodeRebooting: (*Injector).deleteNodeRebooting,
		RecreatePool:        (*Injector).recreatePool,
		DrainPolicy:         (*Injector).switchDrainPolicy,
		GateFail:            (*Injector).gateFail,
	}
}

// apply injects r's fault; a kind without an injector is a no-op.
func (in *Injector) apply(ctx context.Context, r *Record, seq int) error {
	inject, ok := faultInjectors()[r.Kind]
	if !ok {
		return nil
	}
	return inject(in, ctx, r, seq)
}

func (in *Injector) killAgent(ctx context.Context, r *Record, _ int) error {
	r.Victim = pick(in.allNodes(), r.Pick)
	in.Machines[r.Victim].Kill(ctx, r.Hold)
	r.Undone = r.At.Add(r.Hold)
	return nil
}

// killLeader waits up to 20 seconds for a replica to lead (an election may
// be under way) and kills it.
func (in *Injector) killLeader(ctx context.Context, r *Record, _ int) error {
	return in.toLeader(ctx, r, func(rep *Replica) { rep.Kill(ctx, r.Hold) })
}

// pauseLeader waits up to 20 seconds for a replica to lead and stops it
// (SIGSTOP) for the fault's hold.
func (in *Injector) pauseLeader(ctx context.Context, r *Record, _ int) error {
	return in.toLeader(ctx, r, func(rep *Replica) { rep.Pause(ctx, r.Hold) })
}

// toLeader does fault to the replica that leads, waiting up to 20 seconds
// for one to.
func (in *Injector) toLeader(ctx context.Context, r *Record, fault func(*Replica)) error {
	deadline := time.Now().Add(20 * time.Second)
	for r.Victim == "" && time.Now().Before(deadline) && ctx.Err() == nil {
		for _, rep := range in.Replicas {
			if rep.Leading() {
				r.Victim = rep.Name
				fault(rep)
				r.Undone = time.Now().Add(r.Hold)
				break
			}
		}
		if r.Victim == "" {
			sleep(ctx, 250*time.Millisecond)
		}
	}
	if r.Victim == "" {
		r.Skipped, r.Detail = true, "no replica leads"
	}
	return nil
}

func (in *Injector) killAPIServer(ctx context.Context, r *Record, _ int) error {
	r.Victim = string(cluster.APIServer)
	if err := in.CP.Kill(cluster.APIServer); err != nil {
		return err
	}
	sleep(ctx, r.Hold)
	if err := in.restart(ctx, cluster.APIServer); err != nil {
		return err
	}
	r.Undone = time.Now()
	return nil
}

// killEtcd kills etcd, every other time (odd Pick) after the API server as
// a control-plane host crash would, and brings both back.
func (in *Injector) killEtcd(ctx context.Context, r *Record, _ int) error {
	r.Victim = string(cluster.Etcd)
	hostCrash := r.Pick%2 == 1
	if hostCrash {
		r.Detail = "with kube-apiserver (host crash: API server killed first, restarted after etcd)"
		if err := in.CP.Kill(cluster.APIServer); err != nil {
			return err
		}
	}
	if err := in.CP.Kill(cluster.Etcd); err != nil {
		return err
	}
	sleep(ctx, r.Hold)
	if err := in.restart(ctx, cluster.Etcd); err != nil {
		return err
	}
	var err error
	if hostCrash {
		err = in.restart(ctx, cluster.APIServer)
	} else {
		err = in.reviveAPIServerAfterEtcd(ctx, r)
	}
	if err != nil {
		return err
	}
	r.Undone = time.Now()
	return nil
}

// reviveAPIServerAfterEtcd gives the API server, which outlived etcd, a
// minute to be ready again and restarts it when it is not.
func (in *Injector) reviveAPIServerAfterEtcd(ctx context.Context, r *Record) error {
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	err := in.CP.WaitAPIServer(wctx)
	cancel()
	if err == nil {
		return nil
	}
	r.Detail = fmt.Sprintf("kube-apiserver not ready a minute after etcd returned (%v): restarted", err)
	return in.restart(ctx, cluster.APIServer)
}

// relabel moves a worker to the first other worker pool, by label value.
func (in *Injector) relabel(ctx context.Context, r *Record, _ int) error {
	r.Victim = pick(append([]string(nil), in.Workers...), r.Pick)
	return in.retry(ctx, func(ctx context.Context) error {
		n, err := in.Client.CoreV1().Nodes().Get(ctx, r.Victim, metav1.GetOptions{})
		if err != nil {
			return err
		}
		from := n.Labels[PoolLabel]
		to := ""
		for v := range in.WorkerPools {
			if v != from && (to == "" || v < to) {
				to = v
			}
		}
		r.Detail = fmt.Sprintf("%s → %s (state %s, grant %q)", in.WorkerPools[from], in.WorkerPools[to],
			n.Annotations[keyState], n.Annotations[keyGrant])
		return in.patchNode(ctx, r.Victim, map[string]any{"metadata": map[string]any{"labels": map[string]any{PoolLabel: to}}})
	})
}

func (in *Injector) lowerMaxUnavailable(ctx context.Context, r *Record, _ int) error {
	return in.retry(ctx, func(ctx context.Context) error {
		var cands []string
		current := map[string]int{}
		for _, name := range in.WorkerPools {
			p, err := in.pool(ctx, name)
			if err != nil {
				return err
			}
			if mu := p.Spec.MaxUnavailable; mu != nil && mu.Type == intstr.Int && mu.IntVal > 1 {
				cands = append(cands, name)
				current[name] = int(mu.IntVal)
			}
		}
		if len(cands) == 0 {
			r.Skipped, r.Detail = true, "every worker pool is at maxUnavailable 1"
			return nil
		}
		r.Victim = pick(cands, r.Pick)
		r.Detail = fmt.Sprintf("maxUnavailable %d → %d", current[r.Victim], current[r.Victim]-1)
		return in.patchPool(ctx, r.Victim, map[string]any{"spec": map[string]any{"maxUnavailable": current[r.Victim] - 1}})
	})
}

func (in *Injector) changeTarget(ctx context.Context, r *Record, _ int) error {
	return in.retry(ctx, func(ctx context.Context) error {
		var cands []string
		for _, name := range in.Pools {
			p, err := in.pool(ctx, name)
			if err != nil {
				return err
			}
			if p.Spec.OSImage != in.NewTarget {
				cands = append(cands, name)
			}
		}
		if len(cands) == 0 {
			r.Skipped, r.Detail = true, "every pool is on the new target"
			return nil
		}
		r.Victim = pick(cands, r.Pick)
		r.Detail = "osImage → " + in.NewTarget
		return in.patchPool(ctx, r.Victim, map[string]any{"spec": map[string]any{"osImage": in.NewTarget}})
	})
}

func (in *Injector) injectAdminCordon(ctx context.Context, r *Record, _ int) error {
	cands := in.candidates(func(v NodeView) bool { return !v.Unschedulable && !v.CordonRecord }, in.allNodes())
	r.Victim = pick(cands, r.Pick)
	if r.Victim == "" {
		r.Skipped, r.Detail = true, "no schedulable node"
		return nil
	}
	return in.adminCordon(ctx, r)
}

// preDrainHook adds a hook annotation named after seq, so that two hooks
// never share a key, and removes it after Hold.
func (in *Injector) preDrainHook(ctx context.Context, r *Record, seq int) error {
	r.Victim = pick(in.candidates(func(NodeView) bool { return true }, in.allNodes()), r.Pick)
	key := fmt.Sprintf("%schaos-%d", preDrainHookPrefix, seq)
	r.Detail = key
	if err := in.retry(ctx, func(ctx context.Context) error {
		return in.patchNode(ctx, r.Victim, map[string]any{"metadata": map[string]any{"annotations": map[string]any{key: "chaos-injector"}}})
	}); err != nil {
		return err
	}
	in.later(ctx, r, r.Hold, func(ctx context.Context) error {
		return in.patchNode(ctx, r.Victim, map[string]any{"metadata": map[string]any{"annotations": map[string]any{key: nil}}})
	})
	return nil
}

func (in *Injector) injectPDBBlock(ctx context.Context, r *Record, seq int) error {
	cands := in.candidates(func(v NodeView) bool { return !v.Unschedulable && !v.Disrupted }, in.Workers)
	r.Victim = pick(cands, r.Pick)
	if r.Victim == "" {
		r.Skipped, r.Detail = true, "no schedulable worker"
		return nil
	}
	return in.pdbBlock(ctx, r, seq)
}

func (in *Injector) restart(ctx context.Context, c cluster.Component) error {
	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	return in.CP.Restart(rctx, c)
}

// retry runs fn until it succeeds, for up to two minutes (the API server
// may be coming back from a fault).
func (in *Injector) retry(ctx context.Context, fn func(context.Context) error) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := fn(cctx)
		cancel()
		if err == nil || ctx.Err() != nil {
			return err
		}
		if time.Now().After(deadline) {
			return err
		}
		sleep(ctx, 500*time.Millisecond)
	}
}

func (in *Injector) patchNode(ctx context.Context, name string, patch map[string]any) error {
	data, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	_, err = in.Client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, data, metav1.PatchOptions{})
	return err
}

func (in *Injector) patchPool(ctx context.Context, name string, patch map[string]any) error {
	data, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	_, err = in.Dynamic.Resource(v1alpha1.UpdatePoolResource()).Patch(ctx, name, types.MergePatchType, data, metav1.PatchOptions{})
	return err
}

func (in *Injector) pool(ctx context.Context, name string) (*v1alpha1.UpdatePool, error) {
	u, err := in.Dynamic.Resource(v1alpha1.UpdatePoolResource()).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	var p v1alpha1.UpdatePool
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &p); err != nil {
		return nil, err
	}
	return &p, nil
}
