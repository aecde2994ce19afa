package mco

import (
	"bytes"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	clientcmdv1 "k8s.io/client-go/tools/clientcmd/api/v1"
	"sigs.k8s.io/yaml"

	"github.com/nodeward/nodeward/atomicfile"
)

// The host paths the machine-config-daemon's certificate writer keeps
// (pkg/daemon/daemon.go and image_manager_helper.go of the MCO).
const (
	KubeletCAPath         = "/etc/kubernetes/kubelet-ca.crt"
	CloudCAPath           = "/etc/kubernetes/static-pod-resources/configmaps/cloud-config/ca-bundle.pem"
	KubeconfigPath        = "/etc/kubernetes/kubeconfig"
	KubeletKubeconfigPath = "/var/lib/kubelet/kubeconfig"
	RegistryAuthPath      = "/etc/mco/internal-registry-pull-secret.json"
	ImageCADir            = "/etc/docker/certs.d"
)

// certSpec is what the certificate writer takes from a ControllerConfig,
// decoded and checked.
type certSpec struct {
	kubeletCA, cloudCA, pullSecret []byte
	// bundles are spec.imageRegistryBundleData then
	// spec.imageRegistryBundleUserData: a user entry naming the same
	// registry is written last and wins, as in the daemon.
	bundles []imageBundle
}

// imageBundle is one registry's CA: dir is the directory under
// /etc/docker/certs.d (the entry's file with ".." turned into ":").
type imageBundle struct {
	dir  string
	data []byte
}

// parseCertSpec decodes the ControllerConfig's certificate fields. A
// field that is not base64, or not the PEM or JSON it must hold, is an
// error naming it, and nothing is written.
func parseCertSpec(cc *unstructured.Unstructured) (certSpec, error) {
	var s certSpec
	var err error
	if s.kubeletCA, err = pemField(cc, "kubeAPIServerServingCAData"); err != nil {
		return s, err
	}
	if s.cloudCA, err = pemField(cc, "cloudProviderCAData"); err != nil {
		return s, err
	}
	if s.pullSecret, err = bytesField(cc, "internalRegistryPullSecret"); err != nil {
		return s, err
	}
	if len(bytes.TrimSpace(s.pullSecret)) > 0 && !json.Valid(s.pullSecret) {
		return s, errors.New("spec.internalRegistryPullSecret: not a JSON pull secret")
	}
	for _, list := range []string{"imageRegistryBundleData", "imageRegistryBundleUserData"} {
		bundles, err := bundleField(cc, list)
		if err != nil {
			return s, err
		}
		s.bundles = append(s.bundles, bundles...)
	}
	return s, nil
}

// bytesField decodes spec.<name>, a []byte of the API (base64 in JSON);
// absent or null is empty.
func bytesField(cc *unstructured.Unstructured, name string) ([]byte, error) {
	v, found, err := unstructured.NestedFieldNoCopy(cc.Object, "spec", name)
	if err != nil || !found || v == nil {
		return nil, err
	}
	return decodeBytes("spec."+name, v)
}

func decodeBytes(field string, v any) ([]byte, error) {
	s, ok := v.(string)
	if !ok {
		return nil, fmt.Errorf("%s: a %T, not a base64 string", field, v)
	}
	data, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("%s: not base64: %w", field, err)
	}
	return data, nil
}

func pemField(cc *unstructured.Unstructured, name string) ([]byte, error) {
	data, err := bytesField(cc, name)
	if err != nil {
		return nil, err
	}
	return data, checkPEM("spec."+name, data)
}

// checkPEM accepts empty (or blank) data, or data holding PEM blocks whose
// certificates parse.
func checkPEM(field string, data []byte) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil
	}
	rest, blocks := data, 0
	for {
		block, next := pem.Decode(rest)
		if block == nil {
			break
		}
		blocks++
		if block.Type == "CERTIFICATE" {
			if _, err := x509.ParseCertificate(block.Bytes); err != nil {
				return fmt.Errorf("%s: PEM block %d is not a certificate: %w", field, blocks, err)
			}
		}
		rest = next
	}
	if blocks == 0 {
		return fmt.Errorf("%s: not PEM: no -----BEGIN block in %d bytes", field, len(data))
	}
	return nil
}

