#!/usr/bin/env bash
# Builds every kustomization under manifests/ (the root, both overlays, the
# base) so that `make lint` catches a broken manifest without a cluster.
# kustomize comes from, in order: $KUSTOMIZE, `kustomize` on PATH, the test
# control plane's kubectl (`kubectl kustomize`, kustomize v5.8.1 inside), or
# `go run` of the same kustomize version.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
KUSTOMIZE_VERSION=v5.8.1

kustomize_build() {
	if [[ -n "${KUSTOMIZE:-}" ]]; then
		"$KUSTOMIZE" build "$1"
	elif command -v kustomize >/dev/null; then
		kustomize build "$1"
	elif [[ -n "${NODEWARD_TESTBIN_DIR:-}" && -x "$NODEWARD_TESTBIN_DIR/kubectl" ]]; then
		"$NODEWARD_TESTBIN_DIR/kubectl" kustomize "$1"
	else
		go run "sigs.k8s.io/kustomize/kustomize/v5@$KUSTOMIZE_VERSION" build "$1"
	fi
}

status=0
for dir in manifests manifests/base manifests/overlays/kubernetes manifests/overlays/openshift; do
	if out="$(kustomize_build "$root/$dir" 2>&1)"; then
		printf 'kustomize build %s: %d objects\n' "$dir" "$(grep -c '^kind:' <<<"$out")"
	else
		printf 'kustomize build %s failed:\n%s\n' "$dir" "$out" >&2
		status=1
	fi
done
exit $status
