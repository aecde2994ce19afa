package main

import "github.com/spf13/cobra"

func newAgentCommand() *cobra.Command {
	var kube kubeFlags
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Run the node agent: health conditions, taints and coordinated OS updates",
		RunE: func(*cobra.Command, []string) error {
			return errNotImplemented
		},
	}
	kube.register(cmd)
	return cmd
}
