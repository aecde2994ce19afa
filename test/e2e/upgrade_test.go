package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/test/cluster"
	"github.com/nodeward/nodeward/test/coordinatortest"
	"github.com/nodeward/nodeward/test/prom"
	"github.com/nodeward/nodeward/test/rpmostree"
)

// graphRelease is a release of the test's update graph: its image pinned
// by digest, and the OSTree commit the nodes' rpm-ostree double gives it.
type graphRelease struct {
	version, digest, checksum string
}

// image is the release's payload: a plain pull spec by digest, as
// OpenShift's update service gives it; the agents add the transport
// (--image-transport).
func (r graphRelease) image() string { return "quay.io/fedora/fedora-coreos@" + r.digest }

// The graph of TestUpgradeEndToEnd. 1.0.0 is the image the process
// nodes boot (sim.ProcBooted: its digest), so the pool's first target is
// adopted without a reboot; the double serves 1.1.0 and 1.2.0.
var (
	release100 = graphRelease{"1.0.0", "sha256:" + strings.Repeat("a", 64), strings.Repeat("0a", 32)}
	release110 = graphRelease{"1.1.0", "sha256:" + strings.Repeat("1", 64), strings.Repeat("11", 32)}
	release120 = graphRelease{"1.2.0", "sha256:" + strings.Repeat("2", 64), strings.Repeat("12", 32)}
)

// The risk on 1.0.0 → 1.2.0, exposed: its rule returns 1 from the test's
// metric.
const (
	upgradeRisk    = "KernelPanicOnTestHardware"
	upgradeRiskMsg = "Nodes of the test hardware panic at boot on 1.2.0."
	upgradeRiskURL = "https://issues.example/NW-39"
)

// upgradeImages is what each node's fake registry serves: 1.1.0 and 1.2.0.
func upgradeImages() map[string]rpmostree.Image {
	out := map[string]rpmostree.Image{}
	for _, r := range []graphRelease{release110, release120} {
		out[r.image()] = rpmostree.Image{Checksum: r.checksum, Digest: r.digest, Version: r.version}
	}
	return out
}

