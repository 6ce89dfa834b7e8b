# Cohort — build, run and test. Everything runs through the Go toolchain;
# buf, protoc-gen-go, protoc-gen-go-grpc and staticcheck are Go tools pinned
# in go.mod, so nothing needs installing by hand.

GO       ?= go
BIN      := bin
PKGS     := ./...
# -race always, nothing cached; the FSM property tests run rapid's default 100 cases
# per property (raise with: go test ./fsm/ -rapid.checks=N). -vet=off: `make
# test` runs the whole of go vet, test files included, in lint.
TESTFLAGS ?= -race -count=1 -timeout 20m -vet=off

.PHONY: all build run test unit proto proto-check lint bench fuzz fuzz-ci mutants mutants-tests clean

all: build

build:
	$(GO) build -o $(BIN)/ ./cmd/...

# A local three-node cluster on 127.0.0.1 in the foreground (data in ./data,
# gRPC :9001-9003, HTTP :8001-8003). Ctrl-C stops it cleanly.
run: build
	scripts/run-cluster.sh $(BIN)/cohortd ./data

# A development PKI in certs/dev (git-ignored): a CA, node certificates for
# CERT_NODES, an admin certificate (cohortctl) and a client one. Running it
# again creates only what is missing. Node certificates name node/<id>, so
# the IDs must be the nodes' --node-id (`make run` names its nodes node1..3).
CERT_NODES ?= node1,node2,node3
.PHONY: certs
certs:
	$(GO) build -o $(BIN)/ ./cmd/cohortctl
	$(BIN)/cohortctl certs dev --dir certs/dev --nodes $(CERT_NODES)

# Everything CI checks: generated code is current, lint is clean, and every
# test passes under the race detector. proto-check, which on a fresh
# machine is mostly compiling buf (over two minutes of both cores), runs
# beside lint and unit at the lowest CPU priority: it takes the CPU that
# the tests leave while they wait on timers and real processes, and its
# output follows theirs.
test:
	@log=$$(mktemp) && trap 'rm -f "$$log"' EXIT && \
	{ nice -n 19 $(MAKE) --no-print-directory proto-check >"$$log" 2>&1 & pid=$$!; } && \
	rc=0 && { $(MAKE) --no-print-directory lint unit || rc=$$?; } && \
	{ wait $$pid || rc=$$((rc + 1)); } && \
	cat "$$log" && exit $$rc

unit:
	$(GO) test $(TESTFLAGS) $(PKGS)

proto:
	cd proto && $(GO) tool buf lint && $(GO) tool buf generate

# Regenerates into a scratch copy and fails if the committed gen/ differs.
proto-check:
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	cp -r proto "$$tmp/proto" && \
	(cd proto && $(GO) tool buf lint) && \
	($(GO) tool buf generate "$$tmp/proto" --template "$$tmp/proto/buf.gen.yaml" -o "$$tmp/proto") && \
	if ! diff -r gen "$$tmp/gen" >/dev/null; then \
		echo "gen/ is stale: run 'make proto' and commit the result" >&2; diff -r gen "$$tmp/gen" | head -20 >&2; exit 1; \
	fi && echo "proto-check: gen/ is current"

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '^gen/')); \
	if [ -n "$$out" ]; then echo "gofmt wants to rewrite:" >&2; echo "$$out" >&2; exit 1; fi
	$(GO) vet $(PKGS)
	$(GO) tool staticcheck $(PKGS)

# Benchmarks whose results are recorded in docs/benchmarks.md.
bench:
	$(GO) test -run '^$$' -bench '^Benchmark(Apply|Snapshot|Rebalance|ServerSide)' -benchtime 2s ./fsm/
	$(GO) test -run '^$$' -bench '^BenchmarkWorstApply' -benchtime 3x -timeout 30m ./fsm/
	$(GO) test -run '^$$' -bench '^BenchmarkStateHeap' -benchtime 1x -timeout 30m ./fsm/
	$(GO) test -run '^$$' -bench . -benchtime 1x -timeout 30m ./raftnode/
	$(GO) test -run '^$$' -bench . ./assign/
	$(GO) test -run '^$$' -bench '^BenchmarkServe_Heartbeat' -benchtime 3s ./kafka/

