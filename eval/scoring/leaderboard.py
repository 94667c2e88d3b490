"""The leaderboard: per-task and aggregated rankings, as Markdown and static HTML.

Rules (docs/benchmark.md, "Ranking"):

* **What is scored.** Each run's final policy, evaluated by the harness on the same
  episodes as every other run of the task, sampling its actions (the primary evaluation;
  the greedy policy and the training tail, the "average iterate", are reported beside it).
* **Feasible, breaks, undetermined.** A verdict needs the data (``eval.verdict``): a run is
  feasible when the one-sided 95% upper bound U_k of every evaluated cost (exact
  Clopper-Pearson for an indicator, Student's t otherwise) is at most d_k + tol c(d_k), it
  breaks limit k when the lower bound L_k (at 5%/K) is above it, and it is undetermined
  otherwise: each wrong call has probability at most 5%. An algorithm's feasibility on
  a task: its feasible and undetermined seeds, and P(feasible) (:func:`p_feasible`: the
  seeds resampled and the evaluation noise added).
* **Score.** ``metrics.constrained_score`` from the point estimates: max(normalised
  return, 0) for a run with max_k max(0, J_k - d_k)/c(d_k) <= tol, minus that violation
  otherwise, so that no run over the tolerance outscores one within it. Ranks, aggregates
  and P(X > Y) use the score.
* **Rows by the estimate, with rank intervals.** On a task, rows are in the order of the mean
  score; the rank is that position (exact ties share it) with [L, U], its simultaneous 95%
  interval, and the group letters, from :func:`ranking.rank`: Welch's t for each pair, its p
  the larger of the exact permutation test's and a conservative t-test's (min(n, m) - 1
  degrees of freedom), Holm-corrected over the task's pairs at 5%, pairs closer than one
  run's evaluation resolves never separated. With fewer than ``MIN_SEEDS_FOR_CI`` seeds
  nothing is separated, and no interval is printed. No tie is broken by name.
* **Seeds within.** The share of seeds whose final policy keeps every limit up to the
  tolerance, with its exact Clopper-Pearson interval, beside those within d itself; "feasible?
  yes" needs P(feasible) >= 0.95 and no seed whose own verdict breaks a limit.
* **Each learner once, on its last iterate.** A run that deploys another rule (``deploy``:
  best-feasible, tail-mixture; an alias such as cgrpo-best) is a second deployment of one of a
  learner's trainings, not an independent sample: it is in no rank, pair test or aggregate, and
  a deployment table under its task (and its suite's aggregate) compares it with the learner's
  last iterate, paired by seed (``eval.scoring.deployment``).
* **Comparable or not ranked.** Runs of a task are ranked together only when they share
  the evaluation protocol (policies, episodes, reset seeds) and the budget (final env
  steps within a factor ``BUDGET_RATIO``); the loader already refuses runs whose limits
  differ. Otherwise the task's numbers are shown without ranks, with the difference named.

The output is a pure function of the long table and the task metadata: rows and columns
are sorted, means are summed exactly, floats written to ``runs.csv`` are rounded to
``SIGNIFICANT_DIGITS`` significant digits, and the bootstrap has a fixed seed, so the
same runs give byte-identical files on any machine.
"""

from __future__ import annotations

import html
import math
import re
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType

import numpy as np
import pandas as pd
from scipy.stats import rankdata

from constrained_grpo.eval.scoring import ranking, stats
from constrained_grpo.eval.scoring.binding import board_binding, loose_stand_ins
from constrained_grpo.eval.scoring.deployment import (DEPLOYMENT_COLUMNS, deployment_table, last_iterate_runs,
                                                      suite_deployment_table)
from constrained_grpo.eval import storage
from constrained_grpo.files import atomic_write_many
from constrained_grpo.eval.scoring.loader import ResultsError, escape_csv_formulas, registered_info
from constrained_grpo.eval.scoring.metrics import Anchors, anchor_returns, constrained_score, eval_summaries, run_metrics
from constrained_grpo.eval.scoring.stability import VERDICTS, limit_scale
from constrained_grpo.eval.scoring.verdict import TOL, run_episodes_to_decide
from constrained_grpo.schema import TaskMeta

__all__ = [
    "BUDGET_RATIO",
    "DEFAULT_TOL",
    "DEPLOYMENTS_COLUMNS",
    "Leaderboard",
    "SIGNIFICANT_DIGITS",
    "Section",
    "build_leaderboard",
    "seeds_to_separate",
    "check_submission",
    "CONTROL_REASON",
    "comparability",
    "is_control",
    "glossary",
    "p_feasible",
    "render_html",
    "render_markdown",
    "shared_ranks",
    "unbroken_groups",
    "write_leaderboard",
]

#: Default tolerance on the normalised violation for "feasible" (the one the evaluation is planned for).
DEFAULT_TOL = TOL
#: Runs whose final env steps differ by more than this factor had different budgets.
BUDGET_RATIO = 1.25
#: Significant digits of the floats in ``runs.csv``.
SIGNIFICANT_DIGITS = 10
#: Stability classes from best to worst (``constrained_grpo.eval.scoring.stability``).
_CLASS_ORDER = VERDICTS
#: The columns of ``deployments.csv`` (:attr:`Leaderboard.deployments`).
DEPLOYMENTS_COLUMNS: tuple[str, ...] = ("scope", "learner", "deploy", "algo", *DEPLOYMENT_COLUMNS[3:])


@dataclass(frozen=True)
class Section:
    """One titled table of the leaderboard (rendered to Markdown and to HTML alike)."""

    title: str
    notes: tuple[str, ...]
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    #: Tables printed under this one, each with its own title (a task's deployment table).
    parts: tuple["Section", ...] = ()


@dataclass(frozen=True)
class Leaderboard:
    """Everything the leaderboard shows.

    Attributes:
        runs: one row of metrics per run (``metrics.run_metrics``).
        sections: the tables, in page order.
        per_task: per ranked task, the algorithms' numbers in rank order.
        overall: per suite, the aggregated numbers in rank order.
        not_ranked: per task that could not be ranked, the reasons.
        references: per task with reference policies, their numbers (as ``per_task``, unranked).
        tasks: the metadata of every task shown.
        tol: the feasibility tolerance the verdicts used.
        highlight: the algorithm a reader singled out (``--highlight``), drawn apart; None for none.
        deployments: the deployment tables (``deployment.DEPLOYMENT_COLUMNS`` with ``scope``, the
            task id or ``suite:NAME``, for ``task``, and ``algo``, the name the rule's runs carry):
            per learner and rule other than ``last``, the paired comparison with its last iterate.
    """

    runs: pd.DataFrame
    sections: tuple[Section, ...]
    per_task: dict[str, pd.DataFrame] = field(default_factory=dict)
    overall: dict[str, pd.DataFrame] = field(default_factory=dict)
    preamble: tuple[str, ...] = ()
    not_ranked: dict[str, tuple[str, ...]] = field(default_factory=dict)
    references: dict[str, pd.DataFrame] = field(default_factory=dict)
    tasks: dict[str, TaskMeta] = field(default_factory=dict)
    tol: float = TOL
    highlight: str | None = None
    deployments: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=list(DEPLOYMENTS_COLUMNS)))

    @property
    def pairs(self) -> pd.DataFrame:
        """Every tested pair, per task and per suite aggregate: ``scope`` (the task id, or
        ``suite:NAME``), ``a``, ``b``, ``mean_a_minus_b``, ``p_permutation``, ``p_t``, ``p`` (the larger
        of the two: :mod:`ranking`), ``p_holm``, ``separated``."""
        rows = [{"scope": task, **r} for task, df in sorted(self.per_task.items()) for r in df.attrs.get("pair_tests", [])]
        rows += [{"scope": f"suite:{suite}", **r} for suite, df in sorted(self.overall.items())
                 for r in df.attrs.get("pair_tests", [])]
        return pd.DataFrame(rows, columns=["scope", "a", "b", "mean_a_minus_b", "p_permutation", "p_t", "p", "p_holm",
                                           "separated"])


# ------------------------------------------------------------------------------ formatting


