package mco_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeward/nodeward/test/cluster"
	"github.com/nodeward/nodeward/test/mco"
	"github.com/nodeward/nodeward/test/rpmostree"
	"github.com/nodeward/nodeward/test/sim"
)

// join adds a node to the pool as the machine config server provisions
// one: a kwok node with the pool's labels and no machine config
// annotations, and a host whose first-boot file holds firstBoot (the
// machine config server's node-annotations.json). The host booted the
// first config's OS image, and provisioned (when not nil) wrote its
// files; its agent is started.
func (p *agentPool) join(t testing.TB, prefix, firstBoot string, kargs []string, provisioned func(root string)) string {
	t.Helper()
	name := p.cp.CreateNodes(t, cluster.NodeSpec{Prefix: prefix, Count: 1, Zones: []string{"zone-z"}, Labels: p.pool.NodeLabels()})[0]
	p.mu.Lock()
	p.nodes = append(p.nodes, name)
	p.mu.Unlock()
	bin, err := procBinaries()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	booted := sim.ProcBooted()
	booted.Kargs = append(booted.Kargs, kargs...)
	n, err := sim.NewProcNode(bin, name, p.cp.KubeconfigPath(), dir, booted, sim.ProcImages())
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(dir, "root")
	writeHostRoot(t, root)
	if provisioned != nil {
		provisioned(root)
	}
	file := filepath.Join(root, "etc/machine-config-daemon/node-annotations.json")
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte(firstBoot), 0o644); err != nil {
		t.Fatal(err)
	}
	n.Args = []string{"--protocol", "mco", "--mco-root", root, "--mco-degrade-after", "2s"}
	n.RebootDelay = 300 * time.Millisecond
	p.mu.Lock()
	p.procs[name], p.roots[name] = n, root
	p.mu.Unlock()
	sim.RunMachines(t, map[string]*sim.ProcNode{name: n})
	if err := n.Start(); err != nil {
		t.Fatal(err)
	}
	return name
}

// firstBootFile is node-annotations.json as the machine config server
// writes it for config.
func firstBootFile(config string) string {
	return `{"machineconfiguration.openshift.io/currentConfig":"` + config + `","machineconfiguration.openshift.io/desiredConfig":"` + config +
		`","machineconfiguration.openshift.io/firstPivotConfig":"` + config + `","machineconfiguration.openshift.io/state":"Done"}`
}

