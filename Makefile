# Every target loops over the modules of go.work: a root `go test ./...`
# would skip the nested modules (integration, examples).

.DEFAULT_GOAL := help
SHELL := /bin/bash

# The workspace's modules, as directories relative to this one ("." first).
MODULES := $(patsubst $(CURDIR)/%,./%,$(patsubst $(CURDIR),.,$(shell go list -m -f '{{.Dir}}')))
# The modules whose tests take longest after the root's (minutes each with
# -race): go-test starts them right after the first module (the root), so
# that the short ones fill the lane that comes free first (see
# .ci/gotest). Derived from MODULES, so that MODULES=... given on the
# command line is what runs.
SLOW_MODULES := ./benchmarks ./integration
TEST_MODULES := $(firstword $(MODULES)) $(filter $(SLOW_MODULES),$(wordlist 2,$(words $(MODULES)),$(MODULES))) \
	$(filter-out $(SLOW_MODULES),$(wordlist 2,$(words $(MODULES)),$(MODULES)))
# Packs the published modules (the root, publishers/* and adapters/*) at VERSION into a
# local module proxy and checks them as users meet them: see docs/releasing.md.
RELEASE := go run ./tools/cmd/release

GOLANGCI_LINT_VERSION := v2.15.0
GOLANGCI_LINT := go run github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)

# Runs a command with PGOUTBOX_TEST_DATABASE_URL set: as given, else the
# local 127.0.0.1:5432, else a testcontainers PostgreSQL (needs Docker).
WITHPG := go run ./tools/cmd/withpg --

DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/postgres
# AMQP_URL is the RabbitMQ broker of demo-rabbitmq.
AMQP_URL ?= amqp://guest:guest@127.0.0.1:5672/
# Extra `go test` flags, e.g. TESTFLAGS=-count=1 or TESTFLAGS='-run TestEmit -v'.
TESTFLAGS ?=

.PHONY: help
help: ## Show this help
	@echo "Usage: make TARGET"
	@grep -hE '^[a-zA-Z/_-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "}; {printf "  %-17s %s\n", $$1, $$2}'

.PHONY: test
test: ## Run every test of every module with -race against a real PostgreSQL, printing each module's progress (about 13 min; see docs/testing.md)
	@$(WITHPG) $(MAKE) --no-print-directory go-test GOTESTARGS='-race $(TESTFLAGS)'

.PHONY: test/short
test/short: ## Run the tests with -short and without -race
	@$(WITHPG) $(MAKE) --no-print-directory go-test GOTESTARGS='-short $(TESTFLAGS)'

# How long each soak scenario runs in `make soak` (a Go duration).
SOAK_DURATION ?= 60s

.PHONY: soak
soak: ## Run the dispatcher soak tests (heartbeat/completer deadlocks, lost leases) for SOAK_DURATION (60s) per scenario, one at a time, with -race
	@$(WITHPG) env PGOUTBOX_SOAK_DURATION=$(SOAK_DURATION) go test -race -count=1 -parallel 1 -timeout $(GOTESTTIMEOUT) -run '^TestSoak$$' -v ./dispatcher/ $(TESTFLAGS)

# How long `make fuzz` runs each fuzz target (a go test -fuzztime value:
# a duration, or a count of executions such as 1000x).
FUZZTIME ?= 30s

.PHONY: fuzz
fuzz: ## Run every fuzz target (each func Fuzz… in a _test.go file of any module) for FUZZTIME (30s) each, one after another
	@$(WITHPG) $(MAKE) --no-print-directory go-fuzz

# go-fuzz runs `go test -fuzz` once per target, since it takes one target
# per package per run; the targets are found by grepping, so new ones join
# without a change here. A failing input is saved under the package's
# testdata/fuzz/<target>/, where go test replays it from then on. Goes on
# past a failing target and fails at the end if any failed. Go before 1.27
# can end a -fuzztime run with a bare "context deadline exceeded" when a
# worker is mid-input as the time runs out (go.dev/issue/75804, seen here
# on a loaded machine); with no failing input written, that is reported
# and not counted as a failure.
.PHONY: go-fuzz
go-fuzz:
	@status=0; for file in $$(grep -rlE --include='*_test.go' '^func Fuzz[A-Za-z0-9_]*\(' . | sort); do \
		for name in $$(sed -nE 's/^func (Fuzz[A-Za-z0-9_]*)\(.*/\1/p' "$$file"); do \
			dir=$$(dirname "$$file"); \
			echo "==> go test -run '^\$$' -fuzz '^$$name\$$' -fuzztime $(FUZZTIME) $$dir"; \
			out=$$(mktemp); \
			go test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) $(TESTFLAGS) "$$dir" 2>&1 | tee "$$out"; \
			if [ "$${PIPESTATUS[0]}" -ne 0 ]; then \
				if grep -qx '    context deadline exceeded' "$$out" && ! grep -q 'Failing input written' "$$out"; then \
					echo "==> $$name: 'context deadline exceeded' as FUZZTIME ran out, with no failing input: Go's fuzz coordinator race (go.dev/issue/75804, fixed in Go 1.27), not a finding"; \
				else status=1; fi; \
			fi; rm -f "$$out"; \
		done; \
	done; exit $$status

