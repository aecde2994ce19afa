// Package hostmode runs nodeward as a new user installs it on a host — the
// project's own systemd/nodeward.service, the `make build` binary and
// manifests/host/config.yaml — under a real systemd as PID 1 (a Debian root
// booted with systemd-nspawn, sharing the host's network) against the real
// test control plane, with the rpm-ostree double of test/rpmostree as the
// OS. A reboot asked from inside (logind) really reboots the container: a
// new boot ID, a fresh /run, the agent started again by its unit.
//
// The double's finalize-deployment only unlocks the deployment (the real
// one also reboots by itself): the reboot a test sees is the agent's own,
// through logind. The double follows the container's kernel boot ID and
// applies the finalized deployment on its first call in a new boot, as
// ostree-finalize-staged does at the shutdown before it.
//
// In MCO mode (--protocol=mco) the same unit runs beside a real CRI-O 1.34
// as crio.service (CRIOInstall: its upstream unit, make testbin's binary,
// the host's conmon and runc), under the real MCO node and drain
// controllers of test/mco: a node disruption policy's Reload of
// crio.service reaches the real CRI-O through the container's systemd.
//
// The harness: Rootfs builds and caches the root (mmdebstrap, zstd),
// Extract copies it per test, Install puts nodeward into it, Boot runs the
// container and boots it again after each reboot. The scenarios are the
// package's tests; they need root, systemd-nspawn, nsenter, mmdebstrap and
// zstd (Debian: systemd-container, util-linux, mmdebstrap, zstd) — the
// MCO-mode test also conmon, runc, make testbin's CRI-O and the MCO
// controllers — and skip without them outside CI.
package hostmode
