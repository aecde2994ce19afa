package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/nodeward/nodeward/api/kube"
	"github.com/nodeward/nodeward/drain"
)

func newDrainCommand(g *globals) *cobra.Command {
	var f drainFlags
	cmd := &cobra.Command{
		Use:   "drain [NODE...]",
		Short: "Cordon and drain nodes, PDB-aware and ordered, naming whatever blocks them",
		Long: `Wait for each node's pre-drain hooks, cordon it (recording that nodeward did) and evict its
pods through the Eviction API in batches by order, printing the plan, each pod's progress and
a summary. kubectl drain's flags work under their names; DaemonSet and mirror pods are always
left. Nodes named or selected by -l are drained one after the other; the first that does not
drain ends the command.` + exitCodesHelp("1 failed (an API request failed)",
			"2 blocked: --timeout passed with pods still blocking, named in the output (the node stays\n"+
				"    cordoned; with --on-timeout=yield it is uncordoned again)",
			"3 refused: pods with emptyDir data or without a controller (--delete-emptydir-data, --force);\n"+
				"    nothing was cordoned or evicted"),
		Args:              func(_ *cobra.Command, args []string) error { return f.nodeArgs(args) },
		ValidArgsFunction: completeNodes(&f.kube, 0),
		RunE:              func(cmd *cobra.Command, args []string) error { return runDrain(cmd, g, f, args) },
	}
	f.register(cmd)
	return cmd
}

func runDrain(cmd *cobra.Command, g *globals, f drainFlags, nodes []string) error {
	opts, err := f.options()
	if err != nil {
		return err
	}
	cfg, err := f.kube.restConfig()
	if err != nil {
		return err
	}
	// One eviction per pod in a burst: the default client limit (5/s)
	// would pace a 100-pod drain to 20 s on its own.
	cfg.QPS, cfg.Burst = 100, 200
	client, err := kube.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("create Kubernetes client: %w", err)
	}
	if f.selector != "" {
		if nodes, err = selectNodes(cmd.Context(), client, f.selector); err != nil {
			return err
		}
	}
	recorder := client.NewRecorder(cmd.Context(), corev1.EventSource{Component: "nodeward-drain"},
		kube.RecorderOptions{Log: g.logger})
	defer recorder.Shutdown(kube.RecorderFlushTimeout)
	for i, node := range nodes {
		err := drainNode(cmd, client, drain.Config{Client: client, Node: node, Options: opts, Log: g.logger.With("node", node),
			Recorder: recorder}, f)
		if err != nil {
			if rest := nodes[i+1:]; len(rest) > 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "Not drained: %s\n", strings.Join(rest, ", "))
			}
			return err
		}
	}
	return nil
}

// selectNodes lists the names of the nodes selector selects (-l).
func selectNodes(ctx context.Context, client *kube.Client, selector string) ([]string, error) {
	sel, err := labels.Parse(selector)
	if err != nil {
		return nil, usageError(fmt.Errorf("--selector %q: %w", selector, err))
	}
	list, err := client.Nodes().List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return nil, fmt.Errorf("list nodes selected by %q: %w", selector, err)
	}
	if len(list.Items) == 0 {
		return nil, fmt.Errorf("no node matches --selector %q", selector)
	}
	names := make([]string, len(list.Items))
	for i, n := range list.Items {
		names[i] = n.Name
	}
	sort.Strings(names)
	return names, nil
}

// drainNode drains one node, printing its plan, progress and summary.
func drainNode(cmd *cobra.Command, client *kube.Client, dc drain.Config, f drainFlags) error {
	out := cmd.OutOrStdout()
	pr := &drainPrinter{out: out, quiet: f.quiet}
	dc.Progress = pr.progress
	d, err := drain.New(dc)
	if err != nil {
		return usageError(err)
	}
	plan, err := d.Plan(cmd.Context())
	if err != nil {
		return err
	}
	printPlan(out, plan)
	if f.dryRun.value == "server" && plan.Err() == nil {
		if err := serverDryRun(cmd.Context(), out, client, plan, dc.Options); err != nil {
			return err
		}
	}
	res, err := d.Run(cmd.Context())
	printSummary(out, dc.Node, res, err, dc.Options)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, drain.ErrBlocked):
		return &exitError{code: exitDrainBlocked, err: err}
	case errors.Is(err, drain.ErrRefused):
		return &exitError{code: exitDrainRefused, err: err}
	}
	return &exitError{code: exitDrainFailed, err: err}
}

