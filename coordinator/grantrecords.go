package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeward/nodeward/api/v1alpha1"
)

// Grant records are the write-ahead of the grants on their pool
// (AnnotationGrantedNodes). A departure (a Node deleted mid-update) is
// known first to the leader whose cache delivers the delete, and persisted
// by its next pass; a leader that changes in between (a crash, a pause
// past the Lease) left the machine counted nowhere: the new leader's list
// has neither the Node nor the departure (protocol simulator seeds 1000191,
// 1000652, 8000778). So each pass that grants records the grants on the
// pool first, and every pass counts a recorded grant whose Node is gone,
// or is another object that is not the machine back (MachineBack), as
// departed: what a new leader reads of the pool stands for the machine.
//
// The pool's bookkeeping (its departed nodes and its grant records) is one
// write, conditional on the pool's resourceVersion as read just before: a
// deposed leader resuming with a planned write finds the pool changed (the
// new leader's status writes alone change it) and its write, and so its
// grants, refused. Cost: one pool write per pass that grants, and one when
// the grants it recorded are settled.

// grantRecordsOf reads a pool's AnnotationGrantedNodes.
func grantRecordsOf(pool *v1alpha1.UpdatePool) (map[string]v1alpha1.DepartedNode, error) {
	return entriesOf(pool, v1alpha1.AnnotationGrantedNodes)
}

// recordedDepartures are the departures the pools' grant records show: a
// recorded grant whose Node (lookup: nil when there is none) is gone, or
// is another object than the one granted that is not the machine back.
// A pool whose records cannot be read shows none here; its own pass fails
// on them.
func recordedDepartures(pools []*v1alpha1.UpdatePool, lookup func(string) *corev1.Node) map[string]Departure {
	out := map[string]Departure{}
	for _, p := range pools {
		records, err := grantRecordsOf(p)
		if err != nil {
			continue
		}
		for name, r := range records {
			if departedRecord(r, lookup(name)) {
				out[name] = Departure{Pool: p.Name, DepartedNode: r}
			}
		}
	}
	return out
}

// departedRecord reports whether the machine of grant record r, whose Node
// is now n (nil: none), departed under it.
func departedRecord(r v1alpha1.DepartedNode, n *corev1.Node) bool {
	return n == nil || (r.UID != "" && n.UID != r.UID && !MachineBack(r.UID, n))
}

// withRecorded is remembered with the recorded departures it lacks: what
// the coordinator saw of a delete wins over the record.
func withRecorded(remembered, recorded map[string]Departure) map[string]Departure {
	if len(recorded) == 0 {
		return remembered
	}
	out := maps.Clone(recorded)
	maps.Copy(out, remembered)
	return out
}

// nextGrantRecords is what pool's grant records are to be after a pass
// that grants granted (node: its record): the records kept, less those
// settled, plus the new ones, with the records as read (current). A
// record is settled once its Node (lookup), the object granted, shows
// another grant or none and no write of it is pending (pending: the grant
// may have landed unseen), once the machine is back, or once its
// departure is in the pool's departed nodes (own, as the pass persists
// them), or once its Node is gone with its Machine (gone: the machine is
// deleted for good; its departure would end at once).
func nextGrantRecords(pool *v1alpha1.UpdatePool, granted map[string]v1alpha1.DepartedNode, own map[string]v1alpha1.DepartedNode,
	pending map[string]bool, lookup func(string) *corev1.Node, gone func(string) bool) (current, next map[string]v1alpha1.DepartedNode, err error) {
	if current, err = grantRecordsOf(pool); err != nil {
		return nil, nil, err
	}
	next = map[string]v1alpha1.DepartedNode{}
	for name, r := range current {
		if !recordSettled(name, r, own, pending, lookup(name), gone) {
			next[name] = r
		}
	}
	maps.Copy(next, granted)
	return current, next, nil
}

func recordSettled(name string, r v1alpha1.DepartedNode, own map[string]v1alpha1.DepartedNode, pending map[string]bool, n *corev1.Node,
	gone func(string) bool) bool {
	if d, ok := own[name]; ok && d.Grant == r.Grant {
		return true
	}
	switch {
	case n == nil:
		return !pending[name] && gone(r.Machine)
	case r.UID != "" && n.UID != r.UID:
		return MachineBack(r.UID, n)
	}
	return !pending[name] && n.Annotations[v1alpha1.AnnotationGrant] != r.Grant
}

