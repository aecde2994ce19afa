package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/test/node"
	"github.com/nodeward/nodeward/test/rpmostree"
)

// The rpm-ostree double the agent pod runs on the host. It lives in the
// node's /var/lib/kubelet: the pod mounts the host's / read-only at /host,
// but that mount's submounts stay writable, and the double, unlike the
// real CLI (which asks rpm-ostreed), writes its own state. The container
// holds only /nodeward, so an agent that finds the binary and its state
// ran it chrooted into the host root.
const (
	hostDoubleDir = "/var/lib/kubelet/nodeward-rpm-ostree-double"
	hostBooted    = "ostree-unverified-registry:quay.io/fedora/fedora-coreos:42"
	hostImage     = "quay.io/fedora/fedora-coreos:43"
)

// installHostDouble builds the static double into the node's
// /var/lib/kubelet and creates its state: booted hostBooted, hostImage
// available. It returns the agent's extra arguments.
func installHostDouble(t *testing.T, n *node.Node) []string {
	t.Helper()
	outside := filepath.Join(n.Dir(), "mounts", "var-lib-kubelet", filepath.Base(hostDoubleDir))
	if err := os.MkdirAll(filepath.Join(outside, "state"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := rpmostree.BuildStatic(outside); err != nil {
		t.Fatal(err)
	}
	_, err := rpmostree.Create(filepath.Join(outside, "state"), hostDoubleDir+"/rpm-ostree",
		rpmostree.Deployment{Checksum: strings.Repeat("0a", 32), ImageRef: hostBooted, Digest: "sha256:" + strings.Repeat("a", 64)},
		map[string]rpmostree.Image{hostImage: {Checksum: strings.Repeat("1b", 32), Digest: "sha256:" + strings.Repeat("b", 64), Version: "43.1"}})
	if err != nil {
		t.Fatal(err)
	}
	return []string{"--rpm-ostree=" + hostDoubleDir + "/rpm-ostree",
		"--rpm-ostree-env=" + rpmostree.EnvDir + "=" + hostDoubleDir + "/state"}
}

// testHostRpmOstree gives the node a target: the agent pod stages it with
// the host's rpm-ostree (the double, chrooted into /host) and reports it
// staged.
func testHostRpmOstree(ctx context.Context, t *testing.T, client kubernetes.Interface, n *node.Node) {
	target := "ostree-unverified-registry:" + hostImage
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{v1alpha1.AnnotationTarget: target}}})
	if _, err := client.CoreV1().Nodes().Patch(ctx, n.Name(), types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err := waitNode(ctx, client, n.Name(), 2*time.Minute, func(node *corev1.Node) error {
		a := node.Annotations
		if a[v1alpha1.AnnotationState] != string(v1alpha1.StepStaged) || a[v1alpha1.AnnotationStaged] != target {
			return fmt.Errorf("state %q staged %q reason %q", a[v1alpha1.AnnotationState], a[v1alpha1.AnnotationStaged], a[v1alpha1.AnnotationReason])
		}
		return nil
	})
	if err != nil {
		t.Fatalf("the agent did not stage %s through the host's rpm-ostree: %v", target, err)
	}
	t.Logf("target staged by the host's rpm-ostree (chrooted) %s after it was set", time.Since(start).Round(time.Millisecond))
}
