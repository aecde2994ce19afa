package drain_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/drain"
	"github.com/nodeward/nodeward/test/cluster"
)

// A mixed node: ordered batches are observed in the real deletion order,
// DaemonSet and mirror pods stay, StatefulSet pods come back under the same
// name, and every evicted pod runs again on another node.
func TestDrainOrderedMixedWorkloads(t *testing.T) {
	f := newFixture(t, "order", 2)
	f.deployment("web", 3, func(p *corev1.PodTemplateSpec) { p.Labels["tier"] = "frontend" })
	f.deployment("api", 3, nil)
	f.statefulSet("db", 2)
	f.daemonSet("agent")
	f.pod("static", func(p *corev1.Pod) {
		p.Annotations = map[string]string{corev1.MirrorPodAnnotationKey: "hash"}
	})
	f.deployment("late", 1, func(p *corev1.PodTemplateSpec) {
		p.Annotations = map[string]string{v1alpha1.AnnotationDrainOrder: "50"}
	})
	f.waitRunning(f.node, 3+3+2+1+1+1)
	rules, err := drain.ParseRules([]byte(`
kind: DrainRules
defaultOrder: 10
rules:
- name: frontend-first
  podSelector: {matchLabels: {tier: frontend}}
  order: 0
- name: databases-last
  podSelector: {matchExpressions: [{key: app, operator: In, values: [db]}]}
  order: 20
`))
	if err != nil {
		t.Fatal(err)
	}
	log := f.recordPods()
	f.release()

	d := f.drainer(drain.Options{Rules: rules}, nil)
	res, err := d.Run(f.ctx())
	if err != nil {
		t.Fatalf("drain: %v", err)
	}
	var orders []int32
	for _, b := range res.Plan.Batches {
		orders = append(orders, b.Order)
	}
	if got := len(orders); got != 4 || orders[0] != 0 || orders[1] != 10 || orders[2] != 20 || orders[3] != 50 {
		t.Fatalf("batches by order = %v, want [0 10 20 50]", orders)
	}
	if res.Evicted != 9 {
		t.Errorf("evicted %d pods, want 9", res.Evicted)
	}
	skipped := map[string]string{}
	for _, s := range res.Plan.Skipped {
		skipped[s.Pod.Name] = s.Reason
	}
	if !strings.Contains(skipped["static"], "mirror") {
		t.Errorf("mirror pod not skipped as such: %v", skipped)
	}

	// The deletion order: every pod of a batch was gone before any pod of
	// a later batch was evicted.
	evicted, gone, _ := log.times()
	batchOf := func(name string) int {
		switch {
		case strings.HasPrefix(name, "web-"):
			return 0
		case strings.HasPrefix(name, "api-"):
			return 1
		case strings.HasPrefix(name, "db-"):
			return 2
		case strings.HasPrefix(name, "late-"):
			return 3
		}
		return -1
	}
	lastGone := map[int]time.Time{}
	firstEvicted := map[int]time.Time{}
	for _, b := range res.Plan.Batches {
		for _, p := range b.Pods {
			bi := batchOf(p.Pod.Name)
			g, ok := gone[p.Pod.Name]
			if !ok && bi != 2 { // StatefulSet pods may be replaced in place
				t.Errorf("pod %s never seen deleted", p.Pod.Name)
			}
			if g.After(lastGone[bi]) {
				lastGone[bi] = g
			}
			e := evicted[p.Pod.Name]
			if fe, ok := firstEvicted[bi]; !ok || e.Before(fe) {
				firstEvicted[bi] = e
			}
		}
	}
	for bi := 1; bi < 4; bi++ {
		if firstEvicted[bi].Before(lastGone[bi-1]) {
			t.Errorf("batch %d started (%s) before batch %d was gone (%s)", bi,
				firstEvicted[bi].Format(time.StampMilli), bi-1, lastGone[bi-1].Format(time.StampMilli))
		}
	}

	// What must stay, stayed; everything else runs elsewhere.
	pods, err := f.podsOn(f.ctx(), f.node)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, p := range pods {
		left = append(left, p.Name)
	}
	if len(pods) != 2 || !strings.Contains(strings.Join(left, ","), "static") {
		t.Errorf("pods left on the drained node = %v, want the DaemonSet pod and the mirror pod", left)
	}
	f.waitRunning(f.free[0], 1)
	cluster.WaitFor(t, 60*time.Second, "evicted pods running on the free nodes", func(ctx context.Context) (bool, error) {
		n := 0
		for _, node := range f.free {
			ps, err := f.podsOn(ctx, node)
			if err != nil {
				return false, err
			}
			n += len(ps)
		}
		return n == 9+2, nil // nine moved pods plus one DaemonSet pod per free node
	})
	n := f.getNode()
	if c := condition(n, v1alpha1.ConditionDrained); c == nil || c.Status != corev1.ConditionTrue {
		t.Errorf("Drained condition = %+v, want True", c)
	}
	if !n.Spec.Unschedulable || n.Annotations[v1alpha1.AnnotationCordonedBy] != drain.CordonOwner {
		t.Errorf("node not cordoned by nodeward after the drain: unschedulable=%t annotations=%v", n.Spec.Unschedulable, n.Annotations)
	}
}

