# Deployment targets (deploy/, docs/deploy.md). Included from the Makefile
# with `include deploy/deploy.mk`.
#
#   make image          static cohortd + cohortctl in a FROM-scratch image ($(IMAGE))
#   make cluster-up     three-node compose cluster on 127.0.0.1, waits until healthy
#   make cluster-down   stop it; the volumes (the cluster's state) stay
#   make cluster-wipe   stop it and delete the volumes
#   make compose-test   the compose cluster end to end: kill the leader, rejoin, down/up
#   make k8s-check      the Kubernetes manifests decode strictly and agree with cohortd

GO    ?= go
IMAGE ?= cohort:dev

.PHONY: image cluster-up cluster-down cluster-wipe compose-test k8s-check

image:
	GO=$(GO) deploy/docker/build-image.sh $(IMAGE)

cluster-up:
	GO=$(GO) IMAGE=$(IMAGE) deploy/compose/cluster.sh up

cluster-down:
	deploy/compose/cluster.sh down

cluster-wipe:
	deploy/compose/cluster.sh wipe

# Skips (exit 0) where Docker or compose is missing, unless CI=true.
compose-test:
	GO=$(GO) deploy/compose/compose-test.sh

k8s-check:
	$(GO) test -count=1 ./deploy/k8s/
