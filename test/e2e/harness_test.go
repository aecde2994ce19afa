package e2e

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/test/cluster"
	"github.com/nodeward/nodeward/test/oracle"
	"github.com/nodeward/nodeward/test/sim"
)

var env cluster.Env

func TestMain(m *testing.M) { os.Exit(env.Run(m)) }

const (
	fromOS = "os-1"
	toOS   = "os-2"
)

// pool is a group of kwok nodes, each with its own in-process agent on a
// sim.SimHost, and a watcher that checks the maxUnavailable invariant at every
// node event.
type pool struct {
	t      *testing.T
	cp     *cluster.ControlPlane
	prefix string
	names  []string
	nodes  map[string]*sim.SimNode

	mu             sync.Mutex
	maxUnavailable int // the invariant's bound; 0 disables the check
	ignore         map[string]bool
	maxSeen        int
	maxStaging     int                        // most nodes in step Staging at once
	seen           map[string][]v1alpha1.Step // distinct steps per node, in order
	// reported: reportOnFailure reported already.
	reported atomic.Bool
}

type poolOptions struct {
	count          int
	maxUnavailable int
	spec           cluster.NodeSpec
	tune           func(n *sim.SimNode)
}

func newPool(t *testing.T, prefix string, opts poolOptions) *pool {
	t.Helper()
	cp := env.ControlPlane(t)
	spec := opts.spec
	spec.Prefix, spec.Count = prefix, opts.count
	names := cp.CreateNodes(t, spec)
	p := &pool{t: t, cp: cp, prefix: prefix, names: names, nodes: map[string]*sim.SimNode{},
		maxUnavailable: opts.maxUnavailable,
		ignore:         map[string]bool{}, seen: map[string][]v1alpha1.Step{}}
	ctx, cancel := context.WithCancel(context.Background())
	factory := p.watch(ctx)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	var wg sync.WaitGroup
	for _, name := range names {
		n := &sim.SimNode{Name: name, Host: sim.NewSimHost(fromOS), StateDir: t.TempDir(), RestConfig: cp.Config(), Log: log}
		if opts.tune != nil {
			opts.tune(n)
		}
		p.nodes[name] = n
		wg.Go(func() { n.RunReboots(ctx) })
	}
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		for _, n := range p.nodes {
			n.Kill()
		}
		factory.Shutdown()
	})
	return p
}

// reportOnFailure logs, if the test fails, every node's update annotations
// and cordon and the tail of what log holds (the coordinator's log): a
// rollout that stalls under load says where each node stood.
//
// Call it after each coordinator starts: cleanups run last-registered
// first, so the report runs while that coordinator still runs (its
// goroutines show), and only once.
func (p *pool) reportOnFailure(log fmt.Stringer) {
	p.t.Cleanup(func() {
		if !p.t.Failed() || !p.reported.CompareAndSwap(false, true) {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, name := range p.names {
			n, err := p.node(ctx, name)
			if err != nil {
				p.t.Logf("%s: %v", name, err)
				continue
			}
			update := map[string]string{}
			for k, v := range n.Annotations {
				if strings.HasPrefix(k, "update.nodeward.io/") {
					update[k] = v
				}
			}
			host := "agent process (its log follows)" // a procPool's nodes have no SimNode
			if sn := p.nodes[name]; sn != nil {
				host = sn.Status()
			}
			p.t.Logf("%s: unschedulable %v, steps %v, annotations %v, pods %v; %s", name, n.Spec.Unschedulable, p.steps(name), update,
				p.podsOn(ctx, name), host)
		}
		if dyn, err := dynamic.NewForConfig(p.cp.Config()); err == nil {
			if pool, err := dyn.Resource(v1alpha1.UpdatePoolResource()).Get(ctx, p.prefix, metav1.GetOptions{}); err == nil {
				status, _, _ := unstructured.NestedFieldNoCopy(pool.Object, "status")
				p.t.Logf("pool %s: annotations %v, finalizers %v, status %v", p.prefix, pool.GetAnnotations(), pool.GetFinalizers(), status)
			} else {
				p.t.Logf("pool %s: %v", p.prefix, err)
			}
		}
		// The coordinator's goroutines: a reconcile stuck on a lock or a
		// call shows here.
		buf := make([]byte, 8<<20)
		for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
			if strings.Contains(g, "nodeward/coordinator.") {
				p.t.Logf("coordinator goroutine:\n%s", g)
			}
		}
		if log != nil {
			lines := strings.Split(log.String(), "\n")
			p.t.Logf("coordinator log, last %d lines:\n%s", min(len(lines), 200), strings.Join(lines[max(0, len(lines)-200):], "\n"))
		}
	})
}

// podsOn lists the pods bound to node, each with its phase and, when it is
// being deleted, since when: a drain that does not end says which pod.
func (p *pool) podsOn(ctx context.Context, node string) []string {
	pods, err := p.cp.Client().CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return []string{err.Error()}
	}
	var out []string
	for _, pod := range pods.Items {
		s := pod.Namespace + "/" + pod.Name + " " + string(pod.Status.Phase)
		if pod.DeletionTimestamp != nil {
			s += " deleting since " + pod.DeletionTimestamp.Format(time.TimeOnly)
		}
		out = append(out, s)
	}
	return out
}

func (p *pool) startAgents() {
	p.t.Helper()
	for _, n := range p.nodes {
		if err := n.Start(); err != nil {
			p.t.Fatal(err)
		}
	}
}

