"""Final policy against average iterate: two quantities of the same kind. A run whose final
policy and training tail have the same return and costs differs from its tail by exactly 0,
its interval contains 0, and the sentences do not call it "not converged"."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from test_verdicts import TASKS, META, per_task, run_rows, table  # noqa: E402

from constrained_grpo.eval.scoring.explain import explain  # noqa: E402
from constrained_grpo.eval.scoring.leaderboard import build_leaderboard  # noqa: E402


def test_identical_iterates_differ_by_zero_and_are_not_called_unconverged() -> None:
    # Every seed: return 1.5, hazard on 2 of 20 evaluation episodes (0.1, at the limit) and
    # 0.1 per training iteration. The expected score weighs what 20 episodes cannot tell
    # (below the point score), the tail's is a point score: the old gap was that difference,
    # the same on every seed, an interval [x, x] below 0 and "not converged".
    t = table(*[run_rows("a", s, ret=1.5, hazard=0.1) for s in range(6)],
              *[run_rows("b", s, ret=1.0, hazard=0.0) for s in range(6)])
    lb = build_leaderboard(t, TASKS, reps=300)
    row = per_task(lb).loc["a"]
    assert row["score"] < row["tail_score"]          # the expected score is the lower
    assert row["iterate_gap"] == 0.0 and row["iterate_gap_lo"] <= 0.0 <= row["iterate_gap_hi"]
    assert "not converged" not in explain(lb, {META.task: META})
