"""Metrics of return and constraint satisfaction per run, and the run table.

Multiplier stability lives in one module, :mod:`constrained_grpo.eval.scoring.stability` (what the
leaderboard and the tutorial use); :func:`run_metrics` takes it from there. Every function is pure. The array functions take one run's series; :func:`run_metrics`
applies them to every run of a long table (``constrained_grpo.eval.scoring.loader``).

Notation: iterations t = 0..T-1 with cumulative env steps s_t, training return R_t,
mean episodic cost J_{k,t} and multiplier lambda_{k,t}; evaluation episodes i with
return R_i and cost C_{k,i}; limit d_k; exact constrained optimum R* (when the task
has one). The *second half* of a series is its iterations t >= floor(T/2).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from constrained_grpo.constraints import Constraint
from constrained_grpo.schema import TaskMeta
from constrained_grpo.eval.scoring.stability import limit_scale
from constrained_grpo.eval.scoring.verdict import SCORE_GRID, CostStats, cost_quantiles, cost_stats, run_verdict

__all__ = [
    "Anchors",
    "anchor_returns",
    "constrained_score",
    "expected_score",
    "cumulative_violation",
    "EVAL_KEYS",
    "concat_summaries",
    "eval_summaries",
    "final_performance",
    "fmean",
    "fraction_within",
    "lambda_distance",
    "normalised_return",
    "normalised_violation",
    "run_metrics",
    "second_half",
    "standard_error",
    "tail_length",
    "TailSummary",
    "tail_summary",
    "first_time_criterion_met",
    "optimum_return",
]

def fmean(x: Sequence[float] | np.ndarray) -> float:
    """Mean of the non-NaN values, summed exactly (``math.fsum``): the result
    does not depend on the order of the values or the machine's SIMD kernels, so tables
    written from it are byte-identical everywhere. NaN when there is no value."""
    a = np.asarray(x, dtype=np.float64).ravel()
    a = a[~np.isnan(a)]
    return math.fsum(a.tolist()) / a.size if a.size else math.nan


def _arr(x: Sequence[float] | np.ndarray) -> np.ndarray:
    a = np.asarray(x, dtype=np.float64)
    if a.ndim != 1 or a.size == 0:
        raise ValueError(f"expected a non-empty 1-d series, got shape {a.shape}")
    return a


# ------------------------------------------------------------------------------- return


def tail_length(num_iterations: int, frac: float = 0.2) -> int:
    """The suite's one tail rule: the last m = max(1, ceil(frac T)) of T iterations."""
    return max(1, math.ceil(frac * num_iterations))



def final_performance(values: Sequence[float] | np.ndarray, frac: float = 0.2) -> float:
    """Mean over the last ``frac`` of the iterations.

    final = (1/m) sum_{t=T-m}^{T-1} x_t,  m = max(1, ceil(frac * T)); NaN entries
    (iterations without a finished episode) are left out of the mean.
    """
    x = _arr(values)
    m = tail_length(len(x), frac)
    # Iterations that finished no episode carry NaN (no estimate): leave them out.
    return fmean(x[-m:])


#: ``(R_low, R_high)``: the mean returns of a task's two anchor references (``TaskInfo.return_anchors``).
Anchors = tuple[float, float]


def normalised_return(achieved: float, optimum: float | None, anchors: Anchors | None = None) -> float:
    """Return relative to the exact optimum: 1 - (R* - R) / |R*| (1 at the optimum).

    Equals R / R* when R* > 0. On a task without an optimum whose return is anchored by two
    references (``anchors = (R_low, R_high)``, :func:`anchor_returns`): (R - R_low) / (R_high - R_low),
    0 at the low reference and 1 at the high one. NaN when the task has neither (or R* = 0).
    """
    if optimum is None and anchors is not None:
        low, high = anchors
        return float((achieved - low) / (high - low))
    if optimum is None or optimum == 0 or not math.isfinite(optimum):
        return math.nan
    return float(1.0 - (optimum - achieved) / abs(optimum))


