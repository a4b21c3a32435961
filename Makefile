# quicbed: the two commands for a fresh machine are `make demo` and `make test`.
# Both set everything up first (Python venv, then the project's own Ansible
# playbook for apt packages, Chromium, Apache and the Go binaries). Needs root.

VENV      ?= .venv
PY        := $(VENV)/bin/python
BOOTPY    ?= python3
GO        ?= $(shell command -v go || echo /usr/local/go/bin/go)
ANSIBLE   := $(VENV)/bin/ansible-playbook
# quic-go is built with quicbed's patch (go/patches, explained in
# go/cmd/quicbed-h3server/README.md): `go run ./patches` writes the patched module
# and an alternative go.mod that points at it, and every Go build, vet and test
# takes that go.mod. The roles build with the same directory, so the same bytes.
# vet and test also cover the quic-go packages the patch touches (upstream's tests
# and ours; testing the root package would take minutes, so it is only vetted).
QUICGO    := build/quic-go-patched
GOMODFILE := -modfile=$(CURDIR)/$(QUICGO)/quicbed.mod
QUICGO_TESTED := github.com/quic-go/quic-go/internal/congestion github.com/quic-go/quic-go/internal/ackhandler
# The gQUIC server is a Go module of its own (go/gquic/README.md: quic-go v0.10.2
# keeps its own dependencies), and its quic-go is patched the same way, by the same
# program (-patch names the patch, go/gquic/README.md says why): its own patched copy
# and alternative go.mod, which its build, vet and test take. They also cover the
# patched package, upstream's tests included, and our test of the patch in quic-go's
# root package (only it: the root package's own suite would take minutes). go/'s
# gofmt -l . covers its files too.
GQUIC     := go/gquic
GQUIC_PATCH   := quic-go-v0.10.2-keep-ciphertext
GQUIC_QUICGO  := build/quic-go-v0.10.2-patched
GQUIC_MODFILE := -modfile=$(CURDIR)/$(GQUIC_QUICGO)/quicbed.mod
GQUIC_QUICGO_TESTED := github.com/lucas-clemente/quic-go/internal/handshake

# golangci-lint (.golangci.yml) checks both Go modules. make lint builds it with
# $(GO), at the pinned version, into build/tools/ the first time (a few minutes),
# and reuses it after. go/packages, which golangci-lint loads code with, cannot
# take -modfile (golang/go#48482: one of its go list runs is in GOPATH mode, where
# -modfile is an error), so golangci-lint sees the patched quic-go through a Go
# workspace instead: a go.work in build/lint/ that uses the module and carries the
# replace directive of its alternative go.mod, the path made absolute
# ($(call lint-work,module directory,patched copy,go.work to write)). PATH starts
# with $(GO)'s directory because golangci-lint runs `go`.
GOLANGCI_LINT_VERSION := v2.15.0
GOLANGCI_LINT := build/tools/golangci-lint-$(GOLANGCI_LINT_VERSION)/golangci-lint
GOLANGCI_RUN   = PATH="$(dir $(GO)):$$PATH" $(CURDIR)/$(GOLANGCI_LINT) run --config $(CURDIR)/.golangci.yml
define lint-work
mkdir -p $(dir $(3)) && { grep '^go ' $(1)/go.mod; echo 'use $(CURDIR)/$(1)'; \
  sed -n 's|^replace \(.*\) => \(\.\./.*\)$$|replace \1 => $(CURDIR)/$(1)/\2|p' $(2)/quicbed.mod; } > $(3)
endef

.PHONY: setup setup-all venv provision quic-go build test lint check unit demo bench clean bytecode

# The base: what the demo uses (tools, host tuning, Apache, quicbed's Go servers and
# emulator, Chromium and its driver). Each further component is installed when asked
# (`make setup-envoy`; the names: playbooks/group_vars/all.yml), `make setup-all` all of
# them; a cell that needs one that is missing is refused naming its command.
setup: provision

setup-all: venv
	$(ANSIBLE) -i localhost, playbooks/local.yml

setup-%: venv
	$(ANSIBLE) -i localhost, playbooks/local.yml -e '{"quicbed_with": ["$*"]}'

venv: $(VENV)/.installed

# The venv's bytecode is compiled once, after geni-lib is made to run on 3.11 (the one
# file left is its Python 2 IPython helper, which nothing imports). Python writes no
# bytecode where PYTHONDONTWRITEBYTECODE is set (this machine's environment and CI's
# set it), so without this every process compiled every module it imported from source,
# every time: `quicbed report --help` took 1.54 s, 0.64 s compiled, and a test that runs
# the command line six times 20.6 s against 9.1 s. (pip's own compiling, dropped with
# --no-compile, is serial: 10 of a new venv's 26 s; this runs on every core, 9 s here.)
$(VENV)/.installed: requirements.txt pyproject.toml
	$(BOOTPY) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q --no-compile -r requirements.txt -e .
	$(PY) tools/genilib_compat.py
	$(PY) -m compileall -q -j 0 -x 'geni/support/ipython\.py' $(VENV)/lib
	touch $@