// bookkeeping is the pool write of a pass (nil: none): the departed nodes
// and the grant records, each set only when it changes, and the pool's
// finalizers when FinalizerGrants is to be added (the first record) or
// removed (none left). A pool being deleted gets no finalizer added: the
// API refuses it, and such a pool grants nothing.
func bookkeeping(pool *v1alpha1.UpdatePool, in planInput, current, records map[string]v1alpha1.DepartedNode) (*Write, error) {
	set := map[string]*string{}
	if in.departed.write {
		value, err := departedValue(pool, in.departed.own)
		if err != nil {
			return nil, err
		}
		set[v1alpha1.AnnotationDepartedNodes] = value
	}
	if !sameEntries(current, records) {
		value, err := entriesValue(pool, records, "grant records")
		if err != nil {
			return nil, err
		}
		set[v1alpha1.AnnotationGrantedNodes] = value
	}
	w := &Write{Pool: pool.Name, ResourceVersion: pool.ResourceVersion, Set: set}
	keep := len(records) > 0 || len(in.departed.own) > 0
	switch has := slices.Contains(pool.Finalizers, v1alpha1.FinalizerGrants); {
	case keep && !has && pool.DeletionTimestamp == nil:
		finalizers := append(slices.Clone(pool.Finalizers), v1alpha1.FinalizerGrants)
		w.Finalizers = &finalizers
	case !keep && has:
		finalizers := slices.DeleteFunc(slices.Clone(pool.Finalizers), func(f string) bool { return f == v1alpha1.FinalizerGrants })
		w.Finalizers = &finalizers
	}
	if len(set) == 0 && w.Finalizers == nil {
		return nil, nil
	}
	return w, nil
}

// grantRecord is the record of grant, to be written to v by pool at now:
// what its departure would need.
func grantRecord(v nodeView, grant string, now time.Time) v1alpha1.DepartedNode {
	return v1alpha1.DepartedNode{Grant: grant, UID: v.uid, ControlPlane: v.controlPlane, Zone: v.zone, Machine: v.machine,
		Since: metav1.NewTime(now.UTC().Truncate(time.Second))}
}

// errPoolChanged is a bookkeeping write refused because the pool changed
// since it was read: the pass ends with no grant, and the pool's event
// plans it again.
var errPoolChanged = errors.New("pool changed since read")

// writeBookkeeping makes w, the pool's bookkeeping, only while the pool
// is still at w.ResourceVersion.
func (c *Controller) writeBookkeeping(ctx context.Context, w *Write) error {
	annotations := map[string]any{}
	for k, v := range w.Set {
		if v == nil {
			annotations[k] = nil
		} else {
			annotations[k] = *v
		}
	}
	meta := map[string]any{"resourceVersion": w.ResourceVersion, "annotations": annotations}
	if w.Finalizers != nil {
		meta["finalizers"] = *w.Finalizers // the whole list: the write is conditional
	}
	patch, err := json.Marshal(map[string]any{"metadata": meta})
	if err != nil {
		return fmt.Errorf("encode the bookkeeping of pool %s: %w", w.Pool, err)
	}
	_, err = c.opts.Dynamic.Resource(v1alpha1.UpdatePoolResource()).Patch(ctx, w.Pool, types.MergePatchType, patch, metav1.PatchOptions{})
	if apierrors.IsConflict(err) {
		return fmt.Errorf("record departed nodes and grants on pool %s: %w", w.Pool, errPoolChanged)
	}
	if err != nil {
		return fmt.Errorf("record departed nodes and grants on pool %s: %w", w.Pool, err)
	}
	return nil
}

// passWrites names the grants of plan (grantName) and returns the pool
// write the pass makes before them (nil: none): the departed nodes if they
// changed, and the grant records with the new grants and without those
// settled (lookup: the Nodes by name).
func passWrites(p *v1alpha1.UpdatePool, in planInput, plan *poolPlan, lookup func(string) *corev1.Node,
	grantName GrantNamer) (map[string]string, *Write, error) {
	views := planned(plan, in.nodes)
	names := make(map[string]string, len(plan.grant))
	granted := make(map[string]v1alpha1.DepartedNode, len(plan.grant))
	for _, n := range plan.grant {
		names[n] = grantName(p, n, views[n].stateGrnt)
		granted[n] = grantRecord(views[n], names[n], in.now)
	}
	current, records, err := nextGrantRecords(p, granted, in.departed.own, in.pending, lookup, in.machines.gone)
	if err != nil {
		return nil, nil, err
	}
	w, err := bookkeeping(p, in, current, records)
	return names, w, err
}