def _num(x: float | None, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "—"
    text = f"{x:.{digits}f}"
    return "0." + "0" * digits if text == "-0." + "0" * digits else text


def _ci(point: float, lo: float, hi: float, n: int, digits: int = 3, same: bool = False,
        zero_width: str = "zero-width interval: most seeds share one value") -> str:
    """``point [lo, hi]``; no interval below MIN_SEEDS_FOR_CI; a zero-width one says why:
    ``same`` (every seed has the same value), else ``zero_width``."""
    if not math.isfinite(point):
        return "—"
    if n < stats.MIN_SEEDS_FOR_CI:
        return f"{_num(point, digits)} (n={n}: no CI)"
    text = f"{_num(point, digits)} [{_num(lo, digits)}, {_num(hi, digits)}]"
    if lo != hi:
        return text
    return text + (" (identical seeds)" if same else f" ({zero_width})")


def _limit(x: float) -> str:
    return f"{x:g}"


def _frac(k: int, n: int) -> str:
    return f"{k}/{n}"


def _rank_cell(rank: float, shared: bool, lo: float = math.nan, hi: float = math.nan) -> str:
    """``position [L, U]``: the place by mean score ('=' for an exact tie) and the rank interval."""
    text = f"{rank:g}" + ("=" if shared else "")
    return text + (f" [{lo:g}, {hi:g}]" if math.isfinite(lo) and math.isfinite(hi) else "")


# -------------------------------------------------------------------------------- ranking


def _iqm(x: np.ndarray) -> float:
    return float(stats.iqm(x))


def _round_key(x: float) -> float:
    # Equal scores computed along different paths may differ in the last bits: compare
    # point estimates at 12 significant digits, so that equal results tie exactly.
    return float(f"{x:.12g}") if math.isfinite(x) else x


#: Family-wise error of a task's (or suite's) separations: Holm-adjusted p <= SEPARATION_ALPHA.
SEPARATION_ALPHA = 0.05


def shared_ranks(
    samples: Mapping[str, np.ndarray],
    *,
    reps: int = stats.PERMUTATION_REPS,
    seed: int = stats.BOOTSTRAP_SEED,
) -> tuple[dict[str, int], dict[str, float], dict[tuple[str, str], tuple[float, float, float]]]:
    """The board's earlier rule, kept for comparison (the board ranks with :func:`ranking.rank`):
    ranks of algorithms from per-seed scores (higher is better) by the difference of means.

    Returns ``(rank, average_rank, diff)``: ``rank[a]`` = 1 + #{b: b separated above a}.
    Every pair with >= MIN_SEEDS_FOR_CI seeds each is tested with the two-sample
    :func:`~constrained_grpo.eval.scoring.stats.permutation_test` of the difference of their
    mean scores (the statistic the table ranks by; exact over the C(n + m, n) splits of
    their runs). Unpaired: every run of a task is evaluated on the same episodes, so seed i
    of one algorithm shares nothing with seed i of another that it does not share with seed
    j, and pairing by seed would only cost resolution (smallest p 2/2^10 at 10 seeds against
    2/C(20, 10)). b is separated above a when mean(b) > mean(a) and the Holm-adjusted p-value
    over the tested pairs is at most ``SEPARATION_ALPHA``: the chance of any false separation
    among them is at most 5%. With n seeds each the smallest p is 2/C(2n, n), so m pairs can
    be separated at all only from the n of :func:`seeds_to_separate` (8 seeds for up to 300
    pairs: 25 algorithms). ``average_rank[a]`` is the fractional rank of the mean scores,
    exact ties sharing the average of their places (descriptive, for the suite mean);
    ``diff[(a, b)]`` is (mean(a) - mean(b), p, Holm-adjusted p) for every ordered pair that
    was tested.
    """
    algos = sorted(samples)
    x = {a: np.asarray(samples[a], float) for a in algos}
    tested = [(a, b) for i, a in enumerate(algos) for b in algos[i + 1:]
              if min(x[a].size, x[b].size) >= stats.MIN_SEEDS_FOR_CI]
    p = stats.two_sample_p_values([([x[a]], [x[b]]) for a, b in tested], reps=reps, seed=seed)
    raw = {(a, b): (float(np.mean(x[a]) - np.mean(x[b])), q) for (a, b), q in zip(tested, p)}
    return _ranks_from_tests(algos, raw, x)


def _ranks_from_tests(
    algos: Sequence[str], raw: Mapping[tuple[str, str], tuple[float, float]], points_of: Mapping[str, np.ndarray]
) -> tuple[dict[str, int], dict[str, float], dict[tuple[str, str], tuple[float, float, float]]]:
    """Ranks from the pairs' (T, p): Holm over the pairs, b above a when T(b, a) > 0 and separated."""
    adjusted = stats.holm({pair: p for pair, (_, p) in raw.items()})
    diff: dict[tuple[str, str], tuple[float, float, float]] = {}
    better: dict[str, int] = {a: 0 for a in algos}
    for (a, b), (t, p) in raw.items():
        q = adjusted[(a, b)]
        diff[(a, b)], diff[(b, a)] = (t, p, q), (-t, p, q)
        if q <= SEPARATION_ALPHA and t != 0:
            better[b if t > 0 else a] += 1
    points = np.array([_round_key(float(np.mean(points_of[a]))) for a in algos])
    avg = rankdata(-points, method="average") if len(algos) else np.array([])
    return {a: 1 + better[a] for a in algos}, {a: float(r) for a, r in zip(algos, avg)}, diff


def seeds_to_separate(pairs: int, alpha: float = SEPARATION_ALPHA) -> int:
    """The fewest seeds per algorithm with which the exact two-sample test can separate any
    of ``pairs`` pairs under Holm: at least ``MIN_SEEDS_FOR_CI`` (fewer are not tested), and
    the smallest p, 2/C(2n, n), at most alpha / pairs."""
    n = stats.MIN_SEEDS_FOR_CI
    while 2 / math.comb(2 * n, n) > alpha / max(1, pairs):
        n += 1
    return n


class _Records(tuple):
    """Read-only records kept in ``DataFrame.attrs``, which ``copy.deepcopy`` returns as they are:
    pandas deep-copies ``attrs`` into every frame derived from one (each column access), and a
    task's 300 pair records copied that way cost more than the tests that made them. They pickle
    as plain dicts, so a frame that carries them still pickles."""

    def __new__(cls, records: Iterable[Mapping[str, object]]) -> "_Records":
        return super().__new__(cls, (MappingProxyType(dict(r)) for r in records))

    def __deepcopy__(self, memo: dict) -> "_Records":
        return self

    def __reduce__(self) -> tuple[type, tuple[list[dict[str, object]]]]:
        return (_Records, ([dict(r) for r in self],))


def _attach_ranking(df: pd.DataFrame, result: ranking.Ranking) -> None:
    """Columns rank (the position by mean score), rank_lo, rank_hi, shared, letters and
    not_separated, and the pair records in ``df.attrs``, from a :class:`ranking.Ranking`."""
    at = {a: i for i, a in enumerate(result.algos)}
    idx = [at[str(a)] for a in df["algo"]]
    df["rank"] = [float(result.position[i]) for i in idx]
    df["rank_lo"] = [float(result.lower[i]) for i in idx]
    df["rank_hi"] = [float(result.upper[i]) for i in idx]
    df["shared"] = df["rank"].map(df["rank"].value_counts()) > 1
    df["letters"] = [result.letters[i] for i in idx]
    df["not_separated"] = [", ".join(sorted(result.not_separated(str(a)))) for a in df["algo"]]
    df.attrs.update(_ranked_attrs(result))


def _score_resolution(g: pd.DataFrame, meta: TaskMeta) -> float:
    """What one run's evaluation can resolve of the score: per run whose score rests on its
    costs (undetermined or breaking), max_k se(J_k)/c(d_k), the standard error of its
    normalised violation over the evaluation episodes (0 for a feasible run, whose score is
    its return); the median over the algorithm's runs."""
    if not meta.constraints or g.empty:
        return 0.0
    se = np.column_stack([g[f"eval_cost_se_{c.name}"].to_numpy(dtype=float) / limit_scale(c.limit)
                          if f"eval_cost_se_{c.name}" in g else np.zeros(len(g)) for c in meta.constraints])
    per_run = np.where(g["feasibility"].to_numpy() == "feasible", 0.0, np.nan_to_num(se, nan=0.0).max(axis=1))
    return float(np.median(per_run))


def clopper_pearson(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """The exact two-sided interval for a share k/n: [B(a/2; k, n - k + 1), B(1 - a/2; k + 1, n - k)].

    >>> [round(x, 3) for x in clopper_pearson(10, 10)]
    [0.692, 1.0]
    """
    from scipy.stats import beta

    if n <= 0:
        return math.nan, math.nan
    a = 1 - level
    lo = 0.0 if k == 0 else float(beta.ppf(a / 2, k, n - k + 1))
    hi = 1.0 if k == n else float(beta.ppf(1 - a / 2, k + 1, n - k))
    return lo, hi


# ------------------------------------------------------------------------- comparability


def comparability(runs: pd.DataFrame, unpaired: Collection[str] = ()) -> dict[str, tuple[str, ...]]:
    """Per task of a ``run_metrics`` frame with two or more algorithms: why its runs cannot
    be ranked together (empty when they can). Evaluation protocols must agree (policies, reset
    seeds recorded and starting at the same seed; the episode counts may differ, since a
    run's plan depends on its costs' spread: runs are paired on their common prefix, and
    each verdict and score accounts for its own count) and budgets too (final env steps
    within a factor BUDGET_RATIO of each other). ``unpaired``: algorithms evaluated from a
    first seed of their own (the maintainer's private one), exempt from the same-seed rule."""
    out: dict[str, tuple[str, ...]] = {}
    for task, g in runs.groupby("task", sort=True):
        if g["algo"].nunique() < 2:
            continue
        reasons: list[str] = []

        def per_algo(col: str, fmt=str) -> str:
            vals = g.groupby("algo", sort=True)[col].agg(lambda v: sorted({fmt(x) for x in v}))
            return "; ".join(f"{a}: {', '.join(v)}" for a, v in vals.items())

        if g["eval_policies"].nunique() > 1:
            reasons.append(f"evaluated policies differ ({per_algo('eval_policies')})")
        unknown = sorted(g.loc[g["eval_first_seed"].isna(), "algo"].unique())
        if unknown:
            reasons.append(
                "the evaluation episodes' reset seeds are not recorded for " + ", ".join(unknown)
                + " (runs evaluated by the agent itself, not paired with the others); rerun them with `cgrpo bench`"
            )
        # Runs the maintainer evaluated from a private first seed (``unpaired``) share no
        # episode with the others: the rank test is unpaired, so only the rest must agree.
        elif g.loc[~g["algo"].isin(set(unpaired)), "eval_first_seed"].nunique() > 1:
            reasons.append(f"evaluation reset seeds differ ({per_algo('eval_first_seed', lambda x: f'{int(x)}+i')})")
        steps = g["env_steps"].to_numpy(dtype=float)
        if steps.min() <= 0 or steps.max() / steps.min() > BUDGET_RATIO:
            reasons.append(f"budgets differ (final env steps: {per_algo('env_steps', lambda x: f'{int(x):,}')})")
        if reasons:
            out[str(task)] = tuple(reasons)
    return out


# ---------------------------------------------------------------------------- per task


def p_feasible(g: pd.DataFrame, meta: TaskMeta, tol: float, *, reps: int = stats.BOOTSTRAP_REPS,
               seed: int = stats.BOOTSTRAP_SEED) -> float:
    """P(feasible) of one algorithm's runs ``g`` (rows of ``run_metrics``) on task ``meta``.

    The share of replicates b in which (1/n) sum_i max_k max(0, J*_{i,k} - d_k)/c(d_k) <= tol,
    where the n seeds i are resampled with replacement and J*_{i,k} = J_{i,k} + se_{i,k} eps_{b,k}
    adds the evaluation's own noise (se: the standard error of J over the episodes; none
    where it is unknown). One eps_{b,k} ~ N(0, 1) per replicate and constraint is shared by
    every seed: all runs of a task are evaluated on the same episodes, so their errors are
    correlated, and full correlation is the widest case. Seeds alone would call a policy
    that sits at its limit on unlucky episodes certainly infeasible."""
    names = meta.constraint_names
    if not names or g.empty:
        return float((g["violation"] <= tol).mean()) if len(g) else math.nan
    cost = np.column_stack([g[f"eval_cost_{k}"].to_numpy(dtype=float) for k in names])
    se_cols = [g[f"eval_cost_se_{k}"].to_numpy(dtype=float) if f"eval_cost_se_{k}" in g else np.zeros(len(g)) for k in names]
    se = np.nan_to_num(np.column_stack(se_cols), nan=0.0)
    limit = np.array([c.limit for c in meta.constraints])
    scale = np.array([limit_scale(c.limit) for c in meta.constraints])
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(g), size=(reps, len(g)))
    eps = rng.standard_normal(size=(reps, 1, len(names)))
    drawn = cost[idx] + se[idx] * eps  # (reps, n, K)
    viol = (np.maximum(0.0, drawn - limit) / scale).max(axis=2)
    return float(np.mean(viol.mean(axis=1) <= tol))


def _per_task(runs: pd.DataFrame, meta: TaskMeta, tol: float, reps: int, seed: int, ranked: bool,
              anchors: Anchors | None = None) -> pd.DataFrame:
    """Numbers of each algorithm on one task; with ``ranked``, its shared ranks, in rank order
    (``anchors``: the task's return anchors, as its runs' scores were normalised)."""
    names = meta.constraint_names
    out = []
    samples: dict[str, np.ndarray] = {}
    for algo, g in runs.groupby("algo", sort=True):
        g = g.sort_values("seed")
        n = len(g)
        samples[str(algo)] = g["score"].to_numpy(dtype=float)
        row: dict[str, object] = {"algo": algo, "seeds": n}
        # The score's mean is what the rank test compares; the return is summarised robustly.
        for col, key, fn in (("score", "score", np.mean), ("eval_return", "return", stats.iqm)):
            x = g[col].to_numpy(dtype=float)
            row[key], row[f"{key}_lo"], row[f"{key}_hi"] = stats.stratified_bootstrap_ci([x], fn, reps=reps, seed=seed)
            row[f"{key}_same"] = bool((x == x[0]).all())
        # The run's worst normalised violation max_k max(0, J_k - d_k)/c(d_k): mean over seeds.
        worst = g["violation"].to_numpy(dtype=float)
        row["worst"], row["worst_lo"], row["worst_hi"] = stats.stratified_bootstrap_ci([worst], np.mean, reps=reps, seed=seed)
        row["worst_same"] = bool((worst == worst[0]).all())
        norm = g["eval_return_norm"].to_numpy(dtype=float)
        row["norm"] = _iqm(norm) if np.isfinite(norm).all() else math.nan
        row["feasible_seeds"] = int((g["feasibility"] == "feasible").sum())
        row["feasible_lo"], row["feasible_hi"] = clopper_pearson(row["feasible_seeds"], n)
        row["undetermined_seeds"] = int((g["feasibility"] == "undetermined").sum())
        row["breaking_seeds"] = int((g["feasibility"] == "violates").sum())
        # Within d itself (no tolerance): every cost's one-sided 95% upper bound at most d_k.
        row["within_d_seeds"] = int(np.all([g[f"eval_cost_hi_{c.name}"].to_numpy(dtype=float) <= c.limit
                                            for c in meta.constraints], axis=0).sum()) if names else n
        row["p_feasible"] = p_feasible(g, meta, tol, reps=reps, seed=seed)
        # "yes" only when no seed's own verdict breaks a limit: P(feasible) averages over seeds.
        row["verdict"] = ("yes" if row["p_feasible"] >= 0.95 and not row["breaking_seeds"]
                          else ("no" if row["p_feasible"] <= 0.05 else "uncertain"))
        row["resolution"] = _score_resolution(g, meta)
        for k in names:
            row[f"cost_{k}"] = float(np.mean(g[f"eval_cost_{k}"]))
            row[f"within_{k}"] = float(np.mean(g[f"within_{k}"]))
            row[f"violation_{k}"] = float(np.mean(g[f"violation_{k}"]))
        row["greedy_return"] = float(np.mean(g["greedy_return"]))
        row["greedy_feasible_seeds"] = int(g["greedy_feasible"].sum()) if g["greedy_return"].notna().all() else -1
        row["tail_return"] = float(np.mean(g["final_return"]))
        row["tail_feasible_seeds"] = int(g["tail_feasible"].sum())
        # The average iterate's score with the final score's interval, and the final policy's
        # gain over it paired by seed (negative: the deployed policy scores below the tail).
        # Like with like: the tail's score is a point score (its return and costs over the last
        # iterations), so the gap takes the final policy's point score too, not its expected
        # score: identical iterates differ by exactly 0.
        tail = g["tail_score"].to_numpy(dtype=float)
        final_point = np.array([constrained_score(float(ret), meta.optimum_return, float(v), tol, anchors)
                                for ret, v in zip(g["eval_return"], g["violation"])])
        gap = final_point - tail
        for key, x in (("tail_score", tail), ("iterate_gap", gap)):
            row[key], row[f"{key}_lo"], row[f"{key}_hi"] = stats.stratified_bootstrap_ci([x], np.mean, reps=reps, seed=seed)
            row[f"{key}_same"] = bool((x == x[0]).all())
        stab = g["stability"].to_numpy(dtype=float)
        row["stuck_seeds"] = int((g["stability_class"].astype(str) == "stuck").sum()) if "stability_class" in g else 0
        counts = Counter(str(c) for c in g["stability_class"]) if "stability_class" in g else Counter()
        if np.isfinite(stab).all() or counts.get("switch"):
            top = max(counts.values())
            worst = max((c for c, k in counts.items() if k == top), key=lambda c: _CLASS_ORDER.index(c) if c in _CLASS_ORDER else len(_CLASS_ORDER))
            row["stability_class"] = f"{worst} {top}/{n}"
        else:
            row["stability_class"] = ""
        if np.isfinite(stab).all():
            row["stability"], row["stability_lo"], row["stability_hi"] = stats.stratified_bootstrap_ci([stab], stats.iqm, reps=reps, seed=seed)
            row["stability_same"] = bool((stab == stab[0]).all())
        else:  # no multiplier, or a switch on some seed: no score ("—"), the class says why
            row["stability"] = row["stability_lo"] = row["stability_hi"] = math.nan
            row["stability_same"] = False
        track = [g[f"tracking_{k}"].to_numpy(dtype=float) for k in names if f"tracking_{k}" in g]
        track_vals = np.concatenate(track) if track else np.array([])
        track_vals = track_vals[np.isfinite(track_vals)]
        row["tracking"] = float(np.mean(track_vals)) if track_vals.size else math.nan
        dist = g["lambda_dist"].to_numpy(dtype=float) if "lambda_dist" in g else np.array([math.nan])
        row["lambda_dist"] = float(np.mean(dist)) if np.isfinite(dist).all() else math.nan
        out.append(row)
    df = pd.DataFrame(out)
    if ranked:
        res = dict(zip(df["algo"].astype(str), df["resolution"]))
        result = ranking.rank(samples, resolution={(a, b): max(res[a], res[b]) for a in res for b in res if a < b})
        df = df.set_index("algo").loc[list(result.algos)].reset_index()
        _attach_ranking(df, result)
        df["avg_rank"] = rankdata(-np.array([_round_key(m) for m in df["score"]]), method="average")
    else:
        df["rank"] = math.nan
        df["avg_rank"] = math.nan
        df["shared"] = False
        df["rank_lo"] = df["rank_hi"] = math.nan
        df["letters"] = ""
        df["not_separated"] = ""
    cols = ["rank", "avg_rank", "shared", *[c for c in df.columns if c not in ("rank", "avg_rank", "shared")]]
    return df[cols].reset_index(drop=True)


def _undetermined_note(runs: pd.DataFrame, meta: TaskMeta, tol: float) -> str | None:
    """How many learner runs of the task are undetermined, and the episodes that would
    decide them at their observed costs (:func:`~constrained_grpo.eval.scoring.verdict.run_episodes_to_decide`)."""
    if not len(runs):
        return None
    undecided = runs[runs["feasibility"] == "undetermined"]
    share = len(undecided) / len(runs)
    episodes = int(runs["eval_episodes"].max())
    if not len(undecided):
        return f"Every learner run is decided (feasible or breaking a limit) on its {episodes:,} evaluation episodes per policy."
    need = []
    for r in undecided.to_dict("records"):
        n = int(r["eval_episodes"])
        costs = [(float(r[f"eval_cost_{c.name}"]), float(r[f"eval_cost_se_{c.name}"]) * math.sqrt(n), str(r[f"verdict_{c.name}"]))
                 for c in meta.constraints]
        need.append(run_episodes_to_decide(costs, [c.limit for c in meta.constraints], [c.indicator for c in meta.constraints], tol))
    finite = sorted(x for x in need if math.isfinite(x))
    text = (f"Undetermined: {len(undecided)} of {len(runs)} learner runs ({share:.0%}) on {episodes:,} evaluation episodes "
            "per policy; at its observed costs, each would be decided with 80% probability after ")
    if finite:
        text += f"about {int(np.median(finite)):,} episodes (the median; the most: {int(finite[-1]):,})"
    stuck = len(need) - len(finite)
    if stuck:
        text += ("; " if finite else "") + (f"{stuck} {'sits' if stuck == 1 else 'sit'} at the tolerated level itself, "
                                            "which no count of episodes decides")
    return text + "."


def _declared_anchors(task: str) -> tuple[str, str] | None:
    """The ``(low, high)`` reference policies a registered task normalises its return by, if any."""
    return getattr(registered_info(task), "return_anchors", None)


#: How the reason a task is not ranked begins where its limits do not bind on the board's runs
#: (a control); the stand-ins that keep them follow.
CONTROL_REASON = "a control: its limits do not bind on this board's runs"


def is_control(reason: str) -> bool:
    """Whether a not-ranked reason says the task is a control (its limits do not bind)."""
    return reason.startswith(CONTROL_REASON)


def _binding(task: str, runs: pd.DataFrame) -> tuple[str, str]:
    """What the board's own runs of ``task`` (every run, references included) say of the
    :class:`~constrained_grpo.envs.registration.Binding` the task declares: ``(control, note)``,
    the note counting its unconstrained stand-ins' breaking seeds and its keepers' seeds within
    every limit (:func:`~constrained_grpo.eval.scoring.binding.board_binding`; "" where it
    declares none or none of them ran). ``control`` (e.g. "unconstrained ppo breaks a limit on
    only 2/10 seeds"; "" for none): an unconstrained stand-in ran and broke a limit on fewer than
    9 of 10 seeds (:func:`~constrained_grpo.eval.scoring.binding.loose_stand_ins`):
    the reward maximiser keeps the limits here, so the task's rows are shown without ranks and it
    enters no aggregate (a ranking there tests no constraint). A board without stand-ins, or
    whose keepers are not shown within, is ranked as usual."""
    info = registered_info(task)
    binding = info.task_binding() if info is not None and hasattr(info, "task_binding") else None
    if binding is None:
        return "", ""
    binds, sentence = board_binding(runs, binding)
    if binds is None:
        return "", ""
    note = ("Binding, from this board's runs: " if binds else "GAP, binding from this board's runs: ") + sentence + "."
    control = ", ".join(f"{name} breaks a limit on only {k}/{n} seeds" for name, k, n in loose_stand_ins(runs, binding))
    return (f"unconstrained {control}" if control else ""), note


def _task_section(task: str, ranked: pd.DataFrame | None, meta: TaskMeta, reasons: Sequence[str], tol: float,
                  references: pd.DataFrame | None = None, learner_runs: pd.DataFrame | None = None,
                  anchors: tuple[str, str, Anchors] | None = None, binding: str = "") -> Section:
    """The task's table: ranked algorithms, then reference policies (rank "ref");
    ``learner_runs``: the task's per-run metrics (the note on undetermined runs); ``anchors``:
    the two references that normalise its return and their mean returns; ``binding``: what
    the board's runs say of whether its limits bind (:func:`_binding`)."""
    names = meta.constraint_names
    parts = [d.assign(reference=flag) for d, flag in ((ranked, False), (references, True)) if d is not None]
    df = pd.concat(parts, ignore_index=True)
    header = ["rank [L, U]", "group", "algo", "seeds", f"seeds within d(1 + {tol:g}) [95% CI]", "seeds within d",
              "undetermined seeds", "P(feasible)", "feasible?", "score mean [95% CI]", "return IQM [95% CI]", "norm. return"]
    for c in meta.constraints:
        header += [f"J {c.name} (d={_limit(c.limit)})", f"within {c.name}", f"viol. {c.name}"]
    header += ["greedy return", "greedy feasible", "avg-iterate return", "avg-iterate feasible",
               "avg-iterate score mean [95% CI]", "final - avg-iterate score [95% CI]", "λ stability [95% CI]", "λ class", "cost tracking", "‖λ-λ*‖", "not separated from"]
    rows = []
    for r in df.to_dict("records"):
        n = int(r["seeds"])
        if r["reference"]:
            rank = "ref"
        elif not math.isfinite(float(r["rank"])):
            rank = "—"
        else:
            rank = _rank_cell(float(r["rank"]), bool(r["shared"]), float(r["rank_lo"]), float(r["rank_hi"]))
        within = _frac(int(r["feasible_seeds"]), n) + f" [{_num(r['feasible_lo'], 2)}, {_num(r['feasible_hi'], 2)}]"
        cells = [rank, str(r.get("letters") or "—") if not r["reference"] else "—", str(r["algo"]), str(n), within,
                 _frac(int(r["within_d_seeds"]), n), _frac(int(r["undetermined_seeds"]), n),
                 _num(r["p_feasible"], 2), str(r["verdict"]),
                 _ci(r["score"], r["score_lo"], r["score_hi"], n, same=r["score_same"]),
                 _ci(r["return"], r["return_lo"], r["return_hi"], n, same=r["return_same"]),
                 _num(r["norm"])]
        for k in names:
            cells += [_num(r[f"cost_{k}"]), _num(r[f"within_{k}"], 2), _num(r[f"violation_{k}"])]
        greedy = "—" if int(r["greedy_feasible_seeds"]) < 0 else _frac(int(r["greedy_feasible_seeds"]), n)
        cells += [_num(r["greedy_return"]), greedy, _num(r["tail_return"]), _frac(int(r["tail_feasible_seeds"]), n),
                  _ci(r["tail_score"], r["tail_score_lo"], r["tail_score_hi"], n, same=r["tail_score_same"]),
                  _ci(r["iterate_gap"], r["iterate_gap_lo"], r["iterate_gap_hi"], n, same=r["iterate_gap_same"]),
                  _ci(r["stability"], r["stability_lo"], r["stability_hi"], n, same=r["stability_same"]), str(r["stability_class"]) or "—",
                  _num(r["tracking"]), _num(r["lambda_dist"]), str(r["not_separated"]) or "—"]
        rows.append(tuple(cells))
    notes = [f"Suite {meta.suite}; constraints: " + ", ".join(f"{c.name} <= {_limit(c.limit)}" for c in meta.constraints) + "."]
    if meta.optimum_return is not None:
        mult = ", ".join(f"{n}={_num(m)}" for n, m in zip(names, meta.optimal_multipliers or ()))
        notes.append(
            f"Exact constrained optimum R* = {_num(meta.optimum_return, 4)} (unconstrained "
            f"{_num(meta.unconstrained_return or math.nan, 4)}; optimal multipliers λ* {mult}); "
            "normalised return = 1 - (R* - R)/|R*|."
        )
    elif anchors is not None:
        low, high, (r_low, r_high) = anchors
        notes.append(f"No exact optimum: normalised return = (R - R_low)/(R_high - R_low), 0 at {low} (R_low = "
                     f"{_num(r_low, 4)}) and 1 at {high} (R_high = {_num(r_high, 4)}), their mean returns on this board; "
                     "scores use it.")
    if binding:
        notes.append(binding)
    unlike = [r for r in reasons if not is_control(r)]
    for r in reasons:
        if is_control(r):
            notes.append(f"NOT RANKED, {r}: its rows are shown for comparison and it enters no aggregate.")
    if unlike:
        notes.append("NOT RANKED: these runs cannot be compared: " + "; ".join(unlike) + ".")
    if ranked is not None and ranked.attrs.get("pairs"):
        a = ranked.attrs
        notes.append(f"Discriminative power: {a['pairs_separated']} of {a['pairs']} algorithm pairs separated by Welch's t "
                     "(equal mean scores; p the larger of its exact permutation test's and a conservative t-test's), "
                     "Holm-corrected over the "
                     f"task's pairs at 5% ({a['pairs_tested']} had the seeds to be tested; p-values in pairs.csv). Rows in "
                     "the order of the mean score; rank = that position, [L, U] its simultaneous 95% interval (L = 1 + the "
                     "algorithms separated above, U = the count minus those separated below); two rows share a group "
                     "letter exactly when the test does not separate them.")
    undetermined = _undetermined_note(learner_runs, meta, tol) if learner_runs is not None else None
    if undetermined:
        notes.append(undetermined)
    if references is not None:
        names = ", ".join(str(a) for a in references["algo"])
        notes.append(f"Rows ranked \"ref\" are reference policies ({names}): anchors evaluated like every run, "
                     "not ranked.")
    stuck = [] if ranked is None else [f"{r['algo']} ({int(r['stuck_seeds'])}/{int(r['seeds'])} seeds)"
                                       for r in ranked.to_dict("records") if int(r.get("stuck_seeds", 0))]
    if stuck:
        notes.append("FAILURE, stuck multiplier: " + ", ".join(stuck) + ": a constraint is violated through the second "
                     "half of training while its multiplier does not move; the dual update is not working (a zero or "
                     "tiny step, a frozen or clipped multiplier).")
    # A learner whose final policies split between keeping the limits and breaking them (2 or
    # more seeds each way) is bimodal over seeds: its mean sits between two modes, and its place
    # among such learners depends on which seeds were drawn.
    split = [] if ranked is None else [
        f"{r['algo']} ({int(r['feasible_seeds'])}/{int(r['seeds'])} within, {int(r['breaking_seeds'])} breaking)"
        for r in ranked.to_dict("records") if int(r["feasible_seeds"]) >= 2 and int(r.get("breaking_seeds", 0)) >= 2]
    if split:
        notes.append("Split over seeds (2 or more seeds within the limits and 2 or more breaking them): " + ", ".join(split)
                     + ". For these the seeds give a count, not a mean: the share within with its interval is the finding, "
                     "and their order among themselves may change with other seeds (their rank intervals say how far).")
    if ranked is not None and not (ranked["feasible_seeds"] > 0).any():
        notes.append("No algorithm is shown feasible on this task: by the verdict, no seed of any ranked algorithm keeps "
                     f"every limit (each cost's one-sided 95% upper bound within d(1 + {tol:g})); the scores weigh what "
                     "the evaluation episodes cannot tell.")
    # The exact two-sample test's floor: with n seeds each no p-value is below 2/C(2n, n).
    if ranked is not None and ranked.attrs.get("pairs") and not ranked.attrs.get("pairs_separated") and (
            stats.MIN_SEEDS_FOR_CI <= int(ranked["seeds"].min()) < (need := seeds_to_separate(ranked.attrs["pairs"]))):
        notes.append(f"With {int(ranked['seeds'].min())} seeds no pair of the {ranked.attrs['pairs']} can be separated: the exact "
                     f"test's smallest p-value is 2/C(2n, n), and Holm over {ranked.attrs['pairs']} pairs needs at least {need} "
                     "seeds per algorithm. Every rank is shared.")
    if ranked is not None and int(ranked["seeds"].min()) < stats.MIN_SEEDS_FOR_CI:
        notes.append(f"Fewer than {stats.MIN_SEEDS_FOR_CI} seeds for some algorithm: no intervals for it, and no "
                     "algorithm is separated from it (ranks shared).")
    return Section(f"Task {task}", tuple(notes), tuple(header), tuple(rows))


# ---------------------------------------------------------------------------- deployments


#: The deployment table's one-line note (under a task's ranked table, or a suite's aggregate).
#: The most run names the preamble lists for the runs that deploy by another rule; past it, a summary.
DEPLOYMENT_NAMES_LISTED = 12


def _deployment_names(other_rule: pd.DataFrame) -> str:
    """The names of the runs deploying another rule: listed up to :data:`DEPLOYMENT_NAMES_LISTED`,
    else counted by rule over their learners (the deployment tables list them)."""
    names = sorted(other_rule["algo"].astype(str).unique())
    if len(names) <= DEPLOYMENT_NAMES_LISTED:
        return ", ".join(names)
    rules = other_rule.groupby("deploy")["learner"].nunique()
    return f"{len(names)} names: " + ", ".join(f"{rule} of {n} learner(s)" for rule, n in rules.items())


DEPLOYMENT_NOTE = ("Not ranked: deployments of a ranked learner's own trainings by another rule (its runs in brackets), "
                   "each compared with the learner's last iterate paired by seed (gain in score: 95% t interval; seeds "
                   "moved into or out of the limits: McNemar's exact test at 5%).")
#: The same over a suite: how the tasks' gains and seeds are pooled.
DEPLOYMENT_SUITE_NOTE = ("Over the aggregate's tasks: the mean of the tasks' mean gains with an interval stratified by "
                         "task; the seeds moved pooled over the suite's runs.")

#: What McNemar's verdict reads as in a cell.
_LIMITS_TEXT = {"into": "into the limits", "out of": "out of the limits", "no change shown": "no change shown"}


def _deployment_frame(table: pd.DataFrame, runs: pd.DataFrame, scope: str) -> pd.DataFrame:
    """``deployment_table``'s rows under ``scope`` (the task id or ``suite:NAME``) with ``algo``:
    the algorithm name(s) the rule's runs carry in ``runs`` (``cgrpo-best``)."""
    names = {key: ", ".join(sorted({str(a) for a in g["algo"]})) for key, g in runs.groupby(["learner", "deploy"], sort=True)}
    out = table.assign(scope=scope, algo=[names.get((str(learner), str(rule)), "")
                                          for learner, rule in zip(table["learner"], table["deploy"])])
    return out[list(DEPLOYMENTS_COLUMNS)].reset_index(drop=True)


def _gain_cell(r: Mapping[str, object]) -> str:
    """``mean [lo, hi]`` where the interval excludes 0, ``not shown [lo, hi]`` where it contains it."""
    if r["gain"] == "too few seeds":
        return f"too few seeds (n={int(r['seeds'])})"
    interval = f"[{_num(float(r['gain_lo']))}, {_num(float(r['gain_hi']))}]"
    return f"{_num(float(r['gain_mean']))} {interval}" if r["gain"] in ("gain", "loss") else f"not shown {interval}"


def _deployment_section(title: str, df: pd.DataFrame, suite: bool = False) -> Section:
    """The deployment table (:attr:`Leaderboard.deployments`' rows of one scope) as a section."""
    header = ("learner", "rule (runs)", "paired seeds", "gain in score [95% CI]", "limits kept, last → rule",
              "moved in / out", "McNemar's test")
    rows = []
    for r in df.to_dict("records"):
        n = int(r["seeds"])
        rule = f"{r['deploy']} ({r['algo']})" if r["algo"] and r["algo"] != r["learner"] else str(r["deploy"])
        rows.append((str(r["learner"]), rule, str(n), _gain_cell(r),
                     f"{int(r['feasible_last'])}/{n} → {int(r['feasible_deploy'])}/{n}",
                     f"{int(r['moved_in'])} in, {int(r['moved_out'])} out",
                     f"{_LIMITS_TEXT[str(r['limits'])]} (p = {float(r['limits_p']):.2g})"))
    notes = (DEPLOYMENT_NOTE,) + ((DEPLOYMENT_SUITE_NOTE,) if suite else ())
    return Section(title, notes, header, tuple(rows))


# ---------------------------------------------------------------------------- per suite


def _overall(runs: pd.DataFrame, per_task: Mapping[str, pd.DataFrame], tasks: Sequence[str], reps: int, seed: int) -> pd.DataFrame:
    """Per algorithm over ``tasks`` (stratified by task), with shared ranks, in rank order."""
    sub = runs[runs["task"].isin(tasks)]
    agg = stats.aggregate(sub, "score", reps=reps, seed=seed).set_index("algo")
    by: dict[str, dict[str, np.ndarray]] = {}
    out = []
    for algo in sorted(sub["algo"].unique()):
        g = sub[sub["algo"] == algo]
        by[algo] = {t: gt.sort_values("seed")["score"].to_numpy(dtype=float) for t, gt in g.groupby("task", sort=True)}
        min_n = min(len(v) for v in by[algo].values())
        out.append({
            "algo": algo,
            "tasks": g["task"].nunique(),
            "runs": len(g),
            "min_seeds": min_n,
            "feasible_runs": int((g["feasibility"] == "feasible").sum()),
            "undetermined_runs": int((g["feasibility"] == "undetermined").sum()),
            "tail_feasible_runs": int(g["tail_feasible"].sum()),
            "iqm": agg.loc[algo, "iqm"], "iqm_lo": agg.loc[algo, "iqm_lo"], "iqm_hi": agg.loc[algo, "iqm_hi"],
            "mean": agg.loc[algo, "mean"], "mean_lo": agg.loc[algo, "mean_lo"], "mean_hi": agg.loc[algo, "mean_hi"],
            "mean_rank": float(np.mean([per_task[t].set_index("algo").loc[algo, "avg_rank"] for t in tasks if algo in set(per_task[t]["algo"])])),
        })
    df = pd.DataFrame(out)
    # Separation over the suite: the studentised difference of pooled mean scores (the
    # statistic ranked by, over its own standard error), labels permuted within each task:
    # unpaired, as on a task. Monte Carlo with draws enough that no decision depends on the
    # generator's seed (ranking.stratified_welch_p_values), among algorithms that ran every
    # task with enough seeds; the pair's p is the larger of that and the same statistic's
    # conservative t-test (ranking.stratified_t_p_values), as on a task; Holm over the pairs.
    full = [a for a in df["algo"] if len(by[a]) == len(tasks)]
    tested = [(a, b) for i, a in enumerate(full) for b in full[i + 1:]
              if min(min(len(v) for v in by[a].values()), min(len(v) for v in by[b].values())) >= stats.MIN_SEEDS_FOR_CI]
    strata = [([by[a][t] for t in tasks], [by[b][t] for t in tasks]) for a, b in tested]
    t_p = ranking.stratified_t_p_values(strata)
    perm_p = ranking.stratified_welch_p_values(strata, seed=seed, at_least=t_p)
    # An algorithm's resolution over the suite: the coarsest of its tasks' (what one run resolves).
    res = {a: max(float(per_task[t].set_index("algo").loc[a, "resolution"]) for t in tasks) for a in full}
    result = ranking.rank({a: np.concatenate([by[a][t] for t in tasks]) for a in full},
                          p_values={pair: (float(q), float(u)) for pair, q, u in zip(tested, perm_p, t_p)},
                          resolution={(a, b): max(res[a], res[b]) for a in full for b in full if a < b})
    rest = df[~df["algo"].isin(full)]
    df = df.set_index("algo").loc[list(result.algos)].reset_index()
    _attach_ranking(df, result)
    if len(rest):
        rest = rest.assign(rank=math.nan, rank_lo=math.nan, rank_hi=math.nan, shared=False, letters="", not_separated="")
        df = pd.concat([df, rest.sort_values("algo")], ignore_index=True)
        df.attrs = dict(_ranked_attrs(result))
    return df.reset_index(drop=True)


def _ranked_attrs(result: ranking.Ranking) -> dict[str, object]:
    records = result.pairs()
    return {"pairs": len(result.algos) * (len(result.algos) - 1) // 2, "pairs_tested": len(records),
            "pairs_separated": sum(bool(r["separated"]) for r in records), "pair_tests": _Records(records)}


def _suite_sections(suite: str, runs: pd.DataFrame, per_task: Mapping[str, pd.DataFrame], tasks: Mapping[str, TaskMeta],
                    not_ranked: Mapping[str, Sequence[str]], reps: int, seed: int, deploy_runs: pd.DataFrame | None = None,
                    ) -> tuple[list[Section], pd.DataFrame | None, pd.DataFrame | None]:
    """The suite's aggregate and probability-of-improvement sections, its aggregate frame and
    its deployment table (over the same tasks, :func:`deployment.suite_deployment_table`; None
    where no learner has another deployment on every one of them)."""
    suite_tasks = sorted(runs.loc[runs["suite"] == suite, "task"].unique())
    with_opt = [t for t in suite_tasks if tasks[t].optimum_return is not None and t not in not_ranked]
    left = [t for t in suite_tasks if t not in with_opt]
    if not with_opt:
        why = ("No task of this suite is ranked (see each task's NOT RANKED note), so the suite is not aggregated."
               if all(t in not_ranked for t in suite_tasks) else
               "No ranked task of this suite has an exact optimum, so the suite is not aggregated: a score normalised "
               "between two references of one task is in no common unit with another's; see the per-task tables.")
        return [Section(f"Suite {suite}: aggregate", (why,), (), ())], None, None
    df = _overall(runs, per_task, with_opt, reps, seed)
    header = ("rank [L, U]", "group", "algo", "tasks", "runs", "feasible runs", "undetermined runs", "score IQM [95% CI]", "score mean [95% CI]",
              "mean task rank", "avg-iterate feasible runs", "not separated from")
    rows = []
    for r in df.to_dict("records"):
        n = int(r["min_seeds"])
        rank = ("—" if not math.isfinite(float(r["rank"]))
                else _rank_cell(float(r["rank"]), bool(r["shared"]), float(r["rank_lo"]), float(r["rank_hi"])))
        rows.append((rank, str(r["letters"]) or "—", str(r["algo"]), str(r["tasks"]), str(r["runs"]), _frac(int(r["feasible_runs"]), int(r["runs"])),
                     _frac(int(r["undetermined_runs"]), int(r["runs"])),
                     _ci(r["iqm"], r["iqm_lo"], r["iqm_hi"], n), _ci(r["mean"], r["mean_lo"], r["mean_hi"], n),
                     _num(r["mean_rank"], 2), _frac(int(r["tail_feasible_runs"]), int(r["runs"])),
                     str(r["not_separated"]) or "—"))
    notes = [f"Over {len(with_opt)} task(s): " + ", ".join(with_opt) + "."]
    if left:
        notes.append("Left out (no exact optimum to normalise by, or not ranked): " + ", ".join(left) + ".")
    partial = sorted(a for a in df["algo"] if int(df.set_index("algo").loc[a, "tasks"]) < len(with_opt))
    if partial:
        notes.append("Not ranked in the aggregate (did not run every task): " + ", ".join(partial) + ".")
    dep = None
    mine = deploy_runs[deploy_runs["task"].isin(with_opt)] if deploy_runs is not None else None
    # Over one task the suite's table would repeat the task's.
    if mine is not None and len(with_opt) > 1 and (mine["deploy"] != "last").any():
        table = suite_deployment_table(mine, with_opt)
        dep = _deployment_frame(table, mine, f"suite:{suite}") if len(table) else None
    parts = (_deployment_section(f"Deployments over suite {suite}", dep, suite=True),) if dep is not None else ()
    sections = [Section(f"Suite {suite}: aggregate", tuple(notes), header, tuple(rows), parts)]

    order = [a for a in df["algo"] if int(df.set_index("algo").loc[a, "tasks"]) == len(with_opt)]
    if len(order) >= 2:
        scores = {a: {t: g.sort_values("seed")["score"].to_numpy(dtype=float)
                      for t, g in runs[(runs["algo"] == a) & runs["task"].isin(with_opt)].groupby("task", sort=True)}
                  for a in order}
        min_n = min(len(v) for a in order for v in scores[a].values())
        poi_rows = []
        for a in order:
            cells = [a]
            for b in order:
                if a == b:
                    cells.append("—")
                elif min_n < stats.MIN_SEEDS_FOR_CI:
                    cells.append(_num(stats.probability_of_improvement(scores[a], scores[b]), 2))
                else:
                    poi = stats.probability_of_improvement_ci(scores[a], scores[b], reps=reps, seed=seed)
                    why = "every run of one above every run of the other" if poi[0] in (0.0, 1.0) else "every resample ties"
                    cells.append(_ci(*poi, n=min_n, digits=2, zero_width=why))
            poi_rows.append(tuple(cells))
        note = "P(row > column) of the constraint-aware score, averaged over tasks"
        note += " (no intervals: fewer than 5 seeds per task)." if min_n < stats.MIN_SEEDS_FOR_CI else ", with 95% CI (rliable)."
        sections.append(Section(f"Suite {suite}: probability of improvement", (note,), ("algo", *order), tuple(poi_rows)))
    return sections, df, dep


# --------------------------------------------------------------------------------- build


def build_leaderboard(
    table: pd.DataFrame,
    tasks: Mapping[str, TaskMeta],
    *,
    tol: float = DEFAULT_TOL,
    reps: int = stats.BOOTSTRAP_REPS,
    seed: int = stats.BOOTSTRAP_SEED,
    lambda_in_reward_units: Mapping[str, bool] | None = None,
    lambda_max: Mapping[str, float] | None = None,
    references: Collection[str] = (),
    evals: pd.DataFrame | None = None,
    unpaired: Collection[str] = (),
    deployments: Mapping[tuple[str, str, int], tuple[str, str]] | None = None,
) -> Leaderboard:
    """Metrics, shared rankings and the page's sections from a long table (``evals``: its
    runs' evaluation summaries when it holds only train rows, as a compact record does).

    ``lambda_in_reward_units`` and ``lambda_max`` (per algorithm, as its runs record them,
    ``loader.algo_properties``) enable the distance to lambda* and the "at bound" class.
    ``references`` name reference policies (``constrained_grpo.references``): their rows are
    shown under each task without a rank, and they take part in no comparison. ``unpaired``:
    algorithms evaluated from a first reset seed of their own (``comparability``).
    ``deployments``: per run ``(task, algo, seed)``, the learner it trained and the rule it
    deploys (``loader.run_deployment`` of its ``config.json``); a run not in it is its own
    learner on its last iterate. Each learner is ranked once per task, on its last iterate
    (``deployment.last_iterate_runs``); a run deploying another rule is a second deployment of
    one of its trainings: it is in no rank, pair test or aggregate, only in the deployment
    table under its task (``deployment.deployment_table``, paired by seed with the learner's
    last iterate) and its suite's (``deployment.suite_deployment_table``)."""
    if not (isinstance(tol, (int, float)) and math.isfinite(tol) and tol >= 0):
        raise ValueError(f"tol={tol!r}: the feasibility tolerance must be a finite number >= 0, e.g. 0.1")
    evals = evals if evals is not None else eval_summaries(table, tasks)
    declared = {t: a for t in tasks if (a := _declared_anchors(t)) is not None}
    anchored = anchor_returns(evals, declared)
    runs = run_metrics(table, tasks, tol=tol, lambda_in_reward_units=lambda_in_reward_units, lambda_max=lambda_max,
                       evals=evals, return_anchors=anchored)
    runs.insert(4, "reference", runs["algo"].isin(set(references)))
    deployed = [(deployments or {}).get((str(t), str(a), int(s)), (str(a), "last"))
                for t, a, s in zip(runs["task"], runs["algo"], runs["seed"])]
    runs.insert(5, "learner", [d[0] for d in deployed])
    runs.insert(6, "deploy", [d[1] for d in deployed])
    ref_runs, learner_runs = runs[runs["reference"]], runs[~runs["reference"]]
    other_rule = learner_runs[learner_runs["deploy"] != "last"]
    runs_ranked = last_iterate_runs(learner_runs)
    # Deployments are evaluated like the runs they are compared with: one protocol per task.
    reasons_by_task = comparability(learner_runs, unpaired)
    # The deployment tables' input: every learner run of a task that is ranked, its score and verdict.
    deploy_runs = learner_runs[~learner_runs["task"].isin(set(reasons_by_task))].assign(
        feasible=lambda r: r["feasibility"] == "feasible")
    # A control (its limits do not bind on this board) keeps its deployment table: a rule's
    # gain over the same trainings' last iterates is a paired comparison whatever the limits do.
    bindings = {t: _binding(str(t), runs[runs["task"] == t]) for t in sorted(runs["task"].unique())}
    for t, (loose, _) in bindings.items():
        if loose:
            reasons_by_task[t] = (*reasons_by_task.get(t, ()), f"{CONTROL_REASON} ({loose})")
    preamble = (
        f"{len(runs)} runs, {runs['task'].nunique()} task(s), {runs_ranked['algo'].nunique()} ranked algorithm(s)"
        + (f" and {ref_runs['algo'].nunique()} reference policies" if len(ref_runs) else "")
        + (f"; {len(other_rule)} of the runs ({_deployment_names(other_rule)}) deploy a ranked "
           "learner's trainings by another rule: not ranked, compared with its last iterate in the deployment tables."
           if len(other_rule) else "."),
        "Scored: each run's final policy, evaluated by the harness on the same episodes (reset seeds) for every "
        "algorithm of a task, sampling its actions (the primary evaluation); its greedy (mode) policy and the "
        "average iterate (the last 20% of training iterations) are reported beside it.",
        "Feasibility of a run, from one-sided 95% bounds on each evaluated cost over its episodes (exact "
        "Clopper-Pearson for indicator costs, Student's t otherwise): "
        f"feasible ('within') when every upper bound is within d_k(1 + {tol:g}), breaks a limit when some lower bound (at 5%/K) "
        "is above it, undetermined otherwise (the episodes cannot tell); each wrong call has probability at most 5%. "
        "P(feasible): the share of bootstrap "
        "replicates (seeds resampled, each cost moved by its evaluation noise) whose mean violation "
        f"max_k max(0, J_k - d_k)/d_k is at most {tol:g}.",
        f"Score per run: max(normalised return, 0) if max_k max(0, J_k - d_k)/d_k <= {tol:g} "
        "(normalised return 1 - (R* - R)/|R*| where the task has an exact optimum R*; (R - R_low)/(R_high - R_low) "
        "between the mean returns of two reference policies where the task declares them, e.g. 0 = ref-random and "
        "1 = ref-safe-driver on the highway tasks; the raw return otherwise), else "
        "minus that violation, averaged over what the evaluation episodes cannot tell about each J_k (Jeffreys' "
        "posterior for an indicator, a t-scale normal otherwise): a run clearly over the tolerance never scores above "
        "one clearly within it, and one its episodes cannot tell is neither a keeper nor a violator by its point "
        "estimate alone. Ranks, aggregates and P(X > Y) use the score.",
        "Rows in the order of the mean score: rank = 1 + the number of algorithms with a higher mean ('=' marks an "
        "exact tie), and [L, U] its simultaneous 95% interval from the pair tests: Welch's t for equal mean scores, "
        "p the larger of its exact permutation test's (labels permuted within each task in the aggregates, unpaired) "
        "and a conservative t-test's (the fewer seeds' degrees of freedom), "
        f"Holm-corrected over the pairs at {SEPARATION_ALPHA:g} (every p-value in pairs.csv); L = 1 + the algorithms "
        "separated above, U = their count minus those separated below. Two algorithms share a group letter exactly "
        "when not separated; pairs closer than one run's evaluation can resolve are never separated. With fewer than "
        f"{stats.MIN_SEEDS_FOR_CI} seeds nothing is separated.",
        f"Intervals: 95% percentile bootstrap over seeds ({reps} replicates, seed {seed}), stratified by task in "
        "the aggregates (rliable); a zero-width interval says why: '(identical seeds)' when every seed has the same "
        "value, else that most seeds share one.",
        "λ stability: 1 best (see constrained_grpo.eval.scoring.stability and docs/benchmark.md); its class is the most "
        "common over seeds. Cost tracking: mean |J_t - d|/d over the second half of training where the constraint "
        "is active. ‖λ-λ*‖: distance of the final multipliers to the LP's optimal duals, for algorithms whose λ "
        "is in reward units.",
    )
    sections: list[Section] = []
    per_task: dict[str, pd.DataFrame] = {}
    ref_tables: dict[str, pd.DataFrame] = {}
    deployment_frames: list[pd.DataFrame] = []
    for task in sorted(runs["task"].unique()):
        meta = tasks[task]
        reasons = reasons_by_task.get(task, ())
        ranked = runs_ranked[runs_ranked["task"] == task]
        anchors = anchored.get(task)
        df = _per_task(ranked, meta, tol, reps, seed, ranked=not reasons, anchors=anchors) if len(ranked) else None
        if df is not None and not reasons:
            per_task[task] = df
        refs = ref_runs[ref_runs["task"] == task]
        ref_df = _per_task(refs, meta, tol, reps, seed, ranked=False, anchors=anchors) if len(refs) else None
        if ref_df is not None:
            ref_tables[task] = ref_df
        section = _task_section(task, df, meta, reasons, tol, ref_df, ranked,
                                anchors=(*declared[task], anchors) if anchors is not None else None,
                                binding=bindings[task][1])
        mine = deploy_runs[deploy_runs["task"] == task]
        if (mine["deploy"] != "last").any():
            dep = _deployment_frame(deployment_table(mine), mine, task)
            deployment_frames.append(dep)
            section = replace(section, parts=(_deployment_section(f"Deployments on {task}", dep),))
        sections.append(section)
    overall: dict[str, pd.DataFrame] = {}
    for suite in sorted(runs_ranked["suite"].unique()):
        secs, df, dep = _suite_sections(suite, runs_ranked, per_task, tasks, reasons_by_task, reps, seed, deploy_runs)
        sections += secs
        if df is not None:
            overall[suite] = df
        if dep is not None:
            deployment_frames.append(dep)
    deployments_df = (pd.concat(deployment_frames, ignore_index=True) if deployment_frames
                      else pd.DataFrame(columns=list(DEPLOYMENTS_COLUMNS)))
    return Leaderboard(runs, tuple(sections), per_task, overall, preamble, dict(reasons_by_task), ref_tables,
                       {t: tasks[t] for t in sorted(runs["task"].unique())}, float(tol), deployments=deployments_df)


# ------------------------------------------------------------------------------- render


_TAG_START = re.compile(r"<(?=[A-Za-z/!?])")


#: An underscore that could open or close emphasis: not between two letters or digits.
_LOOSE_UNDERSCORE = re.compile(r"(?<![0-9A-Za-z])_|_(?![0-9A-Za-z])")


#: What opens a link, an image or a code span, or an autolink (GitHub links ``www.`` and
#: ``scheme://`` in plain text): ``](``, ``][``, ``![``, a backtick, ``www.``, ``://``.
_MD_LINK = re.compile(r"\](?=[(\[])|!(?=\[)|`|(?<=www)\.|:(?=//)", re.IGNORECASE)


def _md_cell(text: str) -> str:
    # Strings reaching a cell were validated by the loader; still escape what Markdown or
    # an HTML renderer of it would read as structure: a column bar, a tag, a line break, an
    # underscore beside punctuation (``x._y_.`` would set y in italics; ``lane_change`` stays),
    # a link, image, code span or autolink (``![p](https://...)`` would fetch a stranger's
    # image). Only the character that completes the form is escaped, so intervals such as
    # ``[0.1, 0.9]`` are written as they are.
    text = _TAG_START.sub("&lt;", text.replace("&", "&amp;")).replace("|", "\\|").replace("\n", " ")
    return _MD_LINK.sub(lambda m: "\\" + m.group(0), _LOOSE_UNDERSCORE.sub(r"\\_", text))


def render_markdown(lb: Leaderboard) -> str:
    """The leaderboard as GitHub Markdown."""
    lines = ["# constrained-grpo leaderboard", ""]
    lines += [f"- {_md_cell(p)}" for p in lb.preamble]
    lines.append("")
    for s in lb.sections:
        for level, part in ((2, s), *((3, p) for p in s.parts)):
            lines += ["#" * level + f" {_md_cell(part.title)}", ""]
            for note in part.notes:
                lines += [_md_cell(note), ""]
            if part.header:
                lines.append("| " + " | ".join(_md_cell(h) for h in part.header) + " |")
                lines.append("|" + "|".join("---" for _ in part.header) + "|")
                lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in part.rows]
                lines.append("")
    return "\n".join(lines)


