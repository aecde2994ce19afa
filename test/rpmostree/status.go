package rpmostree

import (
	"encoding/json"
	"fmt"
	"strings"
)

// deploymentJSON renders one deployment in the schema of real
// `rpm-ostree status --json` (see the rpmostree-client-go fixtures).
func (s *State) deploymentJSON(d Deployment, booted, staged bool) map[string]any {
	m := map[string]any{
		"id":                                    fmt.Sprintf("%s-%s.%d", s.OSName, d.Checksum, d.Serial),
		"osname":                                s.OSName,
		"serial":                                d.Serial,
		"checksum":                              d.Checksum,
		"timestamp":                             1700000000,
		"booted":                                booted,
		"staged":                                staged,
		"pinned":                                false,
		"unlocked":                              "none",
		"regenerate-initramfs":                  false,
		"packages":                              []string{},
		"requested-packages":                    []string{},
		"requested-local-packages":              []string{},
		"requested-base-removals":               []string{},
		"requested-base-local-replacements":     []string{},
		"requested-local-fileoverride-packages": []string{},
		"base-local-replacements":               []string{},
		"base-removals":                         []string{},
		"base-remote-replacements":              map[string]any{},
		"requested-modules":                     []string{},
		"requested-modules-enabled":             []string{},
		"modules":                               []string{},
	}
	if d.ImageRef != "" {
		m["container-image-reference"] = d.ImageRef
		m["container-image-reference-digest"] = d.Digest
	} else {
		m["origin"] = "fedora:fedora/x86_64/coreos/stable"
		m["gpg-enabled"] = true
	}
	if d.Version != "" {
		m["version"] = d.Version
	}
	if staged && s.Locked {
		m["finalization-locked"] = true
	}
	return m
}

// StatusJSON renders `rpm-ostree status --json`.
func (s *State) StatusJSON(transaction []string) ([]byte, error) {
	var deps []map[string]any
	if s.Staged != nil {
		deps = append(deps, s.deploymentJSON(*s.Staged, false, true))
	}
	for i, d := range s.Deployments {
		deps = append(deps, s.deploymentJSON(d, i == s.Booted, false))
	}
	out := map[string]any{
		"deployments":   deps,
		"transaction":   nil,
		"cached-update": nil,
		"update-driver": map[string]any{"driver-name": "nodeward", "driver-sd-unit": "nodeward.service"},
	}
	if transaction != nil {
		out["transaction"] = transaction
	}
	return json.MarshalIndent(out, "", "    ")
}

// Cmdline is the booted kernel command line, /proc/cmdline, as GRUB
// passes the deployment's arguments (its BLS "options" line, which keeps
// them as rpm-ostree wrote them): GRUB's parser drops the double quotes
// and its loader command line quotes a whole argument that holds a space,
// so foo="a b" boots as "foo=a b" and cgroup_no_v1="all" as
// cgroup_no_v1=all (bootc-dev/bootc#1737).
func (s *State) Cmdline() string {
	d, err := s.BootedDeployment()
	if err != nil {
		return ""
	}
	args := []string{"BOOT_IMAGE=(hd0,gpt3)/ostree/vmlinuz", "root=UUID=00000000", "ostree=/ostree/boot.1/" + d.Checksum}
	for _, k := range d.Kargs {
		args = append(args, grubArg(k))
	}
	return strings.Join(args, " ") + "\n"
}

// grubArg is how GRUB passes one argument of a BLS options line.
func grubArg(karg string) string {
	a := strings.ReplaceAll(karg, `"`, "")
	if strings.ContainsAny(a, " \t") {
		return `"` + a + `"`
	}
	return a
}
