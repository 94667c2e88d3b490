"""The parity table (constrained_grpo.eval.studies.parity table): Student-t intervals over seeds, no interval from one seed."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import pytest

from constrained_grpo.eval.studies import parity


def _run(root: Path, side: str, seed: int, ret: float, cost: float, length: float | None = None) -> None:
    d = root / side / f"seed_{seed}"
    d.mkdir(parents=True)
    if length is None:  # a curve written before episode lengths were recorded
        (d / "curve.csv").write_text(f"env_steps,ep_return,ep_cost\n20000,1.0,50.0\n40000,{ret},{cost}\n")
    else:
        (d / "curve.csv").write_text(f"env_steps,ep_return,ep_cost,ep_length\n20000,1.0,50.0,10\n40000,{ret},{cost},{length}\n")
    (d / "meta.json").write_text(json.dumps({"algo": side, "command": f"run {side} {seed}", "env_steps_per_s": 100.0}))


def test_t_interval_by_hand() -> None:
    mean, hw = parity.t_interval([1.0, 2.0, 3.0])
    # sd 1, t_{0.975, 2} = 4.302653, half-width 4.302653 / sqrt(3) = 2.4841.
    assert mean == 2.0 and hw == pytest.approx(4.302653 / math.sqrt(3), rel=1e-6)
    assert math.isnan(parity.t_interval([5.0])[1])


def test_table_prints_intervals_only_from_two_seeds(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    for seed, (ret, cost) in enumerate([(10.0, 1.0), (20.0, 2.0), (30.0, 3.0)]):
        _run(runs, "omnisafe", seed, ret, cost, length=100.0 * (seed + 1))
    _run(runs, "ours", 0, 12.5, 4.0)
    parity.table(argparse.Namespace(runs=str(runs), out=str(tmp_path / "out")))
    md = (tmp_path / "out" / "parity.md").read_text()
    assert "| omnisafe | omnisafe | 3 | 40000 | 20.0 +- 24.84 | 2.0 +- 2.48 | 100 200 300 | 100 |" in md
    assert "| ours | ours | 1 | 40000 | 12.5 (n=1: no CI) | 4.0 (n=1: no CI) | - | 100 |" in md
    assert "nan" not in md
    rows = (tmp_path / "out" / "parity.csv").read_text().splitlines()
    assert rows[1].split(",")[8:10] == ["200.0", "100 200 300"]  # mean length, then per seed
    assert (tmp_path / "out" / "curves.png").stat().st_size > 0


def test_welch_interval_by_hand() -> None:
    # a = 1, 2, 3 (s^2 = 1), b = 2, 4, 6 (s^2 = 4): s^2/n = 1/3 and 4/3, se = sqrt(5/3);
    # nu = (5/3)^2 / ((1/3)^2/2 + (4/3)^2/2) = 50/17; t_{0.975, 50/17} = 3.21877.
    diff, hw, nu = parity.welch_interval([1.0, 2.0, 3.0], [2.0, 4.0, 6.0])
    assert diff == 2.0 and nu == pytest.approx(50 / 17)
    assert hw == pytest.approx(3.21877 * math.sqrt(5 / 3), rel=1e-5)
    assert math.isnan(parity.welch_interval([1.0], [2.0, 3.0])[1])
    assert math.isnan(parity.welch_interval([1.0, 1.0], [2.0, 2.0])[1])  # no spread: no interval


def test_table_compares_the_sides_at_checkpoints(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    # Final return: OmniSafe 10, 20, 30 and ours 110, 120, 130: difference 100; equal
    # spreads (s^2 = 100 each) give nu = 4, t_{0.975, 4} = 2.776445, se = sqrt(200/3),
    # half-width 22.67: ours higher. Final cost 1, 2, 3 vs 2, 3, 4: difference 1,
    # se = sqrt(2/3), half-width 2.27: not separated.
    for seed, (ret, cost) in enumerate([(10.0, 1.0), (20.0, 2.0), (30.0, 3.0)]):
        _run(runs, "omnisafe", seed, ret, cost)
        _run(runs, "ours", seed, ret + 100.0, cost + 1.0)
    parity.table(argparse.Namespace(runs=str(runs), out=str(tmp_path / "out")))
    rows = (tmp_path / "out" / "difference.csv").read_text().splitlines()
    assert rows[0] == ("env_steps,return_diff,return_diff_ci95,return_verdict,"
                       "cost_diff,cost_diff_ci95,cost_verdict")
    assert rows[-1] == "40000,100.0,22.67,ours higher,1.0,2.27,not separated"
    # 0.2 x 40000 = 8000 steps: the first epoch (20000) on both sides, identical: no interval.
    assert rows[1] == "8000,0.0,nan,no interval,0.0,nan,no interval"
    md = (tmp_path / "out" / "parity.md").read_text()
    assert "| 40000 | 100.0 +- 22.67 | ours higher | 1.0 +- 2.27 | not separated |" in md

