# Catamaran developer entry points. `make help` lists them.
SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
LAB := $(BIN)/catamaran-lab
SETUP_STAMP := $(VENV)/.setup-complete
# Tools such as ansible-lint look for their siblings on PATH.
export PATH := $(CURDIR)/$(BIN):$(PATH)
export VIRTUAL_ENV := $(CURDIR)/$(VENV)

.PHONY: help setup lab-build lab-up lab-down lab-status lint format test test-unit test-integration clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'

setup: $(SETUP_STAMP) ## create .venv and install every Python dependency (pinned); no-op when done

$(SETUP_STAMP): requirements/dev.in requirements/constraints.txt lab/pyproject.toml controller/pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), f"Python >= 3.11 needed, found {sys.version.split()[0]}"'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -r requirements/dev.in -c requirements/constraints.txt
	$(BIN)/pip install --quiet --disable-pip-version-check --no-deps -e lab -e controller
	@touch $@

lab-build: setup ## build the pinned Kubernetes, etcd and kwok binaries into ~/.cache/catamaran-lab (once)
	$(LAB) build

lab-up: lab-build ## start the lab clusters (CLUSTERS=n, CATAMARAN_LAB_OVERLAP=1 for overlapping pod ranges)
	$(LAB) up $(if $(CLUSTERS),--clusters $(CLUSTERS))

lab-down: ## stop every lab process and remove .lab/
	@if [ -x $(LAB) ]; then $(LAB) down; else echo "lab: nothing to do (no $(VENV))"; fi

lab-status: setup ## list the lab clusters, their kubeconfigs, health and memory
	$(LAB) status

lint: setup ## ruff, yamllint and ansible-lint (production profile)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/yamllint --strict .
	$(BIN)/ansible-lint

format: setup ## apply ruff's fixes and formatting
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

test-unit: setup ## pure-logic tests, no clusters
	$(BIN)/pytest tests/unit

test-integration: lab-build ## tests against the lab's real kube-apiservers (the lab is started if needed)
	$(BIN)/pytest tests/integration

# pytest exits 5 when it collects no test; make treats that as the failure it is.
test: lint lab-build ## everything CI runs: lint, unit and integration tests
	$(BIN)/pytest tests

clean: lab-down ## remove the virtualenv and lab state (the binary cache is kept)
	rm -rf $(VENV) .pytest_cache .ruff_cache
