package mco_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd/api/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/yaml"

	"github.com/nodeward/nodeward/test/cluster"
	"github.com/nodeward/nodeward/test/mco"
)

// TestAgentsMergeARotatedServerCA: the API server's service CA rotates. The
// ControllerConfig says so (service-ca-rotate: "true") and the MCO's
// kubeconfig-data ConfigMap holds the new bundle. Every agent merges the
// new CA into the host's /etc/kubernetes/kubeconfig and the kubelet's own
// kubeconfig, restarts the kubelet once (a new signer, not one of those
// that rotate on their own), records the rotation on its node, and neither
// cordons nor reboots.
func TestAgentsMergeARotatedServerCA(t *testing.T) {
	first := demoConfig("quay.io/fedora/fedora-coreos:41", nil, "one", "")
	p := newAgentPool(t, "rotate", 2, first, first)
	ctx := context.Background()
	caOld, caNew := newCA(t, "kube-apiserver-service-network-signer-old"), newCA(t, "kube-apiserver-service-network-signer-new")
	for _, root := range p.roots {
		for _, path := range []string{"/etc/kubernetes/kubeconfig", "/var/lib/kubelet/kubeconfig"} {
			writeKubeconfig(t, filepath.Join(root, path), caOld)
		}
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kubeconfig-data", Namespace: "openshift-machine-config-operator"},
		Data: map[string]string{"ca-bundle.crt": caOld + caNew}}
	if _, err := p.c.Kube.CoreV1().ConfigMaps(cm.Namespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = p.c.Kube.CoreV1().ConfigMaps(cm.Namespace).Delete(context.Background(), cm.Name, metav1.DeleteOptions{})
	})
	setRotate(t, p.c, "true")
	t.Cleanup(func() { setRotate(t, p.c, "") })
	seen := watchDisruptions(t, p)
	p.startAgents(t)
	for _, node := range p.nodes {
		p.c.WaitNode(node, time.Minute, "the server CA rotation observed", func(n *corev1.Node) bool {
			return n.Annotations["machineconfiguration.openshift.io/lastObservedServerCAAnnotation"] == "true"
		})
		cluster.WaitFor(t, 30*time.Second, node+": the new CA in both kubeconfigs", func(context.Context) (bool, error) {
			for _, path := range []string{"/etc/kubernetes/kubeconfig", "/var/lib/kubelet/kubeconfig"} {
				if ca := kubeconfigCA(t, filepath.Join(p.roots[node], path)); !strings.Contains(ca, strings.TrimSpace(caNew)) {
					return false, nil
				}
			}
			return true, nil
		})
		restarts := 0
		for _, call := range p.procs[node].Systemd.Calls() {
			if call.Method == "RestartUnit" && call.Unit == "kubelet.service" {
				restarts++
			}
		}
		if restarts != 1 {
			t.Errorf("%s: the kubelet restarted %d times; want once", node, restarts)
		}
		if _, boots := p.booted(t, node); boots != 0 {
			t.Errorf("%s: %d boots; a certificate rotation reboots nothing", node, boots)
		}
		if cordoned, _ := seen.of(node); cordoned {
			t.Errorf("%s cordoned; a certificate rotation drains nothing", node)
		}
	}
}

// writeKubeconfig writes a kubeconfig whose one cluster trusts ca.
func writeKubeconfig(t testing.TB, path, ca string) {
	t.Helper()
	kc := v1.Config{Clusters: []v1.NamedCluster{{Name: "local", Cluster: v1.Cluster{Server: "https://api-int.example:6443",
		CertificateAuthorityData: []byte(ca)}}}}
	data, err := yaml.Marshal(kc)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// kubeconfigCA is the first cluster's CA data of the kubeconfig at path.
func kubeconfigCA(t testing.TB, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var kc v1.Config
	if err := yaml.Unmarshal(data, &kc); err != nil || len(kc.Clusters) == 0 {
		t.Fatalf("%s: %v, %d clusters", path, err, len(kc.Clusters))
	}
	return string(kc.Clusters[0].Cluster.CertificateAuthorityData)
}

// setRotate sets (or, with "", removes) the ControllerConfig's
// service-ca-rotate annotation.
func setRotate(t testing.TB, c *mco.Client, value string) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ctx := context.Background()
		cc, err := c.Dyn.Resource(mco.ControllerConfigs).Get(ctx, mco.ControllerConfigName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		a := cc.GetAnnotations()
		if a == nil {
			a = map[string]string{}
		}
		if value == "" {
			delete(a, "machineconfiguration.openshift.io/service-ca-rotate")
		} else {
			a["machineconfiguration.openshift.io/service-ca-rotate"] = value
		}
		cc.SetAnnotations(a)
		_, err = c.Dyn.Resource(mco.ControllerConfigs).Update(ctx, cc, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Errorf("set service-ca-rotate on the ControllerConfig: %v", err)
	}
}
