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
	cp, err := cluster.Start(ctx, cluster.Options{BinDir: binDir, Log: logf(t)})
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
}
