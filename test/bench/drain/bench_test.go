// Package drain benchmarks `nodeward drain` against `kubectl drain
// --ignore-daemonsets --delete-emptydir-data` on the same control plane and
// the same pods: 110 pods from 10 Deployments on one kwok node, nine free
// nodes. Runs alternate between the two tools; every run starts from the
// same freshly placed pods.
//
//	go test ./test/bench/drain -run '^$' -bench . -benchtime 1x
//
// BENCH_ROUNDS (default 3) sets the runs per tool and grace period.
package drain

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/nodeward/nodeward/test/cluster"
)

var env cluster.Env

func TestMain(m *testing.M) { os.Exit(env.Run(m)) }

const (
	deployments = 10
	replicas    = 11
	group       = "drainbench"
)

type bench struct {
	b        *testing.B
	cp       *cluster.ControlPlane
	client   kubernetes.Interface
	node     string
	free     []string
	nodeward string
}

func BenchmarkDrain110Pods(b *testing.B) {
	cp := env.ControlPlane(b)
	nodes := cp.CreateNodes(b, cluster.NodeSpec{Prefix: group, Count: 10})
	bin, err := cluster.NodewardBinary(cluster.ReleaseBuild)
	if err != nil {
		b.Fatal(err)
	}
	bn := &bench{b: b, cp: cp, client: cp.Client(), node: nodes[0], free: nodes[1:], nodeward: bin}
	rounds := 3
	if v, err := strconv.Atoi(os.Getenv("BENCH_ROUNDS")); err == nil && v > 0 {
		rounds = v
	}
	tools := map[string][]string{
		"nodeward": {bin, "drain", bn.node, "--kubeconfig", cp.KubeconfigPath(), "--quiet"},
		"kubectl": {cp.Binary("kubectl"), "--kubeconfig", cp.KubeconfigPath(), "drain", bn.node,
			"--ignore-daemonsets", "--delete-emptydir-data", "--timeout=10m"},
	}
	for range b.N {
		for _, grace := range []int64{1, 30} {
			n := rounds
			if grace == 30 {
				n = 1 // the grace period dominates; one run each shows it
			}
			times := map[string][]time.Duration{}
			for round := range n {
				for _, tool := range []string{"nodeward", "kubectl"} {
					d := bn.run(tool, tools[tool], grace)
					times[tool] = append(times[tool], d)
					b.Logf("grace %2ds round %d %-8s %6.2f s", grace, round+1, tool, d.Seconds())
				}
			}
			nw, kc := median(times["nodeward"]), median(times["kubectl"])
			b.Logf("grace %2ds: nodeward median %.2f s, kubectl median %.2f s, ratio %.3f", grace, nw.Seconds(), kc.Seconds(), nw.Seconds()/kc.Seconds())
			b.ReportMetric(nw.Seconds(), fmt.Sprintf("nodeward-s/grace%d", grace))
			b.ReportMetric(kc.Seconds(), fmt.Sprintf("kubectl-s/grace%d", grace))
			b.ReportMetric(nw.Seconds()/kc.Seconds(), fmt.Sprintf("ratio/grace%d", grace))
		}
	}
}

// run places 110 pods on the node, times one drain by the tool and cleans
// up so that the next run starts alike.
func (bn *bench) run(tool string, argv []string, grace int64) time.Duration {
	b := bn.b
	ctx := context.Background()
	ns := bn.placePods(ctx, grace)
	start := time.Now()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	out, err := cmd.CombinedOutput()
	elapsed := time.Since(start)
	if err != nil {
		b.Fatalf("%s drain: %v\n%s", tool, err, out)
	}
	left, err := bn.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + bn.node})
	if err != nil || len(left.Items) != 0 {
		b.Fatalf("%s returned with %d pods still on the node (%v)", tool, len(left.Items), err)
	}
	if err := bn.client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
		b.Fatal(err)
	}
	bn.setUnschedulable(bn.node, false)
	return elapsed
}

// placePods cordons the free nodes, creates the Deployments in a new
// namespace, waits for all 110 pods to run on the node and uncordons the
// free nodes again.
func (bn *bench) placePods(ctx context.Context, grace int64) string {
	b := bn.b
	for _, n := range bn.free {
		bn.setUnschedulable(n, true)
	}
	ns, err := bn.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "drainbench-"}}, metav1.CreateOptions{})
	if err != nil {
		b.Fatal(err)
	}
	cluster.WaitFor(b, 30*time.Second, "default ServiceAccount", func(ctx context.Context) (bool, error) {
		_, err := bn.client.CoreV1().ServiceAccounts(ns.Name).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
	for i := range deployments {
		name := fmt.Sprintf("app-%d", i)
		labels := map[string]string{"app": name}
		_, err := bn.client.AppsV1().Deployments(ns.Name).Create(ctx, &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: appsv1.DeploymentSpec{
				Replicas: ptr.To[int32](replicas),
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec: corev1.PodSpec{
						NodeSelector:                  map[string]string{cluster.GroupLabel: group},
						TerminationGracePeriodSeconds: &grace,
						Containers:                    []corev1.Container{{Name: "c", Image: "registry.invalid/app:1"}},
					},
				},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			b.Fatal(err)
		}
	}
	cluster.WaitFor(b, 3*time.Minute, "110 pods running on the node", func(ctx context.Context) (bool, error) {
		list, err := bn.client.CoreV1().Pods(ns.Name).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + bn.node})
		if err != nil {
			return false, err
		}
		running := 0
		for _, p := range list.Items {
			if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
				running++
			}
		}
		return running == deployments*replicas, nil
	})
	for _, n := range bn.free {
		bn.setUnschedulable(n, false)
	}
	return ns.Name
}

func (bn *bench) setUnschedulable(node string, on bool) {
	patch := fmt.Sprintf(`{"spec":{"unschedulable":%t}}`, on)
	if !on {
		// Also drop nodeward's cordon record, as `nodeward uncordon` does.
		patch = `{"spec":{"unschedulable":false},"metadata":{"annotations":{"update.nodeward.io/cordoned-by":null}}}`
	}
	if _, err := bn.client.CoreV1().Nodes().Patch(context.Background(), node, "application/merge-patch+json",
		[]byte(patch), metav1.PatchOptions{}); err != nil {
		bn.b.Fatalf("set unschedulable=%t on %s: %v", on, node, err)
	}
}

func median(d []time.Duration) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}
