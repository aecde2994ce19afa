#!/usr/bin/env bash
# Builds the real control-plane binaries nodeward's tests run against, the
# kubelet of test/node's real node and the real OpenShift Machine API
# controllers of test/machineapi, into a cache directory keyed by version.
# Only what is missing is built, so a warm cache costs nothing. A cold build
# takes about 15 minutes on 2 cores, the kubelet about 2 more when the
# control plane's packages are already in Go's build cache, the Machine API
# controllers 6 to 14 more, CRI-O about 5 more (it needs gcc and Debian's
# libseccomp-dev: test/tools/deps.sh).
#
#   NODEWARD_TESTBIN  cache root (default: $XDG_CACHE_HOME/nodeward/testbin or ~/.cache/nodeward/testbin)
#   NODEWARD_TESTBIN_MACHINE_API=skip  build everything but the Machine API controllers
#   NODEWARD_TESTBIN_CRIO=skip  build everything but CRI-O and pinns
#
# Prints the directory holding the binaries on its last line.
set -euo pipefail

K8S_VERSION=v1.36.3
ETCD_VERSION=v3.6.8
KWOK_VERSION=v0.8.0

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="${NODEWARD_TESTBIN:-${XDG_CACHE_HOME:-$HOME/.cache}/nodeward/testbin}"
dir="$root/k8s-$K8S_VERSION-etcd-$ETCD_VERSION-kwok-$KWOK_VERSION"
mkdir -p "$dir"
# One build at a time per cache: test packages and people started together
# would otherwise each build the same binaries at once (a cold build is 15
# minutes on 2 cores alone); a second run waits, then finds them cached.
exec 9>"$root/.lock"
flock 9

