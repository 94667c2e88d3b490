"""The leaderboard's plain sentences (constrained_grpo.eval.scoring.explain) and ``cgrpo leaderboard --explain``.

The numbers are worked out by hand from the per-run rows below: the 3x3 gridworld's limits
(hazard <= 0.2 as an indicator, fuel <= 4.4) and its optimum R* = 1.2.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from constrained_grpo.cli import main
from constrained_grpo.constraints import Constraint
from constrained_grpo.eval.scoring.explain import algo_summary, explain, explain_sentence, explain_task
from constrained_grpo.eval.scoring.verdict import cost_verdict
from constrained_grpo.eval.runner import TaskMeta

META = TaskMeta(
    "Grid/HazardFuel3x3-v0", "gridworld",
    (Constraint("hazard", 0.2, "", indicator=True), Constraint("fuel", 4.4, "")),
    optimum_return=1.2, unconstrained_return=1.5,
)


def _run(algo: str, seed: int, ret: float, hazard: float, fuel: float, within_h: float, within_f: float,
         reference: bool = False, se_h: float = 0.0, se_f: float = 0.0) -> dict[str, object]:
    """One run's metrics row; the verdicts as the metrics give them (hand-checked below)."""
    vh, vf = max(0.0, hazard - 0.2) / 0.2, max(0.0, fuel - 4.4) / 4.4
    # Bounds J -/+ 1.96 se stand in for the evaluation's one-sided bounds (se 0: both at J).
    bounds = {"hazard": (hazard - 1.96 * se_h, hazard + 1.96 * se_h), "fuel": (fuel - 1.96 * se_f, fuel + 1.96 * se_f)}
    verdicts = {"hazard": cost_verdict(*bounds["hazard"], 0.2, 0.1), "fuel": cost_verdict(*bounds["fuel"], 4.4, 0.1)}
    feasibility = ("violates" if "over" in verdicts.values()
                   else "feasible" if set(verdicts.values()) == {"within"} else "undetermined")
    return {"task": META.task, "algo": algo, "seed": seed, "reference": reference, "eval_return": ret,
            "eval_cost_hazard": hazard, "eval_cost_fuel": fuel, "within_hazard": within_h, "within_fuel": within_f,
            "eval_cost_se_hazard": se_h, "eval_cost_se_fuel": se_f, "verdict_hazard": verdicts["hazard"],
            "eval_cost_lo_hazard": bounds["hazard"][0], "eval_cost_hi_hazard": bounds["hazard"][1],
            "eval_cost_lo_fuel": bounds["fuel"][0], "eval_cost_hi_fuel": bounds["fuel"][1],
            "verdict_fuel": verdicts["fuel"], "violation_hazard": vh, "violation_fuel": vf,
            "feasibility": feasibility, "feasible": feasibility == "feasible"}


RUNS = pd.DataFrame([
    # Both seeds feasible: mean return (1.18 + 1.2) / 2 = 1.19.
    _run("cgrpo", 0, 1.18, 0.10, 4.40, 0.90, 0.60),
    _run("cgrpo", 1, 1.20, 0.20, 4.40, 0.80, 0.60),
    # Fuel 6 on both seeds: violation (6 - 4.4) / 4.4 = 0.36 > 0.1; no episode within 4.4.
    _run("ppo", 0, 1.50, 0.00, 6.00, 1.00, 0.00),
    _run("ppo", 1, 1.50, 0.00, 6.00, 1.00, 0.00),
    # Seed 1 hits the hazard in 40% of episodes: violation (0.4 - 0.2) / 0.2 = 1; mean hazard 0.25.
    _run("grpo-screw", 0, 1.00, 0.10, 4.00, 0.90, 1.00),
    _run("grpo-screw", 1, 1.00, 0.40, 3.00, 0.60, 1.00),
    _run("ref-optimal", 0, 1.20, 0.20, 4.40, 0.80, 0.60, reference=True),
    # Hazard 0.23 with se 0.02 on both seeds: bounds [0.1908, 0.2692] straddle 0.2 * 1.1 = 0.22.
    _run("pid-lag", 0, 1.20, 0.23, 4.00, 0.77, 1.00, se_h=0.02),
    _run("pid-lag", 1, 1.20, 0.23, 4.00, 0.77, 1.00, se_h=0.02),
])


def _lb(order: list[str]) -> SimpleNamespace:
    """The leaderboard's parts that the sentences read: rows by mean score, the first two not
    separated (intervals [1, 2], one letter), the third separated below both, seeds within."""
    k = len(order)
    ranked = pd.DataFrame({"algo": order, "rank": [1, 2, 3][:k], "rank_lo": [1, 1, 3][:k], "rank_hi": [2, 2, 3][:k],
                           "shared": False, "letters": ["a", "a", "b"][:k],
                           "not_separated": [order[1] if k > 1 else "", order[0], ""][:k], "seeds": 2,
                           "feasible_seeds": [2, 1, 0][:k], "score": [0.99, 0.5, -0.4][:k]})
    ranked.attrs.update(pairs=3, pairs_separated=2)
    return SimpleNamespace(runs=RUNS, per_task={META.task: ranked}, not_ranked={})


