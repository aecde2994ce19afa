package main

import "github.com/spf13/cobra"

func newDrainCommand() *cobra.Command {
	var kube kubeFlags
	cmd := &cobra.Command{
		Use:   "drain",
		Short: "Cordon and drain a node, PDB-aware and ordered",
		RunE: func(*cobra.Command, []string) error {
			return errNotImplemented
		},
	}
	kube.register(cmd)
	return cmd
}
