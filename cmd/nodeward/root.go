package main

import (
	"errors"
	"fmt"
	"log/slog"
	"runtime"

	"github.com/spf13/cobra"
)

// Set through -ldflags by the Makefile.
var (
	version = "dev"
	commit  = "unknown"
)

// exitError carries a specific process exit code, for commands whose exit
// code is part of their contract (check: 1 unhealthy, 2 probe failed).
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func exitCode(err error) int {
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return 1
}

// globals are the persistent flags every command takes and what they
// build before the command runs.
type globals struct {
	log logFlags
	// logger is built from the log flags before any command runs.
	logger *slog.Logger
}

func newRootCommand() *cobra.Command {
	g := &globals{log: newLogFlags()}
	root := &cobra.Command{
		Use:           "nodeward",
		Short:         "Node health and coordinated rpm-ostree updates for Kubernetes nodes",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			g.logger, err = g.log.setup(cmd.ErrOrStderr())
			return err
		},
	}
	g.log.register(root.PersistentFlags())
	root.AddCommand(
		newVersionCommand(),
		newAgentCommand(g),
		newCoordinatorCommand(g),
		newCheckCommand(),
		newDrainCommand(g),
		newUncordonCommand(),
		newStatusCommand(),
	)
	return root
}

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version, commit and Go version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "nodeward %s (commit %s, %s %s/%s)\n",
				version, commit, runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return err
		},
	}
}
