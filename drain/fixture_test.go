package drain_test

import (
	"context"
	"fmt"
	"maps"
	"os"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/nodeward/nodeward/drain"
	"github.com/nodeward/nodeward/test/cluster"
)

var env cluster.Env

func TestMain(m *testing.M) { os.Exit(env.Run(m)) }

// fixture is one test's cluster corner: a node to drain, free nodes its
// pods can move to, and a namespace. Workloads select the group's nodes,
// so parallel tests never share pods.
type fixture struct {
	t      *testing.T
	cp     *cluster.ControlPlane
	client kubernetes.Interface
	group  string
	node   string
	free   []string
	ns     string
}

// newFixture creates the nodes with the free ones cordoned, so that the
// workloads land on the node to drain; release lets pods move.
func newFixture(t *testing.T, group string, free int) *fixture {
	t.Parallel()
	cp := env.ControlPlane(t)
	nodes := cp.CreateNodes(t, cluster.NodeSpec{Prefix: group, Count: 1 + free})
	f := &fixture{t: t, cp: cp, client: cp.Client(), group: group, node: nodes[0], free: nodes[1:], ns: cp.Namespace(t)}
	for _, n := range f.free {
		f.setUnschedulable(n, true)
	}
	return f
}

func (f *fixture) ctx() context.Context { return f.t.Context() }

func (f *fixture) setUnschedulable(node string, on bool) {
	f.t.Helper()
	patch := fmt.Sprintf(`{"spec":{"unschedulable":%t}}`, on)
	if _, err := f.client.CoreV1().Nodes().Patch(f.ctx(), node, "application/merge-patch+json", []byte(patch), metav1.PatchOptions{}); err != nil {
		f.t.Fatalf("set unschedulable=%t on %s: %v", on, node, err)
	}
}

// release uncordons the free nodes.
func (f *fixture) release() {
	for _, n := range f.free {
		f.setUnschedulable(n, false)
	}
}

func (f *fixture) template(app string) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": app}},
		Spec: corev1.PodSpec{
			NodeSelector: map[string]string{cluster.GroupLabel: f.group},
			// kwok removes a terminating pod within its grace period.
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			Containers:                    []corev1.Container{{Name: "c", Image: "registry.invalid/app:1"}},
		},
	}
}

func (f *fixture) deployment(name string, replicas int32, mod func(*corev1.PodTemplateSpec)) {
	f.t.Helper()
	tmpl := f.template(name)
	if mod != nil {
		mod(&tmpl)
	}
	_, err := f.client.AppsV1().Deployments(f.ns).Create(f.ctx(), &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: tmpl,
		},
	}, metav1.CreateOptions{})
	if err != nil {
		f.t.Fatalf("create deployment %s: %v", name, err)
	}
}

func (f *fixture) statefulSet(name string, replicas int32) {
	f.t.Helper()
	_, err := f.client.AppsV1().StatefulSets(f.ns).Create(f.ctx(), &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.StatefulSetSpec{
			Replicas:            &replicas,
			PodManagementPolicy: appsv1.ParallelPodManagement,
			Selector:            &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template:            f.template(name),
		},
	}, metav1.CreateOptions{})
	if err != nil {
		f.t.Fatalf("create statefulset %s: %v", name, err)
	}
}

func (f *fixture) daemonSet(name string) {
	f.t.Helper()
	_, err := f.client.AppsV1().DaemonSets(f.ns).Create(f.ctx(), &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: f.template(name),
		},
	}, metav1.CreateOptions{})
	if err != nil {
		f.t.Fatalf("create daemonset %s: %v", name, err)
	}
}

// pod creates a pod bound to the node to drain, without a controller.
func (f *fixture) pod(name string, mod func(*corev1.Pod)) {
	f.t.Helper()
	tmpl := f.template(name)
	p := &corev1.Pod{ObjectMeta: tmpl.ObjectMeta, Spec: tmpl.Spec}
	p.Name = name
	p.Spec.NodeName = f.node
	if mod != nil {
		mod(p)
	}
	if _, err := f.client.CoreV1().Pods(f.ns).Create(f.ctx(), p, metav1.CreateOptions{}); err != nil {
		f.t.Fatalf("create pod %s: %v", name, err)
	}
}

func (f *fixture) pdb(name, app string, maxUnavailable int) {
	f.t.Helper()
	_, err := f.client.PolicyV1().PodDisruptionBudgets(f.ns).Create(f.ctx(), &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MaxUnavailable: ptr.To(intstr.FromInt32(int32(maxUnavailable))),
			Selector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		f.t.Fatalf("create PDB %s: %v", name, err)
	}
}

