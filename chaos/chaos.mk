# The Jepsen-style failure suite (docs/chaos.md). Included from the Makefile.
#
#   make chaos-smoke                 # ~3 min, 3 nodes, every fault kind once, hostile and Kafka (classic group) clients, must be valid (CI)
#   make chaos-leader                # ~3 min, leadership moving and coming back, Kafka consumer group (KIP-848) clients, must be valid (CI)
#   make chaos-bug                   # a deliberately broken cohortd must be caught (CI)
#   make chaos TIME=10m NEMESIS=partition WORKLOAD=offsets NODES=5 SEED=42
#   make chaos-cleanup               # remove what an interrupted run left behind
#
# Every run is mutual TLS by default (a CA and certificates made for the
# run); CHAOS_FLAGS=--tls=false runs plaintext.
#
# netns mode needs root, ip(8) and iptables(8) (chaos/install-deps.sh);
# elsewhere the runner falls back to loopback with kill and pause faults
# only — except with CI=true, where a missing prerequisite fails the run.

TIME       ?= 5m
NODES      ?= 3
NEMESIS    ?= mixed
WORKLOAD   ?= both
SEED       ?= 0
SMOKE_SEED ?= 1
LEADER_SEED ?= 1
CHAOS_FLAGS ?=
CHAOS      := $(BIN)/cohort-chaos

.PHONY: chaos chaos-smoke chaos-leader chaos-bug chaos-bin chaos-cleanup

chaos-bin:
	$(GO) build -o $(BIN)/ ./cmd/cohortd ./cmd/cohortctl ./cmd/cohort-chaos

chaos: chaos-bin
	$(CHAOS) --time $(TIME) --nodes $(NODES) --nemesis $(NEMESIS) --workload $(WORKLOAD) --seed $(SEED) $(CHAOS_FLAGS)

# Short faults and pauses so that 110 s of faults hold every kind for any
# seed (--require-all-kinds refuses a schedule that does not); the hostile
# workload and the Kafka workload (kgo consumers through the Kafka
# listeners, a classic group: JoinGroup/SyncGroup) run beside the others.
chaos-smoke: chaos-bin
	$(CHAOS) --time 110s --nodes 3 --nemesis mixed --workload both --hostile --kafka --seed $(SMOKE_SEED) \
		--quiet-min 1s --quiet-max 3s --fault-min 3s --fault-max 6s --require-all-kinds \
		--name smoke-$$(date +%Y%m%d-%H%M%S)-s$(SMOKE_SEED) $(CHAOS_FLAGS)

# Leadership only: short leader pauses again and again, leadership moved
# away and back, the leader isolated and killed; 90 s of faults, each below
# two thirds of the session timeout, so every generation must be explained
# by churn (checker 6 judges all of them) and a process that led before
# leads again. Both workloads, the chaser reading each new leader at once,
# and the Kafka workload as a consumer group (KIP-848): its member epochs
# and assignments are replicated state the leader's deadlines act on, and
# moving leadership is what they must survive.
chaos-leader: chaos-bin
	$(CHAOS) --time 90s --nodes 3 --nemesis leader-flap --workload both --kafka --kafka-protocol consumer --seed $(LEADER_SEED) \
		--quiet-min 1s --quiet-max 3s --fault-min 2s --fault-max 4s --require-all-kinds \
		--name leader-$$(date +%Y%m%d-%H%M%S)-s$(LEADER_SEED) $(CHAOS_FLAGS)

# cohortd built with -tags chaosbug serves OffsetFetch from any node without
# the read barrier (coordinator/chaosbug.go); partitions make that a stale read. The
# target succeeds only if the suite reports the run INVALID.
chaos-bug: chaos-bin
	$(GO) build -tags chaosbug -o $(BIN)/cohortd-chaosbug ./cmd/cohortd
	$(CHAOS) --cohortd $(BIN)/cohortd-chaosbug --time 60s --nodes 3 --nemesis partition --workload offsets \
		--seed 7 --name chaosbug-$$(date +%Y%m%d-%H%M%S) --expect-invalid $(CHAOS_FLAGS)

chaos-cleanup: chaos-bin
	$(CHAOS) --cleanup