# quicbed's own bytecode, for the same reason; only what changed since is compiled again
# (a fraction of a second when nothing did).
bytecode: venv
	$(PY) -m compileall -q -j 0 quicbed tools tests benchmarks profile.py

# Apt packages, host tuning, Apache, Chromium and our Go binaries, via the roles.
provision: venv
	$(ANSIBLE) -i localhost, playbooks/local.yml -e '{"quicbed_with": []}'

quic-go:
	cd go && $(GO) run ./patches -go $(GO) -out ../$(QUICGO)
	cd go && $(GO) run ./patches -go $(GO) -patch $(GQUIC_PATCH) -out ../$(GQUIC_QUICGO)

build: quic-go
	cd go && $(GO) build $(GOMODFILE) -o ../build/bin/ ./cmd/...
	cd $(GQUIC) && $(GO) build $(GQUIC_MODFILE) -o $(CURDIR)/build/bin/ ./cmd/...

$(GOLANGCI_LINT):
	GOFLAGS= GOWORK=off GOBIN=$(CURDIR)/$(@D) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)

# mypy's settings (which modules are strict) are in pyproject.toml.
lint: venv quic-go $(GOLANGCI_LINT)
	$(VENV)/bin/ruff check quicbed tests benchmarks tools profile.py
	$(VENV)/bin/ruff format --check quicbed tests benchmarks tools profile.py
	$(VENV)/bin/mypy
	cd go && test -z "$$(gofmt -l .)" && $(GO) vet $(GOMODFILE) ./... github.com/quic-go/quic-go $(QUICGO_TESTED)
	cd $(GQUIC) && $(GO) vet $(GQUIC_MODFILE) ./... github.com/lucas-clemente/quic-go $(GQUIC_QUICGO_TESTED)
	$(call lint-work,go,$(QUICGO),build/lint/quicbed.work)
	cd go && GOWORK=$(CURDIR)/build/lint/quicbed.work $(GOLANGCI_RUN) ./...
	$(call lint-work,$(GQUIC),$(GQUIC_QUICGO),build/lint/gquic.work)
	cd $(GQUIC) && GOWORK=$(CURDIR)/build/lint/gquic.work $(GOLANGCI_RUN) ./...

# The quick loop while changing code (75 s here; any user, only the venv): the Python
# linters and the tests marked neither root, browser, slow nor built (markers in
# pyproject.toml; tests/conftest.py fails a test that uses a testbed fixture unmarked),
# on three workers, a test file per worker: they measure nothing, so nothing spoils them,
# and with two workers a quarter of the two cores sat idle while tests waited (87 s
# against 73 s; a fourth worker gained nothing). `make test` stays the whole suite, the
# one CI runs.
check: bytecode
	$(VENV)/bin/ruff check quicbed tests benchmarks tools profile.py
	$(VENV)/bin/ruff format --check quicbed tests benchmarks tools profile.py
	$(VENV)/bin/mypy
	$(VENV)/bin/pytest -q -n 3 --dist loadfile -m "not root and not browser and not slow and not built"

# The whole suite in two lanes: first the tests that measure nothing (those not marked
# root, which cannot make a namespace, shape a link or start a testbed's server, and the
# root tests marked parallel), a test file per worker; then the other root tests one at
# a time, so that no measurement shares the cores with another test. A test of the
# first lane that times a receipt, a load or a flow fails, unless it does so alone
# (tests/lanes.py: the fresh-machine test's cells). The first lane's files go out in
# the order tests/conftest.py gives them, its files of minutes first (pytest-xdist would
# reorder them by their number of tests), to three workers on two cores: those files
# mostly wait (apt, downloads, Firefox's idle minute), and the lane took 315 s with
# three workers against 359 s with two (measured here, nothing else running). Each lane
# prints where its time went (tests/testtime.py; test-artifacts/test-time-<lane>.json).
test: setup-all lint bytecode
	cd go && $(GO) test $(GOMODFILE) ./... $(QUICGO_TESTED)
	cd $(GQUIC) && $(GO) test $(GQUIC_MODFILE) ./... $(GQUIC_QUICGO_TESTED)
	cd $(GQUIC) && $(GO) test $(GQUIC_MODFILE) -run '^TestQuicbed' github.com/lucas-clemente/quic-go
	QUICBED_TEST_LANE=parallel $(VENV)/bin/pytest -q -n 3 --dist loadfile --no-loadscope-reorder -m "not root or parallel"
	QUICBED_TEST_LANE=serial $(VENV)/bin/pytest -q -m "root and not parallel"

# The main job: the demo sweep on the local testbed, then its report.
# (--resume: a second `make demo` continues or reuses results/demo, and measures again
# the cells that failed on their link or a busy host.) The report is built either way;
# make demo fails while any demo cell is failed.
demo: setup bytecode
	$(VENV)/bin/quicbed run sweeps/demo.yaml --out results/demo --resume || \
	  { $(VENV)/bin/quicbed report results/demo; exit 1; }
	$(VENV)/bin/quicbed report results/demo
	@echo "report: $(CURDIR)/results/demo/report/index.html"

bench: setup
	$(PY) benchmarks/link_fidelity.py

clean:
	rm -rf build $(VENV)
