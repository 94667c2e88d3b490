"""The read side (every module of eval/scoring/) scores committed tables without the
trainers: importing it must not import torch or stable-baselines3."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = ("torch", "stable_baselines3")
SCORING = Path(__file__).resolve().parents[2] / "eval" / "scoring"


def _heavy_after_import(module: str) -> list[str]:
    """The HEAVY modules in ``sys.modules`` of a fresh interpreter after ``import module``."""
    code = f"import json, sys, {module}; print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(p.stem for p in SCORING.glob("*.py") if p.stem != "__init__"))
def test_read_side_imports_no_trainer(name: str) -> None:
    assert _heavy_after_import(f"constrained_grpo.eval.scoring.{name}") == []


@pytest.mark.slow
def test_read_side_takes_task_metadata_from_the_schema_module() -> None:
    # Not from the runner (which builds agents): the schema module is the one source.
    code = ("import json, sys, constrained_grpo.eval.scoring.leaderboard, constrained_grpo.eval.scoring.plots; "
            "print(json.dumps([m for m in ('constrained_grpo.schema', 'constrained_grpo.eval.runner') if m in sys.modules]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == ["constrained_grpo.schema"]


@pytest.mark.slow
def test_probe_sees_a_trainer_import() -> None:
    # Control: the probe does detect torch where it is imported (the GRPO agent module).
    assert "torch" in _heavy_after_import("constrained_grpo.agents.agent")


@pytest.mark.slow
def test_loading_and_ranking_results_runs_without_the_training_stack(toy_results) -> None:
    """Calling the read side, not only importing it: load_results, the run metrics, the
    leaderboard and its Markdown on real run directories load no torch, SB3 or trainer."""
    code = (
        "import json, sys\n"
        "from constrained_grpo.eval.scoring.loader import load_results\n"
        "from constrained_grpo.eval.scoring.leaderboard import build_leaderboard, render_markdown\n"
        f"res = load_results({str(toy_results)!r})\n"
        "lb = build_leaderboard(res.table, res.tasks, reps=50)\n"
        "assert 'rank' in render_markdown(lb)\n"
        "print(json.dumps([m for m in ('torch', 'stable_baselines3', 'constrained_grpo.agents', "
        "'constrained_grpo.baselines') if m in sys.modules]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