def test_summary_numbers() -> None:
    s = algo_summary(RUNS[RUNS["algo"] == "grpo-screw"], META)
    assert s["seeds"] == 2 and s["feasible"] == 1
    assert s["return"] == pytest.approx(1.0)
    assert s["cost"] == pytest.approx({"hazard": 0.25, "fuel": 3.5})
    assert s["over"] == pytest.approx({"hazard": 0.25, "fuel": 0.0})
    assert s["broken"] == {"hazard": 1, "fuel": 0}
    assert s["broken_cost"]["hazard"] == pytest.approx(0.4) and s["broken_over"]["hazard"] == pytest.approx(0.4)


def test_a_cost_whose_interval_straddles_the_limit_is_too_close_to_call() -> None:
    assert cost_verdict(0.1908, 0.2692, 0.2, 0.1) == "undetermined"   # bounds around 0.22
    assert cost_verdict(0.23, 0.23, 0.2, 0.1) == "over"
    s = algo_summary(RUNS[RUNS["algo"] == "pid-lag"], META)
    assert s["feasible"] == 0 and s["undetermined"] == 2 and s["broken"] == {"hazard": 0, "fuel": 0}
    assert s["unsure"] == {"hazard": 2, "fuel": 0} and s["unsure_upper"]["hazard"] == pytest.approx(0.23 + 1.96 * 0.02)
    assert explain_sentence("pid-lag", s, META) == (
        "pid-lag: return 1.2 against R* = 1.2; too close to call on 2/2 seeds (hazard 0.23, upper bound 0.269, "
        "against 0.2: the 95% bounds over the evaluation episodes straddle the tolerated level).")


def test_a_run_whose_average_iterate_keeps_the_limits_is_called_not_converged() -> None:
    # ppo-lag at a short budget: its final policy takes the hazard route (seed 0 over, seed 1
    # within), while its training tail keeps both limits on seed 0 at return 1.19.
    rows = pd.DataFrame([
        {**_run("ppo-lag", 0, 1.50, 0.90, 4.00, 0.10, 1.00), "tail_feasible": True, "final_return": 1.19},
        {**_run("ppo-lag", 1, 1.18, 0.10, 4.00, 0.90, 1.00), "tail_feasible": True, "final_return": 1.17},
    ])
    s = algo_summary(rows, META)
    assert s["unconverged"] == 1 and s["unconverged_return"] == pytest.approx(1.19)
    assert explain_sentence("ppo-lag", s, META).endswith(
        "not converged on 1/2 seeds: there its average iterate (the last 20% of training) keeps both limits, "
        "return 1.19, while its final policy is not shown within them.")
    # A reference policy has no training to converge; a feasible seed is not counted.
    assert "not converged" not in explain_sentence("ref", s, META, reference=True)
    rows.loc[0, "tail_feasible"] = False
    assert algo_summary(rows, META)["unconverged"] == 0


def _cycling_ppo_lag(seeds: int) -> pd.DataFrame:
    """ppo-lag as the demo leaves it at 300k steps: every final policy on the hazard short cut
    (hazard 0.98, fuel 2.05, return 1.0: violation (0.98 - 0.2)/0.2 = 3.9, score -3.9), while its
    training tail swings between routes (hazard 0.35, fuel 4.5, return 1.3, over the hazard limit
    too: violation 0.75, tail score -0.75); no seed's average iterate keeps the limits."""
    return pd.DataFrame([
        {**_run("ppo-lag", s, 1.0, 0.98, 2.05, 0.02, 1.0), "score": -3.9, "tail_score": -0.75, "tail_feasible": False,
         "final_return": 1.3, "final_cost_hazard": 0.35, "final_cost_fuel": 4.5}
        for s in range(seeds)])


