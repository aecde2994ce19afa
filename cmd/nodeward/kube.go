package main

import (
	"fmt"

	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nodeward/nodeward/api/kube"
)

// kubeFlags are the connection flags of every subcommand that talks to a
// cluster: --kubeconfig and clientcmd's override flags, kubectl's names
// (--server, --token, --as, --context, --request-timeout, …).
type kubeFlags struct {
	kubeconfig string
	overrides  clientcmd.ConfigOverrides
}

// register adds the flags; withNamespace adds -n/--namespace too, for the
// commands where a namespace means something.
func (f *kubeFlags) register(cmd *cobra.Command, withNamespace bool) {
	cmd.Flags().StringVar(&f.kubeconfig, clientcmd.RecommendedConfigPathFlag, "",
		"path to a kubeconfig file (default: $KUBECONFIG, ~/.kube/config, then the in-cluster service account)")
	names := clientcmd.RecommendedConfigOverrideFlags("")
	names.ClusterOverrideFlags.APIServer.ShortName = "s" // kubectl's -s
	if !withNamespace {
		names.ContextOverrideFlags.Namespace.LongName = ""
	}
	clientcmd.BindOverrideFlags(&f.overrides, cmd.Flags(), names)
}

// loader finds credentials as kubectl does: --kubeconfig, then the
// KUBECONFIG variable, then ~/.kube/config, and, when none of them names a
// cluster, the in-cluster service account; the override flags win.
func (f *kubeFlags) loader() clientcmd.ClientConfig {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = f.kubeconfig
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &f.overrides)
}

func (f *kubeFlags) restConfig() (*rest.Config, error) {
	cfg, err := f.loader().ClientConfig()
	if err != nil {
		return nil, configError(fmt.Errorf("load cluster credentials: %w", err))
	}
	cfg.UserAgent = "nodeward/" + version
	return cfg, nil
}

// namespace is -n when given, else the kubeconfig context's or the pod's
// namespace; explicit says whether anything named one.
func (f *kubeFlags) namespace() (ns string, explicit bool, err error) {
	ns, explicit, err = f.loader().Namespace()
	if err != nil {
		return "", false, configError(fmt.Errorf("find the namespace: %w", err))
	}
	return ns, explicit, nil
}

// clientRateLimit is the client-side limit on a long-running process's
// API requests, under the kubelet's flag names. client-go's default (5 a
// second, bursts of 10) paced the agent's own update: a node's update makes
// about 60 requests in its few seconds (cordon, evictions, conditions,
// state reports, uncordon), and at 5 a second its steps after the drain
// waited 0.7 s each on the limiter in the 100-node rollout
// (docs/benchmarks.md). The kubelet's defaults, 50 and 100, bound a node's
// agent as they bound its kubelet.
type clientRateLimit struct {
	qps   float32
	burst int
}

func (r *clientRateLimit) register(cmd *cobra.Command) {
	cmd.Flags().Float32Var(&r.qps, "kube-api-qps", 50, "API requests per second this process may send, sustained (client-side limit)")
	cmd.Flags().IntVar(&r.burst, "kube-api-burst", 100, "API requests this process may send at once above --kube-api-qps")
}

// apply sets the limit on cfg; a bad value is a usage error naming its
// flag.
func (r clientRateLimit) apply(cfg *rest.Config) error {
	if !(r.qps > 0) {
		return usageError(fmt.Errorf("--kube-api-qps %v: must be more than 0", r.qps))
	}
	if r.burst < 1 {
		return usageError(fmt.Errorf("--kube-api-burst %d: must be 1 or more", r.burst))
	}
	cfg.QPS, cfg.Burst = r.qps, r.burst
	return nil
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
