package hostmode_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
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
	"github.com/nodeward/nodeward/test/hostmode"
	"github.com/nodeward/nodeward/test/mco"
	"github.com/nodeward/nodeward/test/node"
	"github.com/nodeward/nodeward/test/testenv"
)

// crioDropIn is the CRI-O drop-in the test's MachineConfigs write, and the
// file the user's node disruption policy names.
const crioDropIn = hostmode.CRIODropInDir + "/99-nodeward-test.conf"

// The pause images of the two configs: pause_image is one of the options
// CRI-O's SIGHUP reloads (pkg/config/reload.go, ReloadPauseImage).
const (
	pauseFirst  = "registry.k8s.io/pause:3.9"
	pauseSecond = "registry.k8s.io/pause:3.10"
)

// core's SSH keys in the two configs, and where they go on RHCOS (home
// /var/home/core). A key change needs nothing by the default policies;
// it checks that the agent reaches /var/home under its unit.
const (
	keyFirst     = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFq0Jc0Zm2n0YkJ8yJx7b0kqv3iYhB9pV6m2r1W4sQe8 nodeward-first"
	keySecond    = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIG8Jc0Zm2n0YkJ8yJx7b0kqv3iYhB9pV6m2r1W4sQe8 nodeward-second"
	coreKeysPath = "/var/home/core/.ssh/authorized_keys.d/ignition"
)

// crioConfig is a rendered config on the rpm-ostree double's booted image
// with one file, CRI-O's drop-in setting pause, and core's SSH key.
func crioConfig(name, pause, key string) mco.MachineConfig {
	data := fmt.Sprintf("[crio.image]\npause_image = %q\n", pause)
	ign := map[string]any{
		"ignition": map[string]any{"version": "3.4.0"},
		"storage": map[string]any{"files": []any{map[string]any{"path": crioDropIn, "mode": 0o644,
			"contents": map[string]any{"source": "data:," + url.PathEscape(data)}}}},
		"passwd": map[string]any{"users": []any{map[string]any{"name": "core", "sshAuthorizedKeys": []any{key}}}},
	}
	return mco.MachineConfig{Name: name, OSImageURL: "quay.io/fedora/fedora-coreos:41", Ignition: ign}
}

