# Concord's build, run and test entry points. `make test` is the command CI
# runs (through .ci/run); it installs the one tool it needs, the nats CLI,
# into ./bin.

GO              ?= go
BIN             := $(CURDIR)/bin
NATSCLI_VERSION := v0.5.0
RACE_PKGS       := ./fsm/... ./subjects/... ./schema/... ./service/... ./client/... ./cmd/...

CLUSTER_DIR     := $(CURDIR)/cluster-data
CLUSTER_ROUTES  := nats://127.0.0.1:6222,nats://127.0.0.1:6223,nats://127.0.0.1:6224

.PHONY: build run cluster cluster-restart cluster-stop test test-steps lint unit blackbox robustness robustness-short robustness-tools test-tools tools bench bench-etcd bench-scale bench-history bench-tenants fuzz fuzz-short clean

build:
	$(GO) build -o $(BIN)/concord ./cmd/concord

# One node: embedded NATS on 127.0.0.1:4222, single-node Raft, data in
# ./concord-data. It builds concord and the nats CLI into ./bin first, for the
# quickstart's other terminals.
run: build tools
	@echo "concord and nats are in $(BIN); in another terminal: export PATH=$(BIN):\$$PATH"
	@echo "metrics: http://127.0.0.1:9111/metrics (and /healthz, /readyz)"
	$(BIN)/concord serve --metrics-listen 127.0.0.1:9111

# Three nodes on loopback, in the background: NATS clients on 4222-4224,
# NATS routes on 6222-6224, Raft on 7001-7003, metrics on 9111-9113, data
# and logs in ./cluster-data. n1 bootstraps, n2 and n3 join. Stop with make
# cluster-stop; restart one node after a kill with make cluster-restart N=2.
# CLUSTER_NODE is node $$i's command line, the same for both.
CLUSTER_NODE = $(BIN)/concord serve --node-id n$$i --data-dir $(CLUSTER_DIR)/n$$i --raft-addr 127.0.0.1:700$$i \
	--nats-listen 127.0.0.1:422$$((i+1)) --nats-cluster 127.0.0.1:622$$((i+1)) --nats-routes $(CLUSTER_ROUTES) \
	--metrics-listen 127.0.0.1:911$$i
cluster: build
	@mkdir -p $(CLUSTER_DIR)
	@for i in 1 2 3; do \
	  mode=--join; [ $$i = 1 ] && mode=--bootstrap; \
	  $(CLUSTER_NODE) $$mode > $(CLUSTER_DIR)/n$$i.log 2>&1 & echo $$! > $(CLUSTER_DIR)/n$$i.pid; \
	done
	@for i in $$(seq 100); do \
	  grep -q "joined the cluster" $(CLUSTER_DIR)/n2.log 2>/dev/null && grep -q "joined the cluster" $(CLUSTER_DIR)/n3.log 2>/dev/null && break; sleep 0.1; done
	@echo "cluster up: NATS_URL=nats://127.0.0.1:4222,nats://127.0.0.1:4223,nats://127.0.0.1:4224 (logs in $(CLUSTER_DIR))"
	@echo "metrics: http://127.0.0.1:9111/metrics (n1), :9112 (n2), :9113 (n3)"

# A node with state neither bootstraps again nor needs to join: --join
# only confirms its membership.
cluster-restart: build
	@case "$(N)" in 1|2|3) ;; *) echo "usage: make cluster-restart N=1|2|3"; exit 2;; esac
	@i=$(N); if [ -f $(CLUSTER_DIR)/n$$i.pid ] && kill -0 $$(cat $(CLUSTER_DIR)/n$$i.pid) 2>/dev/null; then \
	  echo "n$$i is running (pid $$(cat $(CLUSTER_DIR)/n$$i.pid))"; exit 1; fi; \
	  $(CLUSTER_NODE) --join >> $(CLUSTER_DIR)/n$$i.log 2>&1 & echo $$! > $(CLUSTER_DIR)/n$$i.pid; \
	  echo "n$$i restarted (log in $(CLUSTER_DIR)/n$$i.log)"

