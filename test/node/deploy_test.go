package node_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/nodeward/nodeward/test/cluster"
)

// deployment is what the test changes in the project's manifests, and why.
type deployment struct {
	image   string          // the image built by `make image`, imported into the node
	missing map[string]bool // capabilities (as in the manifests) this machine cannot grant
	apiHost string          // the API server as a hostNetwork pod reaches it
	apiPort string
	// agentArgs are added to the agent's command line (the host's
	// rpm-ostree double, hostroot_test.go).
	agentArgs []string
	// nodeName, when set, confines the DaemonSet to that node (the CRI-O
	// node's OpenShift install, crio_openshift_test.go).
	nodeName string
}

// render builds manifests/overlays/kubernetes with kustomize (the test
// control plane's `kubectl kustomize`, as test/deploy/lint.sh may) and
// adapts it to this test cluster:
//   - the agent's and the coordinator's image: the one just built;
//   - KUBERNETES_SERVICE_HOST/PORT: the API server's own address, since no
//     kube-proxy serves the kubernetes Service here;
//   - capabilities this machine's bounding set lacks are not added (root
//     here has no CAP_SYS_RESOURCE: runc would fail "unable to apply caps");
//   - the coordinator is scaled to 0: not on the host network, it cannot
//     reach the API server without kube-proxy and a pod network;
//   - ServiceMonitor and PrometheusRule are left out: no Prometheus
//     Operator CRDs here (docs/install.md says the same for such clusters);
//   - the agent runs the rpm-ostree double installed on the node
//     (hostroot_test.go) with --rpm-ostree and --rpm-ostree-env;
//   - the agent's hysteresis quiet period is 3 s instead of 5 min, so that
//     a condition that went True comes back within the test.
func (d deployment) render(ctx context.Context, cp *cluster.ControlPlane, root string) ([]byte, error) {
	return d.renderOverlay(ctx, cp, root, "kubernetes")
}

// renderOverlay builds manifests/overlays/<overlay> and adapts it as
// render does.
func (d deployment) renderOverlay(ctx context.Context, cp *cluster.ControlPlane, root, overlay string) ([]byte, error) {
	out, err := exec.CommandContext(ctx, cp.Binary("kubectl"), "kustomize", filepath.Join(root, "manifests", "overlays", overlay)).Output()
	if err != nil {
		return nil, fmt.Errorf("kustomize manifests/overlays/%s: %w", overlay, err)
	}
	return d.adaptAll(out)
}

// renderChart renders charts/nodeward with Helm's engine (test/helmsync's
// render command, its own module), with the values sets (key=value, dotted
// keys) if any, and adapts it as render does.
func (d deployment) renderChart(ctx context.Context, root string, sets ...string) ([]byte, error) {
	args := []string{"run", "./render"}
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = filepath.Join(root, "test", "helmsync")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("render charts/nodeward: %w: %s", err, stderr.Bytes())
	}
	return d.adaptAll(out)
}

// adaptAll applies the test's adaptations to every object of a manifest
// stream.
func (d deployment) adaptAll(out []byte) ([]byte, error) {
	return eachObject(out, func(obj *unstructured.Unstructured) (bool, error) {
		switch obj.GetKind() {
		case "ServiceMonitor", "PrometheusRule":
			return false, nil
		case "DaemonSet", "Deployment":
			return true, d.adapt(obj)
		case "ConfigMap":
			if config, ok, _ := unstructured.NestedString(obj.Object, "data", "config.yaml"); ok && obj.GetName() == "nodeward-agent-config" {
				config += "hysteresis: {quietPeriod: 3s}\n"
				return true, unstructured.SetNestedField(obj.Object, config, "data", "config.yaml")
			}
		}
		return true, nil
	})
}

// eachObject runs fn on every object of a manifest stream and returns the
// stream of the objects fn keeps (true), as fn left them. Documents that
// are no object are dropped.
func eachObject(manifests []byte, fn func(obj *unstructured.Unstructured) (keep bool, err error)) ([]byte, error) {
	dec := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(manifests)))
	var docs [][]byte
	for {
		doc, err := dec.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("split the manifests: %w", err)
		}
		obj := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(doc, &obj.Object); err != nil || obj.Object == nil {
			continue
		}
		keep, err := fn(obj)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", obj.GetKind(), obj.GetName(), err)
		}
		if !keep {
			continue
		}
		data, err := yaml.Marshal(obj.Object)
		if err != nil {
			return nil, fmt.Errorf("marshal %s %s: %w", obj.GetKind(), obj.GetName(), err)
		}
		docs = append(docs, data)
	}
	return bytes.Join(docs, []byte("---\n")), nil
}

