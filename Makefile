# compilebench: `make run` runs the pipeline on the CPU default suite, `make test` the tests but the long scenarios
# (`make test-long`; CI runs both). Both create .venv and install the pinned dependencies on first use (torch==2.13.0
# CPU build first).

VENV      ?= .venv
PYTHON    := $(VENV)/bin/python
STAMP     := $(VENV)/.installed
HOST      ?= 127.0.0.1
PORT      ?= 5000
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
export DVC_NO_ANALYTICS := 1
export PYTHONUNBUFFERED := 1

.PHONY: run compare series bisect forecast experiments gpu gpu-plan test test-long test-fast ui server sync ingest models lint clean

# One pipeline at a time in a project: a second `make run`, `compare` or `gpu` says so and exits 75 before DVC starts
# (DVC refuses a second pipeline, and the first then fails at its end). The lock goes when its shell ends: the
# commands it runs do not inherit it (9>&-).
ONE_PIPELINE := mkdir -p .dvc/tmp && exec 9>.dvc/tmp/pipeline.lock && flock --nonblock 9 || { echo "make: another \
make run, compare or gpu is running in this project (it holds .dvc/tmp/pipeline.lock): wait for it to end" >&2; exit 75; }

run: $(STAMP) .dvc/config  ## create the environment and run `dvc repro` on params.yaml
	$(ONE_PIPELINE); dvc repro 9>&- && dvc metrics show 9>&- && \
	python -m compilebench.aggregate --check 9>&-  # exit 3: some run did not end ok; 4: a compared environment changed a headline

A ?= current
# After `dvc exp run -n NAME`: params.yaml as the experiment ran it; where DVC failed only at its end (a plain
# `dvc exp run` started beside it), the experiment saved from the workspace (compilebench/config/guard.py)
SAVED = python -m compilebench.config.guard
# SEED=1: another run order (benchmark.seed), for judging a comparison or series again from a second invocation
SEED_SET = $(if $(SEED),-S benchmark.seed=$(SEED))
# After the comparison, each compiled cell it found changed is explained (compilebench/explain.py, on the comparison's
# warm caches: about a minute a cell here); none changed, nothing runs. EXPLAIN=0: not at all. Its failure is said and
# leaves the comparison's answer and exit status as they are.
EXPLAIN_CHANGED = $(if $(filter 0,$(EXPLAIN)),true,{ python -m compilebench.explain 9>&- || \
	echo "make: explaining the changed cells failed (above); the comparison stands: \`make explain\` tries again" >&2; })
compare: $(STAMP) .dvc/config  ## make compare B=torch-2.14.1 [A=current] [SEED=1] [EXPLAIN=0]: B against A, a DVC experiment (B=current: A/A), its changed cells explained
	test -n "$(B)" || { echo "usage: make compare B=ENVIRONMENT [A=current]: an environment of params.yaml"; exit 2; }
	$(ONE_PIPELINE); name="$(B)-vs-$(A)-$$(date +%m%d-%H%M%S)"; \
	dvc exp run -n "$$name" -S 'compare=[$(A),$(B)]' $(SEED_SET) 9>&-; $(SAVED) "$$name" $$? 9>&- && \
	$(EXPLAIN_CHANGED) && python -m compilebench.aggregate --check 9>&-  # exit 3: some run did not end ok; 4: B changed a headline

# A release series: each torch release with the companions it needs (compilebench/config/releases.py), each
# step against the one before; the first step that changed each headline is named. A release named twice is an A/A
# step inside it.
TORCH_SERIES = $(subst $(eval) ,$(comma),$(addprefix torch-,$(TORCH)))
comma := ,
OLDEST_FIRST = printf '%s\n' $(TORCH) | sort -V -C || { echo "make: TORCH lists torch releases oldest first, each step \
	against the one before; got \"$(TORCH)\": type them as \"$$(printf '%s\n' $(TORCH) | sort -V | xargs)\"" >&2; exit 2; }
series: $(STAMP) .dvc/config  ## make series TORCH="2.0.1 2.6.0 2.15.0" [SEED=1]: those torch releases as a series, a DVC experiment
	test -n "$(TORCH)" || { echo "usage: make series TORCH=\"2.0.1 2.6.0 2.15.0\" (torch releases, oldest first)"; exit 2; }
	@$(OLDEST_FIRST)
	$(ONE_PIPELINE); name="series-$(word 1,$(TORCH))-$(lastword $(TORCH))-$$(date +%m%d-%H%M%S)"; \
	dvc exp run -n "$$name" -S 'compare=[$(TORCH_SERIES)]' $(SEED_SET) 9>&-; $(SAVED) "$$name" $$? 9>&- && \
	python -m compilebench.aggregate --check 9>&-  # exit 3 / 4 as compare

