package mco

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/util/retry"

	"github.com/nodeward/nodeward/daemon/update"
)

// The MCO's resources the agent reads or writes.
var (
	MachineConfigResource     = schema.GroupVersionResource{Group: "machineconfiguration.openshift.io", Version: "v1", Resource: "machineconfigs"}
	MachineConfigNodeResource = schema.GroupVersionResource{Group: "machineconfiguration.openshift.io", Version: "v1", Resource: "machineconfignodes"}
	MachineConfigPoolResource = schema.GroupVersionResource{Group: "machineconfiguration.openshift.io", Version: "v1", Resource: "machineconfigpools"}
)

// notYetSet is the MCO's placeholder for a pool or config not known yet.
const notYetSet = "not-yet-set"

// NodeStatus keeps the node's MachineConfigNode as the MCD does: created
// when missing (the MCO's operator, which creates it on a full cluster,
// may not run), its status conditions following the update's phases. The
// node controller counts the pool's updated nodes from it under the
// TechPreviewNoUpgrade feature set and takes the pool's degraded message
// from it under every feature set.
type NodeStatus struct {
	Dynamic dynamic.Interface
	Node    string
	// OwnDrain is true when nodeward drains the node itself: it then
	// writes the drain's conditions, which the drain controller writes
	// otherwise.
	OwnDrain bool

	mu      sync.Mutex
	ensured bool
}

// Write brings the MachineConfigNode's status in line with the machine's
// state st and the reported state and reason, on node as just written.
func (s *NodeStatus) Write(ctx context.Context, node *corev1.Node, st update.State, state, reason string) error {
	current, desired := node.Annotations[AnnotationCurrentConfig], node.Annotations[AnnotationDesiredConfig]
	if current == "" || desired == "" {
		return nil // not an MCO-managed node yet: the controller skips it too
	}
	if err := s.ensure(ctx, node, desired); err != nil {
		return err
	}
	// An update that drains nothing writes the drain's conditions itself:
	// the drain controller, never asked, writes none.
	ownDrain := s.OwnDrain || st.Disruption.NoDrain
	want := conditionsFor(s.Node, st, state, reason, desired, ownDrain)
	mcns := s.Dynamic.Resource(MachineConfigNodeResource)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		obj, err := mcns.Get(ctx, s.Node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		changed, err := mergeStatus(obj, want, current, desired, ownDrain)
		if err != nil || !changed {
			return err
		}
		_, err = mcns.UpdateStatus(ctx, obj, metav1.UpdateOptions{FieldManager: "nodeward-agent"})
		return err
	})
	if err != nil {
		return fmt.Errorf("write MachineConfigNode %s status: %w", s.Node, err)
	}
	return nil
}

// mergeStatus sets want's conditions (keeping the drain controller's when
// it drains) and the config versions on obj; it reports whether anything
// changed.
func mergeStatus(obj *unstructured.Unstructured, want []metav1.Condition, current, desired string, ownDrain bool) (bool, error) {
	var status struct {
		Conditions         []metav1.Condition `json:"conditions,omitempty"`
		ObservedGeneration int64              `json:"observedGeneration,omitempty"`
	}
	if raw, ok := obj.Object["status"]; ok {
		data, _ := json.Marshal(raw)
		if err := json.Unmarshal(data, &status); err != nil {
			return false, fmt.Errorf("read MachineConfigNode status: %w", err)
		}
	}
	before := slices.Clone(status.Conditions)
	for _, c := range want {
		if drainerConditions[c.Type] && !ownDrain && meta.FindStatusCondition(status.Conditions, c.Type) != nil {
			continue
		}
		meta.SetStatusCondition(&status.Conditions, c)
	}
	versions, _, _ := unstructured.NestedStringMap(obj.Object, "status", "configVersion")
	if slices.EqualFunc(before, status.Conditions, sameCondition) &&
		versions["current"] == current && versions["desired"] == desired {
		return false, nil
	}
	// The MCD writes generation+1; the CRD only asks that it never falls.
	status.ObservedGeneration = max(status.ObservedGeneration, obj.GetGeneration()+1)
	data, err := json.Marshal(status)
	if err != nil {
		return false, err
	}
	var out map[string]any
	if err := json.Unmarshal(data, &out); err != nil {
		return false, err
	}
	out["configVersion"] = map[string]any{"current": current, "desired": desired}
	obj.Object["status"] = out
	return true, nil
}

func sameCondition(a, b metav1.Condition) bool {
	return a.Type == b.Type && a.Status == b.Status && a.Reason == b.Reason && a.Message == b.Message
}

// ensure creates the MachineConfigNode when it is missing, owned by the
// Node, for the node's pool.
func (s *NodeStatus) ensure(ctx context.Context, node *corev1.Node, desired string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ensured {
		return nil
	}
	mcns := s.Dynamic.Resource(MachineConfigNodeResource)
	if _, err := mcns.Get(ctx, s.Node, metav1.GetOptions{}); err == nil {
		s.ensured = true
		return nil
	} else if !apierrors.IsNotFound(err) {
		return fmt.Errorf("get MachineConfigNode %s: %w", s.Node, err)
	}
	pool, err := s.primaryPool(ctx, node)
	if err != nil {
		return err
	}
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfigNode",
		"metadata": map[string]any{"name": s.Node, "ownerReferences": []any{map[string]any{
			"apiVersion": "v1", "kind": "Node", "name": node.Name, "uid": string(node.UID)}}},
		"spec": map[string]any{"node": map[string]any{"name": s.Node}, "pool": map[string]any{"name": pool},
			"configVersion": map[string]any{"desired": desired}},
	}}
	if _, err := mcns.Create(ctx, obj, metav1.CreateOptions{FieldManager: "nodeward-agent"}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create MachineConfigNode %s for pool %s: %w", s.Node, pool, err)
	}
	s.ensured = true
	return nil
}

// primaryPool is the MachineConfigPool the node belongs to, as the MCO
// chooses it: master first, then a custom pool, then worker.
func (s *NodeStatus) primaryPool(ctx context.Context, node *corev1.Node) (string, error) {
	list, err := s.Dynamic.Resource(MachineConfigPoolResource).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", fmt.Errorf("list MachineConfigPools for node %s: %w", s.Node, err)
	}
	var matched []string
	for _, pool := range list.Items {
		sel, found, _ := unstructured.NestedMap(pool.Object, "spec", "nodeSelector")
		if !found {
			continue
		}
		var ls metav1.LabelSelector
		data, _ := json.Marshal(sel)
		if json.Unmarshal(data, &ls) != nil {
			continue
		}
		selector, err := metav1.LabelSelectorAsSelector(&ls)
		if err != nil || selector.Empty() || !selector.Matches(labels.Set(node.Labels)) {
			continue
		}
		matched = append(matched, pool.GetName())
	}
	return choosePool(matched), nil
}

func choosePool(matched []string) string {
	switch {
	case slices.Contains(matched, "master"):
		return "master"
	case len(matched) == 1:
		return matched[0]
	case slices.Contains(matched, "worker"):
		for _, p := range matched {
			if p != "worker" {
				return p // a custom pool wins over worker
			}
		}
		return "worker"
	case len(matched) > 0:
		slices.Sort(matched)
		return matched[0]
	}
	return notYetSet
}
