package hostmode_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/nodeward/nodeward/test/cluster"
)

// mcoClusterSide are the objects of the OpenShift overlay an MCO-mode
// agent needs beyond the base's (manifests/host/README.md, "With the
// MCO"): its rights on the MCO's objects, and the own-node admission
// policy as the overlay patches it, which lets the agent write the
// machine-config-daemon's node annotations.
var mcoClusterSide = []string{
	"ClusterRole/nodeward-agent-mco",
	"ClusterRoleBinding/nodeward-agent-mco",
	"ValidatingAdmissionPolicy/nodeward-agent-own-node",
}

// installMCOClusterSide applies mcoClusterSide, rendered from
// manifests/overlays/openshift by kubectl's kustomize, over the base's
// cluster side, and puts the base's own-node policy back when the test
// ends (the package's other tests run the base's).
func installMCOClusterSide(t *testing.T, cp *cluster.ControlPlane) {
	t.Helper()
	if err := installClusterSide(cp); err != nil {
		t.Fatalf("install the cluster side: %v", err)
	}
	kubectl := func(args ...string) ([]byte, error) {
		out, err := exec.Command(cp.Binary("kubectl"), append([]string{"--kubeconfig", cp.KubeconfigPath()}, args...)...).CombinedOutput()
		if err != nil {
			return nil, fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, out)
		}
		return out, nil
	}
	rendered, err := kubectl("kustomize", filepath.Join(repoRoot, "manifests", "overlays", "openshift"))
	if err != nil {
		t.Fatal(err)
	}
	objects, err := selectObjects(rendered, mcoClusterSide)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "mco-cluster-side.yaml")
	if err := os.WriteFile(file, objects, 0o600); err != nil {
		t.Fatal(err)
	}
	base := filepath.Join(repoRoot, "manifests", "base", "admission-policy.yaml")
	t.Cleanup(func() {
		if _, err := kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=nodeward-hostmode-test", "-f", base); err != nil {
			t.Errorf("put the base's admission policies back: %v", err)
		}
		if _, err := kubectl("delete", "--ignore-not-found", "clusterrolebinding/nodeward-agent-mco", "clusterrole/nodeward-agent-mco"); err != nil {
			t.Errorf("delete the MCO rights: %v", err)
		}
	})
	if _, err := kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=nodeward-hostmode-test", "-f", file); err != nil {
		t.Fatal(err)
	}
}

// selectObjects keeps the documents of a YAML stream named kind/name in
// want, failing when one is missing.
func selectObjects(stream []byte, want []string) ([]byte, error) {
	var out []string
	var found []string
	for _, doc := range strings.Split("\n"+string(stream), "\n---\n") {
		var obj struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			return nil, fmt.Errorf("the OpenShift overlay: %w", err)
		}
		if id := obj.Kind + "/" + obj.Metadata.Name; slices.Contains(want, id) {
			out, found = append(out, doc), append(found, id)
		}
	}
	if len(found) != len(want) {
		return nil, fmt.Errorf("the OpenShift overlay has %v of %v", found, want)
	}
	return []byte(strings.Join(out, "\n---\n")), nil
}