// waitPDB waits until the disruption controller has computed the PDB.
func (f *fixture) waitPDB(name string, allowed int32) {
	cluster.WaitFor(f.t, 60*time.Second, "PDB "+name+" computed", func(ctx context.Context) (bool, error) {
		p, err := f.client.PolicyV1().PodDisruptionBudgets(f.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return p.Status.ObservedGeneration == p.Generation && p.Status.ExpectedPods > 0 &&
			p.Status.DisruptionsAllowed == allowed, nil
	})
}

// podsOn lists the running, not terminating pods of the namespace on node.
func (f *fixture) podsOn(ctx context.Context, node string) ([]corev1.Pod, error) {
	list, err := f.client.CoreV1().Pods(f.ns).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return nil, err
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
			out = append(out, p)
		}
	}
	return out, nil
}

// waitRunning waits until n pods of the namespace run on node.
func (f *fixture) waitRunning(node string, n int) {
	f.t.Helper()
	cluster.WaitFor(f.t, 90*time.Second, fmt.Sprintf("%d pods running on %s", n, node), func(ctx context.Context) (bool, error) {
		pods, err := f.podsOn(ctx, node)
		return len(pods) >= n, err
	})
}

func (f *fixture) drainer(opts drain.Options, progress func(drain.Progress)) *drain.Drainer {
	f.t.Helper()
	d, err := drain.New(drain.Config{Client: f.cp.Kube(), Node: f.node, Options: opts, Progress: progress,
		ReportEvery: 200 * time.Millisecond})
	if err != nil {
		f.t.Fatal(err)
	}
	return d
}

func (f *fixture) getNode() *corev1.Node {
	f.t.Helper()
	n, err := f.client.CoreV1().Nodes().Get(f.ctx(), f.node, metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	return n
}

func condition(n *corev1.Node, t corev1.NodeConditionType) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == t {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

// podLog records, from a list and then a watch of the namespace, when each
// pod was first seen terminating (evicted), deleted (gone) or Succeeded,
// and the fewest healthy pods (Ready, not terminating) each app had.
type podLog struct {
	mu          sync.Mutex
	evicted     map[string]time.Time
	gone        map[string]time.Time
	completedAt map[string]time.Time
	healthy     map[string]map[string]bool // app -> pod names
	minHealthy  map[string]int
	watching    bool // past the initial list
	stop        context.CancelFunc
	stopped     chan struct{}
}

func (f *fixture) recordPods() *podLog {
	f.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	l := &podLog{evicted: map[string]time.Time{}, gone: map[string]time.Time{}, completedAt: map[string]time.Time{},
		healthy: map[string]map[string]bool{}, minHealthy: map[string]int{}, stop: cancel, stopped: make(chan struct{})}
	list, err := f.client.CoreV1().Pods(f.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		cancel()
		f.t.Fatalf("list pods: %v", err)
	}
	for i := range list.Items {
		l.observe(watch.Added, &list.Items[i])
	}
	for app, pods := range l.healthy {
		l.minHealthy[app] = len(pods)
	}
	l.watching = true
	w, err := f.client.CoreV1().Pods(f.ns).Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		cancel()
		f.t.Fatalf("watch pods: %v", err)
	}
	go func() {
		defer close(l.stopped)
		for ev := range w.ResultChan() {
			if p, ok := ev.Object.(*corev1.Pod); ok {
				l.observe(ev.Type, p)
			}
		}
	}()
	f.t.Cleanup(l.close)
	return l
}

func (l *podLog) close() {
	l.stop()
	<-l.stopped
}

func (l *podLog) observe(t watch.EventType, p *corev1.Pod) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	app := p.Labels["app"]
	if l.healthy[app] == nil {
		l.healthy[app] = map[string]bool{}
	}
	if _, seen := l.completedAt[p.Name]; !seen && p.Status.Phase == corev1.PodSucceeded {
		l.completedAt[p.Name] = now
	}
	if _, seen := l.evicted[p.Name]; !seen && p.DeletionTimestamp != nil {
		l.evicted[p.Name] = now
	}
	if t == watch.Deleted {
		l.gone[p.Name] = now
	}
	if t != watch.Deleted && p.DeletionTimestamp == nil && podReady(p) {
		l.healthy[app][p.Name] = true
	} else {
		delete(l.healthy[app], p.Name)
	}
	if cur, ok := l.minHealthy[app]; l.watching && (!ok || len(l.healthy[app]) < cur) {
		l.minHealthy[app] = len(l.healthy[app])
	}
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// snapshot copies the times under the lock.
func (l *podLog) times() (evicted, gone, completed map[string]time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.evicted), maps.Clone(l.gone), maps.Clone(l.completedAt)
}

func (l *podLog) min(app string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.minHealthy[app]
}