# Where it changed: the ends measured, then the release in the middle of each changed headline's span, until each
# change is pinned to one step between adjacent releases (compilebench/bisect.py). Each round a DVC experiment; a step
# a compiled headline is pinned to is explained right after its round (EXPLAIN=0: not).
bisect: $(STAMP) .dvc/config  ## make bisect TORCH="2.0.1 2.15.0" | TRANSFORMERS="4.57.6 5.24.0" [SEED=1] [AA=1] [COMPILE=1] [EXPLAIN=0]: where a headline changed, and why
	test -n "$(TORCH)$(TRANSFORMERS)" || { echo "usage: make bisect TORCH=\"2.0.1 2.15.0\" (the ends, oldest first; \
	more: exactly those releases) or TRANSFORMERS=\"4.57.6 5.24.0\""; exit 2; }
	$(ONE_PIPELINE); python -m compilebench.bisect $(if $(TORCH),--torch $(TORCH),--transformers $(TRANSFORMERS)) \
		$(if $(SEED),--seed $(SEED)) $(if $(AA),--aa) $(if $(COMPILE),--compile) $(if $(filter 0,$(EXPLAIN)),--no-explain) 9>&-

# Why it changed: one profiled process per side for each compiled cell the last comparison found changed (or CELL),
# A beside B by kernel category, the compile-time table, what the compiler made (compilebench/explain.py).
explain: $(STAMP) .dvc/config  ## make explain [B=NAME] [CELL="microsoft/resnet-50 1 default"] [AA=1] [COLD=1]: why the last comparison's cells changed
	$(ONE_PIPELINE); python -m compilebench.explain $(if $(B),--b $(B)) $(if $(CELL),--cell "$(CELL)") $(if $(AA),--aa) \
		$(if $(COLD),--cold) 9>&-

FORECAST_SET = $(if $(TORCH),--set 'compare=[$(TORCH_SERIES)]',$(if $(B),--set 'compare=[$(A)$(comma)$(B)]'))
forecast: $(STAMP)  ## make forecast [B=torch-2.14.1] [A=current] | [TORCH="2.0.1 2.15.0"]: before spending, what that comparison (params.yaml without B) costs here and can resolve
	@$(if $(TORCH),$(OLDEST_FIRST),true)
	@python -m compilebench.benchmark.forecast $(FORECAST_SET)

# what each experiment found, read from `dvc exp show --json` (its own table has ~370 columns)
experiments: $(STAMP)  ## every DVC experiment's comparison: per compared environment and metric, the word, the suite's B/A [95% CI], cells changed
	python -m compilebench.experiments

SUITE ?= gpu
gpu: $(STAMP) .dvc/config  ## on a CUDA machine with network: the doc's GPU table for this GPU (SUITE=gpu), a DVC experiment
	python -m compilebench.environments --device cuda current  # a CUDA build of torch that sees a GPU, or exit 2
	$(ONE_PIPELINE); dvc exp run -S suite=$(SUITE) -S device=cuda -S ++benchmark.min_time_s=2 9>&- && \
	python -m compilebench.aggregate --check 9>&-  # exit 3: some run did not end ok. min_time_s 2: ms calls, hundreds of rounds

# A GPU lent briefly: the doc's published cells (batch 1, 4 and 16) exported as windows of at most MIN estimated
# minutes, the window that judges most cells a minute first; each window's README says how to run it there
DIR ?= gpu-paper
MIN ?= 11
# The windows are checked here before a GPU is lent: the first window's runner runs its first trial on this CPU.
gpu-plan: $(STAMP) .dvc/config  ## make gpu-plan [DIR=gpu-paper] [MIN=11]: the doc's GPU cells as windows for a GPU lent briefly, most judged a minute first
	$(ONE_PIPELINE); dvc repro fetch_image 9>&- && python -m compilebench.benchmark --export $(DIR) --window-min $(MIN) \
		--prime 8 --set suite=paper --set suites.paper.cells=published --set device=cuda \
		--set benchmark.compile_cache=shared --set benchmark.replicates=4 --set benchmark.max_replicates=10 --set budget_min=0 \
		--set benchmark.min_iters=100 --set benchmark.min_time_s=4 9>&- && \
	cd $(DIR)-w1 && python runner.pyz plan.json results --check-on-cpu 9>&-

