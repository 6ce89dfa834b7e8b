#!/usr/bin/env bash
# End-to-end test of the compose deployment (make compose-test):
#
#   1. build the image (deploy/docker/build-image.sh, no registry needed);
#   2. bring deploy/compose/docker-compose.yml up under its own project,
#      network and ports, and wait until Docker reports all three healthy
#      (their health checks call the nodes over mutual TLS); the
#      certificate service must have created the development PKI;
#   3. copy the admin certificate and the CA out of a node: every call from
#      here on is TLS with it;
#      composecheck --phase failover: plaintext and TLS without a client
#      certificate are refused; a group of members and a standalone
#      writer commit, the leader's container is `docker kill`ed, the group
#      keeps its generation and assignment, every acknowledged commit is
#      readable, the container is started again and rejoins as a follower;
#   4. `down` keeping the volumes, `up` again: the certificate service
#      creates nothing and the CA is the same, every node logs that it
#      found Raft state and did not bootstrap, and composecheck --phase
#      verify reads the same offsets with the certificate copied before;
#   5. `down -v`, also on failure or interrupt.
#
# Without Docker (or compose) it skips with a message and exits 0, except
# under CI=true, where that is a failure.
#
# Environment: IMAGE (default cohort:compose-test), COMPOSE_TEST_NET_PREFIX
# (default 172.29.78), COMPOSE_TEST_PORT_BASE (default 19100: gRPC on
# base+1..3, HTTP on base-1000+1..3), KEEP_IMAGE=1 to keep the image.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
started=$(date +%s)
say() { printf 'compose-test %4ds  %s\n' "$(( $(date +%s) - started ))" "$*"; }

skip_or_fail() {
	if [ "${CI:-}" = "true" ]; then
		echo "compose-test: FAIL: $1 (CI=true requires Docker with compose)" >&2
		exit 1
	fi
	echo "compose-test: SKIPPED: $1" >&2
	exit 0
}

command -v docker >/dev/null 2>&1 || skip_or_fail "docker is not installed"
docker info >/dev/null 2>&1 || skip_or_fail "the Docker daemon is not reachable (docker info failed)"
if docker compose version >/dev/null 2>&1; then
	compose_bin=(docker compose)
elif command -v docker-compose >/dev/null 2>&1 && docker-compose version >/dev/null 2>&1; then
	compose_bin=(docker-compose)
else
	skip_or_fail "neither 'docker compose' nor 'docker-compose' is available"
fi

project="cohort-compose-test-$$"
export COHORT_IMAGE=${IMAGE:-cohort:compose-test}
export COHORT_NET_PREFIX=${COMPOSE_TEST_NET_PREFIX:-172.29.78}
base=${COMPOSE_TEST_PORT_BASE:-19100}
export COHORT_GRPC_PORT_1=$((base + 1)) COHORT_GRPC_PORT_2=$((base + 2)) COHORT_GRPC_PORT_3=$((base + 3))
export COHORT_HTTP_PORT_1=$((base - 1000 + 1)) COHORT_HTTP_PORT_2=$((base - 1000 + 2)) COHORT_HTTP_PORT_3=$((base - 1000 + 3))
compose=("${compose_bin[@]}" -p "$project" -f "$root/deploy/compose/docker-compose.yml")
services=(cohort-1 cohort-2 cohort-3)
endpoints="127.0.0.1:$COHORT_GRPC_PORT_1,127.0.0.1:$COHORT_GRPC_PORT_2,127.0.0.1:$COHORT_GRPC_PORT_3"
https="127.0.0.1:$COHORT_HTTP_PORT_1,127.0.0.1:$COHORT_HTTP_PORT_2,127.0.0.1:$COHORT_HTTP_PORT_3"

