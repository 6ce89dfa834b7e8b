#!/usr/bin/env bash
# run-cluster.sh starts a local three-node Cohort cluster on 127.0.0.1 in the
# foreground and stops it cleanly on Ctrl-C (SIGINT) or SIGTERM.
#
# usage: scripts/run-cluster.sh COHORTD_BINARY [DATA_ROOT]
#
#   COHORTD_BINARY  a built cohortd (this script builds nothing)
#   DATA_ROOT       default ./data; node i keeps its state in DATA_ROOT/node<i>
#
# Ports (override with the environment, e.g. to run two clusters):
#   COHORT_RAFT_PORT_BASE  default 7001 -> raft  127.0.0.1:7001..7003
#   COHORT_GRPC_PORT_BASE  default 9001 -> gRPC  127.0.0.1:9001..9003
#   COHORT_HTTP_PORT_BASE  default 8001 -> HTTP  127.0.0.1:8001..8003
#                                          (/healthz /readyz /metrics)
#   COHORT_KAFKA_PORT_BASE default 9092 -> Kafka 127.0.0.1:9092..9094
# Extra arguments for every node: COHORTD_ARGS (word-split).
#
# The nodes form the cluster with --bootstrap-expect 3; restarting the
# script reuses DATA_ROOT and the nodes rejoin without bootstrapping again.
# Exit status: 0 when every node exited cleanly, 1 otherwise.
set -euo pipefail

if [[ $# -lt 1 || $# -gt 2 ]]; then
	echo "usage: $0 COHORTD_BINARY [DATA_ROOT]" >&2
	exit 2
fi
bin=$1
root=${2:-./data}
if [[ ! -x $bin ]]; then
	echo "run-cluster: $bin is not an executable cohortd binary" >&2
	exit 2
fi

host=127.0.0.1
raft_base=${COHORT_RAFT_PORT_BASE:-7001}
grpc_base=${COHORT_GRPC_PORT_BASE:-9001}
http_base=${COHORT_HTTP_PORT_BASE:-8001}
kafka_base=${COHORT_KAFKA_PORT_BASE:-9092}
read -r -a extra <<<"${COHORTD_ARGS:-}"

join=""
for i in 1 2 3; do
	join+="${join:+,}$host:$((grpc_base + i - 1))"
done

pids=()
stopping=0

stop_all() {
	stopping=1
	for pid in "${pids[@]}"; do
		kill -TERM "$pid" 2>/dev/null || true
	done
}
# Ctrl-C in a terminal also signals the nodes directly (same process
# group); cohortd shuts down once whatever number of signals it gets.
trap stop_all INT TERM

for i in 1 2 3; do
	mkdir -p "$root/node$i"
	# Process substitution keeps $! the cohortd pid while prefixing its
	# log lines with the node name.
	"$bin" \
		--node-id "node$i" \
		--data-dir "$root/node$i" \
		--raft-addr "$host:$((raft_base + i - 1))" \
		--grpc-addr "$host:$((grpc_base + i - 1))" \
		--http-addr "$host:$((http_base + i - 1))" \
		--kafka-addr "$host:$((kafka_base + i - 1))" \
		--bootstrap-expect 3 \
		--join "$join" \
		"${extra[@]}" \
		> >(sed -u "s/^/[node$i] /") 2>&1 &
	pids+=("$!")
done
echo "run-cluster: started node1..node3 (pids ${pids[*]}); gRPC $join; HTTP $host:$http_base..$((http_base + 2)); Kafka $host:$kafka_base..$((kafka_base + 2)); data in $root; Ctrl-C stops" >&2

# wait_pid PID: sets rc to PID's exit status. A trapped signal interrupts
# bash's wait with a status above 128 while the child still runs; wait again.
wait_pid() {
	while :; do
		set +e
		wait "$1"
		rc=$?
		set -e
		if [[ $rc -gt 128 ]] && kill -0 "$1" 2>/dev/null; then
			continue
		fi
		return 0
	done
}

# Wait until a node exits or we are signalled; if a node exited on its
# own, stop the rest.
status=0
while [[ $stopping -eq 0 ]]; do
	alive=0
	for pid in "${pids[@]}"; do
		if kill -0 "$pid" 2>/dev/null; then
			alive=$((alive + 1))
		fi
	done
	if [[ $alive -lt ${#pids[@]} ]]; then
		echo "run-cluster: a node exited on its own; stopping the others" >&2
		status=1
		stop_all
		break
	fi
	# sleep in the background so the trap runs as soon as a signal arrives.
	sleep 0.5 &
	wait $! || true
done
for pid in "${pids[@]}"; do
	wait_pid "$pid"
	if [[ $rc -ne 0 ]]; then
		echo "run-cluster: node pid $pid exited with status $rc" >&2
		status=1
	fi
done
echo "run-cluster: all nodes stopped (status $status)" >&2
exit "$status"
