package main

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/nodeward/nodeward/api/kube"
	"github.com/nodeward/nodeward/drain"
)

// Exit codes of `nodeward drain`, part of its contract for scripts.
const (
	exitDrainFailed  = 1
	exitDrainBlocked = 2
	exitDrainRefused = 3
)

type drainFlags struct {
	kube        kubeFlags
	timeout     time.Duration
	dryRun      bool
	rulesFile   string
	onTimeout   string
	emptyDir    string
	unmanaged   string
	byPriority  bool
	concurrency int
	gracePeriod int64
	quiet       bool
}

func newDrainCommand(g *globals) *cobra.Command {
	var f drainFlags
	cmd := &cobra.Command{
		Use:   "drain NODE",
		Short: "Cordon and drain a node, PDB-aware and ordered, naming whatever blocks it",
		Long: `Wait for the node's pre-drain hooks, cordon it (recording that nodeward did) and
evict its pods through the Eviction API in batches by order, printing the plan, each pod's
progress and a summary.` + exitCodesHelp("0 drained", "1 failed (an API request failed)",
			"2 blocked: --on-timeout=yield gave up (the node is uncordoned again)",
			"3 refused: pods with emptyDir data or without a controller, nothing changed"),
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return runDrain(cmd, g, f, args[0]) },
	}
	fl := cmd.Flags()
	fl.DurationVar(&f.timeout, "timeout", 0, "overall drain timeout; what happens then is --on-timeout (0: none)")
	fl.BoolVar(&f.dryRun, "dry-run", false, "print the plan and change nothing")
	fl.StringVar(&f.rulesFile, "rules", "", "drain rules file (kind: DrainRules) ordering, skipping or waiting for pods")
	fl.StringVar(&f.onTimeout, "on-timeout", "retry", "after --timeout: retry (keep going and report), yield (give up, uncordon, exit 2) or force (delete blocking pods, breaking PDBs)")
	fl.StringVar(&f.emptyDir, "emptydir", "refuse", "pods with emptyDir volumes: refuse or evict (their data is lost)")
	fl.StringVar(&f.unmanaged, "unmanaged", "refuse", "pods without a controller: refuse or evict (nothing recreates them)")
	fl.BoolVar(&f.byPriority, "by-priority", false, "inside an order, drain pods of higher PriorityClass first")
	fl.IntVar(&f.concurrency, "concurrency", 32, "evictions in flight at once inside a batch")
	fl.Int64Var(&f.gracePeriod, "grace-period", -1, "termination grace period in seconds for evicted pods (-1: each pod's own)")
	fl.BoolVar(&f.quiet, "quiet", false, "print the plan and the summary only, not each pod")
	f.kube.register(cmd, false)
	return cmd
}

// options turns the flags into drain.Options, naming the bad flag.
func (f drainFlags) options() (drain.Options, error) {
	var o drain.Options
	var err error
	if o.OnTimeout, err = drain.ParseOnTimeout(f.onTimeout); err != nil {
		return o, usageError(fmt.Errorf("--on-timeout: %w", err))
	}
	if o.EmptyDir, err = drain.ParsePodPolicy(f.emptyDir); err != nil {
		return o, usageError(fmt.Errorf("--emptydir: %w", err))
	}
	if o.Unmanaged, err = drain.ParsePodPolicy(f.unmanaged); err != nil {
		return o, usageError(fmt.Errorf("--unmanaged: %w", err))
	}
	if f.rulesFile != "" {
		if o.Rules, err = drain.LoadRules(f.rulesFile); err != nil {
			return o, configError(fmt.Errorf("--rules: %w", err))
		}
	}
	if f.concurrency < 1 {
		return o, usageError(fmt.Errorf("--concurrency %d: must be at least 1", f.concurrency))
	}
	if f.timeout < 0 {
		return o, usageError(fmt.Errorf("--timeout %s: must not be negative", f.timeout))
	}
	if f.gracePeriod < -1 {
		return o, usageError(fmt.Errorf("--grace-period %d: must be -1 (each pod's own) or more", f.gracePeriod))
	}
	if f.gracePeriod >= 0 {
		o.GracePeriod = &f.gracePeriod
	}
	o.Timeout, o.DryRun, o.ByPriority, o.Concurrency = f.timeout, f.dryRun, f.byPriority, f.concurrency
	return o, nil
}

func runDrain(cmd *cobra.Command, g *globals, f drainFlags, node string) error {
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
	out := cmd.OutOrStdout()
	events := record.NewBroadcaster(record.WithContext(cmd.Context()))
	events.StartRecordingToSink(client.EventSink(cmd.Context()))
	defer events.Shutdown()
	pr := &drainPrinter{out: out, quiet: f.quiet}
	d, err := drain.New(drain.Config{
		Client: client, Node: node, Options: opts, Progress: pr.progress,
		Log:      g.logger,
		Recorder: events.NewRecorder(client.Scheme(), corev1.EventSource{Component: "nodeward-drain"}),
	})
	if err != nil {
		return err
	}
	plan, err := d.Plan(cmd.Context())
	if err != nil {
		return err
	}
	printPlan(out, plan)
	res, err := d.Run(cmd.Context())
	printSummary(out, node, res, err)
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

func printSummary(out io.Writer, node string, res *drain.Result, err error) {
	if res == nil {
		res = &drain.Result{}
	}
	status := "drained"
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
		Args: cobra.ExactArgs(1),
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
