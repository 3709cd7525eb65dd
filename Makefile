# Everything a fresh clone needs: `make test` builds the virtualenv, installs the Python
# packages and Azurite (from npm, into .tools/), and the test session starts and stops
# Azurite itself on free loopback ports.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
AZURITE_VERSION := 3.35.0
AZURITE_DIR := .tools/azurite
AZURITE_BIN := $(AZURITE_DIR)/node_modules/.bin/azurite
PYTEST_ARGS ?=
# pytest-xdist: four workers on two cores (much of the suite waits on real leases, other
# processes and Spark), whole modules as the units, the cluster and local Spark modules
# each kept on one worker (tests/conftest.py). XDIST= runs serially.
XDIST ?= -n 4 --dist loadgroup --no-loadscope-reorder
# test-fast: on the embedded store alone its tests mostly wait (real leases, processes,
# retries' backoff: 3 minutes of CPU in 6 of wall on four workers), so six workers overlap
# the waits. Azurite's tests are CPU-bound (the emulator and the SDK) and make test's.
FAST_XDIST ?= -n 6 --dist loadgroup --no-loadscope-reorder
DEMO_ARGS ?=

export AZURITE_BIN := $(abspath $(AZURITE_BIN))
export SPARK_LOCAL_IP := 127.0.0.1
# Bytecode caching on, whatever the shell says (containers often set this): without it
# every Python process the suite starts (some 330 runner and worker processes) compiles
# our modules again, and each xdist worker rewrites every test module's asserts again,
# 9 CPU-seconds of its collection.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: help venv azurite chromium coverage-startup test test-setup test-fast lint typecheck
.PHONY: typecheck-code typecheck-tests bench chaos demo demo-azure demo-cluster clean

help:
	@echo "make venv       .venv with this checkout installed editable, with the dev, identity,"
	@echo "                spark and dashboard extras (then: source .venv/bin/activate, or"
	@echo "                .venv/bin/runner)"
	@echo "make azurite    Azurite $(AZURITE_VERSION) from npm into $(AZURITE_DIR) (the tests start it)"
	@echo "make coverage-startup  the .pth that lets every process of make test load"
	@echo "                coverage's plugin (tests/coverage_startup/untraced_sdk.py)"
	@echo "make chromium   Debian's chromium (apt-get) for the dashboard's browser tests"
	@echo "make demo       run the main job on the embedded default (DEMO_ARGS='--rows 200000')"
	@echo "make demo-azure the same on a private Azurite"
	@echo "make demo-cluster the same on a loopback Spark cluster (master, 2 workers, Spark"
	@echo "                Connect): workers as Connect clients, a Spark worker killed too"
	@echo "make test       install everything, then run the full test suite (both backends)"
	@echo "make test-setup what make test needs first: venv, azurite, chromium, lint,"
	@echo "                typecheck, coverage-startup (make -j2 test-setup runs it two at a time)"
	@echo "make test-fast  the suite on the embedded store, without Azurite and Spark (pytest"
	@echo "                -m 'not spark and not cluster and not azurite'), not under"
	@echo "                coverage, six workers: the quick loop while you work"
	@echo "make bench      storage operations, the chunk engine, requests per chunk by kind"
	@echo "                (SCALE.md's input), a resume of 1,000 parked chunks (both backends),"
	@echo "                a pipeline step's hand-off to the next (both backends),"
	@echo "                shared rate and running limits over 4 worker processes (both"
	@echo "                backends), a small job's first chunk behind a 10,000-chunk one"
	@echo "                (2,000 on Azurite; before and after windowed feeding), a metrics"
	@echo "                scrape of 4 workers, the dashboard's requests per refresh, status"
	@echo "                views at 10 and 10,000 retained jobs, and the"
	@echo "                migration chunked vs one plain Spark job, locally and on a loopback"
	@echo "                cluster through Spark Connect (and Structured Streaming), and the"
	@echo "                migration pipeline's failed verify redriven -> BENCHMARKS.md"
	@echo "make chaos      fault-injection runs (kills, a pause, storage faults) on both"
	@echo "                backends at three fault levels, and a 60 s storage outage"
	@echo "                (requests refused, then hanging) -> RELIABILITY.md"
	@echo "make lint       ruff check and ruff format --check"
	@echo "make typecheck  mypy (tests/ and samples/ held to tests/mypy_baseline.txt): the two"
	@echo "                halves, make typecheck-code and make typecheck-tests"
	@echo "make clean      remove .venv, .tools and the default embedded store"

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,identity,spark,dashboard]'
	touch $@

