package node_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeward/nodeward/test/cluster"
	"github.com/nodeward/nodeward/test/node"
)

// TestCRIONodeOpenShiftAgent installs the project's OpenShift overlay
// (manifests/overlays/openshift: the MCO protocol, CRI-O's socket
// directory alone, the service CA's metrics certificate) with the image
// `make image` builds, side-loaded into CRI-O's storage with skopeo, and
// checks: the agent pod Running and Ready on the CRI-O node, its runtime
// probe finding CRI-O by its socket (NodewardRuntimeUnavailable False),
// then the condition through a CRI-O stop and start (True with its taint,
// False again). It owns the agent DaemonSet while it runs: one left
// applied by an earlier test (TestAgentOnRealNode's Helm chart) is deleted
// first, and the OpenShift one, confined to the CRI-O node, is deleted at
// the end.
func TestCRIONodeOpenShiftAgent(t *testing.T) {
	cp, containerdNode := env.Node(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	client := cp.Client()
	d := agentDeployment(ctx, t, cp, containerdNode) // builds the image once per package
	_, n := env.CRIONode(t)
	start := time.Now()
	if err := n.ImportImage(ctx, filepath.Join(env.Dir(), "nodeward.oci.tar")); err != nil {
		t.Fatal(err)
	}
	t.Logf("image %s side-loaded into CRI-O's storage in %s", d.image, time.Since(start).Round(time.Millisecond))

	pod := deployOpenShiftAgent(ctx, t, cp, n, d)
	if got := pod.Status.ContainerStatuses[0].ContainerID; len(got) < 8 || got[:8] != "cri-o://" {
		t.Errorf("agent container %q, want CRI-O's", got)
	}
	if err := waitNode(ctx, client, n.Name(), 2*time.Minute, crioRuntimeFound); err != nil {
		t.Fatalf("the agent pod never found CRI-O: %v", err)
	}
	t.Run("runtime-restart", func(t *testing.T) { testCRIORestart(ctx, t, client, n) })
	t.Run("pod-survives", func(t *testing.T) {
		// The agent pod outlives CRI-O's restart (its conmon does) and
		// is still the one Ready pod of the DaemonSet on the node.
		after, err := waitAgentReady(ctx, client, n.Name(), time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if after.UID != pod.UID {
			t.Errorf("agent pod %s replaced by %s across the CRI-O restart", pod.Name, after.Name)
		}
	})
}

// deployOpenShiftAgent replaces any agent DaemonSet with the OpenShift
// overlay's, confined to the CRI-O node, creates the metrics certificate
// the service CA operator would, and returns the agent pod once it is
// Running and Ready. The DaemonSet is deleted when the test ends.
func deployOpenShiftAgent(ctx context.Context, t *testing.T, cp *cluster.ControlPlane, n *node.Node, d deployment) *corev1.Pod {
	t.Helper()
	client := cp.Client()
	d.agentArgs = nil // the rpm-ostree double is the containerd node's
	d.nodeName = n.Name()
	manifests, err := d.renderOverlay(ctx, cp, env.Root(), "openshift")
	if err != nil {
		t.Fatal(err)
	}
	if err := deleteAgentDaemonSet(ctx, client); err != nil {
		t.Fatalf("an earlier test's agent DaemonSet: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := deleteAgentDaemonSet(ctx, client); err != nil {
			t.Errorf("the OpenShift agent DaemonSet: %v", err)
		}
	})
	// Every OpenShift cluster has it; the overlay's console dashboards go
	// there.
	_, err = client.CoreV1().Namespaces().Create(ctx,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "openshift-config-managed"}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create namespace openshift-config-managed: %v", err)
	}
	start := time.Now()
	if err := apply(ctx, cp, namespacesFirst(manifests), t.TempDir()); err != nil {
		t.Fatal(err)
	}
	if err := createServingCert(ctx, client, agentNamespace, "nodeward-agent-metrics-tls"); err != nil {
		t.Fatal(err)
	}
	pod, err := waitAgentReady(ctx, client, n.Name(), 3*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("OpenShift agent pod %s Running and Ready on CRI-O %s after apply (image %s)", pod.Name,
		time.Since(start).Round(time.Millisecond), pod.Status.ContainerStatuses[0].ImageID)
	return pod
}

// createServingCert stands in for OpenShift's service CA operator, which
// issues the agent's metrics certificate into the Secret the overlay's
// Service names: a self-signed one (the kubelet's HTTPS readiness probe
// verifies none).
func createServingCert(ctx context.Context, client kubernetes.Interface, namespace, name string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("generate the metrics key: %w", err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "nodeward-agent-metrics." + namespace + ".svc"},
		DNSNames: []string{"nodeward-agent-metrics." + namespace + ".svc"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(24 * time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return fmt.Errorf("sign the metrics certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return fmt.Errorf("encode the metrics key: %w", err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{
			corev1.TLSCertKey:       pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
			corev1.TLSPrivateKeyKey: pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
		}}
	_, err = client.CoreV1().Secrets(namespace).Create(ctx, secret, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("create the metrics certificate's Secret: %w", err)
	}
	return nil
}
