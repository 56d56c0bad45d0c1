# One task runner for people and CI. `make demo` and `make test` install what they need.
#
# Build outputs and Python tools live outside the clone, in one fixed place, so every clone
# (and CI's fresh one) reuses the same build cache instead of rebuilding the AWS SDK crates.

CACHE             ?= /var/tmp/etcd-asg-lifecycle
export CARGO_TARGET_DIR ?= $(CACHE)/target
VENV              ?= $(CACHE)/venv
TEMPLATE_VENV     ?= $(CACHE)/venv-template
CHECKOV_VENV      ?= $(CACHE)/venv-checkov
PYTHON            ?= python3
CARGO             ?= cargo
APT_PACKAGES      := etcd-server etcd-client openssl shellcheck nodejs nftables strace
# The etcd versions the tests run on (docs/simulation.md says what runs where and why):
# 3.5, 3.6 and 3.7 built from etcd's own Go modules by tools/build-etcd.sh (pinned by
# tools/etcd/<minor>/go.mod and go.sum) into $(CACHE)/etcd-<minor>/bin; Debian's 3.4.23
# (etcd-server, bookworm) and 3.5.30 (the `sid` packages, unpacked into the cache by
# tools/install-etcd.sh, the machine's apt setup untouched; pinned by version and each .deb's
# SHA-256) only as the upgrade chain's first legs (3.5.30 is below etcd's floor for 3.6).
# Adapter tests on each of ADAPTER_VERSIONS; every end-to-end test on 3.6 (the stack's default);
# on 3.7 those marked v37 (joins, removals, restores, authentication, maintenance).
ADAPTER_VERSIONS  ?= 3.5 3.6 3.7
ETCD_MINORS       := 3.5 3.6 3.7
export ETCD_BUILDS := $(CACHE)
ETCD35_SUITE      := sid
ETCD35_VERSION    := 3.5.30-2
ETCD35_SERVER_SHA := 11a4f7e350c5020b83edff5160a6063d4e56ac9cd014d21ce8916378bf96de79
ETCD35_CLIENT_SHA := 1e66ad2aba4cba6842a1ac35d5c525e750102b8fb42748225bcb2e34d6595931
ETCD35_HOME       := $(CACHE)/etcd-$(ETCD35_VERSION)
# sim/etcd.py finds Debian's 3.5.30 here (etcdctl and etcdutl beside it).
export ETCD35_BIN := $(ETCD35_HOME)/usr/bin/etcd
ADAPTER_RUNS      := $(addprefix adapters-,$(ADAPTER_VERSIONS))
ETCD_BUILD_RUNS   := $(addprefix etcd-,$(ETCD_MINORS))
BOOTSTRAP         := $(CARGO_TARGET_DIR)/debug/bootstrap

# The Python tools first on PATH for everything below. (Whatever runs etcd names its binary, with
# ETCD_BIN or sim/etcd.py: /usr/bin/etcd is 3.4.)
export PATH := $(VENV)/bin:$(TEMPLATE_VENV)/bin:$(PATH)
export BOOTSTRAP_BIN := $(BOOTSTRAP)
# No telemetry: these machines reach no AWS endpoint.
export SAM_CLI_TELEMETRY := 0

.PHONY: demo replay nemesis test check build-tests unit adapters e2e e2e-3.6 e2e-3.7 e2e-upgrade etcd-builds history-tool $(ETCD_BUILD_RUNS) template-check template-sync build deps apt etcd35 python-tools client-tools template-tools checkov-tools package bench clean $(ADAPTER_RUNS)

## demo: the local simulation (real etcd, emulated AWS, the real function binary); on 3.6, ETCD_VERSION=3.7 for 3.7
demo: deps build
	$(VENV)/bin/python -m sim.demo

## replay: every file of events/ (or EVENTS="a.json b.json") through the real binary
replay: deps build
	$(VENV)/bin/python -m sim.replay $(EVENTS)

## test: everything CI runs, each stage timed as it ends: format, lint, the house and docs checks,
## unit, adapters against real etcd and moto (on 3.5, 3.6, 3.7), end to end (all on 3.6, the
## v37-marked on 3.7, the upgrade chain 3.4 -> 3.5 -> 3.6 -> 3.7), template
test: deps
	@$(PYTHON) tools/stages.py check build-tests unit adapters e2e template-check

