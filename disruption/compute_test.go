package disruption

import (
	"reflect"
	"strings"
	"testing"

	"github.com/nodeward/nodeward/machineconfig"
)

const digestMirrorAdded = registriesBase + `
  [[registry.mirror]]
    location = "mirror2.internal:5000/openshift"
    pull-from-mirror = "digest-only"
`

const tagMirrorAdded = registriesBase + `
  [[registry.mirror]]
    location = "mirror2.internal:5000/openshift"
`

const mirrorRemoved = `unqualified-search-registries = ["registry.access.example"]

[[registry]]
  location = "quay.example/openshift"
`

func TestCompute(t *testing.T) {
	bool_ := func(b bool) *bool { return &b }
	reboot := []Action{{Type: Reboot}}
	none := []Action{{Type: None}}
	reloadCrio := []Action{{Type: Reload, Unit: crio}}
	custom := Policies{
		Files: []FilePolicy{
			{Path: "/etc/foo", Actions: []Action{{Type: Reload, Unit: "a.service"}}},
			{Path: "/etc/foo/bar", Actions: []Action{{Type: Restart, Unit: "b.service"}}},
			{Path: "/etc/drain-me", Actions: []Action{{Type: Drain}}},
			{Path: "/etc/reboot-me", Actions: reboot},
			{Path: "/etc/none", Actions: none},
			{Path: "/", Actions: none},
		},
		SSHKey: []Action{{Type: DaemonReload}},
	}
	tests := []struct {
		name     string
		new      *machineconfig.Config
		policies Policies
		force    bool
		actions  []Action
		drain    bool
		reason   string // a substring of one of the plan's reasons
	}{
		{name: "nothing changed", new: edit(), actions: none, reason: "no change in files, units or SSH keys"},
		{name: "pull secret", new: edit(setFile("/var/lib/kubelet/config.json", `{"auths":{"x":{}}}`)), actions: none, reason: "policy /var/lib/kubelet/config.json says None"},
		{name: "SSH key", new: edit(func(c *machineconfig.Config) { c.SSHKeys = append(c.SSHKeys, "ssh-rsa BBBB") }), actions: none, reason: "SSH keys changed"},
		{name: "policy.json", new: edit(setFile("/etc/containers/policy.json", `{"default":[{"type":"reject"}]}`)), actions: reloadCrio},
		{name: "sigstore dir entry", new: edit(setFile("/etc/containers/registries.d/quay.yaml", "docker: {}\n")), actions: reloadCrio, reason: "policy /etc/containers/registries.d says"},
		{name: "policy.json removed", new: edit(removeFile("/etc/containers/policy.json")), actions: reloadCrio},
		{name: "digest-only mirror added", new: edit(setFile(registriesConf, digestMirrorAdded)), actions: []Action{{Type: Special}}, drain: false, reason: "no drain"},
		{name: "mirror removed", new: edit(setFile(registriesConf, mirrorRemoved)), actions: []Action{{Type: Special}}, drain: true, reason: "mirror mirror.internal:5000/openshift has been removed"},
		{name: "tag mirror added", new: edit(setFile(registriesConf, tagMirrorAdded)), actions: []Action{{Type: Special}}, drain: true, reason: "mirror2.internal:5000/openshift has been added"},
		{name: "user CA bundle", new: edit(setFile("/etc/pki/ca-trust/source/anchors/openshift-config-user-ca-bundle.crt", "PEM")),
			actions: []Action{{Type: Restart, Unit: caTrust}, {Type: Restart, Unit: crio}}},
		{name: "file without policy", new: edit(setFile("/etc/kubernetes/kubelet.conf", "changed")), actions: reboot, drain: true, reason: "file /etc/kubernetes/kubelet.conf changed and no file policy covers it"},
		{name: "file without policy beside a None file", new: edit(setFile("/etc/motd", "hi"), setFile("/var/lib/kubelet/config.json", "{}")), actions: reboot, drain: true, reason: "/etc/motd"},
		{name: "unit without policy", new: edit(func(c *machineconfig.Config) { c.Units[0].Enabled = bool_(true) }), actions: reboot, drain: true, reason: "unit kubelet.service changed and has no unit policy"},
		{name: "unit added with a policy", new: edit(func(c *machineconfig.Config) {
			c.Units = append(c.Units, machineconfig.Unit{Name: iriRegistry, Contents: "[Service]\n"})
		}), actions: []Action{{Type: DaemonReload}, {Type: Restart, Unit: iriRegistry}}},
		{name: "longest prefix: deeper policy", new: edit(setFile("/etc/foo/bar/baz", "x")), policies: custom, actions: []Action{{Type: Restart, Unit: "b.service"}}, reason: "policy /etc/foo/bar says"},
		{name: "longest prefix: shallower policy", new: edit(setFile("/etc/foo/qux", "x")), policies: custom, actions: []Action{{Type: Reload, Unit: "a.service"}}},
		{name: "a sibling with a common prefix is not below", new: edit(setFile("/etc/foobar", "x")), policies: custom, actions: reboot, drain: true},
		{name: "a policy for / matches nothing below it, as in the MCO", new: edit(setFile("/etc/elsewhere", "x")), policies: custom, actions: reboot, drain: true},
		{name: "reboot dominates", new: edit(setFile("/etc/foo/x", "x"), setFile("/etc/reboot-me", "x")), policies: custom, actions: reboot, drain: true, reason: "overrides every other action"},
		{name: "None stripped", new: edit(setFile("/etc/none", "x"), setFile("/etc/foo/x", "x")), policies: custom, actions: []Action{{Type: Reload, Unit: "a.service"}}},
		{name: "None stripped, the SSH policy kept", new: edit(setFile("/etc/none", "x"), func(c *machineconfig.Config) { c.SSHKeys = nil }), policies: custom, actions: []Action{{Type: DaemonReload}}},
		{name: "Drain action drains without reboot", new: edit(setFile("/etc/drain-me", "x")), policies: custom, actions: []Action{{Type: Drain}}, drain: true},
		{name: "repeated actions are kept", new: edit(setFile("/etc/foo/1", "x"), setFile("/etc/foo/2", "x")), policies: custom, actions: []Action{{Type: Reload, Unit: "a.service"}, {Type: Reload, Unit: "a.service"}}},
		{name: "force file", new: edit(func(c *machineconfig.Config) { c.SSHKeys = nil }), force: true, actions: reboot, drain: true, reason: "force file"},
		{name: "force file without a change", new: edit(), force: true, actions: reboot, drain: true},
		{name: "kernel args", new: edit(func(c *machineconfig.Config) { c.KernelArgs = append(c.KernelArgs, "nosmt") }), actions: reboot, drain: true, reason: "kernel arguments changed"},
		{name: "OS image", new: edit(func(c *machineconfig.Config) { c.OSImageURL = "quay.example/rhcos@sha256:bbbb" }), actions: reboot, drain: true, reason: "OS image changed"},
		{name: "FIPS", new: edit(func(c *machineconfig.Config) { c.FIPS = true }), actions: reboot, drain: true},
		{name: "extensions", new: edit(func(c *machineconfig.Config) { c.Extensions = []string{"usbguard"} }), actions: reboot, drain: true},
		{name: "kernel type", new: edit(func(c *machineconfig.Config) { c.KernelType = "realtime" }), actions: reboot, drain: true},
		{name: "kernel type default spelled out", new: edit(func(c *machineconfig.Config) { c.KernelType = "default" }), actions: none},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.policies
			if p.Files == nil {
				p = DefaultPolicies()
			}
			plan, err := Compute(base(), tc.new, p, tc.force)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(plan.Actions, tc.actions) {
				t.Errorf("actions %v, want %v; reasons %q", plan.Actions, tc.actions, plan.Reasons)
			}
			if plan.Drain != tc.drain {
				t.Errorf("drain %v, want %v; reasons %q", plan.Drain, tc.drain, plan.Reasons)
			}
			if want := has(tc.actions, Reboot); plan.Reboot != want {
				t.Errorf("reboot %v, want %v", plan.Reboot, want)
			}
			if tc.reason != "" && !strings.Contains(strings.Join(plan.Reasons, "\n"), tc.reason) {
				t.Errorf("reasons %q, want one containing %q", plan.Reasons, tc.reason)
			}
		})
	}
}