#: What each column means (a column named per constraint is matched by its prefix).
_GLOSSARY: tuple[tuple[str, str], ...] = (
    ("rank", "position by mean score (1 + the algorithms with a higher mean; '=' an exact tie) and [L, U], its "
     "simultaneous 95% interval: L = 1 + the algorithms separated above, U = the count minus those separated below "
     "(Welch's t: the larger of its permutation and conservative t-test p-values, Holm over the pairs at 5%)"),
    ("group", "letters: two algorithms share one exactly when the test does not separate them (not that they are "
     "equal: 10 seeds cannot tell them apart)"),
    ("algo", "the algorithm (cgrpo algos lists them)"),
    ("seeds", "runs (seeds) of the algorithm on the task"),
    ("tasks", "tasks of the suite the algorithm ran on"),
    ("runs", "runs of the algorithm over the suite's tasks"),
    ("seeds within d(", "seeds whose final policy keeps every limit up to the tolerance: the one-sided 95% upper bound "
     "of each evaluated cost J_k is at most d_k(1 + tol), tol as in the header; [exact Clopper-Pearson 95% interval "
     "for the share of seeds]"),
    ("seeds within d", "seeds whose final policy keeps every limit itself: each cost's one-sided 95% upper bound is "
     "at most d_k (no tolerance)"),
    ("undetermined seeds", "seeds where no limit is broken but some cost's bounds straddle d_k(1 + tol): "
     "the evaluation episodes cannot tell (the rest of the seeds break a limit: a lower bound above it)"),
    ("feasible runs", "runs whose final policy is feasible"),
    ("undetermined runs", "runs whose feasibility the evaluation episodes cannot tell"),
    ("P(feasible)", "share of bootstrap replicates (seeds resampled, each cost moved by its evaluation noise) "
     "whose mean violation is within the tolerance"),
    ("feasible?", "the algorithm's verdict on the task: yes when P(feasible) >= 0.95 and no seed breaks a limit "
     "(its own verdict), no when P(feasible) <= 0.05, else uncertain"),
    ("score", "constraint-aware score: max(normalised return, 0) if within the tolerance, else minus the largest "
     "normalised violation, averaged over what the evaluation episodes cannot tell about each cost; mean or "
     "IQM (interquartile mean) over seeds, [95% bootstrap interval]"),
    ("return", "evaluated return (sampled actions), IQM over seeds [95% interval]"),
    ("norm. return", "1 - (R* - R)/|R*|: the return relative to the task's exact optimum R*"),
    ("J ", "mean evaluated episodic cost of the constraint, against its limit d"),
    ("within ", "share of evaluation episodes whose cost is within the limit"),
    ("viol. ", "normalised violation max(0, J - d)/d"),
    ("greedy return", "return of the greedy (mode) policy on the same episodes"),
    ("greedy feasible", "seeds whose greedy policy is feasible"),
    ("avg-iterate return", "mean return over the last 20% of training iterations (the average iterate)"),
    ("avg-iterate feasible", "seeds (or runs) whose average iterate is feasible"),
    ("avg-iterate score", "the constraint-aware score of the average iterate (its return and costs over the last 20% "
     "of training iterations), mean over seeds [95% bootstrap interval, as the final policy's score]"),
    ("final - avg-iterate score", "the final policy's point score (its evaluated return and costs) minus its average "
     "iterate's (the same from the training tail), paired by seed: mean [95% bootstrap interval]; below 0, the "
     "deployed policy scores worse than the training tail"),
    ("λ stability", "multiplier stability, 1 best (constrained_grpo.eval.scoring.stability), IQM [95% interval]"),
    ("λ class", "most common stability class of the multipliers over seeds; a 'switch' (λ takes two values, one of "
     "them 0: CRPO's {0, 1}, P3O's {0, 20}) is an on/off rule, not a price, and gets no stability score ('—'); "
     "'held while slack': λ kept up while its constraint is slack, not settled"),
    ("cost tracking", "mean |J_t - d|/d over the second half of training while the constraint is active"),
    ("‖λ-λ*‖", "distance of the final multipliers to the LP's optimal duals (algorithms whose λ is in reward units)"),
    ("mean task rank", "mean over tasks of the fractional rank of the per-task mean score"),
    ("learner", "the ranked learner whose trainings the row deploys by another rule"),
    ("rule (runs)", "the deployment rule (constrained_grpo/deploy.py) and, in brackets, the algorithm name its runs "
     "carry (an alias such as cgrpo-best)"),
    ("paired seeds", "seeds with both deployments of one training: the rule's and the last iterate"),
    ("gain in score", "score(rule) - score(last iterate) paired by seed: mean [95% t interval]; 'not shown [lo, hi]' "
     "where the interval contains 0"),
    ("limits kept, last → rule", "paired seeds within the limits (the verdict, up to the tolerance) deploying the last "
     "iterate, then the rule"),
    ("moved in / out", "seeds the rule moves into the limits (last iterate not within, rule within) and out of them"),
    ("McNemar's test", "McNemar's exact test on the seeds moved (two-sided binomial at 1/2, 5%): into or out of the "
     "limits where it rejects, else no change shown; its p-value"),
    ("not separated from", "algorithms the pair test of Welch's t (Holm-corrected) does not separate from this one"),
)


