package main

import "github.com/spf13/cobra"

func newCoordinatorCommand() *cobra.Command {
	var kube kubeFlags
	cmd := &cobra.Command{
		Use:   "coordinator",
		Short: "Run the update coordinator: grant slots under maxUnavailable",
		RunE: func(*cobra.Command, []string) error {
			return errNotImplemented
		},
	}
	kube.register(cmd)
	return cmd
}
