package deploy_test

import (
	"bytes"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/nodeward/nodeward/conditions"
	"github.com/nodeward/nodeward/conditions/taints"
)

// rendered is one overlay built by kubectl's kustomize, split by kind/name.
type rendered map[string][]byte

func build(t *testing.T, dir string) rendered {
	t.Helper()
	cp := env.ControlPlane(t) // for its kubectl; nothing is sent to the server
	out := kubectl(t, cp, "kustomize", filepath.Join(manifestsDir(t), dir))
	objs := rendered{}
	for _, doc := range strings.Split(out, "\n---\n") {
		var meta struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatalf("kustomize output of %s: %v", dir, err)
		}
		objs[meta.Kind+"/"+meta.Metadata.Name] = []byte(doc)
	}
	return objs
}

func (r rendered) decode(t *testing.T, key string, into any) {
	t.Helper()
	doc, ok := r[key]
	if !ok {
		t.Fatalf("%s is not in the build", key)
	}
	if err := yaml.UnmarshalStrict(doc, into); err != nil {
		t.Fatalf("decode %s: %v", key, err)
	}
}

// TestAgentDaemonSet checks the promises of the agent's pod in both overlays:
// every taint nodeward applies by default is tolerated, no liveness probe,
// a readiness probe, the node name from the downward API, only the needed
// capabilities, and the update protocol of the overlay.
func TestAgentDaemonSet(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		overlay string
		mco     bool // the agent speaks the Machine Config Operator's annotations
	}{
		{"overlays/kubernetes", false},
		{"overlays/openshift", true},
	} {
		t.Run(c.overlay, func(t *testing.T) {
			t.Parallel()
			var ds appsv1.DaemonSet
			build(t, c.overlay).decode(t, "DaemonSet/nodeward-agent", &ds)
			spec := ds.Spec.Template.Spec
			if spec.PriorityClassName != "system-node-critical" {
				t.Errorf("priorityClassName = %q, want system-node-critical", spec.PriorityClassName)
			}
			if !spec.HostNetwork || spec.HostPID || spec.HostIPC {
				t.Errorf("hostNetwork=%v hostPID=%v hostIPC=%v: want only hostNetwork (netlink)", spec.HostNetwork, spec.HostPID, spec.HostIPC)
			}
			for _, p := range conditions.DefaultTaintPolicy() {
				taint := p.Taint()
				if !slices.ContainsFunc(spec.Tolerations, func(tol corev1.Toleration) bool { return taints.Tolerates(tol, taint) }) {
					t.Errorf("the agent does not tolerate the taint it applies itself: %s", taints.Format(taint))
				}
			}
			for _, key := range []string{"node.kubernetes.io/unschedulable", "node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"} {
				taint := corev1.Taint{Key: key, Effect: corev1.TaintEffectNoExecute}
				if key == "node.kubernetes.io/unschedulable" {
					taint.Effect = corev1.TaintEffectNoSchedule
				}
				if !slices.ContainsFunc(spec.Tolerations, func(tol corev1.Toleration) bool { return taints.Tolerates(tol, taint) }) {
					t.Errorf("the agent does not tolerate %s", taints.Format(taint))
				}
			}
			agent := container(t, spec, "agent")
			if agent.LivenessProbe != nil {
				t.Error("the agent has a liveness probe: it could be killed in the middle of an OS update")
			}
			if agent.ReadinessProbe == nil {
				t.Error("the agent has no readiness probe")
			}
			if got := slices.Contains(agent.Args, "--protocol=mco"); got != c.mco {
				t.Errorf("agent args %q: --protocol=mco present = %v, want %v", agent.Args, got, c.mco)
			}
			if !slices.ContainsFunc(agent.Env, func(e corev1.EnvVar) bool {
				return e.Name == "NODE_NAME" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName"
			}) {
				t.Error("NODE_NAME does not come from the downward API (spec.nodeName)")
			}
			sc := agent.SecurityContext
			if sc == nil || sc.Capabilities == nil {
				t.Fatal("the agent has no securityContext capabilities")
			}
			if sc.Privileged != nil && *sc.Privileged {
				t.Error("the agent runs privileged")
			}
			if !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
				t.Errorf("capabilities dropped = %v, want [ALL]", sc.Capabilities.Drop)
			}
			got := slices.Sorted(slices.Values(sc.Capabilities.Add))
			want := []corev1.Capability{"SYS_BOOT", "SYS_CHROOT", "SYS_RESOURCE"}
			if !slices.Equal(got, want) {
				t.Errorf("capabilities added = %v, want exactly %v", got, want)
			}
			// One container (no proxy sidecar), one port: the agent's own
			// authenticating metrics endpoint, on the node's address.
			if len(spec.Containers) != 1 {
				t.Errorf("agent pod has %d containers, want the agent alone", len(spec.Containers))
			}
			if len(agent.Ports) != 1 || agent.Ports[0].Name != "https-metrics" || agent.Ports[0].ContainerPort != 9742 {
				t.Errorf("agent ports %+v, want https-metrics 9742 only", agent.Ports)
			}
			if !slices.Contains(agent.Args, "--metrics-address=$(HOST_IP):9742") {
				t.Errorf("agent args %q: the metrics endpoint must listen on the node's address", agent.Args)
			}
			if p := agent.ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Scheme != corev1.URISchemeHTTPS || p.HTTPGet.Path != "/readyz" {
				t.Errorf("agent readiness probe %+v, want HTTPS /readyz", p)
			}
		})
	}
}

