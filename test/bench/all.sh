#!/usr/bin/env bash
# all.sh runs every benchmark of docs/benchmarks.md's "Every figure again"
# table, one at a time (their figures are latencies and CPU shares: nothing
# else should run beside them), and keeps each one's output in LOGDIR
# (default /tmp/nodeward-bench). About 25 minutes on 2 vCPU; the 10,000-node
# coordinator runs (test/bench/coordinator) are separate, for their length.
#
#   bash test/tools/deps.sh bench && bash test/bench/all.sh [LOGDIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
logs=${1:-/tmp/nodeward-bench}
mkdir -p "$logs"
NODEWARD_TESTBIN_DIR=$(bash test/tools/install.sh | tail -1)
export NODEWARD_TESTBIN_DIR
run() {
	local name=$1
	shift
	printf '[bench %s] %s\n' "$(date +%H:%M:%S)" "$name" >&2
	"$@" >"$logs/$name.log" 2>&1 || { echo "$name failed: see $logs/$name.log" >&2; return 1; }
	grep -E '^Benchmark|median|ratio' "$logs/$name.log" >&2 || true
}
run health go test ./test/bench/health -run '^$' -bench 'BenchmarkNetwork|BenchmarkDisk' -benchtime 20x -timeout 20m
run memory go test ./test/bench/health -run '^$' -bench BenchmarkMemory -benchtime 10x -timeout 20m -v
run kernel go test ./test/bench/health -run '^$' -bench BenchmarkKernel -benchtime 20x -timeout 20m
run kernelrules go test ./kernelrules -run '^$' -bench BenchmarkMatch -count 3
NODEWARD_BENCH_IDLE=5m run idle go test ./test/bench/health -run '^$' -bench AgentIdle -benchtime 1x -timeout 20m -v
run drain go test ./test/bench/drain -run '^$' -bench . -benchtime 1x -timeout 30m -v
run update go test ./test/bench/update -run '^$' -bench UnavailableWindow -benchtime 2x -timeout 20m
run mco-classes go test ./test/mco -run '^$' -bench ChangeClasses -benchtime 1x -timeout 30m -v
run fleet go test ./test/bench/fleet -run '^$' -bench . -benchtime 1x -timeout 40m -v