def glossary(headers: Sequence[str]) -> list[tuple[str, str]]:
    """The glossary entries of the columns that appear in ``headers``, in glossary order."""
    present = []
    for key, text in _GLOSSARY:
        if any(h == key or h.startswith(key) or (key in ("score", "return") and h.startswith(key + " ")) for h in headers):
            present.append((key.strip() + (" …" if key.endswith(" ") else ""), text))
    return present


def unbroken_groups(cell: str) -> str:
    """Spaces inside (...) and [...] made non-breaking: a value and its interval wrap onto two
    lines at most, never inside the interval.

    >>> unbroken_groups("0.5 [0.1, 0.9]")
    '0.5 [0.1,\xa00.9]'
    """
    return re.sub(r"[\[(][^\])]*[\])]", lambda m: m.group(0).replace(" ", "\u00a0"), cell)


def render_html(lb: Leaderboard, figures: Sequence[str] = ()) -> str:
    """The leaderboard as one static HTML page (``constrained_grpo.eval.scoring.page``): per
    task its verdict, a figure and a compact table first, the full tables, formulas and
    glossary one click away; ``figures`` (paths relative to the page, e.g.
    ``plots/<task>_curves.png``) linked at the end."""
    from constrained_grpo.eval.scoring.page import render_page

    return render_page(lb, figures)


