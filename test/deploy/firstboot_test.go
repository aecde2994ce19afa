package deploy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/nodeward/nodeward/api/kube"
	"github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/daemon/mco"
	"github.com/nodeward/nodeward/test/cluster"
)

// The first-boot file of a new node, as the machine config server writes
// it: the rendered config and the image it booted into (daemon/mco,
// Bootstrap).
const (
	firstConfig = "rendered-worker-1"
	firstImage  = "quay.example/ocp/os@sha256:1"
	otherConfig = "rendered-worker-2"
	otherImage  = "quay.example/ocp/os@sha256:2"
)

func firstBootFile() map[string]string {
	return map[string]string{
		mco.AnnotationCurrentConfig:    firstConfig,
		mco.AnnotationDesiredConfig:    firstConfig,
		mco.AnnotationFirstPivotConfig: firstConfig,
		mco.AnnotationCurrentImage:     firstImage,
		mco.AnnotationDesiredImage:     firstImage,
		mco.AnnotationState:            mco.StateDone,
	}
}

// firstBootPatch is the agent's first-boot write (mco.Protocol's
// bootstrap): the file's annotations but its state, and state Working;
// change alters it.
func firstBootPatch(change map[string]*string) map[string]*string {
	set := map[string]*string{}
	for k, v := range firstBootFile() {
		set[k] = ptrTo(v)
	}
	set[mco.AnnotationState] = ptrTo(mco.StateWorking)
	for k, v := range change {
		if v == nil {
			delete(set, k)
		} else {
			set[k] = v
		}
	}
	return set
}

