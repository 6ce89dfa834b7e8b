#!/usr/bin/env bash
# make cluster-up / cluster-down: the compose cluster of
# deploy/compose/docker-compose.yml under project $COMPOSE_PROJECT (default
# cohort), with `docker compose` or `docker-compose`, whichever exists.
#
#   cluster.sh up      build the image if it is missing, start, wait until healthy
#   cluster.sh down    stop and remove the containers; the volumes stay
#   cluster.sh wipe    the same and delete the volumes (all state is lost,
#                      the development CA and certificates too)
#   cluster.sh certs DIR
#                      copy the cluster's CA and admin and client
#                      certificates (with keys) out of a running node into
#                      DIR, for cohortctl and clients on the host
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
export COHORT_IMAGE=${COHORT_IMAGE:-${IMAGE:-cohort:dev}}
if docker compose version >/dev/null 2>&1; then
	compose=(docker compose)
elif command -v docker-compose >/dev/null 2>&1; then
	compose=(docker-compose)
else
	echo "cluster.sh: neither 'docker compose' nor 'docker-compose' is available" >&2
	exit 1
fi
compose+=(-p "${COMPOSE_PROJECT:-cohort}" -f "$root/deploy/compose/docker-compose.yml")

case "${1:-}" in
up)
	if ! docker image inspect "$COHORT_IMAGE" >/dev/null 2>&1; then
		"$root/deploy/docker/build-image.sh" "$COHORT_IMAGE"
	fi
	"${compose[@]}" up -d
	deadline=$(( $(date +%s) + 120 ))
	for s in cohort-1 cohort-2 cohort-3; do
		while :; do
			st=$(docker inspect -f '{{.State.Health.Status}}' "$("${compose[@]}" ps -q "$s")" 2>/dev/null || echo missing)
			[ "$st" = healthy ] && break
			if [ "$(date +%s)" -ge "$deadline" ]; then
				echo "cluster.sh: $s is $st after 120s; see: ${compose[*]} logs $s" >&2
				exit 1
			fi
			sleep 1
		done
	done
	"${compose[@]}" ps
	echo "cluster up: gRPC (mutual TLS) 127.0.0.1:${COHORT_GRPC_PORT_1:-9101},127.0.0.1:${COHORT_GRPC_PORT_2:-9102},127.0.0.1:${COHORT_GRPC_PORT_3:-9103}; HTTP 127.0.0.1:${COHORT_HTTP_PORT_1:-8101}..${COHORT_HTTP_PORT_3:-8103}"
	echo "certificates for the host: $0 certs DIR"
	;;
down) "${compose[@]}" down ;;
wipe) "${compose[@]}" down -v ;;
certs)
	dir=${2:?usage: $0 certs DIR}
	id=$("${compose[@]}" ps -q cohort-1)
	if [ -z "$id" ]; then
		echo "cluster.sh: cohort-1 has no container; start the cluster first ($0 up)" >&2
		exit 1
	fi
	mkdir -p "$dir"
	chmod 0700 "$dir"
	for f in ca.crt admin.crt admin.key client.crt client.key; do
		docker cp "$id:/tls/$f" "$dir/$f"
	done
	chmod 0600 "$dir/admin.key" "$dir/client.key"
	echo "copied ca.crt, admin.crt/.key and client.crt/.key into $dir; e.g."
	echo "  COHORT_TLS_CERT=$dir/admin.crt COHORT_TLS_KEY=$dir/admin.key COHORT_TLS_CA=$dir/ca.crt \\"
	echo "    cohortctl --endpoints 127.0.0.1:${COHORT_GRPC_PORT_1:-9101},127.0.0.1:${COHORT_GRPC_PORT_2:-9102},127.0.0.1:${COHORT_GRPC_PORT_3:-9103} cluster status"
	;;
*)
	echo "usage: $0 up|down|wipe|certs DIR" >&2
	exit 2
	;;
esac