def anchor_returns(evals: pd.DataFrame, anchors: Mapping[str, tuple[str, str]]) -> dict[str, Anchors]:
    """Per task of ``anchors`` (task -> its ``(low, high)`` reference names), the two
    references' mean evaluated returns ``(R_low, R_high)``: each the exact mean over its seeds
    of the sampled policy's mean episode return (``evals``: :func:`eval_summaries` rows). A
    task is left out where either reference has no run, or where ``R_high <= R_low`` (no unit
    to normalise by): its returns stay raw."""
    out: dict[str, Anchors] = {}
    sampled = evals[evals["policy"] == "sampled"] if len(evals) else evals
    for task, (low, high) in sorted(anchors.items()):
        rows = sampled[sampled["task"] == task] if len(sampled) else sampled
        means = [fmean(rows.loc[rows["algo"] == name, "return_mean"]) if len(rows) else math.nan for name in (low, high)]
        if all(math.isfinite(m) for m in means) and means[1] > means[0]:
            out[task] = (means[0], means[1])
    return out


# ------------------------------------------------------------------- constraint satisfaction


def fraction_within(episode_costs: Sequence[float] | np.ndarray, limit: float) -> float:
    """Fraction of evaluation episodes within the limit: (1/n) sum_i [C_i <= d]."""
    c = _arr(episode_costs)
    return float(np.mean(c <= limit))


def normalised_violation(mean_cost: float, limit: float) -> float:
    """max(0, J - d) / d (with d replaced by 1 when d = 0)."""
    return float(max(0.0, mean_cost - limit) / limit_scale(limit))


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
    return float(np.sum(viol / limit_scale(limit) * ds))


# --------------------------------------------------------------------- multiplier stability