// TestMCOReloadOfCRIOReloadsTheRealCRIO: in MCO mode (--protocol=mco,
// the project's unit under systemd in the container), the agent applies a
// MachineConfig change under the real MCO node and drain controllers
// whose node disruption policy (the user's, for CRI-O's drop-in) is a
// Reload of crio.service; the real CRI-O, run by its own unit, reloads:
// its log says so with the new pause image, its /config endpoint serves
// it, its process is the same. No cordon, no drain request, no reboot.
// The change also replaces core's SSH key, which needs no action: the
// agent writes it under /var/home with the unit's MCO-mode drop-in.
func TestMCOReloadOfCRIOReloadsTheRealCRIO(t *testing.T) {
	requireHost(t)
	dir := mco.RequireDir(t)
	crio := crioBinaries(t)
	cp := env.ControlPlane(t)
	ctx := context.Background()
	c := mco.NewClient(t, cp.Config(), dir)
	if err := c.Install(ctx, mco.InstallOptions{}); err != nil {
		t.Fatal(err)
	}
	first, second := crioConfig("rendered-crio-1", pauseFirst, keyFirst), crioConfig("rendered-crio-2", pauseSecond, keySecond)
	c.CreateMachineConfig(ctx, first)
	c.CreateMachineConfig(ctx, second)
	pool := mco.Pool{Name: "crio", Config: first.Name}
	c.CreatePool(ctx, pool)
	reloadCRIOFor(t, c, crioDropIn)
	installMCOClusterSide(t, cp)
	h := newHost(t, hostOptions{prefix: "crio", args: []string{"--protocol=mco"},
		// MCO mode's drop-in of manifests/host/README.md: the rendered
		// config's files are under /etc, which the unit's
		// ProtectSystem=full makes read-only (ReadWritePaths=/etc does
		// not undo it: tried, read-only file system), and core's keys
		// under /var/home, which ProtectHome=yes hides when /home links
		// to it, as on RHCOS (tried: the drift monitor found no keys).
		directives: []string{"ProtectSystem=yes", "ProtectHome=no"},
		createNode: func(cp *cluster.ControlPlane) string {
			return c.CreateNodes(cp, cluster.NodeSpec{Prefix: "crio", Count: 1}, pool)[0]
		},
		prepare: func(root string) {
			crio.Root = root
			if err := crio.Apply(); err != nil {
				t.Fatal(err)
			}
			if err := coreOSHome(root); err != nil {
				t.Fatal(err)
			}
			provision(t, root, first)
		}})
	t.Cleanup(func() {
		if t.Failed() {
			h.dumpUnit("crio.service")
			h.dumpUnit("nodeward.service")
		}
	})
	h.waitActive(time.Minute)
	c.WaitNode(h.name, time.Minute, "the agent reports Done on "+first.Name, func(n *corev1.Node) bool {
		return n.Annotations[mco.AnnotationState] == mco.StateDone
	})
	before := h.crioRunning(pauseFirst)
	// The node controller's 5 s delay before it acts on a pool change
	// shortened: the test is about what the node does.
	mco.StartController(t, dir, cp.KubeconfigPath(), mco.ControllerOptions{Args: []string{"--update-delay=1s"}})
	c.WaitPool(pool.Name, time.Minute, "Updated on "+first.Name, func(s mco.PoolStatus) bool {
		return s.IsTrue("Updated") && s.UpdatedMachineCount == 1 && s.Configuration == first.Name
	})
	seen := watchDisruption(t, cp, h.name, second.Name)
	bootID, boots := h.bootID(), h.double.State(t).Boots
	began := time.Now()
	if err := c.SetPoolConfig(ctx, pool.Name, second.Name); err != nil {
		t.Fatal(err)
	}
	c.WaitPool(pool.Name, 2*time.Minute, "Updated on "+second.Name, func(s mco.PoolStatus) bool {
		return s.IsTrue("Updated") && s.UpdatedMachineCount == 1 && s.DegradedMachineCount == 0 && s.Configuration == second.Name
	})
	seen.logTimes(t, began)
	after := h.crioRunning(pauseSecond)
	h.assertReloaded(before, after)
	h.assertNotDisrupted(seen, second.Name, bootID, boots)
	if data, err := os.ReadFile(filepath.Join(h.root, coreKeysPath)); err != nil || string(data) != keySecond+"\n" {
		t.Errorf("core's keys: %q, %v; want the second config's", data, err)
	}
}

