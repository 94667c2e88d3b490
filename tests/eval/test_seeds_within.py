"""Keeping the limits, counted per seed: the "seeds within" count with its exact interval, and
"feasible? yes" never printed over a seed whose own verdict breaks a limit."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from test_verdicts import TASKS, per_task, run_rows, table  # noqa: E402

from constrained_grpo.eval.scoring.leaderboard import build_leaderboard, clopper_pearson, render_markdown  # noqa: E402


def test_clopper_pearson_by_hand() -> None:
    # k = n: [(alpha/2)^(1/n), 1]; k = 0: [0, 1 - (alpha/2)^(1/n)].
    assert clopper_pearson(10, 10) == pytest.approx((0.025 ** 0.1, 1.0))
    assert clopper_pearson(0, 10) == pytest.approx((0.0, 1 - 0.025 ** 0.1))
    lo, hi = clopper_pearson(7, 10)
    assert (round(lo, 3), round(hi, 3)) == (0.348, 0.933)


def test_a_breaking_seed_is_never_inside_a_yes() -> None:
    # Nine seeds at hazard 0.05 and one at 0.12 (violation 0.2 > tol 0.1), noiseless: the one
    # seed's verdict breaks the limit, yet the mean violation over a resample of 10 seeds passes
    # 0.1 only when it is drawn 5 times or more: P(feasible) about 0.9999, the old "yes".
    rows = [r for s in range(9) for r in run_rows("a", s, ret=1.5, hazard=0.05, exact=True)]
    rows += run_rows("a", 9, ret=1.5, hazard=0.12, exact=True)
    lb = build_leaderboard(table(rows), TASKS, reps=2000)
    row = per_task(lb).loc["a"]
    assert row["p_feasible"] >= 0.95 and row["breaking_seeds"] == 1
    assert row["verdict"] == "uncertain"
    md = render_markdown(lb)
    assert "| 9/10 [0.55, 1.00] | 9/10 | 0/10 | 1.00 | uncertain |" in md
    # The tolerance is named in the header, and "within d" is counted apart.
    assert "seeds within d(1 + 0.1) [95% CI] | seeds within d |" in md


def test_a_learner_split_over_seeds_is_named_as_a_count() -> None:
    # Three seeds within (hazard 0.05) and three breaking (0.3, violation 2): a mean of two modes.
    rows = [r for s in range(3) for r in run_rows("split", s, ret=1.5, hazard=0.05, exact=True)]
    rows += [r for s in range(3, 6) for r in run_rows("split", s, ret=1.9, hazard=0.3, exact=True)]
    rows += [r for s in range(6) for r in run_rows("steady", s, ret=1.2, hazard=0.05, exact=True)]
    md = render_markdown(build_leaderboard(table(rows), TASKS, reps=300))
    assert "Split over seeds (2 or more seeds within the limits and 2 or more breaking them): split (3/6 within, " \
           "3 breaking). For these the seeds give a count, not a mean" in md
    assert "steady (" not in md.split("Split over seeds")[1].split("\n")[0]
