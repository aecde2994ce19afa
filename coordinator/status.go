package coordinator

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeward/nodeward/api/v1alpha1"
)

// writeStatus publishes the pool's counts and conditions; it writes only
// when something changed and reports whether it wrote.
func (c *Controller) writeStatus(ctx context.Context, pool *v1alpha1.UpdatePool, plan *poolPlan) (bool, error) {
	machines, overlapping := plan.machines, append([]string(nil), plan.overlapping...)
	st := v1alpha1.UpdatePoolStatus{
		ObservedGeneration:      pool.Generation,
		ConfigName:              ConfigName(pool.Spec),
		MachineCount:            int32(machines),
		UpdatedMachineCount:     int32(plan.updated),
		ReadyMachineCount:       int32(plan.ready),
		UnavailableMachineCount: int32(len(plan.unavailable) + len(plan.grant)),
		DegradedMachineCount:    int32(len(plan.degraded)),
		FailedNodes:             sortedCopy(plan.degraded),
		Conditions:              append([]metav1.Condition(nil), pool.Status.Conditions...),
	}
	set := func(t string, ok bool, reason, msg string) {
		status := metav1.ConditionFalse
		if ok {
			status = metav1.ConditionTrue
		}
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{
			Type: t, Status: status, Reason: reason, Message: msg, ObservedGeneration: pool.Generation,
		})
	}
	allUpdated := plan.updated == machines
	set(v1alpha1.PoolUpdated, allUpdated, map[bool]string{true: "AllNodesUpdated", false: "NodesPending"}[allUpdated],
		fmt.Sprintf("%d of %d nodes run %s", plan.updated, machines, st.ConfigName))
	updating := !allUpdated && !pool.Spec.Paused
	msg := fmt.Sprintf("%d of at most %d nodes unavailable: %s", st.UnavailableMachineCount, plan.limit, describe(plan.unavailable, plan.grant))
	if plan.hold.message != "" {
		msg += "; waiting: " + plan.hold.message
	}
	set(v1alpha1.PoolUpdating, updating, map[bool]string{true: "RollingOut", false: "Idle"}[updating], msg)
	set(v1alpha1.PoolPaused, pool.Spec.Paused, map[bool]string{true: "PausedByOperator", false: "NotPaused"}[pool.Spec.Paused],
		pausedMessage(pool.Spec))
	halted := plan.halted.reason != ""
	set(v1alpha1.PoolHalted, halted, cmp.Or(plan.halted.reason, "NotHalted"),
		cmp.Or(plan.halted.message, "within the failure budget; no canary or gate halted the pool"))
	rail := c.guardrails.of(pool.Name)
	setOrRemove := func(t string, want bool, status metav1.ConditionStatus, reason, msg string) {
		if !want {
			meta.RemoveStatusCondition(&st.Conditions, t)
			return
		}
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{
			Type: t, Status: status, Reason: reason, Message: msg, ObservedGeneration: pool.Generation,
		})
	}
	gs, gr, gm := gatesCondition(rail)
	setOrRemove(v1alpha1.PoolGatesPassing, pool.Spec.Gates != nil, gs, gr, gm)
	ss, sr, sm := silencedCondition(rail)
	setOrRemove(v1alpha1.PoolSilenced, pool.Spec.Silences != nil, ss, sr, sm)
	degradedMsg := "no node failed"
	if len(plan.degraded) > 0 {
		degradedMsg = "failed on the target: " + strings.Join(plan.degraded, ", ")
	}
	if len(overlapping) > 0 {
		sort.Strings(overlapping)
		degradedMsg += "; nodes selected by another pool too (counted in each, never granted): " + strings.Join(overlapping, ", ")
	}
	bad := len(plan.degraded) > 0 || len(overlapping) > 0
	set(v1alpha1.PoolDegraded, bad, map[bool]string{true: "NodesDegraded", false: "AsExpected"}[bad], degradedMsg)
	if len(overlapping) > 0 && len(plan.degraded) == 0 {
		meta.FindStatusCondition(st.Conditions, v1alpha1.PoolDegraded).Reason = "OverlappingPools"
	}
	setUpdates(&st, plan.updates)
	if equality.Semantic.DeepEqual(st, pool.Status) {
		return false, nil
	}
	patch, err := statusPatch(st, pool.Status)
	if err != nil {
		return false, err
	}
	_, err = c.opts.Dynamic.Resource(v1alpha1.UpdatePoolResource()).Patch(ctx, pool.Name, types.MergePatchType, patch,
		metav1.PatchOptions{}, "status")
	if err != nil {
		return false, fmt.Errorf("write status of pool %s: %w", pool.Name, err)
	}
	return true, nil
}

// setUpdates writes what the pool's update source offers, or removes it
// with the source.
func setUpdates(st *v1alpha1.UpdatePoolStatus, offer *updateOffer) {
	if offer == nil {
		st.Updates = nil
		meta.RemoveStatusCondition(&st.Conditions, v1alpha1.PoolRetrievedUpdates)
		return
	}
	st.Updates = offer.status
	meta.SetStatusCondition(&st.Conditions, offer.retrieved)
}

// statusPatch is the merge patch that writes st over prev. A merge patch
// leaves a field it omits as it was, and omitempty omits a list or the
// updates gone since prev: each is written as null, or the status would
// keep it, never equal st, and be written again in every pass.
func statusPatch(st, prev v1alpha1.UpdatePoolStatus) ([]byte, error) {
	body, err := asMap(st)
	if err != nil {
		return nil, err
	}
	old, err := asMap(prev)
	if err != nil {
		return nil, err
	}
	nullRemoved(body, old)
	return json.Marshal(map[string]any{"status": body})
}

func asMap(st v1alpha1.UpdatePoolStatus) (map[string]any, error) {
	data, err := json.Marshal(st)
	if err != nil {
		return nil, fmt.Errorf("encode pool status: %w", err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("decode pool status: %w", err)
	}
	return m, nil
}

// nullRemoved sets to null each key of prev that body lacks, in body and
// in the objects both have (lists are replaced whole by a merge patch).
func nullRemoved(body, prev map[string]any) {
	for k, was := range prev {
		now, ok := body[k]
		if !ok {
			body[k] = nil
			continue
		}
		nowMap, isMap := now.(map[string]any)
		wasMap, wasAMap := was.(map[string]any)
		if isMap && wasAMap {
			nullRemoved(nowMap, wasMap)
		}
	}
}

func sortedCopy(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}

// pausedMessage is the Paused condition's message: the operator's reason.
func pausedMessage(spec v1alpha1.UpdatePoolSpec) string {
	switch {
	case !spec.Paused:
		return "new grants allowed"
	case spec.PauseReason == "":
		return "paused (no reason given): no new grants; nodes mid-update finish"
	}
	return spec.PauseReason
}

// describe lists unavailable nodes with their reasons, bounded so a large
// pool's message stays readable.
func describe(unavailable map[string]string, granting []string) string {
	names := make([]string, 0, len(unavailable))
	for n := range unavailable {
		names = append(names, n)
	}
	sort.Strings(names)
	var parts []string
	for _, n := range names {
		parts = append(parts, n+" ("+unavailable[n]+")")
	}
	for _, n := range granting {
		parts = append(parts, n+" (granted now)")
	}
	if len(parts) == 0 {
		return "none"
	}
	if len(parts) > 10 {
		parts = append(parts[:10], fmt.Sprintf("and %d more", len(parts)-10))
	}
	return strings.Join(parts, ", ")
}