// With no policies at all (a MachineConfiguration without status) every
// file change reboots, but an SSH key change has no actions to take.
func TestComputeWithoutPolicies(t *testing.T) {
	plan, err := Compute(base(), edit(setFile("/var/lib/kubelet/config.json", "{}")), Policies{}, false)
	if err != nil || !plan.Reboot || !plan.Drain {
		t.Fatalf("file change without policies: %+v, %v; want a drained reboot", plan, err)
	}
	plan, err = Compute(base(), edit(func(c *machineconfig.Config) { c.SSHKeys = nil }), Policies{}, false)
	if err != nil || len(plan.Actions) != 0 || plan.Drain {
		t.Fatalf("SSH change without policies: %+v, %v; want no action and no drain", plan, err)
	}
}

func TestComputeBadRegistriesConf(t *testing.T) {
	_, err := Compute(base(), edit(setFile(registriesConf, "[[registry]\n")), DefaultPolicies(), false)
	if err == nil || !strings.Contains(err.Error(), registriesConf) {
		t.Fatalf("error %v, want one naming %s", err, registriesConf)
	}
}

func TestComputeNilConfig(t *testing.T) {
	if _, err := Compute(nil, base(), DefaultPolicies(), false); err == nil {
		t.Fatal("no error for a nil config")
	}
}

func TestDiff(t *testing.T) {
	new := edit(
		setFile("/etc/new", "x"),
		removeFile("/etc/containers/policy.json"),
		func(c *machineconfig.Config) {
			c.Files[0].Mode = 0o600 // kubelet.conf: same contents, other mode
			c.Units = []machineconfig.Unit{{Name: "new.service"}}
			c.KernelArgs = nil
		},
	)
	got := Diff(base(), new)
	want := Change{
		KernelArgs: true,
		Files:      []string{"/etc/containers/policy.json", "/etc/kubernetes/kubelet.conf", "/etc/new"},
		Units:      []string{"kubelet.service", "new.service"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Diff = %+v, want %+v", got, want)
	}
	if got := Diff(&machineconfig.Config{KernelArgs: []string{}}, &machineconfig.Config{}); !got.Empty() {
		t.Fatalf("empty and nil kernel args differ: %+v", got)
	}
	if got := Diff(base(), base()); !got.Empty() {
		t.Fatalf("a config differs from itself: %+v", got)
	}
}
