package main

import (
	"context"
	"fmt"
	"time"

	machinev1 "github.com/openshift/api/machine/v1beta1"
	"github.com/openshift/machine-api-operator/pkg/controller/machine"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The stub's vocabulary, shared with nodeward's test/machineapi package
// (which keeps its own copy of these strings: it does not import this module).
const (
	// ProviderIDPrefix + the Node's name is the providerID of a stub instance.
	ProviderIDPrefix = "kwok://"
	// AnnotationDeleted marks a Machine whose instance the stub deleted:
	// Exists is false from then on.
	AnnotationDeleted = "nodeward.test/instance-deleted"
	// AnnotationCreateDelay (a Go duration) holds Create back until the
	// Machine is that old: the Machine stays Provisioning meanwhile, a
	// replacement "still provisioning".
	AnnotationCreateDelay = "nodeward.test/create-delay"
	// AnnotationCreateError makes Create fail with an invalid-configuration
	// error carrying the value as its message: the machine controller sets
	// the Machine's phase to Failed.
	AnnotationCreateError = "nodeward.test/create-error"
	// AnnotationNoNode makes Create set the providerID but create no Node
	// (value "true"): the Machine stays Provisioned without a nodeRef, as
	// when an instance never joins, or a real kubelet is to register it.
	AnnotationNoNode = "nodeward.test/no-node"
	// LabelStubNode marks the Nodes the stub created (value: the Machine's
	// namespace), so a harness can clean them up.
	LabelStubNode = "nodeward.test/machine-stub"
	// LabelGroup is test/cluster's node group label; a Machine's value is
	// copied onto its Node.
	LabelGroup = "nodeward.test/group"
	// LabelMachineRole is the Machine's role label ("master", "worker"):
	// its Node gets node-role.kubernetes.io/<role>.
	LabelMachineRole = "machine.openshift.io/cluster-api-machine-role"
	// kwokAnnotation makes kwok manage a Node (value "fake").
	kwokAnnotation = "kwok.x-k8s.io/node"
)

// stubActuator plays the cloud for the machine controller. It keeps no
// state: whether an instance exists is read off the Machine (a providerID
// and no AnnotationDeleted), so a restarted process carries on.
type stubActuator struct {
	client      client.Client
	reader      client.Reader // uncached, for the Node a Create may have made already
	createNodes bool
}

var _ machine.Actuator = (*stubActuator)(nil)

// Create "boots an instance": a kwok Node named after the Machine with the
// providerID the Machine then gets. The nodelink controller links them.
func (a *stubActuator) Create(ctx context.Context, m *machinev1.Machine) error {
	if msg, ok := m.Annotations[AnnotationCreateError]; ok {
		klog.Infof("%s: stub: create fails: %s", m.Name, msg)
		return machine.InvalidMachineConfiguration("stub actuator: %s", msg)
	}
	if v, ok := m.Annotations[AnnotationCreateDelay]; ok {
		delay, err := time.ParseDuration(v)
		if err != nil {
			return machine.InvalidMachineConfiguration("stub actuator: %s=%q: %v", AnnotationCreateDelay, v, err)
		}
		if left := time.Until(m.CreationTimestamp.Add(delay)); left > 0 {
			klog.Infof("%s: stub: instance still booting, %s left", m.Name, left.Round(time.Millisecond))
			return &machine.RequeueAfterError{RequeueAfter: left}
		}
	}
	providerID := ProviderIDPrefix + m.Name
	if a.createNodes && m.Annotations[AnnotationNoNode] != "true" {
		if err := a.ensureNode(ctx, m, providerID); err != nil {
			return err
		}
	}
	if ptr.Deref(m.Spec.ProviderID, "") != providerID {
		patch := client.MergeFrom(m.DeepCopy())
		m.Spec.ProviderID = ptr.To(providerID)
		if err := a.client.Patch(ctx, m, patch); err != nil {
			return fmt.Errorf("stub actuator: set providerID: %w", err)
		}
	}
	klog.Infof("%s: stub: instance %s created", m.Name, providerID)
	return nil
}

func (a *stubActuator) ensureNode(ctx context.Context, m *machinev1.Machine, providerID string) error {
	var existing corev1.Node
	err := a.reader.Get(ctx, types.NamespacedName{Name: m.Name}, &existing)
	if err == nil {
		if existing.Spec.ProviderID != providerID {
			return machine.CreateMachine("stub actuator: node %s exists with providerID %q, not %q", m.Name, existing.Spec.ProviderID, providerID)
		}
		return nil
	}
	if !apierrors.IsNotFound(err) {
		return fmt.Errorf("stub actuator: get node %s: %w", m.Name, err)
	}
	err = a.client.Create(ctx, stubNode(m, providerID))
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("stub actuator: create node %s: %w", m.Name, err)
	}
	return nil
}

// stubNode is a Node as test/cluster's CreateNodes makes them: kwok manages
// it (marks it Ready, renews its Lease, runs its pods).
func stubNode(m *machinev1.Machine, providerID string) *corev1.Node {
	labels := map[string]string{
		"kubernetes.io/hostname": m.Name,
		"kubernetes.io/os":       "linux",
		"kubernetes.io/arch":     "amd64",
		"type":                   "kwok",
		LabelStubNode:            m.Namespace,
	}
	if g := m.Labels[LabelGroup]; g != "" {
		labels[LabelGroup] = g
	}
	switch role := m.Labels[LabelMachineRole]; role {
	case "":
	case "master":
		labels["node-role.kubernetes.io/master"] = ""
		labels["node-role.kubernetes.io/control-plane"] = ""
	default:
		labels["node-role.kubernetes.io/"+role] = ""
	}
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("32"),
		corev1.ResourceMemory: resource.MustParse("256Gi"),
		corev1.ResourcePods:   resource.MustParse("250"),
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        m.Name,
			Labels:      labels,
			Annotations: map[string]string{kwokAnnotation: "fake", "node.alpha.kubernetes.io/ttl": "0"},
		},
		Spec:   corev1.NodeSpec{ProviderID: providerID},
		Status: corev1.NodeStatus{Capacity: capacity, Allocatable: capacity},
	}
}

// Exists: an instance exists while the Machine has a providerID the stub
// did not mark deleted.
func (a *stubActuator) Exists(_ context.Context, m *machinev1.Machine) (bool, error) {
	_, deleted := m.Annotations[AnnotationDeleted]
	return ptr.Deref(m.Spec.ProviderID, "") != "" && !deleted, nil
}

// Delete "terminates the instance": it marks the Machine and deletes
// nothing else; the machine controller then deletes the Node itself.
func (a *stubActuator) Delete(ctx context.Context, m *machinev1.Machine) error {
	if _, done := m.Annotations[AnnotationDeleted]; done {
		return nil
	}
	patch := client.MergeFrom(m.DeepCopy())
	if m.Annotations == nil {
		m.Annotations = map[string]string{}
	}
	m.Annotations[AnnotationDeleted] = time.Now().UTC().Format(time.RFC3339)
	// Patch refreshes m from the response, resourceVersion included, so
	// the controller's finalizer removal that follows does not conflict.
	if err := a.client.Patch(ctx, m, patch); err != nil {
		return fmt.Errorf("stub actuator: mark deleted: %w", err)
	}
	klog.Infof("%s: stub: instance %s deleted", m.Name, ptr.Deref(m.Spec.ProviderID, ""))
	return nil
}

// Update does nothing: a stub instance has nothing to reconcile.
func (a *stubActuator) Update(context.Context, *machinev1.Machine) error { return nil }
