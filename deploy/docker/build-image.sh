#!/usr/bin/env bash
# Builds the Cohort server image without any registry: static binaries
# compiled here, then `docker build` of deploy/docker/Dockerfile (FROM
# scratch) over a staged context holding only what the image needs.
#
#   deploy/docker/build-image.sh [IMAGE]     (default cohort:dev, or $IMAGE)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
image=${1:-${IMAGE:-cohort:dev}}
go=${GO:-go}

ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
mkdir -p "$ctx/data" "$ctx/tls" "$ctx/etc"
cp "$root/deploy/docker/Dockerfile" "$ctx/Dockerfile"
cp "$root/deploy/docker/etc/passwd" "$root/deploy/docker/etc/group" "$ctx/etc/"

version=$(git -C "$root" describe --always --dirty 2>/dev/null || echo unknown)
(cd "$root" && CGO_ENABLED=0 "$go" build -trimpath -ldflags='-s -w' -o "$ctx/" ./cmd/cohortd ./cmd/cohortctl)

# The classic builder and BuildKit both treat `scratch` as built in, so
# nothing is pulled.
docker build --label "org.opencontainers.image.revision=$version" \
	-t "$image" "$ctx"
echo "built image $image ($version)"
