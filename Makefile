# Every target creates or reuses .venv. torch is pinned and installed first: an
# unpinned torch (asked for by stable-baselines3) would pull a multi-GB CUDA build.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
TORCH  := torch==2.13.0
# The test suite exercises every family and backend, so the default install takes every
# extra; `make install EXTRAS=dev` gives the base package plus the test tools.
EXTRAS ?= dev,ray,highway,math,llm,trl,tb,lab

.PHONY: install test test-fast demo bench clean safety parity

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "$(TORCH)"
	$(PY) -m pip install --quiet -e ".[$(EXTRAS)]"
	touch $(STAMP)

# Every test, one worker per core (pytest-xdist; a file's tests stay on one worker, so its
# fixtures are built once): about 5 minutes on 2 idle cores. `make test-fast` leaves out the
# tests marked slow (sweeps, training runs, subprocesses, the tutorial): under a minute.
TEST_WORKERS ?= auto

test: $(STAMP)
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile

test-fast: $(STAMP)
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile -m "not slow"

# The teaching demo, about 3 min on 2 cores after the install: constrained and unconstrained learners on
# the 3x3 gridworld (7 seeds, with the reference policies), the coupling figure of the two
# GRPO aggregators, then the leaderboard in words: per task the verdict, the ranks with their
# intervals and one plain sentence per algorithm (the full table is the page).
demo: $(STAMP)
	$(VENV)/bin/cgrpo bench --preset demo --out runs/demo --no-progress
	$(PY) -m constrained_grpo.eval.studies.coupling demo --out runs/demo/coupling
	$(VENV)/bin/cgrpo leaderboard runs/demo --explain --quiet
	@echo "Full table (every column, with tooltips): runs/demo/leaderboard.html"

# Every speed benchmark (constrained_grpo.eval.bench.*), one CSV each in results/bench;
# training.csv (training throughput of every algorithm beside plain SB3 PPO, and
# time-to-criterion with a 10M-step cap, 3 seeds) takes about an hour of one core: run it
# alone. `make bench BENCH_ONLY="training"` runs a subset.
BENCH_ONLY ?=

bench: $(STAMP)
	$(PY) -m constrained_grpo.eval.bench --out results/bench $(if $(BENCH_ONLY),--only $(BENCH_ONLY))

# The lab notebooks (docs/lab, tutorial sections 1-5 with exercises and solutions), run in
# order in a fresh folder; they must finish within 10 minutes on 2 cores (about 30 s measured).
.PHONY: lab
lab: $(STAMP)
	$(PY) docs/lab/run_all.py --budget-s 600

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache

# Safety-Gymnasium 1.0.0 pins gymnasium 0.28.1 and numpy < 1.24, which cannot share .venv:
# it gets a second environment, reached through a pipe (docs/safety_bridge.md). Python
# 3.10 runs it unmodified (3.11 after patch_py311.py; 3.12 has no wheels for the pins).
# Pick the interpreter with `make safety SAFETY_PYTHON=/path/to/python3.10`. The last step
# makes and steps one env, then writes the record that the bridge reads.
SAFETY_VENV   := .venv-safety
SAFETY_PY     := $(SAFETY_VENV)/bin/python
SAFETY_RECORD := $(SAFETY_VENV)/cgrpo-safety.json
SAFETY_PYTHON ?=

safety: $(SAFETY_RECORD)

