#!/usr/bin/env bash
# The cost curves of docs/benchmarks.md ("Rebalance at the speed of the
# network"): each benchmark writes its --json report to docs/bench/ and
# `cohort-bench plot` draws the PNG beside it. Run on a quiet machine (no
# tests, chaos runs or other benchmarks: the reports record the load
# average before and after each run).
#
#   scripts/bench-curves.sh [rebalance|commits|failover|all] [SIZES]
#
# SIZES (rebalance only) defaults to 10,100,1000.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
what=${1:-all}
sizes=${2:-10,100,1000}
out=docs/bench
mkdir -p "$out" bin
go build -o bin/cohort-bench ./cmd/cohort-bench
go build -o bin/cohortd ./cmd/cohortd
bench=bin/cohort-bench

if [ "$what" = rebalance ] || [ "$what" = all ]; then
	# Default client heartbeat interval (session 10 s / 3), watch on and off
	# side by side in one run.
	$bench --json --timeout 60m rebalance --sizes "$sizes" --rounds 3 --watch on,off \
		--heartbeat-interval 3s > "$out/rebalance.json"
	$bench plot --in "$out/rebalance.json" --x members --y median --series watch --log-x --log-y \
		--title "Rebalance after one member joins (3 replicas, fsync, heartbeat 3 s)" \
		--y-label "join → every member assigned, median (ms)" --out "$out/rebalance.png"
	$bench plot --in "$out/rebalance.json" --x members --y "after last rejoin median" --series watch --log-x --log-y \
		--title "Rebalance from the last member's rejoin (the protocol's own cost)" \
		--y-label "last rejoin → every member assigned, median (ms)" --out "$out/rebalance-protocol.png"
fi
if [ "$what" = commits ] || [ "$what" = all ]; then
	$bench --json commits --concurrency 1,4,16,64,256 --duration 5s > "$out/commits.json"
	$bench plot --in "$out/commits.json" --x C --y "raw ops/s" --y "client ops/s" --log-x --log-y \
		--title "Offset commits vs concurrency: raw Raft apply and through the client" \
		--y-label "ops/s" --out "$out/commits.png"
	$bench plot --in "$out/commits.json" --x C --y "raw p50" --y "p50" --y "p99" --log-x --log-y \
		--title "Offset commit latency vs concurrency" --y-label "ms" --out "$out/commits-latency.png"
fi
if [ "$what" = failover ] || [ "$what" = all ]; then
	$bench --json --cluster process --cohortd bin/cohortd failover --mode all > "$out/failover.json"
fi