azurite: $(AZURITE_BIN)

$(AZURITE_BIN):
	mkdir -p $(AZURITE_DIR)
	npm install --prefix $(AZURITE_DIR) --no-audit --no-fund --loglevel=error \
		azurite@$(AZURITE_VERSION)
	test -x $@

# Debian's chromium, which the dashboard's browser tests drive through Playwright
# (Playwright's own browser download is not reachable here); a missing one fails them.
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)
chromium:
	command -v chromium >/dev/null || ($(SUDO) apt-get update && $(SUDO) apt-get install -y chromium)

# The suite under coverage (pyproject.toml [tool.coverage]; worker subprocesses too), then
# the report and the check that every uncovered line is in tests/coverage_gaps.txt.
# What the suite needs first, two at a time (pip beside npm, the two mypy runs side by
# side): 54 s instead of 57 s on a fresh clone here, pip alone taking 30 s of it.
test-setup: venv azurite chromium lint typecheck-code typecheck-tests coverage-startup

test:
	$(MAKE) --no-print-directory -j2 test-setup
	$(BIN)/python -m coverage erase
	$(BIN)/python -m coverage run -m pytest $(XDIST) $(PYTEST_ARGS)
	$(BIN)/python -m coverage combine --quiet
	$(BIN)/python -m coverage report
	$(BIN)/python -m tests.coverage_gaps

# Coverage's plugin (tests/coverage_startup/untraced_sdk.py) must import in every Python
# process the suite starts, whatever its PYTHONPATH: a .pth file of the virtualenv puts
# its folder, which holds nothing else, on every path (named to be read before coverage's
# own .pth file, a1_coverage.pth, which starts coverage in each process).
COVERAGE_PTH := $(VENV)/coverage-startup.pth
coverage-startup: $(COVERAGE_PTH)

$(COVERAGE_PTH): $(VENV)/.installed
	echo "$(abspath tests/coverage_startup)" > \
		"$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/a0_chunkrunner_coverage_startup.pth"
	touch $@

# Everything on the embedded store (the contract's tests, the end-to-end processes, the
# browser) but Spark and Azurite (the `spark`, `cluster` and `azurite` markers,
# pyproject.toml); no coverage, so no gap check. Not what CI runs: a change to the Azure
# backend or to what both backends share wants `pytest -m azurite` too, or make test.
test-fast: venv azurite chromium
	$(BIN)/python -m pytest -m "not spark and not cluster and not azurite" $(FAST_XDIST) \
		$(PYTEST_ARGS)

lint: venv
	$(BIN)/ruff check jobs checkpoint runner tests samples
	$(BIN)/ruff format --check jobs checkpoint runner tests samples

typecheck: typecheck-code typecheck-tests

typecheck-code: venv
	$(BIN)/mypy jobs checkpoint runner

typecheck-tests: venv
	$(BIN)/python -m tests.mypy_baseline

