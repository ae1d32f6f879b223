# Catamaran developer entry points. `make help` lists them.
SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
LAB := $(BIN)/catamaran-lab
SETUP_STAMP := $(VENV)/.setup-complete
# `make sanity` tests a copy of the collection's files (tracked and untracked-not-ignored): ansible-test
# needs the checkout at .../ansible_collections/catamaran/federation and refuses .collections/'s symlink.
# The copy is made a git repository of its own, or ansible-test would list its files from ours (which ignores it).
SANITY_ROOT := $(CURDIR)/.sanity
SANITY_TREE := $(SANITY_ROOT)/ansible_collections/catamaran/federation
# Python packages of the repository that are not Ansible content (ruff and pytest check them).
SANITY_EXCLUDE := controller/ lab/ bench/ tests/unit/ tests/integration/ tests/timing.py tests/parallel.py
# ansible-test bootstraps pip in each sanity venv with get-pip.py, downloaded from a host this machine
# cannot reach; it looks in this cache first (pip 24.2 is ansible-core 2.19's pin).
GET_PIP := $(HOME)/.ansible/test/cache/get_pip_24_2.py
# Tools such as ansible-lint look for their siblings on PATH.
export PATH := $(CURDIR)/$(BIN):$(PATH)
export VIRTUAL_ENV := $(CURDIR)/$(VENV)

.PHONY: help setup collection image conformance lab-build lab-up lab-down lab-status demo demo-down lint format sanity sanity-tree sanity-checks test test-checks test-check-lint test-check-sanity test-check-unit test-unit test-integration clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'

setup: $(SETUP_STAMP) ## create .venv and install every Python dependency (pinned); no-op when done

$(SETUP_STAMP): requirements/dev.in requirements/constraints.txt lab/pyproject.toml controller/pyproject.toml \
		controller/setup.py galaxy.yml
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), f"Python >= 3.11 needed, found {sys.version.split()[0]}"'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -r requirements/dev.in -c requirements/constraints.txt
	$(BIN)/pip install --quiet --disable-pip-version-check --no-deps -e lab -e controller
	@# ansible.cfg and the tests find the collection (this checkout) through .collections/.
	mkdir -p .collections/ansible_collections/catamaran
	ln -sfn ../../.. .collections/ansible_collections/catamaran/federation
	@touch $@

collection: setup ## build what users install: the controller's wheel, then the collection's artifact into dist/
	PYTHON=$(BIN)/python tools/build-collection dist

# The controller's image without a container engine (mmdebstrap, pip; lab/src/catamaran_lab/controller_image.py):
# byte-identical for the same checkout and Debian archive. `skopeo copy oci-archive:<archive> docker://...` pushes it.
image: setup ## the controller's image, no engine needed: dist/catamaran-controller-<version>.oci.tar (OCI archive)
	$(BIN)/python -m catamaran_lab.controller_image dist

# The docs site: antsibull-docs renders this checkout's collection (through .collections/) and Sphinx builds it,
# offline and warnings as errors. Its toolchain is pinned apart from the dev tools (requirements/docs.in), in .docs/.
DOCS_VENV := .docs/venv
DOCS_SITE := .docs/site
.PHONY: docs

$(DOCS_VENV)/.installed: requirements/docs.in requirements/docs-constraints.txt
	rm -rf $(DOCS_VENV)
	$(PYTHON) -m venv $(DOCS_VENV)
	$(DOCS_VENV)/bin/pip install --quiet --disable-pip-version-check -r requirements/docs.in -c requirements/docs-constraints.txt
	@touch $@

docs: setup $(DOCS_VENV)/.installed ## the docs site (modules, filter, roles, guide, changelog) into .docs/site/build/html
	$(DOCS_VENV)/bin/antsibull-docs lint-collection-docs --plugin-docs .
	rm -rf $(DOCS_SITE)
	mkdir -p -m 0700 $(DOCS_SITE)
	$(DOCS_VENV)/bin/antsibull-docs sphinx-init --use-current --fail-on-error --dest-dir $(DOCS_SITE) \
		--index-rst-source docs/site/index.rst --project Catamaran --copyright 'Catamaran developers' \
		--title Catamaran --html-short-title Catamaran catamaran.federation
	@# Offline: no intersphinx inventories; docs/site/ansible_references.rst holds the labels they would give.
	echo 'intersphinx_mapping = {}' >> $(DOCS_SITE)/conf.py
	cp docs/site/antsibull-docs.cfg $(DOCS_SITE)/
	cp docs/site/ansible_references.rst $(DOCS_SITE)/rst/
	$(BIN)/antsibull-changelog generate --output $(DOCS_SITE)/rst/changelog.rst --output-format rst
	PATH="$(CURDIR)/$(DOCS_VENV)/bin:$$PATH" ANSIBLE_COLLECTIONS_PATH="$(CURDIR)/.collections" $(DOCS_SITE)/build.sh
	@echo "docs: $(DOCS_SITE)/build/html/index.html"

lab-build: setup ## install the real nodes' Debian packages; build the pinned binaries and images into ~/.cache/catamaran-lab (once)
	$(LAB) build

lab-up: lab-build ## start the lab clusters (CLUSTERS=n, CATAMARAN_LAB_OVERLAP=1 for overlapping pod ranges)
	$(LAB) up $(if $(CLUSTERS),--clusters $(CLUSTERS))

lab-down: ## stop every lab process and remove .lab/ (and the labs `make test` runs beside it)
	@if [ -x $(LAB) ]; then $(LAB) down --all; else echo "lab: nothing to do (no $(VENV))"; fi