// TestNewNodesJoinFromTheFirstBootFile: nodes join a live pool with only
// the first-boot file. One booted its config's OS: it reports Done on it
// without a boot. After the pool moved to a new OS, one joins from the old
// boot image: it boots its config's OS once and reports Done. One whose
// file is malformed reports Degraded saying so, and nothing else is
// written on it.
func TestNewNodesJoinFromTheFirstBootFile(t *testing.T) {
	first := demoConfig("quay.io/fedora/fedora-coreos:41", []string{"nodeward.old=1"}, "one", "")
	second := demoConfig("quay.io/fedora/fedora-coreos:42", []string{"nodeward.test=1"}, "two", testKey)
	p := newAgentPool(t, "join", 1, first, second)
	ctx := context.Background()
	p.startAgents(t)
	p.start(t, mco.Default)
	p.c.WaitPool(p.pool.Name, time.Minute, "Updated on "+p.config1, func(s mco.PoolStatus) bool {
		return s.IsTrue("Updated") && s.UpdatedMachineCount == 1
	})

	same := p.join(t, "joinsame", firstBootFile(p.config1), first.KernelArguments,
		func(root string) { provision(t, root, first, p.config1) })
	p.c.WaitNode(same, time.Minute, "Done on "+p.config1, func(n *corev1.Node) bool {
		return n.Annotations[mco.AnnotationState] == mco.StateDone && n.Annotations[mco.AnnotationCurrentConfig] == p.config1
	})
	if _, boots := p.booted(t, same); boots != 0 {
		t.Errorf("%s: %d boots; a node on its config's OS needs none", same, boots)
	}
	if _, err := os.Stat(filepath.Join(p.roots[same], "etc/machine-config-daemon/node-annotation.json.bak")); err != nil {
		t.Errorf("%s: the first-boot file was not set aside: %v", same, err)
	}
	p.c.WaitPool(p.pool.Name, time.Minute, "Updated with 2 machines", func(s mco.PoolStatus) bool {
		return s.IsTrue("Updated") && s.MachineCount == 2 && s.UpdatedMachineCount == 2
	})

	if err := p.c.SetPoolConfig(ctx, p.pool.Name, p.config2); err != nil {
		t.Fatal(err)
	}
	p.c.WaitPool(p.pool.Name, 3*time.Minute, "Updated on "+p.config2, func(s mco.PoolStatus) bool {
		return s.IsTrue("Updated") && s.UpdatedMachineCount == 2 && s.Configuration == p.config2
	})
	// Booted from the boot image: the old OS, none of the configs' kernel
	// arguments.
	claims := p.watchClaims(t, "joinpivot-0", p.config2)
	pivot := p.join(t, "joinpivot", firstBootFile(p.config2), nil,
		func(root string) { provision(t, root, second, p.config2) })
	p.c.WaitNode(pivot, 2*time.Minute, "Done on "+p.config2, func(n *corev1.Node) bool {
		return n.Annotations[mco.AnnotationState] == mco.StateDone && n.Annotations[mco.AnnotationCurrentConfig] == p.config2
	})
	p.assertOnSecond(t, pivot, []string{"nodeward.test=1"}, nil, "two", testKey)
	if early := claims(); early != "" {
		t.Errorf("%s claimed its config before it ran it: %s", pivot, early)
	}
	p.c.WaitPool(p.pool.Name, time.Minute, "Updated with 3 machines", func(s mco.PoolStatus) bool {
		return s.IsTrue("Updated") && s.MachineCount == 3 && s.UpdatedMachineCount == 3
	})

	bad := p.join(t, "joinbad", `{"machineconfiguration.openshift.io/currentConfig": `, nil, nil)
	n := p.c.WaitNode(bad, time.Minute, "Degraded naming the first-boot file", func(n *corev1.Node) bool {
		return n.Annotations[mco.AnnotationState] == mco.StateDegraded &&
			strings.Contains(n.Annotations[mco.AnnotationReason], "failed to unmarshal initial annotations")
	})
	if c := n.Annotations[mco.AnnotationCurrentConfig]; c != "" {
		t.Errorf("%s: currentConfig %q written from a malformed file", bad, c)
	}
	if max := p.watch.Max(); max > 1 {
		t.Errorf("%d nodes were unavailable at once; maxUnavailable is 1", max)
	}
}

// watchClaims watches node (which may not exist yet) and returns a
// function saying whether, so far, it was ever seen Done on config before
// its host booted that config's OS: a claim the node controller would
// count as an updated, available node.
func (p *agentPool) watchClaims(t testing.TB, node, config string) func() string {
	t.Helper()
	var mu sync.Mutex
	var early string
	watchNodes(t, p, "metadata.name="+node, func(n *corev1.Node) {
		if n.Annotations[mco.AnnotationState] != mco.StateDone || n.Annotations[mco.AnnotationCurrentConfig] != config {
			return
		}
		p.mu.Lock()
		proc := p.procs[node]
		p.mu.Unlock()
		if proc == nil {
			return
		}
		if s, err := rpmostree.Load(proc.Double.Dir); err == nil && s.Boots == 0 {
			mu.Lock()
			early = fmt.Sprintf("Done on %s at resourceVersion %s with no boot", config, n.ResourceVersion)
			mu.Unlock()
		}
	})
	return func() string {
		mu.Lock()
		defer mu.Unlock()
		return early
	}
}
