package machineapi

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

// Hook is a Machine lifecycle hook (spec.lifecycleHooks.preDrain[] or
// preTerminate[]): Name is 3–256 characters, CamelCase or domain/Name;
// Owner 3–512.
type Hook struct {
	Name  string `json:"name"`
	Owner string `json:"owner"`
}

// MachineSpec describes a Machine to create.
type MachineSpec struct {
	Name string
	// Role ("master", "worker") sets the machine-role and machine-type
	// labels; the stub's Node gets node-role.kubernetes.io/<Role>
	// (control-plane too for "master").
	Role string
	// NodeName adopts an existing (kwok) node instead of having the stub
	// create one: the node gets spec.providerID kwok://<NodeName> (it must
	// have none or that one) and the Machine the same, so the nodelink
	// controller links them.
	NodeName          string
	PreDrainHooks     []Hook
	PreTerminateHooks []Hook
	// CreateDelay holds the stub's Create back until the Machine is this
	// old (phase Provisioning meanwhile).
	CreateDelay time.Duration
	// CreateError makes the stub's Create fail with this message: the
	// Machine goes Failed.
	CreateError string
	// NoNode makes the stub set the providerID but create no Node: the
	// Machine stays Provisioned without a nodeRef.
	NoNode      bool
	Labels      map[string]string
	Annotations map[string]string
}

// CreateMachine creates a Machine in Namespace, failing the test on error.
func (c *Controllers) CreateMachine(ctx context.Context, spec MachineSpec) {
	c.t.Helper()
	labels := machineLabels(spec.Role, spec.Labels)
	annotations := stubAnnotations(spec.CreateDelay, spec.CreateError, spec.NoNode, spec.Annotations)
	mspec := machineSpecObject(spec.PreDrainHooks, spec.PreTerminateHooks)
	if spec.NodeName != "" {
		providerID := ProviderIDPrefix + spec.NodeName
		if err := c.setNodeProviderID(ctx, spec.NodeName, providerID); err != nil {
			c.t.Fatal(err)
		}
		mspec["providerID"] = providerID
	}
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "machine.openshift.io/v1beta1",
		"kind":       "Machine",
		"metadata": map[string]any{
			"name": spec.Name, "namespace": Namespace,
			"labels": toAny(labels), "annotations": toAny(annotations),
		},
		"spec": mspec,
	}}
	if _, err := c.Dynamic.Resource(MachineResource).Namespace(Namespace).Create(ctx, obj, metav1.CreateOptions{}); err != nil {
		c.t.Fatalf("create Machine %s: %v", spec.Name, err)
	}
}

func (c *Controllers) setNodeProviderID(ctx context.Context, node, providerID string) error {
	n, err := c.Kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("adopt node %s: %w", node, err)
	}
	switch n.Spec.ProviderID {
	case providerID:
		return nil
	case "":
	default:
		return fmt.Errorf("adopt node %s: it has providerID %q already (the API server allows setting it once)", node, n.Spec.ProviderID)
	}
	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"providerID": providerID}})
	if _, err := c.Kube.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("adopt node %s: set providerID: %w", node, err)
	}
	return nil
}

// machineLabels are the labels a Machine needs (the cluster label, or the
// controller refuses it) and its role's.
func machineLabels(role string, extra map[string]string) map[string]string {
	labels := map[string]string{LabelCluster: ClusterID}
	if role != "" {
		labels[LabelMachineRole] = role
		labels[LabelMachineType] = role
	}
	for k, v := range extra {
		labels[k] = v
	}
	return labels
}

func stubAnnotations(delay time.Duration, createError string, noNode bool, extra map[string]string) map[string]string {
	a := map[string]string{}
	if delay > 0 {
		a[AnnotationCreateDelay] = delay.String()
	}
	if createError != "" {
		a[AnnotationCreateError] = createError
	}
	if noNode {
		a[AnnotationNoNode] = "true"
	}
	for k, v := range extra {
		a[k] = v
	}
	return a
}

