// Package helmsync keeps the Helm chart (charts/nodeward) and the kustomize
// manifests (manifests/) rendering the same objects. It is its own Go module
// so that Helm's dependency tree stays out of nodeward's.
package helmsync

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

const repo = "../.."

type object = map[string]any

func key(o object) string {
	md, _ := o["metadata"].(map[string]any)
	ns, _ := md["namespace"].(string)
	name, _ := md["name"].(string)
	return fmt.Sprintf("%s %s/%s", o["kind"], ns, name)
}

func splitDocs(t *testing.T, what string, data []byte, into map[string]object) {
	t.Helper()
	for _, doc := range bytes.Split(data, []byte("\n---")) {
		var o object
		if err := yaml.Unmarshal(doc, &o); err != nil {
			t.Fatalf("%s: %v\n%s", what, err, doc)
		}
		if o == nil {
			continue
		}
		k := key(o)
		if _, dup := into[k]; dup {
			t.Errorf("%s renders %s twice", what, k)
		}
		into[k] = o
	}
}

func kustomize(t *testing.T, overlay string) map[string]object {
	t.Helper()
	return kustomizeDir(t, overlay, filepath.Join(repo, "manifests", overlay))
}

// kustomizeDir builds the kustomization in dir.
func kustomizeDir(t *testing.T, overlay, dir string) map[string]object {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", overlay, err)
	}
	out, err := m.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	objs := map[string]object{}
	splitDocs(t, "kustomize "+overlay, out, objs)
	return objs
}

func helm(t *testing.T, values map[string]any) map[string]object {
	t.Helper()
	chart, err := loader.Load(filepath.Join(repo, "charts", "nodeward"))
	if err != nil {
		t.Fatalf("load chart: %v", err)
	}
	vals, err := chartutil.ToRenderValues(chart, values,
		chartutil.ReleaseOptions{Name: "nodeward", Namespace: "nodeward-system", IsInstall: true}, chartutil.DefaultCapabilities)
	if err != nil {
		t.Fatal(err)
	}
	rendered, err := engine.Render(chart, vals)
	if err != nil {
		t.Fatalf("render chart: %v", err)
	}
	objs := map[string]object{}
	names := make([]string, 0, len(rendered))
	for n := range rendered {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if strings.HasSuffix(n, ".yaml") {
			splitDocs(t, n, []byte(rendered[n]), objs)
		}
	}
	return objs
}

// normalize drops what legitimately differs: managed-by (Helm says Helm,
// kustomize says kustomize), the images (kustomize's images: transformer
// against the chart's values; compared separately) and the order of the
// pod spec's lists merged by name, and of a container's volume mounts (a
// kustomize patch moves the items it patches or adds to the front; the API
// server merges them by key, and their order means nothing).
func normalize(o object) {
	walk(o, func(m map[string]any) {
		for _, field := range []string{"containers", "volumes", "volumeMounts"} {
			if l, ok := m[field].([]any); ok {
				sort.SliceStable(l, func(i, j int) bool { return itemName(l[i]) < itemName(l[j]) })
			}
		}
		if l, ok := m["labels"].(map[string]any); ok {
			delete(l, "app.kubernetes.io/managed-by")
		}
		if _, ok := m["image"].(string); ok {
			m["image"] = "<image>"
		}
	})
}

func itemName(v any) string {
	m, _ := v.(map[string]any)
	n, _ := m["name"].(string)
	return n
}

func walk(v any, f func(map[string]any)) {
	switch v := v.(type) {
	case map[string]any:
		f(v)
		for _, x := range v {
			walk(x, f)
		}
	case []any:
		for _, x := range v {
			walk(x, f)
		}
	}
}

// TestChartMatchesKustomize: for each platform and monitoring choice, the
// chart renders exactly the kustomize overlay's objects (kind, namespace,
// name) with the same content, labels and every spec field included, but
// for managed-by and the image references; with the kernel log and the OOM
// kills on, exactly the overlay with components/kernel-events
// (testdata/kernel-events-<platform>).
func TestChartMatchesKustomize(t *testing.T) {
	kernelEvents := map[string]any{"kernelLog": map[string]any{"enabled": true}, "oomKills": map[string]any{"enabled": true}}
	for _, c := range []struct {
		overlay string
		dir     string
		values  map[string]any
	}{
		{"overlays/kubernetes", "", map[string]any{"platform": "kubernetes"}},
		{"overlays/openshift", "", map[string]any{"platform": "openshift"}},
		{"overlays/kubernetes+components/kernel-events", "testdata/kernel-events-kubernetes", map[string]any{"platform": "kubernetes", "agent": kernelEvents}},
		{"overlays/openshift+components/kernel-events", "testdata/kernel-events-openshift", map[string]any{"platform": "openshift", "agent": kernelEvents}},
	} {
		t.Run(c.overlay, func(t *testing.T) {
			var want map[string]object
			if c.dir == "" {
				want = kustomize(t, c.overlay)
			} else {
				want = kustomizeDir(t, c.overlay, c.dir)
			}
			got := helm(t, c.values)
			for k, w := range want {
				g, ok := got[k]
				if !ok {
					t.Errorf("the chart does not render %s", k)
					continue
				}
				normalize(w)
				normalize(g)
				if !reflect.DeepEqual(w, g) {
					t.Errorf("%s differs (kustomize -, helm +):\n%s", k, lineDiff(w, g))
				}
			}
			for k := range got {
				if _, ok := want[k]; !ok {
					t.Errorf("the chart renders %s, which kustomize does not", k)
				}
			}
		})
	}
}