// coreOSHome gives root a core user laid out as on RHCOS and Fedora
// CoreOS: its home /var/home/core, and /home a symlink to var/home.
func coreOSHome(root string) error {
	for file, line := range map[string]string{
		"etc/passwd": "core:x:1000:1000:CoreOS Admin:/var/home/core:/bin/bash\n",
		"etc/group":  "core:x:1000:\n",
	} {
		f, err := os.OpenFile(filepath.Join(root, file), os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		_, err = f.WriteString(line)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	if err := os.Remove(filepath.Join(root, "home")); err != nil {
		return fmt.Errorf("replace /home with a symlink: %w", err)
	}
	if err := os.Symlink("var/home", filepath.Join(root, "home")); err != nil {
		return err
	}
	home := filepath.Join(root, "var/home/core")
	if err := os.MkdirAll(home, 0o700); err != nil {
		return err
	}
	return os.Chown(home, 1000, 1000)
}

// crioBinaries finds what CRI-O runs: `make testbin`'s crio and pinns,
// the host's conmon and runc (Debian's, as test/node's CRI-O node).
func crioBinaries(t *testing.T) hostmode.CRIOInstall {
	t.Helper()
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	b, err := node.FindCRIO(root)
	testenv.Require(t, err == nil, fmt.Sprintf("no CRI-O: %v", err))
	in := hostmode.CRIOInstall{Crio: b.Crio, Pinns: b.Pinns, Conmon: "/usr/bin/conmon"}
	_, err = os.Stat(in.Conmon)
	testenv.Require(t, err == nil, "conmon: not installed (apt-get install conmon)")
	in.Runc, err = exec.LookPath("runc")
	testenv.Require(t, err == nil, "runc: not on PATH (apt-get install runc)")
	return in
}

// reloadCRIOFor sets the user's node disruption policy "a change to path
// reloads crio.service" and publishes it as the operator would; both are
// undone when the test ends.
func reloadCRIOFor(t *testing.T, c *mco.Client, path string) {
	t.Helper()
	ctx := context.Background()
	policy := map[string]any{"files": []any{map[string]any{"path": path, "actions": []any{
		map[string]any{"type": "Reload", "reload": map[string]any{"serviceName": "crio.service"}}}}}}
	t.Cleanup(func() {
		if err := c.SetUserDisruptionPolicies(context.Background(), nil); err != nil {
			t.Errorf("remove the user policies: %v", err)
		}
		if err := c.PublishDisruptionPolicies(context.Background()); err != nil {
			t.Errorf("publish the policies: %v", err)
		}
	})
	if err := c.SetUserDisruptionPolicies(ctx, policy); err != nil {
		t.Fatal(err)
	}
	if err := c.PublishDisruptionPolicies(ctx); err != nil {
		t.Fatal(err)
	}
}

// provision writes config's files into root as Ignition does when the
// machine is provisioned with it: the agent's drift monitor checks them
// from its start.
func provision(t *testing.T, root string, config mco.MachineConfig) {
	t.Helper()
	data, err := json.Marshal(config.Object().Object)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := machineconfig.Parse(data)
	if err != nil {
		t.Fatalf("parse %s: %v", config.Name, err)
	}
	w := machineconfig.Writer{Root: root, StateDir: t.TempDir()}
	if err := w.Apply(context.Background(), nil, cfg); err != nil {
		t.Fatalf("provision %s with %s: %v", root, config.Name, err)
	}
}

// crioState is CRI-O's unit and what it serves at one moment.
type crioState struct {
	mainPID, restarts string
	// config is `crio status config`: the configuration the running
	// CRI-O holds, from its /config endpoint.
	config string
	// cursor is the journal's position then.
	cursor string
}

// crioRunning waits until crio.service is active and CRI-O's /config
// endpoint serves pause as its pause image, and returns that state.
func (h *host) crioRunning(pause string) crioState {
	h.t.Helper()
	var s crioState
	want := fmt.Sprintf("pause_image = %q", pause)
	h.waitFor(time.Minute, "crio.service active, serving "+want, func() (bool, error) {
		ctx, cancel := h.ctx()
		defer cancel()
		props, err := h.c.Show(ctx, "crio.service", "ActiveState", "MainPID", "NRestarts")
		if err != nil {
			return false, err
		}
		if props["ActiveState"] != "active" {
			return false, fmt.Errorf("crio.service %v", props)
		}
		s.mainPID, s.restarts = props["MainPID"], props["NRestarts"]
		if s.config, err = h.c.Exec(ctx, hostmode.CRIOBinaryPath, "status", "--socket", hostmode.CRIOSocket, "config"); err != nil {
			return false, err
		}
		return strings.Contains(s.config, want), fmt.Errorf("crio status config has no %s", want)
	})
	out := h.exec("journalctl", "-n", "0", "--show-cursor", "-q")
	_, s.cursor, _ = strings.Cut(out, "-- cursor: ")
	s.cursor = strings.TrimSpace(s.cursor)
	return s
}

// assertReloaded checks that CRI-O reloaded between before and after, as
// its SIGHUP handler logs it (server.startReloadWatcher and
// pkg/config/reload.go), in the same process.
func (h *host) assertReloaded(before, after crioState) {
	h.t.Helper()
	if after.mainPID != before.mainPID || after.restarts != before.restarts {
		h.t.Errorf("crio.service restarted: MainPID %s → %s, NRestarts %s → %s; want a reload", before.mainPID, after.mainPID, before.restarts, after.restarts)
	}
	ctx, cancel := h.ctx()
	defer cancel()
	log := h.c.Journal(ctx, "-u", "crio.service", "--after-cursor", before.cursor, "-o", "cat")
	// systemd's reload job (the unit's ExecReload), then CRI-O's handler.
	for _, line := range []string{"Reloaded crio.service", "Reloading configuration",
		fmt.Sprintf(`Set config pause_image to \"%s\"`, pauseSecond), "Configuration reload completed"} {
		if !strings.Contains(log, line) {
			h.t.Errorf("CRI-O's log since the change has no %q:\n%s", line, tailString(log, 3000))
		}
	}
	if n := strings.Count(log, "Reloading configuration"); n != 1 {
		h.t.Errorf("CRI-O reloaded %d times; want once", n)
	}
	h.t.Logf("CRI-O reloaded in process %s; its journal: %s", after.mainPID, strings.Join(crioReloadLines(log), " | "))
}

// crioReloadLines are the lines of CRI-O's log about the reload.
func crioReloadLines(log string) []string {
	var out []string
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, "Current CRI-O configuration") {
			continue // the whole configuration, after every reload
		}
		if strings.Contains(line, "eload") || strings.Contains(line, "Set config") {
			out = append(out, strings.TrimSpace(line))
		}
	}
	return out
}

