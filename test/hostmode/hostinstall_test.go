package hostmode_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/nodeward/nodeward/test/hostmode"
	"github.com/nodeward/nodeward/test/sim"
)

// install puts nodeward into the root as manifests/host/README.md says:
// the binary, the project's unit (enabled) with the test's drop-in, the
// config and the kubeconfig; and the rpm-ostree double as the OS.
func (h *host) install(o hostOptions) {
	t := h.t
	t.Helper()
	var err error
	if h.unit, err = os.ReadFile(filepath.Join(repoRoot, "systemd", "nodeward.service")); err != nil {
		t.Fatal(err)
	}
	example, err := os.ReadFile(filepath.Join(repoRoot, "manifests", "host", "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	h.metrics = "127.0.0.1:" + strconv.Itoa(freePort(t))
	config, err := hostmode.HostConfig(example, h.metrics)
	if err != nil {
		t.Fatal(err)
	}
	// The update machine re-checks every second instead of 5 s: the
	// scenarios wait less, and a wedged loop is noticed in 13 s.
	dropIn, err := hostmode.DropIn(h.unit, hostmode.DropInOptions{Watchdog: watchdogPeriod,
		Args: append([]string{"--update-poll-interval=1s"}, o.args...), Directives: o.directives})
	if err != nil {
		t.Fatal(err)
	}
	h.double, err = hostmode.Install{Root: h.root, NodeName: h.name, Nodeward: h.bin.nodeward, RpmOstree: h.bin.rpmOstree,
		Unit: h.unit, DropIn: dropIn, Config: config, Kubeconfig: h.kubeconfig(),
		Booted: sim.ProcBooted(), Images: sim.ProcImages(), Enable: true}.Apply()
	if err != nil {
		t.Fatal(err)
	}
	if o.tune != nil {
		h.double.Update(t, o.tune)
	}
}

// kubeconfig follows manifests/host/README.md with the control plane's
// kubectl: a token of the agent's ServiceAccount bound to this Node, in a
// kubeconfig of its own.
func (h *host) kubeconfig() []byte {
	h.t.Helper()
	kubectl := func(args ...string) string {
		h.t.Helper()
		out, err := exec.Command(h.cp.Binary("kubectl"), args...).CombinedOutput()
		if err != nil {
			h.t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
	admin := h.cp.Config()
	ca := filepath.Join(h.dir, "ca.crt")
	if err := os.WriteFile(ca, admin.CAData, 0o600); err != nil {
		h.t.Fatal(err)
	}
	token := kubectl("--kubeconfig", h.cp.KubeconfigPath(), "-n", "nodeward-system", "create", "token", "nodeward-agent",
		"--bound-object-kind", "Node", "--bound-object-name", h.name, "--duration", "720h")
	out := filepath.Join(h.dir, "nodeward.kubeconfig")
	kubectl("config", "set-cluster", "k", "--server", admin.Host, "--certificate-authority", ca, "--embed-certs", "--kubeconfig", out)
	kubectl("config", "set-credentials", "nodeward-agent", "--token", token, "--kubeconfig", out)
	kubectl("config", "set-context", "k", "--cluster", "k", "--user", "nodeward-agent", "--kubeconfig", out)
	kubectl("config", "use-context", "k", "--kubeconfig", out)
	data, err := os.ReadFile(out)
	if err != nil {
		h.t.Fatal(err)
	}
	return data
}