// TestAgentFirstBootWrite runs the agent's pod-bound token against the
// OpenShift overlay's own-node policy on a control plane of its own (the
// package's shared one has the base's policy of the same name installed).
// The agent's real bootstrap (mco.Protocol reading a first-boot file) is
// admitted on a node without currentConfig; desiredConfig, firstPivotConfig
// and desiredImage naming anything but the current config and image of the
// same write are refused, and so is every later change or removal of them,
// and adding them on a node that already reports a currentConfig.
func TestAgentFirstBootWrite(t *testing.T) {
	t.Parallel()
	env.ControlPlane(t) // skips without control-plane binaries
	cp := ownControlPlane(t)
	installBaseWith(t, cp, "overlays/openshift", "ValidatingAdmissionPolicy/nodeward-agent-own-node")
	requireTypeChecked(t, cp, "nodeward-agent-own-node")

	node := cp.CreateNodes(t, cluster.NodeSpec{Prefix: "firstboot", Count: 1, Role: "worker"})[0]
	booted := cp.CreateNodes(t, cluster.NodeSpec{Prefix: "booted", Count: 1, Role: "worker", Annotations: map[string]string{
		mco.AnnotationCurrentConfig: firstConfig, mco.AnnotationCurrentImage: firstImage, mco.AnnotationState: mco.StateDone,
	}})[0]
	agentConfig := serviceAccountConfig(t, cp, agentServiceAccount, boundTo{kind: "Pod", name: agentPodOn(t, cp, node), namespace: v1alpha1.AgentLeaseNamespace})
	agent, err := kubernetes.NewForConfig(agentConfig)
	if err != nil {
		t.Fatal(err)
	}
	bootedAgent := serviceAccountClient(t, cp, agentServiceAccount, boundTo{kind: "Pod", name: agentPodOn(t, cp, booted), namespace: v1alpha1.AgentLeaseNamespace})
	ctx := context.Background()

	// Only the overlay's policy was ever installed here: once it refuses a
	// foreign key, it is the one the API server enforces.
	tries := 0
	waitDenied(t, "the OpenShift own-node policy to refuse the agent's foreign annotations", msgForeignAnnotation, func(ctx context.Context) error {
		tries++
		return mergeAnnotations(ctx, agent, node, "", map[string]*string{fmt.Sprintf("nodeward.test/gate-%d", tries): ptrTo("1")})
	})

	t.Run("first-boot writes that are not the file's", func(t *testing.T) {
		requireRefusedKeys(t, "desiredConfig other than the currentConfig of the same write",
			mergeAnnotations(ctx, agent, node, "", firstBootPatch(map[string]*string{mco.AnnotationDesiredConfig: ptrTo(otherConfig)})),
			mco.AnnotationDesiredConfig, mco.AnnotationFirstPivotConfig, mco.AnnotationDesiredImage)
		requireRefusedKeys(t, "firstPivotConfig other than the currentConfig of the same write",
			mergeAnnotations(ctx, agent, node, "", firstBootPatch(map[string]*string{mco.AnnotationFirstPivotConfig: ptrTo(otherConfig)})),
			mco.AnnotationDesiredConfig, mco.AnnotationFirstPivotConfig, mco.AnnotationDesiredImage)
		requireRefusedKeys(t, "desiredImage other than the currentImage of the same write",
			mergeAnnotations(ctx, agent, node, "", firstBootPatch(map[string]*string{mco.AnnotationDesiredImage: ptrTo(otherImage)})),
			mco.AnnotationDesiredConfig, mco.AnnotationFirstPivotConfig, mco.AnnotationDesiredImage)
		requireRefusedKeys(t, "desiredImage without a currentImage",
			mergeAnnotations(ctx, agent, node, "", firstBootPatch(map[string]*string{mco.AnnotationCurrentImage: nil})),
			mco.AnnotationDesiredConfig, mco.AnnotationFirstPivotConfig, mco.AnnotationDesiredImage)
		requireRefusedKeys(t, "desiredConfig without a currentConfig",
			mergeAnnotations(ctx, agent, node, "", map[string]*string{mco.AnnotationDesiredConfig: ptrTo(firstConfig)}),
			mco.AnnotationDesiredConfig)
		requireRefusedKeys(t, "a foreign key in the first-boot write",
			mergeAnnotations(ctx, agent, node, "", firstBootPatch(map[string]*string{foreignKey: ptrTo("someone")})),
			foreignKey)
		requireRefusedKeys(t, "lastAppliedDrain in the first-boot write",
			mergeAnnotations(ctx, agent, node, "", firstBootPatch(map[string]*string{mco.AnnotationLastAppliedDrain: ptrTo("uncordon-" + firstConfig)})),
			mco.AnnotationLastAppliedDrain)
		n, err := cp.Client().CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{mco.AnnotationCurrentConfig, mco.AnnotationDesiredConfig, mco.AnnotationFirstPivotConfig, mco.AnnotationDesiredImage} {
			if v, ok := n.Annotations[k]; ok {
				t.Errorf("%s = %q after the refused writes, want none", k, v)
			}
		}
	})

	t.Run("the agent's bootstrap from the first-boot file", func(t *testing.T) {
		root := t.TempDir()
		data, err := json.Marshal(firstBootFile())
		if err != nil {
			t.Fatal(err)
		}
		file := filepath.Join(root, mco.NodeAnnotationsFile)
		if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, data, 0o644); err != nil {
			t.Fatal(err)
		}
		client, err := kube.NewForConfig(agentConfig)
		if err != nil {
			t.Fatal(err)
		}
		n, err := cp.Client().CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p := &mco.Protocol{Client: client, Node: node, Bootstrap: &mco.Bootstrap{Root: root}}
		d, err := p.Desired(ctx, n)
		requireAllowed(t, "the agent bootstraps its new node", err)
		if want := mco.Target(firstConfig, firstImage); d.Target != want || d.Grant != want {
			t.Errorf("after the bootstrap Desired = %+v, want target and first-pivot grant %q", d, want)
		}
		n, err = cp.Client().CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range firstBootPatch(nil) {
			if got := n.Annotations[k]; got != *v {
				t.Errorf("%s = %q after the bootstrap, want %q", k, got, *v)
			}
		}
	})

	t.Run("first-boot keys after the first boot", func(t *testing.T) {
		for _, k := range []string{mco.AnnotationDesiredConfig, mco.AnnotationFirstPivotConfig} {
			requireRefusedKeys(t, "the agent changes "+k,
				mergeAnnotations(ctx, agent, node, "", map[string]*string{k: ptrTo(otherConfig)}), k)
			requireRefusedKeys(t, "the agent removes "+k,
				mergeAnnotations(ctx, agent, node, "", map[string]*string{k: nil}), k)
		}
		requireRefusedKeys(t, "the agent changes desiredImage",
			mergeAnnotations(ctx, agent, node, "", map[string]*string{mco.AnnotationDesiredImage: ptrTo(otherImage)}), mco.AnnotationDesiredImage)
		requireRefusedKeys(t, "the agent removes desiredImage",
			mergeAnnotations(ctx, agent, node, "", map[string]*string{mco.AnnotationDesiredImage: nil}), mco.AnnotationDesiredImage)
		requireRefusedKeys(t, "the agent reports and desires another config in one write",
			mergeAnnotations(ctx, agent, node, "", map[string]*string{
				mco.AnnotationCurrentConfig: ptrTo(otherConfig), mco.AnnotationDesiredConfig: ptrTo(otherConfig),
			}), mco.AnnotationDesiredConfig)
		// currentConfig is the agent's to write, removal included; a second
		// first boot, consistent in itself, still cannot replace the
		// desiredConfig and firstPivotConfig the node has.
		requireAllowed(t, "the agent removes its currentConfig",
			mergeAnnotations(ctx, agent, node, "", map[string]*string{mco.AnnotationCurrentConfig: nil}))
		requireRefusedKeys(t, "a second first boot with another config",
			mergeAnnotations(ctx, agent, node, "", firstBootPatch(map[string]*string{
				mco.AnnotationCurrentConfig: ptrTo(otherConfig), mco.AnnotationDesiredConfig: ptrTo(otherConfig),
				mco.AnnotationFirstPivotConfig: ptrTo(otherConfig),
			})), mco.AnnotationDesiredConfig, mco.AnnotationFirstPivotConfig)
		requireRefusedKeys(t, "a second first boot without desiredConfig",
			mergeAnnotations(ctx, agent, node, "", map[string]*string{
				mco.AnnotationCurrentConfig: ptrTo(otherConfig), mco.AnnotationDesiredConfig: nil, mco.AnnotationFirstPivotConfig: nil,
			}), mco.AnnotationDesiredConfig, mco.AnnotationFirstPivotConfig)

		n, err := cp.Client().CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for k, want := range map[string]string{
			mco.AnnotationDesiredConfig: firstConfig, mco.AnnotationFirstPivotConfig: firstConfig, mco.AnnotationDesiredImage: firstImage,
		} {
			if got := n.Annotations[k]; got != want {
				t.Errorf("%s = %q after the refused writes, want %q", k, got, want)
			}
		}
	})

	t.Run("first-boot keys on a node that has a currentConfig", func(t *testing.T) {
		requireRefusedKeys(t, "the agent adds desiredConfig, equal to its currentConfig",
			mergeAnnotations(ctx, bootedAgent, booted, "", map[string]*string{mco.AnnotationDesiredConfig: ptrTo(firstConfig)}),
			mco.AnnotationDesiredConfig)
		requireRefusedKeys(t, "the agent adds desiredConfig, another config",
			mergeAnnotations(ctx, bootedAgent, booted, "", map[string]*string{mco.AnnotationDesiredConfig: ptrTo(otherConfig)}),
			mco.AnnotationDesiredConfig)
		requireRefusedKeys(t, "the agent sends the whole first-boot write",
			mergeAnnotations(ctx, bootedAgent, booted, "", firstBootPatch(nil)),
			mco.AnnotationDesiredConfig, mco.AnnotationFirstPivotConfig, mco.AnnotationDesiredImage)
		requireAllowed(t, "the agent reports its state", mergeAnnotations(ctx, bootedAgent, booted, "", map[string]*string{
			mco.AnnotationState: ptrTo(mco.StateWorking), mco.AnnotationCurrentConfig: ptrTo(firstConfig),
		}))
	})
}

