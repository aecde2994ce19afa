package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/nodeward/nodeward/drain"
)

// Exit codes of `nodeward drain`, part of its contract for scripts.
const (
	exitDrainFailed  = 1
	exitDrainBlocked = 2
	exitDrainRefused = 3
)

// drainFlags are kubectl drain's flags under kubectl's names, and
// nodeward's own where they add something.
type drainFlags struct {
	kube        kubeFlags
	timeout     time.Duration
	dryRun      enumFlag
	rulesFile   string
	onTimeout   string
	emptyDir    string
	unmanaged   string
	byPriority  bool
	concurrency int
	gracePeriod int64
	quiet       bool
	// kubectl's
	ignoreDaemonSets   bool
	deleteEmptyDirData bool
	force              bool
	podSelector        string
	disableEviction    bool
	selector           string
	skipWaitSeconds    int
}

func (f *drainFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	f.dryRun = enumFlag{value: "none", allowed: []string{"none", "client", "server"}}
	fl.Var(&f.dryRun, "dry-run", "none; client: print the plan, change nothing; server: also ask the API server whether each eviction would be allowed (PDBs), evicting nothing")
	fl.Lookup("dry-run").NoOptDefVal = "client"
	fl.DurationVar(&f.timeout, "timeout", 0, "give up after this long, naming the pods that block, and exit 2 with the node left cordoned (0: wait forever); --on-timeout changes what happens")
	fl.StringVar(&f.onTimeout, "on-timeout", string(drain.Fail), "after --timeout: fail (exit 2, node stays cordoned, as kubectl), retry (keep going and report), yield (give up, uncordon, exit 2) or force (delete blocking pods, breaking PDBs)")
	fl.BoolVar(&f.ignoreDaemonSets, "ignore-daemonsets", false, "accepted for kubectl's scripts: DaemonSet-managed pods are always left on the node")
	fl.BoolVar(&f.deleteEmptyDirData, "delete-emptydir-data", false, "evict pods with emptyDir volumes too (their data is lost); without it the drain refuses them")
	fl.BoolVar(&f.force, "force", false, "evict pods without a controller too (nothing recreates them); without it the drain refuses them")
	fl.StringVar(&f.podSelector, "pod-selector", "", "drain only the pods this label selector selects; the others stay")
	fl.BoolVar(&f.disableEviction, "disable-eviction", false, "delete pods instead of evicting them: PodDisruptionBudgets are NOT honoured")
	fl.StringVarP(&f.selector, "selector", "l", "", "drain every node this label selector selects, one after the other")
	fl.IntVar(&f.skipWaitSeconds, "skip-wait-for-delete-timeout", 0, "do not wait on pods terminating for more than this many seconds (0: 5 minutes)")
	fl.Int64Var(&f.gracePeriod, "grace-period", -1, "termination grace period in seconds for evicted pods (-1: each pod's own)")
	fl.StringVar(&f.rulesFile, "rules", "", "drain rules file (kind: DrainRules) ordering, skipping or waiting for pods")
	fl.BoolVar(&f.byPriority, "by-priority", false, "inside an order, drain pods of higher PriorityClass first")
	fl.IntVar(&f.concurrency, "concurrency", 32, "evictions in flight at once inside a batch")
	fl.BoolVar(&f.quiet, "quiet", false, "print the plan and the summary only, not each pod")
	fl.StringVar(&f.emptyDir, "emptydir", "refuse", "pods with emptyDir volumes: refuse or evict")
	fl.StringVar(&f.unmanaged, "unmanaged", "refuse", "pods without a controller: refuse or evict")
	_ = fl.MarkDeprecated("emptydir", "use --delete-emptydir-data (kubectl's name)")
	_ = fl.MarkDeprecated("unmanaged", "use --force (kubectl's name)")
	f.kube.register(cmd, false)
}

// options turns the flags into drain.Options, naming the bad flag: a bad
// value is a usage error, an unreadable rules file a configuration error.
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
	if f.deleteEmptyDirData {
		o.EmptyDir = drain.Evict
	}
	if f.force {
		o.Unmanaged = drain.Evict
	}
	if f.rulesFile != "" {
		if o.Rules, err = drain.LoadRules(f.rulesFile); err != nil {
			return o, configError(fmt.Errorf("--rules: %w", err))
		}
	}
	if f.podSelector != "" {
		if o.PodSelector, err = labels.Parse(f.podSelector); err != nil {
			return o, usageError(fmt.Errorf("--pod-selector %q: %w", f.podSelector, err))
		}
	}
	if err := f.checkNumbers(); err != nil {
		return o, usageError(err)
	}
	if f.gracePeriod >= 0 {
		o.GracePeriod = &f.gracePeriod
	}
	o.SkipTerminatingAfter = time.Duration(f.skipWaitSeconds) * time.Second
	o.Timeout, o.ByPriority, o.Concurrency = f.timeout, f.byPriority, f.concurrency
	o.DryRun, o.DisableEviction = f.dryRun.value == "client" || f.dryRun.value == "server", f.disableEviction
	return o, nil
}

func (f drainFlags) checkNumbers() error {
	switch {
	case f.concurrency < 1:
		return fmt.Errorf("--concurrency %d: must be at least 1", f.concurrency)
	case f.timeout < 0:
		return fmt.Errorf("--timeout %s: must not be negative", f.timeout)
	case f.gracePeriod < -1:
		return fmt.Errorf("--grace-period %d: must be -1 (each pod's own) or more", f.gracePeriod)
	case f.skipWaitSeconds < 0:
		return fmt.Errorf("--skip-wait-for-delete-timeout %d: must not be negative", f.skipWaitSeconds)
	}
	return nil
}

// nodeArgs checks that the nodes are named by arguments or by -l, not
// both, as kubectl does.
func (f drainFlags) nodeArgs(args []string) error {
	if len(args) > 0 && f.selector != "" {
		return usageError(errors.New("name nodes or give --selector, not both"))
	}
	if len(args) == 0 && f.selector == "" {
		return usageError(errors.New("name at least one node, or give --selector"))
	}
	return nil
}
