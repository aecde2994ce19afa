package main

import (
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
			cmd.Root().Annotations = map[string]string{ranAnnotation: "true"}
			var err error
			g.logger, err = g.log.setup(cmd.ErrOrStderr())
			return err
		},
	}
	g.log.register(root.PersistentFlags())
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError(err) })
	root.AddCommand(
		newVersionCommand(),
		newAgentCommand(g),
		newCoordinatorCommand(g),
		newCheckCommand(g),
		newDrainCommand(g),
		newUncordonCommand(),
		newStatusCommand(),
		newPauseCommand(),
		newResumeCommand(),
		newUpgradeCommand(),
		newMustGatherCommand(),
	)
	registerFlagCompletions(root)
	return root
}

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version, commit and Go version",
		Long:  "Print the version, commit and Go version." + exitCodesHelp("1 the output could not be written"),
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "nodeward %s (commit %s, %s %s/%s)\n",
				version, commit, runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return err
		},
	}
}
