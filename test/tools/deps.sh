#!/usr/bin/env bash
# deps.sh installs the Debian packages `make test` (deps.sh test) or
# `make demo` (deps.sh demo) needs, or those and the benchmarks' peers
# (deps.sh bench), so that on a fresh Debian machine those
# two commands do all the set-up. As root it runs apt-get update and install
# for what is missing; otherwise it names what is missing and the command
# that installs it, and lets the tests that need it skip (under CI=true they
# fail instead).
set -euo pipefail

case "${1:-test}" in
demo)
	# the demo's simulated hosts reboot through a fake logind on a private D-Bus
	pkgs=(dbus-daemon)
	;;
test | bench)
	# containerd, runc, containernetworking-plugins: the runtime probe and
	# test/node's real kubelet node; iproute2: network namespaces;
	# dbus-daemon: the fake logind; systemd-container, mmdebstrap, zstd:
	# test/hostmode's systemd-nspawn machines; prometheus: promtool and the
	# real Prometheus the health gates are tested on (test/prom);
	# prometheus-alertmanager: the real Alertmanager the silences are;
	# e2fsprogs, xfsprogs: the ext4 and XFS filesystems the kernel-log tests
	# make fail on loop devices (test/kernelevents); conmon, skopeo, jq,
	# libseccomp-dev: test/node's CRI-O node (conmon runs its containers
	# with runc, skopeo side-loads its images, jq restricts its
	# containers' oomScoreAdj (test/node/crio.go), libseccomp-dev links the crio
	# that test/tools/install.sh builds); rsync, procps: `make
	# must-gather-image` copies rsync and pkill into the image (bash,
	# coreutils, mawk, sed and tar are Essential), and test/e2e copies
	# /must-gather out of it with the host's rsync, as oc adm must-gather does.
	pkgs=(containerd runc containernetworking-plugins conmon skopeo jq libseccomp-dev iproute2 dbus-daemon util-linux systemd-container mmdebstrap zstd prometheus prometheus-alertmanager e2fsprogs xfsprogs rsync procps)
	# prometheus-node-exporter: the agent's RSS is measured beside it
	# (test/bench/health, BenchmarkAgentIdle).
	if [[ ${1:-test} == bench ]]; then
		pkgs+=(prometheus-node-exporter)
	fi
	;;
*)
	echo "usage: $0 test|demo|bench" >&2
	exit 64
	;;
esac

need=()
for pkg in "${pkgs[@]}"; do
	dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
((${#need[@]})) || exit 0

if ((EUID != 0)); then
	echo "missing Debian packages: ${need[*]}" >&2
	echo "install them with: sudo apt-get update && sudo apt-get install -y --no-install-recommends ${need[*]}" >&2
	echo "(tests that need them skip until then)" >&2
	exit 0
fi
echo "installing Debian packages: ${need[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "${need[@]}"
# Their packages start a system containerd, Prometheus and Alertmanager; the
# tests run their own.
for svc in containerd prometheus prometheus-alertmanager prometheus-node-exporter; do
	if [[ " ${need[*]} " == *" $svc "* ]]; then
		systemctl stop "$svc" >/dev/null 2>&1 || true
	fi
done
