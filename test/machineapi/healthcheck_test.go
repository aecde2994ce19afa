package machineapi_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/coordinator"
	"github.com/nodeward/nodeward/test/cluster"
	"github.com/nodeward/nodeward/test/coordinatortest"
	"github.com/nodeward/nodeward/test/machineapi"
	"github.com/nodeward/nodeward/test/sim"
)

// TestPlannedRebootIsNotRemediated runs the real MachineHealthCheck
// controller with a health check far shorter than a reboot (Ready Unknown
// or False for 2 s) over a MachineSet's two Machines, and nodeward's
// coordinator rolling an update that reboots each node for 8 s (the
// machine powered off: kwok stops, Ready Unknown). The coordinator pauses
// the health check while a node it judges updates: no Machine is deleted,
// both nodes reach Done, and the health check is resumed. Then the same
// outage without an update is remediated: the health check would have
// taken the reboot for a failure.
func TestPlannedRebootIsNotRemediated(t *testing.T) {
	const name = "mhc"
	cp := env.ControlPlane(t)
	mapi := machineapi.Start(t, cp, machineapi.Options{})
	ctx := context.Background()
	if err := cp.InstallCRDs(ctx); err != nil {
		t.Fatal(err)
	}
	mapi.CreateMachineSet(ctx, machineapi.MachineSetSpec{Name: name, Replicas: 2, Role: "worker"})
	machines := waitMachineSet(t, cp, mapi, name, 2*time.Minute, 2)
	var nodes []string
	for _, n := range machines {
		nodes = append(nodes, n)
	}
	if err := cluster.CreateAgentLeases(ctx, cp.Client(), nodes); err != nil {
		t.Fatal(err)
	}
	runAgentsWith(t, cp, nodes, func(n *sim.SimNode) {
		n.RebootDelay = 8 * time.Second
		// A reboot double that fails would leave the node Ready: the
		// test would prove nothing; say so.
		n.PowerOff = func(ctx context.Context) error { return reported(t, cluster.PowerOff(ctx, cp.Client(), n.Name)) }
		n.PowerOn = func(ctx context.Context) error { return reported(t, cluster.PowerOn(ctx, cp.Client(), n.Name)) }
	})
	mapi.CreateMHC(ctx, machineapi.MHCSpec{Name: name, Selector: map[string]string{machineapi.LabelMachineSet: name},
		UnhealthyConditions: []machineapi.UnhealthyCondition{
			{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, Timeout: 2 * time.Second},
			{Type: corev1.NodeReady, Status: corev1.ConditionFalse, Timeout: 2 * time.Second}},
	})
	createPool(t, cp, name)
	coordinatortest.Start(t, cp, coordinatortest.Options{Pools: name, Resync: time.Second})

	seen := watchRollout(t, cp, mapi, name, machines)
	cluster.WaitFor(t, 3*time.Minute, "both nodes Done on os-2, the health check resumed", func(ctx context.Context) (bool, error) {
		for _, node := range nodes {
			n, err := cp.Client().CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
			if err != nil {
				return false, fmt.Errorf("node %s: %w (remediated?)", node, err)
			}
			if n.Annotations[v1alpha1.AnnotationState] != string(v1alpha1.StepDone) || n.Annotations[v1alpha1.AnnotationStateTarget] != "os-2" {
				return false, fmt.Errorf("%s is %s", node, n.Annotations[v1alpha1.AnnotationState])
			}
		}
		paused, err := healthCheckPause(ctx, mapi, name)
		return err == nil && paused == "", fmt.Errorf("health check paused %q, %v", paused, err)
	})
	got := seen()
	if got.deleted != "" {
		t.Fatalf("machine %s deleted during the rollout: a planned reboot was remediated", got.deleted)
	}
	if got.downWhilePaused < 2 {
		t.Fatalf("%d nodes seen powered off under nodeward's pause of the health check; want both", got.downWhilePaused)
	}
	// The control: the same outage outside an update is remediated.
	if err := cluster.PowerOff(ctx, cp.Client(), nodes[0]); err != nil {
		t.Fatal(err)
	}
	for m, n := range machines {
		if n == nodes[0] {
			waitGone(t, cp, mapi, m, n, 2*time.Minute)
		}
	}
}

// rolloutSeen is what watchRollout saw.
type rolloutSeen struct {
	// deleted names a Machine seen deleting, "" when none was.
	deleted string
	// downWhilePaused counts the nodes seen with Ready Unknown while the
	// health check carried nodeward's pause.
	downWhilePaused int
}

// watchRollout polls every 200 ms until the test ends: the Machines of
// the MachineSet (machines: their names mapped to their nodes), the nodes'
// Ready and the health check's pause.
func watchRollout(t *testing.T, cp *cluster.ControlPlane, mapi *machineapi.Controllers, name string, machines map[string]string) func() rolloutSeen {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	var seen rolloutSeen
	downPaused := map[string]bool{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for tick := time.NewTicker(200 * time.Millisecond); ctx.Err() == nil; <-tick.C {
			paused, _ := healthCheckPause(ctx, mapi, name)
			mu.Lock()
			for machine := range machines {
				m, err := mapi.Machine(ctx, machine)
				if (apierrors.IsNotFound(err) || err == nil && m.DeletionTimestamp != nil) && seen.deleted == "" {
					seen.deleted = machine
				}
			}
			for _, node := range machines {
				n, err := cp.Client().CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
				if err == nil && !cluster.NodeReady(n) && paused == coordinator.RemediationHoldValue {
					downPaused[node] = true
				}
			}
			seen.downWhilePaused = len(downPaused)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return func() rolloutSeen {
		mu.Lock()
		defer mu.Unlock()
		return seen
	}
}

// healthCheckPause is the value of the health check's paused annotation,
// "" when it has none.
func healthCheckPause(ctx context.Context, mapi *machineapi.Controllers, name string) (string, error) {
	mhc, err := mapi.Dynamic.Resource(machineapi.MHCResource).Namespace(machineapi.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	return mhc.GetAnnotations()[coordinator.PausedAnnotation], nil
}

// reported fails the test, from any goroutine, when err is not nil, and
// returns it.
func reported(t *testing.T, err error) error {
	if err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("kwok reboot double: %v", err)
	}
	return err
}
