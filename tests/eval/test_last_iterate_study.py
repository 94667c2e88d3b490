"""The last-iterate study's statistics by hand, its goal rule, and its report regenerated from
the committed tables byte for byte."""

from __future__ import annotations

import filecmp
import math
import shutil
from pathlib import Path

import pandas as pd
import pytest

from constrained_grpo.eval.studies import last_iterate as li

COMMITTED = Path(__file__).resolve().parents[2] / "results" / "last_iterate"


def test_mcnemar_exact_by_hand():
    assert li.mcnemar_exact(6, 0) == pytest.approx(2 * 0.5**6)  # 0.031, the coupling experiment's
    assert li.mcnemar_exact(5, 1) == pytest.approx(2 * (1 + 6) / 2**6)
    assert li.mcnemar_exact(0, 0) == 1.0 and li.mcnemar_exact(3, 3) == 1.0


def test_paired_t_interval_by_hand():
    mean, lo, hi = li.paired_t_interval([1.0, 2.0, 3.0])
    half = 4.302652729911275 * 1.0 / math.sqrt(3)  # t_{0.975, 2} s / sqrt(n), s = 1
    assert (mean, lo, hi) == pytest.approx((2.0, 2.0 - half, 2.0 + half))
    assert math.isnan(li.paired_t_interval([1.0])[1])


def _runs(final: list[str], tail: list[bool], ret: list[float], task: str = li.GOAL_TASK) -> pd.DataFrame:
    n = len(final)
    return pd.DataFrame({"task": task, "algo": "x", "seed": range(n), "feasibility": final, "tail_feasible": tail,
                         "eval_return_norm": ret, "final_return_norm": ret, "violation": 0.0, "tail_violation": 0.0,
                         "stability_class": ["settled"] * (n - 1) + ["stuck"], "eval_episodes": 100})


def test_the_goal_needs_nine_final_and_average_feasible_seeds_and_the_returns_interval():
    ok = li.summarize(_runs(["feasible"] * 9 + ["violates"], [True] * 10, [0.97 + 0.001 * i for i in range(10)]))
    assert ok.loc[0, "goal"] == "met" and ok.loc[0, "final_within"] == 9 and ok.loc[0, "stability_class"] == "settled"
    straddles = li.summarize(_runs(["feasible"] * 10, [True] * 10, [0.90, 1.0] * 5))
    assert straddles.loc[0, "goal"] == "undetermined"
    eight = li.summarize(_runs(["feasible"] * 8 + ["undetermined"] * 2, [True] * 10, [1.0] * 10))
    assert eight.loc[0, "goal"] == "not met" and eight.loc[0, "final_undetermined"] == 2
    avg_fails = li.summarize(_runs(["feasible"] * 10, [True] * 8 + [False] * 2, [1.0] * 10))
    assert avg_fails.loc[0, "goal"] == "not met" and avg_fails.loc[0, "mcnemar_c"] == 2
    other_task = li.summarize(_runs(["feasible"] * 10, [True] * 10, [1.0] * 10, task="Grid/HazardFuelMud-v0"))
    assert other_task.loc[0, "goal"] == ""


@pytest.mark.slow
def test_the_committed_report_regenerates_from_the_committed_tables(tmp_path: Path):
    for name in (li.RUNS_FILE, li.TRACES_FILE):
        shutil.copy(COMMITTED / name, tmp_path / name)
    li.report(tmp_path, command="python -m constrained_grpo.eval.studies.last_iterate report results/last_iterate")
    for name in ("last_iterate.md", "summary.csv"):
        assert filecmp.cmp(tmp_path / name, COMMITTED / name, shallow=False), name
    assert all((tmp_path / f"traces_{t.split('/')[-1]}.png").is_file() for t in li.TASKS)


def test_report_names_the_missing_table(tmp_path: Path):
    with pytest.raises(FileNotFoundError, match="runs.csv is missing; run .*analyze RUNS --out"):
        li.report(tmp_path)
