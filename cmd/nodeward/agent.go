package main

import "github.com/spf13/cobra"

func newAgentCommand() *cobra.Command {
	var kube kubeFlags
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Run the node agent: health conditions, taints and coordinated OS updates",
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