// A PDB with maxUnavailable 0 blocks; the report names it everywhere; under
// Yield the drain returns blocked and lifts its own cordon.
func TestDrainBlockedByPDBYields(t *testing.T) {
	f := newFixture(t, "pdb0", 1)
	f.deployment("guarded", 2, nil)
	f.pdb("guarded-pdb", "guarded", 0)
	f.waitRunning(f.node, 2)
	f.waitPDB("guarded-pdb", 0)
	f.release()

	var progress []drain.Progress
	d := f.drainer(drain.Options{Timeout: 2 * time.Second, OnTimeout: drain.Yield},
		func(p drain.Progress) { progress = append(progress, p) })
	res, err := d.Run(f.ctx())
	if !errors.Is(err, drain.ErrBlocked) {
		t.Fatalf("drain error = %v, want ErrBlocked", err)
	}
	if !strings.Contains(err.Error(), "guarded-pdb allows 0 disruptions") {
		t.Errorf("error does not name the PDB and its budget: %v", err)
	}
	if len(res.Blockers) != 2 || res.Blockers[0].Reason != drain.BlockedByPDB || len(res.Blockers[0].PDBs) != 1 ||
		res.Blockers[0].PDBs[0].DesiredHealthy != 2 || res.Blockers[0].PDBs[0].CurrentHealthy != 2 {
		t.Errorf("blockers = %+v, want both pods blocked by guarded-pdb (healthy 2, desired 2)", res.Blockers)
	}
	n := f.getNode()
	if n.Spec.Unschedulable {
		t.Error("node still cordoned after a yielded drain")
	}
	if _, ok := n.Annotations[v1alpha1.AnnotationCordonedBy]; ok {
		t.Error("cordon record left behind after the uncordon")
	}
	c := condition(n, v1alpha1.ConditionDrained)
	if c == nil || c.Status != corev1.ConditionFalse || c.Reason != "DrainBlocked" || !strings.Contains(c.Message, "guarded-pdb") {
		t.Errorf("Drained condition = %+v, want False/DrainBlocked naming guarded-pdb", c)
	}
	sawBlocked := false
	for _, p := range progress {
		sawBlocked = sawBlocked || p.Kind == drain.ProgressBlocked && strings.Contains(p.Message, "guarded-pdb")
	}
	if !sawBlocked {
		t.Error("no progress line names the blocking PDB")
	}
	pods, _ := f.podsOn(f.ctx(), f.node)
	if len(pods) != 2 {
		t.Errorf("%d guarded pods on the node, want 2 (nothing evicted)", len(pods))
	}
}

