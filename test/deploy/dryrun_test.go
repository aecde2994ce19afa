package deploy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeward/nodeward/test/cluster"
)

// The Prometheus Operator's CRDs come from its Go module: the module zip
// carries them under example/prometheus-operator-crd. Pinned, so that the
// test validates against a known schema.
const (
	prometheusOperatorModule  = "github.com/prometheus-operator/prometheus-operator"
	prometheusOperatorVersion = "v0.85.0"
)

// consoleDashboardsNamespace is where the OpenShift console reads
// dashboard ConfigMaps from.
const consoleDashboardsNamespace = "openshift-config-managed"

var monitoringCRDs = []string{
	"monitoring.coreos.com_servicemonitors.yaml",
	"monitoring.coreos.com_prometheusrules.yaml",
}

// TestOverlaysServerDryRun sends every overlay, and manifests/ itself, to the
// real API server with --dry-run=server: schemas, CEL of the admission
// policies, RBAC objects and the monitoring kinds are all checked by the
// server. The namespace must exist for a server dry run of the objects in
// it, so the base is installed first (what an upgrade sees).
func TestOverlaysServerDryRun(t *testing.T) {
	t.Parallel()
	cp := env.ControlPlane(t)
	installBase(t, cp)
	installMonitoringCRDs(t, cp)
	// Every OpenShift cluster has it; the console reads its dashboards there.
	_, err := cp.Client().CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: consoleDashboardsNamespace}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create namespace %s: %v", consoleDashboardsNamespace, err)
	}
	for _, dir := range []string{"overlays/kubernetes", "overlays/openshift", "."} {
		t.Run(dir, func(t *testing.T) {
			t.Parallel()
			out := kubectl(t, cp, "apply", "--dry-run=server", "-k", filepath.Join(manifestsDir(t), dir))
			for _, want := range []string{
				"daemonset.apps/nodeward-agent",
				"validatingadmissionpolicy.admissionregistration.k8s.io/nodeward-agent-own-node",
				"validatingadmissionpolicy.admissionregistration.k8s.io/nodeward-agent-own-lease",
				"validatingadmissionpolicy.admissionregistration.k8s.io/nodeward-agent-delete-own-pods",
				"validatingadmissionpolicy.admissionregistration.k8s.io/nodeward-agent-own-events",
				"validatingadmissionpolicy.admissionregistration.k8s.io/nodeward-agent-evict-own-node",
				"servicemonitor.monitoring.coreos.com/nodeward-agent",
				"prometheusrule.monitoring.coreos.com/nodeward",
				"configmap/nodeward-dashboards",
			} {
				if !strings.Contains(out, want+" ") {
					t.Errorf("dry run of %s does not mention %s:\n%s", dir, want, out)
				}
			}
			if dir == "overlays/openshift" && !strings.Contains(out, "configmap/nodeward-node-health ") {
				t.Errorf("dry run of %s does not mention the console's dashboard ConfigMaps:\n%s", dir, out)
			}
			if !strings.Contains(out, "(server dry run)") {
				t.Errorf("kubectl did not report a server dry run:\n%s", out)
			}
		})
	}
}

// installMonitoringCRDs installs the ServiceMonitor and PrometheusRule CRDs
// from the pinned prometheus-operator module and waits until they are served.
func installMonitoringCRDs(t *testing.T, cp *cluster.ControlPlane) {
	t.Helper()
	monitoring.once.Do(func() {
		monitoring.dir, monitoring.err = downloadModule(prometheusOperatorModule, prometheusOperatorVersion)
	})
	if monitoring.err != nil {
		t.Fatalf("download %s@%s for its CRDs: %v", prometheusOperatorModule, prometheusOperatorVersion, monitoring.err)
	}
	args := []string{"apply", "--server-side", "--field-manager=nodeward-test"}
	for _, f := range monitoringCRDs {
		args = append(args, "-f", filepath.Join(monitoring.dir, "example", "prometheus-operator-crd", f))
	}
	kubectl(t, cp, args...)
	kubectl(t, cp, "wait", "--for=condition=Established", "--timeout=60s",
		"crd/servicemonitors.monitoring.coreos.com", "crd/prometheusrules.monitoring.coreos.com")
}

var monitoring struct {
	once sync.Once
	dir  string
	err  error
}

// downloadModule fetches a module into the module cache and returns its
// directory. It runs outside nodeward's module so that go.mod and go.sum stay
// untouched.
func downloadModule(module, version string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", module+"@"+version)
	cmd.Dir = os.TempDir()
	cmd.Env = append(os.Environ(), "GOFLAGS=", "GO111MODULE=on")
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return "", &commandError{err: err, output: stderr.String() + stdout.String()}
	}
	var info struct{ Dir, Error string }
	if err := json.Unmarshal(stdout.Bytes(), &info); err != nil {
		return "", err
	}
	if info.Error != "" || info.Dir == "" {
		return "", &commandError{output: info.Error}
	}
	return info.Dir, nil
}

type commandError struct {
	err    error
	output string
}

func (e *commandError) Error() string {
	if e.err == nil {
		return e.output
	}
	return e.err.Error() + ": " + e.output
}
