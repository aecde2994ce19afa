package mco

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"log/slog"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	clientcmdv1 "k8s.io/client-go/tools/clientcmd/api/v1"
	"sigs.k8s.io/yaml"
)

// testCA is a self-signed CA certificate named cn, PEM-encoded.
func testCA(t *testing.T, cn string) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

func kubeconfigWithCA(t *testing.T, ca string) []byte {
	t.Helper()
	kc := clientcmdv1.Config{Kind: "Config", APIVersion: "v1",
		Clusters:       []clientcmdv1.NamedCluster{{Name: "local", Cluster: clientcmdv1.Cluster{Server: "https://api:6443", CertificateAuthorityData: []byte(ca)}}},
		AuthInfos:      []clientcmdv1.NamedAuthInfo{{Name: "kubelet", AuthInfo: clientcmdv1.AuthInfo{ClientCertificate: "/var/lib/kubelet/pki/kubelet-client-current.pem"}}},
		CurrentContext: "kubelet"}
	out, err := yaml.Marshal(kc)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func caOf(t *testing.T, kubeconfig []byte) string {
	t.Helper()
	var kc clientcmdv1.Config
	if err := yaml.Unmarshal(kubeconfig, &kc); err != nil {
		t.Fatal(err)
	}
	return string(kc.Clusters[0].Cluster.CertificateAuthorityData)
}

// TestMergeServerCA: the kubeconfig takes the bundle's certificates when
// the bundle brings one it lacks, and the kubelet restarts unless every
// new one is a localhost or load-balancer signer's.
func TestMergeServerCA(t *testing.T) {
	a, b := testCA(t, "openshift-service-serving-signer@1"), testCA(t, "openshift-service-serving-signer@2")
	local := testCA(t, "kube-apiserver-localhost-signer")
	trim := strings.TrimSpace
	for _, tc := range []struct {
		name, onDisk, bundle string
		wantCA               string // "" when the kubeconfig keeps its CAs
		restart              bool
	}{
		{"same bundle", a, a, "", false},
		{"same bundle but spacing", a, "\n" + a + "\n\n", "", false},
		{"a new signer", a, a + b, trim(a) + "\n" + trim(b), true},
		{"only the localhost signer is new", a, a + local, trim(a) + "\n" + trim(local), false},
		{"a signer removed, none added", a + b, a, "", false},
		{"a malformed certificate is left out", a, a + "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n" + b,
			trim(a) + "\n" + trim(b), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := mergeServerCA(kubeconfigWithCA(t, tc.onDisk), []byte(tc.bundle))
			if err != nil {
				t.Fatal(err)
			}
			if tc.wantCA == "" {
				if m.Kubeconfig != nil || m.Restart {
					t.Fatalf("got a new kubeconfig (restart %v), want none", m.Restart)
				}
				return
			}
			if got := caOf(t, m.Kubeconfig); got != tc.wantCA || string(m.CA) != tc.wantCA {
				t.Errorf("CA data = %q, want %q", got, tc.wantCA)
			}
			if m.Restart != tc.restart {
				t.Errorf("restart = %v, want %v", m.Restart, tc.restart)
			}
		})
	}
	if _, err := mergeServerCA([]byte("apiVersion: v1\nkind: Config\n"), []byte(a)); err == nil {
		t.Error("a kubeconfig with no cluster: no error")
	}
}

// TestSetKubeconfigCA keeps everything but the CA data.
func TestSetKubeconfigCA(t *testing.T) {
	a, b := testCA(t, "a"), testCA(t, "b")
	out, err := setKubeconfigCA(kubeconfigWithCA(t, a), []byte(b), KubeletKubeconfigPath)
	if err != nil {
		t.Fatal(err)
	}
	if got := caOf(t, out); got != b {
		t.Errorf("CA = %q, want %q", got, b)
	}
	var kc clientcmdv1.Config
	_ = yaml.Unmarshal(out, &kc)
	if kc.Clusters[0].Cluster.Server != "https://api:6443" || kc.CurrentContext != "kubelet" || len(kc.AuthInfos) != 1 {
		t.Errorf("the rest of the kubeconfig changed: %+v", kc)
	}
}