# The demo's clusters share one pod range, as clusters made with one tool's defaults do: the fabric remaps it.
demo: export CATAMARAN_LAB_OVERLAP ?= 1
demo: lab-up collection ## the main job: the lab's 3 clusters, site.yml peers them and offloads `demo`, a two-tier app spans them
	$(BIN)/ansible-playbook playbooks/site.yml
	examples/lab/demo.sh deploy
	examples/lab/demo.sh show

demo-down: ## take the demo apart (playbooks/teardown.yml un-peers everything), then stop the lab
	@if [ -f .lab/kubeconfig ] && [ -x $(BIN)/ansible-playbook ]; then \
		$(BIN)/ansible-playbook playbooks/teardown.yml || echo "teardown failed; lab-down removes the rest"; fi
	$(MAKE) lab-down

lab-status: setup ## list the lab clusters, their kubeconfigs, health and memory
	$(LAB) status

lint: setup ## ruff, the controller's layers (import-linter) and types (mypy), yamllint, ansible-lint, the changelog
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	@# Contracts and checked files: controller/pyproject.toml.
	cd controller && $(CURDIR)/$(BIN)/lint-imports
	cd controller && $(CURDIR)/$(BIN)/mypy
	$(BIN)/yamllint --strict .
	$(BIN)/ansible-lint
	$(BIN)/antsibull-changelog lint
	$(BIN)/antsibull-changelog lint-changelog-yaml changelogs/changelog.yaml

format: setup ## apply ruff's fixes and formatting
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

$(GET_PIP): tests/sanity/get_pip.py
	install -D -m 0644 $< $@

sanity: sanity-tree ## ansible-test sanity on the collection, and ansible-doc renders every module, filter and role
	$(MAKE) --no-print-directory sanity-checks

# What `make sanity` checks, on the tree sanity-tree made (make test makes it before its other checks start).
sanity-checks: setup $(GET_PIP)
	cd $(SANITY_TREE) && $(CURDIR)/$(BIN)/ansible-test sanity --local \
		--python "$$($(CURDIR)/$(BIN)/python -c 'import sys; print("%d.%d" % sys.version_info[:2])')" \
		$(foreach dir,$(SANITY_EXCLUDE),--exclude '$(dir).*')
	$(BIN)/python tests/sanity/ansible_doc_check.py $(SANITY_ROOT) catamaran.federation

# ansible-test checks a collection in a tree of its own: a copy of the checkout's files (tracked or not, never ignored).
sanity-tree: setup $(GET_PIP)
	rm -rf $(SANITY_ROOT)
	mkdir -p $(SANITY_TREE)
	git ls-files -z --cached --others --exclude-standard \
		| while IFS= read -r -d '' f; do if [[ -e $$f || -L $$f ]]; then printf '%s\0' "$$f"; fi; done \
		| tar -c --null -T - -f - | tar -x -C $(SANITY_TREE) -f -
	git -C $(SANITY_TREE) init --quiet

test-unit: setup ## pure-logic tests, no clusters
	$(BIN)/pytest tests/unit

# Integration tests run on TEST_WORKERS labs side by side (pytest-xdist, tests/parallel.py). Beside them, the network
# fabric again on a lab whose clusters share one pod range (as clusters made with one tool's defaults do): every
# address each side sees of the other is remapped by the gateways.
TEST_WORKERS ?= 2
TEST_RUNS := $(CURDIR)/.test-runs
TIMED := CATAMARAN_TEST_TIMES=$(TEST_RUNS)/times tools/timed
# The site playbook's two-provider run is not repeated there, though only it sends one provider's traffic to another
# through remapped ranges: with it, run 17 took 37.9 min instead of 32.3 (a federation more on that lab).
FABRIC_OVERLAP_TESTS := tests/integration/test_fabric.py \
	tests/integration/test_lab_network.py::test_every_cluster_resolves_its_services_by_name

test-integration: lab-build ## tests against the lab's real kube-apiservers, side by side on labs of their own
	$(BIN)/python -m tests.parallel run --workers $(TEST_WORKERS) $(FABRIC_OVERLAP_TESTS)

# Every phase timed (tools/timed); the run ends with the time by phase and file and its slowest tests, and the
# machine's load and speed at its start and end (tests/timing.py). Lint, sanity and unit tests come before the lab,
# which they do not need, side by side (test-checks): sanity's copy of the tree is made before the others start, so
# nothing they write can slip into it.
test: setup ## everything CI runs: lint, sanity, unit tests, then integration and Molecule tests against the lab
	rm -rf $(TEST_RUNS)
	$(BIN)/python -m tests.timing probe start $(TEST_RUNS)/times
	$(MAKE) --no-print-directory sanity-tree
	$(MAKE) --no-print-directory --jobs=3 --output-sync=target test-checks
	$(TIMED) lab-build $(MAKE) --no-print-directory lab-build
	$(BIN)/python -m tests.parallel run --workers $(TEST_WORKERS) $(FABRIC_OVERLAP_TESTS); status=$$?; \
	  $(BIN)/python -m tests.timing probe end $(TEST_RUNS)/times; \
	  $(BIN)/python -m tests.timing report $(TEST_RUNS)/times; exit $$status

test-checks: test-check-lint test-check-sanity test-check-unit
test-check-lint: setup
	$(TIMED) lint $(MAKE) --no-print-directory lint
test-check-sanity: setup
	$(TIMED) sanity $(MAKE) --no-print-directory sanity-checks
test-check-unit: setup
	$(TIMED) unit $(BIN)/pytest tests/unit

# Not in `make test`: two runs of about 220 upstream tests take most of an hour on this machine.
conformance: lab-build ## the upstream e2e tests on a real node, then offloaded: bench/results/conformance.{csv,png}
	$(BIN)/python bench/conformance.py

clean: lab-down ## remove the virtualenv and lab state (the binary cache is kept)
	rm -rf $(VENV) .pytest_cache .ruff_cache .sanity .docs dist .test-runs
