# quicbed: the two commands for a fresh machine are `make demo` and `make test`.
# Both set everything up first (Python venv, then the project's own Ansible
# playbook for apt packages, Chromium, Apache and the Go binaries). Needs root.

VENV      ?= .venv
PY        := $(VENV)/bin/python
BOOTPY    ?= python3
GO        ?= $(shell command -v go || echo /usr/local/go/bin/go)
ANSIBLE   := $(VENV)/bin/ansible-playbook

.PHONY: setup venv provision build test lint unit demo bench clean

setup: provision

venv: $(VENV)/.installed

$(VENV)/.installed: requirements.txt pyproject.toml
	$(BOOTPY) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -r requirements.txt -e .
	$(PY) -m quicbed.genilib_compat
	touch $@

# Apt packages, host tuning, Apache, Chromium and our Go binaries, via the roles.
provision: venv
	$(ANSIBLE) -i localhost, playbooks/local.yml

build:
	cd go && $(GO) build -o ../build/bin/ ./cmd/...

lint: venv
	$(VENV)/bin/ruff check quicbed tests benchmarks profile.py
	$(VENV)/bin/ruff format --check quicbed tests benchmarks profile.py
	cd go && test -z "$$(gofmt -l .)" && $(GO) vet ./...

test: setup lint
	cd go && $(GO) test ./...
	$(VENV)/bin/pytest -q

# The main job: the demo sweep on the local testbed, then its report.
# (--resume: a second `make demo` continues or reuses results/demo.)
demo: setup
	$(VENV)/bin/quicbed run sweeps/demo.yaml --out results/demo --resume
	$(VENV)/bin/quicbed report results/demo
	@echo "report: $(CURDIR)/results/demo/report/index.html"

bench: setup
	$(PY) benchmarks/link_fidelity.py

clean:
	rm -rf build $(VENV)
