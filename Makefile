# vendorgate: `make run` brings the stack up, `make test` runs every test.
GO       ?= go
BIN      := bin
BINARIES := gateway backend vendorctl
STATICCHECK ?= $(shell command -v staticcheck 2>/dev/null || echo $(HOME)/go/bin/staticcheck)

.PHONY: all build run test test-raced test-beside test-alerts mixin mutations bench bench-go bench-cost bench-load bench-sweep bench-tls sweep-redis lint lint-openapi clean

all: build

build:
	@mkdir -p $(BIN)
	@[ -x $(BIN)/gateway ] || echo "building $(addprefix $(BIN)/,$(BINARIES)): the first build fetches and compiles the Go modules and takes a few minutes"
	@for b in $(BINARIES); do $(GO) build -trimpath -o $(BIN)/$$b ./cmd/$$b || exit 1; done
	@echo "built $(addprefix $(BIN)/,$(BINARIES))"

# Backend and gateway in the foreground with the example config (SQLite file
# under var/, in-process limiter; Redis when GATEWAY_REDIS_URL is set).
run: build
	@scripts/run.sh

# The load tools are a module of their own under bench/: ./... at the root
# does not reach them, so test and lint run there too.
#
# go test starts packages in the order they are named (-p of them at once,
# one a CPU): the longest ones (TEST_FIRST) are named first so that they do
# not start last and run alone at the end; ./... then adds every other
# package once. docs/performance.md says how the time is measured.
TEST_FIRST ?= ./e2e ./gateway ./gateway/limit ./backend/store/postgres
# The allocation guards skip under -race (it allocates on its own): they run
# again without it, in the packages that have one (TestXxxAllocs) only, so
# that no other package's test binary is built a second time.
ALLOCS_PKGS = $(sort $(dir $(shell grep -rlE --include='*_test.go' '^func Test[A-Za-z0-9_]*Allocs[^A-Za-z0-9_]' gateway shared)))
# The e2e tests build the three binaries with -race in their TestMain, a go
# command of its own that would compile what this one compiles at the same
# time: `go build -race ./cmd/...` compiles it once first (it links
# nothing), into the build cache both then read.
#
# vet reads the packages' export data: built with -race, it reads what
# the race tests compiled (without it, it compiled every package a second
# time, about 85 CPU-seconds from an empty cache), and so do the tests that
# build a binary (shared/testbuild: the test binary's own race mode). make
# lint vets without -race, so files built only without it are vetted
# there. What must be built without -race (the allocation guards, the
# lease simulation's full run) compiles only those packages and their
# dependencies a second time. All this runs beside the race tests, vet
# last (by then the race tests' packages are mostly compiled: two go
# commands compiling one package at once both do the work) (test-beside,
# niced so that the race build and the tests keep their CPU), whose end
# waits on sleeps, sockets and timers far more than on the CPU; make test
# fails when either fails.
# go test's own vet (a subset of go vet's default checks, run on each
# package and its tests before the package's tests) is off (-vet=off):
# the go vet above runs all the default checks on the same packages and
# their tests, and the two analysed every package and its dependencies
# twice (go test's share: 73 CPU-seconds from an empty cache, measured
# with -run '^$' with and without it).
# The lease simulation runs all its seeds there, without the race
# detector (about 21 s against 148 s under it), and its first 150 under
# -race. (The load tools' race tests ran there too for a while: the
# extra load beside the root module's race tests made its load-bound
# tests fail; they run after them again.)
#
# The gateway, backend and vendorctl that the tests run are linked once a
# run, not once a test package (five link the gateway): shared/testbuild
# links them into VENDORGATE_TEST_BIN, a folder of this run's own.
test:
	bin=$$(mktemp -d); trap 'rm -rf "$$bin"' EXIT; trap 'exit 130' INT TERM; \
	export VENDORGATE_TEST_BIN=$$bin; \
	nice -n 10 $(MAKE) --no-print-directory test-beside & bg=$$!; \
	$(MAKE) --no-print-directory test-raced; rc=$$?; wait $$bg || rc=1; exit $$rc

# The test binaries are linked without DWARF (-ldflags=-w): about a
# quarter of each link's CPU (the root package's race test binary: 3.8 s
# against 5.1 s), and a race report or a panic reads its stacks from the
# binary's own tables, not from DWARF.
TEST_LDFLAGS ?= -ldflags=-w

# A program built with -race sleeps a second when it exits (GORACE's
# atexit_sleep_ms, 1000 by default), so that other threads finish their
# reports: a second a test binary, and a second each time a test's
# gateway, backend or vendorctl exits (the vendorctl tests run it about a
# hundred times: 114 s against 15 s). Tests wait for their goroutines
# before they return, and the binaries' tests wait for the process.
TEST_GORACE ?= atexit_sleep_ms=0

test-raced: export GORACE = $(TEST_GORACE)
test-raced:
	$(GO) build -race ./cmd/...
	$(GO) test -race -vet=off $(TEST_LDFLAGS) -count=1 -timeout 20m $(TEST_FIRST) ./...
	cd bench && $(GO) test -race -vet=off $(TEST_LDFLAGS) -count=1 -timeout 10m ./...

