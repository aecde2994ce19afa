package mco_test

import (
	"context"
	"encoding/json"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/nodeward/nodeward/machineconfig"
	"github.com/nodeward/nodeward/test/cluster"
	"github.com/nodeward/nodeward/test/mco"
	"github.com/nodeward/nodeward/test/rpmostree"
	"github.com/nodeward/nodeward/test/sim"
	"github.com/nodeward/nodeward/test/testenv"
)

var procBinaries = sync.OnceValues(func() (sim.ProcBinaries, error) {
	dir, err := os.MkdirTemp("", "nodeward-proc-bin-")
	if err != nil {
		return sim.ProcBinaries{}, err
	}
	return sim.BuildProcBinaries(dir)
})

// The host files of the test configs.
const (
	demoFile = "/etc/nodeward-demo.conf"
	demoUnit = "nodeward-demo.service"
	demoLink = "/etc/systemd/system/multi-user.target.wants/" + demoUnit
	coreKeys = "/var/home/core/.ssh/authorized_keys.d/ignition"
)

// demoConfig is a rendered config on image with kargs, one file whose
// content is text, a unit running it and, when key is set, core's SSH key.
func demoConfig(image string, kargs []string, text, key string) mco.MachineConfig {
	ign := map[string]any{
		"ignition": map[string]any{"version": "3.4.0"},
		"storage": map[string]any{"files": []any{map[string]any{
			"path": demoFile, "mode": 0o640, "contents": map[string]any{"source": "data:," + url.PathEscape(text)}}}},
		"systemd": map[string]any{"units": []any{map[string]any{"name": demoUnit, "enabled": true,
			"contents": "[Service]\nExecStart=/usr/bin/echo " + text + "\n[Install]\nWantedBy=multi-user.target\n"}}},
	}
	if key != "" {
		ign["passwd"] = map[string]any{"users": []any{map[string]any{"name": "core", "sshAuthorizedKeys": []any{key}}}}
	}
	return mco.MachineConfig{OSImageURL: image, KernelArguments: kargs, Ignition: ign}
}

// agentPool is a fixture whose nodes run real `nodeward agent
// --protocol=mco` processes on simulated hosts: the rpm-ostree double
// booted into the first config's image with its kernel arguments, and a
// host root holding a core user.
type agentPool struct {
	*fixture
	// mu guards procs and roots for watchers while nodes join.
	mu    sync.Mutex
	procs map[string]*sim.ProcNode
	roots map[string]string
}

func newAgentPool(t testing.TB, name string, count int, first, second mco.MachineConfig, args ...string) *agentPool {
	t.Helper()
	testenv.RequireBinary(t, "dbus-daemon")
	f := newFixtureWith(t, name, count, first, second)
	bin, err := procBinaries()
	if err != nil {
		t.Fatal(err)
	}
	p := &agentPool{fixture: f, procs: map[string]*sim.ProcNode{}, roots: map[string]string{}}
	for _, node := range f.nodes {
		dir := t.TempDir()
		booted := sim.ProcBooted()
		booted.Kargs = append(booted.Kargs, first.KernelArguments...)
		n, err := sim.NewProcNode(bin, node, f.cp.KubeconfigPath(), dir, booted, sim.ProcImages())
		if err != nil {
			t.Fatal(err)
		}
		root := filepath.Join(dir, "root")
		writeHostRoot(t, root)
		provision(t, root, first, f.config1)
		n.Args = append([]string{"--protocol", "mco", "--mco-root", root}, args...)
		n.RebootDelay = 300 * time.Millisecond
		p.procs[node], p.roots[node] = n, root
	}
	sim.RunMachines(t, p.procs)
	return p
}

// provision writes config's files, units and SSH keys under root, as
// Ignition writes them when the machine is provisioned with it: the config
// drift monitor checks them from the start.
func provision(t testing.TB, root string, config mco.MachineConfig, name string) {
	t.Helper()
	config.Name = name
	data, err := json.Marshal(config.Object().Object)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := machineconfig.Parse(data)
	if err != nil {
		t.Fatalf("parse %s: %v", name, err)
	}
	w := machineconfig.Writer{Root: root, StateDir: t.TempDir()}
	if err := w.Apply(context.Background(), nil, cfg); err != nil {
		t.Fatalf("provision %s with %s: %v", root, name, err)
	}
}

