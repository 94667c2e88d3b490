"""The parity table (constrained_grpo.eval.parity table): Student-t intervals over seeds, no interval from one seed."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import pytest

from constrained_grpo.eval import parity


def _run(root: Path, side: str, seed: int, ret: float, cost: float) -> None:
    d = root / side / f"seed_{seed}"
    d.mkdir(parents=True)
    (d / "curve.csv").write_text(f"env_steps,ep_return,ep_cost\n20000,1.0,50.0\n40000,{ret},{cost}\n")
    (d / "meta.json").write_text(json.dumps({"algo": side, "command": f"run {side} {seed}", "env_steps_per_s": 100.0}))


def test_t_interval_by_hand() -> None:
    mean, hw = parity.t_interval([1.0, 2.0, 3.0])
    # sd 1, t_{0.975, 2} = 4.302653, half-width 4.302653 / sqrt(3) = 2.4841.
    assert mean == 2.0 and hw == pytest.approx(4.302653 / math.sqrt(3), rel=1e-6)
    assert math.isnan(parity.t_interval([5.0])[1])


def test_table_prints_intervals_only_from_two_seeds(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    for seed, (ret, cost) in enumerate([(10.0, 1.0), (20.0, 2.0), (30.0, 3.0)]):
        _run(runs, "omnisafe", seed, ret, cost)
    _run(runs, "ours", 0, 12.5, 4.0)
    parity.table(argparse.Namespace(runs=str(runs), out=str(tmp_path / "out")))
    md = (tmp_path / "out" / "parity.md").read_text()
    assert "| omnisafe | omnisafe | 3 | 40000 | 20.0 +- 24.84 | 2.0 +- 2.48 | 100 |" in md
    assert "| ours | ours | 1 | 40000 | 12.5 (n=1: no CI) | 4.0 (n=1: no CI) | 100 |" in md
    assert "nan" not in md
    assert (tmp_path / "out" / "curves.png").stat().st_size > 0