# The house check: no import circle among src/'s files, no adapter naming the reconciler, no
# source file over 800 lines, no function over 80 lines without a reason (tools/house.py; the
# floors: `python3 tools/house.py --floors`); the docs check: every link, page, CLI command,
# template parameter and metric in step (tools/docs_check.py).
check:
	$(CARGO) fmt --all -- --check
	cd tests/history && test -z "$$(gofmt -l .)" && GOTOOLCHAIN=local GOFLAGS=-mod=readonly go vet ./...
	# The checker's own tests: a fixture history per rule, valid and violating, each rule shown
	# to matter (the violating one passes with that rule off).
	cd tests/history && GOTOOLCHAIN=local GOFLAGS=-mod=readonly go test ./...
	$(CARGO) clippy --locked --all-targets -- -D warnings
	$(PYTHON) tools/house.py
	$(PYTHON) tools/docs_check.py

# Every test binary and both binaries in one cargo run (integration tests build the binaries
# too): the stages after it build nothing.
build-tests:
	$(CARGO) test --locked --no-run --lib --test etcd_adapter --test aws_adapters --test backups

unit:
	$(CARGO) test --locked --lib

adapters: $(ADAPTER_RUNS)

# ETCD_BIN names the etcd to run; its folder also goes first on PATH, for anything that runs `etcd`.
# One test at a time: each starts etcd on ports it probed free, which a parallel test could take.
$(ADAPTER_RUNS): adapters-%: deps
	@bin=$$($(VENV)/bin/python -m sim.etcd $*) || exit 1; \
	echo "adapter tests on etcd $* ($$bin)"; \
	ETCD_BIN=$$bin PATH=$$(dirname $$bin):$$PATH PYTHON=$(VENV)/bin/python \
		$(CARGO) test --locked --test etcd_adapter --test aws_adapters --test backups -- --test-threads=1

e2e: e2e-3.6 e2e-3.7

# E2E_WORKERS tests at a time (pytest-xdist, --dist loadgroup: each test to the next free
# worker, but the demo steps' module-long simulation's, grouped, on one). Each simulation has
# loopback addresses, ports, an emulator and TLS credentials of its own (sim/etcd.py keys them
# by its network), so tests of any files may share a worker. 1 runs them one by one. The longest
# tests go first (their `long` marks, tests/e2e/conftest.py), and instances poll through one warm
# AWS CLI per simulation (sim/warm_aws.py): four at a time keep the two cores about 90% busy.
E2E_WORKERS       ?= 4
e2e-3.6: deps build
	@echo "end-to-end tests on etcd 3.6"
	ETCD_VERSION=3.6 $(VENV)/bin/python -m pytest -q -n $(E2E_WORKERS) --dist loadgroup --durations=5 tests/e2e --ignore=tests/e2e/test_upgrade.py

# The v37 tests and the upgrade chain (which ends on 3.7).
e2e-3.7: deps build
	@echo "end-to-end tests on etcd 3.7 (those marked v37, and the upgrade chain)"
	ETCD_VERSION=3.7 $(VENV)/bin/python -m pytest -q -n $(E2E_WORKERS) --dist loadgroup --durations=5 -m v37 tests/e2e

## nemesis: the long search (sim/nemesis.py, docs/simulation.md): SEEDS seeds from FIRST_SEED, each
## a schedule of MINUTES; SEED=N SECONDS=S replays one run (the command a failing run prints), ONLY=0,3
## with only those operations of it, MINIMIZE=1 finds the fewest that still fail
SEEDS             ?= 10
FIRST_SEED        ?= 1
MINUTES           ?= 10
nemesis: deps build
	ETCD_VERSION=$${ETCD_VERSION:-3.6} $(VENV)/bin/python -m sim.nemesis \
		$(if $(SEED),--seed $(SEED) --seconds $(or $(SECONDS),120) $(if $(ONLY),--only $(ONLY)) $(if $(MINIMIZE),--minimize),--seeds $(FIRST_SEED)-$(shell echo $$(( $(FIRST_SEED) + $(SEEDS) - 1 ))) --seconds $(shell echo $$(( $(MINUTES) * 60 ))))

## e2e-upgrade: a 3.4 cluster rolled to 3.5, 3.6 and 3.7, member by member (part of e2e-3.7)
e2e-upgrade: deps build
	$(VENV)/bin/python -m pytest -q tests/e2e/test_upgrade.py

template-check: apt template-tools checkov-tools
	$(PYTHON) tools/sync_template.py --check
	shellcheck boot/etcd-boot.sh
	$(TEMPLATE_VENV)/bin/cfn-lint template.yaml
	$(TEMPLATE_VENV)/bin/sam validate --lint --template template.yaml --region us-east-1
	# Every check passes or is skipped in the template with its reason (Metadata: checkov: skip);
	# --skip-download: no network (it would fetch Prisma Cloud's guidelines).
	$(CHECKOV_VENV)/bin/checkov -f template.yaml --framework cloudformation --skip-download --quiet --compact
	$(TEMPLATE_VENV)/bin/python -m pytest -q tests/template