// grant runs the stand-in coordinator for this pool.
func (p *pool) grant(target string, maxUnavailable int, yieldAfter time.Duration) {
	ctx, cancel := context.WithCancel(context.Background())
	g := &sim.Granter{Client: p.cp.Client(), Selector: cluster.GroupLabel + "=" + p.prefix, Target: target,
		MaxUnavailable: maxUnavailable, YieldAfter: yieldAfter}
	done := make(chan struct{})
	go func() { defer close(done); g.Run(ctx, 200*time.Millisecond) }()
	p.t.Cleanup(func() { cancel(); <-done })
}

// watch records every node's steps and checks the invariant on each event.
func (p *pool) watch(ctx context.Context) informers.SharedInformerFactory {
	factory := informers.NewSharedInformerFactoryWithOptions(p.cp.Client(), 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = cluster.GroupLabel + "=" + p.prefix }))
	inf := factory.Core().V1().Nodes().Informer()
	check := func(any) {
		p.mu.Lock()
		defer p.mu.Unlock()
		staging := 0
		var counted []*corev1.Node
		for _, obj := range inf.GetStore().List() {
			n := obj.(*corev1.Node)
			step := v1alpha1.Step(n.Annotations[v1alpha1.AnnotationState])
			if step == v1alpha1.StepStaging {
				staging++
			}
			if s := p.seen[n.Name]; step != "" && (len(s) == 0 || s[len(s)-1] != step) {
				p.seen[n.Name] = append(s, step)
			}
			if !p.ignore[n.Name] {
				counted = append(counted, n)
			}
		}
		p.maxSeen = max(p.maxSeen, len(oracle.CordonOrStep.Disrupted(counted)))
		p.maxStaging = max(p.maxStaging, staging)
		if p.maxUnavailable > 0 {
			if over := oracle.CordonOrStep.PoolExcess(counted, p.maxUnavailable); over != nil {
				p.t.Errorf("invariant broken: %s", over)
			}
		}
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: check, UpdateFunc: func(_, o any) { check(o) }, DeleteFunc: check,
	})
	factory.Start(ctx.Done())
	return factory
}

func (p *pool) steps(node string) []v1alpha1.Step {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.seen[node])
}

func (p *pool) node(ctx context.Context, name string) (*corev1.Node, error) {
	return p.cp.Client().CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
}

// waitStep waits until node reports step for target.
func (p *pool) waitStep(name string, step v1alpha1.Step, timeout time.Duration) {
	p.t.Helper()
	cluster.WaitFor(p.t, timeout, name+" in step "+string(step), func(ctx context.Context) (bool, error) {
		n, err := p.node(ctx, name)
		if err != nil {
			return false, err
		}
		return n.Annotations[v1alpha1.AnnotationState] == string(step), nil
	})
}

// waitAllDone waits until every node of the pool reports Done.
func (p *pool) waitAllDone(timeout time.Duration) {
	p.t.Helper()
	for _, name := range p.names {
		p.waitStep(name, v1alpha1.StepDone, timeout)
	}
}

// waitReason waits until node reports a reason containing text: the agent
// has looked at the node and is holding for that reason.
func (p *pool) waitReason(name, text string) {
	p.t.Helper()
	cluster.WaitFor(p.t, time.Minute, name+" reporting "+text, func(ctx context.Context) (bool, error) {
		n, err := p.node(ctx, name)
		return err == nil && strings.Contains(n.Annotations[v1alpha1.AnnotationReason], text), err
	})
}

// assertUpdated checks the end state of an updated node: Done on the
// target, booted into it after exactly one reboot, schedulable, and no
// cordon record left.
func (p *pool) assertUpdated(name string) {
	p.t.Helper()
	n, err := p.node(context.Background(), name)
	if err != nil {
		p.t.Fatal(err)
	}
	host := p.nodes[name].Host
	booted, _ := host.Booted(context.Background())
	_, record := n.Annotations[v1alpha1.AnnotationCordonedBy]
	if n.Annotations[v1alpha1.AnnotationState] != string(v1alpha1.StepDone) || n.Annotations[v1alpha1.AnnotationStateTarget] != toOS ||
		booted != toOS || host.Reboots() != 1 || n.Spec.Unschedulable || record {
		p.t.Errorf("%s: state %s target %s booted %s reboots %d unschedulable %v cordon record %v; steps %v",
			name, n.Annotations[v1alpha1.AnnotationState], n.Annotations[v1alpha1.AnnotationStateTarget], booted, host.Reboots(),
			n.Spec.Unschedulable, record, p.steps(name))
	}
}

// workload runs replicas pods with a 1 s grace on the pool's nodes, spread
// one per node, and waits until they are available.
func (p *pool) workload(ns, name string, replicas int32) {
	p.t.Helper()
	p.workloadOn(ns, name, replicas, map[string]string{cluster.GroupLabel: p.prefix})
}

// workloadOn runs replicas pods with a 1 s grace on the nodes selector
// picks and waits until they are available.
func (p *pool) workloadOn(ns, name string, replicas int32, selector map[string]string) {
	p.t.Helper()
	labels := map[string]string{"app": name}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					NodeSelector:                  selector,
					TerminationGracePeriodSeconds: ptr.To[int64](1),
					Containers:                    []corev1.Container{{Name: "app", Image: "registry.invalid/app:1"}},
				},
			},
		},
	}
	if _, err := p.cp.Client().AppsV1().Deployments(ns).Create(context.Background(), d, metav1.CreateOptions{}); err != nil {
		p.t.Fatalf("create deployment: %v", err)
	}
	cluster.WaitFor(p.t, time.Minute, "deployment "+name+" available", func(ctx context.Context) (bool, error) {
		d, err := p.cp.Client().AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		return err == nil && d.Status.AvailableReplicas == replicas, err
	})
}