// TestCoordinatorDeployment: two replicas with leader election on vanilla
// Kubernetes, none at all in MCO mode.
func TestCoordinatorDeployment(t *testing.T) {
	t.Parallel()
	var d appsv1.Deployment
	build(t, "overlays/kubernetes").decode(t, "Deployment/nodeward-coordinator", &d)
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
		t.Errorf("coordinator replicas = %v, want 2", d.Spec.Replicas)
	}
	c := container(t, d.Spec.Template.Spec, "coordinator")
	if !slices.Contains(c.Args, "--leader-elect=true") {
		t.Errorf("coordinator args %q lack --leader-elect=true", c.Args)
	}
	if c.LivenessProbe == nil || c.LivenessProbe.HTTPGet == nil || c.LivenessProbe.HTTPGet.Path != "/healthz" {
		t.Errorf("coordinator liveness probe %+v, want /healthz (its loops' progress)", c.LivenessProbe)
	}
	if len(d.Spec.Template.Spec.Containers) != 1 {
		t.Errorf("coordinator pod has %d containers, want the coordinator alone", len(d.Spec.Template.Spec.Containers))
	}
	if !slices.Contains(c.Args, "--metrics-auth=kubernetes") {
		t.Errorf("coordinator args %q lack --metrics-auth=kubernetes", c.Args)
	}
	for key := range build(t, "overlays/openshift") {
		if strings.Contains(key, "nodeward-coordinator") {
			t.Errorf("the openshift overlay (MCO mode) still renders %s", key)
		}
	}
}

// TestRootIsKubernetesOverlay: `kubectl apply -k manifests/` installs the
// vanilla overlay, byte for byte.
func TestRootIsKubernetesOverlay(t *testing.T) {
	t.Parallel()
	root, overlay := build(t, "."), build(t, "overlays/kubernetes")
	if len(root) != len(overlay) {
		t.Fatalf("manifests/ renders %d objects, overlays/kubernetes %d", len(root), len(overlay))
	}
	for key, doc := range overlay {
		if !bytes.Equal(root[key], doc) {
			t.Errorf("%s differs between manifests/ and overlays/kubernetes", key)
		}
	}
}

func container(t *testing.T, spec corev1.PodSpec, name string) corev1.Container {
	t.Helper()
	for _, c := range spec.Containers {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no container %s", name)
	return corev1.Container{}
}
