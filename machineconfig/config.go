package machineconfig

import (
	"io/fs"

	ign "github.com/coreos/ignition/v2/config/v3_5/types"
)

// Config is what nodeward takes from one rendered MachineConfig.
type Config struct {
	// Name is metadata.name, e.g. rendered-worker-0123abcd.
	Name string
	// OSImageURL is spec.osImageURL.
	OSImageURL string
	// KernelArgs are spec.kernelArguments split into single arguments the
	// way the MCD splits them: an entry may hold several arguments separated
	// by white space, and a double-quoted value (foo="a b") stays one.
	KernelArgs []string
	// Files are spec.config.storage.files, in their order.
	Files []File
	// Units are spec.config.systemd.units, in their order.
	Units []Unit
	// SSHKeys are the sshAuthorizedKeys of the user core, in their order.
	SSHKeys []string

	// Fields nodeward does not apply; Reconcile refuses any change to them.

	// Extensions is spec.extensions.
	Extensions []string
	// KernelType is spec.kernelType ("" and "default" are the same).
	KernelType string
	// FIPS is spec.fips.
	FIPS bool
	// BaseOSExtensionsContainerImage is spec.baseOSExtensionsContainerImage.
	BaseOSExtensionsContainerImage string
	// IgnitionVersion is spec.config.ignition.version as written.
	IgnitionVersion string

	// ign is spec.config translated to Ignition 3.5.0: Reconcile compares
	// its sections that nodeward does not model (disks, users, …).
	ign ign.Config
}

// File is one entry of spec.config.storage.files.
type File struct {
	// Path is absolute and clean, as seen on the host.
	Path string
	// Mode holds the permission bits and setuid, setgid and sticky; 0644
	// when the config says nothing, like the MCD.
	Mode fs.FileMode
	// User and Group own the file; root when both fields are empty.
	User, Group Owner
	// Contents are decoded and decompressed.
	Contents []byte
	// Overwrite is Ignition's overwrite flag. It is kept for comparison
	// only: like the MCD, the Writer always replaces the file, since on an
	// update the file normally exists already.
	Overwrite *bool
}

// Owner is a user or group given by ID or by name; an ID wins over a name,
// as in Ignition.
type Owner struct {
	ID   *int
	Name string
}

// Unit is one entry of spec.config.systemd.units.
type Unit struct {
	// Name is the unit's file name, e.g. kubelet.service.
	Name string
	// Contents is the unit file; empty means the unit file comes from the
	// OS and only its drop-ins, enablement or mask are configured.
	Contents string
	// Enabled: true enables, false disables, nil leaves enablement alone.
	Enabled *bool
	// Mask: true masks (a link to /dev/null); false removes a mask left by
	// an earlier config; nil says nothing.
	Mask *bool
	// Dropins go to /etc/systemd/system/NAME.d/.
	Dropins []Dropin
}

// Dropin is a unit drop-in; empty Contents removes it, as in the MCD.
type Dropin struct {
	Name     string
	Contents string
}

// masked reports whether the unit is to be masked.
func (u Unit) masked() bool { return u.Mask != nil && *u.Mask }