// machineSpecObject is a Machine's spec: a providerSpec value (any object
// will do, but one there must be) and the lifecycle hooks.
func machineSpecObject(preDrain, preTerminate []Hook) map[string]any {
	spec := map[string]any{
		"providerSpec": map[string]any{"value": map[string]any{
			"apiVersion": "nodeward.test/v1", "kind": "StubMachineProviderSpec",
		}},
	}
	hooks := map[string]any{}
	if len(preDrain) > 0 {
		hooks["preDrain"] = hooksAny(preDrain)
	}
	if len(preTerminate) > 0 {
		hooks["preTerminate"] = hooksAny(preTerminate)
	}
	if len(hooks) > 0 {
		spec["lifecycleHooks"] = hooks
	}
	return spec
}

func hooksAny(hooks []Hook) []any {
	out := make([]any, len(hooks))
	for i, h := range hooks {
		out[i] = map[string]any{"name": h.Name, "owner": h.Owner}
	}
	return out
}

func toAny(m map[string]string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// DeleteMachine deletes a Machine (the controllers then drain and delete
// its Node, hooks permitting), failing the test on error.
func (c *Controllers) DeleteMachine(ctx context.Context, name string) {
	c.t.Helper()
	if err := c.Dynamic.Resource(MachineResource).Namespace(Namespace).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		c.t.Fatalf("delete Machine %s: %v", name, err)
	}
}

// SetLifecycleHooks replaces a Machine's preDrain and preTerminate hooks
// (nil or empty removes them all), failing the test on error.
func (c *Controllers) SetLifecycleHooks(ctx context.Context, name string, preDrain, preTerminate []Hook) {
	c.t.Helper()
	hooks := map[string]any{"preDrain": nil, "preTerminate": nil}
	if len(preDrain) > 0 {
		hooks["preDrain"] = hooksAny(preDrain)
	}
	if len(preTerminate) > 0 {
		hooks["preTerminate"] = hooksAny(preTerminate)
	}
	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"lifecycleHooks": hooks}})
	if _, err := c.Dynamic.Resource(MachineResource).Namespace(Namespace).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		c.t.Fatalf("set lifecycle hooks of Machine %s: %v", name, err)
	}
}

// Condition is one of a Machine's status conditions.
type Condition struct {
	Type, Status, Reason, Message, Severity string
}

// Machine is what tests look at of a Machine.
type Machine struct {
	Name       string
	UID        string
	Phase      string // "", Provisioning, Provisioned, Running, Deleting, Failed
	ProviderID string
	// NodeRef is status.nodeRef.name: the linked Node.
	NodeRef string
	// DeletionTimestamp is set once the Machine is being deleted.
	DeletionTimestamp *time.Time
	Conditions        []Condition
	PreDrainHooks     []Hook
	PreTerminateHooks []Hook
	ErrorReason       string
	ErrorMessage      string
	// MachineSet is the controller owner's name, if a MachineSet owns it.
	MachineSet  string
	Labels      map[string]string
	Annotations map[string]string
	Object      *unstructured.Unstructured
}

// Condition returns the condition of type typ, or nil.
func (m *Machine) Condition(typ string) *Condition {
	for i := range m.Conditions {
		if m.Conditions[i].Type == typ {
			return &m.Conditions[i]
		}
	}
	return nil
}