log() { printf '[testbin %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# build NAME CMD...: runs CMD unless $dir/NAME exists; binaries land under a
# temporary name first so an interrupted build never leaves a broken binary.
build() {
	local name="$1"; shift
	if [[ -x "$dir/$name" ]]; then
		log "$name: cached"
		return
	fi
	local start=$SECONDS
	log "$name: building (this can take several minutes on a cold cache)..."
	"$@"
	log "$name: done in $((SECONDS - start))s"
}

k8s_ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=36 -X k8s.io/component-base/version.gitTreeState=clean"

build_k8s() {
	local name="$1"
	(cd "$here" && go build -trimpath -ldflags "$k8s_ldflags" -o "$dir/.$name.tmp" "./cmd/$name")
	mv "$dir/.$name.tmp" "$dir/$name"
}

build_etcd() {
	(cd "$here/etcd" && go build -trimpath -ldflags "-s -w" -o "$dir/.etcd.tmp" .)
	mv "$dir/.etcd.tmp" "$dir/etcd"
}

# The Machine API controllers (test/machineapi/controllers, a module of its
# own) land in machine-api/<machine-api-operator version>-<hash of the
# wrapper's go.mod, go.sum and *.go>/: a new upstream version or a change to
# the stub actuator builds anew, and test/machineapi computes the same path
# (controllersKey). The version is read from the wrapper's go.mod.
mapi_src="$here/../machineapi/controllers"
mapi_key() {
	local version hash
	version="$(awk '$1 == "github.com/openshift/machine-api-operator" {print $2}' "$mapi_src/go.mod")"
	hash="$(cd "$mapi_src" && LC_ALL=C ls go.mod go.sum *.go | LC_ALL=C sort | xargs cat | sha256sum | cut -c1-12)"
	echo "$version-$hash"
}
mapi_name="machine-api/$(mapi_key)/machine-api-controllers"

build_mapi() {
	mkdir -p "$(dirname "$dir/$mapi_name")"
	(cd "$mapi_src" && go build -trimpath -ldflags "-s -w" -o "$dir/$mapi_name.tmp" .)
	mv "$dir/$mapi_name.tmp" "$dir/$mapi_name"
}

# CRI-O (test/node/crio, a module of its own whose go.mod names CRI-O as a
# tool, and whose file tags holds the build tags: those that need no C
# library beyond Debian's libseccomp, no ostree, gpgme or btrfs) and pinns,
# the small C program of the same module CRI-O makes pod namespaces with,
# land in crio/<cri-o version>-<hash of the wrapper's go.mod, go.sum and
# tags>/: test/node computes the same path (crioKey).
crio_src="$here/../node/crio"
crio_key() {
	local version hash
	version="$(awk '$1 == "github.com/cri-o/cri-o" {print $2}' "$crio_src/go.mod")"
	hash="$(cat "$crio_src/go.mod" "$crio_src/go.sum" "$crio_src/tags" | sha256sum | cut -c1-12)"
	echo "$version-$hash"
}
crio_dir="crio/$(crio_key)"

build_crio() {
	mkdir -p "$dir/$crio_dir"
	(cd "$crio_src" && go build -trimpath -tags "$(tr -s ' \n' ' ' <tags)" -ldflags "-s -w" -o "$dir/$crio_dir/.crio.tmp" github.com/cri-o/cri-o/cmd/crio)
	mv "$dir/$crio_dir/.crio.tmp" "$dir/$crio_dir/crio"
}

# pinns is built static, as CRI-O's own release builds it.
build_pinns() {
	local mod
	mod="$(cd "$crio_src" && go mod download github.com/cri-o/cri-o && go list -m -f '{{.Dir}}' github.com/cri-o/cri-o)"
	mkdir -p "$dir/$crio_dir"
	gcc -std=c99 -O2 -static -o "$dir/$crio_dir/.pinns.tmp" "$mod/pinns/src/pinns.c" "$mod/pinns/src/sysctl.c"
	mv "$dir/$crio_dir/.pinns.tmp" "$dir/$crio_dir/pinns"
}

build_kwok() {
	local tmp
	tmp="$(mktemp -d)"
	GOBIN="$tmp" GOFLAGS=-trimpath go install -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
	mv "$tmp/kwok" "$dir/kwok"
	rmdir "$tmp"
}

# kwok's Stage definitions ship inside its module; copy the ones the test
# control plane uses next to the binary.
copy_stages() {
	if [[ -f "$dir/stages/.complete" ]]; then
		return
	fi
	local mod
	mod="$(go env GOMODCACHE)/sigs.k8s.io/kwok@$KWOK_VERSION"
	if [[ ! -d "$mod" ]]; then
		(cd "$(mktemp -d)" && go mod download "sigs.k8s.io/kwok@$KWOK_VERSION")
	fi
	mkdir -p "$dir/stages"
	local stage
	for stage in node/fast/node-initialize node/heartbeat-with-lease/node-heartbeat-with-lease \
		pod/general/pod-create pod/general/pod-init-container-running \
		pod/general/pod-init-container-completed pod/general/pod-ready \
		pod/general/pod-complete pod/general/pod-delete; do
		cp "$mod/kustomize/stage/$stage.yaml" "$dir/stages/"
	done
	chmod u+w "$dir"/stages/*.yaml
	touch "$dir/stages/.complete"
	log "kwok stages: copied $(ls "$dir/stages" | wc -l) files"
}

build etcd build_etcd
build kube-apiserver build_k8s kube-apiserver
build kube-controller-manager build_k8s kube-controller-manager
build kube-scheduler build_k8s kube-scheduler
build kubectl build_k8s kubectl
build kubelet build_k8s kubelet
build kwok build_kwok
# test/cluster runs this script itself when NODEWARD_TESTBIN_DIR is unset and
# skips the Machine API controllers (NODEWARD_TESTBIN_MACHINE_API=skip): a
# package that does not use them should not wait for their cold build.
if [[ "${NODEWARD_TESTBIN_MACHINE_API:-build}" != skip ]]; then
	build "$mapi_name" build_mapi
fi
# test/cluster's own run skips CRI-O too (NODEWARD_TESTBIN_CRIO=skip): only
# test/node's CRI-O node needs it.
if [[ "${NODEWARD_TESTBIN_CRIO:-build}" != skip ]]; then
	build "$crio_dir/pinns" build_pinns
	build "$crio_dir/crio" build_crio
fi
copy_stages
log "all binaries ready in $dir"
echo "$dir"