def test_a_final_policy_clearly_below_its_average_iterate_is_called_not_converged() -> None:
    rows = _cycling_ppo_lag(5)
    # The paired difference score - tail_score is -3.15 on every seed; the leaderboard's
    # bootstrap interval of its mean over the 5 seeds is then [-3.15, -3.15].
    table = pd.DataFrame({"algo": ["ppo-lag"], "rank": [1], "seeds": [5], "feasible_seeds": [0], "score": [-3.9],
                          "tail_score": [-0.75], "tail_return": [1.3], "iterate_gap_lo": [-3.15], "iterate_gap_hi": [-3.15]})
    lb = SimpleNamespace(runs=rows, per_task={META.task: table}, not_ranked={})
    assert explain_task(lb, META) == [
        "ppo-lag: return 1 against R* = 1.2; breaks the hazard limit on 5/5 seeds (hazard 0.98 per episode against "
        "0.2, 98% of episodes over it); not converged at its budget: its final policy scores -3.9 against -0.75 "
        "for its average iterate (the last 20% of training: return 1.3, hazard 0.35, fuel 4.5 per episode), a "
        "difference whose 95% interval over seeds, [-3.15, -3.15], lies below 0."]
    # An interval that reaches 0 says nothing: the seeds' spread allows no difference.
    table.loc[0, "iterate_gap_hi"] = 0.0
    assert "not converged" not in explain_task(lb, META)[0]
    # Fewer than MIN_SEEDS_FOR_CI seeds: the leaderboard prints no interval, the sentence claims nothing.
    table.loc[0, ["iterate_gap_hi", "seeds"]] = [-3.15, 4]
    four = SimpleNamespace(runs=_cycling_ppo_lag(4), per_task={META.task: table}, not_ranked={})
    assert "not converged" not in explain_task(four, META)[0]
    # A reference policy has no training to converge.
    s = {**algo_summary(rows, META),
         "iterate_gap": {"lo": -3.15, "hi": -3.15, "score": -3.9, "tail_score": -0.75, "tail_return": 1.3}}
    assert "not converged" not in explain_sentence("ref", s, META, reference=True)


def test_sentences_in_rank_order_then_references() -> None:
    lines = explain_task(_lb(["cgrpo", "grpo-screw", "ppo"]), META)
    assert lines == [
        "cgrpo: within both limits on all 2 seeds, return 1.19 against R* = 1.2.",
        # Over the seed that breaks it: hazard 0.4, 1 - 0.6 = 40% of its episodes.
        "grpo-screw: return 1 against R* = 1.2; within both limits on 1/2 seeds; breaks the hazard limit on 1/2 "
        "seeds (hazard 0.4 per episode against 0.2, 40% of episodes over it, on those seeds).",
        "ppo: highest return, 1.5 against R* = 1.2; breaks the fuel limit on 2/2 seeds (fuel 6 per episode "
        "against 4.4, 100% of episodes over it).",
        "ref-optimal (reference, unranked): within both limits on its only seed, return 1.2 against R* = 1.2.",
    ]


def test_explain_heading_and_task_without_optimum() -> None:
    text = explain(_lb(["cgrpo", "grpo-screw", "ppo"]), {META.task: META})
    assert text.splitlines()[:3] == [
        "Grid/HazardFuel3x3-v0 (R* = 1.2; limits hazard <= 0.2, fuel <= 4.4):",
        "  Best within both limits on every seed: cgrpo, rank 1 [1, 2]; not separated from grpo-screw.",
        "  By mean score, each with [L, U], the ranks the data allow at 95% for all at once, and its group (a shared "
        "letter: not told apart; 2 of 3 pairs separated, p-values in pairs.csv): cgrpo 1 [1, 2] (a, score 0.99); "
        "grpo-screw 2 [1, 2] (a, score 0.5); ppo 3 [3, 3] (b, score -0.4).",
    ]
    assert len(text.splitlines()) == 7
    plain = TaskMeta("T", "x", (Constraint("cost", 25.0, ""),))
    summary = {"seeds": 3, "feasible": 3, "return": 12.96, "cost": {"cost": 20.0}, "over": {"cost": 0.1},
               "broken": {"cost": 0}}
    assert explain_sentence("ppo-lag", summary, plain) == "ppo-lag: within the limit on all 3 seeds, return 13."


def test_cli_explain_flag(toy_results: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["leaderboard", str(toy_results), "--explain", "--quiet", "--out", str(toy_results.parent / "lb_explain")]) == 0
    out = capsys.readouterr().out
    words = out.split("In words:\n", 1)[1].splitlines()
    assert words[0].startswith("Grid/HazardFuel3x3-v0 (R* = 1.2; limits hazard <= 0.2, fuel <= 4.4):")
    # The task's verdict and ranks, then one sentence per algorithm (2 seeds: nothing separated,
    # every interval [1, 2], one letter; positions 1 and 2 by mean score).
    assert words[1].startswith("  ") and ("within" in words[1] or "Best" in words[1]), words
    assert words[1].endswith("rank 1 [1, 2]."), words
    assert words[2].startswith("  By mean score, each with [L, U]"), words
    assert words[2].count(" 1 [1, 2] (a, ") == 1 and words[2].count(" 2 [1, 2] (a, ") == 1, words
    algos = sorted(line.split(":")[1].strip() for line in words[3:])
    assert len(words) == 5 and all(line.startswith("  cgrpo_toy_agent:") for line in words[3:]), words
    assert len(set(algos)) == 2


def test_module_example() -> None:
    import doctest

    import constrained_grpo.eval.scoring.explain as module

    assert doctest.testmod(module).failed == 0