// A PDB allowing one disruption is respected: the app never has fewer than
// replicas-1 healthy pods, and the drain still finishes.
func TestDrainRespectsPDBAllowingOne(t *testing.T) {
	f := newFixture(t, "pdb1", 2)
	f.deployment("quorum", 4, nil)
	f.pdb("quorum-pdb", "quorum", 1)
	f.waitRunning(f.node, 4)
	f.waitPDB("quorum-pdb", 1)
	log := f.recordPods()
	f.release()

	d := f.drainer(drain.Options{RetryBackoff: 200 * time.Millisecond, MaxRetryBackoff: time.Second}, nil)
	res, err := d.Run(f.ctx())
	if err != nil {
		t.Fatalf("drain: %v", err)
	}
	if res.Evicted != 4 {
		t.Errorf("evicted %d, want 4", res.Evicted)
	}
	if got := log.min("quorum"); got < 3 {
		t.Errorf("quorum had %d healthy pods at one point; its PDB allows at most 1 of 4 down", got)
	}
}

// A refused eviction is retried as soon as its PDB allows a disruption
// again, not at the end of its backoff: with a backoff of an hour, the
// drain of four pods under a budget of one still finishes.
func TestDrainRetriesWhenThePDBAllows(t *testing.T) {
	f := newFixture(t, "pdbwake", 2)
	f.deployment("wake", 4, nil)
	f.pdb("wake-pdb", "wake", 1)
	f.waitRunning(f.node, 4)
	f.waitPDB("wake-pdb", 1)
	f.release()

	d := f.drainer(drain.Options{RetryBackoff: time.Hour, MaxRetryBackoff: time.Hour}, nil)
	ctx, cancel := context.WithTimeout(f.ctx(), 2*time.Minute)
	defer cancel()
	res, err := d.Run(ctx)
	if err != nil {
		t.Fatalf("drain (each refused eviction would otherwise wait an hour): %v", err)
	}
	if res.Evicted != 4 {
		t.Errorf("evicted %d, want 4", res.Evicted)
	}
}

