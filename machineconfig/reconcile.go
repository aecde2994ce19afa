package machineconfig

import (
	"errors"
	"reflect"
	"slices"
)

// Diff is what changes from one Config to the next, in terms nodeward
// applies. An empty Diff means the host already runs the desired config.
type Diff struct {
	// OSImageChanged says spec.osImageURL differs; OSImageURL is the
	// desired one.
	OSImageChanged bool
	OSImageURL     string
	// KernelArgsDelete and KernelArgsAdd are the MCD's kernel argument
	// change: delete every old argument (deleting one the host no longer
	// has is not an error: rpm-ostree kargs --delete-if-present), then
	// append every new one, in this order. Both are empty when the split
	// argument lists are equal.
	KernelArgsDelete []string
	KernelArgsAdd    []string
	// FilesChanged are the paths of files added or changed; FilesRemoved of
	// files current has and desired has not.
	FilesChanged []string
	FilesRemoved []string
	// UnitsChanged are the names of units added or changed (contents,
	// enablement, mask or drop-ins); UnitsRemoved of units desired drops.
	UnitsChanged []string
	UnitsRemoved []string
	// SSHKeysChanged says the core user's keys differ.
	SSHKeysChanged bool
}

// Empty reports whether nothing changes.
func (d Diff) Empty() bool {
	return reflect.DeepEqual(d, Diff{OSImageURL: d.OSImageURL})
}

// NeedsReboot reports whether the change takes a reboot. Only a change of
// SSH keys alone does not, as for the MCD; nodeward reboots for every file
// change where the MCD may only reload CRI-O, because it applies files as
// part of a coordinated, drained update anyway.
func (d Diff) NeedsReboot() bool {
	onlyKeys := Diff{OSImageURL: d.OSImageURL, SSHKeysChanged: d.SSHKeysChanged}
	return !reflect.DeepEqual(d, onlyKeys)
}

// Reconcile says what changes from current, the config the host runs, to
// desired. A change nodeward will not make in place is an
// *UnreconcilableError naming its field; a field nodeward does not apply is
// fine as long as it is the same in both configs.
func Reconcile(current, desired *Config) (Diff, error) {
	if current == nil || desired == nil {
		return Diff{}, errors.New("reconciling machine configs: nil config")
	}
	if err := checkSpecFields(current, desired); err != nil {
		return Diff{}, err
	}
	if err := checkIgnitionSections(current.ign, desired.ign); err != nil {
		return Diff{}, err
	}
	d := Diff{
		OSImageChanged: current.OSImageURL != desired.OSImageURL,
		OSImageURL:     desired.OSImageURL,
		SSHKeysChanged: !slices.Equal(current.SSHKeys, desired.SSHKeys),
	}
	d.KernelArgsDelete, d.KernelArgsAdd = kernelArgsDiff(current.KernelArgs, desired.KernelArgs)
	d.FilesChanged, d.FilesRemoved = diffByKey(current.Files, desired.Files, File.key)
	d.UnitsChanged, d.UnitsRemoved = diffByKey(current.Units, desired.Units, Unit.key)
	return d, nil
}

func (f File) key() string { return f.Path }
func (u Unit) key() string { return u.Name }

// diffByKey lists the keys of desired entries that are new or differ, in
// desired's order, and of current entries desired lacks, in current's.
func diffByKey[T any](current, desired []T, key func(T) string) (changed, removed []string) {
	old := make(map[string]T, len(current))
	for _, c := range current {
		old[key(c)] = c
	}
	kept := make(map[string]bool, len(desired))
	for _, d := range desired {
		k := key(d)
		kept[k] = true
		if c, ok := old[k]; !ok || !reflect.DeepEqual(c, d) {
			changed = append(changed, k)
		}
	}
	for _, c := range current {
		if !kept[key(c)] {
			removed = append(removed, key(c))
		}
	}
	return changed, removed
}

// checkSpecFields refuses changes to the MachineConfig spec fields nodeward
// does not apply.
func checkSpecFields(current, desired *Config) error {
	if current.FIPS != desired.FIPS {
		return &UnreconcilableError{Field: "spec.fips", Reason: "FIPS mode is set at installation only"}
	}
	if canonicalKernelType(current.KernelType) != canonicalKernelType(desired.KernelType) {
		return &UnreconcilableError{Field: "spec.kernelType", Reason: "nodeward does not switch kernels"}
	}
	if !slices.Equal(current.Extensions, desired.Extensions) {
		return &UnreconcilableError{Field: "spec.extensions", Reason: "nodeward does not install extensions"}
	}
	osChanges := current.OSImageURL != desired.OSImageURL ||
		current.BaseOSExtensionsContainerImage != desired.BaseOSExtensionsContainerImage
	if osChanges && len(desired.Extensions) > 0 {
		// The MCD re-layers extensions from the new extensions image onto
		// the new OS; a plain rebase would lose them.
		return &UnreconcilableError{Field: "spec.extensions",
			Reason: "the OS image changes and extensions would have to be layered onto it again"}
	}
	if osChanges && canonicalKernelType(desired.KernelType) != "default" {
		return &UnreconcilableError{Field: "spec.kernelType",
			Reason: "the OS image changes and a non-default kernel would have to be installed onto it again"}
	}
	return nil
}

// canonicalKernelType maps the spellings the MCO accepts to one.
func canonicalKernelType(t string) string {
	switch t {
	case "", "default":
		return "default"
	case "realtime", "rt":
		return "realtime"
	}
	return t
}
