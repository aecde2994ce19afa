package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestReleaseBuildLeavesOutHeavyPackages: built as `make build` builds it
// (tag grpcnotrace), the binary must not link
//   - golang.org/x/net/trace, html/template or plugin: they make the linker
//     keep every exported method of every type that reaches an interface
//     (46 MB → 75 MB, and plugin exports every symbol besides);
//   - client-go's scheme of every API group, the clientset or the typed
//     informers: their init registers 55 group versions (+14 MB of binary,
//     +7 MiB of agent RSS); package api/kube is the client to use.
//
// A new dependency that imports one of them again fails here.
func TestReleaseBuildLeavesOutHeavyPackages(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-tags", "grpcnotrace", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	forbidden := map[string]bool{
		"golang.org/x/net/trace": true, "html/template": true, "plugin": true,
		"k8s.io/client-go/kubernetes": true, "k8s.io/client-go/kubernetes/scheme": true,
		"k8s.io/client-go/informers": true, "k8s.io/client-go/tools/leaderelection": true,
		// Their package initializers fill every agent's heap at start
		// (docs/benchmarks.md, "Agent RSS without the packages that fill
		// the heap at start-up"): osupdate, conditions and api/kube
		// replace them.
		"github.com/distribution/reference": true, "github.com/containers/image/v5/docker/reference": true,
		"github.com/opencontainers/go-digest": true, "github.com/coreos/rpmostree-client-go/pkg/client": true,
		"k8s.io/cri-api/pkg/apis/runtime/v1": true, "k8s.io/client-go/tools/record": true,
		"k8s.io/client-go/gentype": true, "k8s.io/client-go/testing": true,
		"k8s.io/apimachinery/pkg/util/strategicpatch": true, "github.com/google/gnostic-models/openapiv2": true,
	}
	for _, pkg := range strings.Fields(string(out)) {
		if forbidden[pkg] {
			t.Errorf("cmd/nodeward links %s with -tags grpcnotrace; see BUILD_TAGS in the Makefile and the agent RSS notes in docs/benchmarks.md", pkg)
		}
	}
}

// TestPackagesImportOneWay keeps the layout the architecture
// (docs/architecture.md): cmd → daemon and coordinator → conditions, drain,
// osupdate, systemd → api. The coordinator links nothing of the agent and
// the agent nothing of the coordinator; the lower layers link neither.
func TestPackagesImportOneWay(t *testing.T) {
	const mod = "github.com/nodeward/nodeward/"
	agent := []string{"daemon", "daemon/health", "daemon/update", "daemon/mco", "conditions", "osupdate", "systemd"}
	rules := map[string][]string{
		"coordinator":   agent,
		"daemon":        {"coordinator", "cmd/nodeward"},
		"daemon/update": {"coordinator", "daemon", "daemon/health", "daemon/mco", "conditions", "systemd"},
		// The MCD's side of the MCO protocol builds on the update machine,
		// never the other way.
		"daemon/mco":    {"coordinator", "daemon", "daemon/health", "conditions", "systemd"},
		"daemon/health": {"coordinator", "daemon", "daemon/update", "drain", "osupdate", "systemd"},
		"conditions":    {"coordinator", "daemon", "drain", "osupdate", "systemd"},
		"drain":         {"coordinator", "daemon", "conditions", "osupdate", "systemd"},
		"osupdate":      {"coordinator", "daemon", "conditions", "drain", "systemd"},
		"systemd":       {"coordinator", "daemon", "conditions", "drain", "osupdate"},
		"api/v1alpha1":  {"api/kube", "coordinator", "daemon", "conditions", "drain", "osupdate", "systemd"},
		"api/kube":      {"api/v1alpha1", "coordinator", "daemon", "conditions", "drain", "osupdate", "systemd"},
		// A leaf shared by osupdate and systemd: it links nothing of nodeward.
		"hostexec": {"api/v1alpha1", "api/kube", "coordinator", "daemon", "conditions", "drain", "osupdate", "systemd"},
		// The guard of /metrics, shared by the agent and the coordinator: a
		// leaf too.
		"api/kube/metricsauth": {"api/v1alpha1", "api/kube", "hostexec", "coordinator", "daemon", "conditions", "drain", "osupdate", "systemd"},
		// Leaves: the rendered MachineConfig, the atomic file writer.
		"machineconfig": {"api/v1alpha1", "api/kube", "hostexec", "coordinator", "daemon", "conditions", "drain", "osupdate", "systemd"},
		"atomicfile":    {"api/v1alpha1", "api/kube", "hostexec", "machineconfig", "coordinator", "daemon", "conditions", "drain", "osupdate", "systemd"},
		// The agent's release of start-up memory: a leaf on the kernel.
		"footprint": {"api/v1alpha1", "api/kube", "hostexec", "machineconfig", "atomicfile", "coordinator", "daemon", "conditions", "drain", "osupdate", "systemd"},
		// The coordinator's Alertmanager silences: a leaf on the API types
		// only, with its own small HTTP client.
		"silence": {"api/kube", "hostexec", "machineconfig", "atomicfile", "gate", "coordinator", "daemon", "conditions", "drain", "osupdate", "systemd"},
		// The health gates, used by the coordinator: a leaf on the API
		// types and the Prometheus client.
		"gate": {"api/kube", "hostexec", "machineconfig", "atomicfile", "silence", "coordinator", "daemon", "conditions", "drain", "osupdate", "systemd"},
		// Test libraries. test/cluster (control plane, CRDs, the nodeward
		// build) is imported by the tests of daemon (from inside package
		// daemon), drain and api/kube: it must link neither the agent nor
		// the coordinator, or the agent's tests would link the
		// coordinator, and the internal tests of a package it linked would
		// not compile (an import cycle). The tests' in-process coordinator
		// lives above it, in test/coordinatortest, and links nothing of
		// the agent, as the coordinator itself.
		"test/cluster":         {"coordinator", "daemon", "conditions", "drain", "osupdate", "systemd", "test/coordinatortest"},
		"test/coordinatortest": agent,
	}
	for pkg, forbidden := range rules {
		out, err := exec.Command("go", "list", "-deps", mod+pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list %s: %v\n%s", pkg, err, out)
		}
		deps := map[string]bool{}
		for _, d := range strings.Fields(string(out)) {
			deps[d] = true
		}
		for _, f := range forbidden {
			if deps[mod+f] {
				t.Errorf("%s imports %s: imports flow cmd → daemon, coordinator → conditions, drain, osupdate, systemd → api", pkg, f)
			}
		}
	}
}