// TestChartValues: monitoring off drops the monitoring kinds; the image
// comes from the values (a digest wins over the tag); the version label is
// the chart's appVersion; a runtime endpoint reaches the agent's config.
func TestChartValues(t *testing.T) {
	objs := helm(t, map[string]any{"monitoring": map[string]any{"enabled": false},
		"image":   map[string]any{"repository": "registry.example/nodeward", "tag": "1.2.3", "digest": "sha256:" + strings.Repeat("a", 64)},
		"runtime": map[string]any{"endpoint": "unix:///run/crio/crio.sock"}})
	for k := range objs {
		if strings.HasPrefix(k, "ServiceMonitor ") || strings.HasPrefix(k, "PrometheusRule ") {
			t.Errorf("monitoring disabled, yet %s is rendered", k)
		}
	}
	ds, ok := objs["DaemonSet nodeward-system/nodeward-agent"]
	if !ok {
		t.Fatal("no agent DaemonSet")
	}
	y, _ := yaml.Marshal(ds)
	if !bytes.Contains(y, []byte("image: registry.example/nodeward@sha256:"+strings.Repeat("a", 64))) {
		t.Errorf("agent image not the digest of the values:\n%s", y)
	}
	cm, _ := yaml.Marshal(objs["ConfigMap nodeward-system/nodeward-agent-config"])
	if !bytes.Contains(cm, []byte("unix:///run/crio/crio.sock")) {
		t.Errorf("runtime endpoint not in the agent config:\n%s", cm)
	}
	chartYAML, err := os.ReadFile(filepath.Join(repo, "charts", "nodeward", "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var chart struct {
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal(chartYAML, &chart); err != nil {
		t.Fatal(err)
	}
	for k, o := range kustomize(t, "overlays/kubernetes") {
		l, _ := o["metadata"].(map[string]any)["labels"].(map[string]any)
		if l["app.kubernetes.io/version"] != chart.AppVersion {
			t.Errorf("%s: version label %v, want the chart's appVersion %s", k, l["app.kubernetes.io/version"], chart.AppVersion)
		}
	}
	if _, err := func() (map[string]string, error) {
		c, err := loader.Load(filepath.Join(repo, "charts", "nodeward"))
		if err != nil {
			return nil, err
		}
		v, err := chartutil.ToRenderValues(c, map[string]any{"platform": "gke"}, chartutil.ReleaseOptions{Name: "nodeward"}, chartutil.DefaultCapabilities)
		if err != nil {
			return nil, err
		}
		return engine.Render(c, v)
	}(); err == nil || !strings.Contains(err.Error(), "platform") {
		t.Errorf("platform gke: %v, want an error naming platform", err)
	}
}

// TestChartOOMKillsAlone: the OOM kills without the kernel log mount the
// host's cgroup filesystem but leave the container unprivileged, and a
// cgroupRoot value reaches the agent's config.
func TestChartOOMKillsAlone(t *testing.T) {
	root := "/host/sys/fs/cgroup/memory/kubepods"
	objs := helm(t, map[string]any{"agent": map[string]any{"oomKills": map[string]any{"enabled": true, "cgroupRoot": root}}})
	cm, _ := yaml.Marshal(objs["ConfigMap nodeward-system/nodeward-agent-config"])
	for _, want := range []string{"cgroupFS: /host/sys/fs/cgroup", "cgroupRoot: \"" + root + "\""} {
		if !bytes.Contains(cm, []byte(want)) {
			t.Errorf("agent config lacks %q:\n%s", want, cm)
		}
	}
	if bytes.Contains(cm, []byte("kernel:")) {
		t.Errorf("kernel log on in the agent config with agent.kernelLog off:\n%s", cm)
	}
	ds, _ := yaml.Marshal(objs["DaemonSet nodeward-system/nodeward-agent"])
	for _, want := range []string{"privileged: false", "allowPrivilegeEscalation: false", "mountPath: /host/sys/fs/cgroup", "path: /sys/fs/cgroup"} {
		if !bytes.Contains(ds, []byte(want)) {
			t.Errorf("agent DaemonSet lacks %q:\n%s", want, ds)
		}
	}
	if bytes.Contains(ds, []byte("kmsg")) {
		t.Errorf("agent DaemonSet mounts /dev/kmsg with agent.kernelLog off:\n%s", ds)
	}
}

// lineDiff lists the lines of one YAML rendering missing from the other.
func lineDiff(a, b object) string {
	ay, _ := yaml.Marshal(a)
	by, _ := yaml.Marshal(b)
	count := func(y []byte) map[string]int {
		m := map[string]int{}
		for _, l := range strings.Split(string(y), "\n") {
			m[l]++
		}
		return m
	}
	ca, cb := count(ay), count(by)
	var out []string
	for _, l := range strings.Split(string(ay), "\n") {
		if cb[l] < ca[l] {
			out = append(out, "- "+l)
			ca[l]--
		}
	}
	ca = count(ay)
	for _, l := range strings.Split(string(by), "\n") {
		if ca[l] < cb[l] {
			out = append(out, "+ "+l)
			cb[l]--
		}
	}
	return strings.Join(out, "\n")
}