// TestBaseRefusesFirstBootWrite: outside MCO mode the agent owns no
// machine-config key, and the base's policy refuses the first-boot write.
func TestBaseRefusesFirstBootWrite(t *testing.T) {
	t.Parallel()
	cp := env.ControlPlane(t)
	installBase(t, cp)
	node := cp.CreateNodes(t, cluster.NodeSpec{Prefix: "basefirstboot", Count: 1, Role: "worker"})[0]
	agent := serviceAccountClient(t, cp, agentServiceAccount, boundTo{kind: "Pod", name: agentPodOn(t, cp, node), namespace: v1alpha1.AgentLeaseNamespace})
	tries := 0
	waitDenied(t, "the own-keys rule to refuse the agent's annotations", msgForeignAnnotation, func(ctx context.Context) error {
		tries++
		return mergeAnnotations(ctx, agent, node, "", map[string]*string{fmt.Sprintf("nodeward.test/gate-%d", tries): ptrTo("1")})
	})
	err := mergeAnnotations(context.Background(), agent, node, "", firstBootPatch(nil))
	var keys []string
	for k := range firstBootPatch(nil) {
		keys = append(keys, k)
	}
	requireRefusedKeys(t, "the first-boot write under the base's policy", err, keys...)
}

// requireRefusedKeys fails unless err is the own-keys rule's refusal naming
// exactly keys.
func requireRefusedKeys(t *testing.T, what string, err error, keys ...string) {
	t.Helper()
	requireForbidden(t, what, err, msgForeignAnnotation)
	msg := err.Error()
	i := strings.LastIndex(msg, "), not ")
	if i < 0 {
		t.Fatalf("%s: the refusal names no key: %v", what, err)
	}
	requireSameSet(t, what+": refused keys", strings.Split(msg[i+len("), not "):], ", "), keys)
}

// ownControlPlane starts a control plane for one test, stopped at its end.
func ownControlPlane(t *testing.T) *cluster.ControlPlane {
	t.Helper()
	binDir, err := cluster.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cp, err := cluster.Start(ctx, cluster.Options{BinDir: binDir, Log: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cp.Stop()
		if !t.Failed() {
			os.RemoveAll(cp.Dir())
		} else {
			t.Logf("component logs kept in %s", cp.Dir())
		}
	})
	return cp
}

// installBaseWith applies manifests/base with the objects named (kind/name)
// taken from overlay's build instead, so that no other version of them is
// ever installed.
func installBaseWith(t *testing.T, cp *cluster.ControlPlane, overlay string, replace ...string) {
	t.Helper()
	from := build(t, overlay)
	base := kubectl(t, cp, "kustomize", filepath.Join(manifestsDir(t), "base"))
	docs := strings.Split(base, "\n---\n")
	var done []string
	for i, doc := range docs {
		var meta struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatal(err)
		}
		if key := meta.Kind + "/" + meta.Metadata.Name; slices.Contains(replace, key) {
			docs[i] = string(from[key])
			done = append(done, key)
		}
	}
	requireSameSet(t, "objects replaced from "+overlay, done, replace)
	path := filepath.Join(t.TempDir(), "install.yaml")
	if err := os.WriteFile(path, []byte(strings.Join(docs, "\n---\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	kubectl(t, cp, "apply", "--server-side", "--field-manager=nodeward-test", "-f", path)
}
