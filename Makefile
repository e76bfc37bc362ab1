# The two commands of the README:
#   make dev   - set everything up, serve the chat app on http://$(HOST):$(PORT) (embedded storage, demo model)
#   make test  - set everything up, run every check and the whole test suite
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
HOST ?= 127.0.0.1
PORT ?= 8000
# A second interpreter for the suite (the code supports 3.11 and 3.12); skipped if absent.
PYTHON312 ?= $(shell for p in $(HOME)/.pyenv/versions/3.12*/bin/python3.12 $$(command -v python3.12); do "$$p" -c 'import sys' 2>/dev/null && echo "$$p" && break; done)

.PHONY: dev chat web chromium test-browser test test-loaded setup serve-setup node-setup lint typecheck test-python test-python312 test-node test-nextjs nextjs-build clean

dev: serve-setup web
	$(PY) -m durable_harness serve --host $(HOST) --port $(PORT)

# A terminal chat with the server `make dev` runs (in a second terminal).
chat: serve-setup
	$(PY) -m durable_harness chat --url http://$(HOST):$(PORT)

test: setup node-setup lint typecheck test-python test-node test-browser test-nextjs deploy-checks test-python312

# `make test` three times in a fresh clone while two busy loops load both cores (RUNS=N for more).
test-loaded:
	bash tests/loaded.sh $(or $(RUNS),3)

# setup: the package (editable) with every extra, the test suite's tools and the linters (`test`, `dev`).
# serve-setup (make dev, make chat): the package alone, what serving needs, with pip's progress shown;
# EXTRAS adds extras (`EXTRAS=pydantic-ai,aws make dev`), each set with its own stamp.
EXTRAS ?=
SERVE_STAMP := $(VENV)/.installed-serve$(if $(EXTRAS),-$(EXTRAS))
setup: $(VENV)/.installed
serve-setup: $(SERVE_STAMP)

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,dev]'
	touch $@

