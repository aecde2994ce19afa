package main

import "github.com/spf13/cobra"

func newCheckCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "check",
		Short: "Report the health of this host once; no cluster needed",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			return &exitError{code: 2, err: errNotImplemented}
		},
	}
}