// bundleField decodes spec.<list>, a list of {file, data}.
func bundleField(cc *unstructured.Unstructured, list string) ([]imageBundle, error) {
	items, found, err := unstructured.NestedSlice(cc.Object, "spec", list)
	if err != nil || !found {
		return nil, err
	}
	out := make([]imageBundle, 0, len(items))
	for i, item := range items {
		field := fmt.Sprintf("spec.%s[%d]", list, i)
		m, ok := item.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%s: not an object", field)
		}
		file, _ := m["file"].(string)
		dir, err := imageCADirName(field+".file", file)
		if err != nil {
			return nil, err
		}
		data, err := decodeBytes(field+".data", m["data"])
		if err != nil {
			return nil, err
		}
		if err := checkPEM(field+".data", data); err != nil {
			return nil, err
		}
		out = append(out, imageBundle{dir: dir, data: data})
	}
	return out, nil
}

// imageCADirName is the directory under /etc/docker/certs.d of a bundle's
// file: "host..port" is "host:port", as the daemon (and the container
// tools reading certs.d) name it. A name that would leave the directory is
// refused.
func imageCADirName(field, file string) (string, error) {
	dir := strings.ReplaceAll(file, "..", ":")
	if dir == "" || dir == "." || strings.ContainsAny(dir, "/\x00") {
		return "", fmt.Errorf("%s: %q is not a registry name", field, file)
	}
	return dir, nil
}

// writeHostFile writes data (with a final newline) to hostPath under
// root, atomically, as the daemon's writeToDisk: an existing file keeps
// its mode, a new one is 0644.
func writeHostFile(root, hostPath string, data []byte) error {
	if !bytes.HasSuffix(data, []byte("\n")) {
		data = append(bytes.Clone(data), '\n')
	}
	p := filepath.Join(root, hostPath)
	mode := fs.FileMode(0o644)
	if fi, err := os.Stat(p); err == nil {
		mode = fi.Mode().Perm()
	}
	return atomicfile.Write(p, data, mode)
}

// syncImageCAs keeps <root>/etc/docker/certs.d as the bundles say: every
// directory no bundle names is removed (plain files and links are left),
// then each bundle's ca.crt written. As in the daemon, a host without the
// directory gets none: it returns false and writes nothing.
func syncImageCAs(root string, bundles []imageBundle) (bool, error) {
	dir := filepath.Join(root, ImageCADir)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read %s: %w", ImageCADir, err)
	}
	want := map[string]bool{}
	for _, b := range bundles {
		want[b.dir] = true
	}
	for _, e := range entries {
		if e.IsDir() && !want[e.Name()] {
			if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
				return true, fmt.Errorf("remove the stale registry CA %s: %w", e.Name(), err)
			}
		}
	}
	for _, b := range bundles {
		if err := os.MkdirAll(filepath.Join(dir, b.dir), 0o755); err != nil {
			return true, err
		}
		if err := atomicfile.Write(filepath.Join(dir, b.dir, "ca.crt"), b.data, 0o644); err != nil {
			return true, err
		}
	}
	return true, nil
}

// kubeletRestartIgnored are the signers whose new certificates the daemon
// writes without restarting the kubelet: they rotate on their own during
// upgrades.
var kubeletRestartIgnored = []string{
	"kube-apiserver-localhost-signer",
	"openshift-kube-apiserver-operator_localhost-recovery-serving-signer",
	"kube-apiserver-lb-signer",
}

// caMerge is mergeServerCA's answer.
type caMerge struct {
	// Kubeconfig is the new /etc/kubernetes/kubeconfig, nil when it keeps
	// its CAs.
	Kubeconfig []byte
	// CA is the new cluster CA data.
	CA []byte
	// Restart: a new CA other than the ignored signers came.
	Restart bool
}

