# Bookstore: `make run` starts the system on this machine, `make test` runs every test.
# `make help` lists the rest.

SHELL   := /bin/bash
PKGS    := github.com/bookstore-go/bookstore/...
# The race pass covers the code that runs concurrently in-process: the shared module, its
# test scaffolding and every service, whose tests also start the service binaries built
# with -race. e2e, deploy and the chaos harness run those same binaries again as whole
# systems; under -race they would double .ci/run's time for no code the pass has not
# already watched. testenv/cluster's own tests are left out too: a minute of servers
# booted and killed, and its code runs under -race in the cluster e2e test below.
RACE_PKGS := github.com/bookstore-go/bookstore/services/... github.com/bookstore-go/bookstore/testenv github.com/bookstore-go/bookstore/testenv/httpapitest
# The one e2e test the race pass runs too: the services' reconnection to surviving broker
# nodes and to a promoted Postgres standby runs in no other test.
CLUSTER_E2E := TestOrdersPlacedAcrossABrokerNodeLossAndAPostgresFailoverAreEachEmailedOnce
SERVICES := ordering inventory notification emailprovider storefront
SQLC    := cd tools/sqlc && GOWORK=off go tool sqlc -f ../../sqlc.yaml

.DEFAULT_GOAL := help

.PHONY: help
help: ## list the targets
	@grep -hE '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-14s %s\n", $$1, $$2}'