# How long each fault-injection scenario injects faults in `make chaos` (a
# Go duration).
CHAOS_DURATION ?= 60s

.PHONY: chaos
chaos: ## Run the fault-injection scenarios (replica kills and pauses, PostgreSQL crashes) for CHAOS_DURATION (60s) of faults each, one at a time, with -race; rewrites the figures in docs/reliability.md
	@$(WITHPG) env PGOUTBOX_CHAOS_DURATION=$(CHAOS_DURATION) PGOUTBOX_CHAOS_FIGURES=$(CURDIR)/docs/reliability.md \
		go test -C integration -race -count=1 -parallel 1 -timeout 120m -run '^TestChaos' -v . $(TESTFLAGS)

# Extra flags of the benchmark suite, e.g. BENCHFLAGS=-rounds=1. The suite's
# database is DATABASE_URL from the environment when set, else the one withpg
# provides (the local 127.0.0.1:5432, or a container). `-only targets` runs
# just the configurations the targets use (issue 25's, and issue 16's
# latency bounds; see bench/targets). The suite's WAL-per-transition run
# (-case walcost) needs the pg_walinspect extension (PostgreSQL 15 or
# later, contrib) and a superuser, as the rest of the suite does.
BENCHFLAGS ?=
# Where `make bench/targets` writes its report (and, beside it, the .jsonl).
TARGETS_OUT ?= benchmarks/results/targets.md

.PHONY: bench
bench: ## Run the benchmark suite (3 interleaved rounds; writes docs/benchmarks.md and benchmarks/results/), then every module's Go benchmarks
	@$(WITHPG) go run ./benchmarks -case suite -rounds 3 -out docs/benchmarks.md $(BENCHFLAGS)
	@$(WITHPG) $(MAKE) --no-print-directory go-test GOTEST_LANES=1 GOTESTARGS='-bench=. -run=^$$$$ $(TESTFLAGS)'

.PHONY: bench/targets
bench/targets: ## Sit the targets only (issue 25's and issue 16's latency bounds): the runs they use, 3 interleaved rounds; writes TARGETS_OUT
	@$(WITHPG) go run ./benchmarks -case suite -only targets -rounds 3 -out $(TARGETS_OUT) $(BENCHFLAGS)

.PHONY: bench/short
bench/short: ## Run every case of the benchmark suite tiny (N=200), writing nothing: a smoke run
	@$(WITHPG) go run ./benchmarks -case suite -short -out '' $(BENCHFLAGS)

# The time budget of a run of tests (a number with s, m or h): not a
# per-test cap. go-test gives each module's go test what is left of it as
# -timeout, so the whole of make test ends within it (a hung test in each
# of several modules cannot add up past CI's 90 minutes); the other
# targets give it to their one go test. Tests bound their own waits by
# progress or by this budget (internal/testctx), so a slow machine makes a
# run longer, not failed.
GOTESTTIMEOUT ?= 60m