test-beside:
	$(GO) test -vet=off $(TEST_LDFLAGS) -count=1 -run 'Allocs$$' $(addprefix ./,$(ALLOCS_PKGS))
	$(GO) test -vet=off $(TEST_LDFLAGS) -count=1 -run '^TestSimulation$$' ./gateway/limit
	$(GO) vet -race ./...
	cd bench && $(GO) vet -race ./...

# The planted defects under scripts/mutations/, each applied to a copy of
# this checkout: the test each names must fail (the lease and refund ones a
# TestSimulation seed, the script's the script-model test and the
# concurrency slot's TestTimedOutAcquireGivesItsSlotBack against a real
# redis-server, the transport's three its tests in gateway/limit/redisconn
# against a real redis-server: queued callers sharing a failed round
# trip's verdict, a reply read late taken, a request written late shed;
# its two of a full pool its simulation: a pool wait shed while Redis
# owes an answer, a refund's failure on the wire not shared; its five of
# the heartbeat its simulation too: a ping's pool wait counted as Redis
# failing, or never a verdict while Redis owes an answer, a ping written
# late counted as Redis', a ping held to a fixed timeout plus grace, a
# ping's failure on the wire not shared).
# Not part of `test`: about 5 minutes on a quiet host.
# MUTATIONS=name,... runs some only.
mutations:
	GO=$(GO) scripts/mutate.sh

# The alert rules' unit tests (deploy/prometheus/alerts.gotest.yml) under
# promtool, as an SRE runs them: the cases compare labels only, so they run
# against a copy of alerts.yml without its annotations (plain `promtool test
# rules` on the shipped file fails on the annotations by design), with
# promtool's check of the rules first.
test-alerts:
	$(GO) test -count=1 -run 'TestPromtool/(check_rules|alert_unit_tests|every_alert_has_a_unit_test)$$' -v ./deploy

# The alert rules and dashboards for the job names of a settings file
# (MIXIN, deploy/prometheus/mixin.yml by default), written under MIXIN_OUT.
MIXIN ?= deploy/prometheus/mixin.yml
MIXIN_OUT ?= mixin-out
mixin:
	scripts/mixin.sh -s $(MIXIN) $(MIXIN_OUT)

bench: bench-go bench-cost bench-load

bench-go:
	$(GO) test -run=NONE -bench=. -benchmem ./...

# The deterministic cost report, rewriting docs/cost.md: instructions and
# last-level cache misses (callgrind), system calls by kind (strace),
# allocations and Redis calls per request for the bare proxy and the
# gateway in process and on Redis, one vendor and 10,000, and per full
# TLS handshake; it fails when a step of the gateway's request spends
# more instructions than its budget (bench/costreport/budgets.txt). Needs
# valgrind (and strace for the system calls; without it they are left
# out); valgrind runs one benchmark at a time, about 40 minutes on a
# shared 2-core machine. COSTREPORT_FLAGS='-rows bare,gateway' for some
# rows only.
bench-cost:
	cd bench && $(GO) run ./costreport $(COSTREPORT_FLAGS)

# BASELINE=REF (a commit, HEAD~1, main) adds that commit's gateway as row
# 3b beside this checkout's, measured in the same interleaved run.
bench-load: build
	cd bench && $(GO) run ./loadbench $(if $(BASELINE),-baseline $(BASELINE)) $(LOADBENCH_FLAGS)

# The vendor-count sweep alone (about 8 minutes): replaces its section of
# docs/bench.md. SWEEP=1000,10000 for other counts.
SWEEP ?= 1000,10000,100000
bench-sweep: build
	cd bench && $(GO) run ./loadbench -sweep $(SWEEP) -conns '' -many-conns '' $(LOADBENCH_FLAGS)

# The TLS rows alone, rewriting docs/bench-tls.md: the bare proxy, the
# gateway and nginx, each over plain HTTP and TLS, keep-alive and a full
# handshake per connection, interleaved (about 5 minutes).
bench-tls: build
	cd bench && $(GO) run ./loadbench -tls -conns 64 -reps 5 $(LOADBENCH_FLAGS)

# When is Redis down: the real gateway (this checkout's and commit
# 6ed8b42's) against a real Redis under busy loops, CPU quotas, Redis
# pinned or sharing cores, TLS and real outages; rewrites its table in
# docs/bench-history.md (about 6 minutes, after waiting up to 10 for the
# machine's load to fall below 1.5). Needs root for the CPU quota's cgroup.
sweep-redis:
	cd bench && $(GO) run ./redisrule -write docs/bench-history.md $(REDISRULE_FLAGS)

lint:
	@scripts/check-binaries.sh
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	cd bench && $(GO) vet ./...
	@test -x $(STATICCHECK) || GOFLAGS= $(GO) install honnef.co/go/tools/cmd/staticcheck@v0.8.2
	$(STATICCHECK) ./...
	cd bench && $(STATICCHECK) ./...

# The OpenAPI document against Spectral's spectral:oas rules: any warning
# fails (npm install -g @stoplight/spectral-cli; .ci/run installs it).
lint-openapi:
	spectral lint --ruleset gateway/openapi/spectral.yaml --fail-severity=warn gateway/openapi/openapi.yaml

clean:
	rm -rf $(BIN) var mixin-out
