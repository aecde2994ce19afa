package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"

	"github.com/nodeward/nodeward/api/kube"
	"github.com/nodeward/nodeward/api/v1alpha1"
)

func newStatusCommand() *cobra.Command {
	var conn kubeFlags
	cmd := &cobra.Command{
		Use:   "status [POOL]",
		Short: "Show update pools and the progress of their nodes",
		Long: "Show the UpdatePools (or POOL) as `oc get mcp` does, then each pool's nodes: update step, grant,\n" +
			"schedulability, how long unavailable and why." + exitCodesHelp("1 failed (the API server refused a request, POOL does not exist)"),
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := conn.restConfig()
			if err != nil {
				return err
			}
			client, err := kube.NewForConfig(cfg)
			if err != nil {
				return err
			}
			dyn, err := dynamic.NewForConfig(cfg)
			if err != nil {
				return err
			}
			list, err := dyn.Resource(v1alpha1.UpdatePoolResource()).List(cmd.Context(), metav1.ListOptions{})
			if err != nil {
				return fmt.Errorf("list UpdatePools: %w", err)
			}
			var pools []v1alpha1.UpdatePool
			for _, item := range list.Items {
				var p v1alpha1.UpdatePool
				if err := runtime.DefaultUnstructuredConverter.FromUnstructured(item.Object, &p); err != nil {
					return fmt.Errorf("decode UpdatePool %s: %w", item.GetName(), err)
				}
				if len(args) == 0 || p.Name == args[0] {
					pools = append(pools, p)
				}
			}
			if len(args) == 1 && len(pools) == 0 {
				return fmt.Errorf("UpdatePool %q not found", args[0])
			}
			out := cmd.OutOrStdout()
			printPools(out, pools)
			for _, p := range pools {
				sel, err := metav1.LabelSelectorAsSelector(p.Spec.NodeSelector)
				if err != nil {
					return fmt.Errorf("pool %s nodeSelector: %w", p.Name, err)
				}
				nodes, err := client.Nodes().List(cmd.Context(), metav1.ListOptions{LabelSelector: sel.String()})
				if err != nil {
					return fmt.Errorf("list nodes of pool %s: %w", p.Name, err)
				}
				fmt.Fprintf(out, "\nPOOL %s\n", p.Name)
				printNodes(out, nodes.Items, time.Now())
			}
			return nil
		},
	}
	conn.register(cmd, false)
	return cmd
}

func condStatus(p v1alpha1.UpdatePool, t string) string {
	if c := meta.FindStatusCondition(p.Status.Conditions, t); c != nil {
		return string(c.Status)
	}
	return "Unknown"
}

// printPools prints the table `oc get mcp` users know.
func printPools(out io.Writer, pools []v1alpha1.UpdatePool) {
	w := tabwriter.NewWriter(out, 0, 4, 3, ' ', 0)
	fmt.Fprintln(w, "NAME\tCONFIG\tUPDATED\tUPDATING\tDEGRADED\tMACHINECOUNT\tREADYMACHINECOUNT\tUPDATEDMACHINECOUNT\tDEGRADEDMACHINECOUNT")
	for _, p := range pools {
		s := p.Status
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\n", p.Name, s.ConfigName,
			condStatus(p, v1alpha1.PoolUpdated), condStatus(p, v1alpha1.PoolUpdating), condStatus(p, v1alpha1.PoolDegraded),
			s.MachineCount, s.ReadyMachineCount, s.UpdatedMachineCount, s.DegradedMachineCount)
	}
	w.Flush()
}

// printNodes prints each node's update step, how long it has been
// unavailable and why it waits or failed.
func printNodes(out io.Writer, nodes []corev1.Node, now time.Time) {
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].Name < nodes[j].Name })
	w := tabwriter.NewWriter(out, 0, 4, 3, ' ', 0)
	fmt.Fprintln(w, "NODE\tSTATE\tGRANTED\tSCHEDULABLE\tUNAVAILABLE FOR\tREASON")
	for _, n := range nodes {
		a := n.Annotations
		state := a[v1alpha1.AnnotationState]
		if state == "" {
			state = "-"
		}
		granted := "no"
		if _, ok := a[v1alpha1.AnnotationGrant]; ok {
			granted = "yes"
		}
		since := "-"
		if t, err := time.Parse(time.RFC3339Nano, a[v1alpha1.AnnotationUnavailableSince]); err == nil {
			since = now.Sub(t).Round(time.Second).String()
		}
		reason := strings.ReplaceAll(a[v1alpha1.AnnotationReason], "\n", " ")
		if reason == "" {
			reason = "-"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%v\t%s\t%s\n", n.Name, state, granted, !n.Spec.Unschedulable, since, reason)
	}
	w.Flush()
}
