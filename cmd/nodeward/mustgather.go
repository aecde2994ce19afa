package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/conditions"
	"github.com/nodeward/nodeward/daemon"
	"github.com/nodeward/nodeward/mustgather"
)

// exitGatherPartial: the archive was written but some parts could not be
// collected; the index names them with their errors.
const exitGatherPartial = 2

type mustGatherFlags struct {
	conn      kubeFlags
	output    string
	destDir   string
	since     time.Duration
	namespace string
	hostRoot  string
	stateDir  string
	hostCheck bool
}

func newMustGatherCommand() *cobra.Command {
	var f mustGatherFlags
	cmd := &cobra.Command{
		Use:   "must-gather",
		Short: "Collect nodeward's state, events and logs into one archive for a support case",
		Long: "Collect the UpdatePools, every Node's nodeward state, Events, the coordinator's and agents' logs,\n" +
			"Leases, nodeward's ConfigMaps, the MCO's MachineConfigNodes and pools and the Machines' hooks (where\n" +
			"served) and, with --host-root, the agent's state files, into a gzipped tarball with an index.json.\n" +
			"Secrets are never read; credentials in what is collected are redacted (docs/must-gather.md).\n" +
			"A part that cannot be collected is named in index.json and the rest is still collected." +
			exitCodesHelp("1 failed (the archive could not be written)",
				"2 the archive was written but some parts failed (index.json names them)"),
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runMustGather(cmd, f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.output, "output", "", "the tarball to write (default nodeward-must-gather-<UTC timestamp>.tar.gz)")
	fl.StringVar(&f.destDir, "dest-dir", "", "write the files unpacked under this directory instead of a tarball")
	fl.DurationVar(&f.since, "since", 6*time.Hour, "logs newer than this (0: all the kubelet kept)")
	fl.StringVarP(&f.namespace, "namespace", "n", v1alpha1.AgentLeaseNamespace, "nodeward's namespace")
	fl.StringVar(&f.hostRoot, "host-root", "", "a node's root file system (/ on the node, /host in a debug pod): collect the agent's state files")
	fl.StringVar(&f.stateDir, "state-dir", "/var/lib/nodeward", "the agent's --state-dir, inside --host-root")
	fl.BoolVar(&f.hostCheck, "host-check", false, "add `nodeward check --json` of the machine this runs on (run it on the node, with its /proc)")
	f.conn.register(cmd, false)
	return cmd
}

func runMustGather(cmd *cobra.Command, f mustGatherFlags) error {
	if f.output != "" && f.destDir != "" {
		return usageError(fmt.Errorf("--output and --dest-dir exclude each other"))
	}
	if f.since < 0 {
		return usageError(fmt.Errorf("--since %v: must not be negative", f.since))
	}
	cfg, err := f.conn.restConfig()
	if err != nil {
		return err
	}
	now := time.Now().UTC()
	opts := mustgather.Options{Namespace: f.namespace, Since: f.since,
		HostRoot: f.hostRoot, StateDir: f.stateDir, Progress: cmd.ErrOrStderr()}
	if f.hostCheck {
		opts.HostCheck = hostCheckReport
	}
	g, err := mustgather.NewForConfig(cfg, opts)
	if err != nil {
		return err
	}
	sink, where, err := openSink(f, now)
	if err != nil {
		return err
	}
	idx, err := g.Run(cmd.Context(), sink)
	if closeErr := sink.Close(); err == nil {
		err = closeErr
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "%s\n", where)
	if failed := idx.Failed(); len(failed) > 0 {
		return &exitError{code: exitGatherPartial, err: fmt.Errorf("wrote %s, but these parts failed (see index.json): %s",
			where, strings.Join(failed, ", "))}
	}
	return nil
}

// hostCheckReport is `nodeward check --json` with the built-in
// configuration: a condition True or a probe that could not run is in
// the report, not a failure to collect it.
func hostCheckReport(ctx context.Context) ([]byte, error) {
	cfg := daemon.DefaultFileConfig()
	probes := conditions.Probes(cfg.Config, nil)
	defer conditions.Close(probes)
	report := conditions.Check(ctx, probes, conditions.NewTaintTable(cfg.Taints))
	data, err := json.MarshalIndent(report, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode the host check: %w", err)
	}
	return append(data, '\n'), nil
}

func openSink(f mustGatherFlags, now time.Time) (mustgather.Sink, string, error) {
	if f.destDir != "" {
		s, err := mustgather.NewDirSink(f.destDir)
		return s, f.destDir, err
	}
	stamp := now.Format("20060102-150405")
	out := f.output
	if out == "" {
		out = "nodeward-must-gather-" + stamp + ".tar.gz"
	}
	s, err := mustgather.NewTarSink(out, "nodeward-must-gather-"+stamp, now)
	return s, out, err
}

// gatherArgs turns the image's /usr/bin/gather (a link to the binary,
// `oc adm must-gather`'s convention) into `must-gather --dest-dir
// /must-gather`, with `oc adm must-gather --since` as it passes it
// (MUST_GATHER_SINCE); other arguments are kept.
func gatherArgs(argv0 string, args []string) []string {
	if base := argv0[strings.LastIndex(argv0, "/")+1:]; base != "gather" {
		return args
	}
	out := []string{"must-gather", "--dest-dir=/must-gather"}
	if since := os.Getenv("MUST_GATHER_SINCE"); since != "" {
		out = append(out, "--since="+since)
	}
	return append(out, args...)
}
