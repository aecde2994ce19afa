package main

import (
	"context"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"

	"github.com/nodeward/nodeward/api/kube"
	"github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/drain"
)

// completionTimeout bounds the API requests of a completion when
// --request-timeout does not: a shell waits on them.
const completionTimeout = 5 * time.Second

// completeNodes completes node names through the command's own
// connection flags (cobra parses them before it asks), leaving out the
// nodes already named. Nothing is offered, quietly, when the API server
// cannot be reached.
func completeNodes(conn *kubeFlags, maxArgs int) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if maxArgs > 0 && len(args) >= maxArgs {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		names, err := listNames(cmd.Context(), conn, func(ctx context.Context, c *kube.Client, _ *dynamic.DynamicClient) ([]string, error) {
			list, err := c.Nodes().List(ctx, metav1.ListOptions{})
			if err != nil {
				return nil, err
			}
			names := make([]string, len(list.Items))
			for i, n := range list.Items {
				names[i] = n.Name
			}
			return names, nil
		})
		return offer(names, err, args, toComplete)
	}
}

// completePools completes UpdatePool names as completeNodes does nodes;
// one pool argument at most.
func completePools(conn *kubeFlags) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		names, err := listNames(cmd.Context(), conn, func(ctx context.Context, _ *kube.Client, d *dynamic.DynamicClient) ([]string, error) {
			list, err := d.Resource(v1alpha1.UpdatePoolResource()).List(ctx, metav1.ListOptions{})
			if err != nil {
				return nil, err
			}
			names := make([]string, len(list.Items))
			for i, p := range list.Items {
				names[i] = p.GetName()
			}
			return names, nil
		})
		return offer(names, err, args, toComplete)
	}
}

// completeUpdateVersions completes --to with the versions the named
// pool's status.updates lists, recommended or not; nothing before a pool
// is named.
func completeUpdateVersions(conn *kubeFlags) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) == 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		versions, err := listNames(cmd.Context(), conn, func(ctx context.Context, _ *kube.Client, d *dynamic.DynamicClient) ([]string, error) {
			obj, err := d.Resource(v1alpha1.UpdatePoolResource()).Get(ctx, args[0], metav1.GetOptions{})
			if err != nil {
				return nil, err
			}
			pool, err := decodePool(obj)
			if err != nil {
				return nil, err
			}
			u := poolUpdates(pool)
			var versions []string
			for _, r := range recommendedReleases(u) {
				versions = append(versions, r.Version)
			}
			for _, c := range notRecommended(u) {
				versions = append(versions, c.Release.Version)
			}
			return versions, nil
		})
		return offer(versions, err, nil, toComplete)
	}
}

func listNames(ctx context.Context, conn *kubeFlags, list func(context.Context, *kube.Client, *dynamic.DynamicClient) ([]string, error)) ([]string, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	cfg, err := conn.restConfig()
	if err != nil {
		return nil, err
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = completionTimeout
	}
	c, err := kube.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	d, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return list(ctx, c, d)
}

// offer is the names starting with toComplete and not in args; an error
// offers nothing and tells the shell not to fall back to file names
// (cobra writes the error to its debug log only).
func offer(names []string, err error, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if err != nil {
		cobra.CompDebugln("nodeward completion: "+err.Error(), false)
		return nil, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveError
	}
	var out []cobra.Completion
	for _, n := range names {
		if strings.HasPrefix(n, toComplete) && !contains(args, n) {
			out = append(out, n)
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// flagValues are the values of the string flags that take one of a few
// words but are not enumFlags.
func flagValues(name string) []string {
	switch name {
	case "on-timeout", "drain-on-timeout":
		return []string{string(drain.Fail), string(drain.Retry), string(drain.Yield), string(drain.Force)}
	case "protocol":
		return []string{"nodeward", "mco"}
	case "metrics-auth":
		return []string{"kubernetes", "none"}
	case "image-transport":
		return []string{"signed", "unverified-registry", "unverified-image"}
	case "emptydir", "unmanaged", "drain-emptydir", "drain-unmanaged":
		return []string{"refuse", "evict"}
	}
	return nil
}

// registerFlagCompletions walks every command and offers the values of
// each enumFlag (their allowed values) and of the flags in flagValues.
func registerFlagCompletions(cmd *cobra.Command) {
	register := func(fl *pflag.Flag) {
		values := flagValues(fl.Name)
		if e, ok := fl.Value.(*enumFlag); ok {
			values = e.allowed
		}
		if values == nil {
			return
		}
		if _, exists := cmd.GetFlagCompletionFunc(fl.Name); exists {
			return
		}
		_ = cmd.RegisterFlagCompletionFunc(fl.Name, cobra.FixedCompletions(values, cobra.ShellCompDirectiveNoFileComp))
	}
	cmd.LocalNonPersistentFlags().VisitAll(register)
	cmd.PersistentFlags().VisitAll(register)
	for _, sub := range cmd.Commands() {
		registerFlagCompletions(sub)
	}
}