cluster-stop:
	@for f in $(CLUSTER_DIR)/*.pid; do [ -f "$$f" ] && kill $$(cat $$f) 2>/dev/null; rm -f "$$f"; done; true

# The steps run under a marker, CONCORD_TEST_RUN, that every process they
# start inherits; at the end, whether the steps passed or not,
# tests/leftovers.sh lists, kills and fails on any process of the run that
# is still alive.
test:
	@run=concord-test-$$$$-$$(date +%s%N); status=0; \
	  CONCORD_TEST_RUN=$$run $(MAKE) --no-print-directory test-steps || status=$$?; \
	  bash tests/leftovers.sh $$run || status=1; \
	  exit $$status

test-steps: lint unit fuzz-short blackbox robustness-short

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags failpoints ./service/...

unit:
	$(GO) test -race -count=1 $(RACE_PKGS)
	$(GO) test -count=1 -tags failpoints ./service/failpoint/

blackbox: tools test-tools
	PATH="$(BIN):$$PATH" CONCORD_REQUIRE_NATS_CLI=1 CONCORD_REQUIRE_SYSTEMD_ANALYZE=1 CONCORD_REQUIRE_CHROMIUM=1 $(GO) test -count=1 -timeout 13m $$($(GO) list ./tests/... | grep -v /tests/robustness)
	cd deploy/check && CONCORD_REQUIRE_PROMTOOL=1 $(GO) test -count=1 -timeout 10m ./...

# The robustness suite (tests/robustness, see its README.md): power cuts on
# lazyfs, a FUSE filesystem that throws away what was not fsynced,
# packet-level faults between network namespaces (nftables), and crashes at
# failpoints (a -tags failpoints build it makes itself), against the real
# binary. It needs root, /dev/fuse, iproute2, nsenter and nftables
# (nftables installed here with apt-get when missing and root). `make robustness` runs the long
# profile (more cuts per scenario); `make test` runs the short one, and
# under CI (CI set) a scenario that cannot run fails instead of skipping.
ROBUSTNESS_PROFILE ?= long
robustness: robustness-tools
	CONCORD_REQUIRE_ROBUSTNESS=1 CONCORD_ROBUSTNESS_PROFILE=$(ROBUSTNESS_PROFILE) $(GO) test -p 1 -count=1 -timeout 30m -v ./tests/robustness/...

robustness-short: robustness-tools
	CONCORD_REQUIRE_ROBUSTNESS=$${CI:+1} CONCORD_ROBUSTNESS_PROFILE=short $(GO) test -p 1 -count=1 -timeout 8m ./tests/robustness/...

# The black-box tests check the systemd unit with systemd-analyze
# (Debian's systemd package) and the console in a browser (Debian's
# chromium), and deploy/check the alert rules and the Prometheus config
# with promtool (Debian's prometheus package), installed here with apt-get
# when missing and root; without them they fail, saying so.
test-tools:
	@command -v systemd-analyze >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq systemd >/dev/null; } || \
	  echo "systemd-analyze is not installed (Debian: apt-get install systemd): the deploy unit test will fail"
	@command -v promtool >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null; } || \
	  echo "promtool is not installed (Debian: apt-get install prometheus): the alert rule tests will fail"
	@command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null; } || \
	  echo "chromium is not installed (Debian: apt-get install chromium): the console's browser test will fail"

robustness-tools:
	@command -v nft >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nftables >/dev/null; } || \
	  echo "nftables is not installed: the network scenarios skip (and fail under CI)"

tools: $(BIN)/nats

$(BIN)/nats:
	GOBIN=$(BIN) $(GO) install github.com/nats-io/natscli/nats@$(NATSCLI_VERSION)

# The standard set of `concord bench` workloads (see README, Performance),
# twice, on fresh servers with data and logs in a temporary directory: first
# a single node (NATS on 127.0.0.1:14222, Raft on 17422), then a 3-node
# cluster (NATS clients on 14231-14233, routes on 16231-16233, Raft on
# 17431-17433; n1 bootstraps, n2 and n3 join), its three client URLs given
# to --url. A set starts once `concord status` reports every member
# reachable. Every server is killed at the end, on failure or Ctrl-C too.
# Extra flags for concord bench: make bench BENCH_FLAGS="--duration 2s".
BENCH_SINGLE_URL  := nats://127.0.0.1:14222
BENCH_CLUSTER_URL := nats://127.0.0.1:14231,nats://127.0.0.1:14232,nats://127.0.0.1:14233
BENCH_ROUTES      := nats://127.0.0.1:16231,nats://127.0.0.1:16232,nats://127.0.0.1:16233
BENCH_SERVE       := $(BIN)/concord serve --max-leases 10000000 --log-level warn

bench: build
	@dir=$$(mktemp -d); pids=; status=0; \
	  stop() { for p in $$pids; do kill $$p 2>/dev/null; done; for p in $$pids; do wait $$p 2>/dev/null; done; pids=; }; \
	  trap 'stop; rm -rf $$dir' EXIT; trap 'exit 130' INT TERM HUP; \
	  logs() { for f in $$dir/*.log; do echo "--- $$f" >&2; tail -n 20 $$f >&2; done; }; \
	  ready() { end=$$(($$(date +%s) + 30)); \
	    while [ $$(date +%s) -lt $$end ]; do \
	      for p in $$pids; do kill -0 $$p 2>/dev/null || { echo "bench: server $$p exited" >&2; logs; return 1; }; done; \
	      up=$$($(BIN)/concord status --server $$1 --timeout 1s --json 2>/dev/null | grep -o '"reachable":true' | wc -l); \
	      [ "$$up" -eq $$2 ] && return 0; sleep 0.2; done; \
	    echo "bench: $$1 did not report $$2 reachable member(s) within 30 s" >&2; logs; return 1; }; \
	  run() { if ready $$1 $$2; then $(BIN)/concord bench --url $$1 $(BENCH_FLAGS) || { status=1; logs; }; else status=1; fi; stop; rm -f $$dir/*.log; }; \
	  echo "=== concord bench: single node ($(BENCH_SINGLE_URL)) ==="; \
	  $(BENCH_SERVE) --data-dir $$dir/single --nats-listen $(patsubst nats://%,%,$(BENCH_SINGLE_URL)) \
	    --raft-addr 127.0.0.1:17422 > $$dir/single.log 2>&1 & pids="$$pids $$!"; \
	  run $(BENCH_SINGLE_URL) 1; \
	  echo "=== concord bench: 3-node cluster ($(BENCH_CLUSTER_URL)) ==="; \
	  for i in 1 2 3; do \
	    mode=--join; [ $$i = 1 ] && mode=--bootstrap; \
	    $(BENCH_SERVE) --node-id n$$i --data-dir $$dir/n$$i --raft-addr 127.0.0.1:1743$$i \
	      --nats-listen 127.0.0.1:1423$$i --nats-cluster 127.0.0.1:1623$$i --nats-routes $(BENCH_ROUTES) $$mode \
	      > $$dir/n$$i.log 2>&1 & pids="$$pids $$!"; \
	  done; \
	  run $(BENCH_CLUSTER_URL) 3; \
	  exit $$status

# Concord against etcd in one run, with tests/etcdbench: for one node against
# one etcd member, then three against three (loopback, fresh data in a
# temporary directory every round), --rounds rounds (3) in which Concord and
# etcd alternate going first, the same closed-loop grant, put and keep-alive
# load against each, and a NATS echo responder on Concord's bus as the floor.
# Prints the medians: ops/s, p50/p99, server and client CPU per op, Concord
# / etcd. Needs etcd on PATH (Debian: apt-get install -y etcd-server); the
# program says so and stops if it is missing. Every server is stopped at the
# end, on failure or Ctrl-C too. Flags (etcdbench -h):
# make bench-etcd BENCH_FLAGS="--duration 5s --json".
bench-etcd: build
	cd tests/etcdbench && $(GO) build -o $(BIN)/etcdbench .
	$(BIN)/etcdbench --concord $(BIN)/concord $(BENCH_FLAGS)

# Concord against etcd at scale, with `etcdbench scale` (tests/etcdbench):
# one fresh single Concord node, then one fresh single etcd member (never
# both at once), each loaded with 1,000,000 keys of 100-byte values through
# the API; then puts/s, resident memory, data directory, kill -9 until a
# linearizable get answers, count_only over all keys, put p50/p99 alone and
# beside reads of a 100,000-key prefix, 100,000 leases expiring at once and
# 100,000 kept alive (server CPU). Prints both columns and Concord / etcd
# with the machine and the date. A run takes minutes; every server is
# stopped at the end, on failure or Ctrl-C too. Not part of make test.
# Flags (etcdbench scale -h): a quick run with
# make bench-scale BENCH_SCALE_FLAGS="--keys 20000 --leases 5000";
# issue 15's rewrites (every key written 5 times) with --rewrites 5.
BENCH_SCALE_FLAGS ?=

bench-scale: build
	cd tests/etcdbench && $(GO) build -o $(BIN)/etcdbench .
	$(BIN)/etcdbench scale --concord $(BIN)/concord $(BENCH_SCALE_FLAGS)

# Put throughput with the key history kept against kept to the minimum,
# with `etcdbench history` (tests/etcdbench; Concord only, no etcd): two
# fresh single nodes, one with the default retention and one with
# --history-revisions 1 (the least concord serve accepts), each with its
# own embedded NATS and data directory, both up for the whole run; puts
# bring both to revision 1,000,000 first (--fill), so that the default
# server's history is full in every round; then 6 rounds of the
# closed-loop put workload (32 clients, 1 s warm-up, 10 s) against one and
# then the other, which goes first alternating. Prints
# every round, the medians and default ÷ minimal; every server is stopped
# at the end, on failure or Ctrl-C too. Not part of make test. Flags
# (etcdbench history -h): make bench-history BENCH_HISTORY_FLAGS="--rounds
# 4 --duration 5s"; --baseline PATH runs an older concord as the second
# server instead.
BENCH_HISTORY_FLAGS ?=

bench-history: build
	cd tests/etcdbench && $(GO) build -o $(BIN)/etcdbench .
	$(BIN)/etcdbench history --concord $(BIN)/concord $(BENCH_HISTORY_FLAGS)

# The tenants' figures of docs/performance.md, with tests/benchtenants/run.sh:
# server CPU per put and keep-alive as the default tenant, a tenant by header
# and a tenant through the NATS import; 100 tenants x 1,000 leases against
# 100,000 of one; a tenant's puts beside another flooding past its rate.
# Fresh single nodes on loopback, stopped at the end. Not part of make test.
# make bench-tenants BENCH_TENANTS_ROUNDS=3 BENCH_TENANTS_DURATION=5s;
# BASELINE=path/to/older/concord adds that binary against this one.
BENCH_TENANTS_ROUNDS ?= 5
BENCH_TENANTS_DURATION ?= 10s

bench-tenants: build
	tests/benchtenants/run.sh $(BIN)/concord $(BENCH_TENANTS_ROUNDS) $(BENCH_TENANTS_DURATION)

# Every fuzz target, FUZZTIME each. CI runs them briefly (fuzz-short); run
# `make fuzz` for a longer search. New crashers land in testdata/fuzz and
# then run as plain tests. fuzz-short counts inputs instead of seconds:
# with a duration, Go before 1.27 can fail a target with "context deadline
# exceeded" when the time runs out under load (golang/go#75804, no crasher
# written), and CI machines are loaded.
FUZZTIME ?= 60s
FUZZ_TARGETS := ./service/decode:FuzzDecodeRequest ./service/decode:FuzzFastDecode ./fsm:FuzzDecodeApply ./fsm:FuzzDecodeApplyTxn ./fsm:FuzzRestoreV5 ./schema:FuzzKeyValueAppendJSON

fuzz:
	@for t in $(FUZZ_TARGETS); do \
	  pkg=$${t%%:*}; name=$${t##*:}; echo "fuzz $$name ($$pkg) for $(FUZZTIME)"; \
	  $(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
	done

fuzz-short:
	@$(MAKE) --no-print-directory fuzz FUZZTIME=40000x

clean:
	rm -rf $(BIN) concord-data cluster-data