// Machine reads a Machine; the error is the API's (IsNotFound once it is gone).
func (c *Controllers) Machine(ctx context.Context, name string) (*Machine, error) {
	obj, err := c.Dynamic.Resource(MachineResource).Namespace(Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	return machineFrom(obj)
}

// Machines lists the Machines matching a label selector ("" for all).
func (c *Controllers) Machines(ctx context.Context, selector string) ([]*Machine, error) {
	list, err := c.Dynamic.Resource(MachineResource).Namespace(Namespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil, err
	}
	out := make([]*Machine, 0, len(list.Items))
	for i := range list.Items {
		m, err := machineFrom(&list.Items[i])
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, nil
}

// machineJSON is the part of a Machine's JSON that Machine shows.
type machineJSON struct {
	Spec struct {
		ProviderID     string `json:"providerID"`
		LifecycleHooks struct {
			PreDrain     []Hook `json:"preDrain"`
			PreTerminate []Hook `json:"preTerminate"`
		} `json:"lifecycleHooks"`
	} `json:"spec"`
	Status struct {
		Phase   string `json:"phase"`
		NodeRef *struct {
			Name string `json:"name"`
		} `json:"nodeRef"`
		Conditions   []Condition `json:"conditions"`
		ErrorReason  string      `json:"errorReason"`
		ErrorMessage string      `json:"errorMessage"`
	} `json:"status"`
}

func machineFrom(obj *unstructured.Unstructured) (*Machine, error) {
	data, err := obj.MarshalJSON()
	if err != nil {
		return nil, err
	}
	var j machineJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return nil, fmt.Errorf("machine %s: %w", obj.GetName(), err)
	}
	m := &Machine{
		Name: obj.GetName(), UID: string(obj.GetUID()), Phase: j.Status.Phase, ProviderID: j.Spec.ProviderID,
		Conditions:    j.Status.Conditions,
		PreDrainHooks: j.Spec.LifecycleHooks.PreDrain, PreTerminateHooks: j.Spec.LifecycleHooks.PreTerminate,
		ErrorReason: j.Status.ErrorReason, ErrorMessage: j.Status.ErrorMessage,
		Labels: obj.GetLabels(), Annotations: obj.GetAnnotations(), Object: obj,
	}
	if j.Status.NodeRef != nil {
		m.NodeRef = j.Status.NodeRef.Name
	}
	if ts := obj.GetDeletionTimestamp(); ts != nil {
		t := ts.Time
		m.DeletionTimestamp = &t
	}
	if ref := metav1.GetControllerOf(obj); ref != nil && ref.Kind == "MachineSet" {
		m.MachineSet = ref.Name
	}
	return m, nil
}

// MachineSetSpec describes a MachineSet to create. Its Machines are labelled
// machine.openshift.io/cluster-api-machineset=<Name> (its selector) and
// nodeward.test/group=<Name>, which the stub copies onto their Nodes.
type MachineSetSpec struct {
	Name     string
	Replicas int
	Role     string
	// DeletePolicy is Random (the default), Newest or Oldest.
	DeletePolicy string
	// The template's stub settings, as in MachineSpec.
	CreateDelay       time.Duration
	CreateError       string
	NoNode            bool
	PreDrainHooks     []Hook
	PreTerminateHooks []Hook
	Labels            map[string]string
	Annotations       map[string]string
}

// MachineSetSelector is the label selector of a MachineSet's Machines.
func MachineSetSelector(name string) string { return LabelMachineSet + "=" + name }

// CreateMachineSet creates a MachineSet in Namespace, failing the test on
// error.
func (c *Controllers) CreateMachineSet(ctx context.Context, spec MachineSetSpec) {
	c.t.Helper()
	selector := map[string]string{LabelCluster: ClusterID, LabelMachineSet: spec.Name}
	extra := map[string]string{LabelMachineSet: spec.Name, "nodeward.test/group": spec.Name}
	for k, v := range spec.Labels {
		extra[k] = v
	}
	labels := machineLabels(spec.Role, extra)
	msSpec := map[string]any{
		"replicas": int64(spec.Replicas),
		"selector": map[string]any{"matchLabels": toAny(selector)},
		"template": map[string]any{
			"metadata": map[string]any{
				"labels":      toAny(labels),
				"annotations": toAny(stubAnnotations(spec.CreateDelay, spec.CreateError, spec.NoNode, spec.Annotations)),
			},
			"spec": machineSpecObject(spec.PreDrainHooks, spec.PreTerminateHooks),
		},
	}
	if spec.DeletePolicy != "" {
		msSpec["deletePolicy"] = spec.DeletePolicy
	}
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "machine.openshift.io/v1beta1",
		"kind":       "MachineSet",
		"metadata": map[string]any{
			"name": spec.Name, "namespace": Namespace,
			"labels": toAny(map[string]string{LabelCluster: ClusterID}),
		},
		"spec": msSpec,
	}}
	if _, err := c.Dynamic.Resource(MachineSetResource).Namespace(Namespace).Create(ctx, obj, metav1.CreateOptions{}); err != nil {
		c.t.Fatalf("create MachineSet %s: %v", spec.Name, err)
	}
}

