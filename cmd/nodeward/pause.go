package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/util/retry"

	"github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/coordinator"
)

// maxPauseReason bounds spec.pauseReason, as the CRD does.
const maxPauseReason = 1024

// newPauseCommand is the andon cord: one command stops a pool's grants.
func newPauseCommand() *cobra.Command {
	var conn kubeFlags
	var reason string
	cmd := &cobra.Command{
		Use:   "pause POOL --reason TEXT",
		Short: "Stop a pool's new grants at once (the andon cord); nodes mid-update finish",
		Long: "Set spec.paused and spec.pauseReason on the UpdatePool POOL. The coordinator grants no node of the\n" +
			"pool from then on; nodes already granted finish their update. The reason shows in the pool's Paused\n" +
			"condition, in `nodeward status` and in the metric nodeward_pool_waiting{reason=\"paused\"}.\n" +
			"`nodeward resume POOL` undoes it." + exitCodesHelp("1 failed (the API server refused, POOL does not exist)"),
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completePools(&conn),
		RunE: func(cmd *cobra.Command, args []string) error {
			reason = strings.TrimSpace(reason)
			switch {
			case reason == "":
				return usageError(errors.New("--reason is required: say why the pool stops (it shows in the pool's status)"))
			case len(reason) > maxPauseReason:
				return usageError(fmt.Errorf("--reason is %d bytes; at most %d", len(reason), maxPauseReason))
			}
			pool, err := patchPoolSpec(cmd, &conn, args[0], map[string]any{"paused": true, "pauseReason": reason})
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "pool %s paused: %s\n%s", pool.Name, reason, inFlight(pool))
			return nil
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why the pool stops; required, shown in its status")
	conn.register(cmd, false)
	return cmd
}

func newResumeCommand() *cobra.Command {
	var conn kubeFlags
	cmd := &cobra.Command{
		Use:   "resume POOL",
		Short: "Let a paused or halted pool grant again",
		Long: "Clear spec.paused and spec.pauseReason on the UpdatePool POOL and acknowledge the nodes that failed on\n" +
			"its current target (status.failedNodes), so that a pool halted by its failureBudget or a failed canary\n" +
			"goes on: the budget then counts only failures after this one. It also clears a halt by a gate that\n" +
			"failed while a node soaked. The coordinator grants the pool's nodes again under maxUnavailable." + exitCodesHelp("1 failed (the API server refused, POOL does not exist)"),
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completePools(&conn),
		RunE: func(cmd *cobra.Command, args []string) error {
			return resume(cmd, &conn, args[0])
		},
	}
	conn.register(cmd, false)
	return cmd
}

// resume unpauses the pool and acknowledges its failures so far, with the
// resourceVersion it read them at: a failure the coordinator lists in
// between is never acknowledged unseen (the patch then conflicts, and is
// retried on a fresh read).
func resume(cmd *cobra.Command, conn *kubeFlags, name string) error {
	pools, err := poolClient(conn)
	if err != nil {
		return err
	}
	var acked []string
	var halt string
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pool, err := readPool(cmd, pools, name)
		if err != nil {
			return err
		}
		meta := map[string]any{"resourceVersion": pool.ResourceVersion}
		annotations := map[string]any{}
		if acked = pool.Status.FailedNodes; len(acked) > 0 {
			annotations[v1alpha1.AnnotationFailuresAcknowledged] = coordinator.FailuresAcknowledgement(pool)
		}
		if halt = pool.Annotations[v1alpha1.AnnotationHalted]; halt != "" {
			annotations[v1alpha1.AnnotationHalted] = nil // a gate that failed during a soak
		}
		if len(annotations) > 0 {
			meta["annotations"] = annotations
		}
		_, err = patchPool(cmd, pools, name, map[string]any{"metadata": meta,
			"spec": map[string]any{"paused": false, "pauseReason": nil}})
		return err
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "pool %s resumed\n", name)
	if len(acked) > 0 {
		fmt.Fprintf(cmd.OutOrStdout(), "acknowledged failures on the current target: %s\n", strings.Join(acked, ", "))
	}
	if _, msg, ok := strings.Cut(halt, ":"); ok {
		fmt.Fprintf(cmd.OutOrStdout(), "cleared the halt: %s\n", msg)
	}
	return nil
}

// patchPoolSpec merges spec into the UpdatePool name and returns it.
func patchPoolSpec(cmd *cobra.Command, conn *kubeFlags, name string, spec map[string]any) (*v1alpha1.UpdatePool, error) {
	pools, err := poolClient(conn)
	if err != nil {
		return nil, err
	}
	return patchPool(cmd, pools, name, map[string]any{"spec": spec})
}

func poolClient(conn *kubeFlags) (dynamic.ResourceInterface, error) {
	cfg, err := conn.restConfig()
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("create dynamic client: %w", err)
	}
	return dyn.Resource(v1alpha1.UpdatePoolResource()), nil
}

func readPool(cmd *cobra.Command, pools dynamic.ResourceInterface, name string) (*v1alpha1.UpdatePool, error) {
	obj, err := pools.Get(cmd.Context(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("UpdatePool %q not found", name)
	}
	if err != nil {
		return nil, fmt.Errorf("read UpdatePool %s: %w", name, err)
	}
	return decodePool(obj)
}

// patchPool merge-patches the UpdatePool name with body.
func patchPool(cmd *cobra.Command, pools dynamic.ResourceInterface, name string, body map[string]any) (*v1alpha1.UpdatePool, error) {
	data, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	obj, err := pools.Patch(cmd.Context(), name, types.MergePatchType, data, metav1.PatchOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("UpdatePool %q not found", name)
	}
	if err != nil {
		return nil, fmt.Errorf("update UpdatePool %s: %w", name, err)
	}
	return decodePool(obj)
}

func decodePool(obj *unstructured.Unstructured) (*v1alpha1.UpdatePool, error) {
	var pool v1alpha1.UpdatePool
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &pool); err != nil {
		return nil, fmt.Errorf("read UpdatePool %s: %w", obj.GetName(), err)
	}
	return &pool, nil
}

// inFlight says which nodes are still unavailable (they finish).
func inFlight(pool *v1alpha1.UpdatePool) string {
	if pool.Status.UnavailableMachineCount == 0 {
		return "no node is mid-update\n"
	}
	return fmt.Sprintf("%d nodes unavailable now finish their update (nodeward status %s)\n", pool.Status.UnavailableMachineCount, pool.Name)
}