// TestSyncImageCAs: each registry's CA at certs.d/<file, ".." as ":">,
// directories no bundle names removed, plain files left, a user bundle
// written after the cluster's.
func TestSyncImageCAs(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, ImageCADir)
	for _, d := range []string{"stale.example:5000", "registry.example:5000"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, d, "ca.crt"), []byte("old"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "README"), []byte("kept"), 0o644); err != nil {
		t.Fatal(err)
	}
	cluster, svc, user := testCA(t, "cluster"), testCA(t, "svc"), testCA(t, "user")
	cc := controllerConfig(map[string]any{
		"imageRegistryBundleData": []any{
			map[string]any{"file": "registry.example..5000", "data": b64(cluster)},
			map[string]any{"file": "image-registry.openshift-image-registry.svc..5000", "data": b64(svc)},
		},
		"imageRegistryBundleUserData": []any{map[string]any{"file": "registry.example..5000", "data": b64(user)}},
	})
	spec, err := parseCertSpec(cc)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := syncImageCAs(root, spec.bundles); !ok || err != nil {
		t.Fatalf("syncImageCAs = %v, %v", ok, err)
	}
	for name, want := range map[string]string{
		"registry.example:5000/ca.crt":                            user,
		"image-registry.openshift-image-registry.svc:5000/ca.crt": svc,
		"README": "kept",
	} {
		if got, err := os.ReadFile(filepath.Join(dir, name)); err != nil || string(got) != want {
			t.Errorf("%s = %q, %v; want %q", name, got, err, want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "stale.example:5000")); !os.IsNotExist(err) {
		t.Errorf("the stale registry's directory is still there: %v", err)
	}
	// A host without certs.d gets nothing, as from the daemon.
	bare := t.TempDir()
	if ok, err := syncImageCAs(bare, spec.bundles); ok || err != nil {
		t.Errorf("without certs.d: %v, %v; want false, nil", ok, err)
	}
	if _, err := os.Stat(filepath.Join(bare, ImageCADir)); !os.IsNotExist(err) {
		t.Errorf("certs.d created: %v", err)
	}
}

// TestWriteRefusesMalformedFields: a field that is not base64, not PEM or
// a registry name leaving certs.d is an error naming it, and nothing is
// written.
func TestWriteRefusesMalformedFields(t *testing.T) {
	good := b64(testCA(t, "good"))
	for _, tc := range []struct {
		name, field string
		spec        map[string]any
	}{
		{"bad base64", "spec.kubeAPIServerServingCAData", map[string]any{"kubeAPIServerServingCAData": "%%%"}},
		{"not PEM", "spec.cloudProviderCAData", map[string]any{"cloudProviderCAData": b64("hello")}},
		{"a broken certificate", "spec.kubeAPIServerServingCAData",
			map[string]any{"kubeAPIServerServingCAData": b64("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")}},
		{"a pull secret not JSON", "spec.internalRegistryPullSecret", map[string]any{"internalRegistryPullSecret": b64("{")}},
		{"a registry CA not PEM", "spec.imageRegistryBundleUserData[0].data",
			map[string]any{"imageRegistryBundleUserData": []any{map[string]any{"file": "r", "data": b64("x")}}}},
		{"a registry name with a slash", "spec.imageRegistryBundleData[0].file",
			map[string]any{"imageRegistryBundleData": []any{map[string]any{"file": "../../etc", "data": good}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := map[string]any{"kubeAPIServerServingCAData": good}
			for k, v := range tc.spec {
				spec[k] = v
			}
			root := t.TempDir()
			w := &CertificateWriter{Root: root, Log: slog.New(slog.DiscardHandler)}
			err := w.write(t.Context(), controllerConfig(spec), false)
			if err == nil || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("error = %v, want one naming %s", err, tc.field)
			}
			if entries, _ := os.ReadDir(root); len(entries) != 0 {
				t.Errorf("something was written: %v", entries)
			}
		})
	}
}

// TestWriteHostFile: a final newline added, an existing file's mode kept,
// a new file 0644.
func TestWriteHostFile(t *testing.T) {
	root := t.TempDir()
	if err := writeHostFile(root, KubeletCAPath, []byte("ca")); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(root, KubeletCAPath)
	if got, _ := os.ReadFile(p); string(got) != "ca\n" {
		t.Errorf("content = %q, want %q", got, "ca\n")
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o644 {
		t.Errorf("new file mode = %v, want 0644", fi.Mode().Perm())
	}
	if err := os.Chmod(p, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := writeHostFile(root, KubeletCAPath, []byte("ca2\n")); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode after a rewrite = %v, want the file's 0600 kept", fi.Mode().Perm())
	}
	if got, _ := os.ReadFile(p); string(got) != "ca2\n" {
		t.Errorf("content = %q, want one newline", got)
	}
}

func controllerConfig(spec map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "ControllerConfig",
		"metadata": map[string]any{"name": ControllerConfigName, "resourceVersion": "7"}, "spec": spec}}
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