// deleteAgentDaemonSet deletes the agent DaemonSet, if any, and waits until
// it and its pods are gone (foreground deletion).
func deleteAgentDaemonSet(ctx context.Context, client kubernetes.Interface) error {
	gone := metav1.DeletePropagationForeground
	err := client.AppsV1().DaemonSets(agentNamespace).Delete(ctx, "nodeward-agent", metav1.DeleteOptions{PropagationPolicy: &gone})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("delete the agent DaemonSet: %w", err)
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := client.AppsV1().DaemonSets(agentNamespace).Get(ctx, "nodeward-agent", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		return fmt.Errorf("the agent DaemonSet never went: %w", err)
	}
	return nil
}

func (d deployment) adapt(obj *unstructured.Unstructured) error {
	containers, _, err := unstructured.NestedSlice(obj.Object, "spec", "template", "spec", "containers")
	if err != nil {
		return fmt.Errorf("containers of %s: %w", obj.GetName(), err)
	}
	var kept []any
	for _, c := range containers {
		c := c.(map[string]any)
		c["image"] = d.image
		if c["name"] == "agent" {
			args, _ := c["args"].([]any)
			for _, a := range d.agentArgs {
				args = append(args, a)
			}
			c["args"] = args
		}
		if add, ok, _ := unstructured.NestedStringSlice(c, "securityContext", "capabilities", "add"); ok {
			var grantable []any
			for _, capability := range add {
				if !d.missing[capability] {
					grantable = append(grantable, capability)
				}
			}
			if err := unstructured.SetNestedSlice(c, grantable, "securityContext", "capabilities", "add"); err != nil {
				return err
			}
		}
		env, _ := c["env"].([]any)
		c["env"] = append(env,
			map[string]any{"name": "KUBERNETES_SERVICE_HOST", "value": d.apiHost},
			map[string]any{"name": "KUBERNETES_SERVICE_PORT", "value": d.apiPort})
		kept = append(kept, c)
	}
	if err := unstructured.SetNestedSlice(obj.Object, kept, "spec", "template", "spec", "containers"); err != nil {
		return err
	}
	if obj.GetKind() == "Deployment" {
		return unstructured.SetNestedField(obj.Object, int64(0), "spec", "replicas")
	}
	if d.nodeName != "" {
		return unstructured.SetNestedStringMap(obj.Object, map[string]string{"kubernetes.io/hostname": d.nodeName},
			"spec", "template", "spec", "nodeSelector")
	}
	return nil
}

// apply applies the rendered manifests server-side with kubectl.
func apply(ctx context.Context, cp *cluster.ControlPlane, manifests []byte, dir string) error {
	file := filepath.Join(dir, "nodeward.yaml")
	if err := os.WriteFile(file, manifests, 0o600); err != nil {
		return fmt.Errorf("write the manifests: %w", err)
	}
	out, err := exec.CommandContext(ctx, cp.Binary("kubectl"), "--kubeconfig", cp.KubeconfigPath(),
		"apply", "--server-side", "--force-conflicts", "-f", file).CombinedOutput()
	if err != nil {
		return fmt.Errorf("kubectl apply: %w: %s", err, out)
	}
	return nil
}

func splitHost(host string) (string, string, error) {
	u, err := url.Parse(host)
	if err != nil {
		return "", "", fmt.Errorf("parse API server address %q: %w", host, err)
	}
	return u.Hostname(), u.Port(), nil
}

// missingCapabilities are the capabilities the manifests add that this
// process's bounding set lacks, so runc could not grant them either.
func missingCapabilities() (map[string]bool, error) {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return nil, fmt.Errorf("read capabilities: %w", err)
	}
	var bounding uint64
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "CapBnd:"); ok {
			if bounding, err = strconv.ParseUint(strings.TrimSpace(v), 16, 64); err != nil {
				return nil, fmt.Errorf("parse CapBnd: %w", err)
			}
		}
	}
	missing := map[string]bool{}
	for name, bit := range map[string]uint{"NET_ADMIN": 12, "SYS_CHROOT": 18, "SYS_ADMIN": 21, "SYS_BOOT": 22, "SYS_RESOURCE": 24} {
		if bounding&(1<<bit) == 0 {
			missing[name] = true
		}
	}
	return missing, nil
}
