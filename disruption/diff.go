package disruption

import (
	"reflect"
	"slices"

	"github.com/nodeward/nodeward/machineconfig"
)

// Change is what differs between two rendered configs, in the terms the
// daemon decides disruption by (its machineConfigDiff plus the changed file
// and unit lists).
type Change struct {
	// Fields that always take a reboot.
	OSImage    bool // spec.osImageURL
	KernelArgs bool // spec.kernelArguments (both empty counts as equal)
	FIPS       bool // spec.fips
	KernelType bool // spec.kernelType, "" and unknown values read as "default"
	Extensions bool // spec.extensions (both empty counts as equal)

	// Files are the paths of files added, changed (any field: contents,
	// mode, owner, overwrite) or removed, sorted.
	Files []string
	// Units are the names of units added, changed (contents, enablement,
	// mask, drop-ins) or removed, sorted.
	Units []string
	// SSHKeys says the core user's SSH keys changed.
	SSHKeys bool
}

// Diff compares old, the config the node runs, with new, the config it is
// to run. A nil config is read as an empty one.
func Diff(old, new *machineconfig.Config) Change {
	if old == nil {
		old = &machineconfig.Config{}
	}
	if new == nil {
		new = &machineconfig.Config{}
	}
	return Change{
		OSImage:    old.OSImageURL != new.OSImageURL,
		KernelArgs: !slices.Equal(old.KernelArgs, new.KernelArgs),
		FIPS:       old.FIPS != new.FIPS,
		KernelType: kernelType(old.KernelType) != kernelType(new.KernelType),
		Extensions: !slices.Equal(old.Extensions, new.Extensions),
		Files:      changedKeys(old.Files, new.Files, func(f machineconfig.File) string { return f.Path }),
		Units:      changedKeys(old.Units, new.Units, func(u machineconfig.Unit) string { return u.Name }),
		SSHKeys:    !slices.Equal(old.SSHKeys, new.SSHKeys),
	}
}

// kernelType canonicalizes as the MCO's CanonicalizeKernelType: realtime
// and 64k-pages are themselves, anything else is default.
func kernelType(t string) string {
	if t == "realtime" || t == "64k-pages" {
		return t
	}
	return "default"
}

// Rebooting names the changed fields that take a reboot whatever the
// policies, in the daemon's order of checking them.
func (c Change) Rebooting() []string {
	var out []string
	for _, f := range []struct {
		changed bool
		name    string
	}{
		{c.OSImage, "OS image"}, {c.KernelArgs, "kernel arguments"}, {c.FIPS, "FIPS"},
		{c.KernelType, "kernel type"}, {c.Extensions, "extensions"},
	} {
		if f.changed {
			out = append(out, f.name)
		}
	}
	return out
}

// Empty reports whether neither files, units nor SSH keys changed, nor any
// field that takes a reboot.
func (c Change) Empty() bool {
	return len(c.Rebooting()) == 0 && len(c.Files) == 0 && len(c.Units) == 0 && !c.SSHKeys
}

// changedKeys lists the keys present in only one list or whose entries
// differ, as the MCO's file and unit diffs: entries are keyed by key, the
// last of a key wins.
func changedKeys[T any](old, new []T, key func(T) string) []string {
	before := make(map[string]T, len(old))
	for _, e := range old {
		before[key(e)] = e
	}
	after := make(map[string]T, len(new))
	for _, e := range new {
		after[key(e)] = e
	}
	var out []string
	for k := range before {
		if _, ok := after[k]; !ok {
			out = append(out, k)
		}
	}
	for k, e := range after {
		if prev, ok := before[k]; !ok || !reflect.DeepEqual(prev, e) {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}