## template-sync: copy boot/etcd-boot.sh into template.yaml's user data after editing it
template-sync:
	$(PYTHON) tools/sync_template.py

build:
	$(CARGO) build --locked

deps: apt etcd35 etcd-builds python-tools client-tools history-tool

# The client library of the end-to-end tests (npm etcd3, tests/clients/package-lock.json pins it
# and everything it needs by hash), with the machine's Node.js (APT_PACKAGES: nodejs).
client-tools: apt
	@stamp=tests/clients/node_modules/.stamp-$$(sha256sum tests/clients/package-lock.json | cut -c1-16); \
	if [ ! -f $$stamp ]; then \
		command -v npm >/dev/null || apt-get install -y -qq --no-install-recommends npm; \
		npm ci --prefix tests/clients --ignore-scripts --no-audit --no-fund --loglevel=error && touch $$stamp; \
	fi

# etcd 3.5, 3.6 and 3.7 from their Go modules, one after the other (each build uses both cores);
# skipped when the cache holds a build of exactly that go.sum. GOTOOLCHAIN=local: the machine's Go.
etcd-builds: $(ETCD_BUILD_RUNS)
$(ETCD_BUILD_RUNS): etcd-%:
	@tools/build-etcd.sh $* $(CACHE)/etcd-$*

# The history recorder and checker of tests/history (docs/clients.md), after etcd's builds, whose
# Go build cache it shares.
export HISTORY_BIN := $(CACHE)/history/history
history-tool: etcd-builds
	@tools/build-history.sh $(CACHE)/history

etcd35: apt
	@tools/install-etcd.sh $(ETCD35_HOME) $(ETCD35_SUITE) $(ETCD35_VERSION) $(ETCD35_SERVER_SHA) $(ETCD35_CLIENT_SHA)

apt:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		echo "installing$$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	fi

# A stamp per requirements file's content: a new clone with the same pins reuses the venv.
python-tools:
	@stamp=$(VENV)/.stamp-$$(sha256sum requirements.txt | cut -c1-16); \
	if [ ! -f $$stamp ]; then \
		$(PYTHON) -m venv $(VENV) && $(VENV)/bin/pip install -q --disable-pip-version-check -r requirements.txt && touch $$stamp; \
	fi

template-tools:
	@stamp=$(TEMPLATE_VENV)/.stamp-$$(sha256sum requirements-template.txt | cut -c1-16); \
	if [ ! -f $$stamp ]; then \
		$(PYTHON) -m venv $(TEMPLATE_VENV) && $(TEMPLATE_VENV)/bin/pip install -q --disable-pip-version-check -r requirements-template.txt && touch $$stamp; \
	fi

checkov-tools:
	@stamp=$(CHECKOV_VENV)/.stamp-$$(sha256sum requirements-checkov.txt | cut -c1-16); \
	if [ ! -f $$stamp ]; then \
		$(PYTHON) -m venv $(CHECKOV_VENV) && $(CHECKOV_VENV)/bin/pip install -q --disable-pip-version-check -r requirements-checkov.txt && touch $$stamp; \
	fi

## package: the deployable arm64 bootstrap, as `sam build` makes it (cargo-lambda, zig)
package: template-tools
	rustup target add aarch64-unknown-linux-gnu
	# cargo-lambda finds zig as `python3 -m ziglang`: this venv's python3 must come first.
	PATH=$(TEMPLATE_VENV)/bin:$$PATH cargo-lambda lambda build --release --arm64 --locked --bin bootstrap
	@ls -l $(CARGO_TARGET_DIR)/lambda/bootstrap/bootstrap | awk '{printf "bootstrap (arm64, release): %.1f MiB\n", $$5/1048576}'

## bench: figures from the simulation (printed, not asserted)
bench: deps
	$(CARGO) build --locked --release
	$(VENV)/bin/python -m sim.bench --binary $(CARGO_TARGET_DIR)/release/bootstrap

clean:
	rm -rf $(CARGO_TARGET_DIR) $(VENV) $(TEMPLATE_VENV) $(CHECKOV_VENV) $(ETCD35_HOME) $(addprefix $(CACHE)/etcd-,$(ETCD_MINORS)) $(CACHE)/history