// serverDryRun asks the API server, without changing anything, whether
// each planned pod's eviction (or deletion) would be allowed now.
func serverDryRun(ctx context.Context, out io.Writer, client *kube.Client, p *drain.Plan, o drain.Options) error {
	dry := metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}, GracePeriodSeconds: o.GracePeriod}
	for _, b := range p.Batches {
		for _, pp := range b.Pods {
			if pp.Behavior != drain.BehaviorEvict || pp.Terminating {
				continue
			}
			var err error
			if o.DisableEviction {
				err = client.Pods(pp.Pod.Namespace).Delete(ctx, pp.Pod.Name, dry)
			} else {
				err = client.Evict(ctx, &policyv1.Eviction{
					ObjectMeta:    metav1.ObjectMeta{Name: pp.Pod.Name, Namespace: pp.Pod.Namespace},
					DeleteOptions: &dry,
				})
			}
			switch {
			case err == nil:
				fmt.Fprintf(out, "  server dry run: %s would be evicted\n", pp.Pod)
			case apierrors.IsTooManyRequests(err), apierrors.IsNotFound(err):
				fmt.Fprintf(out, "  server dry run: %s NOT now: %v\n", pp.Pod, err)
			default:
				return fmt.Errorf("server dry run of pod %s: %w", pp.Pod, err)
			}
		}
	}
	return nil
}

// drainPrinter prints progress lines; the drain calls it from its workers.
type drainPrinter struct {
	out   io.Writer
	quiet bool
	mu    sync.Mutex
	gone  int
}

func (p *drainPrinter) progress(ev drain.Progress) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if ev.Kind == drain.ProgressGone {
		p.gone++
	}
	if p.quiet && ev.Kind != drain.ProgressBlocked && ev.Kind != drain.ProgressTimedOut {
		return
	}
	switch ev.Kind {
	case drain.ProgressBatch:
		fmt.Fprintf(p.out, "batch %s: %s\n", ev.Batch, ev.Message)
	case drain.ProgressGone:
		fmt.Fprintf(p.out, "  gone      %s (%d)\n", ev.Pod, p.gone)
	case drain.ProgressBlocked:
		if ev.Pod.Name == "" {
			fmt.Fprintf(p.out, "  waiting   %s\n", ev.Message)
		} else {
			fmt.Fprintf(p.out, "  BLOCKED   %s\n", ev.Message)
		}
	default:
		fmt.Fprintf(p.out, "  %-9s %s %s\n", ev.Kind, ev.Pod, ev.Message)
	}
}

func printPlan(out io.Writer, p *drain.Plan) {
	fmt.Fprintf(out, "Plan for node %s: %d pods in %d batches, %d skipped, %d finished to delete\n",
		p.Node, p.Pods(), len(p.Batches), len(p.Skipped), len(p.Finished))
	for i, b := range p.Batches {
		fmt.Fprintf(out, "  batch %d (%s): %d pods\n", i+1, b.Label(), len(b.Pods))
		for _, pp := range b.Pods {
			note := ""
			if pp.Rule != "" {
				note = " [rule " + pp.Rule + "]"
			}
			if pp.Behavior != drain.BehaviorEvict {
				note += " [" + string(pp.Behavior) + "]"
			}
			if pp.Terminating {
				note += " [already terminating]"
			}
			fmt.Fprintf(out, "    %s%s\n", pp.Pod, note)
		}
	}
	for _, s := range p.Skipped {
		fmt.Fprintf(out, "  skip    %s: %s\n", s.Pod, s.Reason)
	}
	for _, r := range p.Finished {
		fmt.Fprintf(out, "  delete  %s: finished\n", r)
	}
	for _, r := range p.Refused {
		fmt.Fprintf(out, "  REFUSE  %s: %s\n", r.Pod, r.Reason)
	}
}

