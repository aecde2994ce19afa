package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/test/cluster"
)

// pinned is a digest-pinned release image; c picks its digest.
func pinned(c string) string { return "quay.example/fcos/os@sha256:" + strings.Repeat(c, 64) }

func recommendedCond(status metav1.ConditionStatus, reason, msg string) []metav1.Condition {
	return []metav1.Condition{{Type: v1alpha1.UpdateRecommended, Status: status, Reason: reason, Message: msg,
		LastTransitionTime: metav1.NewTime(time.Date(2026, 11, 28, 3, 0, 0, 0, time.UTC))}}
}

// fixtureUpdates is status.updates as the coordinator writes it: two
// recommended releases (out of order), a conditional one whose risks do
// not apply, one whose risks apply, and one whose evaluation failed and
// whose image is only tagged.
func fixtureUpdates() *v1alpha1.UpdatesStatus {
	aro := v1alpha1.UpdateRisk{Name: "AROBrokenDNS", Message: "Nodes on ARO lose DNS after a reboot.", URL: "https://issues.example/OCPBUGS-1"}
	ceph := v1alpha1.UpdateRisk{Name: "CephPanic", Message: "Kernel panics with CephFS mounts.", URL: "https://issues.example/COS-2781"}
	return &v1alpha1.UpdatesStatus{
		Current:     &v1alpha1.UpdateRelease{Version: "4.18.2", Image: pinned("a")},
		RetrievedAt: &metav1.Time{Time: time.Date(2026, 11, 28, 3, 0, 0, 0, time.UTC)},
		Available:   []v1alpha1.UpdateRelease{{Version: "4.18.3", Image: pinned("b")}, {Version: "4.18.10", Image: pinned("c")}},
		Conditional: []v1alpha1.ConditionalUpdate{
			{Release: v1alpha1.UpdateRelease{Version: "4.18.11", Image: pinned("d")}, Risks: []v1alpha1.UpdateRisk{aro, ceph},
				Conditions: recommendedCond(metav1.ConditionFalse, "MultipleReasons", "AROBrokenDNS applies.\nCephPanic applies.")},
			{Release: v1alpha1.UpdateRelease{Version: "4.18.12", Image: pinned("e")}, Risks: []v1alpha1.UpdateRisk{ceph},
				Conditions: recommendedCond(metav1.ConditionTrue, "NotExposedToRisks", "The update is recommended.")},
			{Release: v1alpha1.UpdateRelease{Version: "4.18.13", Image: "quay.example/fcos/os:4.18.13"}, Risks: []v1alpha1.UpdateRisk{aro},
				Conditions: recommendedCond(metav1.ConditionUnknown, "EvaluationFailed", "Could not evaluate AROBrokenDNS: Prometheus unreachable.")},
		},
	}
}

// upgradeFixture creates the pool name, with src as its update source
// (none when nil) and status.updates and conditions written through the
// status subresource as the coordinator writes them.
func upgradeFixture(t *testing.T, cp *cluster.ControlPlane, name string, src *v1alpha1.UpdateSource, updates *v1alpha1.UpdatesStatus, conds []metav1.Condition) {
	t.Helper()
	if err := cp.InstallCRDs(t.Context()); err != nil {
		t.Fatal(err)
	}
	p := v1alpha1.UpdatePool{TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.UpdatePoolResource().GroupVersion().String(), Kind: "UpdatePool"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.UpdatePoolSpec{NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{cluster.GroupLabel: name}},
			OSImage: pinned("a"), UpdateSource: src}}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&p)
	if err != nil {
		t.Fatal(err)
	}
	res := poolResource(t, cp)
	created, err := res.Create(t.Context(), &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = res.Delete(context.Background(), name, metav1.DeleteOptions{}) })
	status, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&v1alpha1.UpdatePoolStatus{Updates: updates, Conditions: conds})
	if err != nil {
		t.Fatal(err)
	}
	created.Object["status"] = status
	if _, err := res.UpdateStatus(t.Context(), created, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("write the status of %s as the coordinator would: %v", name, err)
	}
}

