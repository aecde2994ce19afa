#!/usr/bin/env bash
# rss.sh measures the resident memory of a process once it has settled:
# VmRSS, RssAnon and RssFile from /proc/PID/status, plus the file-backed
# pages split by the ELF segment of the executable they belong to.
#
#   rss.sh [-w SECONDS] [-s] -- COMMAND [ARGS...]
#       run COMMAND, wait (default 3 s), measure, stop it (SIGTERM).
#   rss.sh [-w SECONDS] [-s] -i PKG[,PKG...]
#       build, inside this module, a program that only blank-imports the
#       listed packages and blocks, then measure it: the cost of linking a
#       package and running its init functions, nothing else. "-i ''"
#       measures an empty program.
#
# Output is one line: label, binary size, VmRSS, RssAnon, RssFile (MiB), then
# the file-backed RSS per mapping of the executable (r--: headers, dynamic
# symbols and rodata/pclntab; r-x: text; rw-: data). With -s, also the
# resident pages of the executable by ELF section (./rssmap).
#
# Examples (from the repository root): the agent against an API server that
# does not answer (it keeps retrying, so it stays up with its probes
# running), and client-go's clientset alone:
#   go build -tags grpcnotrace -o /tmp/nw ./cmd/nodeward   # as make build
#   bash test/bench/health/rss.sh -w 10 -s -- /tmp/nw agent --updates=false \
#       --kubeconfig KUBECONFIG --node-name x --metrics-address 127.0.0.1:0
#   bash test/bench/health/rss.sh -i k8s.io/client-go/kubernetes
set -euo pipefail

wait_s=3
imports=""
build=false
sections=false
while getopts "w:i:s" opt; do
	case $opt in
	w) wait_s=$OPTARG ;;
	i) imports=$OPTARG; build=true ;;
	s) sections=true ;;
	*) echo "usage: $0 [-w SECONDS] (-i PKGS | -- COMMAND...)" >&2; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
[[ ${1:-} == -- ]] && shift

repo=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
tmp=$(mktemp -d)
probe_dir=""
cleanup() {
	rm -rf "$tmp"
	[[ -n $probe_dir ]] && rm -rf "$probe_dir"
	return 0
}
trap cleanup EXIT

if $build; then
	# The program lives inside the module for the module's dependency
	# versions; the directory starts with "_" so ./... never sees it.
	probe_dir=$(mktemp -d "$repo/_rssprobe.XXXXXX")
	{
		echo "package main"
		echo "import ("
		echo "	\"time\""
		IFS=, read -ra pkgs <<<"$imports"
		for p in "${pkgs[@]}"; do
			[[ -n $p ]] && echo "	_ \"$p\""
		done
		echo ")"
		echo "func main() { for { time.Sleep(time.Hour) } }"
	} >"$probe_dir/main.go"
	# Built with the tags of `make build`.
	(cd "$repo" && go build -tags grpcnotrace -o "$tmp/probe" "./$(basename "$probe_dir")")
	set -- "$tmp/probe"
	label=${imports:-empty}
else
	[[ $# -gt 0 ]] || { echo "usage: $0 [-w SECONDS] (-i PKGS | -- COMMAND...)" >&2; exit 2; }
	label="$*"
fi

"$@" >"$tmp/out" 2>&1 &
pid=$!
sleep "$wait_s"
if ! kill -0 "$pid" 2>/dev/null; then
	echo "$label: exited before the measurement; output:" >&2
	cat "$tmp/out" >&2
	exit 1
fi
exe=$(readlink "/proc/$pid/exe")

kib() { awk -v f="$1:" '$1 == f {print $2}' "/proc/$pid/status"; }
mib() { awk -v k="$1" 'BEGIN {printf "%.1f", k / 1024}'; }

# Per-mapping file-backed RSS of the executable: in smaps, a mapping's header
# line is followed by its counters; Rss minus Anonymous is what the file
# provides.
segments=$(awk -v exe="$exe" '
	/^[0-9a-f]+-[0-9a-f]+ / { cur = ($6 == exe) ? $2 : ""; next }
	cur != "" && $1 == "Rss:" { rss[cur] += $2 }
	cur != "" && $1 == "Anonymous:" { anon[cur] += $2 }
	END {
		for (p in rss) printf "%s %.1f ", p, (rss[p] - anon[p]) / 1024
	}' "/proc/$pid/smaps")

printf '%s: binary %s MB, VmRSS %s MiB, RssAnon %s MiB, RssFile %s MiB [exe file-backed by mapping: %s]\n' \
	"$label" "$(awk -v b="$(stat -c %s "$exe")" 'BEGIN {printf "%.1f", b / 1e6}')" \
	"$(mib "$(kib VmRSS)")" "$(mib "$(kib RssAnon)")" "$(mib "$(kib RssFile)")" "${segments% }"

if $sections; then
	(cd "$repo" && go run ./test/bench/health/rssmap "$pid")
fi

kill -TERM "$pid" 2>/dev/null || true
wait "$pid" 2>/dev/null || true
