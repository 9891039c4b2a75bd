# Concord's build, run and test entry points. `make test` is the command CI
# runs (through .ci/run); it installs the one tool it needs, the nats CLI,
# into ./bin.

GO              ?= go
BIN             := $(CURDIR)/bin
NATSCLI_VERSION := v0.5.0
RACE_PKGS       := ./fsm/... ./subjects/... ./schema/... ./service/... ./client/...

CLUSTER_DIR     := $(CURDIR)/cluster-data
CLUSTER_ROUTES  := nats://127.0.0.1:6222,nats://127.0.0.1:6223,nats://127.0.0.1:6224

.PHONY: build run cluster cluster-stop test lint unit blackbox tools bench bench-etcd fuzz clean

build:
	$(GO) build -o $(BIN)/concord ./cmd/concord

# One node: embedded NATS on 127.0.0.1:4222, single-node Raft, data in ./concord-data.
run:
	$(GO) run ./cmd/concord serve

# Three nodes on loopback, in the background: NATS clients on 4222-4224,
# NATS routes on 6222-6224, Raft on 7001-7003, data and logs in
# ./cluster-data. n1 bootstraps, n2 and n3 join. Stop with make cluster-stop.
cluster: build
	@mkdir -p $(CLUSTER_DIR)
	@for i in 1 2 3; do \
	  mode=--join; [ $$i = 1 ] && mode=--bootstrap; \
	  $(BIN)/concord serve --node-id n$$i --data-dir $(CLUSTER_DIR)/n$$i --raft-addr 127.0.0.1:700$$i \
	    --nats-listen 127.0.0.1:422$$((i+1)) --nats-cluster 127.0.0.1:622$$((i+1)) --nats-routes $(CLUSTER_ROUTES) $$mode \
	    > $(CLUSTER_DIR)/n$$i.log 2>&1 & echo $$! > $(CLUSTER_DIR)/n$$i.pid; \
	done
	@for i in $$(seq 100); do \
	  grep -q "joined the cluster" $(CLUSTER_DIR)/n2.log 2>/dev/null && grep -q "joined the cluster" $(CLUSTER_DIR)/n3.log 2>/dev/null && break; sleep 0.1; done
	@echo "cluster up: NATS_URL=nats://127.0.0.1:4222,nats://127.0.0.1:4223,nats://127.0.0.1:4224 (logs in $(CLUSTER_DIR))"

cluster-stop:
	@for f in $(CLUSTER_DIR)/*.pid; do [ -f "$$f" ] && kill $$(cat $$f) 2>/dev/null; rm -f "$$f"; done; true

test: lint unit blackbox

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

unit:
	$(GO) test -race -count=1 $(RACE_PKGS)

blackbox: tools
	PATH="$(BIN):$$PATH" CONCORD_REQUIRE_NATS_CLI=1 $(GO) test -count=1 -timeout 10m ./tests/...

tools: $(BIN)/nats

$(BIN)/nats:
	GOBIN=$(BIN) $(GO) install github.com/nats-io/natscli/nats@$(NATSCLI_VERSION)

# Load a fresh single node with every workload (see README, Performance).
bench: build
	@dir=$$(mktemp -d); \
	  $(BIN)/concord serve --data-dir $$dir/data --nats-listen 127.0.0.1:14222 --raft-addr 127.0.0.1:17422 \
	    --max-leases 10000000 --log-level warn & pid=$$!; \
	  sleep 2; $(BIN)/concord bench --url nats://127.0.0.1:14222 $(BENCH_FLAGS); status=$$?; \
	  kill $$pid; wait $$pid; rm -rf $$dir; exit $$status

# The same throughput workloads against etcd on this machine (needs etcd:
# apt-get install etcd-server).
bench-etcd:
	@dir=$$(mktemp -d); \
	  etcd --data-dir $$dir/etcd --listen-client-urls http://127.0.0.1:12379 --advertise-client-urls http://127.0.0.1:12379 \
	    --listen-peer-urls http://127.0.0.1:12380 --log-level error > $$dir/etcd.log 2>&1 & pid=$$!; \
	  sleep 3; (cd tests/etcdbench && $(GO) run . --endpoint 127.0.0.1:12379 $(BENCH_FLAGS)); status=$$?; \
	  kill $$pid; wait $$pid; rm -rf $$dir; exit $$status

fuzz:
	$(GO) test -run XXX -fuzz FuzzDecodeRequest -fuzztime 60s ./service

clean:
	rm -rf $(BIN) concord-data cluster-data