func poolResource(t *testing.T, cp *cluster.ControlPlane) dynamic.ResourceInterface {
	t.Helper()
	dyn, err := dynamic.NewForConfig(cp.Config())
	if err != nil {
		t.Fatal(err)
	}
	return dyn.Resource(v1alpha1.UpdatePoolResource())
}

// getPool reads the pool back from the API server.
func getPool(t *testing.T, cp *cluster.ControlPlane, name string) *v1alpha1.UpdatePool {
	t.Helper()
	obj, err := poolResource(t, cp).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := decodePool(obj)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func openShiftSource(accepted ...string) *v1alpha1.UpdateSource {
	return &v1alpha1.UpdateSource{URL: "https://updates.example/api/upgrades_info/graph", Dialect: v1alpha1.OpenShiftGraph,
		Channel: "stable-4.18", AcceptedRisks: accepted}
}

func retrievedFalse() []metav1.Condition {
	return []metav1.Condition{{Type: v1alpha1.PoolRetrievedUpdates, Status: metav1.ConditionFalse, Reason: "RemoteFailed",
		Message:            "Get \"https://updates.example/api/upgrades_info/graph\": connection refused",
		LastTransitionTime: metav1.NewTime(time.Date(2026, 11, 28, 3, 0, 0, 0, time.UTC))}}
}

// upgradeGolden is `nodeward upgrade POOL --include-not-recommended` of
// the fixture, laid out as `oc adm upgrade` lays out a ClusterVersion.
const upgradeGolden = `Pool showup-pool version is 4.18.2

RetrievedUpdates=False

  Reason: RemoteFailed
  Message: Get "https://updates.example/api/upgrades_info/graph": connection refused

Upstream: https://updates.example/api/upgrades_info/graph
Channel: stable-4.18
Accepted risks: CephPanic

Recommended updates:

  VERSION     IMAGE
  4.18.12     quay.example/fcos/os@sha256:EEEE
  4.18.10     quay.example/fcos/os@sha256:CCCC
  4.18.3      quay.example/fcos/os@sha256:BBBB

Supported but not recommended updates:

  Version: 4.18.13
  Image: quay.example/fcos/os:4.18.13
  Recommended: Unknown
  Reason: EvaluationFailed
  Message: Could not evaluate AROBrokenDNS: Prometheus unreachable.
  Risks:
    AROBrokenDNS: Nodes on ARO lose DNS after a reboot. https://issues.example/OCPBUGS-1

  Version: 4.18.11
  Image: quay.example/fcos/os@sha256:DDDD
  Recommended: False
  Reason: MultipleReasons
  Message: AROBrokenDNS applies.
  CephPanic applies.
  Risks:
    AROBrokenDNS: Nodes on ARO lose DNS after a reboot. https://issues.example/OCPBUGS-1
    CephPanic (accepted): Kernel panics with CephFS mounts. https://issues.example/COS-2781
`

// golden expands the digests of a golden text (EEEE: sha256 of e's).
func golden(s string) string {
	for _, c := range "abcde" {
		s = strings.ReplaceAll(s, strings.Repeat(strings.ToUpper(string(c)), 4), strings.Repeat(string(c), 64))
	}
	return s
}

// TestUpgradeShowsUpdatesLikeOcAdmUpgrade: on the real API server, the
// pool's updates as the coordinator wrote them are laid out as `oc adm
// upgrade` lays them out; without --include-not-recommended the risky
// ones are only announced; a pool with nothing to show says so; without
// POOL every pool with a source is shown; a pool without one, or none at
// all, is an error naming the pool(s) and the field.
func TestUpgradeShowsUpdatesLikeOcAdmUpgrade(t *testing.T) {
	cp := env.ControlPlane(t)
	kube := "--kubeconfig=" + cp.KubeconfigPath()
	upgradeFixture(t, cp, "nosrc-pool", nil, nil, nil)
	if out, code := run(t, "upgrade", kube); code != 1 || !strings.Contains(out, "no UpdatePool has a spec.updateSource (pools: ") || !strings.Contains(out, "nosrc-pool") {
		t.Fatalf("upgrade without POOL when no pool has a source: exit %d:\n%s", code, out)
	}
	upgradeFixture(t, cp, "showup-pool", openShiftSource("CephPanic"), fixtureUpdates(), retrievedFalse())

	out, code := run(t, "upgrade", "showup-pool", "--include-not-recommended", kube)
	if want := golden(upgradeGolden); code != 0 || out != want {
		t.Fatalf("upgrade --include-not-recommended: exit %d, output:\n%s\nwant:\n%s", code, out, want)
	}
	out, code = run(t, "upgrade", "showup-pool", kube)
	head, _, _ := strings.Cut(golden(upgradeGolden), "\nSupported but not recommended updates:")
	if want := head + "\nAdditional updates which are not recommended based on the pool's risks are available, to view those re-run the command with --include-not-recommended.\n"; code != 0 || out != want {
		t.Fatalf("upgrade: exit %d, output:\n%s\nwant:\n%s", code, out, want)
	}

	retrieved := []metav1.Condition{{Type: v1alpha1.PoolRetrievedUpdates, Status: metav1.ConditionTrue, Reason: "Retrieved",
		LastTransitionTime: metav1.NewTime(time.Date(2026, 11, 28, 3, 0, 0, 0, time.UTC))}}
	upgradeFixture(t, cp, "latest-pool", openShiftSource(), &v1alpha1.UpdatesStatus{Current: &v1alpha1.UpdateRelease{Version: "4.18.12", Image: pinned("e")}}, retrieved)
	want := "Pool latest-pool version is 4.18.12\n\n" +
		"Upstream: https://updates.example/api/upgrades_info/graph\nChannel: stable-4.18\n\n" +
		"No updates available. You may still set the pool's spec.osImage by hand or wait for new updates to be available.\n\n" +
		"No updates which are not recommended based on the pool's risks are available.\n"
	if out, code = run(t, "upgrade", "latest-pool", "--include-not-recommended", kube); code != 0 || out != want {
		t.Fatalf("upgrade of an up-to-date pool: exit %d, output:\n%s\nwant:\n%s", code, out, want)
	}

	if out, code = run(t, "upgrade", kube); code != 0 || !strings.HasPrefix(out, "Pool latest-pool version is 4.18.12\n") ||
		!strings.Contains(out, "\n\nPool showup-pool version is 4.18.2\n") || strings.Contains(out, "nosrc-pool") {
		t.Fatalf("upgrade without POOL: exit %d, want both pools with a source, by name, and not nosrc-pool:\n%s", code, out)
	}
	if out, code = run(t, "upgrade", "nosrc-pool", kube); code != 1 || !strings.Contains(out, "UpdatePool nosrc-pool has no spec.updateSource") {
		t.Fatalf("upgrade of a pool without a source: exit %d:\n%s", code, out)
	}
	if out, code = run(t, "upgrade", "no-such-pool", kube); code != 1 || !strings.Contains(out, `UpdatePool "no-such-pool" not found`) {
		t.Fatalf("upgrade of a missing pool: exit %d:\n%s", code, out)
	}
	if out, code = run(t, "upgrade", "showup-pool", "--dry-run", kube); code != exitUsage || !strings.Contains(out, "go with --to VERSION") {
		t.Fatalf("--dry-run without --to: exit %d:\n%s", code, out)
	}
}

// TestUpgradeToSetsThePinnedImage: on the real API server, --to a
// recommended version sets spec.osImage to its pinned image; a
// not-recommended one is refused without --allow-not-recommended, naming
// its risks and the flag, and with it sets osImage and records the risks
// in acceptedRisks in the same change, merged; --dry-run, a version not in
// the list, a malformed one, a tag-only image, a pool without a source or
// a missing POOL change nothing (read back).
func TestUpgradeToSetsThePinnedImage(t *testing.T) {
	cp := env.ControlPlane(t)
	kube := "--kubeconfig=" + cp.KubeconfigPath()
	const pool = "toup-pool"
	upgradeFixture(t, cp, pool, openShiftSource("CephPanic"), fixtureUpdates(), nil)
	unchanged := func(what string, before *v1alpha1.UpdatePool) {
		t.Helper()
		if after := getPool(t, cp, pool); after.ResourceVersion != before.ResourceVersion || after.Spec.OSImage != before.Spec.OSImage {
			t.Fatalf("%s changed the pool: osImage %q -> %q, resourceVersion %s -> %s", what,
				before.Spec.OSImage, after.Spec.OSImage, before.ResourceVersion, after.ResourceVersion)
		}
	}

	out, code := run(t, "upgrade", pool, "--to", "4.18.10", kube)
	if p := getPool(t, cp, pool); code != 0 || p.Spec.OSImage != pinned("c") || len(p.Spec.UpdateSource.AcceptedRisks) != 1 ||
		out != "pool toup-pool: spec.osImage set to "+pinned("c")+" (version 4.18.10); it was "+pinned("a")+"\n" {
		t.Fatalf("--to 4.18.10: exit %d, osImage %q, acceptedRisks %q:\n%s", code, p.Spec.OSImage, p.Spec.UpdateSource.AcceptedRisks, out)
	}
	before := getPool(t, cp, pool)
	if out, code = run(t, "upgrade", pool, "--to", "4.18.10", kube); code != 0 || !strings.Contains(out, "pool toup-pool already targets "+pinned("c")+" (version 4.18.10): nothing changed") {
		t.Fatalf("--to the version targeted already: exit %d:\n%s", code, out)
	}
	unchanged("--to the version targeted already", before)
	out, code = run(t, "upgrade", pool, "--to", "4.18.11", kube)
	for _, want := range []string{"4.18.11 is not a recommended update of pool toup-pool (Recommended=False, MultipleReasons: AROBrokenDNS applies. CephPanic applies.)",
		"\n  AROBrokenDNS: Nodes on ARO lose DNS after a reboot. https://issues.example/OCPBUGS-1\n",
		"\n  CephPanic: Kernel panics with CephFS mounts. https://issues.example/COS-2781\n", "re-run with --allow-not-recommended"} {
		if code != 1 || !strings.Contains(out, want) {
			t.Fatalf("--to a not-recommended version without the flag: exit %d, output lacks %q:\n%s", code, want, out)
		}
	}
	unchanged("--to a not-recommended version without the flag", before)
	if out, code = run(t, "upgrade", pool, "--to", "4.18.11", "--allow-not-recommended", "--dry-run", kube); code != 0 ||
		!strings.Contains(out, "spec.osImage would be set (dry run, nothing changed) to "+pinned("d")) || !strings.Contains(out, "risks that would be accepted") {
		t.Fatalf("--dry-run: exit %d:\n%s", code, out)
	}
	unchanged("--dry-run", before)

	out, code = run(t, "upgrade", pool, "--to", "4.18.11", "--allow-not-recommended", kube)
	p := getPool(t, cp, pool)
	if code != 0 || p.Spec.OSImage != pinned("d") || strings.Join(p.Spec.UpdateSource.AcceptedRisks, ",") != "CephPanic,AROBrokenDNS" ||
		!strings.Contains(out, "accepted risks (recorded in spec.updateSource.acceptedRisks):\n  AROBrokenDNS: Nodes on ARO lose DNS") {
		t.Fatalf("--to a not-recommended version with the flag: exit %d, osImage %q, acceptedRisks %q:\n%s", code, p.Spec.OSImage, p.Spec.UpdateSource.AcceptedRisks, out)
	}
	if p.Spec.UpdateSource.URL == "" || p.Spec.UpdateSource.Channel != "stable-4.18" {
		t.Fatalf("the merge patch lost the rest of spec.updateSource: %+v", p.Spec.UpdateSource)
	}

	before = getPool(t, cp, pool)
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{pool, "--to", "4.99.0"}, 1, "4.99.0 is not an available update of pool toup-pool; available: 4.18.12, 4.18.10, 4.18.3; not recommended (need --allow-not-recommended): 4.18.13, 4.18.11; nothing changed"},
		{[]string{pool, "--to", "4.18.3; rm"}, exitUsage, `--to "4.18.3; rm": malformed version`},
		{[]string{pool, "--to", ".4"}, exitUsage, `--to ".4": malformed version`},
		{[]string{pool, "--to", "4.18.13", "--allow-not-recommended"}, 1, `pool toup-pool: release 4.18.13: image "quay.example/fcos/os:4.18.13" is not pinned to a digest`},
		{[]string{pool, "--to", "4.18.10", "--include-not-recommended"}, exitUsage, "--include-not-recommended goes without --to"},
		{[]string{"--to", "4.18.10"}, exitUsage, "--to needs a POOL: pools with an update source: "},
		{[]string{"no-such-pool", "--to", "4.18.10"}, 1, `UpdatePool "no-such-pool" not found`},
	} {
		if out, code := run(t, append(append([]string{"upgrade"}, c.args...), kube)...); code != c.code || !strings.Contains(out, c.want) {
			t.Errorf("upgrade %v: exit %d, want %d and %q:\n%s", c.args, code, c.code, c.want, out)
		}
	}
	unchanged("refused --to", before)
	upgradeFixture(t, cp, "tonosrc-pool", nil, nil, nil)
	if out, code = run(t, "upgrade", "tonosrc-pool", "--to", "4.18.10", kube); code != 1 || !strings.Contains(out, "UpdatePool tonosrc-pool has no spec.updateSource") {
		t.Fatalf("--to on a pool without a source: exit %d:\n%s", code, out)
	}
	if p := getPool(t, cp, "tonosrc-pool"); p.Spec.OSImage != pinned("a") {
		t.Fatalf("--to on a pool without a source changed osImage to %q", p.Spec.OSImage)
	}
}