def second_half(x: Sequence[float] | np.ndarray) -> np.ndarray:
    """x_t for t >= floor(T/2)."""
    a = _arr(x)
    return a[len(a) // 2:]


# ------------------------------------------------------------------ constraint-aware score


@functools.lru_cache(maxsize=16)
def _pairing(k: int, size: int) -> np.ndarray:
    """The fixed shuffled order (seed k) in which the k-th constraint's grid is paired."""
    order = np.random.default_rng(k).permutation(size)
    order.setflags(write=False)
    return order


def expected_score(
    return_value: float, optimum: float | None, costs: Sequence[np.ndarray], constraints: Sequence[Constraint], tol: float,
    anchors: Anchors | None = None,
) -> float:
    """:func:`constrained_score` averaged over what the evaluation episodes cannot tell about J:

        score = E_J[ constrained_score(R, R*, max_k max(0, J_k - d_k)/c(d_k), tol) ]

    with each J_k spread as :func:`~constrained_grpo.eval.scoring.verdict.cost_quantiles` gives it
    (Jeffreys' posterior for an indicator, the t-scale normal otherwise) and independent
    across k: the k-th grid is taken in a fixed shuffled order (seed k), a Latin-hypercube
    pairing. A run that is clearly within scores max(R~, 0), one clearly over -v, and one its
    episodes cannot tell a blend weighted by how likely each side is: never a keeper or a
    violator by its point estimate alone. Summed exactly, on a fixed grid: machine-independent.
    """
    if not math.isfinite(return_value):
        return math.nan
    norm = normalised_return(return_value, optimum, anchors)
    keep = max(float(norm if math.isfinite(norm) else return_value), 0.0)
    if not constraints:
        return keep
    worst = np.zeros(SCORE_GRID)
    for k, (c, x) in enumerate(zip(constraints, costs)):
        q = cost_quantiles(x, c.limit, c.indicator)
        if not np.isfinite(q).all():
            return math.nan
        q = q[_pairing(k, q.size)] if k else q
        worst = np.maximum(worst, np.maximum(0.0, q - c.limit) / limit_scale(c.limit))
    values = np.where(worst > tol, -worst, keep)
    return math.fsum(values.tolist()) / values.size


def constrained_score(return_value: float, optimum: float | None, violation: float, tol: float,
                      anchors: Anchors | None = None) -> float:
    """One number per run under which an infeasible run never beats a feasible one.

    score = max(R~, 0)  if v <= tol (feasible),   score = -v  otherwise,

    with v = max_k max(0, J_k - d_k)/d_k the largest normalised violation and R~ the
    normalised return 1 - (R* - R)/|R*| on a task with an exact optimum R*, (R - R_low) /
    (R_high - R_low) on a task anchored by two references (``anchors``), the raw return R
    elsewhere. Feasible runs score >= 0 and infeasible ones < 0 (v > tol >= 0), so the
    order "feasible first, by return; then infeasible, by violation" holds for every pair
    of runs, and so for any mean, IQM or P(X > Y) of the score. A feasible run with
    R~ <= 0 scores 0: no better than doing nothing.
    """
    if not (math.isfinite(violation) and math.isfinite(return_value)):
        return math.nan
    if violation > tol:
        return -float(violation)
    norm = normalised_return(return_value, optimum, anchors)
    base = norm if math.isfinite(norm) else float(return_value)
    return max(float(base), 0.0)


def lambda_distance(lam_final: Sequence[float], lam_star: Sequence[float]) -> float:
    """||lambda_final - lambda*||_2: distance of the final multipliers to the LP's optimal duals."""
    a = np.asarray(lam_final, dtype=np.float64)
    b = np.asarray(lam_star, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"lambda_final {a.shape} and lambda* {b.shape} differ in shape")
    return float(math.sqrt(math.fsum(float(d) ** 2 for d in a - b)))


# ------------------------------------------------------------------------------ per run


def standard_error(values: Sequence[float] | np.ndarray) -> float:
    """se = s / sqrt(n), s the sample standard deviation (ddof 1); NaN for n < 2."""
    x = _arr(values)
    if x.size < 2:
        return math.nan
    m = fmean(x)
    return math.sqrt(math.fsum((v - m) ** 2 for v in x.tolist()) / (x.size - 1) / x.size)


#: The keys of an evaluation summary row (:func:`eval_summaries`): one row per run and policy.
EVAL_KEYS: tuple[str, ...] = ("suite", "task", "algo", "seed", "policy")


def _summary_stats(row: Mapping[str, Any], name: str) -> CostStats:
    return CostStats(int(row["episodes"]), float(row[f"mean_{name}"]), float(row[f"ss_{name}"]),
                     bool(row[f"binary_{name}"]), int(row[f"events_{name}"]), bool(row[f"finite_{name}"]))


def eval_summaries(table: pd.DataFrame, tasks: Mapping[str, TaskMeta]) -> pd.DataFrame:
    """What the run metrics read of the evaluation episodes: one row per run and evaluated
    policy (``EVAL_KEYS``), in the table's order of runs.

    Columns: ``iteration`` and ``env_steps`` (the evaluated policy's), ``episodes`` n,
    ``first_seed`` (the smallest reset seed; NaN when some episode's is unknown),
    ``return_mean`` = fsum(R_i)/n, and per constraint k its :class:`CostStats` as
    ``mean_k``, ``ss_k``, ``binary_k``, ``events_k``, ``finite_k``, with ``within_k`` the
    episodes whose cost is at most d_k. Each is an exact sum or a count, so the summaries of
    the same episodes in any order are the same bits, and every metric of the evaluation
    (:func:`run_metrics`) is a function of them: a compact record keeps these rows instead of
    the episodes."""
    ev = table[table["kind"] == "eval"]
    rows: list[dict[str, Any]] = []
    for (suite, task), sub in (ev.groupby(["suite", "task"], sort=True) if len(ev) else ()):
        meta = tasks[task]
        for (algo, seed, policy), g in sub.groupby(["algo", "seed", "policy"], sort=True):
            row: dict[str, Any] = {"suite": suite, "task": task, "algo": algo, "seed": int(seed), "policy": policy,
                                   "iteration": int(g["iteration"].iloc[0]), "env_steps": int(g["env_steps"].iloc[0])}
            seeds = g["reset_seed"] if "reset_seed" in g.columns else pd.Series(math.nan, index=g.index)
            row["episodes"] = int(len(g))
            row["first_seed"] = float(seeds.min()) if seeds.notna().all() else math.nan
            row["return_mean"] = fmean(g["return"])
            for c in meta.constraints:
                x = g[f"cost_{c.name}"].to_numpy(dtype=float)
                st = cost_stats(x)
                row[f"mean_{c.name}"], row[f"ss_{c.name}"] = st.mean, st.ss
                row[f"binary_{c.name}"], row[f"events_{c.name}"], row[f"finite_{c.name}"] = st.binary, st.events, st.finite
                row[f"within_{c.name}"] = int(np.count_nonzero(x <= c.limit))
            rows.append(row)
    names = sorted({n for m in tasks.values() for n in m.constraint_names})
    out = pd.DataFrame(rows, columns=[*_SUMMARY_HEAD, *(f"{p}_{n}" for n in names for p in _SUMMARY_STATS)])
    for col in out.columns:
        if col in _SUMMARY_INTS:
            out[col] = out[col].astype(np.int64)
        elif col not in ("suite", "task", "algo", "policy"):
            out[col] = out[col].astype(np.float64)  # counts and flags too: NaN where a task has no such constraint
    return out


def concat_summaries(frames: Sequence[pd.DataFrame], tasks: Mapping[str, TaskMeta]) -> pd.DataFrame:
    """Evaluation summaries of several sources as one frame: the columns of every task in
    ``tasks``, the rows sorted by ``EVAL_KEYS``."""
    template = eval_summaries(pd.DataFrame(columns=["kind"]), tasks)
    out = pd.concat([template, *frames], ignore_index=True) if frames else template
    out = out.reindex(columns=template.columns).astype(template.dtypes.to_dict())
    return out.sort_values(list(EVAL_KEYS), kind="mergesort").reset_index(drop=True)


_SUMMARY_HEAD = (*EVAL_KEYS, "iteration", "env_steps", "episodes", "first_seed", "return_mean")
_SUMMARY_INTS = ("seed", "iteration", "env_steps", "episodes")
_SUMMARY_STATS = ("mean", "ss", "binary", "events", "finite", "within")


def _no_evaluation(meta: TaskMeta) -> dict[str, Any]:
    """The summary of no episodes (a run not evaluated yet): NaN metrics, verdict undetermined."""
    row: dict[str, Any] = {"episodes": 0, "first_seed": math.nan, "return_mean": math.nan}
    for c in meta.constraints:
        row.update({f"mean_{c.name}": math.nan, f"ss_{c.name}": math.nan, f"binary_{c.name}": False,
                    f"events_{c.name}": 0, f"finite_{c.name}": True, f"within_{c.name}": 0})
    return row


def _eval_block(ev: Mapping[str, Any], meta: TaskMeta, tol: float) -> dict[str, Any]:
    """Return, per-constraint cost (mean, standard error, verdict), fraction within and
    violation of one policy's evaluation (its :func:`eval_summaries` row), and the run's
    three-valued feasibility."""
    n = int(ev["episodes"])
    out: dict[str, Any] = {"return": float(ev["return_mean"])}
    costs = [_summary_stats(ev, c.name) for c in meta.constraints]
    bounds, verdicts = run_verdict(costs, [c.limit for c in meta.constraints], [c.indicator for c in meta.constraints], tol)
    viols = []
    for c, cost, (lower, upper), verdict in zip(meta.constraints, costs, bounds, verdicts):
        out[f"cost_{c.name}"] = cost.mean
        out[f"cost_se_{c.name}"] = cost.se
        out[f"cost_lo_{c.name}"], out[f"cost_hi_{c.name}"] = lower, upper
        out[f"within_{c.name}"] = int(ev[f"within_{c.name}"]) / n if n else math.nan
        out[f"violation_{c.name}"] = normalised_violation(cost.mean, c.limit) if n else math.nan
        out[f"verdict_{c.name}"] = verdict
        viols.append(out[f"violation_{c.name}"])
    out["costs"] = costs
    out["violation"] = max(viols) if viols else 0.0
    if "over" in verdicts:
        out["feasibility"] = "violates"
    elif all(v == "within" for v in verdicts):
        out["feasibility"] = "feasible"
    else:
        out["feasibility"] = "undetermined"
    out["feasible"] = out["feasibility"] == "feasible"
    return out


_RUN_COLUMNS = ("suite", "task", "algo", "seed", "kind", "policy", "iteration", "episode", "reset_seed",
                "env_steps", "return", "length")


def _runs(table: pd.DataFrame, tasks: Mapping[str, TaskMeta]) -> Any:
    """``(suite, task, algo, seed, rows)`` per run, sorted by those keys, each run's rows with
    only the columns its task has (a long table's other tasks' cost columns stay behind)."""
    base = [c for c in _RUN_COLUMNS if c in table.columns]
    for (suite, task), sub in table.groupby(["suite", "task"], sort=True):
        names = [c.name for c in tasks[task].constraints]
        cols = base + [f"{p}_{n}" for n in names for p in ("cost", "lambda") if f"{p}_{n}" in table.columns]
        for (algo, seed), run in sub[cols].groupby(["algo", "seed"], sort=True):
            yield suite, task, algo, seed, run


def run_metrics(
    table: pd.DataFrame,
    tasks: Mapping[str, TaskMeta],
    *,
    final_frac: float = 0.2,
    tol: float = 0.1,
    lambda_in_reward_units: Mapping[str, bool] | None = None,
    lambda_max: Mapping[str, float] | None = None,
    evals: pd.DataFrame | None = None,
    return_anchors: Mapping[str, Anchors] | None = None,
) -> pd.DataFrame:
    """One row of metrics per run (suite, task, algo, seed) of a long table.

    ``evals``: the runs' evaluation summaries (:func:`eval_summaries`) when the table holds
    only their train rows (a compact record); None computes them from its eval rows.
    ``return_anchors``: per task without an exact optimum, ``(R_low, R_high)``
    (:func:`anchor_returns`): its returns are normalised by them in every ``*_norm`` column
    and in the scores.

    Two iterates are scored. The *last iterate* is the final policy, evaluated by the
    harness on the same episodes for every run: ``policy == "sampled"`` is the primary
    evaluation (a constrained optimum may mix routes), ``"deterministic"`` the greedy one.
    The *average iterate* is the mean over the last ``final_frac`` of the training iterations.

    Columns:

    * primary (last iterate, sampled; a table with only deterministic eval rows uses those,
      and says so in ``primary_policy``): ``eval_return``, ``eval_return_norm``, per
      constraint ``eval_cost_k`` (J_k), ``eval_cost_se_k`` (its standard error over the
      episodes), ``eval_cost_lo_k`` and ``eval_cost_hi_k`` (its one-sided lower bound at
      alpha / K and upper bound at alpha, :mod:`constrained_grpo.eval.scoring.verdict`: exact
      Clopper-Pearson for indicators), ``within_k`` (fraction of episodes within d_k),
      ``violation_k`` = max(0, J_k - d_k)/d_k and ``verdict_k`` (within / over /
      undetermined, :func:`~constrained_grpo.eval.scoring.verdict.cost_verdict`); ``violation`` = max_k violation_k; ``feasibility`` = "violates" if some
      verdict_k is "over", "feasible" if every one is "within", else "undetermined";
      ``feasible`` = (feasibility == "feasible") (``satisfied`` is the same); ``score``
      (:func:`expected_score`: the constrained score averaged over the evaluation's
      uncertainty about each J_k);
    * greedy (last iterate, deterministic): ``greedy_return``, ``greedy_violation``,
      ``greedy_feasible`` and ``greedy_feasibility`` (the three-valued verdict; NaN/False/""
      where there are no such rows);
    * average iterate: ``final_return`` (mean training return over the tail), ``final_cost_k``,
      ``tail_violation``, ``tail_feasible``, ``tail_score``;
    * ``cum_violation_k`` (cumulative_violation) and ``train_violation_k`` = cum / s_{T-1};
    * protocol: ``eval_episodes`` (per policy), ``eval_first_seed`` (NaN when unrecorded),
      ``eval_policies`` ("sampled+deterministic", ...), ``env_steps`` (the run's budget as run);
    * per multiplier k (``constrained_grpo.eval.scoring.stability``): ``stability_k``,
      ``stability_class_k``, ``amplitude_k``, ``drift_k``, ``osc_k``, ``settling_k``; per
      constraint ``tracking_k`` (mean |J_t - d|/d over the second half when active) and
      ``overshoot_k``; ``stability`` = min_k stability_k and ``stability_class`` its class
      (NaN for an algorithm without multipliers); ``lambda_dist`` = ||lambda_final - lambda*||
      where the task has lambda* and ``lambda_in_reward_units[algo]`` says lambda shares its units.
    """
    from constrained_grpo.eval.scoring import stability as stab

    units = dict(lambda_in_reward_units or {})
    bounds = dict(lambda_max or {})
    anchored = dict(return_anchors or {})
    if evals is None:
        evals = eval_summaries(table, tasks)
    by_run: dict[tuple[str, str, int], dict[str, dict[str, Any]]] = {}
    for rec in evals.to_dict("records"):
        by_run.setdefault((rec["task"], rec["algo"], int(rec["seed"])), {})[rec["policy"]] = rec
    rows: list[dict[str, object]] = []
    for suite, task, algo, seed, run in _runs(table[table["kind"] == "train"], tasks):
        meta = tasks[task]
        anchors = anchored.get(task)
        train = run.sort_values("iteration")
        ev = by_run.get((task, algo, int(seed)), {})
        present = [p for p in ("sampled", "deterministic") if p in ev]
        primary = present[0] if present else "deterministic"
        steps = train["env_steps"].to_numpy(dtype=float)
        row: dict[str, object] = {"suite": suite, "task": task, "algo": algo, "seed": int(seed)}
        row["env_steps"] = int(steps[-1])
        first = ev[primary] if present else _no_evaluation(meta)
        row["eval_policies"] = "+".join(present)
        row["eval_episodes"] = int(first["episodes"])
        row["eval_first_seed"] = float(first["first_seed"])
        row["primary_policy"] = primary

        main = _eval_block(first, meta, tol)
        row["eval_return"] = main["return"]
        row["eval_return_norm"] = normalised_return(main["return"], meta.optimum_return, anchors)
        for c in meta.constraints:
            k = c.name
            row[f"eval_cost_{k}"] = main[f"cost_{k}"]
            row[f"eval_cost_se_{k}"] = main[f"cost_se_{k}"]
            row[f"eval_cost_lo_{k}"] = main[f"cost_lo_{k}"]
            row[f"eval_cost_hi_{k}"] = main[f"cost_hi_{k}"]
            row[f"within_{k}"] = main[f"within_{k}"]
            row[f"violation_{k}"] = main[f"violation_{k}"]
            row[f"verdict_{k}"] = main[f"verdict_{k}"]
        row["violation"] = main["violation"]
        row["feasibility"] = main["feasibility"]
        row["feasible"] = main["feasible"]
        row["satisfied"] = main["feasible"]
        row["score"] = expected_score(main["return"], meta.optimum_return, main["costs"], meta.constraints, tol, anchors)

        greedy = _eval_block(ev["deterministic"], meta, tol) if "deterministic" in present else None
        row["greedy_return"] = greedy["return"] if greedy else math.nan
        row["greedy_violation"] = greedy["violation"] if greedy else math.nan
        row["greedy_feasible"] = greedy["feasible"] if greedy else False
        row["greedy_feasibility"] = greedy["feasibility"] if greedy else ""

        row["final_return"] = final_performance(train["return"], final_frac)
        row["final_return_norm"] = normalised_return(row["final_return"], meta.optimum_return, anchors)  # type: ignore[arg-type]
        tail_viol = []
        stabilities: list[tuple[float, str]] = []
        unscored: list[tuple[float, str]] = []
        lam_final = []
        for c in meta.constraints:
            k = c.name
            cost = train[f"cost_{k}"].to_numpy(dtype=float)
            final_cost = final_performance(cost, final_frac)
            row[f"final_cost_{k}"] = final_cost
            tail_viol.append(normalised_violation(final_cost, c.limit) if math.isfinite(final_cost) else math.inf)
            cum = cumulative_violation(steps, cost, c.limit)
            row[f"cum_violation_{k}"] = cum
            row[f"train_violation_{k}"] = cum / steps[-1] if steps[-1] > 0 else math.nan
            col = f"lambda_{k}"
            lam = train[col].to_numpy(dtype=float) if col in train.columns else None
            has_lam = lam is not None and np.isfinite(lam).all() and len(lam) > 0
            tr = stab.cost_tracking(steps, cost, c.limit, lam if has_lam else None, tol=tol)
            row[f"tracking_{k}"] = tr.mean_abs_rel_error
            row[f"overshoot_{k}"] = tr.overshoot
            if has_lam:
                res = stab.multiplier_stability(steps, lam, cost, c.limit, lambda_max=bounds.get(algo), tol=tol)
                row[f"stability_{k}"] = res.score
                row[f"stability_class_{k}"] = res.verdict
                row[f"amplitude_{k}"] = res.amplitude
                row[f"drift_{k}"] = res.drift
                row[f"osc_{k}"] = res.oscillations
                row[f"settling_{k}"] = res.settling
                # A switch (CRPO's {0, 1}, P3O's {0, 20}) has no score: named, not ranked among multipliers.
                (stabilities if math.isfinite(res.score) else unscored).append((res.score, res.verdict))
                lam_final.append(float(lam[-1]))
        row["tail_violation"] = max(tail_viol) if tail_viol else 0.0
        row["tail_feasible"] = bool(row["tail_violation"] <= tol)  # type: ignore[operator]
        row["tail_score"] = constrained_score(row["final_return"], meta.optimum_return, row["tail_violation"], tol,  # type: ignore[arg-type]
                                             anchors)
        if unscored:  # a switch on any constraint: the algorithm's rule is a switch, not a price
            row["stability"], row["stability_class"] = math.nan, unscored[0][1]
        elif stabilities:
            worst = min(stabilities, key=lambda sv: sv[0])
            row["stability"], row["stability_class"] = worst
        else:
            row["stability"], row["stability_class"] = math.nan, ""
        star = meta.optimal_multipliers
        if stabilities and star is not None and units.get(algo, False) and len(star) == len(lam_final):
            row["lambda_dist"] = lambda_distance(lam_final, star)
        else:
            row["lambda_dist"] = math.nan
        rows.append(row)
    return pd.DataFrame(rows)


# ------------------------------------------------------------------ acceptance criterion


@dataclass(frozen=True)
class TailSummary:
    """Means over the tail (:func:`tail_length`) of a run's iteration records, and the verdict."""

    ep_return: float
    ep_cost: tuple[float, ...]
    multipliers: tuple[float, ...]
    within_limits: bool
    return_ok: bool | None
    passed: bool
    num_iterations: int


def tail_summary(
    records: Sequence[Mapping[str, Any]],
    limits: Sequence[float],
    optimum: float | None,
    tail: float = 0.2,
    tol: float = 0.1,
) -> TailSummary:
    """The acceptance criterion on the last m = max(1, ceil(tail T)) records (agent log records
    with ``ep_return``, ``ep_cost[k]``, ``multipliers[k]``):

    within_limits = all_k mean J_k <= d_k (1 + tol); return_ok = mean R >= R* - tol |R*|
    (None without R*); passed = both. Means are exact sums (:func:`fmean`).
    """
    if not records:
        raise ValueError("no iterations to summarize; pass at least one record")
    last = records[-tail_length(len(records), tail):]
    ret = fmean([r["ep_return"] for r in last])
    costs = [fmean([r["ep_cost"][k] for r in last]) for k in range(len(limits))]
    mult = [fmean([r["multipliers"][k] for r in last]) for k in range(len(last[0]["multipliers"] or ()))]
    within = all(c <= float(d) * (1.0 + tol) for c, d in zip(costs, limits))
    return_ok = None if optimum is None else bool(ret >= optimum - tol * abs(optimum))
    return TailSummary(ret, tuple(costs), tuple(mult), within, return_ok, within and bool(return_ok), len(records))


def first_time_criterion_met(
    records: Sequence[Mapping[str, Any]],
    limits: Sequence[float],
    optimum: float,
    window: int = 20,
    tol: float = 0.1,
) -> dict[str, Any] | None:
    """The first iteration t whose window of the last ``window`` records (t-window+1..t)
    meets :func:`tail_summary`'s criterion: ``{"iteration", "env_steps", "wall_s"}`` of
    record t, or None if no window does."""
    for end in range(window, len(records) + 1):
        if tail_summary(records[end - window:end], limits, optimum, tail=1.0, tol=tol).passed:
            r = records[end - 1]
            return {"iteration": r["iteration"], "env_steps": r["env_steps"], "wall_s": r["wall_s"]}
    return None


def optimum_return(agent: Any) -> float | None:
    """R* of the agent's task under the agent's limits (``env.optimum()``), or None when the
    task has no exact solver or the agent's limits differ from the solver's."""
    env = agent.adapter.env
    solver = getattr(env, "optimum", None) or getattr(getattr(env, "unwrapped", None), "optimum", None)
    if solver is None:
        return None
    opt = solver()
    if tuple(float(v) for v in opt.limits) != tuple(float(v) for v in agent.adapter.limits):
        return None
    return float(opt.constrained_return)