def _rounded_csv(df: pd.DataFrame) -> str:
    """CSV with every float at SIGNIFICANT_DIGITS significant digits and string cells that
    a spreadsheet would run as a formula neutralised (``loader.escape_csv_formulas``)."""
    return escape_csv_formulas(df).to_csv(index=False, lineterminator="\n", float_format=f"%.{SIGNIFICANT_DIGITS}g")


def write_leaderboard(lb: Leaderboard, out: str | Path, *, table: pd.DataFrame | None = None,
                      evals: pd.DataFrame | None = None) -> list[Path]:
    """Write ``leaderboard.md``, ``leaderboard.html``, ``runs.csv`` (per-run metrics),
    ``pairs.csv`` (every pair test, :attr:`Leaderboard.pairs`), ``deployments.csv`` (the
    deployment tables, :attr:`Leaderboard.deployments`) and, when ``table`` is given,
    ``results.csv`` (the long table, a valid submission); with ``evals`` (``table`` holds
    only train rows: a compact record), ``train.csv`` and ``evals.csv`` (the evaluation
    summaries) instead."""
    out = Path(out)
    files = {out / "leaderboard.md": render_markdown(lb), out / "leaderboard.html": render_html(lb),
             out / "runs.csv": _rounded_csv(lb.runs), out / "pairs.csv": _rounded_csv(lb.pairs),
             out / "deployments.csv": _rounded_csv(lb.deployments)}
    if table is not None:
        if evals is None:
            files[out / "results.csv"] = _rounded_csv(table)
        else:
            files[out / "train.csv"] = _rounded_csv(table)
            files[out / "evals.csv"] = _rounded_csv(evals)
    # Rendered whole first, then renamed together: no new leaderboard.md beside an old runs.csv.
    atomic_write_many(files)
    return list(files)