// ScaleMachineSet sets a MachineSet's spec.replicas, failing the test on
// error.
func (c *Controllers) ScaleMachineSet(ctx context.Context, name string, replicas int) {
	c.t.Helper()
	patch := fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, replicas)
	if _, err := c.Dynamic.Resource(MachineSetResource).Namespace(Namespace).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		c.t.Fatalf("scale MachineSet %s to %d: %v", name, replicas, err)
	}
}

// UnhealthyCondition is a node condition the MachineHealthCheck deems
// unhealthy once it has held for Timeout.
type UnhealthyCondition struct {
	Type    corev1.NodeConditionType
	Status  corev1.ConditionStatus
	Timeout time.Duration
}

// MHCSpec describes a MachineHealthCheck. It remediates (deletes) only
// Machines a MachineSet owns.
type MHCSpec struct {
	Name string
	// Selector's labels select the Machines checked, for example
	// {machine.openshift.io/cluster-api-machineset: <name>}.
	Selector            map[string]string
	UnhealthyConditions []UnhealthyCondition
	// MaxUnhealthy is an int or a percentage ("40%"); the API's default
	// (100%) when empty.
	MaxUnhealthy string
	// NodeStartupTimeout is how long a Machine may go without a Node (0:
	// the API's default, 10 minutes).
	NodeStartupTimeout time.Duration
}

// CreateMHC creates a MachineHealthCheck in Namespace, failing the test on
// error. Drive its conditions with SetNodeCondition and a custom type: kwok
// resets Ready on the nodes it manages.
func (c *Controllers) CreateMHC(ctx context.Context, spec MHCSpec) {
	c.t.Helper()
	conds := make([]any, len(spec.UnhealthyConditions))
	for i, u := range spec.UnhealthyConditions {
		conds[i] = map[string]any{"type": string(u.Type), "status": string(u.Status), "timeout": u.Timeout.String()}
	}
	mhcSpec := map[string]any{
		"selector":            map[string]any{"matchLabels": toAny(spec.Selector)},
		"unhealthyConditions": conds,
	}
	if spec.MaxUnhealthy != "" {
		var n int64
		if _, err := fmt.Sscanf(spec.MaxUnhealthy, "%d", &n); err == nil && fmt.Sprint(n) == spec.MaxUnhealthy {
			mhcSpec["maxUnhealthy"] = n
		} else {
			mhcSpec["maxUnhealthy"] = spec.MaxUnhealthy
		}
	}
	if spec.NodeStartupTimeout > 0 {
		mhcSpec["nodeStartupTimeout"] = spec.NodeStartupTimeout.String()
	}
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "machine.openshift.io/v1beta1",
		"kind":       "MachineHealthCheck",
		"metadata":   map[string]any{"name": spec.Name, "namespace": Namespace},
		"spec":       mhcSpec,
	}}
	if _, err := c.Dynamic.Resource(MHCResource).Namespace(Namespace).Create(ctx, obj, metav1.CreateOptions{}); err != nil {
		c.t.Fatalf("create MachineHealthCheck %s: %v", spec.Name, err)
	}
}

// SetNodeCondition sets (adds or replaces) a condition on a Node's status,
// through the status subresource, failing the test on error.
func (c *Controllers) SetNodeCondition(ctx context.Context, node string, typ corev1.NodeConditionType, status corev1.ConditionStatus, reason string) {
	c.t.Helper()
	n, err := c.Kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		c.t.Fatalf("set condition %s on node %s: %v", typ, node, err)
	}
	now := metav1.Now()
	cond := corev1.NodeCondition{Type: typ, Status: status, Reason: reason, LastHeartbeatTime: now, LastTransitionTime: now}
	replaced := false
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == typ {
			if n.Status.Conditions[i].Status == status {
				cond.LastTransitionTime = n.Status.Conditions[i].LastTransitionTime
			}
			n.Status.Conditions[i], replaced = cond, true
		}
	}
	if !replaced {
		n.Status.Conditions = append(n.Status.Conditions, cond)
	}
	if _, err := c.Kube.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		c.t.Fatalf("set condition %s on node %s: %v", typ, node, err)
	}
}
