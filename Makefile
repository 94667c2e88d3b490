# Every target creates or reuses .venv. torch is pinned and installed first: an
# unpinned torch (asked for by stable-baselines3) would pull a multi-GB CUDA build.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
TORCH  := torch==2.13.0

.PHONY: install test demo bench clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "$(TORCH)"
	$(PY) -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -q

demo: $(STAMP)
	$(PY) -m constrained_grpo.envs.gridworld.demo --episodes 50

bench: $(STAMP)
	$(PY) -m constrained_grpo.eval.speed --out results/bench

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
