package coordinator

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeward/nodeward/api/v1alpha1"
)

// Thresholds of the disruption guard, the node lifecycle controller's:
// a zone with 55% or more unhealthy nodes is in PartialDisruption; in
// clusters of 50 nodes or fewer its NoExecute taints stop, above that they
// are rate limited.
const (
	partialDisruptionThreshold = 0.55
	largeClusterThreshold      = 50
	controlPlaneRoleLabel      = "node-role.kubernetes.io/control-plane"
)

// noExecuteGuard is what the guard publishes.
type noExecuteGuard struct {
	data map[string]string
}

// nodeUnhealthy: not Ready, or a nodeward health condition True.
func nodeUnhealthy(n *corev1.Node) bool {
	ready := false
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			ready = c.Status == corev1.ConditionTrue
		}
		if v1alpha1.IsHealthCondition(c.Type) && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return !ready
}

func hasNodewardNoExecute(n *corev1.Node) bool {
	for _, t := range n.Spec.Taints {
		if t.Effect == corev1.TaintEffectNoExecute && strings.HasPrefix(t.Key, v1alpha1.GroupName+"/") {
			return true
		}
	}
	return false
}

// computeNoExecuteGuard decides, from every node, which zones may take NoExecute
// taints. previous permits of a rate-limited zone are kept (a node that may
// hold a taint keeps that right) and one more is added when grow is true,
// so a disrupted large zone loses at most one node per rate interval.
func computeNoExecuteGuard(nodes []*corev1.Node, previous map[string]string, grow bool) noExecuteGuard {
	type zoneCount struct{ total, bad int }
	zones := map[string]*zoneCount{}
	unhealthyIn := map[string][]string{}
	var cpHolder, cpCandidate string
	for _, n := range nodes {
		zone := n.Labels[zoneLabel]
		if zone == "" {
			zone = v1alpha1.GuardNoZone
		}
		zc := zones[zone]
		if zc == nil {
			zc = &zoneCount{}
			zones[zone] = zc
		}
		zc.total++
		bad := nodeUnhealthy(n)
		if bad {
			zc.bad++
			unhealthyIn[zone] = append(unhealthyIn[zone], n.Name)
		}
		if isControlPlane(n) {
			if hasNodewardNoExecute(n) && (cpHolder == "" || n.Name < cpHolder) {
				cpHolder = n.Name
			}
			if bad && (cpCandidate == "" || n.Name < cpCandidate) {
				cpCandidate = n.Name
			}
		}
	}
	data := map[string]string{}
	for zone, zc := range zones {
		key := v1alpha1.GuardZonePrefix + zone
		switch {
		case float64(zc.bad) < partialDisruptionThreshold*float64(zc.total):
			data[key] = v1alpha1.GuardAllowed
		case len(nodes) <= largeClusterThreshold:
			data[key] = v1alpha1.GuardDenied
		default:
			data[key] = v1alpha1.GuardRateLimited
			data[key+v1alpha1.GuardPermitsSuffix] = growPermits(previous[key+v1alpha1.GuardPermitsSuffix], unhealthyIn[zone], grow)
		}
	}
	if cpHolder == "" {
		cpHolder = cpCandidate
	}
	data[v1alpha1.GuardControlPlaneHolder] = cpHolder
	return noExecuteGuard{data: data}
}

// growPermits keeps the permits of nodes still unhealthy and adds the first
// unhealthy node without one when grow is set.
func growPermits(previous string, unhealthy []string, grow bool) string {
	sort.Strings(unhealthy)
	had := map[string]bool{}
	for _, p := range strings.Split(previous, ",") {
		had[p] = true
	}
	var out []string
	added := false
	for _, n := range unhealthy {
		switch {
		case had[n]:
			out = append(out, n)
		case grow && !added:
			out = append(out, n)
			added = true
		}
	}
	return strings.Join(out, ",")
}

// publishNoExecuteGuard writes the guard ConfigMap when it changed. The permit list
// of a rate-limited zone grows by one node per rateInterval.
func (c *Controller) publishNoExecuteGuard(ctx context.Context, now time.Time) error {
	var nodes []*corev1.Node
	for _, obj := range c.nodes.GetStore().List() {
		nodes = append(nodes, obj.(*corev1.Node))
	}
	cms := c.opts.Client.ConfigMaps(v1alpha1.AgentLeaseNamespace)
	current, err := cms.Get(ctx, v1alpha1.GuardConfigMapName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		current = nil
	} else if err != nil {
		return fmt.Errorf("read disruption guard: %w", err)
	}
	var previous map[string]string
	if current != nil {
		previous = current.Data
	}
	grow := now.Sub(c.guardGrownAt) >= c.opts.GuardRateInterval
	state := computeNoExecuteGuard(nodes, previous, grow)
	if current != nil && equality.Semantic.DeepEqual(current.Data, state.data) {
		return nil
	}
	if grow {
		c.guardGrownAt = now
	}
	if current == nil {
		_, err = cms.Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.GuardConfigMapName, Namespace: v1alpha1.AgentLeaseNamespace},
			Data:       state.data,
		}, metav1.CreateOptions{})
	} else {
		current.Data = state.data
		_, err = cms.Update(ctx, current, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("write disruption guard: %w", err)
	}
	return nil
}
