# ratekit developer commands. CI (.ci/run) runs `make lint`, `make test`, `make test-timing` and `make fuzz`.
GO ?= go
GOLANGCI_LINT_VERSION ?= v2.15.0
GOBIN := $(shell $(GO) env GOPATH)/bin

.PHONY: run test test-short test-core test-timing lint fuzz bench bench-instructions bench-go redis-server chromium promtool

# TIMED is every test timed against the wall clock: a decision bounded by the store timeout
# while Redis is paused, stopped or slowed, exactness with the app's CPU saturated. They hold
# on a quiet machine only (a limiter rightly waits on while other processes starve its own),
# so each package keeps them under one test named TestTimed (the Redis drivers run
# internal/test/redissuite's RunTimed there): `make test` skips them, `make test-timing` runs
# them alone. NORACE are the timed cases measured without the race detector: under it, 32
# timeouts falling due at once can slow the scheduler enough to be judged a starved process,
# which waits on. (ContextTimeout: redisstore's cases again on clients that honour the context,
# where a lone caller runs its own flight.)
TIMED := ^TestTimed$$
TIMED_PKGS := ./redisstore/ ./rueidisstore/
NORACE := ^TestTimed$$/^(RedisSaturatedApp|RedisFrozenSaturatedApp|RedisTimeoutWhilePaused|ContextTimeout)$$

# CORE_PKGS are the engine and what it stands on, for the inner loop: no adapter, no Redis
# driver, no operations page.
CORE_PKGS := ./core/... ./keyfunc/... ./guard/... ./internal/test/testkit/...

## run: the quickstart example server on the in-memory store (REDIS_URL switches to Redis)
run:
	$(GO) run ./examples/quickstart

## test: install redis-server, chromium and promtool if missing, then vet, gofmt check, the full
## race-enabled test run but the timed tests (TestTimed: make test-timing), and every
## benchmark once (so that none is broken). It holds on a loaded machine.
test: redis-server chromium promtool
	$(GO) vet ./...
	@out="$$(gofmt -l .)"; if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi
	$(GO) test -race -shuffle=on -count=1 -timeout=15m -skip '$(TIMED)' ./...
	$(GO) test -run '^$$' -bench . -benchtime 1x -count=1 ./...
	cd bench && $(GO) vet -mod=mod ./... && $(GO) test -mod=mod -count=1 ./...

## test-timing: the tests timed against the wall clock (every TestTimed), one package at a
## time and alone on the machine: CI runs it after make test. About 2 minutes.
test-timing: redis-server
	$(GO) test -race -count=1 -p 1 -run '$(TIMED)' -skip '$(NORACE)' $(TIMED_PKGS)
	$(GO) test -count=1 -p 1 -run '$(NORACE)' $(TIMED_PKGS)

## test-short: a fast local loop: every package with -short, which skips the Redis-backed
## tests (and the builds, the browser and the long runs that check for it), without the
## race detector or go vet
test-short:
	$(GO) test -short -vet=off -count=1 ./...

## test-core: the inner loop of the engine: core, keyfunc, guard and the memory store, with
## -short (no Redis, no adapter to build)
test-core:
	$(GO) test -short -count=1 $(CORE_PKGS)

## lint: golangci-lint with the committed .golangci.yml (installed on first use)
lint:
	@command -v golangci-lint >/dev/null 2>&1 || test -x $(GOBIN)/golangci-lint || \
		$(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
	PATH="$(GOBIN):$$PATH" golangci-lint run ./...

## fuzz: every fuzz target of the module for FUZZTIME each (10s by default)
fuzz:
	./.ci/fuzz

## redis-server: the tests start their own redis-server processes; install the binary if missing
redis-server:
	@command -v redis-server >/dev/null 2>&1 || { \
		echo "redis-server not found: installing it with apt-get"; \
		SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq redis-server; }

## chromium: the operations page's test drives a headless Debian chromium (opshttp); install it
## if missing
chromium:
	@command -v chromium >/dev/null 2>&1 || { \
		echo "chromium not found: installing it with apt-get"; \
		SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium; }

## bench: the side-by-side comparison with the peers, goal by goal (own module bench/, own
## redis-server, redis-benchmark for the ceiling; about 3 minutes, BENCHFLAGS=-quick for under
## a minute); writes bench/results/
bench: redis-server
	@command -v redis-benchmark >/dev/null 2>&1 || { \
		echo "redis-benchmark not found: installing redis-tools with apt-get"; \
		SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq redis-tools; }
	cd bench && $(GO) run -mod=mod . $(BENCHFLAGS)

## bench-instructions: Redis's instructions per decision of each Redis-backed library, counted
## by valgrind's callgrind (installed if missing): a figure the machine's load does not move;
## about a minute; writes bench/results/instructions.md
bench-instructions: redis-server
	@command -v valgrind >/dev/null 2>&1 || { \
		echo "valgrind not found: installing it with apt-get"; \
		SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq valgrind; }
	cd bench && $(GO) run -mod=mod . -instructions $(BENCHFLAGS)

## bench-go: the in-module benchmarks with allocations
bench-go: redis-server
	$(GO) test -run '^$$' -bench . -benchmem ./core/ ./redisstore/ ./rueidisstore/ ./nethttp/ ./ginlimit/ ./echolimit/ ./fiberlimit/ ./grpclimit/

## promtool: ratekitprom's tests check and unit-test the shipped Prometheus rules with Debian's
## promtool; install it if missing, unpacked from the prometheus package alone, so that no
## Prometheus server is installed, enabled or started
promtool:
	@command -v promtool >/dev/null 2>&1 || { \
		echo "promtool not found: installing it from Debian's prometheus package"; \
		SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
		tmp="$$(mktemp -d)" && \
		$$SUDO apt-get update -qq && (cd "$$tmp" && apt-get download -qq prometheus) && \
		dpkg-deb --fsys-tarfile "$$tmp"/prometheus_*.deb | tar -x -C "$$tmp" ./usr/bin/promtool && \
		$$SUDO install -m 0755 "$$tmp/usr/bin/promtool" /usr/local/bin/promtool; \
		status=$$?; rm -rf "$$tmp"; exit $$status; }

