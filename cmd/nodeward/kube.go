package main

import (
	"fmt"

	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nodeward/nodeward/api/kube"
)

// kubeFlags are the connection flags of every subcommand that talks to a
// cluster.
type kubeFlags struct {
	kubeconfig string
	context    string
}

func (f *kubeFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.kubeconfig, "kubeconfig", "",
		"path to a kubeconfig file (default: $KUBECONFIG, ~/.kube/config, then the in-cluster service account)")
	cmd.Flags().StringVar(&f.context, "context", "", "kubeconfig context to use")
}

// restConfig finds credentials as kubectl does: --kubeconfig, then the
// KUBECONFIG variable, then ~/.kube/config, and, when none of them names a
// cluster, the in-cluster service account.
func (f *kubeFlags) restConfig() (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = f.kubeconfig
	overrides := &clientcmd.ConfigOverrides{CurrentContext: f.context}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("load cluster credentials: %w", err)
	}
	cfg.UserAgent = "nodeward/" + version
	return cfg, nil
}

func (f *kubeFlags) client() (*kube.Client, error) {
	cfg, err := f.restConfig()
	if err != nil {
		return nil, err
	}
	c, err := kube.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("create Kubernetes client: %w", err)
	}
	return c, nil
}
