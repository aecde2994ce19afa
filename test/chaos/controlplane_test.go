package chaos

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeward/nodeward/test/cluster"
	"github.com/nodeward/nodeward/test/testenv"
)

// startControlPlane starts a control plane for one test: the chaos run
// crashes etcd and kube-apiserver, which would break any other test
// sharing them. Its logs are kept when the test fails.
func startControlPlane(t *testing.T) *cluster.ControlPlane {
	t.Helper()
	if testing.Short() {
		t.Skip("needs the control plane")
	}
	binDir, err := cluster.BinDir()
	testenv.Require(t, err == nil, fmt.Sprint("control-plane binaries: ", err))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cp, err := cluster.Start(ctx, cluster.Options{BinDir: binDir, Log: logf(t), KwokStages: []string{cluster.PodReadyAgainStage}})
	testenv.Require(t, err == nil, fmt.Sprint("control plane: ", err))
	t.Cleanup(func() {
		cp.Stop()
		if t.Failed() {
			t.Logf("control-plane logs kept in %s", cp.Dir())
		} else {
			os.RemoveAll(cp.Dir())
		}
	})
	return cp
}

// logf logs through t with a timestamp when the run is verbose.
func logf(t *testing.T) func(format string, args ...any) {
	return func(format string, args ...any) {
		if testing.Verbose() {
			t.Logf(time.Now().Format("15:04:05.000 ")+format, args...)
		}
	}
}

// TestControlPlaneRestart: the crash-and-restart the chaos run relies on.
// etcd killed with SIGKILL under a running API server comes back on its
// data dir and the API server serves again; the API server killed and
// restarted serves on the same address; a host crash (API server, then
// etcd; etcd, then the API server back) loses nothing written before.
func TestControlPlaneRestart(t *testing.T) {
	cp := startControlPlane(t)
	client := cp.Client()
	ctx := context.Background()
	write := func(name string) {
		t.Helper()
		cluster.WaitFor(t, time.Minute, "create ConfigMap "+name, func(ctx context.Context) (bool, error) {
			_, err := client.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"k": name}}, metav1.CreateOptions{})
			return err == nil, err
		})
	}
	readAll := func(names ...string) {
		t.Helper()
		for _, name := range names {
			cm, err := client.CoreV1().ConfigMaps("default").Get(ctx, name, metav1.GetOptions{})
			if err != nil || cm.Data["k"] != name {
				t.Fatalf("ConfigMap %s after the restarts: %v %v", name, cm, err)
			}
		}
	}
	rctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()

	write("before-etcd-crash")
	if err := cp.Kill(cluster.Etcd); err != nil {
		t.Fatal(err)
	}
	if err := cp.Restart(rctx, cluster.Etcd); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := cp.WaitAPIServer(rctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("kube-apiserver ready %s after etcd's restart", time.Since(start).Round(time.Millisecond))
	write("after-etcd-crash")

	if err := cp.Kill(cluster.APIServer); err != nil {
		t.Fatal(err)
	}
	if err := cp.Restart(rctx, cluster.APIServer); err != nil {
		t.Fatal(err)
	}
	write("after-apiserver-crash")

	if err := cp.Kill(cluster.APIServer); err != nil {
		t.Fatal(err)
	}
	if err := cp.Kill(cluster.Etcd); err != nil {
		t.Fatal(err)
	}
	if err := cp.Restart(rctx, cluster.Etcd); err != nil {
		t.Fatal(err)
	}
	if err := cp.Restart(rctx, cluster.APIServer); err != nil {
		t.Fatal(err)
	}
	readAll("before-etcd-crash", "after-etcd-crash", "after-apiserver-crash")
	// The rest of the control plane follows: the controller manager still
	// creates ServiceAccounts in a new namespace.
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "after-restarts"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cluster.WaitFor(t, time.Minute, "the default ServiceAccount of a new namespace", func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().ServiceAccounts("after-restarts").Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})

	// A pod marked not Ready, as the node lifecycle controller marks the
	// pods of a NotReady node, is Ready again (PodReadyAgainStage).
	node := cp.CreateNodes(t, cluster.NodeSpec{Prefix: "restart", Count: 1})[0]
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "after-restarts"},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/c:1"}}}}
	if _, err := client.CoreV1().Pods("after-restarts").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ready := func(want corev1.ConditionStatus) func(context.Context) (bool, error) {
		return func(ctx context.Context) (bool, error) {
			p, err := client.CoreV1().Pods("after-restarts").Get(ctx, "p", metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodReady {
					return c.Status == want && p.Status.Phase == corev1.PodRunning, nil
				}
			}
			return false, nil
		}
	}
	cluster.WaitFor(t, time.Minute, "pod p Ready", ready(corev1.ConditionTrue))
	cluster.WaitFor(t, time.Minute, "pod p marked not Ready", func(ctx context.Context) (bool, error) {
		p, err := client.CoreV1().Pods("after-restarts").Get(ctx, "p", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for i, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady {
				p.Status.Conditions[i].Status, p.Status.Conditions[i].LastTransitionTime = corev1.ConditionFalse, metav1.Now()
			}
		}
		_, err = client.CoreV1().Pods("after-restarts").UpdateStatus(ctx, p, metav1.UpdateOptions{})
		return err == nil, err
	})
	cluster.WaitFor(t, time.Minute, "pod p Ready again", ready(corev1.ConditionTrue))
}