// disruption is what a watch of the node saw: a cordon however brief,
// and every drain request (desiredDrain) the agent made.
type disruption struct {
	mu       sync.Mutex
	cordoned bool
	requests []string
	// targeted and done are when the node's desiredConfig, then its
	// currentConfig with state Done, were first seen on config.
	config         string
	targeted, done time.Time
}

func watchDisruption(t *testing.T, cp *cluster.ControlPlane, name, config string) *disruption {
	t.Helper()
	d := &disruption{config: config}
	opts := metav1.ListOptions{FieldSelector: "metadata.name=" + name}
	cluster.WatchNodes(t, cp.Client(), opts, func(_ context.Context, _ watch.EventType, n *corev1.Node) {
		d.mu.Lock()
		defer d.mu.Unlock()
		d.cordoned = d.cordoned || n.Spec.Unschedulable
		if r := n.Annotations[mco.AnnotationDesiredDrain]; r != "" && !slices.Contains(d.requests, r) {
			d.requests = append(d.requests, r)
		}
		a := n.Annotations
		if d.targeted.IsZero() && a[mco.AnnotationDesiredConfig] == d.config {
			d.targeted = time.Now()
		}
		if d.done.IsZero() && a[mco.AnnotationCurrentConfig] == d.config && a[mco.AnnotationState] == mco.StateDone {
			d.done = time.Now()
		}
	})
	return d
}

// logTimes logs how long the controller took to target the node after
// the pool changed at began, and the agent to report Done after that.
func (d *disruption) logTimes(t *testing.T, began time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	t.Logf("%s: targeted %s after the pool changed, Done %s later (%s in all)", d.config,
		d.targeted.Sub(began).Round(10*time.Millisecond), d.done.Sub(d.targeted).Round(10*time.Millisecond),
		d.done.Sub(began).Round(10*time.Millisecond))
}

// assertNotDisrupted checks what a Reload action costs the node, as the
// daemon applies it: no cordon, no drain (only the uncordon handshake for
// config), no reboot (the same boot ID, one container boot, no boot of
// the rpm-ostree double).
func (h *host) assertNotDisrupted(d *disruption, config, bootID string, doubleBoots int) {
	h.t.Helper()
	d.mu.Lock()
	cordoned, requests := d.cordoned, slices.Clone(d.requests)
	d.mu.Unlock()
	if cordoned || slices.Contains(requests, "drain-"+config) {
		h.t.Errorf("cordoned %v, drain requests %v; want neither a cordon nor a drain", cordoned, requests)
	}
	if !slices.Contains(requests, "uncordon-"+config) {
		h.t.Errorf("drain requests %v; want the uncordon handshake for %s", requests, config)
	}
	if got := h.bootID(); got != bootID || h.c.Boots() != 1 {
		h.t.Errorf("boot ID %s → %s after %d container boots; want no reboot", bootID, got, h.c.Boots())
	}
	s := h.double.State(h.t)
	if s.Boots != doubleBoots || s.Staged != nil {
		h.t.Errorf("the rpm-ostree double booted %d times (%d before), staged %v; want neither", s.Boots, doubleBoots, s.Staged != nil)
	}
}

// dumpUnit logs a unit's definition as systemd reads it and its journal.
func (h *host) dumpUnit(unit string) {
	if !h.c.Running() {
		return
	}
	ctx, cancel := h.ctx()
	defer cancel()
	def, _ := h.c.Exec(ctx, "systemctl", "cat", unit)
	h.t.Logf("%s:\n%s\njournal (tail):\n%s", unit, def, tailString(h.c.Journal(ctx, "-u", unit, "-o", "short-precise"), 6000))
}