// TestUpgradeConflictIsReported: a pool that changes between the read and
// the patch (here its labels, as another client would) refuses the
// change with a 409, reported as such and not retried: osImage stays.
func TestUpgradeConflictIsReported(t *testing.T) {
	cp := env.ControlPlane(t)
	const pool = "conflict-pool"
	upgradeFixture(t, cp, pool, openShiftSource(), fixtureUpdates(), nil)
	read := getPool(t, cp, pool)
	choice, err := chooseUpgrade(read, "4.18.10", false)
	if err != nil {
		t.Fatal(err)
	}
	res := poolResource(t, cp)
	if _, err := res.Patch(t.Context(), pool, types.MergePatchType, []byte(`{"metadata":{"labels":{"team":"storage"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	err = applyUpgrade(t.Context(), res, choice, false)
	if err == nil || !strings.Contains(err.Error(), "UpdatePool conflict-pool changed after it was read (at resourceVersion "+read.ResourceVersion+"): nothing changed") {
		t.Fatalf("a patch on a stale read: %v", err)
	}
	if p := getPool(t, cp, pool); p.Spec.OSImage != pinned("a") {
		t.Fatalf("the conflicting patch changed osImage to %q", p.Spec.OSImage)
	}
	// On a fresh read the same choice goes through, and the patch is
	// the JSON merge patch documented: osImage and the resourceVersion.
	choice, err = chooseUpgrade(getPool(t, cp, pool), "4.18.10", false)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := json.Marshal(choice.patch()); !strings.Contains(string(b), `"spec":{"osImage":"`+pinned("c")+`"}`) {
		t.Fatalf("patch %s", b)
	}
	if err := applyUpgrade(t.Context(), res, choice, false); err != nil || getPool(t, cp, pool).Spec.OSImage != pinned("c") {
		t.Fatalf("the patch on a fresh read: %v", err)
	}
}

// TestUpgradeCompletesVersions: --to completes the named pool's versions,
// recommended or not, from the real API server.
func TestUpgradeCompletesVersions(t *testing.T) {
	cp := env.ControlPlane(t)
	upgradeFixture(t, cp, "complup-pool", openShiftSource(), fixtureUpdates(), nil)
	kube := "--kubeconfig=" + cp.KubeconfigPath()
	words, directive := complete(t, "upgrade", kube, "complup-pool", "--to", "4.18.1")
	if strings.Join(words, ",") != "4.18.12,4.18.10,4.18.13,4.18.11" || directive != ":4" {
		t.Fatalf("upgrade complup-pool --to 4.18.1: %q %s", words, directive)
	}
	words, _ = complete(t, "upgrade", kube, "complup")
	hasAll(t, "upgrade POOL", words, "complup-pool")
}