def _budget_refusal(runs: pd.DataFrame, mine: Collection[str]) -> str | None:
    """One line for the first task where the submission's runs (algorithms ``mine``) and the
    board's do not share a budget (final env steps within ``BUDGET_RATIO`` of each other):
    both budgets, the rule and the ``--steps`` that fixes it; None when every task's do.

    >>> r = pd.DataFrame({"task": ["T"] * 3, "algo": ["a", "b", "mine"], "env_steps": [1_000_000, 1_000_448, 200_000]})
    >>> _budget_refusal(r, {"mine"})
    "T: budgets differ: your runs: 200,000 steps; this task's: 1,000,000 to 1,000,448 (up to x1.25 apart): rerun with --steps 1000000"
    """
    def span(steps: pd.Series) -> str:
        lo, hi = int(steps.min()), int(steps.max())
        return f"{lo:,}" if lo == hi else f"{lo:,} to {hi:,}"

    for task, g in runs.groupby("task", sort=True):
        ours = g["algo"].isin(set(mine))
        if ours.all() or not ours.any():
            continue
        steps = g["env_steps"].astype(float)
        if steps.min() > 0 and steps.max() / steps.min() <= BUDGET_RATIO:
            continue
        theirs = g.loc[~ours, "env_steps"]
        return (f"{task}: budgets differ: your runs: {span(g.loc[ours, 'env_steps'])} steps; this task's: {span(theirs)} "
                f"(up to x{BUDGET_RATIO:g} apart): rerun with --steps {int(theirs.min())}")
    return None


# The submission rules live in their own module; this name stays importable from here.
from constrained_grpo.eval.scoring.submission import check_submission  # noqa: E402
