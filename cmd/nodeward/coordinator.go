package main

import "github.com/spf13/cobra"

func newCoordinatorCommand() *cobra.Command {
	var kube kubeFlags
	cmd := &cobra.Command{
		Use:   "coordinator",
		Short: "Run the update coordinator: grant slots under maxUnavailable",
		RunE: func(*cobra.Command, []string) error {
			// Credentials are checked first so that a misconfigured
			// install fails with the reason, not with the stub's message.
			if _, err := kube.clientset(); err != nil {
				return err
			}
			return errNotImplemented
		},
	}
	kube.register(cmd)
	return cmd
}
