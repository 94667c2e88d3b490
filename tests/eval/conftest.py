"""Shared fixtures of the harness tests: a test-only agent and a small results tree.

The agent lives in ``cgrpo_toy_agent.py`` beside this file and is named by dotted path
(``cgrpo_toy_agent:ToyAgent``), the registry's way to reach an unregistered factory,
so that worker processes and ``cgrpo`` subprocesses find it through ``PYTHONPATH``.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from constrained_grpo.eval.runner import RunSpec, execute_run, task_meta

HERE = Path(__file__).resolve().parent
for folder in (HERE.parent, HERE):  # tests/ for inprocess.py, tests/eval for the toy agent
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

from cgrpo_toy_agent import TASK, TOY, TOY_UNCONSTRAINED  # noqa: E402


@pytest.fixture(scope="session")
def toy_results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two algorithms x two seeds of the toy agent on the 3x3 grid, run in-process."""
    out = tmp_path_factory.mktemp("toy_results")
    meta = task_meta(TASK)
    for algo in (TOY, TOY_UNCONSTRAINED):
        for seed in (0, 1):
            outcome = execute_run(RunSpec(TASK, algo, seed, 300, 13, {}, False), out, meta=meta)
            assert outcome.status == "done", outcome.error
    return out


@pytest.fixture()
def results_copy(toy_results: Path, tmp_path: Path) -> Path:
    """A private copy of ``toy_results`` that a test may corrupt."""
    dest = tmp_path / "results"
    shutil.copytree(toy_results, dest)
    return dest