# SERVERS=compose: Postgres and RabbitMQ are docker compose's (`docker compose up -d --wait
# postgres rabbitmq`, or `make up`), reached with compose's credentials: the superuser
# postgres/postgres and the broker's admin/admin (compose's broker has no guest). A value
# set in the environment wins. docs/docker.md#running-the-demos-against-composes-servers
SERVERS ?= local
ifeq ($(SERVERS),compose)
export DATABASE_ADMIN_URL ?= postgres://postgres:postgres@localhost:5432/postgres?sslmode=disable
export RABBITMQ_MANAGEMENT_URL ?= http://admin:admin@localhost:15672
# The demos' own broker user; `make run` logs each service in as its own user instead.
demo: export AMQP_URL ?= amqp://admin:admin@localhost:5672/
else ifneq ($(SERVERS),local)
$(error SERVERS=$(SERVERS): want local (this machine's servers, started if down) or compose)
endif

.PHONY: services
services: ## start local Postgres and RabbitMQ if they are down (none started if they answer; SERVERS=compose: use compose's)
	@deploy/local/services.sh

.PHONY: build
build: ## build the four service binaries and the storefront into bin/ (CGO_ENABLED=0, as the Dockerfile does)
	@mkdir -p bin
	@for s in $(SERVICES); do CGO_ENABLED=0 go build -trimpath -o bin/$$s ./services/$$s/cmd/$$s || exit 1; done

.PHONY: run
run: services build ## run the whole system natively, the storefront on http://localhost:8080 (Ctrl-C stops it)
	@deploy/local/run.sh

.PHONY: test
test: services ## run every test against the local Postgres and RabbitMQ
	go test -count=1 -timeout 20m $(PKGS)

# make test-current: the tests that talk to Postgres and RabbitMQ, against the newest
# releases (Postgres 18, RabbitMQ 4.3) instead of the machine's 15 and 3.10, from a Debian
# forky root that deploy/current/servers.sh bootstraps once (outside the repository) and
# runs beside the machine's servers on ports of their own. Left out: what boots the
# machine's own RabbitMQ 3.10 and Postgres 15 binaries rather than talking to a server
# (testenv/cluster, e2e's cluster test, deploy's compose-config boot), deploy's tests that
# only read files, and the chaos harness and smoke runs (tools/chaos), which `make chaos`
# covers. docs/testing.md
CURRENT_PKGS := $(addprefix github.com/bookstore-go/bookstore/,services/... testenv testenv/httpapitest e2e)
# deploy's tests that meet a server: the rest read files, the same on any release.
CURRENT_DEPLOY := ^(TestRabbitMQ43BootsWithTheComposeConfig|TestPostgres18RunsTheComposeInitScript|TestDefinitionsOnBroker|TestPostgresInitScript)$$
# Tests known to fail on the current releases, skipped there (none: each difference the
# tests meet is handled on both versions, docs/idempotent-consumer.md). CURRENT_KNOWN='A|B'
# skips more while one is being worked on.
CURRENT_KNOWN ?=
CURRENT_SKIP := ^($(CLUSTER_E2E)|TestRabbitMQBootsWithTheComposeConfig$(if $(CURRENT_KNOWN),|$(CURRENT_KNOWN)))$$

.PHONY: test-current
test-current: ## the server-facing tests against Postgres 18 and RabbitMQ 4.3 run from a Debian forky root (root; bootstraps it once)
	deploy/current/servers.sh run $(MAKE) --no-print-directory current-tests

# make test-current-race: CI's race pass and its run on the current releases in one
# (.ci/run): test-current with the shared module's and the services' tests under the race
# detector, then test-race's cluster test, which boots this machine's own servers. The
# race detector reads Go's memory, not the server's version, so CI runs the services'
# tests twice (3.10 and 15; 4.3 and 18 under -race), not three times.
.PHONY: test-current-race
test-current-race: ## test-current with the services' tests under the race detector, then test-race's cluster test: CI's second pass
	deploy/current/servers.sh run $(MAKE) --no-print-directory current-tests CURRENT_RACE=1
	$(MAKE) --no-print-directory race-cluster

# current-tests runs inside deploy/current/servers.sh run, with its servers' addresses
# in the environment.
.PHONY: current-tests
current-tests:
ifdef CURRENT_RACE
	RACE=1 go test -race -count=1 -timeout 20m -skip '$(CURRENT_SKIP)' $(RACE_PKGS)
	go test -count=1 -timeout 20m -skip '$(CURRENT_SKIP)' $(filter-out $(RACE_PKGS),$(CURRENT_PKGS))
else
	go test -count=1 -timeout 20m -skip '$(CURRENT_SKIP)' $(CURRENT_PKGS)
endif
	go test -count=1 -timeout 10m -run '$(CURRENT_DEPLOY)' github.com/bookstore-go/bookstore/deploy

# Each fuzz target runs this long in `make fuzz` (a go test -fuzztime: 30s, 2m, 10000x).
FUZZTIME ?= 30s

.PHONY: fuzz
fuzz: ## run every fuzz target for FUZZTIME (30s) each, stopping at the first failure (make test runs only their seeds)
	FUZZTIME=$(FUZZTIME) deploy/local/fuzz.sh

.PHONY: test-race
test-race: services ## the shared module and every service's tests under the race detector; the binaries they start are built with -race too
	RACE=1 go test -race -count=1 -timeout 20m $(RACE_PKGS)
	$(MAKE) --no-print-directory race-cluster

.PHONY: race-cluster
race-cluster: services
	RACE=1 go test -race -count=1 -timeout 20m -run '^$(CLUSTER_E2E)$$' github.com/bookstore-go/bookstore/e2e

.PHONY: bench
bench: services ## benchmarks, each reported as a ratio to a baseline measured in the same run (docs/performance.md)
	go test -p 1 -count=1 -run '^$$' -bench . -skip '^BenchmarkSystemWithAWeekOfHistory$$' -benchmem -timeout 30m $(PKGS)

# make bench-compare BASE=<commit> [RUNS=2]: the system benchmark at BASE and at this tree,
# alternating, and each figure as this tree's over BASE's.
RUNS ?= 2
.PHONY: bench-compare
bench-compare: services ## the system benchmark at BASE (a commit) and at this tree, alternating RUNS (2) times, as ratios (docs/performance.md)
	@test -n "$(BASE)" || { echo "make bench-compare BASE=<commit>: the commit to compare with"; exit 2; }
	deploy/local/bench-compare.sh $(BASE) $(RUNS)

.PHONY: generate
generate: ## regenerate the sqlc code from sql/
	$(SQLC) generate

.PHONY: generate-k8s
generate-k8s: ## regenerate deploy/k8s's derived files from deploy/ and services/contracts (its tests fail when stale)
	go generate ./deploy/k8s

.PHONY: lint
lint: ## gofmt, go vet, the sqlc drift check, the contracts (api/: OpenAPI, AsyncAPI, JSON Schema) and the docs (tools/doccheck, chaos figures)
	@test -z "$$(gofmt -l services sql tools deploy api testenv)" || { gofmt -l services sql tools deploy api testenv; echo "gofmt: files above need formatting"; exit 1; }
	go vet $(PKGS)
	$(SQLC) diff
	go test -count=1 github.com/bookstore-go/bookstore/api/...
	go run ./tools/doccheck
	go run ./tools/chaos figures -check

.PHONY: demo
demo: services ## every pattern's experiments (the producer's, the consumer's, the email's), each a measured line, against the real Postgres and RabbitMQ
	go run ./services/ordering/cmd/demo
	go run ./services/inventory/cmd/demo
	go run ./services/notification/cmd/demo

.PHONY: chaos
chaos: services build ## load with crashes and network faults, then check every invariant
	go run ./tools/chaos $(CHAOS_FLAGS)

.PHONY: chaos-load
chaos-load: services build ## every service doubled, the load at half the benchmark's capacity or more, every fault kind (under 10 minutes)
	go run ./tools/chaos --profile load $(CHAOS_FLAGS)

.PHONY: chaos-cluster
chaos-cluster: services build ## the production topology: three RabbitMQ nodes, a primary + synchronous standby per service, node kills and failovers under load (about 10 minutes)
	go run ./tools/chaos --profile cluster $(CHAOS_FLAGS)

# make soak's length, window and rate (empty: half the capacity a 30 s probe measures).
SOAK_DURATION ?= 30m
SOAK_WINDOW ?= 5m
SOAK_RATE ?=

.PHONY: soak
soak: services build ## the system for SOAK_DURATION (30m) at half its measured capacity (or SOAK_RATE), every fault kind at a low rate; fails when a SOAK_WINDOW's (5m) rate or a process's RSS drifts (docs/chaos.md#soak)
	go run ./tools/chaos --profile soak --duration $(SOAK_DURATION) --window $(SOAK_WINDOW) $(if $(SOAK_RATE),--rate $(SOAK_RATE)) $(CHAOS_FLAGS)

# Where make chaos-current writes its reports: outside the repository, as its runs are
# not among the ones the docs quote.
CHAOS_CURRENT_REPORTS ?= /var/cache/bookstore/chaos-current-reports

.PHONY: chaos-current
chaos-current: build ## make chaos on Postgres 18 and RabbitMQ 4.3 from the forky root (as make test-current; reports in CHAOS_CURRENT_REPORTS)
	deploy/current/servers.sh run bash -c 'go run ./tools/chaos --postgres "$$TEST_DATABASE_ADMIN_URL" --amqp "$$TEST_AMQP_URL" --rabbitmq-management "$$TEST_RABBITMQ_MANAGEMENT_URL" --reports $(CHAOS_CURRENT_REPORTS) $(CHAOS_FLAGS)'

.PHONY: chaos-compare
chaos-compare: services build ## the same faults against the right design and the wrong ones
	go run ./tools/chaos compare $(CHAOS_FLAGS)

.PHONY: chaos-figures
chaos-figures: ## render the chaos figures the docs quote from the reports committed in docs/reports/ (make lint checks them)
	go run ./tools/chaos figures

.PHONY: up
up: ## docker compose: the system with Jaeger, Prometheus, Grafana and Mailpit
	docker compose up -d --build --wait
	@deploy/urls.sh

.PHONY: down
down: ## stop docker compose
	docker compose down

.PHONY: urls
urls: ## where each UI lives
	@deploy/urls.sh