# The embedded etcd comparison target (bench/etcd, a module of its own so etcd
# stays out of go.mod): Put on three etcd members at cohort-bench commits'
# concurrencies, as a --json report beside docs/bench/commits.json. Not part of
# test or CI. ETCD_BENCH_FLAGS passes flags (e.g. --duration 10s).
ETCD_BENCH_FLAGS ?=
.PHONY: bench-etcd
bench-etcd:
	cd bench/etcd && $(GO) build -o $(abspath $(BIN))/etcd-bench .
	$(BIN)/etcd-bench --json $(ETCD_BENCH_FLAGS) > docs/bench/etcd.json.tmp || { rm -f docs/bench/etcd.json.tmp; exit 1; }
	mv docs/bench/etcd.json.tmp docs/bench/etcd.json

# The log store comparison (issue 14; bench/logstore, a module of its own
# that drives hashicorp/raft directly, below raftnode): Cohort's commit rate on a three-node
# in-process cluster over a long run with frequent snapshots, on each store
# of LOGSTORE_STORES in turn, one row per 10 s, as one --json report for
# cohort-bench plot. Not part of test or CI: by default two 30-minute runs.
# LOGSTORE_BENCH_FLAGS passes flags (e.g. --duration 5m).
LOGSTORE_STORES ?= bolt,wal
LOGSTORE_BENCH_FLAGS ?=
.PHONY: bench-logstore
bench-logstore:
	cd bench/logstore && $(GO) build -o $(abspath $(BIN))/logstore-bench .
	$(BIN)/logstore-bench --json --store $(LOGSTORE_STORES) $(LOGSTORE_BENCH_FLAGS) > docs/bench/logstore.json.tmp || { rm -f docs/bench/logstore.json.tmp; exit 1; }
	mv docs/bench/logstore.json.tmp docs/bench/logstore.json

# The Kafka comparison (issue 15; bench/kafka, a module of its own so
# franz-go's kfake stays out of go.mod): the same kgo clients against the
# Kafka listeners of three cohortd processes and against kfake (in the
# bench's process): rebalance time of classic groups at 10/100/1,000
# members and standalone OffsetCommits at 1/16/256 committers, as one
# --json report. Not part of test or CI. KAFKA_BENCH_FLAGS passes flags
# (e.g. --heartbeat 100ms).
KAFKA_BENCH_FLAGS ?=
.PHONY: bench-kafka
bench-kafka: build
	cd bench/kafka && $(GO) build -o $(abspath $(BIN))/kafka-bench .
	$(BIN)/kafka-bench --json --cohortd $(BIN)/cohortd $(KAFKA_BENCH_FLAGS) > docs/bench/kafka.json.tmp || { rm -f docs/bench/kafka.json.tmp; exit 1; }
	mv docs/bench/kafka.json.tmp docs/bench/kafka.json

# Every fuzz target (fsm: log entries and snapshots; assign: the consumer
# protocol decoders; rpc: one per gRPC method) for FUZZTIME each; the small
# inputs that reached new code are kept in <pkg>/testdata/fuzz and replayed
# by `make test`. fuzz-ci is CI's short budget, keeping nothing: the fsm and
# assign targets only, which run thousands of new inputs in 3 s. The rpc
# targets start a server (or a cluster) per input: in 3 s they do not get
# through the corpus `make test` already replays, and their instrumented
# build alone costs CI a minute, so they fuzz in `make fuzz` only.
FUZZTIME ?= 5m
fuzz:
	GO=$(GO) scripts/fuzz.sh -t $(FUZZTIME)

fuzz-ci:
	GO=$(GO) scripts/fuzz.sh -t 3s --no-keep ./fsm ./assign

# The mutation suite (docs/testing.md): each test/mutants/*.patch is a bug
# that its named tests, and the chaos schedules it names, must catch.
# mutants-tests is CI's share: every mutant against its tests, no chaos runs.
mutants: chaos-bin
	scripts/mutants.sh run

mutants-tests:
	MUTANTS_JOBS=2 scripts/mutants.sh run --no-chaos

clean:
	rm -rf $(BIN)

# Deployment (image, compose cluster, compose-test, k8s manifests) and the
# Jepsen-style failure suite each keep their targets beside their code.
include deploy/deploy.mk
include chaos/chaos.mk
