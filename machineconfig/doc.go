// Package machineconfig turns a rendered MachineConfig into what nodeward
// applies to the host, or into a precise refusal.
//
// Three steps, one per part of the API:
//
//   - Parse reads the JSON of a whole MachineConfig object
//     (machineconfiguration.openshift.io/v1) into a Config: the OS image, the
//     kernel arguments split as the machine-config-daemon (MCD) splits them,
//     the files, the systemd units and the core user's SSH keys of its
//     Ignition config. Every refusal is a *FieldError naming the field path
//     (spec.config.storage.files[2].contents.source) and the bad value.
//   - Reconcile compares the Config the host runs with the one it should run
//     and returns a Diff, or an *UnreconcilableError naming the first field
//     that differs and that the MCD would refuse to change in place or that
//     nodeward does not apply (extensions, kernel type, FIPS, disks,
//     filesystems, users other than core, …).
//   - Writer applies the file, unit and SSH-key part of a Diff under a host
//     root, recording what it replaces in a journal first so that an
//     interrupted Apply can be re-run and a failed update rolled back.
//
// The Ignition config (spec 3.0.0 to 3.5.0, what the Machine Config Operator
// accepts) is parsed and validated with github.com/coreos/ignition/v2, the
// parser the MCO itself uses, so that a config nodeward accepts is one the
// MCO accepts: older 3.x specs are translated up to 3.5.0 and Ignition's own
// validation (absolute paths, duplicate entries, unit names, URLs) runs
// before nodeward's narrower checks. It costs little: the config packages
// pull in only small helpers (vcontext, go-semver, dataurl, aws/arn).
//
// Ignition 2.x configs are refused: the MCO converts them when it merges
// user MachineConfigs, and a rendered MachineConfig (the only kind a node
// is asked to run) always carries a 3.x config.
//
// Kernel arguments, the OS image and the decision to reboot belong to the
// caller: this package only says what changed.
package machineconfig
