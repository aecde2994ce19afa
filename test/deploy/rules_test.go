package deploy_test

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"
)

// recommendedLabels are Kubernetes' recommended labels, on every object.
var recommendedLabels = []string{"name", "instance", "version", "component", "part-of", "managed-by"}

// TestManifestRules: in both overlays every object carries the
// recommended labels; the agent tolerates every taint with one Exists
// toleration; no hostPath is a socket file (a restarted runtime would leave
// the pod with the dead inode) and the CRI socket directories are mounted
// so that a missing one cannot stop the pod; host commands run chrooted
// into /host.
func TestManifestRules(t *testing.T) {
	t.Parallel()
	for _, overlay := range []string{"overlays/kubernetes", "overlays/openshift"} {
		t.Run(overlay, func(t *testing.T) {
			t.Parallel()
			r := build(t, overlay)
			for key, doc := range r {
				var obj struct {
					Metadata metav1.ObjectMeta `json:"metadata"`
				}
				if err := yaml.Unmarshal(doc, &obj); err != nil {
					t.Fatalf("%s: %v", key, err)
				}
				for _, l := range recommendedLabels {
					if obj.Metadata.Labels["app.kubernetes.io/"+l] == "" {
						t.Errorf("%s lacks the label app.kubernetes.io/%s", key, l)
					}
				}
			}
			var ds appsv1.DaemonSet
			r.decode(t, "DaemonSet/nodeward-agent", &ds)
			spec := ds.Spec.Template.Spec
			if want := []corev1.Toleration{{Operator: corev1.TolerationOpExists}}; !slices.Equal(spec.Tolerations, want) {
				t.Errorf("agent tolerations %+v, want exactly one {operator: Exists}", spec.Tolerations)
			}
			for _, l := range recommendedLabels {
				if ds.Spec.Template.Labels["app.kubernetes.io/"+l] == "" {
					t.Errorf("the agent's pod template lacks app.kubernetes.io/%s", l)
				}
			}
			if want := map[string]string{"app.kubernetes.io/name": "nodeward-agent"}; !maps(ds.Spec.Selector.MatchLabels, want) {
				t.Errorf("DaemonSet selector %v, want %v (selectors are immutable)", ds.Spec.Selector.MatchLabels, want)
			}
			dirs := map[string]bool{}
			for _, v := range spec.Volumes {
				if v.HostPath == nil {
					continue
				}
				if v.HostPath.Type != nil && *v.HostPath.Type == corev1.HostPathSocket {
					t.Errorf("volume %s mounts the socket file %s: mount its directory", v.Name, v.HostPath.Path)
				}
				if strings.HasPrefix(v.HostPath.Path, "/run/containerd") || strings.HasPrefix(v.HostPath.Path, "/run/crio") {
					if v.HostPath.Type == nil || *v.HostPath.Type != corev1.HostPathDirectoryOrCreate {
						t.Errorf("volume %s (%s): type %v, want DirectoryOrCreate (a missing runtime directory must not stop the pod)", v.Name, v.HostPath.Path, v.HostPath.Type)
					}
					dirs[v.HostPath.Path] = true
				}
			}
			want := map[string]bool{"/run/containerd": true, "/run/crio": true}
			if overlay == "overlays/openshift" {
				want = map[string]bool{"/run/crio": true} // CRI-O only
			}
			if !maps(dirs, want) {
				t.Errorf("runtime directories mounted %v, want %v", dirs, want)
			}
			var cm corev1.ConfigMap
			r.decode(t, "ConfigMap/nodeward-agent-config", &cm)
			var cfg struct {
				HostRoot string `json:"hostRoot"`
				Runtime  struct {
					Endpoint string `json:"endpoint"`
				} `json:"runtime"`
			}
			if err := yaml.Unmarshal([]byte(cm.Data["config.yaml"]), &cfg); err != nil {
				t.Fatal(err)
			}
			if cfg.HostRoot != "/host" || cfg.Runtime.Endpoint != "" {
				t.Errorf("agent config hostRoot %q runtime.endpoint %q, want /host and empty (detected)", cfg.HostRoot, cfg.Runtime.Endpoint)
			}
			if overlay == "overlays/openshift" {
				for key, doc := range r {
					if bytes.Contains(doc, []byte("containerd")) {
						t.Errorf("%s mentions containerd in the CRI-O overlay", key)
					}
					if bytes.Contains(doc, []byte("openshift.io/cluster-monitoring")) || bytes.Contains(doc, []byte("bearerTokenFile")) {
						t.Errorf("%s uses the platform monitoring stack; user-workload monitoring is the supported route", key)
					}
				}
			}
		})
	}
}

// TestCoordinatorPDB: one replica at a time may be evicted, selecting the
// coordinator's pods, and unhealthy replicas never block a drain.
func TestCoordinatorPDB(t *testing.T) {
	t.Parallel()
	r := build(t, "overlays/kubernetes")
	var pdb policyv1.PodDisruptionBudget
	r.decode(t, "PodDisruptionBudget/nodeward-coordinator", &pdb)
	var d appsv1.Deployment
	r.decode(t, "Deployment/nodeward-coordinator", &d)
	if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 || pdb.Spec.MinAvailable != nil {
		t.Errorf("PDB maxUnavailable %v minAvailable %v, want maxUnavailable 1 only", pdb.Spec.MaxUnavailable, pdb.Spec.MinAvailable)
	}
	if p := pdb.Spec.UnhealthyPodEvictionPolicy; p == nil || *p != policyv1.AlwaysAllow {
		t.Errorf("unhealthyPodEvictionPolicy %v, want AlwaysAllow", p)
	}
	sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
	if err != nil || sel.Empty() || !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
		t.Errorf("PDB selector %v (%v) does not select the coordinator's pods %v", pdb.Spec.Selector, err, d.Spec.Template.Labels)
	}
}

func maps[V comparable](got, want map[string]V) bool {
	if len(got) != len(want) {
		return false
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			return false
		}
	}
	return true
}