RAY_STAMP := $(VENV)/.installed-ray
# Three workers on two cores: with two, the cores idled while tests waited on servers, queues and turns (measured:
# docs/findings.md, 2026-11-29); tests/conftest.py hands out the costliest first. `make test` leaves out the tests
# marked `long` so that it ends within 20 minutes on 2 cores (docs/findings.md, 2026-12-05); CI runs both.
test: $(STAMP) $(RAY_STAMP) .dvc/config  ## create the environment and run the test suite but the long scenarios (three workers, line coverage)
	pytest -q -rs -n 3 --dist loadgroup -m "not long" --cov=compilebench --cov-report=term:skip-covered --durations=30

test-long: $(STAMP) $(RAY_STAMP) .dvc/config  ## the tests make test leaves out: release series, bisect, exported plans' windows, slots and Ray (line coverage)
	pytest -q -rs -n 3 --dist loadgroup -m long --cov=compilebench --cov-report=term:skip-covered --durations=15

test-fast: $(STAMP) .dvc/config  ## the quick loop: in-process tests (no trial process, no pipeline run), no coverage
	pytest -q -n 2 -m "not slow"

ui: $(STAMP)  ## the MLflow UI on this project's store, bound to 127.0.0.1; prints the runs table's address
	@python -m compilebench.tracking --ui-url http://$(HOST):$(PORT) --serve sqlite:///mlruns/mlflow.db

# A shared tracking server for several machines (each sets MLFLOW_TRACKING_URI=http://HOST:PORT).
# STORE: SQLite by default, or e.g. postgresql+psycopg://user@db/compilebench (psycopg is in the venv).
# ARTIFACTS: a folder or an object-store URI (s3://bucket/path). Add --app-name basic-auth for users and passwords.
STORE     ?= sqlite:///mlruns/server/mlflow.db
ARTIFACTS ?= mlruns/server/artifacts
server: $(STAMP)  ## a real `mlflow server` on HOST:PORT (127.0.0.1:5000 unless told otherwise)
	mkdir -p mlruns/server
	MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false mlflow server --backend-store-uri $(STORE) \
		--artifacts-destination $(ARTIFACTS) --host $(HOST) --port $(PORT) --workers 1

sync: $(STAMP)  ## log to MLflow what the last run could not (store was down): exactly once
	python -m compilebench.sync

# Results measured on another machine (`python -m compilebench.benchmark --export DIR`, then the launcher there):
# logged to MLflow exactly once and turned into tables, figures and the report here. Outside DVC: `dvc repro`
# would measure this machine instead.
ingest: $(STAMP)  ## make ingest FROM=DIR
	test -n "$(FROM)" || { echo "usage: make ingest FROM=DIR (a folder written by --export, with DIR/results)"; exit 2; }
	python -m compilebench.benchmark --ingest $(FROM)
	python -m compilebench.aggregate
	python -m compilebench.plot

models: $(STAMP)  ## list the registered checkpoints
	python -m compilebench.harness.models --manifest data/checkpoints/manifest.json

lint: $(STAMP)
	ruff format --check src tests benchmarks scripts
	ruff check src tests benchmarks scripts

# uv installs (from pip's own sources) where it can be had, pip otherwise: src/compilebench/environments/installer.py.
INSTALL   := $(PYTHON) src/compilebench/environments/installer.py $(PYTHON)
$(STAMP): requirements.txt constraints.txt pyproject.toml src/compilebench/environments/installer.py
	test -x $(PYTHON) || python3 -m venv $(VENV)
	$(PYTHON) -m pip install --quiet $$(grep -o '^uv==[^ ]*' requirements.txt) || echo "make: no uv; pip installs (slower)"
	$(INSTALL) $$(grep -o '^torch==[^ ]*' constraints.txt)
	$(INSTALL) -c constraints.txt -r requirements.txt
	$(INSTALL) -c constraints.txt --no-deps --no-build-isolation -e .
	touch $@

$(RAY_STAMP): $(STAMP) pyproject.toml  # Ray, for runner.executor: ray and its tests; `make run` does without it
	$(INSTALL) -c constraints.txt $$(grep -o 'ray==[0-9.]*' pyproject.toml)
	touch $@

.dvc/config:  # a clone has .dvc/ committed; a copy without git gets a repository first
	git rev-parse --git-dir >/dev/null 2>&1 || git init --quiet
	$(VENV)/bin/dvc init --quiet
	$(VENV)/bin/dvc config core.analytics false

clean:  ## remove pipeline outputs (not the MLflow store, the noise record or the built environments)
	rm -rf data/image data/checkpoints data/results data/plots data/report data/selection.json data/journal
