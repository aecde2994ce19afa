package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/nodeward/nodeward/api/v1alpha1"
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
		Short: "Let a paused pool grant again",
		Long: "Clear spec.paused and spec.pauseReason on the UpdatePool POOL: the coordinator grants its nodes\n" +
			"again under maxUnavailable." + exitCodesHelp("1 failed (the API server refused, POOL does not exist)"),
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completePools(&conn),
		RunE: func(cmd *cobra.Command, args []string) error {
			pool, err := patchPoolSpec(cmd, &conn, args[0], map[string]any{"paused": false, "pauseReason": nil})
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "pool %s resumed\n", pool.Name)
			return nil
		},
	}
	conn.register(cmd, false)
	return cmd
}

// patchPoolSpec merges spec into the UpdatePool name and returns it.
func patchPoolSpec(cmd *cobra.Command, conn *kubeFlags, name string, spec map[string]any) (*v1alpha1.UpdatePool, error) {
	cfg, err := conn.restConfig()
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("create dynamic client: %w", err)
	}
	body, err := json.Marshal(map[string]any{"spec": spec})
	if err != nil {
		return nil, err
	}
	obj, err := dyn.Resource(v1alpha1.UpdatePoolResource()).Patch(cmd.Context(), name, types.MergePatchType, body, metav1.PatchOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("UpdatePool %q not found", name)
	}
	if err != nil {
		return nil, fmt.Errorf("update UpdatePool %s: %w", name, err)
	}
	var pool v1alpha1.UpdatePool
	data, _ := obj.MarshalJSON()
	if err := json.Unmarshal(data, &pool); err != nil {
		return nil, fmt.Errorf("read UpdatePool %s: %w", name, err)
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
