# ratekit developer commands. `make test` is what CI runs.
GO ?= go
GOLANGCI_LINT_VERSION ?= v2.15.0
GOBIN := $(shell $(GO) env GOPATH)/bin

.PHONY: run test test-short lint fuzz bench bench-go redis-server chromium promtool

# ALONE are the tests timed against the store timeout, which run on their own.
ALONE := ^(TestRedisFaults|TestRedisTimeoutWhilePaused|TestRedisPoolExhausted|TestInFlightBreakerAndTimeout|TestRedisSaturatedApp|TestRedisFrozenSaturatedApp|TestRedisClusterPaused|TestPaused)$$

## run: the quickstart example server on the in-memory store (REDIS_URL switches to Redis)
run:
	$(GO) run ./examples/quickstart

## test: install redis-server, chromium and promtool if missing, then vet, gofmt check, the
## full race-enabled test run, the timed tests alone, every benchmark once (so that none is
## broken) and the bench module's tests; CI (.ci/run, with lint and fuzz) takes 8-11 minutes
## on 2 cores
test: redis-server chromium promtool
	$(GO) vet ./...
	@out="$$(gofmt -l .)"; if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi
	$(GO) test -race -shuffle=on -count=1 -timeout=15m -skip '$(ALONE)' ./...
	# What a paused or dead Redis costs, and exactness with the app's CPU saturated, are
	# timed against the store timeout: alone on the machine, since a limiter rightly waits
	# on while other test binaries starve its process; the saturation test and rueidis's
	# paused store also without the race detector (under it, 32 timeouts falling due at
	# once can slow the scheduler enough to be judged a starved process, which waits on).
	$(GO) test -race -count=1 -run '$(ALONE)' ./core/
	$(GO) test -count=1 -run '^(TestRedisSaturatedApp|TestRedisFrozenSaturatedApp)$$' ./core/
	$(GO) test -count=1 -run '^TestPaused$$' ./rueidisstore/
	$(GO) test -run '^$$' -bench . -benchtime 1x -count=1 ./...
	cd bench && $(GO) vet -mod=mod ./... && $(GO) test -mod=mod -count=1 ./...

## test-short: a fast local loop without the Redis-backed tests
test-short:
	$(GO) test -short -count=1 ./...

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

## bench: the side-by-side comparison with the peers, goal by goal (own module bench/, own
## redis-server, redis-benchmark for the ceiling; about 3 minutes, BENCHFLAGS=-quick for under
## a minute); writes bench/results/
bench: redis-server
	@command -v redis-benchmark >/dev/null 2>&1 || { \
		echo "redis-benchmark not found: installing redis-tools with apt-get"; \
		SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq redis-tools; }
	cd bench && $(GO) run -mod=mod . $(BENCHFLAGS)

## bench-go: the in-module benchmarks with allocations
bench-go: redis-server
	$(GO) test -run '^$$' -bench . -benchmem ./core/ ./nethttp/ ./ginlimit/ ./echolimit/ ./fiberlimit/ ./grpclimit/
