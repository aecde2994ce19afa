package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/nodeward/nodeward/api/v1alpha1"
)

// upgradeFlags are `nodeward upgrade`'s own flags.
type upgradeFlags struct {
	conn                  kubeFlags
	to                    string
	includeNotRecommended bool
	allowNotRecommended   bool
	dryRun                bool
}

func newUpgradeCommand() *cobra.Command {
	var f upgradeFlags
	cmd := &cobra.Command{
		Use:   "upgrade [POOL] [--to VERSION]",
		Short: "Show a pool's available OS updates, or target one (as `oc adm upgrade`)",
		Long: "Without --to, show what the update source of POOL (spec.updateSource) offers, as the coordinator lists it\n" +
			"in status.updates: the version the pool's nodes run, Upstream and Channel, the recommended updates and,\n" +
			"with --include-not-recommended, the updates with known risks, each with its Recommended condition and\n" +
			"its risks. Without POOL, every pool that has an update source.\n\n" +
			"--to VERSION sets the spec.osImage of POOL (required) to that release's image pinned to its digest, if\n" +
			"VERSION is one of the pool's updates. A not-recommended update also needs --allow-not-recommended; its\n" +
			"risks are then recorded in spec.updateSource.acceptedRisks, in the same change. The change is refused if\n" +
			"the pool changed after it was read. --dry-run shows the change and has the API server validate it,\n" +
			"storing nothing." + exitCodesHelp("1 failed (POOL does not exist or has no update source, VERSION is not an update of it or is\n    not recommended, the pool changed meanwhile, the API server refused)"),
		Args:              cobra.MaximumNArgs(1),
		ValidArgsFunction: completePools(&f.conn),
		RunE:              func(cmd *cobra.Command, args []string) error { return runUpgrade(cmd, &f, args) },
	}
	cmd.Flags().StringVar(&f.to, "to", "", "target this version: set the pool's spec.osImage to its image pinned to a digest")
	cmd.Flags().BoolVar(&f.includeNotRecommended, "include-not-recommended", false, "also list the updates whose known risks apply to the pool, with their risks")
	cmd.Flags().BoolVar(&f.allowNotRecommended, "allow-not-recommended", false, "with --to: accept the risks of a not-recommended update (recorded in spec.updateSource.acceptedRisks)")
	cmd.Flags().BoolVar(&f.dryRun, "dry-run", false, "with --to: show what would change, validated by the API server, and change nothing")
	_ = cmd.RegisterFlagCompletionFunc("to", completeUpdateVersions(&f.conn))
	f.conn.register(cmd, false)
	return cmd
}

func runUpgrade(cmd *cobra.Command, f *upgradeFlags, args []string) error {
	if f.to == "" {
		if f.allowNotRecommended || f.dryRun {
			return usageError(errors.New("--allow-not-recommended and --dry-run go with --to VERSION"))
		}
		return showUpgrades(cmd, f, poolArg(args))
	}
	if f.includeNotRecommended {
		return usageError(errors.New("--include-not-recommended goes without --to: it lists the updates; --allow-not-recommended takes one"))
	}
	if err := validVersion(f.to); err != nil {
		return usageError(err)
	}
	pools, err := poolClient(&f.conn)
	if err != nil {
		return err
	}
	if len(args) == 0 {
		return usageError(fmt.Errorf("--to needs a POOL: pools with an update source: %s", sourcedPoolNames(cmd.Context(), pools)))
	}
	pool, err := readPool(cmd, pools, args[0])
	if err != nil {
		return err
	}
	choice, err := chooseUpgrade(pool, f.to, f.allowNotRecommended)
	if err != nil {
		return err
	}
	if !choice.changes() {
		fmt.Fprintf(cmd.OutOrStdout(), "pool %s already targets %s (version %s): nothing changed\n", choice.pool, choice.release.Image, choice.release.Version)
		return nil
	}
	if err := applyUpgrade(cmd.Context(), pools, choice, f.dryRun); err != nil {
		return err
	}
	printChoice(cmd.OutOrStdout(), choice, f.dryRun)
	return nil
}

