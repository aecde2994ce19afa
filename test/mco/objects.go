package mco

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodeward/nodeward/test/cluster"
)

// MachineConfig is a rendered MachineConfig, as the render controller
// writes it (no render controller runs: tests write them).
type MachineConfig struct {
	Name            string
	OSImageURL      string
	KernelArguments []string
	// Ignition is spec.config; {ignition: {version: 3.5.0}} when nil.
	Ignition map[string]any
	// Spec holds further spec fields (kernelType, extensions, fips).
	Spec map[string]any
}

// CreateMachineConfig creates mc and deletes it when the test ends.
func (c *Client) CreateMachineConfig(ctx context.Context, mc MachineConfig) {
	c.t.Helper()
	c.create(ctx, MachineConfigs, mc.Object())
}

// Object is mc as the API object the render controller writes.
func (mc MachineConfig) Object() *unstructured.Unstructured {
	ign := mc.Ignition
	if ign == nil {
		ign = map[string]any{"ignition": map[string]any{"version": "3.5.0"}}
	}
	spec := map[string]any{"config": ign, "osImageURL": mc.OSImageURL}
	if len(mc.KernelArguments) > 0 {
		kargs := make([]any, len(mc.KernelArguments))
		for i, k := range mc.KernelArguments {
			kargs[i] = k
		}
		spec["kernelArguments"] = kargs
	}
	for k, v := range mc.Spec {
		spec[k] = v
	}
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfig",
		"metadata": map[string]any{"name": mc.Name, "annotations": map[string]any{
			// What the render controller stamps on its output.
			"machineconfiguration.openshift.io/generated-by-controller-version": "nodeward-test"}},
		"spec": spec,
	}}
	return obj
}

// Pool is a MachineConfigPool, laid out as examples/30-pool.yaml.
type Pool struct {
	Name string
	// NodeSelector is spec.nodeSelector.matchLabels; when empty,
	// node-role.kubernetes.io/<Name>: "" (see NodeLabels).
	NodeSelector map[string]string
	// MaxUnavailable is an integer or a percentage; 1 when zero.
	MaxUnavailable intstr.IntOrString
	// Config is spec.configuration.name, the rendered config nodes get.
	Config string
	// Source lists the MachineConfigs Config was rendered from
	// (spec.configuration.source); informational for the node controller.
	Source []string
	Paused bool
}

// NodeLabels are the labels a node needs to belong to p.
func (p Pool) NodeLabels() map[string]string {
	if len(p.NodeSelector) > 0 {
		return p.NodeSelector
	}
	return map[string]string{"node-role.kubernetes.io/" + p.Name: ""}
}

// CreatePool creates p and deletes it when the test ends.
func (c *Client) CreatePool(ctx context.Context, p Pool) {
	c.t.Helper()
	if p.MaxUnavailable == (intstr.IntOrString{}) {
		p.MaxUnavailable = intstr.FromInt32(1)
	}
	selector := map[string]any{}
	for k, v := range p.NodeLabels() {
		selector[k] = v
	}
	var maxUnavailable any = int64(p.MaxUnavailable.IntVal)
	if p.MaxUnavailable.Type == intstr.String {
		maxUnavailable = p.MaxUnavailable.StrVal
	}
	configuration := map[string]any{"name": p.Config}
	if len(p.Source) > 0 {
		var src []any
		for _, s := range p.Source {
			src = append(src, map[string]any{"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfig", "name": s})
		}
		configuration["source"] = src
	}
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfigPool",
		"metadata": map[string]any{"name": p.Name},
		"spec": map[string]any{
			"machineConfigSelector": map[string]any{"matchLabels": map[string]any{"machineconfiguration.openshift.io/role": p.Name}},
			"nodeSelector":          map[string]any{"matchLabels": selector},
			"maxUnavailable":        maxUnavailable,
			"paused":                p.Paused,
			"configuration":         configuration,
		},
	}}
	c.create(ctx, MachineConfigPools, obj)
}

// SetPoolConfig points the pool at another rendered config: the node
// controller then starts rolling it out.
func (c *Client) SetPoolConfig(ctx context.Context, pool, config string) error {
	return c.patchPool(ctx, pool, map[string]any{"spec": map[string]any{"configuration": map[string]any{"name": config}}})
}

// SetPoolPaused pauses or resumes the pool's rollout.
func (c *Client) SetPoolPaused(ctx context.Context, pool string, paused bool) error {
	return c.patchPool(ctx, pool, map[string]any{"spec": map[string]any{"paused": paused}})
}

// SetPoolMaxUnavailable changes how many nodes may update at once.
func (c *Client) SetPoolMaxUnavailable(ctx context.Context, pool string, n intstr.IntOrString) error {
	return c.patchPool(ctx, pool, map[string]any{"spec": map[string]any{"maxUnavailable": n}})
}

func (c *Client) patchPool(ctx context.Context, pool string, patch map[string]any) error {
	data, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	_, err = c.Dyn.Resource(MachineConfigPools).Patch(ctx, pool, types.MergePatchType, data, metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("patch pool %s: %w", pool, err)
	}
	return nil
}

// Condition is one status condition.
type Condition struct {
	Status, Reason, Message string
}