bench: venv azurite
	$(BIN)/python -m tests.bench.storage --output BENCHMARKS.md
	$(BIN)/python -m tests.bench.chunks --output BENCHMARKS.md
	$(BIN)/python -m tests.bench.requests_per_chunk --output BENCHMARKS.md
	$(BIN)/python -m tests.bench.retained --output BENCHMARKS.md
	$(BIN)/python -m tests.bench.parks --output BENCHMARKS.md
	$(BIN)/python -m tests.bench.handoff --output BENCHMARKS.md
	$(BIN)/python -m tests.bench.adaptive_lease --output BENCHMARKS.md
	$(BIN)/python -m tests.bench.limits --output BENCHMARKS.md
	$(BIN)/python -m tests.bench.fairness --baseline-ref 99a0db2 --output BENCHMARKS.md
	$(BIN)/python -m tests.bench.fairness --azurite --large 2000 --chunk-ms 5 --baseline-ref 99a0db2 --output BENCHMARKS.md
	$(BIN)/python -m tests.bench.fairness --second-type --chunk-ms 5 1000 --baseline-ref 3aca597 \
		--output BENCHMARKS.md
	$(BIN)/python -m tests.bench.fairness --second-type --azurite --large 2000 --chunk-ms 5 1000 \
		--baseline-ref 3aca597 --output BENCHMARKS.md
	$(BIN)/python -m tests.bench.metrics --output BENCHMARKS.md
	$(BIN)/python -m tests.bench.dashboard --chunks 100000 --azurite-chunks 100000 --runs 3 --output BENCHMARKS.md
	$(BIN)/python -m tests.bench.status_scale --sizes 10,10000 --runs 5 --output BENCHMARKS.md
	$(BIN)/python -m tests.bench.migration --output BENCHMARKS.md
	$(BIN)/python -m tests.bench.migration --files-per-batch 3 --output BENCHMARKS.md
	$(BIN)/python -m tests.bench.migration --files-per-batch 3 --rows 8000000 --output BENCHMARKS.md
	$(BIN)/python -m tests.bench.pipeline_redrive --output BENCHMARKS.md
	$(BIN)/python -m tests.bench.cluster --output BENCHMARKS.md
	$(BIN)/python -m tests.bench.cluster --rows 8000000 --runs 2 --no-streaming --no-local \
		--no-crash --output BENCHMARKS.md

# The chaos job with SIGKILLs, a SIGSTOP past the lease and storage faults, each run
# after its fault-free twin (tests/chaos/run.py); then the same job through a 60 s
# storage outage mid-run, every request refused, then every request hanging. All run;
# fails if any missed a correctness target.
CHAOS := $(BIN)/python -m tests.chaos.run --items 6000 --chunks 60 --workers 3 --kills 2 \
	--stops 1 --seed 1 --output RELIABILITY.md
OUTAGE := $(BIN)/python -m tests.chaos.run --items 6000 --chunks 60 --workers 3 --kills 0 \
	--stops 0 --busy 0 --ambiguous 0 --delayed 0 --seed 1 --output RELIABILITY.md --outage 60
chaos: venv azurite
	@failed=; \
	for backend in embedded azurite; do \
		$(CHAOS) --backend $$backend --busy 0.05 --ambiguous 0.03 --delayed 0.05 || failed=1; \
		$(CHAOS) --backend $$backend --busy 0.10 --ambiguous 0.05 --delayed 0.10 || failed=1; \
		$(CHAOS) --backend $$backend --busy 0.20 --ambiguous 0.10 --delayed 0.20 \
			--deadline 300 || failed=1; \
		$(OUTAGE) --backend $$backend --outage-mode refused || failed=1; \
		$(OUTAGE) --backend $$backend --outage-mode hanging || failed=1; \
	done; \
	test -z "$$failed"

# The batch-migration sample end to end (samples/migration/README.md): generate the data,
# submit the pipeline (stage, transform, verify, publish), 2 workers, one SIGKILLed in
# the transform and resumed, what was published checked against a one-shot Spark run
# (DEMO_ARGS=--bad-rows: verify fails on spoiled source blobs, fixed and redriven).
# Needs Java 17 for Spark. A fresh temporary store each time, removed at the end.
demo: venv
	$(BIN)/python -m samples.migration.demo $(DEMO_ARGS)

demo-azure: venv azurite
	$(BIN)/python -m samples.migration.demo --azurite $(DEMO_ARGS)

# The same on a Spark standalone cluster on loopback (samples/migration/cluster.py: a
# master, two 1-core workers and a Spark Connect server, started and stopped by the
# demo); the runner workers are Connect clients, and a Spark worker is SIGKILLed too.
demo-cluster: venv
	$(BIN)/python -m samples.migration.demo --cluster $(DEMO_ARGS)

clean:
	rm -rf $(VENV) .tools .runner