# go-test runs `go test $(GOTESTARGS) ./...` in every module through
# .ci/gotest in two lanes: the root module in one and the slow modules in
# the other, then each lane takes the next module as it comes free (the
# tests mostly wait, so two lanes take little more than the longer one). It goes on past a failing module
# and fails at the end if any failed. It prints each module's start, then
# its output whole with its duration and result, and at the end a summary
# per module followed by go test's own ok/FAIL lines again, so that those
# stay the last lines (.ci/run and CI read them). Each module's -timeout
# is what is left of GOTESTTIMEOUT; a module reached with less than a
# minute left is not run and counts as failed. GOTEST_LANES=1 runs the
# modules one after another (make bench: benchmarks must not share the
# machine with each other).
GOTEST_LANES ?= 2
.PHONY: go-test
go-test:
	@if [[ '$(GOTESTTIMEOUT)' =~ ^([0-9]+)([smh])$$ ]]; then \
		unit=1; [ "$${BASH_REMATCH[2]}" = m ] && unit=60; [ "$${BASH_REMATCH[2]}" = h ] && unit=3600; \
		budget=$$(( 10#$${BASH_REMATCH[1]} * unit )); \
	else echo "GOTESTTIMEOUT must be a whole number of s, m or h (60m), got '$(GOTESTTIMEOUT)'" >&2; exit 2; fi; \
	GOTEST_LANES=$(GOTEST_LANES) bash .ci/gotest "$$budget" $(GOTESTARGS) -- $(TEST_MODULES)

.PHONY: demo
demo: ## Run examples/quickstart against DATABASE_URL (default postgres://postgres@127.0.0.1:5432/postgres)
	DATABASE_URL='$(DATABASE_URL)' go run ./examples/quickstart

.PHONY: demo-nats
demo-nats: ## Run examples/nats: outbox → dispatcher → NATS JetStream (in process unless NATS_URL is set) → consumer
	DATABASE_URL='$(DATABASE_URL)' go run ./examples/nats

.PHONY: demo-rabbitmq
demo-rabbitmq: ## Run examples/rabbitmq: outbox → dispatcher → RabbitMQ (AMQP_URL, default amqp://guest:guest@127.0.0.1:5672/) → consumer
	DATABASE_URL='$(DATABASE_URL)' AMQP_URL='$(AMQP_URL)' go run ./examples/rabbitmq

.PHONY: demo-watermill
demo-watermill: ## Run examples/watermill: outbox → pgwatermill Subscriber → Watermill router → gochannel (RabbitMQ when AMQP_URL is set) → consumer
	DATABASE_URL='$(DATABASE_URL)' go run ./examples/watermill

.PHONY: demo-kafka
demo-kafka: ## Run examples/kafka: outbox → dispatcher → Kafka (in-process kfake unless KAFKA_BROKERS is set) → consumer
	DATABASE_URL='$(DATABASE_URL)' go run ./examples/kafka

.PHONY: demo-relay-nats
demo-relay-nats: ## Run examples/relay-nats: log → relay → NATS JetStream (in process unless NATS_URL is set) → consumer
	DATABASE_URL='$(DATABASE_URL)' go run ./examples/relay-nats

.PHONY: demo-relay-kafka
demo-relay-kafka: ## Run examples/relay-kafka: log → relay → Kafka (in-process kfake unless KAFKA_BROKERS is set) → consumer
	DATABASE_URL='$(DATABASE_URL)' go run ./examples/relay-kafka

.PHONY: demo-console
demo-console: ## Run examples/console: a service mux with the operator console under /outbox (http://127.0.0.1:8081/outbox/, user operator, password demo)
	DATABASE_URL='$(DATABASE_URL)' go run ./examples/console

.PHONY: lint
lint: ## Check gofmt, the release rules, that every go.mod and go.sum is tidy, then run go vet and golangci-lint in every module
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt -l lists files to format:"; echo "$$out"; exit 1; fi
	@echo "==> release check, then go mod tidy in every module against the local proxy"
	@$(RELEASE) check && $(RELEASE) tidy
	@for dir in $(MODULES); do echo "==> go vet ./... in $$dir"; (cd "$$dir" && go vet ./...) || exit 1; done
	@for dir in $(MODULES); do echo "==> golangci-lint run ./... in $$dir"; (cd "$$dir" && $(GOLANGCI_LINT) run ./...) || exit 1; done

.PHONY: build
build: ## Build every module; build and vet each published module alone (GOWORK=off, the root at VERSION from a local proxy); check the core's dependencies
	@for dir in $(MODULES); do echo "==> go build ./... in $$dir"; (cd "$$dir" && go build -o /dev/null ./...) || exit 1; done
	@echo "==> GOWORK=off go build, go vet ./... in each published module, against the local proxy"
	@$(RELEASE) build
	@echo "==> the core module requires no broker client, no testcontainers and no OpenTelemetry SDK or exporter"
	@bad=$$(GOWORK=off go list -m all | grep -E 'testcontainers|twmb/franz-go|nats-io|go.opentelemetry.io/otel/(sdk|exporters)|prometheus' || true); \
		if [ -n "$$bad" ]; then echo "core go.mod pulls in:"; echo "$$bad"; exit 1; fi

.PHONY: tidy
tidy: ## Run go mod tidy in every module (GOWORK=off, our modules at VERSION from the local proxy)
	@$(RELEASE) tidy -w

.PHONY: work/replace
work/replace: ## Print the replace block a go.work outside this checkout needs to use it before VERSION is published (docs/testing.md)
	@$(RELEASE) work

.PHONY: release-check
release-check: ## Check the versions before a release: VERSION, requirements, no replace in published modules, CHANGELOG, go.work, go lines
	@$(RELEASE) check