// writeHostRoot makes a host root with a core user, as on RHCOS.
func writeHostRoot(t testing.TB, root string) {
	t.Helper()
	for path, data := range map[string]string{
		"etc/passwd": "root:x:0:0:root:/root:/bin/bash\ncore:x:1000:1000:CoreOS Admin:/var/home/core:/bin/bash\n",
		"etc/group":  "root:x:0:\ncore:x:1000:\n",
	} {
		if err := os.MkdirAll(filepath.Join(root, filepath.Dir(path)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, path), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(root, "var/home/core"), 0o700); err != nil {
		t.Fatal(err)
	}
}

func (p *agentPool) startAgents(t testing.TB) {
	t.Helper()
	for _, n := range p.procs {
		if err := n.Start(); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range p.nodes {
		p.c.WaitNode(name, time.Minute, "agent reports Done on "+p.config1, func(n *corev1.Node) bool {
			return n.Annotations[mco.AnnotationState] == mco.StateDone
		})
	}
}

// hostFile reads a file of node's host root ("(absent)" when missing).
func (p *agentPool) hostFile(t testing.TB, node, path string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(p.roots[node], path))
	if err != nil {
		return "(absent)"
	}
	return string(data)
}

// booted is the double's booted deployment of node and its boot count.
func (p *agentPool) booted(t testing.TB, node string) (rpmostree.Deployment, int) {
	t.Helper()
	s, err := rpmostree.Load(p.procs[node].Double.Dir)
	if err != nil {
		t.Fatal(err)
	}
	d, err := s.BootedDeployment()
	if err != nil {
		t.Fatal(err)
	}
	return *d, s.Boots
}

// assertOnSecond checks node runs the second config whole: its image, its
// kernel arguments and not the first's, its file, unit and key, after one
// boot.
func (p *agentPool) assertOnSecond(t testing.TB, node string, kargs, gone []string, text, key string) {
	t.Helper()
	d, boots := p.booted(t, node)
	if d.Checksum != sim.ProcNewChecksum || boots != 1 {
		t.Errorf("%s: booted %s after %d boots, want the new deployment after one", node, d.Checksum, boots)
	}
	for _, a := range kargs {
		if !slices.Contains(d.Kargs, a) {
			t.Errorf("%s: kernel argument %s missing from %v", node, a, d.Kargs)
		}
	}
	for _, a := range gone {
		if slices.Contains(d.Kargs, a) {
			t.Errorf("%s: removed kernel argument %s still in %v", node, a, d.Kargs)
		}
	}
	if got := p.hostFile(t, node, demoFile); got != text {
		t.Errorf("%s: %s = %q, want %q", node, demoFile, got, text)
	}
	if unit := p.hostFile(t, node, "/etc/systemd/system/"+demoUnit); !strings.Contains(unit, text) {
		t.Errorf("%s: unit %s = %q, want it to run %q", node, demoUnit, unit, text)
	}
	if _, err := os.Lstat(filepath.Join(p.roots[node], demoLink)); err != nil {
		t.Errorf("%s: unit not enabled: %v", node, err)
	}
	if key != "" && strings.TrimSpace(p.hostFile(t, node, coreKeys)) != key {
		t.Errorf("%s: core's keys = %q, want %q", node, p.hostFile(t, node, coreKeys), key)
	}
}

// mcnCondition is a condition of node's MachineConfigNode.
func (p *agentPool) mcnCondition(t testing.TB, node, typ string) mco.Condition {
	t.Helper()
	mcn, found, err := p.c.MachineConfigNode(context.Background(), node)
	if err != nil || !found {
		t.Fatalf("MachineConfigNode %s: found %v, %v", node, found, err)
	}
	return mcn.Conditions[typ]
}

// watchNodes calls each, from one goroutine, with every version of the
// nodes a watch with fieldSelector delivers ("" for all nodes; a named node
// need not exist yet) until the test ends.
func watchNodes(t testing.TB, p *agentPool, fieldSelector string, each func(*corev1.Node)) {
	t.Helper()
	cluster.WatchNodes(t, p.c.Kube, metav1.ListOptions{FieldSelector: fieldSelector}, func(_ context.Context, _ watch.EventType, n *corev1.Node) {
		each(n)
	})
}

// member tells whether node is one of the pool's (nodes join while
// watchers run).
func (p *agentPool) member(node string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Contains(p.nodes, node)
}

// recordStates watches node and returns a function giving, so far, every
// value its state annotation took, in order (repeats folded).
func recordStates(t testing.TB, p *agentPool, node string) func() []string {
	t.Helper()
	var mu sync.Mutex
	var states []string
	watchNodes(t, p, "metadata.name="+node, func(n *corev1.Node) {
		mu.Lock()
		defer mu.Unlock()
		if s := n.Annotations[mco.AnnotationState]; len(states) == 0 || states[len(states)-1] != s {
			states = append(states, s)
		}
	})
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(states)
	}
}
