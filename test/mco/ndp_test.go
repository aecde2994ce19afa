package mco_test

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeward/nodeward/test/fakelogind"
	"github.com/nodeward/nodeward/test/mco"
)

// The files node disruption policies act on, with the daemon's default
// policies: the pull secret and SSH keys need nothing, policy.json a
// reload of CRI-O, registries.conf the Special action (a reload of CRI-O,
// and a drain unless the change is safe).
const (
	pullSecretFile = "/var/lib/kubelet/config.json"
	registriesFile = "/etc/containers/registries.conf"
	policyFile     = "/etc/containers/policy.json"
	otherKey       = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIG8Jc0Zm2n0YkJ8yJx7b0kqv3iYhB9pV6m2r1W4sQe8T nodeward-other"
)

// registries is a registries.conf with one registry and its mirrors; each
// mirror is "location" (pulled by tag too) or "location@digest" (digest
// only).
func registries(mirrors ...string) string {
	var b strings.Builder
	b.WriteString("unqualified-search-registries = [\"registry.access.redhat.com\", \"docker.io\"]\n\n")
	b.WriteString("[[registry]]\n  prefix = \"\"\n  location = \"quay.io/openshift-release-dev/ocp-release\"\n")
	for _, m := range mirrors {
		location, digestOnly := strings.CutSuffix(m, "@digest")
		fmt.Fprintf(&b, "\n  [[registry.mirror]]\n    location = %q\n", location)
		if digestOnly {
			b.WriteString("    pull-from-mirror = \"digest-only\"\n")
		}
	}
	return b.String()
}

// hostConfig is a rendered config on one OS image, no kernel arguments,
// with files (path → contents) and core's SSH key.
func hostConfig(files map[string]string, key string) mco.MachineConfig {
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	list := make([]any, 0, len(paths))
	for _, p := range paths {
		list = append(list, map[string]any{"path": p, "mode": 0o644,
			"contents": map[string]any{"source": "data:," + url.PathEscape(files[p])}})
	}
	ign := map[string]any{
		"ignition": map[string]any{"version": "3.4.0"},
		"storage":  map[string]any{"files": list},
		"passwd":   map[string]any{"users": []any{map[string]any{"name": "core", "sshAuthorizedKeys": []any{key}}}},
	}
	return mco.MachineConfig{OSImageURL: "quay.io/fedora/fedora-coreos:41", Ignition: ign}
}

// disruptions records, from a watch of the pool's nodes, what each went
// through: a cordon however brief, and every drain request it made.
type disruptions struct {
	mu       sync.Mutex
	cordoned map[string]bool
	requests map[string][]string
}

func watchDisruptions(t testing.TB, p *agentPool) *disruptions {
	t.Helper()
	d := &disruptions{cordoned: map[string]bool{}, requests: map[string][]string{}}
	watchNodes(t, p, "", func(n *corev1.Node) {
		if !p.member(n.Name) {
			return
		}
		d.mu.Lock()
		defer d.mu.Unlock()
		d.cordoned[n.Name] = d.cordoned[n.Name] || n.Spec.Unschedulable
		if r := n.Annotations[mco.AnnotationDesiredDrain]; r != "" && !slices.Contains(d.requests[n.Name], r) {
			d.requests[n.Name] = append(d.requests[n.Name], r)
		}
	})
	return d
}

// reset forgets what was seen so far.
func (d *disruptions) reset() {
	d.mu.Lock()
	defer d.mu.Unlock()
	clear(d.cordoned)
	clear(d.requests)
}

func (d *disruptions) of(node string) (cordoned bool, requests []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.cordoned[node], slices.Clone(d.requests[node])
}

// change is one config change of TestNodeDisruptionPoliciesUnderTheRealController
// and what it must cost every node.
type change struct {
	name  string
	files map[string]string
	key   string
	drain bool
	// reloads is how many times CRI-O is reloaded on each node.
	reloads int
}

