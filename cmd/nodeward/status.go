package main

import (
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"

	"github.com/nodeward/nodeward/api/kube"
	"github.com/nodeward/nodeward/api/v1alpha1"
)

// statusFlags are `nodeward status`'s own flags.
type statusFlags struct {
	conn   kubeFlags
	output enumFlag
	watch  bool
}

func newStatusCommand() *cobra.Command {
	f := statusFlags{output: enumFlag{allowed: []string{"json", "yaml", "wide"}}}
	cmd := &cobra.Command{
		Use:   "status [POOL]",
		Short: "Show update pools and the progress of their nodes",
		Long: "Show the UpdatePools (or POOL) as `oc get mcp` does, then each pool's nodes: update step, grant,\n" +
			"schedulability, how long unavailable and why. -o wide adds the grant, target, staged target and\n" +
			"zone; -o json|yaml print the structure docs/status.md documents. --watch prints again whenever a\n" +
			"Node or UpdatePool changes what is shown (json: one object a line; yaml: one document each), until\n" +
			"interrupted." + exitCodesHelp("1 failed (the API server refused a request, POOL does not exist)"),
		Args:              cobra.MaximumNArgs(1),
		ValidArgsFunction: completePools(&f.conn),
		RunE:              func(cmd *cobra.Command, args []string) error { return runStatus(cmd, f, args) },
	}
	cmd.Flags().VarP(&f.output, "output", "o", "output format: json, yaml or wide (default: the tables)")
	cmd.Flags().BoolVarP(&f.watch, "watch", "w", false, "after printing, watch Nodes and UpdatePools and print again on every change")
	f.conn.register(cmd, false)
	return cmd
}

func runStatus(cmd *cobra.Command, f statusFlags, args []string) error {
	cfg, err := f.conn.restConfig()
	if err != nil {
		return err
	}
	client, err := kube.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("create Kubernetes client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("create dynamic client: %w", err)
	}
	poolAPI := dyn.Resource(v1alpha1.UpdatePoolResource())
	ctx := cmd.Context()
	list, err := poolAPI.List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list UpdatePools: %w", err)
	}
	nodes, err := client.Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list nodes: %w", err)
	}
	objs := make([]any, len(list.Items))
	for i := range list.Items {
		objs[i] = &list.Items[i]
	}
	p := statusPrinter{out: cmd.OutOrStdout(), format: f.output.value, pool: poolArg(args)}
	if _, err := p.print(objs, nodes.Items); err != nil {
		return err
	}
	if !f.watch {
		return nil
	}
	return watchStatus(ctx, client, poolAPI, p)
}

func poolArg(args []string) string {
	if len(args) == 1 {
		return args[0]
	}
	return ""
}

// statusPrinter prints a report when it differs from the last one it
// printed.
type statusPrinter struct {
	out    io.Writer
	format string
	// pool, when not empty, is the one pool shown.
	pool string
	last string
}

// print decodes the pools (unstructured UpdatePools) and prints their
// report unless it is the one printed last; printed says whether it did.
func (p *statusPrinter) print(pools []any, nodes []corev1.Node) (printed bool, err error) {
	var shown []v1alpha1.UpdatePool
	for _, obj := range pools {
		u, ok := obj.(interface{ UnstructuredContent() map[string]any })
		if !ok {
			continue
		}
		var pool v1alpha1.UpdatePool
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.UnstructuredContent(), &pool); err != nil {
			return false, fmt.Errorf("decode UpdatePool: %w", err)
		}
		if p.pool == "" || pool.Name == p.pool {
			shown = append(shown, pool)
		}
	}
	if p.pool != "" && len(shown) == 0 {
		return false, fmt.Errorf("UpdatePool %q not found", p.pool)
	}
	r, err := buildReport(shown, nodes)
	if err != nil {
		return false, err
	}
	b, err := json.Marshal(r)
	if err != nil {
		return false, fmt.Errorf("encode report: %w", err)
	}
	if key := string(b); key == p.last {
		return false, nil
	}
	if p.last != "" && p.format != "json" && p.format != "yaml" {
		fmt.Fprintln(p.out)
	}
	p.last = string(b)
	return true, printStatus(p.out, r, p.format, time.Now())
}