func printSummary(out io.Writer, node string, res *drain.Result, err error, o drain.Options) {
	if res == nil {
		res = &drain.Result{}
	}
	status := "drained"
	if o.DryRun {
		status = "would be drained (dry run, nothing changed)"
	}
	switch {
	case errors.Is(err, drain.ErrBlocked):
		status = "BLOCKED"
	case errors.Is(err, drain.ErrRefused):
		status = "REFUSED"
	case err != nil:
		status = "FAILED"
	}
	fmt.Fprintf(out, "Node %s %s in %s: %d evicted, %d finished deleted, %d force-deleted\n",
		node, status, res.Duration.Round(time.Millisecond), res.Evicted, res.Deleted, res.Forced)
	for _, b := range res.Blockers {
		fmt.Fprintf(out, "  blocking: %s\n", b)
	}
	if errors.Is(err, drain.ErrBlocked) && o.OnTimeout == drain.Fail {
		fmt.Fprintf(out, "Node %s stays cordoned; `nodeward uncordon %s` lifts the cordon\n", node, node)
	}
}

func newUncordonCommand() *cobra.Command {
	var conn kubeFlags
	var force bool
	cmd := &cobra.Command{
		Use:   "uncordon NODE",
		Short: "Lift nodeward's own cordon of a node (an administrator's cordon only with --force)",
		Long: "Lift the cordon nodeward's drain made, and its record; a cordon nodeward did not make stays\n" +
			"unless --force." + exitCodesHelp("1 failed (an API request failed)",
			"2 the node was cordoned by someone else and stays cordoned (use --force)"),
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeNodes(&conn, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := conn.client()
			if err != nil {
				return err
			}
			d, err := drain.New(drain.Config{Client: client, Node: args[0]})
			if err != nil {
				return err
			}
			res, err := d.Uncordon(cmd.Context(), force)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "node %s: %s\n", args[0], res)
			if res == drain.CordonedByOther {
				return &exitError{code: 2, err: fmt.Errorf("node %s was cordoned by someone else; use --force to uncordon it anyway", args[0])}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "also lift a cordon nodeward did not make")
	conn.register(cmd, false)
	return cmd
}

// agentDrainFlags are the drain options of `nodeward agent`; the timeout
// and what happens then come from the pool through the coordinator.
type agentDrainFlags struct {
	rulesFile, emptyDir, unmanaged string
	byPriority                     bool
}

func (f *agentDrainFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.rulesFile, "drain-rules", "", "drain rules file (kind: DrainRules) ordering, skipping or waiting for pods")
	fl.StringVar(&f.emptyDir, "drain-emptydir", "refuse", "pods with emptyDir volumes: refuse (the drain waits, reported) or evict")
	fl.StringVar(&f.unmanaged, "drain-unmanaged", "refuse", "pods without a controller: refuse (the drain waits, reported) or evict")
	fl.BoolVar(&f.byPriority, "drain-by-priority", false, "inside an order, drain pods of higher PriorityClass first")
}

func (f agentDrainFlags) options() (drain.Options, error) {
	df := drainFlags{rulesFile: f.rulesFile, emptyDir: f.emptyDir, unmanaged: f.unmanaged,
		byPriority: f.byPriority, onTimeout: string(drain.Retry), concurrency: 32, gracePeriod: -1}
	o, err := df.options()
	if err != nil {
		return o, &exitError{code: exitCode(err), err: fmt.Errorf("agent: %s", strings.NewReplacer("--rules", "--drain-rules",
			"--emptydir", "--drain-emptydir", "--unmanaged", "--drain-unmanaged").Replace(err.Error()))}
	}
	return o, nil
}
