package mco

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/nodeward/nodeward/api/kube"
	v1alpha1 "github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/daemon/update"
)

// The machine-config-daemon's node annotations, which an OpenShift Machine
// Config Operator's node controller reads and writes.
const (
	AnnotationCurrentConfig = "machineconfiguration.openshift.io/currentConfig"
	AnnotationDesiredConfig = "machineconfiguration.openshift.io/desiredConfig"
	AnnotationState         = "machineconfiguration.openshift.io/state"
	AnnotationReason        = "machineconfiguration.openshift.io/reason"

	StateDone     = "Done"
	StateWorking  = "Working"
	StateDegraded = "Degraded"
)

// MachineConfigResource is the MachineConfig resource, cluster-scoped.
func MachineConfigResource() schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: "machineconfiguration.openshift.io", Version: "v1", Resource: "machineconfigs"}
}

// Protocol lets an existing MCO node controller coordinate nodeward
// (--protocol=mco). The controller picks the nodes to update by setting
// desiredConfig, so a desiredConfig different from currentConfig is the
// grant; the target is the named MachineConfig's osImageURL followed by its
// kernelArguments. The agent reports state Working / Done / Degraded and a
// reason, and sets currentConfig to desiredConfig when done, as the
// machine-config-daemon does. There is no pre-staging (the target is known
// only with the grant) and no yield (the MCO has no such notion).
type Protocol struct {
	Client  *kube.Client
	Dynamic dynamic.Interface
	Node    string
	// Timeout bounds reading a MachineConfig; default 10 s.
	Timeout time.Duration
}

// Desired implements Protocol.
func (p *Protocol) Desired(ctx context.Context, node *corev1.Node) (update.Desired, error) {
	desired := node.Annotations[AnnotationDesiredConfig]
	if desired == "" {
		return update.Desired{}, nil
	}
	target, err := p.target(ctx, desired)
	if err != nil {
		return update.Desired{}, err
	}
	d := update.Desired{Target: target, GrantTarget: target}
	if desired != node.Annotations[AnnotationCurrentConfig] {
		d.Grant = desired
	}
	return d, nil
}

// target reads osImageURL and kernelArguments of MachineConfig name.
func (p *Protocol) target(ctx context.Context, name string) (string, error) {
	timeout := p.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	mc, err := p.Dynamic.Resource(MachineConfigResource()).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("read MachineConfig %s named by %s: %w", name, AnnotationDesiredConfig, err)
	}
	image, _, err := unstructured.NestedString(mc.Object, "spec", "osImageURL")
	if err != nil || image == "" {
		return "", fmt.Errorf("MachineConfig %s: spec.osImageURL is empty or not a string", name)
	}
	kargs, _, err := unstructured.NestedStringSlice(mc.Object, "spec", "kernelArguments")
	if err != nil {
		return "", fmt.Errorf("MachineConfig %s: spec.kernelArguments: %w", name, err)
	}
	return strings.Join(append([]string{image}, kargs...), " "), nil
}

// Report implements Protocol.
func (p *Protocol) Report(ctx context.Context, st update.State) error {
	state, reason := StateDone, ""
	switch {
	case st.Step == v1alpha1.StepDegraded || st.Step == v1alpha1.StepRolledBack || st.Step == v1alpha1.StepRollingBack:
		state, reason = StateDegraded, st.Reason
	case st.Step.HoldsSlot():
		state = StateWorking
	}
	set := map[string]*string{AnnotationState: &state, AnnotationReason: &reason}
	if st.Step == v1alpha1.StepDone && st.Target != "" {
		node, err := p.Client.Nodes().Get(ctx, p.Node, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("get node %s: %w", p.Node, err)
		}
		desired := node.Annotations[AnnotationDesiredConfig]
		// Only claim the desired config when it is what was applied: the
		// controller may have moved on while the agent finished.
		if target, err := p.target(ctx, desired); err == nil && target == st.Target {
			set[AnnotationCurrentConfig] = &desired
		}
	}
	return update.PatchAnnotations(ctx, p.Client, p.Node, set)
}
