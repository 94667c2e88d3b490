"""Metrics of return, constraint satisfaction and multiplier stability.

Every function is pure. The array functions take one run's series; :func:`run_metrics`
applies them to every run of a long table (``constrained_grpo.eval.loader``).

Notation: iterations t = 0..T-1 with cumulative env steps s_t, training return R_t,
mean episodic cost J_{k,t} and multiplier lambda_{k,t}; evaluation episodes i with
return R_i and cost C_{k,i}; limit d_k; exact constrained optimum R* (when the task
has one). The *second half* of a series is its iterations t >= floor(T/2).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from constrained_grpo.eval.runner import TaskMeta

__all__ = [
    "DRIFT_WEIGHT",
    "MultiplierStability",
    "coefficient_of_variation",
    "cumulative_violation",
    "drift",
    "final_performance",
    "final_value",
    "fraction_within",
    "multiplier_stability",
    "normalised_return",
    "normalised_violation",
    "oscillations",
    "overshoot",
    "run_metrics",
    "second_half",
    "settling_time",
    "stability_score",
    "total_variation",
    "trend_r2",
]

#: Weight of |drift| against the coefficient of variation in :func:`stability_score`.
DRIFT_WEIGHT = 2.0


def _arr(x: Sequence[float] | np.ndarray) -> np.ndarray:
    a = np.asarray(x, dtype=np.float64)
    if a.ndim != 1 or a.size == 0:
        raise ValueError(f"expected a non-empty 1-d series, got shape {a.shape}")
    return a


# ------------------------------------------------------------------------------- return


def final_performance(values: Sequence[float] | np.ndarray, frac: float = 0.2) -> float:
    """Mean over the last ``frac`` of the iterations.

    final = (1/m) sum_{t=T-m}^{T-1} x_t,  m = max(1, ceil(frac * T)); NaN entries
    (iterations without a finished episode) are left out of the mean.
    """
    x = _arr(values)
    m = max(1, math.ceil(frac * len(x)))
    tail = x[-m:]
    # Iterations that finished no episode carry NaN (no estimate): leave them out.
    return float(np.nanmean(tail)) if np.isfinite(tail).any() else math.nan


def normalised_return(achieved: float, optimum: float | None) -> float:
    """Return relative to the exact optimum: 1 - (R* - R) / |R*| (1 at the optimum).

    Equals R / R* when R* > 0; NaN when the task has no optimum (or R* = 0).
    """
    if optimum is None or optimum == 0 or not math.isfinite(optimum):
        return math.nan
    return float(1.0 - (optimum - achieved) / abs(optimum))


# ------------------------------------------------------------------- constraint satisfaction


def _limit_scale(limit: float) -> float:
    # A zero limit has no scale to normalise by: violations are then in cost units.
    return limit if limit > 0 else 1.0


def fraction_within(episode_costs: Sequence[float] | np.ndarray, limit: float) -> float:
    """Fraction of evaluation episodes within the limit: (1/n) sum_i [C_i <= d]."""
    c = _arr(episode_costs)
    return float(np.mean(c <= limit))


def normalised_violation(mean_cost: float, limit: float) -> float:
    """max(0, J - d) / d (with d replaced by 1 when d = 0)."""
    return float(max(0.0, mean_cost - limit) / _limit_scale(limit))


def cumulative_violation(
    env_steps: Sequence[float] | np.ndarray, costs: Sequence[float] | np.ndarray, limit: float
) -> float:
    """Normalised violation integrated over training env steps.

    CV = sum_t max(0, J_t - d) / d * (s_t - s_{t-1}),  s_{-1} = 0:

    the area under the violation curve, in env steps; CV / s_{T-1} is the
    step-weighted mean violation during training. An iteration without an estimate
    (NaN) adds nothing.
    """
    s = _arr(env_steps)
    j = _arr(costs)
    if len(s) != len(j):
        raise ValueError(f"env_steps ({len(s)}) and costs ({len(j)}) differ in length")
    ds = np.diff(s, prepend=0.0)
    viol = np.nan_to_num(np.maximum(0.0, j - limit), nan=0.0)  # no estimate: no evidence of violation
    return float(np.sum(viol / _limit_scale(limit) * ds))


# --------------------------------------------------------------------- multiplier stability


def second_half(x: Sequence[float] | np.ndarray) -> np.ndarray:
    """x_t for t >= floor(T/2)."""
    a = _arr(x)
    return a[len(a) // 2:]


def total_variation(lam: Sequence[float] | np.ndarray) -> float:
    """TV = sum_t |lambda_{t+1} - lambda_t| (apply to the second half for the metric)."""
    return float(np.abs(np.diff(_arr(lam))).sum())


def oscillations(lam: Sequence[float] | np.ndarray, rel_tol: float = 0.01) -> int:
    """Number of sign changes of the significant increments of lambda.

    With D_t = lambda_{t+1} - lambda_t, keep the D_t with |D_t| > rel_tol * max_t |lambda_t|
    (moves below the tolerance are noise or a flat stretch, and are skipped, not
    counted as a reversal); count consecutive kept pairs of opposite sign. A sampled
    oscillation with P full periods gives about 2P.
    """
    x = _arr(lam)
    d = np.diff(x)
    tol = rel_tol * float(np.max(np.abs(x))) if x.size else 0.0
    s = np.sign(d[np.abs(d) > tol])
    return int(np.sum(s[1:] != s[:-1]))


def drift(env_steps: Sequence[float] | np.ndarray, lam: Sequence[float] | np.ndarray, eps: float = 1e-6) -> float:
    """Relative change of lambda along its least-squares trend.

    drift = beta * (s_last - s_first) / max(|mean lambda|, eps), with beta the slope of the
    least-squares line of lambda against env steps (apply to the second half for the
    metric). A linear ramp lambda = a s over [s0, s1] has drift 2 (s1 - s0) / (s1 + s0);
    a bounded oscillation over whole periods has drift near 0.
    """
    s = _arr(env_steps)
    x = _arr(lam)
    if len(s) != len(x):
        raise ValueError(f"env_steps ({len(s)}) and lambda ({len(x)}) differ in length")
    if len(x) < 2 or s[-1] == s[0]:
        return 0.0
    sc = s - s.mean()
    beta = float(np.dot(sc, x - x.mean()) / np.dot(sc, sc))
    return float(beta * (s[-1] - s[0]) / max(abs(float(x.mean())), eps))


def final_value(lam: Sequence[float] | np.ndarray, frac: float = 0.1) -> float:
    """lambda_final: mean over the last max(1, ceil(frac T)) iterations."""
    return final_performance(lam, frac)


def overshoot(lam: Sequence[float] | np.ndarray, frac: float = 0.1, eps: float = 1e-6) -> float:
    """Peak above the final value, relative to it: max(0, max_t lambda_t - lambda_final) / max(|lambda_final|, eps)."""
    x = _arr(lam)
    f = final_value(x, frac)
    return float(max(0.0, float(x.max()) - f) / max(abs(f), eps))


def settling_time(
    env_steps: Sequence[float] | np.ndarray,
    lam: Sequence[float] | np.ndarray,
    band: float = 0.1,
    frac: float = 0.1,
    floor: float = 1e-6,
) -> float:
    """Fraction of training after which lambda stays within +-band of its final value.

    t* = the first t such that |lambda_u - lambda_final| <= band * max(|lambda_final|, floor)
    for every u >= t; the result is s_{t*} / s_{T-1} (1 when only the last point is inside,
    so a multiplier that never settles scores 1).
    """
    s = _arr(env_steps)
    x = _arr(lam)
    f = final_value(x, frac)
    outside = np.abs(x - f) > band * max(abs(f), floor)
    if not outside.any():
        t_star = 0
    else:
        t_star = min(int(np.flatnonzero(outside)[-1]) + 1, len(x) - 1)
    return float(s[t_star] / s[-1]) if s[-1] > 0 else 1.0


def coefficient_of_variation(lam: Sequence[float] | np.ndarray, eps: float = 1e-6) -> float:
    """CV = std(lambda) / max(|mean(lambda)|, eps) (population std; apply to the second half)."""
    x = _arr(lam)
    return float(x.std() / max(abs(float(x.mean())), eps))


def trend_r2(env_steps: Sequence[float] | np.ndarray, lam: Sequence[float] | np.ndarray) -> float:
    """Share of lambda's variance explained by its least-squares line: R^2 = corr(s, lambda)^2 (0 if constant).

    1 for a ramp; near 0 for an oscillation, whose fitted slope depends on where the
    window cuts the last period.
    """
    s = _arr(env_steps)
    x = _arr(lam)
    if len(x) < 2 or x.std() == 0 or s.std() == 0:
        return 0.0
    return float(np.corrcoef(s, x)[0, 1] ** 2)


def stability_score(drift_value: float, cv: float, violated: bool, r2: float = 1.0) -> float:
    """One number in (0, 1], 1 for a constant multiplier.

    score = 1 / (1 + I),  I = w |drift| R^2 (1 + [drift > 0 and violated]) + CV,  w = DRIFT_WEIGHT,

    with drift, CV and R^2 (trend_r2) over the second half. The trend counts as much as
    it explains lambda's variance (R^2), so that a bounded oscillation, whose fitted slope
    is an artefact of the window, is judged by its CV; it weighs twice the CV, and twice
    again when the multiplier climbs while its constraint is still violated at the end of
    training: such a multiplier converges to nothing (the ScRew failure of papers.md),
    whereas an oscillation that keeps its constraint is bounded. A linear ramp over the
    second half (drift 2/3, R^2 1, CV 0.19) scores 0.26 while violated, below a +-50%
    sine (CV 0.35, R^2 ~ 0.02) at 0.73.
    """
    if not (math.isfinite(drift_value) and math.isfinite(cv) and math.isfinite(r2)):
        return 0.0
    climbing_violated = drift_value > 0 and violated
    instability = DRIFT_WEIGHT * abs(drift_value) * r2 * (2.0 if climbing_violated else 1.0) + cv
    return float(1.0 / (1.0 + instability))


@dataclass(frozen=True)
class MultiplierStability:
    """Stability metrics of one multiplier trajectory (see the functions of the same names).

    tv, oscillations, drift, r2 (trend_r2) and cv are over the second half of training;
    overshoot and settling over the whole run (they describe the transient).
    """

    tv: float
    oscillations: int
    drift: float
    r2: float
    overshoot: float
    settling: float
    cv: float
    score: float


def multiplier_stability(
    env_steps: Sequence[float] | np.ndarray,
    lam: Sequence[float] | np.ndarray,
    violated: bool,
    *,
    rel_tol: float = 0.01,
    band: float = 0.1,
) -> MultiplierStability:
    """All stability metrics of one multiplier; ``violated``: its constraint is violated at the end."""
    s = _arr(env_steps)
    x = _arr(lam)
    s2, x2 = second_half(s), second_half(x)
    d = drift(s2, x2)
    r2 = trend_r2(s2, x2)
    cv = coefficient_of_variation(x2)
    return MultiplierStability(
        tv=total_variation(x2),
        oscillations=oscillations(x2, rel_tol),
        drift=d,
        r2=r2,
        overshoot=overshoot(x),
        settling=settling_time(s, x, band),
        cv=cv,
        score=stability_score(d, cv, violated, r2),
    )


# ------------------------------------------------------------------------------ per run


def run_metrics(
    table: pd.DataFrame,
    tasks: Mapping[str, TaskMeta],
    *,
    final_frac: float = 0.2,
    tol: float = 0.1,
) -> pd.DataFrame:
    """One row of metrics per run (suite, task, algo, seed) of a long table.

    Columns:

    * ``final_return``: final_performance of the training return; ``eval_return``: mean
      deterministic-evaluation return; ``*_norm``: normalised_return by R* (NaN without R*);
    * per constraint k: ``final_cost_k`` (final_performance of J_k,t), ``eval_cost_k``
      (mean C_k,i), ``within_k`` (fraction_within), ``violation_k``
      (normalised_violation of eval_cost_k), ``cum_violation_k`` (cumulative_violation)
      and ``train_violation_k`` = cum_violation_k / s_{T-1};
    * ``violation`` = max_k violation_k; ``satisfied`` = violation <= tol;
    * per multiplier k: ``tv_k``, ``osc_k``, ``drift_k``, ``r2_k``, ``overshoot_k``,
      ``settling_k``, ``cv_k``, ``stability_k`` (multiplier_stability, violated meaning
      normalised_violation(final_cost_k) > tol), and ``stability`` = min_k stability_k
      (NaN for an algorithm without multipliers).
    """
    rows: list[dict[str, object]] = []
    for (suite, task, algo, seed), run in table.groupby(["suite", "task", "algo", "seed"], sort=True):
        meta = tasks[task]
        train = run[run["kind"] == "train"].sort_values("iteration")
        ev = run[run["kind"] == "eval"]
        steps = train["env_steps"].to_numpy(dtype=float)
        row: dict[str, object] = {"suite": suite, "task": task, "algo": algo, "seed": int(seed)}
        row["env_steps"] = int(steps[-1])
        row["final_return"] = final_performance(train["return"], final_frac)
        row["eval_return"] = float(ev["return"].mean())
        row["final_return_norm"] = normalised_return(row["final_return"], meta.optimum_return)  # type: ignore[arg-type]
        row["eval_return_norm"] = normalised_return(row["eval_return"], meta.optimum_return)  # type: ignore[arg-type]
        violations = []
        stabilities = []
        for c in meta.constraints:
            k = c.name
            final_cost = final_performance(train[f"cost_{k}"], final_frac)
            eval_cost = float(ev[f"cost_{k}"].mean())
            cum = cumulative_violation(steps, train[f"cost_{k}"], c.limit)
            row[f"final_cost_{k}"] = final_cost
            row[f"eval_cost_{k}"] = eval_cost
            row[f"within_{k}"] = fraction_within(ev[f"cost_{k}"], c.limit)
            row[f"violation_{k}"] = normalised_violation(eval_cost, c.limit)
            row[f"cum_violation_{k}"] = cum
            row[f"train_violation_{k}"] = cum / steps[-1] if steps[-1] > 0 else math.nan
            violations.append(row[f"violation_{k}"])
            col = f"lambda_{k}"
            if col in train.columns and train[col].notna().all():
                violated = normalised_violation(final_cost, c.limit) > tol
                ms = multiplier_stability(steps, train[col], violated)
                for name, value in asdict(ms).items():
                    row[f"{'stability' if name == 'score' else ('osc' if name == 'oscillations' else name)}_{k}"] = value
                stabilities.append(ms.score)
        row["violation"] = max(violations) if violations else 0.0
        row["satisfied"] = bool(row["violation"] <= tol)  # type: ignore[operator]
        row["stability"] = min(stabilities) if stabilities else math.nan
        rows.append(row)
    return pd.DataFrame(rows)
