package daemon

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/test/cluster"
	"github.com/nodeward/nodeward/test/kernelevents"
	"github.com/nodeward/nodeward/test/testenv"
)

// The agent's kernel probes end to end: the kernel really remounts an ext4
// filesystem read-only, and the Node on the real API server gets
// NodewardReadonlyFilesystem True, the nodeward.io/readonly-filesystem
// taint and an Ext4Error Warning Event; unmounted, both go.
func TestHealthKernelReadonlyFilesystem(t *testing.T) {
	testenv.RequireRoot(t)
	cp := env.ControlPlane(t)
	client := cp.Client()
	ensureLeaseNamespace(t, client)
	node := cp.CreateNodes(t, cluster.NodeSpec{Prefix: "health-kernel", Count: 1})[0]
	host := newFixtureHost(t)
	// The re-check reads the host's mounts through the proc root.
	if err := os.Symlink("/proc/1", filepath.Join(host.root, "1")); err != nil {
		t.Fatal(err)
	}
	cfg := fixtureConfig(host.root)
	cfg.Kernel.Enabled = true
	cfg.Kernel.Lookback.Duration = 0
	cfg.Kernel.Interval.Duration = 200 * time.Millisecond
	kernelevents.Lock(t)
	startHealth(t, cp.Config(), node, cfg, nil)
	waitNode(t, client, node, "ReadonlyFilesystem False", func(n *corev1.Node) bool {
		c := nodeCondition(n, v1alpha1.ConditionReadonlyFilesystem)
		return c != nil && c.Status == corev1.ConditionFalse
	})

	fs := kernelevents.NewExt4(t)
	fs.Fail(t)
	taint := v1alpha1.GroupName + "/readonly-filesystem"
	waitNode(t, client, node, "ReadonlyFilesystem True and its taint", func(n *corev1.Node) bool {
		c := nodeCondition(n, v1alpha1.ConditionReadonlyFilesystem)
		return c != nil && c.Status == corev1.ConditionTrue && c.Reason == "FilesystemIsReadOnly" &&
			strings.Contains(c.Message, fs.Device) && hasTaint(n, taint, corev1.TaintEffectNoSchedule)
	})
	cluster.WaitFor(t, 30*time.Second, "an Ext4Error Warning Event on the node", func(ctx context.Context) (bool, error) {
		evs, err := client.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, e := range evs.Items {
			if e.InvolvedObject.Kind == "Node" && e.InvolvedObject.Name == node && e.Reason == "Ext4Error" &&
				e.Type == corev1.EventTypeWarning && strings.Contains(e.Message, "device "+fs.Device) {
				return true, nil
			}
		}
		return false, nil
	})

	fs.Unmount(t)
	waitNode(t, client, node, "ReadonlyFilesystem False and no taint", func(n *corev1.Node) bool {
		c := nodeCondition(n, v1alpha1.ConditionReadonlyFilesystem)
		return c != nil && c.Status == corev1.ConditionFalse && !hasTaint(n, taint, corev1.TaintEffectNoSchedule)
	})
}
