package mco

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/nodeward/nodeward/api/kube"
)

// fakeAPI serves the kubeconfig-data ConfigMap and records the node's
// annotation patches.
type fakeAPI struct {
	mu      sync.Mutex
	bundle  string
	patches []map[string]*string
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/api/v1/namespaces/"+MCDNamespace+"/configmaps/"+KubeconfigDataConfigMap:
		_ = json.NewEncoder(w).Encode(&corev1.ConfigMap{TypeMeta: metav1.TypeMeta{Kind: "ConfigMap", APIVersion: "v1"},
			ObjectMeta: metav1.ObjectMeta{Name: KubeconfigDataConfigMap, Namespace: MCDNamespace},
			Data:       map[string]string{KubeconfigDataKey: f.bundle}})
	case r.Method == http.MethodPatch && r.URL.Path == "/api/v1/nodes/n1":
		var p struct {
			Metadata struct {
				Annotations map[string]*string `json:"annotations"`
			} `json:"metadata"`
		}
		body, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(body, &p)
		f.mu.Lock()
		f.patches = append(f.patches, p.Metadata.Annotations)
		f.mu.Unlock()
		_ = json.NewEncoder(w).Encode(&corev1.Node{TypeMeta: metav1.TypeMeta{Kind: "Node", APIVersion: "v1"},
			ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
	default:
		http.NotFound(w, r)
	}
}

type fakeUnits struct {
	restarts []string
	fail     error
}

func (u *fakeUnits) Restart(_ context.Context, unit string) error {
	u.restarts = append(u.restarts, unit)
	return u.fail
}

// TestSyncRotatesTheServerCA: with service-ca-rotate on the
// ControllerConfig and not yet observed by the node, the kubeconfig takes
// the ConfigMap's new CA, the kubelet's kubeconfig too, the kubelet is
// restarted (again at the next sync when the restart failed), and the node
// records the resourceVersion and the rotation.
func TestSyncRotatesTheServerCA(t *testing.T) {
	oldCA, newCA := testCA(t, "kube-apiserver-service-network-signer"), testCA(t, "openshift-service-serving-signer@2")
	api := &fakeAPI{bundle: oldCA + newCA}
	srv := httptest.NewServer(api)
	defer srv.Close()
	client, err := kube.NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	for _, p := range []string{KubeconfigPath, KubeletKubeconfigPath} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), kubeconfigWithCA(t, oldCA), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Annotations: map[string]string{AnnotationLastSyncedControllerCfg: "7"}}}
	units := &fakeUnits{fail: errors.New("job failed")}
	w := &CertificateWriter{Client: client, Node: "n1", Root: root, Units: units, Log: slog.New(slog.DiscardHandler),
		NodeObject: func(context.Context) (*corev1.Node, error) { return node.DeepCopy(), nil }}
	cc := controllerConfig(map[string]any{"kubeAPIServerServingCAData": b64(newCA)})
	cc.SetAnnotations(map[string]string{AnnotationServiceCARotate: "true"})

	if err := w.Sync(t.Context(), cc); err == nil {
		t.Fatal("a failed kubelet restart: no error")
	}
	want := strings.TrimSpace(oldCA) + "\n" + strings.TrimSpace(newCA)
	for _, p := range []string{KubeconfigPath, KubeletKubeconfigPath} {
		data, _ := os.ReadFile(filepath.Join(root, p))
		if got := caOf(t, data); got != want {
			t.Errorf("%s CA = %q, want %q", p, got, want)
		}
	}
	if len(api.patches) != 1 || *api.patches[0][AnnotationLastObservedServerCA] != "true" {
		t.Fatalf("patches %v, want one recording the rotation", api.patches)
	}
	// The node now records the rotation: the next sync merges nothing
	// but retries the restart.
	node.Annotations[AnnotationLastObservedServerCA] = "true"
	units.fail = nil
	if err := w.Sync(t.Context(), cc); err != nil {
		t.Fatal(err)
	}
	if len(units.restarts) != 2 || units.restarts[1] != KubeletUnit {
		t.Errorf("restarts %v, want %s twice", units.restarts, KubeletUnit)
	}
	if err := w.Sync(t.Context(), cc); err != nil || len(units.restarts) != 2 {
		t.Errorf("a third sync: %v, restarts %v; want no new restart", err, units.restarts)
	}
}