// showUpgrades prints the pool named, or every pool with an update
// source: showing many is harmless, and a pool without a source has
// nothing to show (an error names them when no pool has one).
func showUpgrades(cmd *cobra.Command, f *upgradeFlags, name string) error {
	pools, err := poolClient(&f.conn)
	if err != nil {
		return err
	}
	var shown []*v1alpha1.UpdatePool
	if name != "" {
		pool, err := readPool(cmd, pools, name)
		if err != nil {
			return err
		}
		if err := requireSource(pool); err != nil {
			return err
		}
		shown = append(shown, pool)
	} else if shown, err = sourcedPools(cmd.Context(), pools); err != nil {
		return err
	}
	for i, p := range shown {
		if i > 0 {
			fmt.Fprintln(cmd.OutOrStdout())
		}
		if err := printUpgrades(cmd.OutOrStdout(), p, f.includeNotRecommended); err != nil {
			return err
		}
	}
	return nil
}

// sourcedPools are the pools with an update source, by name; none is an
// error naming the pools there are.
func sourcedPools(ctx context.Context, pools dynamic.ResourceInterface) ([]*v1alpha1.UpdatePool, error) {
	all, err := listPools(ctx, pools)
	if err != nil {
		return nil, err
	}
	var with []*v1alpha1.UpdatePool
	var names []string
	for _, p := range all {
		names = append(names, p.Name)
		if p.Spec.UpdateSource != nil {
			with = append(with, p)
		}
	}
	slices.SortFunc(with, func(a, b *v1alpha1.UpdatePool) int { return strings.Compare(a.Name, b.Name) })
	if len(with) == 0 {
		return nil, fmt.Errorf("no UpdatePool has a spec.updateSource (pools: %s); give one a source (docs/updates.md) or set spec.osImage by hand", listOrNone(names))
	}
	return with, nil
}

// sourcedPoolNames names the pools with an update source for an error
// message; it says so when they cannot be listed.
func sourcedPoolNames(ctx context.Context, pools dynamic.ResourceInterface) string {
	with, err := sourcedPools(ctx, pools)
	if err != nil {
		return "none (" + err.Error() + ")"
	}
	names := make([]string, len(with))
	for i, p := range with {
		names[i] = p.Name
	}
	return strings.Join(names, ", ")
}

func listPools(ctx context.Context, pools dynamic.ResourceInterface) ([]*v1alpha1.UpdatePool, error) {
	list, err := pools.List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list UpdatePools: %w", err)
	}
	out := make([]*v1alpha1.UpdatePool, 0, len(list.Items))
	for i := range list.Items {
		p, err := decodePool(&list.Items[i])
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// applyUpgrade sends the choice's patch. A conflict is reported, not
// retried: the choice was made on what the pool was, and the operator
// should look again at what it is.
func applyUpgrade(ctx context.Context, pools dynamic.ResourceInterface, c upgradeChoice, dryRun bool) error {
	data, err := json.Marshal(c.patch())
	if err != nil {
		return fmt.Errorf("encode the patch of UpdatePool %s: %w", c.pool, err)
	}
	_, err = pools.Patch(ctx, c.pool, types.MergePatchType, data, patchOptions(dryRun))
	switch {
	case apierrors.IsConflict(err):
		return fmt.Errorf("UpdatePool %s changed after it was read (at resourceVersion %s): nothing changed; run `nodeward upgrade %s` to see its updates now, then again with --to: %w",
			c.pool, c.resourceVersion, c.pool, err)
	case apierrors.IsNotFound(err):
		return fmt.Errorf("UpdatePool %q not found (deleted after it was read)", c.pool)
	case err != nil:
		return fmt.Errorf("update UpdatePool %s: %w", c.pool, err)
	}
	return nil
}

// printChoice says what changed, or with --dry-run what would.
func printChoice(out io.Writer, c upgradeChoice, dryRun bool) {
	verb, accept := "set", "accepted risks (recorded in spec.updateSource.acceptedRisks):"
	if dryRun {
		verb, accept = "would be set (dry run, nothing changed)", "risks that would be accepted (spec.updateSource.acceptedRisks):"
	}
	fmt.Fprintf(out, "pool %s: spec.osImage %s to %s (version %s); it was %s\n", c.pool, verb, c.release.Image, c.release.Version, cmp.Or(c.from, "unset"))
	if len(c.accepted) == 0 {
		return
	}
	fmt.Fprintln(out, accept)
	for _, r := range c.accepted {
		fmt.Fprintf(out, "  %s\n", riskLine(r))
	}
}
