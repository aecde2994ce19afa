package main

import "github.com/spf13/cobra"

func newStatusCommand() *cobra.Command {
	var kube kubeFlags
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show update pools and the progress of their nodes",
		RunE: func(*cobra.Command, []string) error {
			return errNotImplemented
		},
	}
	kube.register(cmd)
	return cmd
}
