package mco_test

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeward/nodeward/test/mco"
)

// changeClass is one kind of config change and what the
// machine-config-daemon does for it under the default node disruption
// policies (docs/NodeDisruptionPolicy.md of the MCO, and its
// isSafeContainerRegistryConfChanges for registries.conf).
type changeClass struct {
	name  string
	path  string // the file changed; "" for the SSH key and the OS image
	data  string
	key   string
	image string
	// What the daemon does.
	daemonDrain, daemonReboot bool
}

const userCABundle = "/etc/pki/ca-trust/source/anchors/openshift-config-user-ca-bundle.crt"

// availability sums, per node, the time the node controller counts it
// unavailable (mco.Unavailable: from the grant until Done on the config)
// and the time it is unschedulable (cordoned: what its pods feel).
type availability struct {
	mu                         sync.Mutex
	unavailable, unschedulable map[string]time.Duration
	since                      map[string][2]time.Time
}

func watchAvailability(tb testing.TB, p *agentPool) *availability {
	tb.Helper()
	a := &availability{unavailable: map[string]time.Duration{}, unschedulable: map[string]time.Duration{}, since: map[string][2]time.Time{}}
	watchNodes(tb, p, "", func(n *corev1.Node) {
		if p.member(n.Name) {
			a.observe(n, time.Now())
		}
	})
	return a
}

func (a *availability) observe(n *corev1.Node, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.since[n.Name]
	for i, down := range []bool{mco.Unavailable(n), n.Spec.Unschedulable} {
		sum := []map[string]time.Duration{a.unavailable, a.unschedulable}[i]
		switch {
		case down && s[i].IsZero():
			s[i] = now
		case !down && !s[i].IsZero():
			sum[n.Name] += now.Sub(s[i])
			s[i] = time.Time{}
		}
	}
	a.since[n.Name] = s
}

// take returns the mean seconds per node of both sums and starts new ones.
func (a *availability) take(nodes []string) (unavailable, unschedulable float64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, n := range nodes {
		unavailable += a.unavailable[n].Seconds()
		unschedulable += a.unschedulable[n].Seconds()
	}
	clear(a.unavailable)
	clear(a.unschedulable)
	k := float64(len(nodes))
	return unavailable / k, unschedulable / k
}

// BenchmarkChangeClasses rolls one change of each class out to three nodes
// under the real node and drain controllers (maxUnavailable 1, the
// controller's 5 s update delay) with the default node disruption
// policies, and reports for each: whether nodeward drained and rebooted
// the nodes, beside what the machine-config-daemon does; the mean time per
// node the controller counted the node unavailable and the node was
// unschedulable; and the makespan (the pool's config set until the pool
// is Updated on it).
//
//	NODEWARD_TESTBIN_DIR=... go test ./test/mco -run '^$' -bench ChangeClasses -benchtime 1x -timeout 30m -v
func BenchmarkChangeClasses(b *testing.B) {
	classes := []changeClass{
		{name: "pull-secret", path: pullSecretFile, data: `{"auths":{"quay.io":{"auth":"dHdvOnR3bw=="}}}`},
		{name: "ssh-key", key: otherKey},
		{name: "safe-mirror", path: registriesFile, data: registries("mirror.example.com/ocp-release@digest", "mirror2.example.com/ocp-release@digest")},
		{name: "unsafe-mirror", path: registriesFile, data: registries("mirror.example.com/ocp-release@digest", "mirror2.example.com/ocp-release@digest", "tags.example.com/ocp-release"), daemonDrain: true},
		{name: "policy.json", path: policyFile, data: `{"default":[{"type":"reject"}]}`},
		{name: "ca-bundle", path: userCABundle, data: "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"},
		{name: "os-image", image: "quay.io/fedora/fedora-coreos:42", daemonDrain: true, daemonReboot: true},
	}
	for range b.N {
		benchChangeClasses(b, classes)
	}
}

