"""Multiplier stability, cost tracking and dual distance on traces whose answers are known
by hand; the traces of issue 14 (point 4) with the old score for contrast."""

from __future__ import annotations

import math

import numpy as np
import pytest

from constrained_grpo.eval.scoring import stability as S

N = 200  # iterations; the second half H is t = 100..199, the end window t = 160..199
IT = np.arange(N)
T = IT / (N - 1)  # training fraction, 0..1
STEPS = 1000.0 * (IT + 1)
D = 1.0
OK = np.full(N, 0.5 * D)  # slack: e_t = -0.5
BAD = np.full(N, 1.5 * D)  # violated: e_t = +0.5, so max(0, v_H)/tol = 5 at tol 0.1
W = 2 * np.pi * 2.6  # 2.6 periods over the run: 1.3 in the second half


def old_score(lam: np.ndarray, violated: bool) -> float:
    """The score of eval/scoring/metrics.py before issue 14: 1/(1 + 2|drift| R^2 (1 + [drift > 0, violated]) + CV)."""
    s, x = STEPS[N // 2:], lam[N // 2:]
    mean = abs(x.mean())
    sc = s - s.mean()
    beta = np.dot(sc, x - x.mean()) / np.dot(sc, sc)
    drift = beta * (s[-1] - s[0]) / max(mean, 1e-6)
    r2 = 0.0 if x.std() == 0 else np.corrcoef(s, x)[0, 1] ** 2
    cv = x.std() / max(mean, 1e-6)
    return float(1 / (1 + 2 * abs(drift) * r2 * (2 if drift > 0 and violated else 1) + cv))


def blips() -> np.ndarray:
    lam = np.zeros(N)
    lam[[125, 150, 175]] = 0.01  # three blips in the second half
    return lam


def sine(amplitude: float, omega: float = W, phase: float = np.pi) -> tuple[np.ndarray, np.ndarray]:
    """lambda = 1 + a sin(w t + phase) and the cost that drives it under dual ascent: J = d (1 + a cos(w t + phase))."""
    x = omega * T + phase
    return 1 + amplitude * np.sin(x), D * (1 + amplitude * np.cos(x))


def square() -> tuple[np.ndarray, np.ndarray]:
    """lambda switches 0 <-> 20 every 5 iterations; the cost is violated while lambda = 0, slack while 20."""
    low = (IT // 5) % 2 == 0
    return np.where(low, 0.0, 20.0), np.where(low, 1.5, 0.5) * D


def stab(lam: np.ndarray, cost: np.ndarray, **kw: float) -> S.StabilityResult:
    return S.multiplier_stability(STEPS, lam, cost, D, **kw)


# The traces of issue 14, point 4: (lambda, cost, old "violated" flag, old score printed in the issue).
BOUND = np.minimum(100.0, 250.0 * T)  # lambda_max = 100 reached at 40% of training, then flat
ISSUE = {
    "blips": (blips(), OK, False, 0.150),
    "exp decay": (5 * np.exp(-8 * T), OK, False, 0.139),
    "linear decay": (5 * np.maximum(0.0, 1 - T / 0.6), OK, False, 0.134),
    "ramp 0-50": (50 * T, BAD, True, 0.260),
    "at bound": (BOUND, BAD, True, 1.000),
    "sine, 1.3 periods over the run": (*sine(0.5, omega=2 * np.pi * 1.3, phase=0.0), True, 0.156),
    "ramp 40-60": (40 + 20 * T, BAD, True, 0.563),
    "log growth": (np.log1p(144 * T), BAD, True, 0.620),
    "square 0/20": (*square(), True, 0.498),
    "never moves": (np.full(N, 0.7), BAD, True, 1.000),
}


@pytest.mark.parametrize("name", list(ISSUE))
def test_old_score_reproduces_the_issue(name):
    lam, _, violated, printed = ISSUE[name]
    assert old_score(lam, violated) == pytest.approx(printed, abs=5e-4)


# ------------------------------------------------------------------------- the classes


def test_zero_blips_and_decays_while_satisfied_are_settled_near_one():
    assert stab(np.zeros(N), OK).score == 1.0
    # sigma = max(|mean|, lambda_ref = 1) = 1; largest rise 0.01: A = 0.005.
    b = stab(blips(), OK)
    assert b.verdict == "settled" and b.amplitude == pytest.approx(0.005)
    assert b.score == pytest.approx(0.5 + 0.5 / 1.005)
    for lam in (5 * np.exp(-8 * T), 5 * np.maximum(0.0, 1 - T / 0.6), 5 * (1 - T)):
        r = stab(lam, OK)  # a non-increasing lambda has no rise: A = 0
        assert (r.verdict, r.amplitude, r.score) == ("settled", 0.0, 1.0)


def test_bound_and_climb_while_violated_are_the_worst_class():
    r = stab(BOUND, BAD, lambda_max=100.0)
    assert r.verdict == "at bound" and r.score == pytest.approx(1 / 12)  # 1/(2 (1 + 0 + 5))
    # Ramp 0 -> 50: U = 50 * 99/199, mean_H = 50 * 149.5/199, A = 99/299.
    ramp = stab(50 * T, BAD)
    assert ramp.verdict == "diverging" and ramp.amplitude == pytest.approx(99 / 299)
    assert ramp.score == pytest.approx(1 / (2 * (6 + 99 / 299)))
    # Ramp 40 -> 60: U = 20 * 99/199, mean_H = 40 + 20 * 149.5/199, A = 1980/21900.
    r4060 = stab(40 + 20 * T, BAD)
    assert r4060.verdict == "diverging" and r4060.amplitude == pytest.approx(1980 / 21900)
    assert r4060.score == pytest.approx(1 / (2 * (6 + 1980 / 21900)))
    assert stab(np.log1p(144 * T), BAD).verdict == "diverging"


@pytest.mark.parametrize("level", [0.0, 0.7])
def test_a_multiplier_that_never_moves_is_stable_only_if_its_constraint_holds(level):
    lam = np.full(N, level)
    assert old_score(lam, violated=True) == pytest.approx(1.0)  # the old score: best, whatever the cost
    # At its limit a flat multiplier is settled; on a slack constraint (J = d/2) only at 0: a
    # price of 0.7 held there is "held while slack", 1/(2 (1 + 0 + 0.5/0.1)) = 1/12.
    assert stab(lam, np.full(N, D)).score == 1.0
    held = stab(lam, OK)
    assert (held.verdict, held.score) == (("settled", 1.0) if level == 0 else ("held while slack", pytest.approx(1 / 12)))
    stuck = stab(lam, BAD)
    assert stuck.verdict == "stuck" and stuck.score == pytest.approx(1 / 12)


def test_bounded_oscillations_are_ordered_by_amplitude():
    small, mid, large = (stab(*sine(a)) for a in (0.05, 0.2, 0.5))
    sq = stab(*square())
    assert small.verdict == "settled"
    assert {mid.verdict, large.verdict} == {"bounded oscillation"}
    # In 1.3 sampled periods the largest rise is nearly the peak-to-peak 2a: A ~ a / 1.
    for r, a in ((small, 0.05), (mid, 0.2), (large, 0.5)):
        assert 0.95 * a < r.amplitude <= a
    assert small.score > mid.score > large.score > 0.5
    # The square wave 0 <-> 20 is P3O's switch, not a price: named, no score (mean_H = 10,
    # largest rise 20, A = 1, still reported).
    assert sq.verdict == "switch" and np.isnan(sq.score) and sq.amplitude == 1.0


def test_the_issue_orderings_hold():
    settled = [stab(np.zeros(N), OK), stab(blips(), OK), stab(5 * np.exp(-8 * T), OK),
               stab(5 * (1 - T), OK), stab(*sine(0.05)), stab(40 + 20 * T, np.full(N, D))]
    oscillating = [stab(*sine(0.2)), stab(*sine(0.5))]
    worst = [stab(BOUND, BAD, lambda_max=100.0), stab(BOUND, np.full(N, D), lambda_max=100.0),
             stab(50 * T, BAD), stab(np.log1p(144 * T), BAD), stab(40 + 20 * T, BAD),
             stab(np.full(N, 0.7), BAD), stab(*ISSUE["sine, 1.3 periods over the run"][:2])]
    assert {r.verdict for r in settled} == {"settled"}
    assert {r.verdict for r in oscillating} == {"bounded oscillation"}
    assert {r.verdict for r in worst} == {"at bound", "diverging", "stuck"}
    assert min(r.score for r in settled) > max(r.score for r in oscillating)
    assert min(r.score for r in oscillating) > max(r.score for r in worst)
    # The ones the old score inverted: the violated ramp 0.260 above all three decays, the
    # +-50% sine below the ramp, the ramp 40 -> 60 and log growth above the square wave.
    assert stab(*sine(0.5)).score > stab(50 * T, BAD).score
    assert stab(*square()).verdict == "switch"


def test_ramp_40_60_ranks_by_its_constraint():
    satisfied = stab(40 + 20 * T, np.full(N, D))  # J tracks d: climbing, not forced to climb on
    assert satisfied.verdict == "settled" and satisfied.score == pytest.approx(0.5 + 0.5 / (1 + 1980 / 21900))
    assert satisfied.score > 0.5 > stab(40 + 20 * T, BAD).score


def test_sine_over_the_whole_run_is_a_violated_climb_in_the_second_half():
    # The issue's 0.156 trace has 0.65 periods in H: lambda rises 0.5 -> 1.5 while
    # v_H = 0.5 (sin(8.17) - sin(4.08)) / 4.08 ~ 0.215 and the end is violated: diverging,
    # yet above the ramp 0 -> 50, whose violation is larger.
    lam, cost = ISSUE["sine, 1.3 periods over the run"][:2]
    r = stab(lam, cost)
    v = 0.5 * (math.sin(2.6 * np.pi) - math.sin(1.3 * np.pi)) / (1.3 * np.pi)
    assert v == pytest.approx(0.215, abs=1e-3)
    assert r.verdict == "diverging" and r.score == pytest.approx(0.5 / (1 + r.amplitude + v / 0.1), rel=0.02)
    assert r.score > stab(50 * T, BAD).score


def test_a_slow_monotone_convergence_is_settled_and_beats_a_chatter():
    # lambda = 2 (1 - exp(-2 t)): over H it rises 2 (e^-1 - e^-2) = 0.465 around a mean of
    # 1.53, A = 0.15 > tol, with no reversal; the rise over the last quarter is e^-0.5 = 0.61
    # of that over the third, and the end window rises only A_end = 0.043: converging.
    slow = stab(2 * (1 - np.exp(-2 * T)), np.full(N, D))
    assert slow.amplitude > 0.1 and slow.verdict == "settled"
    end = 2 * (np.exp(-2 * T[160]) - np.exp(-2 * T[-1])) / (2 * np.mean(2 * (1 - np.exp(-2 * T[100:]))))
    assert slow.score == pytest.approx(0.5 + 0.5 / (1 + end))
    # A +-15% chatter every iteration around 1: A = 0.3 / 2 = 0.15 with reversals.
    chatter = stab(1 + 0.15 * (-1.0) ** IT, np.full(N, D))
    assert chatter.verdict == "bounded oscillation" and chatter.amplitude == pytest.approx(0.15)
    assert slow.score > chatter.score


def test_a_rise_on_a_slack_constraint_is_drifting_not_bounded():
    # lambda = 4 t while J = d / 2: a steady climb (not decelerating) that the constraint does not ask for.
    drift = stab(4 * T, OK)
    assert drift.verdict == "drifting" and drift.score == pytest.approx(0.5 / (1 + drift.amplitude))
    assert drift.score < 0.5 < stab(*sine(0.5)).score
    # The same climb under violation is diverging, and ranks below the drifting one.
    assert stab(4 * T, BAD).verdict == "diverging" and stab(4 * T, BAD).score < drift.score


def test_a_multiplier_stuck_under_violation_is_flagged_on_the_board():
    import pandas as pd

    from constrained_grpo.constraints import Constraint
    from constrained_grpo.eval.scoring.leaderboard import build_leaderboard, render_markdown
    from constrained_grpo.schema import TaskMeta

    meta = TaskMeta("Toy/T-v0", "toy", (Constraint("hazard", 0.1),), optimum_return=2.0, unconstrained_return=3.0,
                    optimal_multipliers=(0.5,))
    rows = []
    for algo, lam in (("frozen", 0.7), ("moving", None)):
        for seed in range(5):
            for t in range(40):
                value = lam if lam is not None else 0.1 * t
                rows.append({"suite": "toy", "task": meta.task, "algo": algo, "seed": seed, "kind": "train", "iteration": t,
                             "env_steps": 100 * (t + 1), "wall_s": 0.1 * t, "return": 1.5, "length": np.nan,
                             "cost_hazard": 0.5, "lambda_hazard": value})
            for i in range(20):
                rows.append({"suite": "toy", "task": meta.task, "algo": algo, "seed": seed, "kind": "eval", "policy": "sampled",
                             "iteration": 39, "episode": i, "reset_seed": 1_000_000 + i, "env_steps": 4000, "wall_s": np.nan,
                             "return": 1.5, "length": 5.0, "cost_hazard": float(i < 10),
                             "lambda_hazard": lam if lam is not None else 3.9})
    lb = build_leaderboard(pd.DataFrame(rows), {meta.task: meta}, reps=100)
    assert set(lb.runs.loc[lb.runs["algo"] == "frozen", "stability_class"]) == {"stuck"}
    md = render_markdown(lb)
    assert "FAILURE, stuck multiplier: frozen (5/5 seeds)" in md and "moving (" not in md.split("FAILURE")[1].split("\n")[0]


# ----------------------------------------------------------------- scale, bound, costs


def test_scale_does_not_vanish_and_is_relative_above_lambda_ref():
    for level in (1e-6, 1e-3, 0.3):  # blips of 0.01 over any small level: A = 0.005
        assert stab(level + blips(), OK).amplitude == pytest.approx(0.005)
    lam, cost = sine(0.5)
    assert stab(10 * lam, cost).amplitude == pytest.approx(stab(100 * lam, cost).amplitude)
    # A multiplier in other units passes its own reference.
    assert stab(blips(), OK, lambda_ref=0.01).amplitude == pytest.approx(0.5)


def test_at_bound_needs_the_bound_and_half_of_the_second_half():
    held = np.full(N, D)  # J = d: the constraint holds
    assert stab(BOUND, held).verdict == "settled"  # bound unknown: a flat multiplier
    r = stab(BOUND, held, lambda_max=100.0)
    assert r.verdict == "at bound" and r.score == 0.5  # 1/(2 (1 + 0 + 0)): below any oscillation
    # Touching the bound at the peaks only (the top 20 iterations of each 40) is an oscillation.
    peaks = np.where(IT % 40 < 20, 100.0, 60.0)
    assert stab(peaks, held, lambda_max=100.0).verdict == "bounded oscillation"
    half = np.where(IT % 20 < 10, 100.0, 60.0)  # at the bound exactly half the time
    assert stab(half, held, lambda_max=100.0).verdict == "at bound"


def test_cost_without_estimate_is_no_evidence_of_violation():
    cost = BAD.copy()
    cost[::2] = np.nan
    assert stab(np.full(N, 0.7), cost).verdict == "stuck"
    cost[N // 2:] = np.nan
    assert stab(np.full(N, 0.7), cost).verdict == "settled"
    assert stab(np.full(N, 0.7), np.full(N, np.nan)).score == 1.0


def test_zero_limit_measures_violation_in_cost_units():
    lam = np.full(N, 0.7)
    assert S.multiplier_stability(STEPS, lam, np.full(N, 0.05), 0.0).verdict == "settled"  # 0.05 <= tol
    r = S.multiplier_stability(STEPS, lam, np.full(N, 0.3), 0.0)
    assert r.verdict == "stuck" and r.score == pytest.approx(0.5 / (1 + 3))


# ------------------------------------------------------------------- descriptive figures


def test_largest_rise_and_fall_match_all_pairs():
    rng = np.random.default_rng(0)
    for x in (rng.normal(size=30), np.arange(5.0), np.arange(5.0)[::-1], np.zeros(3)):
        pairs = x[None, :] - x[:, None]  # pairs[t, u] = x_u - x_t
        upper = np.triu(np.ones_like(pairs, dtype=bool))
        assert S.largest_rise(x) == pytest.approx(max(0.0, pairs[upper].max()))
        assert S.largest_fall(x) == pytest.approx(max(0.0, (-pairs)[upper].max()))


def test_descriptive_figures():
    sq = stab(*square())
    # In t = 100..199 lambda switches at t = 105, 110, ..., 195: 19 moves of 20, 18 reversals.
    assert sq.tv == 380.0 and sq.oscillations == 18
    # Least squares recovers a ramp's slope: drift = 50 (99/199) / (50 * 149.5/199) = 99/149.5.
    assert stab(50 * T, BAD).drift == pytest.approx(99 / 149.5)
    flat = stab(np.full(N, 0.7), OK)
    assert (flat.tv, flat.oscillations, flat.drift, flat.overshoot) == (0.0, 0, 0.0, 0.0)
    assert flat.settling == STEPS[0] / STEPS[-1]
    # exp decay: lambda_f = mean of the last 20 values, far below lambda_ref = 1.
    lam = 5 * np.exp(-8 * T)
    final = lam[-20:].mean()
    assert stab(lam, OK).overshoot == pytest.approx(5 - final)
    # Inside the band tol * lambda_ref = 0.1 of lambda_f from the first t with lambda_t - lambda_f <= 0.1.
    t_star = int(np.flatnonzero(lam - final > 0.1)[-1]) + 1
    assert stab(lam, OK).settling == pytest.approx(STEPS[t_star] / STEPS[-1])


# ----------------------------------------------------------------------- cost tracking


def test_cost_tracking():
    alternating = np.where(IT % 2 == 0, 1.2, 0.8) * D  # |J - d| / d = 0.2 throughout
    t = S.cost_tracking(STEPS, alternating, D)
    assert t.active and t.mean_abs_rel_error == pytest.approx(0.2) and t.overshoot == pytest.approx(0.2)
    slack = S.cost_tracking(STEPS, OK, D, np.zeros(N))
    assert not slack.active and math.isnan(slack.mean_abs_rel_error) and slack.overshoot == 0.0
    held = S.cost_tracking(STEPS, OK, D, np.full(N, 0.7))  # lambda still holds the cost down
    assert held.active and held.mean_abs_rel_error == pytest.approx(0.5)
    decayed = S.cost_tracking(STEPS, OK, D, 5 * np.exp(-8 * T))  # mean_H lambda ~ 0.03 < 0.1 * 5
    assert not decayed.active
    violated = S.cost_tracking(STEPS, BAD, D)
    assert violated.active and violated.mean_abs_rel_error == pytest.approx(0.5)
    assert violated.overshoot == pytest.approx(0.5)
    near = S.cost_tracking(STEPS, np.full(N, 0.95), D)  # 5% below d: still binding
    assert near.active and near.mean_abs_rel_error == pytest.approx(0.05) and near.overshoot == 0.0


def test_cost_tracking_zero_limit_and_missing_estimates():
    cost = np.full(N, 0.3)
    cost[N // 2::2] = np.nan
    t = S.cost_tracking(STEPS, cost, 0.0)
    assert t.active and t.mean_abs_rel_error == pytest.approx(0.3) and t.overshoot == pytest.approx(0.3)
    none = S.cost_tracking(STEPS, np.full(N, np.nan), D, np.full(N, 0.7))
    assert none.active and math.isnan(none.mean_abs_rel_error) and math.isnan(none.overshoot)


# ----------------------------------------------------------------------- dual distance


def test_dual_distance():
    assert S.dual_distance([1.0, 2.0], [4.0, 6.0]) == 5.0
    assert S.relative_dual_distance([1.0, 2.0], [4.0, 6.0]) == pytest.approx(5 / math.sqrt(52))
    assert S.relative_dual_distance([0.5], [0.0]) == 0.5  # lambda* = 0: divided by lambda_ref = 1
    # Exactly rounded sums: the order of the constraints does not change a bit.
    assert S.dual_distance([1e8, 1.0, 1.0], [0.0] * 3) == S.dual_distance([1.0, 1.0, 1e8], [0.0] * 3)
    assert S.dual_distance([1e8, 1.0, 1.0], [0.0] * 3) == math.sqrt(1e16 + 2)


# ---------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: S.multiplier_stability(STEPS, np.zeros(N - 1), OK, D), "differ in length"),
        (lambda: S.multiplier_stability(STEPS[::-1], np.zeros(N), OK, D), "non-decreasing"),
        (lambda: S.multiplier_stability(STEPS, np.full(N, np.nan), OK, D), "lam must be finite"),
        (lambda: S.multiplier_stability(STEPS, np.zeros(N), np.full(N, np.inf), D), "cost must be finite or NaN"),
        (lambda: S.multiplier_stability(STEPS, np.zeros(N), OK, -1.0), "limit must be"),
        (lambda: S.multiplier_stability(STEPS, np.zeros(N), OK, D, tol=0.0), "tol must be"),
        (lambda: S.multiplier_stability(STEPS, np.zeros(N), OK, D, lambda_max=0.0), "lambda_max must be"),
        (lambda: S.multiplier_stability(STEPS, np.full(N, 2.0), OK, D, lambda_max=1.0), "above lambda_max=1.0"),
        (lambda: S.multiplier_stability(STEPS, [], [], D), "non-empty"),
        (lambda: S.cost_tracking(STEPS, OK, D, np.zeros(3)), "differ in length"),
        (lambda: S.dual_distance([1.0], [1.0, 2.0]), "differ in length"),
    ],
)
def test_bad_input_is_named(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_a_switch_gets_no_stability_score_on_the_board():
    import pandas as pd

    from constrained_grpo.constraints import Constraint
    from constrained_grpo.eval.scoring.leaderboard import build_leaderboard
    from constrained_grpo.schema import TaskMeta

    meta = TaskMeta("Toy/T-v0", "toy", (Constraint("hazard", 0.1),), optimum_return=2.0, unconstrained_return=3.0,
                    optimal_multipliers=(0.5,))
    rows = []
    # crpo-like: lambda in {0, 1}, on for 5 iterations, off for 5; a Lagrangian settling at 0.5
    # with its constraint at the limit.
    for algo, lam in (("switching", lambda t: float((t // 5) % 2)), ("lagrangian", lambda t: 0.5 * (1 - 0.5 ** (t + 1)))):
        for seed in range(5):
            for t in range(40):
                rows.append({"suite": "toy", "task": meta.task, "algo": algo, "seed": seed, "kind": "train", "iteration": t,
                             "env_steps": 100 * (t + 1), "wall_s": 0.1 * t, "return": 1.5, "length": np.nan,
                             "cost_hazard": 0.1, "lambda_hazard": lam(t)})
            for i in range(20):
                rows.append({"suite": "toy", "task": meta.task, "algo": algo, "seed": seed, "kind": "eval", "policy": "sampled",
                             "iteration": 39, "episode": i, "reset_seed": 1_000_000 + i, "env_steps": 4000, "wall_s": np.nan,
                             "return": 1.5, "length": 5.0, "cost_hazard": float(i < 2), "lambda_hazard": lam(39)})
    lb = build_leaderboard(pd.DataFrame(rows), {meta.task: meta}, reps=100)
    df = lb.per_task[meta.task].set_index("algo")
    assert np.isnan(df.loc["switching", "stability"]) and df.loc["switching", "stability_class"] == "switch 5/5"
    assert df.loc["lagrangian", "stability"] > 0.95 and df.loc["lagrangian", "stability_class"] == "settled 5/5"
    section = next(s for s in lb.sections if s.title == f"Task {meta.task}")
    col = list(section.header).index("λ stability [95% CI]")
    cells = {row[list(section.header).index("algo")]: row[col] for row in section.rows}
    assert cells["switching"] == "—"