// Pre-drain hooks hold the drain, reported as Drainable=False, until their
// owner removes them.
func TestDrainHeldByPreDrainHook(t *testing.T) {
	f := newFixture(t, "hooks", 1)
	f.deployment("app", 2, nil)
	f.waitRunning(f.node, 2)
	hook := v1alpha1.PreDrainHookPrefix + "storage-detach"
	patch := `{"metadata":{"annotations":{"` + hook + `":"csi-controller"}}}`
	if _, err := f.client.CoreV1().Nodes().Patch(f.ctx(), f.node, "application/merge-patch+json", []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	f.release()

	done := make(chan error, 1)
	go func() {
		_, err := f.drainer(drain.Options{}, nil).Run(f.ctx())
		done <- err
	}()
	cluster.WaitFor(t, 30*time.Second, "Drainable=False naming the hook", func(ctx context.Context) (bool, error) {
		c := condition(f.getNode(), v1alpha1.ConditionDrainable)
		return c != nil && c.Status == corev1.ConditionFalse && strings.Contains(c.Message, "storage-detach (owner csi-controller)"), nil
	})
	if n := f.getNode(); n.Spec.Unschedulable {
		t.Fatal("node cordoned while a pre-drain hook holds the drain")
	}
	if pods, _ := f.podsOn(f.ctx(), f.node); len(pods) != 2 {
		t.Fatalf("%d pods on the node while held, want 2", len(pods))
	}
	select {
	case err := <-done:
		t.Fatalf("drain returned while held: %v", err)
	default:
	}
	rm := `{"metadata":{"annotations":{"` + hook + `":null}}}`
	if _, err := f.client.CoreV1().Nodes().Patch(f.ctx(), f.node, "application/merge-patch+json", []byte(rm), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("drain after the hook went: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("drain did not finish within 60 s of the hook's removal")
	}
	if c := condition(f.getNode(), v1alpha1.ConditionDrainable); c == nil || c.Status != corev1.ConditionTrue {
		t.Errorf("Drainable = %+v after the hook went, want True", c)
	}
}

// An admin-cordoned node stays cordoned after nodeward's drain and
// uncordon; only --force lifts it.
func TestAdminCordonSurvivesDrainAndUncordon(t *testing.T) {
	f := newFixture(t, "admin", 1)
	f.deployment("app", 2, nil)
	f.waitRunning(f.node, 2)
	f.setUnschedulable(f.node, true) // the administrator's cordon
	f.release()

	d := f.drainer(drain.Options{}, nil)
	if _, err := d.Run(f.ctx()); err != nil {
		t.Fatalf("drain: %v", err)
	}
	got, err := d.Uncordon(f.ctx(), false)
	if err != nil {
		t.Fatal(err)
	}
	n := f.getNode()
	if got != drain.CordonedByOther || !n.Spec.Unschedulable {
		t.Fatalf("uncordon = %q, unschedulable = %t; want the admin's cordon kept", got, n.Spec.Unschedulable)
	}
	if _, ok := n.Annotations[v1alpha1.AnnotationCordonedBy]; ok {
		t.Fatal("nodeward recorded an admin's cordon as its own")
	}
	if got, err = d.Uncordon(f.ctx(), true); err != nil || got != drain.Uncordoned || f.getNode().Spec.Unschedulable {
		t.Fatalf("forced uncordon = %q, %v; want uncordoned", got, err)
	}
}

// An admin who uncordons a node nodeward cordoned and cordons it again
// (kubectl uncordon, kubectl cordon: patches under the field manager
// "kubectl-cordon") owns that cordon, though nodeward's record survived
// both: nodeward's uncordon leaves it, and its cordon does not claim it.
func TestAdminRecordonAfterNodewardsCordonIsTheAdmins(t *testing.T) {
	f := newFixture(t, "recordon", 0)
	d := f.drainer(drain.Options{}, nil)
	if byUs, err := d.Cordon(f.ctx()); err != nil || !byUs {
		t.Fatalf("nodeward's cordon = %t, %v", byUs, err)
	}
	for _, patch := range []string{`{"spec":{"unschedulable":null}}`, `{"spec":{"unschedulable":true}}`} {
		if _, err := f.client.CoreV1().Nodes().Patch(f.ctx(), f.node, "application/strategic-merge-patch+json", []byte(patch),
			metav1.PatchOptions{FieldManager: "kubectl-cordon"}); err != nil {
			t.Fatalf("admin patch %s: %v", patch, err)
		}
	}
	n := f.getNode()
	if _, ok := n.Annotations[v1alpha1.AnnotationCordonedBy]; !ok || !n.Spec.Unschedulable {
		t.Fatalf("setup: want the admin's cordon with nodeward's stale record, got unschedulable %t annotations %v",
			n.Spec.Unschedulable, n.Annotations)
	}
	if drain.CordonedByNodeward(n) {
		t.Fatal("CordonedByNodeward of the admin's cordon")
	}
	if byUs, err := d.Cordon(f.ctx()); err != nil || byUs {
		t.Fatalf("cordon of the admin-cordoned node = %t, %v; want false (someone else's)", byUs, err)
	}
	got, err := d.Uncordon(f.ctx(), false)
	if err != nil || got != drain.CordonedByOther || !f.getNode().Spec.Unschedulable {
		t.Fatalf("uncordon = %q, %v, unschedulable %t; want the admin's cordon kept", got, err, f.getNode().Spec.Unschedulable)
	}
	// nodeward's own cordon, once the admin's is gone, is lifted as before.
	f.setUnschedulable(f.node, false)
	if byUs, err := d.Cordon(f.ctx()); err != nil || !byUs {
		t.Fatalf("nodeward's second cordon = %t, %v", byUs, err)
	}
	if got, err := d.Uncordon(f.ctx(), false); err != nil || got != drain.Uncordoned || f.getNode().Spec.Unschedulable {
		t.Fatalf("uncordon of nodeward's cordon = %q, %v; want uncordoned", got, err)
	}
}

// Bare and emptyDir pods are refused by default, naming them, before
// anything changes; with the evict policies they go.
func TestDrainRefusesUnmanagedAndEmptyDirPods(t *testing.T) {
	f := newFixture(t, "refuse", 1)
	f.pod("bare", nil)
	f.deployment("scratch", 1, func(p *corev1.PodTemplateSpec) {
		p.Spec.Volumes = []corev1.Volume{{Name: "cache", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	})
	f.waitRunning(f.node, 2)
	f.release()

	_, err := f.drainer(drain.Options{}, nil).Run(f.ctx())
	if !errors.Is(err, drain.ErrRefused) || !strings.Contains(err.Error(), "/bare (no controller") ||
		!strings.Contains(err.Error(), "emptyDir volume cache") {
		t.Fatalf("error = %v, want a refusal naming the bare pod and the emptyDir volume", err)
	}
	if n := f.getNode(); n.Spec.Unschedulable {
		t.Fatal("a refused drain cordoned the node")
	}
	if pods, _ := f.podsOn(f.ctx(), f.node); len(pods) != 2 {
		t.Fatalf("a refused drain removed pods: %d left, want 2", len(pods))
	}
	res, err := f.drainer(drain.Options{Unmanaged: drain.Evict, EmptyDir: drain.Evict}, nil).Run(f.ctx())
	if err != nil || res.Evicted != 2 {
		t.Fatalf("drain with evict policies: evicted %v, %v", res, err)
	}
}

// Force, the explicit opt-in, deletes the PDB-blocked pods after the
// timeout; a pod under a Skip rule stays.
func TestDrainForce(t *testing.T) {
	f := newFixture(t, "force", 1)
	f.deployment("stuck", 2, nil)
	f.pdb("stuck-pdb", "stuck", 0)
	f.pod("batch", func(p *corev1.Pod) {
		p.Spec.RestartPolicy = corev1.RestartPolicyNever
		p.OwnerReferences = nil
	})
	f.waitRunning(f.node, 3)
	f.waitPDB("stuck-pdb", 0)
	f.release()
	rules, err := drain.ParseRules([]byte(`{"kind":"DrainRules","rules":[{"name":"batch","podSelector":{"matchLabels":{"app":"batch"}},"behavior":"Skip"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	log := f.recordPods()
	res, err := f.drainer(drain.Options{Rules: rules, Timeout: 2 * time.Second, OnTimeout: drain.Force,
		GracePeriod: ptr.To[int64](0)}, nil).Run(f.ctx())
	if err != nil {
		t.Fatalf("forced drain: %v", err)
	}
	if res.Forced != 2 || res.Evicted != 0 {
		t.Errorf("forced %d, evicted %d; want 2 forced deletions and no eviction", res.Forced, res.Evicted)
	}
	_, gone, _ := log.times()
	if _, ok := gone["batch"]; ok {
		t.Error("the pod a Skip rule covers was deleted")
	}
}

// A Job pod under a WaitCompleted rule is waited for, not evicted, and its
// batch ends only when it has completed.
func TestDrainWaitsForCompletedJob(t *testing.T) {
	f := newFixture(t, "job", 1)
	tmpl := f.template("report")
	tmpl.Spec.RestartPolicy = corev1.RestartPolicyNever
	// kwok completes Job pods after this delay.
	tmpl.Annotations = map[string]string{
		"pod-complete.stage.kwok.x-k8s.io/delay":        "8s",
		"pod-complete.stage.kwok.x-k8s.io/jitter-delay": "9s",
	}
	_, err := f.client.BatchV1().Jobs(f.ns).Create(f.ctx(), &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "report"},
		Spec:       batchv1.JobSpec{Template: tmpl},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f.deployment("app", 1, nil)
	f.waitRunning(f.node, 2)
	f.release()
	rules, err := drain.ParseRules([]byte(`
kind: DrainRules
rules:
- name: jobs-finish
  podSelector: {matchLabels: {app: report}}
  order: -1
  behavior: WaitCompleted
`))
	if err != nil {
		t.Fatal(err)
	}
	log := f.recordPods()
	res, err := f.drainer(drain.Options{Rules: rules}, nil).Run(f.ctx())
	if err != nil {
		t.Fatalf("drain: %v", err)
	}
	if len(res.Plan.Batches) != 2 || res.Plan.Batches[0].Pods[0].Behavior != drain.BehaviorWaitCompleted {
		t.Fatalf("plan = %+v, want the Job pod waited on in the first batch", res.Plan.Batches)
	}
	evicted, _, completed := log.times()
	job := res.Plan.Batches[0].Pods[0].Pod.Name
	app := res.Plan.Batches[1].Pods[0].Pod.Name
	if _, ok := evicted[job]; ok && evicted[job].Before(completed[job]) {
		t.Errorf("the Job pod was evicted before it completed")
	}
	if c, ok := completed[job]; !ok || !evicted[app].After(c) {
		t.Errorf("app pod evicted at %v, Job pod completed at %v (seen: %t); want the app after the Job",
			evicted[app], c, ok)
	}
}

// A pod bound to the node while it drains (a scheduler on a stale cache
// after an API server restart binds to cordoned nodes; the chaos run saw
// it) is drained too: the drain does not finish with it still running.
// One bound after the drain finished is what Undrained reports, fresh from
// the API server, before the agent finalizes and reboots.
func TestDrainMovesPodsBoundWhileDraining(t *testing.T) {
	f := newFixture(t, "late", 1)
	f.deployment("guarded", 1, nil)
	f.pdb("guarded-pdb", "guarded", 0)
	f.waitRunning(f.node, 1)
	f.waitPDB("guarded-pdb", 0)
	f.release()

	blocked := make(chan struct{})
	var once sync.Once
	d := f.drainer(drain.Options{Unmanaged: drain.Evict}, func(p drain.Progress) {
		if p.Kind == drain.ProgressBlocked {
			once.Do(func() { close(blocked) })
		}
	})
	type outcome struct {
		res *drain.Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := d.Run(f.ctx())
		done <- outcome{res, err}
	}()
	select {
	case <-blocked:
	case <-time.After(60 * time.Second):
		t.Fatal("the drain never reported the PDB blocking it")
	}
	f.pod("late", nil) // bound to the node after the drain listed its pods
	if err := f.client.PolicyV1().PodDisruptionBudgets(f.ns).Delete(f.ctx(), "guarded-pdb", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var got outcome
	select {
	case got = <-done:
	case <-time.After(90 * time.Second):
		t.Fatal("the drain did not finish once the PDB was gone")
	}
	if got.err != nil {
		t.Fatalf("drain: %v", got.err)
	}
	if got.res.Evicted != 2 {
		t.Errorf("evicted %d pods, want 2 (the guarded pod and the one bound during the drain)", got.res.Evicted)
	}
	if p, err := f.client.CoreV1().Pods(f.ns).Get(f.ctx(), "late", metav1.GetOptions{}); err == nil && p.DeletionTimestamp == nil {
		t.Errorf("pod late, bound during the drain, is still on the node (phase %s) after the drain finished", p.Status.Phase)
	}

	if left, err := d.Undrained(f.ctx()); err != nil || len(left) != 0 {
		t.Fatalf("Undrained right after the drain = %v, %v; want none", left, err)
	}
	f.pod("after", nil)
	left, err := d.Undrained(f.ctx())
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 1 || left[0].Name != "after" {
		t.Errorf("Undrained = %v, want the pod bound after the drain", left)
	}
}

// Two drains wait on one budget; when it frees a single disruption, the
// drain that has waited longer takes it, whichever of the two the watch
// wakes first, and the other, seeing it taken at the end of its turn, does
// not ask to be refused again. The turns are widened (3 s, falling by e
// every 2 s) so that the order is not a race against the server's answers;
// without the turn either drain wins half the time. The backoff is an hour:
// only the budget's watch retries.
func TestDrainThatWaitedLongerTakesTheFreedBudget(t *testing.T) {
	f := newFixture(t, "turn", 1)
	older, newer := f.node, f.free[0]
	shared := func(p *corev1.PodTemplateSpec) { p.Labels["budget"] = "turn" }
	// One pod on each node: the free node is cordoned for the first.
	f.deployment("first", 1, shared)
	f.waitRunning(older, 1)
	f.setUnschedulable(older, true)
	f.release()
	f.deployment("second", 1, shared)
	f.waitRunning(newer, 1)
	_, err := f.client.PolicyV1().PodDisruptionBudgets(f.ns).Create(f.ctx(), &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "turn-pdb"},
		Spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: ptr.To(intstr.FromInt32(0)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"budget": "turn"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f.waitPDB("turn-pdb", 0)

	refused := map[string]chan struct{}{older: make(chan struct{}), newer: make(chan struct{})}
	ctx, cancel := context.WithTimeout(f.ctx(), 2*time.Minute)
	defer cancel()
	results := make(chan string, 2)
	registries := map[string]*prometheus.Registry{}
	start := func(node string) {
		var once sync.Once
		registries[node] = prometheus.NewRegistry()
		metrics, err := drain.NewMetrics(registries[node])
		if err != nil {
			t.Fatal(err)
		}
		d, err := drain.New(drain.Config{Client: f.cp.Kube(), Node: node, ReportEvery: 100 * time.Millisecond, Metrics: metrics,
			Options: drain.Options{RetryBackoff: time.Hour, MaxRetryBackoff: time.Hour},
			Progress: func(p drain.Progress) {
				if p.Kind == drain.ProgressBlocked {
					once.Do(func() { close(refused[node]) })
				}
			}})
		if err != nil {
			t.Fatal(err)
		}
		drain.SetBudgetTurn(d, 3*time.Second, 2*time.Second)
		go func() {
			if _, err := d.Run(ctx); err == nil {
				results <- node
			}
		}()
	}
	waitClosed := func(ch chan struct{}, what string) {
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatalf("%s: not within the deadline", what)
		}
	}
	start(older)
	waitClosed(refused[older], "the first drain refused by the budget")
	// The first drain's wait: 4 s puts its turn at 3 s × e⁻² = 0.4 s,
	// against about 3 s for the drain that starts now.
	waitedFrom := time.Now()
	cluster.WaitFor(t, time.Minute, "the first drain to wait 4 s", func(context.Context) (bool, error) {
		return time.Since(waitedFrom) >= 4*time.Second, nil
	})
	start(newer)
	waitClosed(refused[newer], "the second drain refused by the budget")

	// One disruption: both cordoned, the evicted pod's replacement stays
	// Pending, so the budget does not free again.
	patch := `{"spec":{"maxUnavailable":1}}`
	if _, err := f.client.PolicyV1().PodDisruptionBudgets(f.ns).Patch(ctx, "turn-pdb", "application/merge-patch+json", []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case won := <-results:
		if won != older {
			t.Fatalf("the drain that started waiting 4 s later (%s) took the freed disruption", won)
		}
	case <-ctx.Done():
		t.Fatal("neither drain finished after the budget allowed one disruption")
	}
	// The newer drain's turn, about 2.3 s, ends within 4 s of the budget's
	// change; by then the watch shows the disruption taken.
	patched := time.Now()
	cluster.WaitFor(t, time.Minute, "the newer drain's turn to pass", func(context.Context) (bool, error) {
		return time.Since(patched) >= 4*time.Second, nil
	})
	if pods, err := f.podsOn(ctx, newer); err != nil || len(pods) != 1 {
		t.Errorf("the newer drain's node has %d pods (err %v), want its one pod still there", len(pods), err)
	}
	if n := refusals(t, registries[newer]); n != 1 {
		t.Errorf("the newer drain was refused %v times, want once (before the budget freed): at the end of its turn it asked for a disruption the watch showed taken", n)
	}
}

// refusals is the count of evictions a budget refused in reg's drain
// metrics.
func refusals(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "nodeward_drain_evictions_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == "blocked_pdb" {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}
