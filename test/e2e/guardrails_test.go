package e2e

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/test/cluster"
	"github.com/nodeward/nodeward/test/coordinatortest"
	"github.com/nodeward/nodeward/test/prom"
)

// TestGuardrailsWithRealAgents: four real agents on simulated hosts,
// nodeward's coordinator, a real Prometheus and a real Alertmanager. A
// failing query gate holds the whole pool; once it passes, the pool rolls
// out two at a time, each node soaking after Done, each node silenced in
// Alertmanager exactly while it holds a grant it has not finished, and no
// node silenced otherwise.
func TestGuardrailsWithRealAgents(t *testing.T) {
	t.Parallel()
	target := prom.NewTarget(t)
	target.Set("nodeward_test_errors", map[string]string{"app": "web"}, 1)
	p8s := prom.StartPrometheus(t, prom.PrometheusOptions{Targets: []string{target.Addr()}})
	am := prom.StartAlertmanager(t)
	p := newPool(t, "rails", poolOptions{count: 4, maxUnavailable: 2})
	dyn := installPoolAPI(t, p.cp)
	if err := cluster.CreateAgentLeases(context.Background(), p.cp.Client(), p.names); err != nil {
		t.Fatal(err)
	}
	p.createPool(dyn, v1alpha1.UpdatePoolSpec{OSImage: toOS, MaxUnavailable: ptr.To(intstr.FromInt32(2)), Soak: "3s",
		Gates: &v1alpha1.Gates{Prometheus: p8s.URL, Queries: []v1alpha1.GateQuery{
			{Name: "web-errors", Query: `sum(nodeward_test_errors{app="web"})`, Max: ptr.To("0")}}},
		Silences: &v1alpha1.Silences{Alertmanager: am.URL},
	})
	p.startAgents()
	coordinatortest.Start(t, p.cp, coordinatortest.Options{Pools: "rails", Resync: time.Second})

	// The gate fails: every node stages, none is granted.
	cluster.WaitFor(t, 2*time.Minute, "every node staged", func(ctx context.Context) (bool, error) {
		return p.countStep(ctx, v1alpha1.StepStaged) == len(p.names), nil
	})
	deadline := time.Now().Add(4 * time.Second)
	for time.Now().Before(deadline) {
		if granted := p.granted(t); len(granted) > 0 {
			t.Fatalf("granted %v while the gate fails", granted)
		}
		time.Sleep(200 * time.Millisecond)
	}

	// Silences follow the grants: checked on every poll from here on.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	soaked := map[string]bool{}
	var wg sync.WaitGroup
	wg.Go(func() {
		for ctx.Err() == nil {
			// Nodes first: a grant seen unfinished was silenced before it
			// was written, so the silence is in the list read after,
			// unless the node finished in between (read again).
			nodes := p.updating(t)
			silenced := map[string]bool{}
			for _, s := range am.Silences(t) {
				if s.State == "active" && s.CreatedBy == "nodeward-coordinator" {
					for _, n := range p.names {
						if strings.Contains(s.Comment, "node="+n+":") {
							silenced[n] = true
						}
					}
				}
			}
			var unsilenced []string
			for n, unfinished := range nodes {
				if unfinished && !silenced[n] {
					unsilenced = append(unsilenced, n)
				}
			}
			if len(unsilenced) > 0 {
				again := p.updating(t)
				for _, n := range unsilenced {
					if again[n] {
						t.Errorf("%s updates without a silence", n)
					}
				}
			}
			mu.Lock()
			for n := range p.soaking(t) {
				soaked[n] = true
			}
			mu.Unlock()
			time.Sleep(100 * time.Millisecond)
		}
	})
	target.Set("nodeward_test_errors", map[string]string{"app": "web"}, 0)
	p.waitAllDone(3 * time.Minute)
	cluster.WaitFor(t, time.Minute, "every slot back and every silence expired", func(ctx context.Context) (bool, error) {
		if len(p.granted(t)) > 0 {
			return false, nil
		}
		for _, s := range am.Silences(t) {
			if s.State == "active" && s.CreatedBy == "nodeward-coordinator" {
				return false, nil
			}
		}
		return true, nil
	})
	cancel()
	wg.Wait()
	for _, name := range p.names {
		p.assertUpdated(name)
		if !soaked[name] {
			t.Errorf("%s was never seen soaking after Done", name)
		}
	}
}

// granted lists the pool's nodes holding a grant.
func (p *pool) granted(t *testing.T) []string {
	var out []string
	for n, a := range p.annotations(t) {
		if a[v1alpha1.AnnotationGrant] != "" {
			out = append(out, n)
		}
	}
	return out
}

// updating maps each granted node to whether its agent has not yet
// finished the grant (Done or Yielded for it).
func (p *pool) updating(t *testing.T) map[string]bool {
	out := map[string]bool{}
	for n, a := range p.annotations(t) {
		g := a[v1alpha1.AnnotationGrant]
		if g == "" {
			continue
		}
		state := v1alpha1.Step(a[v1alpha1.AnnotationState])
		out[n] = a[v1alpha1.AnnotationStateGrant] != g || (state != v1alpha1.StepDone && state != v1alpha1.StepYielded)
	}
	return out
}

// soaking lists the nodes holding a grant with soak-until set.
func (p *pool) soaking(t *testing.T) map[string]bool {
	out := map[string]bool{}
	for n, a := range p.annotations(t) {
		if a[v1alpha1.AnnotationGrant] != "" && a[v1alpha1.AnnotationSoakUntil] != "" {
			out[n] = true
		}
	}
	return out
}

// annotations reads every node's annotations in one list.
func (p *pool) annotations(t *testing.T) map[string]map[string]string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out := map[string]map[string]string{}
	for _, n := range p.names {
		node, err := p.node(ctx, n)
		if err != nil {
			t.Errorf("read node %s: %v", n, err)
			continue
		}
		out[n] = node.Annotations
	}
	return out
}