$(SERVE_STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --progress-bar on -e '.$(if $(EXTRAS),[$(EXTRAS)])'
	touch $@

node-setup: tests/node/node_modules/.installed

# `npm install` (not `npm ci`): npm rejects this lock file in `ci` because of optional platform
# packages it records without versions; `install` still takes the locked versions.
tests/node/node_modules/.installed: tests/node/package.json tests/node/package-lock.json
	cd tests/node && npm install --no-audit --no-fund --loglevel=error
	touch $@

# The chat page (web/): the real AI SDK client, bundled into the package's server/static folder.
STATIC := layers/harness/durable_harness/server/static

web: $(STATIC)/index.html

web/node_modules/.installed: web/package.json web/package-lock.json
	cd web && npm ci --no-audit --no-fund --loglevel=error && touch node_modules/.installed

$(STATIC)/index.html: web/node_modules/.installed web/index.html web/build.mjs $(wildcard web/src/* web/src/runs/*)
	cd web && npm run build

# Browser tests: playwright-core driving Debian's Chromium (installed when missing and root).
tests/browser/node_modules/.installed: tests/browser/package.json tests/browser/package-lock.json
	cd tests/browser && npm ci --no-audit --no-fund --loglevel=error && touch node_modules/.installed

chromium:
	@[ -x /usr/bin/chromium ] || { [ "$$(id -u)" = 0 ] && apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } || \
	  { echo "The browser tests need Debian's chromium: sudo apt-get install chromium" >&2; exit 1; }

test-browser: setup web chromium tests/browser/node_modules/.installed
	cd tests/browser && PYTHON=$(CURDIR)/$(PY) npm test

# The Next.js example (examples/nextjs): its own node_modules, `next build` when a source changed
# (a shell check rather than prerequisites: make would take the route folder's [...path] for a
# pattern), then its browser test (tests/browser/nextjs) against the local kit.
NEXTJS := examples/nextjs

$(NEXTJS)/node_modules/.installed: $(NEXTJS)/package.json $(NEXTJS)/package-lock.json
	cd $(NEXTJS) && npm ci --no-audit --no-fund --loglevel=error && touch node_modules/.installed

nextjs-build: $(NEXTJS)/node_modules/.installed
	@cd $(NEXTJS) && if [ -f .next/BUILD_ID ] && [ -z "$$(find app lib next.config.mjs package-lock.json -newer .next/BUILD_ID)" ]; \
	  then echo "examples/nextjs: built"; else NEXT_TELEMETRY_DISABLED=1 npx --no-install next build; fi

test-nextjs: setup chromium tests/browser/node_modules/.installed nextjs-build
	cd tests/browser && PYTHON=$(CURDIR)/$(PY) node --test --test-reporter=spec --test-concurrency=1 --test-force-exit nextjs/

lint: setup
	$(VENV)/bin/ruff check layers functions tests bench examples scripts
	$(VENV)/bin/lint-imports --no-cache  # the layers and acyclic contracts in pyproject.toml

typecheck: setup
	$(VENV)/bin/mypy

test-python: setup
	$(VENV)/bin/pytest -q

test-node: setup node-setup
	cd tests/node && PYTHON=$(CURDIR)/$(PY) npm test

# Under Python 3.12 (the functions' and the AgentCore bridge's runtime): the unit tests of the code that
# runs there (the core, the AWS adapters and the Lambda fast path) and the handlers' import, layer-build and
# state-machine checks. The whole suite, the deployed stack under moto included, runs under the default
# Python; running it twice would put .ci/run over its 20 minutes.
PY312_TESTS := tests/agent tests/runner tests/storage tests/protocol tests/models tests/telemetry tests/waits \
	tests/aws tests/lambda_fastpath tests/harness/test_bridge.py tests/deploy/test_imports.py \
	tests/deploy/test_layer_build.py tests/deploy/test_state_machine.py tests/test_docs.py
test-python312:
	@if [ -z "$(PYTHON312)" ]; then echo "python3.12 not found; skipping the 3.12 run"; else \
	  $(MAKE) --no-print-directory VENV=.venv312 PYTHON=$(PYTHON312) setup && \
	  .venv312/bin/pytest -q -p no:cacheprovider $(PY312_TESTS); fi

clean:
	rm -rf .venv .venv312 .data tests/node/node_modules web/node_modules tests/browser/node_modules $(NEXTJS)/node_modules $(NEXTJS)/.next $(STATIC) tests/artifacts .pytest_cache .mypy_cache .ruff_cache

# --- Offline checks of the AWS deployment (no AWS account, no Docker) ----------------------------
# The SAM CLI tools live in their own venv: aws-sam-cli pins versions that may clash with ours.
#   sam validate --lint          the SAM template (SAM schema + cfn-lint)
#   sam_to_cfn.py | cfn-lint     the template SAM would deploy, expanded offline (catches errors
#                                inside the generated resources that the first check cannot see)
#   sam build                    the layer and the functions, arm64 wheels, no container
#                                (needs python3.12 on PATH; pip's download cache is reused)
SAM_VENV ?= .venv-sam
SAM_ENV := SAM_CLI_TELEMETRY=0 AWS_DEFAULT_REGION=us-east-1
NONDEFAULT := tests/deploy/nondefault-parameters.json

.PHONY: deploy-checks sam-setup bench bench-peers-setup

sam-setup: $(SAM_VENV)/.installed

$(SAM_VENV)/.installed: tests/deploy/requirements-sam.txt
	$(PYTHON) -m venv $(SAM_VENV)
	printf '*\n' > $(SAM_VENV)/.gitignore
	$(SAM_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(SAM_VENV)/bin/python -m pip install --quiet -r tests/deploy/requirements-sam.txt
	touch $@

deploy-checks: sam-setup web
	@if [ -z "$(PYTHON312)" ]; then echo "deploy-checks: sam build needs python3.12 on PATH" >&2; exit 1; fi
	$(SAM_ENV) $(SAM_VENV)/bin/sam validate --lint --template template.yaml
	@mkdir -p .aws-sam
	$(SAM_ENV) $(SAM_VENV)/bin/python tests/deploy/sam_to_cfn.py template.yaml > .aws-sam/template.cfn.json
	$(SAM_ENV) $(SAM_VENV)/bin/cfn-lint --format parseable .aws-sam/template.cfn.json
	@# Again with every parameter of tests/deploy/nondefault-parameters.json as the default (reserved
	@# concurrency, warm throughput, heartbeats, full secret ARNs, ...): the template as deployed with them.
	$(SAM_ENV) $(SAM_VENV)/bin/python tests/deploy/sam_to_cfn.py --sam --parameters $(NONDEFAULT) template.yaml > template.nondefault.json
	$(SAM_ENV) $(SAM_VENV)/bin/sam validate --lint --template template.nondefault.json; status=$$?; rm -f template.nondefault.json; exit $$status
	$(SAM_ENV) $(SAM_VENV)/bin/python tests/deploy/sam_to_cfn.py --parameters $(NONDEFAULT) template.yaml > .aws-sam/template.nondefault.cfn.json
	$(SAM_ENV) $(SAM_VENV)/bin/cfn-lint --format parseable .aws-sam/template.nondefault.cfn.json
	PATH="$(dir $(PYTHON312)):$$PATH" $(SAM_ENV) $(SAM_VENV)/bin/sam build --cached --parallel \
	  --template template.yaml --build-dir .aws-sam/build --cache-dir .aws-sam/cache

# --- Deploying (docs/deploying.md): python3.12 found, `sam build`, then `sam deploy --guided` the
# first time (no Region recorded in samconfig.toml yet) or `sam deploy`, with .venv-sam's SAM CLI.
#   make deploy [GUIDED=1] [DRY_RUN=1]     DRY_RUN prints the commands instead of running them
.PHONY: deploy
deploy: sam-setup web
	PYTHON312="$(PYTHON312)" $(SAM_VENV)/bin/python scripts/deploy.py $(if $(DRY_RUN),--dry-run) $(if $(GUIDED),--guided)

# --- The check of a deployed stack: what a user tries first (docs/deploying.md) ----------------
#   make check-deploy URL=https://<id>.lambda-url.<region>.on.aws TOKEN=<bearer token>
# TOKEN goes through the environment (CHAT_TOKEN), not the command line; APPROVAL_PROMPT names a
# turn that asks for a tool approval (my_agent: "Save a note: hello").
.PHONY: check-deploy
check-deploy: setup
	@if [ -z "$(URL)" ]; then echo "usage: make check-deploy URL=<the stack's ChatUrl> [TOKEN=...] [APPROVAL_PROMPT=...]" >&2; exit 2; fi
	CHAT_TOKEN="$(TOKEN)" $(PY) -m durable_harness check "$(URL)" $(if $(APPROVAL_PROMPT),--approval-prompt "$(APPROVAL_PROMPT)")

# --- Benchmarks (not part of `make test`) ---------------------------------------------------------
# Every bench/*.py, then one table of the targets, MET or MISSED (bench/README.md). cold_start.py
# measures the `sam build` output with python3.12, hence deploy-checks first.
# A failed peers' install does not stop the benchmarks: peers.py then says which peer it could not measure.
bench: setup deploy-checks
	@$(MAKE) --no-print-directory bench-peers-setup || echo "bench: the peers' venv failed to install; peers.py will report it" >&2
	PYTHON312="$(PYTHON312)" $(PY) bench/_run_all.py

# make bench-compare BASE=<commit> [ONLY=a,b] [SKIP=c,d] [ROUNDS=n]: every bench/*.py in this tree and in a detached
# worktree of BASE (its own sam build, its own library), alternating per script, then one table of the
# targets side by side: both figures, head/base, same/better/worse within a noise band (bench/README.md).
.PHONY: bench-compare bench-compare-base
bench-compare-base:  # first, so that a missing BASE is said before the minutes of deploy-checks
	@if [ -z "$(BASE)" ]; then echo "usage: make bench-compare BASE=<commit> [ONLY=a,b] [SKIP=c,d] [ROUNDS=n]" >&2; exit 2; fi

bench-compare: bench-compare-base setup deploy-checks
	@$(MAKE) --no-print-directory bench-peers-setup || echo "bench-compare: the peers' venv failed to install; peers.py will report it" >&2
	PYTHON312="$(PYTHON312)" $(PY) bench/_compare.py --base "$(BASE)" --sam "$(abspath $(SAM_VENV))/bin/sam" \
	  $(if $(ONLY),--only "$(ONLY)") $(if $(SKIP),--skip "$(SKIP)") $(if $(ROUNDS),--rounds "$(ROUNDS)")

# bench/peers.py's peers (LangGraph, DBOS + Pydantic AI) in their own venv: they pin versions that may
# clash with ours. Its PostgreSQL is Debian's, installed by the script when missing (as root).
PEERS_VENV := bench/.venv-peers

bench-peers-setup: $(PEERS_VENV)/.installed

$(PEERS_VENV)/.installed: bench/requirements-peers.txt
	$(PYTHON) -m venv $(PEERS_VENV)
	printf '*\n' > $(PEERS_VENV)/.gitignore
	$(PEERS_VENV)/bin/python -m pip install --quiet -r bench/requirements-peers.txt
	cp bench/requirements-peers.txt $@
