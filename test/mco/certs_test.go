package mco_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/util/retry"

	"github.com/nodeward/nodeward/test/cluster"
	"github.com/nodeward/nodeward/test/mco"
)

// The host paths of the machine-config-daemon's certificate writer.
const (
	kubeletCA  = "/etc/kubernetes/kubelet-ca.crt"
	imageCADir = "/etc/docker/certs.d"
	lastSynced = "machineconfiguration.openshift.io/lastSyncedControllerConfigResourceVersion"
)

// TestAgentsWriteControllerConfigCertificates: three real agents follow
// the ControllerConfig as the machine-config-daemon does. A new kubelet CA
// of the API server and a changed registry CA reach every host root, a
// registry removed from the ControllerConfig loses its directory under
// certs.d, every node records the ControllerConfig's resourceVersion, and
// no node is cordoned or rebooted. No controller runs: none of the MCO's
// controllers reads what the certificate writer writes.
func TestAgentsWriteControllerConfigCertificates(t *testing.T) {
	first := demoConfig("quay.io/fedora/fedora-coreos:41", nil, "one", "")
	p := newAgentPool(t, "certs", 3, first, first)
	for _, root := range p.roots {
		// As on RHCOS: the daemon writes registry CAs only where the
		// directory exists.
		if err := os.MkdirAll(filepath.Join(root, imageCADir), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	restoreControllerConfig(t, p.c)
	seen := watchDisruptions(t, p)
	p.startAgents(t)
	boots := map[string]int{}
	for _, node := range p.nodes {
		_, boots[node] = p.booted(t, node)
	}

	caA, caB, reg1, reg2 := newCA(t, "kube-apiserver-a"), newCA(t, "kube-apiserver-b"), newCA(t, "registry-1"), newCA(t, "registry-2")
	version := setCertificates(t, p.c, caA, map[string]string{"registry-a.example..5000": reg1, "registry-b.example": reg1})
	p.waitCertificates(t, version, caA, map[string]string{"registry-a.example:5000": reg1, "registry-b.example": reg1})

	began := time.Now()
	version = setCertificates(t, p.c, caB, map[string]string{"registry-a.example..5000": reg2})
	p.waitCertificates(t, version, caB, map[string]string{"registry-a.example:5000": reg2})
	t.Logf("new certificates on %d nodes %v after the ControllerConfig changed", len(p.nodes), time.Since(began).Round(time.Millisecond))
	for _, node := range p.nodes {
		if _, err := os.Stat(filepath.Join(p.roots[node], imageCADir, "registry-b.example")); !os.IsNotExist(err) {
			t.Errorf("%s: the removed registry's CA directory is still there: %v", node, err)
		}
		if _, n := p.booted(t, node); n != boots[node] {
			t.Errorf("%s: booted %d times, want %d: writing certificates reboots nothing", node, n, boots[node])
		}
	}
	for _, node := range p.nodes {
		if cordoned, _ := seen.of(node); cordoned {
			t.Errorf("%s cordoned; writing certificates drains nothing", node)
		}
	}
}

// waitCertificates waits until every node's host root has the kubelet CA
// and exactly the registry CAs given (directory → PEM) and the node
// records version.
func (p *agentPool) waitCertificates(t *testing.T, version, ca string, registries map[string]string) {
	t.Helper()
	for _, node := range p.nodes {
		p.c.WaitNode(node, time.Minute, "certificates of ControllerConfig "+version+" synced", func(n *corev1.Node) bool {
			return n.Annotations[lastSynced] == version
		})
		cluster.WaitFor(t, 30*time.Second, node+": the ControllerConfig's certificates on disk", func(context.Context) (bool, error) {
			if got := p.hostFile(t, node, kubeletCA); got != ca {
				return false, fmt.Errorf("%s = %q", kubeletCA, got)
			}
			entries, err := os.ReadDir(filepath.Join(p.roots[node], imageCADir))
			if err != nil || len(entries) != len(registries) {
				return false, fmt.Errorf("%s holds %v (%v), want %d registries", imageCADir, entries, err, len(registries))
			}
			for dir, want := range registries {
				if got := p.hostFile(t, node, filepath.Join(imageCADir, dir, "ca.crt")); got != want {
					return false, fmt.Errorf("%s/%s/ca.crt = %q", imageCADir, dir, got)
				}
			}
			return true, nil
		})
	}
}

// setCertificates writes the kubelet's CA and the registries' CAs (file →
// PEM) to the ControllerConfig and returns its new resourceVersion.
func setCertificates(t *testing.T, c *mco.Client, ca string, registries map[string]string) string {
	t.Helper()
	var bundles []any
	for file, data := range registries {
		bundles = append(bundles, map[string]any{"file": file, "data": b64(data)})
	}
	var version string
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ctx := context.Background()
		cc, err := c.Dyn.Resource(mco.ControllerConfigs).Get(ctx, mco.ControllerConfigName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		_ = unstructured.SetNestedField(cc.Object, b64(ca), "spec", "kubeAPIServerServingCAData")
		_ = unstructured.SetNestedSlice(cc.Object, bundles, "spec", "imageRegistryBundleData")
		cc, err = c.Dyn.Resource(mco.ControllerConfigs).Update(ctx, cc, metav1.UpdateOptions{})
		if err == nil {
			version = cc.GetResourceVersion()
		}
		return err
	})
	if err != nil {
		t.Fatalf("update the ControllerConfig: %v", err)
	}
	return version
}

// restoreControllerConfig puts the ControllerConfig's certificate fields
// back at the end of the test: the control plane is the package's.
func restoreControllerConfig(t *testing.T, c *mco.Client) {
	t.Helper()
	cc, err := c.Dyn.Resource(mco.ControllerConfigs).Get(context.Background(), mco.ControllerConfigName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ca, _, _ := unstructured.NestedFieldCopy(cc.Object, "spec", "kubeAPIServerServingCAData")
	bundles, found, _ := unstructured.NestedFieldCopy(cc.Object, "spec", "imageRegistryBundleData")
	t.Cleanup(func() {
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			ctx := context.Background()
			cc, err := c.Dyn.Resource(mco.ControllerConfigs).Get(ctx, mco.ControllerConfigName, metav1.GetOptions{})
			if err != nil {
				return err
			}
			_ = unstructured.SetNestedField(cc.Object, ca, "spec", "kubeAPIServerServingCAData")
			unstructured.RemoveNestedField(cc.Object, "spec", "imageRegistryBundleData")
			if found {
				_ = unstructured.SetNestedField(cc.Object, bundles, "spec", "imageRegistryBundleData")
			}
			_, err = c.Dyn.Resource(mco.ControllerConfigs).Update(ctx, cc, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			t.Errorf("restore the ControllerConfig: %v", err)
		}
	})
}

// newCA is a self-signed CA certificate named cn, PEM-encoded.
func newCA(t *testing.T, cn string) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