// TestNodeDisruptionPoliciesUnderTheRealController rolls five changes out
// to three nodes under the real node and drain controllers, with the
// operator's default policies: a pull secret, an SSH key, a digest-only
// mirror added to registries.conf, policy.json and a mirror that is not
// digest-only. None reboots a node; only the last drains, and the changes
// to CRI-O's files reload it once per node.
func TestNodeDisruptionPoliciesUnderTheRealController(t *testing.T) {
	base := map[string]string{
		pullSecretFile: `{"auths":{"quay.io":{"auth":"b25lOm9uZQ=="}}}`,
		registriesFile: registries("mirror.example.com/ocp-release@digest"),
		policyFile:     `{"default":[{"type":"insecureAcceptAnything"}]}`,
	}
	// Each change starts from the files of the one before.
	var changes []change
	step := func(c change, path, data string) {
		files := base
		if n := len(changes); n > 0 {
			files = changes[n-1].files
		}
		c.files = map[string]string{}
		for k, v := range files {
			c.files[k] = v
		}
		if path != "" {
			c.files[path] = data
		}
		changes = append(changes, c)
	}
	step(change{name: "pull secret", key: testKey}, pullSecretFile, `{"auths":{"quay.io":{"auth":"dHdvOnR3bw=="}}}`)
	step(change{name: "SSH key", key: otherKey}, "", "")
	step(change{name: "digest-only mirror", key: otherKey, reloads: 1}, registriesFile,
		registries("mirror.example.com/ocp-release@digest", "mirror2.example.com/ocp-release@digest"))
	step(change{name: "policy.json", key: otherKey, reloads: 1}, policyFile, `{"default":[{"type":"reject"}]}`)
	step(change{name: "mirror by tag", key: otherKey, drain: true, reloads: 1}, registriesFile,
		registries("mirror.example.com/ocp-release@digest", "mirror2.example.com/ocp-release@digest", "tags.example.com/ocp-release"))
	p := newAgentPool(t, "ndp", 3, hostConfig(base, testKey), hostConfig(changes[0].files, changes[0].key))
	ctx := context.Background()
	configs := []string{p.config2}
	for i, c := range changes[1:] {
		mc := hostConfig(c.files, c.key)
		mc.Name = fmt.Sprintf("rendered-ndp-%d", i+3)
		p.c.CreateMachineConfig(ctx, mc)
		configs = append(configs, mc.Name)
	}
	p.startAgents(t)
	seen := watchDisruptions(t, p)
	p.start(t, mco.Default)
	p.c.WaitPool(p.pool.Name, time.Minute, "Updated on "+p.config1, func(s mco.PoolStatus) bool {
		return s.IsTrue("Updated") && s.UpdatedMachineCount == 3 && s.Configuration == p.config1
	})
	for i, c := range changes {
		config := configs[i]
		seen.reset()
		calls := map[string]int{}
		for _, node := range p.nodes {
			calls[node] = len(p.procs[node].Systemd.Calls())
		}
		began := time.Now()
		if err := p.c.SetPoolConfig(ctx, p.pool.Name, config); err != nil {
			t.Fatal(err)
		}
		p.c.WaitPool(p.pool.Name, 3*time.Minute, c.name+": Updated on "+config, func(s mco.PoolStatus) bool {
			return s.IsTrue("Updated") && s.UpdatedMachineCount == 3 && s.DegradedMachineCount == 0 && s.Configuration == config
		})
		t.Logf("%s: 3 nodes in %s", c.name, time.Since(began).Round(100*time.Millisecond))
		for _, node := range p.nodes {
			p.assertLiveChange(t, c, config, node, seen, p.procs[node].Systemd.Calls()[calls[node]:])
		}
	}
	if max := p.watch.Max(); max > 1 {
		t.Errorf("%d nodes were unavailable at once; maxUnavailable is 1", max)
	}
}

// assertLiveChange checks what change c, to config, cost node: no reboot,
// a drain only when c drains, CRI-O reloaded c.reloads times, its files
// and key on disk.
func (p *agentPool) assertLiveChange(t testing.TB, c change, config, node string, seen *disruptions, calls []fakelogind.UnitCall) {
	t.Helper()
	if _, boots := p.booted(t, node); boots != 0 {
		t.Errorf("%s: %s: %d boots; want none", c.name, node, boots)
	}
	cordoned, requests := seen.of(node)
	drained := slices.Contains(requests, "drain-"+config)
	if cordoned != c.drain || drained != c.drain {
		t.Errorf("%s: %s: cordoned %v, drain requests %v; want a drain: %v", c.name, node, cordoned, requests, c.drain)
	}
	if !slices.Contains(requests, "uncordon-"+config) {
		t.Errorf("%s: %s: drain requests %v; want the uncordon handshake for %s", c.name, node, requests, config)
	}
	reloads := 0
	for _, call := range calls {
		if call.Method == "ReloadUnit" && call.Unit == "crio.service" {
			reloads++
		} else {
			t.Errorf("%s: %s: unexpected unit call %+v", c.name, node, call)
		}
	}
	if reloads != c.reloads {
		t.Errorf("%s: %s: CRI-O reloaded %d times; want %d", c.name, node, reloads, c.reloads)
	}
	for path, want := range c.files {
		if got := p.hostFile(t, node, path); got != want {
			t.Errorf("%s: %s: %s = %q; want %q", c.name, node, path, got, want)
		}
	}
	if got := strings.TrimSpace(p.hostFile(t, node, coreKeys)); got != c.key {
		t.Errorf("%s: %s: core's keys %q; want %q", c.name, node, got, c.key)
	}
	if cond := p.mcnCondition(t, node, "Updated"); cond.Status != "True" {
		t.Errorf("%s: MachineConfigNode %s Updated = %+v", c.name, node, cond)
	}
}
