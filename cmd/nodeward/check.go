package main

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/nodeward/nodeward/conditions"
)

func newCheckCommand(g *globals) *cobra.Command {
	var (
		asJSON bool
		flags  healthFlags
	)
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Report the health of this host once; no cluster needed",
		Long: "Samples every probe once and prints the conditions and the taints that would follow.\n" +
			"No cluster is needed." + exitCodesHelp("1 unhealthy: a condition is True", "2 a probe could not run"),
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := flags.load(cmd, g.logger)
			if err != nil {
				return configError(err)
			}
			probes := conditions.Probes(cfg.Config, nil)
			defer conditions.Close(probes)
			report := conditions.Check(cmd.Context(), probes, conditions.NewTaintTable(cfg.Taints))
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				err = enc.Encode(report)
			} else {
				err = printReport(cmd.OutOrStdout(), report)
			}
			if err != nil {
				return &exitError{code: 2, err: fmt.Errorf("print report: %w", err)}
			}
			if code := report.ExitCode(); code != 0 {
				return &exitError{code: code, err: errUnhealthy(code)}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	flags.register(cmd)
	return cmd
}

func errUnhealthy(code int) error {
	if code == 1 {
		return fmt.Errorf("host unhealthy: a condition is True")
	}
	return fmt.Errorf("a probe could not run")
}

func printReport(w io.Writer, r conditions.Report) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PROBE\tCONDITION\tSTATUS\tREASON\tMESSAGE")
	for _, p := range r.Probes {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", p.Probe, p.Condition, p.Status, p.Reason, p.Message)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(r.Taints) == 0 {
		_, err := fmt.Fprintln(w, "\nTaints that would follow: none")
		return err
	}
	fmt.Fprintln(w, "\nTaints that would follow:")
	for _, t := range r.Taints {
		fmt.Fprintln(w, "  "+t)
	}
	return nil
}