// mergeServerCA compares the CA bundle of the kubeconfig-data ConfigMap
// with the first cluster's CA data of kubeconfig, as the daemon does:
// when the bundle has a certificate the kubeconfig lacks, the cluster CA
// data becomes the bundle's parseable certificates, and the kubelet must
// restart unless every new certificate is one of the ignored signers'.
func mergeServerCA(kubeconfig, bundle []byte) (caMerge, error) {
	var kc clientcmdv1.Config
	if err := yaml.Unmarshal(kubeconfig, &kc); err != nil {
		return caMerge{}, fmt.Errorf("parse %s: %w", KubeconfigPath, err)
	}
	if len(kc.Clusters) == 0 {
		return caMerge{}, fmt.Errorf("%s has no cluster", KubeconfigPath)
	}
	onDisk := kc.Clusters[0].Cluster.CertificateAuthorityData
	if bytes.Equal(bytes.TrimSpace(onDisk), bytes.TrimSpace(bundle)) {
		return caMerge{}, nil
	}
	valid, added := splitCerts(bundle, onDisk)
	if len(added) == 0 {
		return caMerge{}, nil
	}
	ca := []byte(strings.Join(valid, ""))
	kc.Clusters[0].Cluster.CertificateAuthorityData = ca
	out, err := yaml.Marshal(kc)
	if err != nil {
		return caMerge{}, fmt.Errorf("encode %s: %w", KubeconfigPath, err)
	}
	return caMerge{Kubeconfig: out, CA: ca, Restart: len(ca) > 0 && needsRestart(added)}, nil
}

// splitCerts cuts bundle into its certificates (each with the text before
// it, as the daemon cuts after every END line) and returns the ones that
// parse and the ones onDisk lacks. As in the daemon, the first piece that
// holds no PEM block ends the bundle.
func splitCerts(bundle, onDisk []byte) (valid, added []string) {
	have := map[string]bool{}
	for _, c := range splitAfterEnd(onDisk) {
		have[c] = true
	}
	for _, c := range splitAfterEnd(bundle) {
		if !have[c] {
			added = append(added, c)
		}
		if parseCert(c) == nil {
			if block, _ := pem.Decode([]byte(c)); block == nil {
				break
			}
			continue
		}
		valid = append(valid, c)
	}
	return valid, added
}

func splitAfterEnd(data []byte) []string {
	return strings.SplitAfter(strings.TrimSpace(string(data)), "-----END CERTIFICATE-----")
}

// parseCert parses the first PEM block of c (nil when none parses).
func parseCert(c string) *x509.Certificate {
	block, _ := pem.Decode([]byte(c))
	if block == nil {
		return nil
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil
	}
	return cert
}

// needsRestart: one of the added certificates is not an ignored signer's.
// The daemon stops looking at the first piece with no PEM block.
func needsRestart(added []string) bool {
	for _, c := range added {
		if block, _ := pem.Decode([]byte(c)); block == nil {
			return false
		}
		cert := parseCert(c)
		if cert == nil {
			continue
		}
		if !ignoredSigner(cert.Subject.CommonName) {
			return true
		}
	}
	return false
}

func ignoredSigner(cn string) bool {
	for _, s := range kubeletRestartIgnored {
		if strings.Contains(cn, s) {
			return true
		}
	}
	return false
}

// setKubeconfigCA sets the first cluster's CA data of a kubeconfig, the
// rest kept, as the daemon updates the kubelet's own kubeconfig.
func setKubeconfigCA(kubeconfig, ca []byte, path string) ([]byte, error) {
	var kc clientcmdv1.Config
	if err := yaml.Unmarshal(kubeconfig, &kc); err != nil {
		return nil, fmt.Errorf("parse %s: %w", path, err)
	}
	if len(kc.Clusters) == 0 {
		return nil, fmt.Errorf("%s has no cluster", path)
	}
	kc.Clusters[0].Cluster.CertificateAuthorityData = ca
	out, err := yaml.Marshal(kc)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", path, err)
	}
	return out, nil
}