work=$(mktemp -d)
cleanup() {
	rc=$?
	trap - EXIT INT TERM
	if [ "$rc" -ne 0 ]; then
		echo "compose-test: FAILED (exit $rc); container state and logs follow" >&2
		"${compose[@]}" ps >&2 || true
		"${compose[@]}" logs --no-color --tail=80 >&2 || true
	fi
	"${compose[@]}" down -v --remove-orphans >/dev/null 2>&1 || true
	if [ -z "${KEEP_IMAGE:-}" ] && [ "$COHORT_IMAGE" = "cohort:compose-test" ]; then
		docker image rm "$COHORT_IMAGE" >/dev/null 2>&1 || true
	fi
	rm -rf "$work"
	say "cleaned up (project $project)"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

say "building $COHORT_IMAGE and composecheck"
deploy/docker/build-image.sh "$COHORT_IMAGE" >"$work/build.log" 2>&1 || { cat "$work/build.log" >&2; exit 1; }
CGO_ENABLED=0 ${GO:-go} build -trimpath -o "$work/composecheck" ./deploy/compose/composecheck

# container_ids: the services' container IDs after an `up` (asking compose
# once: docker-compose v1 takes a second per call).
container_ids() {
	ids=()
	local s
	for s in "${services[@]}"; do
		ids+=("$("${compose[@]}" ps -q "$s")")
	done
}

# wait_healthy: poll Docker's health status of every service.
wait_healthy() {
	local deadline=$(( $(date +%s) + $1 )) i st all
	while :; do
		all=ok
		for i in "${!services[@]}"; do
			st=$(docker inspect -f '{{if .State.Health}}{{.State.Health.Status}}{{else}}{{.State.Status}}{{end}}' "${ids[$i]}" 2>/dev/null || echo missing)
			[ "$st" = healthy ] || all="${services[$i]} is $st"
		done
		[ "$all" = ok ] && return 0
		if [ "$(date +%s)" -ge "$deadline" ]; then
			echo "compose-test: not healthy after $1s: $all" >&2
			return 1
		fi
		sleep 1
	done
}

# certs_log: the certificate service's output (after an `up`, only that
# up's run of it is there); certs_log_has PATTERN: a line of it matches.
certs_log() { certs_out=$("${compose[@]}" logs --no-color cohort-certs); }
certs_log_has() { grep -E "^cohort-certs[-_ 0-9]*\| $1" <<<"$certs_out" >/dev/null; }

say "compose up (project $project, ${compose_bin[*]}, gRPC $endpoints)"
"${compose[@]}" up -d
container_ids
wait_healthy 90
say "all three containers healthy (health checks over mutual TLS)"
certs_log
for what in "CA" "node/cohort-1" "node/cohort-2" "node/cohort-3" "admin/admin" "client/client"; do
	if ! certs_log_has "created $what "; then
		echo "compose-test: the first start of cohort-certs did not report creating $what:" >&2
		echo "$certs_out" >&2
		exit 1
	fi
done

# The admin certificate and the CA, out of the read-only volume of a
# running node: composecheck presents the one and verifies the nodes with
# the other.
mkdir -p "$work/tls"
for f in ca.crt admin.crt admin.key; do
	docker cp "${ids[0]}:/tls/$f" "$work/tls/$f"
done
tls=(--tls-cert "$work/tls/admin.crt" --tls-key "$work/tls/admin.key" --tls-ca "$work/tls/ca.crt")
say "development PKI created; copied its CA and admin certificate"

containers=$(IFS=,; echo "${ids[*]}")
"$work/composecheck" --phase failover --endpoints "$endpoints" --http "$https" "${tls[@]}" \
	--containers "$containers" --state "$work/state.json" --timeout 150s
wait_healthy 60

say "compose down (volumes kept) and up again"
"${compose[@]}" down
"${compose[@]}" up -d
container_ids
wait_healthy 90
certs_log
if ! certs_log_has "nothing to create"; then
	echo "compose-test: cohort-certs changed the PKI on the second start:" >&2
	echo "$certs_out" >&2
	exit 1
fi
docker cp "${ids[0]}:/tls/ca.crt" "$work/tls/ca-again.crt"
if ! cmp -s "$work/tls/ca.crt" "$work/tls/ca-again.crt"; then
	echo "compose-test: the CA in the cohort-tls volume changed across down/up" >&2
	exit 1
fi
say "the second start kept the PKI (nothing created, same CA)"
logs=$("${compose[@]}" logs --no-color)
for s in "${services[@]}"; do
	if ! grep -E "^$s[-_ ].*raft state found in data dir: not bootstrapping again" <<<"$logs" >/dev/null; then
		echo "compose-test: $s did not report its kept raft state after down/up" >&2
		exit 1
	fi
done
if grep -q "bootstrapped raft cluster" <<<"$logs"; then
	echo "compose-test: a node bootstrapped again after down/up" >&2
	exit 1
fi
say "every node restarted from its volume without bootstrapping"
"$work/composecheck" --phase verify --endpoints "$endpoints" --http "$https" "${tls[@]}" \
	--state "$work/state.json" --timeout 60s

say "PASS"