$(SAFETY_RECORD): envs/safety/requirements.txt
	@py="$(SAFETY_PYTHON)"; \
	if [ -z "$$py" ]; then \
	  for c in python3.10 $(HOME)/.pyenv/versions/3.10*/bin/python3.10 python3.11 $(HOME)/.pyenv/versions/3.11*/bin/python3.11; do \
	    if "$$c" -c 'import sys; assert sys.version_info[:2] in ((3, 10), (3, 11))' 2>/dev/null; then py="$$c"; break; fi; \
	  done; \
	fi; \
	if [ -z "$$py" ]; then \
	  echo "make safety: no working Python 3.10 or 3.11 found; install one (e.g. 'pyenv install 3.10') or run 'make safety SAFETY_PYTHON=/path/to/python3.10'" >&2; exit 1; \
	fi; \
	echo "make safety: building $(SAFETY_VENV) with $$py ($$("$$py" -V 2>&1))"; \
	rm -rf $(SAFETY_VENV) && "$$py" -m venv $(SAFETY_VENV)
	$(SAFETY_PY) -m pip install --quiet --upgrade pip
	$(SAFETY_PY) -m pip install --quiet -r envs/safety/requirements.txt
	$(SAFETY_PY) -m pip install --quiet --no-deps safety-gymnasium==1.0.0
	$(SAFETY_PY) envs/safety/patch_py311.py
	$(SAFETY_PY) envs/safety/worker.py --check safety_gymnasium:make SafetyPointGoal1-v0 $(SAFETY_RECORD)

# The OmniSafe parity environment (docs/parity.md; not part of `make test` or CI): OmniSafe
# 0.5.0 beside Safety-Gymnasium 1.0.0 on Python 3.11, where the CPU build of torch 2.13.0
# exists (on 3.10 the registry's torch 2.13.0 is a CUDA build of several GB). omnisafe goes
# in with --no-deps and its declared requirements are listed here: pip would otherwise
# re-resolve safety-gymnasium's pygame==2.1.0 pin, which has no 3.11 wheel and fails to
# build; the constraints keep the Safety pins (numpy 1.23.5, gymnasium 0.28.1) and torch.
PARITY_VENV   := .venv-parity
PARITY_PY     := $(PARITY_VENV)/bin/python
PARITY_RECORD := $(PARITY_VENV)/cgrpo-parity.json
PARITY_PYTHON ?= python3.11
PARITY_PINS   := $(PARITY_VENV)/constraints.txt

parity: $(PARITY_RECORD)

$(PARITY_RECORD): envs/safety/requirements.txt
	"$(PARITY_PYTHON)" -c 'import sys; assert sys.version_info[:2] == (3, 11), sys.version' || \
	  { echo "make parity: needs Python 3.11; run 'make parity PARITY_PYTHON=/path/to/python3.11'" >&2; exit 1; }
	rm -rf $(PARITY_VENV) && "$(PARITY_PYTHON)" -m venv $(PARITY_VENV)
	$(PARITY_PY) -m pip install --quiet --upgrade pip
	$(PARITY_PY) -m pip install --quiet "$(TORCH)"
	$(PARITY_PY) -m pip install --quiet -r envs/safety/requirements.txt
	$(PARITY_PY) -m pip install --quiet --no-deps safety-gymnasium==1.0.0
	$(PARITY_PY) envs/safety/patch_py311.py
	printf '%s\n' numpy==1.23.5 gymnasium==0.28.1 mujoco==2.3.3 "$(TORCH)" > $(PARITY_PINS)
	$(PARITY_PY) -m pip install --quiet --no-deps omnisafe==0.5.0
	$(PARITY_PY) -m pip install --quiet -c $(PARITY_PINS) pandas==2.0.3 "tensorboard>=2.8" "wandb>=0.13" \
	  "pyyaml>=6" "moviepy>=1" "typing-extensions>=4" "typer[all]>=0.7" "seaborn>=0.12.2" "matplotlib>=3.7.1" "gdown>=4.6"
	$(PARITY_PY) envs/safety/worker.py --check safety_gymnasium:make SafetyHopperVelocity-v1 $(PARITY_VENV)/cgrpo-safety.json
	$(PARITY_PY) -c 'import json, omnisafe, torch, pandas; json.dump({"omnisafe": omnisafe.__version__, "torch": torch.__version__, "pandas": pandas.__version__}, open("$(PARITY_RECORD)", "w"))'