func benchChangeClasses(b *testing.B, classes []changeClass) {
	files := map[string]string{
		pullSecretFile: `{"auths":{"quay.io":{"auth":"b25lOm9uZQ=="}}}`,
		registriesFile: registries("mirror.example.com/ocp-release@digest"),
		policyFile:     `{"default":[{"type":"insecureAcceptAnything"}]}`,
		userCABundle:   "",
	}
	key, image := testKey, ""
	var configs []mco.MachineConfig
	for _, c := range classes {
		if c.path != "" {
			files = maps.Clone(files)
			files[c.path] = c.data
		}
		if c.key != "" {
			key = c.key
		}
		if c.image != "" {
			image = c.image
		}
		mc := hostConfig(files, key)
		if image != "" {
			mc.OSImageURL = image
		}
		configs = append(configs, mc)
	}
	base := hostConfig(map[string]string{
		pullSecretFile: `{"auths":{"quay.io":{"auth":"b25lOm9uZQ=="}}}`,
		registriesFile: registries("mirror.example.com/ocp-release@digest"),
		policyFile:     `{"default":[{"type":"insecureAcceptAnything"}]}`,
		userCABundle:   "",
	}, testKey)
	b.StopTimer()
	p := newAgentPool(b, fmt.Sprintf("bench%d", time.Now().UnixNano()%100000), 3, base, configs[0])
	ctx := context.Background()
	names := []string{p.config2}
	for i, mc := range configs[1:] {
		mc.Name = fmt.Sprintf("%s-%d", p.config2, i+3)
		p.c.CreateMachineConfig(ctx, mc)
		names = append(names, mc.Name)
	}
	p.startAgents(b)
	seen := watchDisruptions(b, p)
	avail := watchAvailability(b, p)
	p.start(b, mco.Default)
	p.c.WaitPool(p.pool.Name, time.Minute, "Updated on "+p.config1, func(s mco.PoolStatus) bool {
		return s.IsTrue("Updated") && s.UpdatedMachineCount == 3 && s.Configuration == p.config1
	})
	b.Logf("%-14s %-12s %-12s %-9s %-9s %s", "class", "drain n/mcd", "reboot n/mcd", "unavail/n", "cordon/n", "makespan")
	for i, c := range classes {
		seen.reset()
		avail.take(p.nodes)
		boots := map[string]int{}
		for _, n := range p.nodes {
			_, boots[n] = p.booted(b, n)
		}
		began := time.Now()
		if err := p.c.SetPoolConfig(ctx, p.pool.Name, names[i]); err != nil {
			b.Fatal(err)
		}
		p.c.WaitPool(p.pool.Name, 5*time.Minute, c.name+": Updated on "+names[i], func(s mco.PoolStatus) bool {
			return s.IsTrue("Updated") && s.UpdatedMachineCount == 3 && s.DegradedMachineCount == 0 && s.Configuration == names[i]
		})
		makespan := time.Since(began).Seconds()
		unavailable, unschedulable := avail.take(p.nodes)
		drained, rebooted := 0, 0
		for _, n := range p.nodes {
			if cordoned, _ := seen.of(n); cordoned {
				drained++
			}
			if _, now := p.booted(b, n); now > boots[n] {
				rebooted++
			}
		}
		if (drained > 0 && !c.daemonDrain) || (rebooted > 0 && !c.daemonReboot) {
			b.Errorf("%s: %d nodes drained and %d rebooted; the daemon drains: %v, reboots: %v", c.name, drained, rebooted, c.daemonDrain, c.daemonReboot)
		}
		b.Logf("%-14s %d/%-10v %d/%-10v %-9.1f %-9.1f %.1f s", c.name, drained, c.daemonDrain, rebooted, c.daemonReboot, unavailable, unschedulable, makespan)
		b.ReportMetric(makespan, c.name+"-makespan-s")
		b.ReportMetric(unavailable, c.name+"-unavailable-s/node")
		b.ReportMetric(unschedulable, c.name+"-cordoned-s/node")
	}
}