// PoolStatus is what the node controller reports on a pool.
type PoolStatus struct {
	ObservedGeneration, Generation int64
	// Configuration is status.configuration.name: the config every node
	// has, set only once the pool is Updated.
	Configuration           string
	MachineCount            int64
	UpdatedMachineCount     int64
	ReadyMachineCount       int64
	UnavailableMachineCount int64
	DegradedMachineCount    int64
	// Conditions by type: Updated, Updating, Degraded, NodeDegraded, ...
	Conditions map[string]Condition
}

// IsTrue reports whether condition typ is True.
func (s PoolStatus) IsTrue(typ string) bool { return s.Conditions[typ].Status == "True" }

func (s PoolStatus) String() string {
	return fmt.Sprintf("config %q machines %d updated %d ready %d unavailable %d degraded %d updated=%s updating=%s degraded=%s %q",
		s.Configuration, s.MachineCount, s.UpdatedMachineCount, s.ReadyMachineCount, s.UnavailableMachineCount,
		s.DegradedMachineCount, s.Conditions["Updated"].Status, s.Conditions["Updating"].Status,
		s.Conditions["Degraded"].Status, s.Conditions["NodeDegraded"].Message)
}

// PoolStatus reads the pool's status.
func (c *Client) PoolStatus(ctx context.Context, pool string) (PoolStatus, error) {
	obj, err := c.Dyn.Resource(MachineConfigPools).Get(ctx, pool, metav1.GetOptions{})
	if err != nil {
		return PoolStatus{}, err
	}
	st := PoolStatus{Generation: obj.GetGeneration(), Conditions: conditions(obj)}
	st.ObservedGeneration, _, _ = unstructured.NestedInt64(obj.Object, "status", "observedGeneration")
	st.Configuration, _, _ = unstructured.NestedString(obj.Object, "status", "configuration", "name")
	for field, dst := range map[string]*int64{
		"machineCount": &st.MachineCount, "updatedMachineCount": &st.UpdatedMachineCount,
		"readyMachineCount": &st.ReadyMachineCount, "unavailableMachineCount": &st.UnavailableMachineCount,
		"degradedMachineCount": &st.DegradedMachineCount,
	} {
		*dst, _, _ = unstructured.NestedInt64(obj.Object, "status", field)
	}
	return st, nil
}

// MachineConfigNode is the per-node status object the daemon (and, for
// drains, the drain controller) writes; under ImageModeStatusReporting the
// pool's counts come from it.
type MachineConfigNode struct {
	Name, Pool string
	// DesiredConfig is spec.configVersion.desired; CurrentConfig
	// status.configVersion.current.
	DesiredConfig, CurrentConfig string
	Conditions                   map[string]Condition
	Object                       *unstructured.Unstructured
}

// MachineConfigNode reads node's MachineConfigNode; found is false when
// there is none.
func (c *Client) MachineConfigNode(ctx context.Context, node string) (mcn MachineConfigNode, found bool, err error) {
	obj, err := c.Dyn.Resource(MachineConfigNodes).Get(ctx, node, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return mcn, false, nil
	}
	if err != nil {
		return mcn, false, err
	}
	mcn = MachineConfigNode{Name: obj.GetName(), Conditions: conditions(obj), Object: obj}
	mcn.Pool, _, _ = unstructured.NestedString(obj.Object, "spec", "pool", "name")
	mcn.DesiredConfig, _, _ = unstructured.NestedString(obj.Object, "spec", "configVersion", "desired")
	mcn.CurrentConfig, _, _ = unstructured.NestedString(obj.Object, "status", "configVersion", "current")
	return mcn, true, nil
}

func conditions(obj *unstructured.Unstructured) map[string]Condition {
	out := map[string]Condition{}
	list, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	for _, item := range list {
		m, ok := item.(map[string]any)
		if !ok {
			continue
		}
		str := func(k string) string { s, _ := m[k].(string); return s }
		out[str("type")] = Condition{Status: str("status"), Reason: str("reason"), Message: str("message")}
	}
	return out
}

// WaitPool polls the pool's status until cond holds, failing the test
// after timeout with the last status seen.
func (c *Client) WaitPool(pool string, timeout time.Duration, what string, cond func(PoolStatus) bool) PoolStatus {
	c.t.Helper()
	var last PoolStatus
	cluster.WaitFor(c.t, timeout, fmt.Sprintf("pool %s: %s", pool, what), func(ctx context.Context) (bool, error) {
		st, err := c.PoolStatus(ctx, pool)
		if err != nil {
			return false, err
		}
		last = st
		if cond(st) {
			return true, nil
		}
		return false, fmt.Errorf("status: %s", st)
	})
	return last
}

func (c *Client) create(ctx context.Context, gvr schema.GroupVersionResource, obj *unstructured.Unstructured) {
	c.t.Helper()
	if _, err := c.Dyn.Resource(gvr).Create(ctx, obj, metav1.CreateOptions{}); err != nil {
		c.t.Fatalf("create %s %s: %v", gvr.Resource, obj.GetName(), err)
	}
	name := obj.GetName()
	c.t.Cleanup(func() {
		err := c.Dyn.Resource(gvr).Delete(context.Background(), name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			c.t.Errorf("delete %s %s: %v", gvr.Resource, name, err)
		}
	})
}