// upgradeGraph is the OpenShift-dialect graph: 1.0.0 → 1.1.0
// unconditional, 1.0.0 → 1.2.0 under upgradeRisk, whose PromQL rule is
// promql.
func upgradeGraph(t *testing.T, promql string) []byte {
	t.Helper()
	var nodes []any
	for _, r := range []graphRelease{release100, release110, release120} {
		nodes = append(nodes, map[string]any{"version": r.version, "payload": r.image(), "metadata": map[string]any{}})
	}
	g := map[string]any{
		"nodes": nodes,
		"edges": [][2]int{{0, 1}},
		"conditionalEdges": []any{map[string]any{
			"edges": []any{map[string]any{"from": release100.version, "to": release120.version}},
			"risks": []any{map[string]any{"name": upgradeRisk, "message": upgradeRiskMsg, "url": upgradeRiskURL,
				"matchingRules": []any{map[string]any{"type": "PromQL", "promql": map[string]any{"promql": promql}}}}},
		}},
	}
	data, err := json.Marshal(g)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// serveGraph serves data as an update service does, counting the requests
// that ask for channel and arch.
func serveGraph(t *testing.T, data []byte, channel, arch string) (url string, asked *atomic.Int32) {
	t.Helper()
	asked = &atomic.Int32{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if q := r.URL.Query(); q.Get("channel") == channel && q.Get("arch") == arch {
			asked.Add(1)
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(data)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, asked
}

// TestUpgradeEndToEnd: `nodeward upgrade` as an operator runs it, against
// the real `nodeward coordinator` process, three real agent processes on
// the rpm-ostree double, a local update service and a real Prometheus. The
// pool (policy Manual) runs 1.0.0; its graph offers 1.1.0 and, under a
// risk whose PromQL rule says the cluster is exposed, 1.2.0. The command
// lists 1.1.0 as recommended and 1.2.0 only with --include-not-recommended,
// with the risk the coordinator evaluated; it refuses --to 1.2.0 without
// --allow-not-recommended and changes nothing; --to 1.1.0 sets the pinned
// image, and the agents roll it out one node at a time.
func TestUpgradeEndToEnd(t *testing.T) {
	t.Parallel()
	const prefix, count, maxUnavailable = "upe2e", 3, 1
	target := prom.NewTarget(t)
	target.Set("nodeward_test_exposed", map[string]string{"risk": upgradeRisk}, 1)
	p8s := prom.StartPrometheus(t, prom.PrometheusOptions{Targets: []string{target.Addr()}})
	promql := fmt.Sprintf(`max(nodeward_test_exposed{risk=%q})`, upgradeRisk)
	p8s.WaitValue(t, promql, 1, time.Minute)
	graphURL, asked := serveGraph(t, upgradeGraph(t, promql), "stable-1", "amd64")

	p := newProcPoolServing(t, prefix, count, maxUnavailable, upgradeImages)
	dyn := installPoolAPI(t, p.cp)
	p.startAgents()
	waitAgentLeases(t, p.pool)
	p.createPool(dyn, v1alpha1.UpdatePoolSpec{OSImage: release100.image(), MaxUnavailable: ptr.To(intstr.FromInt32(maxUnavailable)),
		UpdateSource: &v1alpha1.UpdateSource{URL: graphURL, Dialect: v1alpha1.OpenShiftGraph, Channel: "stable-1",
			Policy: v1alpha1.ManualUpdates, Prometheus: p8s.URL}})
	logs := startCoordinatorProcess(t, p.pool)
	p.reportOnFailure(logs)

	start := time.Now()
	waitPoolOn(t, dyn, prefix, release100, count)
	waitPoolState(t, dyn, prefix, "1.2.0 evaluated Recommended=False", time.Minute, exposedTo120)
	t.Logf("pool settled on 1.0.0 with its updates evaluated in %v; the update service was asked %d times", time.Since(start).Round(time.Millisecond), asked.Load())
	if asked.Load() == 0 {
		t.Errorf("the update service was never asked for channel stable-1, arch amd64")
	}
	bin, _ := procBinaries()
	kubeconfig := p.cp.KubeconfigPath()
	checkUpgradeListing(t, bin.Nodeward, kubeconfig, prefix)
	checkNotRecommendedRefused(t, bin.Nodeward, kubeconfig, dyn, prefix)

	start = time.Now()
	out, errOut, code := runUpgrade(t, bin.Nodeward, kubeconfig, prefix, "--to", release110.version)
	if code != 0 || !strings.Contains(out, "spec.osImage set to "+release110.image()) {
		t.Fatalf("upgrade --to 1.1.0: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if pool := readPool(t, dyn, prefix); pool.Spec.OSImage != release110.image() {
		t.Fatalf("after --to 1.1.0 spec.osImage is %s, want %s", pool.Spec.OSImage, release110.image())
	}
	waitPoolOn(t, dyn, prefix, release110, count)
	t.Logf("1.1.0 rolled out to %d nodes in %v", count, time.Since(start).Round(time.Millisecond))
	for _, name := range p.names {
		assertBootedOnce(t, p, name, release110)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.maxSeen != maxUnavailable {
		t.Errorf("at most %d nodes seen unavailable at once, want exactly maxUnavailable %d (the rollout was watched)", p.maxSeen, maxUnavailable)
	}
}

// checkUpgradeListing: 1.1.0 recommended, 1.2.0 only with
// --include-not-recommended, with the Recommended condition the
// coordinator wrote (the risk's name as reason) and the risk itself.
func checkUpgradeListing(t *testing.T, bin, kubeconfig, pool string) {
	t.Helper()
	out, errOut, code := runUpgrade(t, bin, kubeconfig, pool)
	recommended, notRecommended, _ := strings.Cut(out, "Additional updates which are not recommended")
	if code != 0 || !strings.Contains(out, "Pool "+pool+" version is 1.0.0") ||
		!containsLine(recommended, release110.version, release110.image()) || strings.Contains(out, release120.version) || notRecommended == "" {
		t.Errorf("upgrade %s: exit %d, want 1.0.0 current, 1.1.0 (%s) recommended and 1.2.0 only mentioned as hidden\nstdout:\n%s\nstderr:\n%s",
			pool, code, release110.image(), out, errOut)
	}
	out, errOut, code = runUpgrade(t, bin, kubeconfig, pool, "--include-not-recommended")
	t.Logf("nodeward upgrade %s --include-not-recommended:\n%s", pool, out)
	recommended, notRecommended, _ = strings.Cut(out, "Supported but not recommended updates:")
	want := []string{"Version: 1.2.0", "Image: " + release120.image(), "Recommended: False", "Reason: " + upgradeRisk,
		"Message: " + upgradeRiskMsg + " " + upgradeRiskURL, upgradeRisk + ": " + upgradeRiskMsg + " " + upgradeRiskURL}
	var missing []string
	for _, w := range want {
		if !strings.Contains(notRecommended, w) {
			missing = append(missing, w)
		}
	}
	if code != 0 || len(missing) > 0 || !containsLine(recommended, release110.version, release110.image()) || strings.Contains(recommended, release120.version) {
		t.Errorf("upgrade %s --include-not-recommended: exit %d, missing %q among the not recommended, or 1.1.0 not recommended\nstdout:\n%s\nstderr:\n%s",
			pool, code, missing, out, errOut)
	}
}

// checkNotRecommendedRefused: --to 1.2.0 without --allow-not-recommended
// fails naming the risk, and the pool's spec is as it was.
func checkNotRecommendedRefused(t *testing.T, bin, kubeconfig string, dyn dynamic.Interface, pool string) {
	t.Helper()
	before := readPool(t, dyn, pool)
	out, errOut, code := runUpgrade(t, bin, kubeconfig, pool, "--to", release120.version)
	t.Logf("nodeward upgrade %s --to 1.2.0: exit %d, stderr:\n%s", pool, code, errOut)
	if code == 0 || !strings.Contains(errOut, upgradeRisk) || !strings.Contains(errOut, "--allow-not-recommended") {
		t.Errorf("upgrade %s --to 1.2.0: exit %d, want a failure naming %s and --allow-not-recommended\nstdout:\n%s\nstderr:\n%s",
			pool, code, upgradeRisk, out, errOut)
	}
	after := readPool(t, dyn, pool)
	if after.Spec.OSImage != release100.image() || after.Generation != before.Generation || len(after.Spec.UpdateSource.AcceptedRisks) > 0 {
		t.Errorf("after the refused --to 1.2.0: osImage %s, generation %d (was %d), acceptedRisks %v; want %s, unchanged, none",
			after.Spec.OSImage, after.Generation, before.Generation, after.Spec.UpdateSource.AcceptedRisks, release100.image())
	}
}

// containsLine says whether some line of text has every one of fields.
func containsLine(text string, fields ...string) bool {
	for line := range strings.SplitSeq(text, "\n") {
		got := strings.Fields(line)
		if len(got) >= len(fields) && equalPrefix(got, fields) {
			return true
		}
	}
	return false
}

func equalPrefix(got, want []string) bool {
	for i, w := range want {
		if got[i] != w {
			return false
		}
	}
	return true
}

// runUpgrade runs `nodeward upgrade args... --kubeconfig kubeconfig` and
// returns its output and exit code.
func runUpgrade(t *testing.T, bin, kubeconfig string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append(append([]string{"upgrade"}, args...), "--kubeconfig", kubeconfig)...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		code = exit.ExitCode()
	default:
		t.Fatalf("nodeward upgrade %v: %v", args, err)
	}
	return out.String(), errOut.String(), code
}

// startCoordinatorProcess runs `nodeward coordinator` for the pool named
// as p's prefix and returns its log.
func startCoordinatorProcess(t *testing.T, p *pool) *lockedBuffer {
	t.Helper()
	bin, err := procBinaries()
	if err != nil {
		t.Fatal(err)
	}
	logs := &lockedBuffer{}
	cmd := bin.Coordinator(p.cp.KubeconfigPath(), "--pool-selector", coordinatortest.PoolLabel+"="+p.prefix,
		"--leader-election-namespace", p.cp.Namespace(t))
	cmd.Stdout, cmd.Stderr = io.Discard, logs
	if testing.Verbose() {
		cmd.Stderr = io.MultiWriter(logs, os.Stderr)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return logs
}

// waitAgentLeases waits until every agent of p has renewed its Lease: the
// coordinator grants only nodes whose agent is alive.
func waitAgentLeases(t *testing.T, p *pool) {
	t.Helper()
	cluster.WaitFor(t, time.Minute, "every agent to renew its Lease", func(ctx context.Context) (bool, error) {
		for _, name := range p.names {
			if _, err := p.cp.Client().CoordinationV1().Leases(v1alpha1.AgentLeaseNamespace).Get(ctx, v1alpha1.AgentLeaseName(name), metav1.GetOptions{}); err != nil {
				return false, nil
			}
		}
		return true, nil
	})
}

// waitPoolOn waits until the pool targets r, all count nodes are updated
// to it, and the coordinator reports r as the release the pool runs.
func waitPoolOn(t *testing.T, dyn dynamic.Interface, name string, r graphRelease, count int32) {
	t.Helper()
	waitPoolState(t, dyn, name, "every node on "+r.version, 2*time.Minute, func(p *v1alpha1.UpdatePool) error {
		u := p.Status.Updates
		if p.Spec.OSImage != r.image() || p.Status.ObservedGeneration != p.Generation || p.Status.UpdatedMachineCount != count ||
			u == nil || u.Current == nil || u.Current.Version != r.version {
			return fmt.Errorf("target %s, observed generation %d of %d, %d of %d updated, updates %+v",
				p.Spec.OSImage, p.Status.ObservedGeneration, p.Generation, p.Status.UpdatedMachineCount, count, u)
		}
		return nil
	})
}

// exposedTo120: 1.1.0 available, and 1.2.0 conditional with Recommended
// False for the risk, its message and URL, as updaterisk writes it.
func exposedTo120(p *v1alpha1.UpdatePool) error {
	u := p.Status.Updates
	if u == nil || len(u.Available) != 1 || u.Available[0].Version != release110.version || len(u.Conditional) != 1 ||
		u.Conditional[0].Release.Version != release120.version {
		return fmt.Errorf("updates %+v, want 1.1.0 available and 1.2.0 conditional", u)
	}
	c := meta.FindStatusCondition(u.Conditional[0].Conditions, v1alpha1.UpdateRecommended)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != upgradeRisk || c.Message != upgradeRiskMsg+" "+upgradeRiskURL {
		return fmt.Errorf("1.2.0 Recommended %+v, want False %s", c, upgradeRisk)
	}
	return nil
}

// waitPoolState waits until check accepts the pool; on a timeout its
// last complaint is the error WaitFor reports.
func waitPoolState(t *testing.T, dyn dynamic.Interface, name, what string, timeout time.Duration, check func(*v1alpha1.UpdatePool) error) {
	t.Helper()
	cluster.WaitFor(t, timeout, what, func(ctx context.Context) (bool, error) {
		p, err := getPool(ctx, dyn, name)
		if err != nil {
			return false, err
		}
		err = check(p)
		return err == nil, err
	})
}

func readPool(t *testing.T, dyn dynamic.Interface, name string) *v1alpha1.UpdatePool {
	t.Helper()
	p, err := getPool(context.Background(), dyn, name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func getPool(ctx context.Context, dyn dynamic.Interface, name string) (*v1alpha1.UpdatePool, error) {
	u, err := dyn.Resource(v1alpha1.UpdatePoolResource()).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("read pool %s: %w", name, err)
	}
	var p v1alpha1.UpdatePool
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &p); err != nil {
		return nil, fmt.Errorf("decode pool %s: %w", name, err)
	}
	return &p, nil
}

// assertBootedOnce: the node is Done on r, booted into r's commit after
// exactly one boot and one finalize (1.0.0 was adopted without one),
// schedulable.
func assertBootedOnce(t *testing.T, p *procPool, name string, r graphRelease) {
	t.Helper()
	n, err := p.node(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	s, err := rpmostree.Load(p.procs[name].Double.Dir)
	if err != nil {
		t.Fatal(err)
	}
	booted, err := s.BootedDeployment()
	if err != nil {
		t.Fatal(err)
	}
	finalizes := s.CallCount("finalize-deployment")
	if n.Annotations[v1alpha1.AnnotationState] != string(v1alpha1.StepDone) || booted.Checksum != r.checksum || booted.Digest != r.digest ||
		s.Boots != 1 || finalizes != 1 || n.Spec.Unschedulable {
		t.Errorf("%s: state %s, booted %s (%s) after %d boots and %d finalize calls, unschedulable %v; want Done on %s (%s), 1, 1; steps %v",
			name, n.Annotations[v1alpha1.AnnotationState], booted.Checksum, booted.Digest, s.Boots, finalizes, n.Spec.Unschedulable,
			r.checksum, r.digest, p.steps(name))
	}
}
