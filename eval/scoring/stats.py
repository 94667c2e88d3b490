"""Aggregate statistics across seeds and tasks, following rliable (Agarwal et al., 2021).

* IQM: the interquartile mean of all runs pooled across tasks,
  ``scipy.stats.trim_mean(x, 0.25)`` (rliable's ``aggregate_iqm``).
* Stratified bootstrap: each replicate resamples, with replacement, the runs of every
  task (stratum) separately, keeping the per-task run counts; the 95% interval is the
  2.5 and 97.5 percentiles of the statistic over replicates (rliable's default
  percentile method). The generator is seeded (``seed=0``), so intervals are
  reproducible, and each algorithm gets its own generator with the same seed, so
  adding an algorithm does not move the others' intervals.
* Probability of improvement P(X > Y): the mean over tasks m of
  P(X_m > Y_m) = (1 / (N M)) sum_i sum_j S(x_i, y_j), S = 1 if x_i > y_j, 1/2 if equal,
  0 otherwise (the Mann-Whitney U statistic over N M), with a stratified bootstrap that
  resamples X's and Y's runs independently within each task (rliable).
* Rank test: :func:`permutation_test` of the difference in mean score between two
  algorithms, the labels permuted within each task (exact over the C(n + m, n) splits of one
  task's runs when there are at most ``PERMUTATION_EXACT_LIMIT``; paired by seed, the 2^n
  within-pair swaps, on request), and :func:`holm`'s step-down adjustment over the pairs of
  a task or suite.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats as sps

__all__ = [
    "BOOTSTRAP_REPS",
    "BOOTSTRAP_SEED",
    "MIN_SEEDS_FOR_CI",
    "aggregate",
    "holm",
    "permutation_test",
    "two_sample_p_values",
    "iqm",
    "probability_of_improvement",
    "probability_of_improvement_ci",
    "stratified_bootstrap",
    "stratified_bootstrap_ci",
]

BOOTSTRAP_REPS = 2000
BOOTSTRAP_SEED = 0
#: Fewest runs per cell for which a percentile-bootstrap interval is printed: the nominal
#: 95% interval of a mean covers the truth about 76% of the time at n = 3 and 91% at n = 5
#: (it is [min, max] at n = 3); below this, no interval and no separation is claimed.
MIN_SEEDS_FOR_CI = 5
#: A permutation test enumerates every relabelling up to this many (C(20, 10) = 184,756: two
#: algorithms of 10 seeds each), else draws ``PERMUTATION_REPS`` at random.
PERMUTATION_EXACT_LIMIT = 2**18
PERMUTATION_REPS = 20_000

Statistic = Callable[..., np.ndarray]


def iqm(x: Sequence[float] | np.ndarray, axis: int | None = None) -> np.ndarray | float:
    """Interquartile mean: the mean of the middle 50% (``trim_mean(x, 0.25)``)."""
    return sps.trim_mean(np.asarray(x, dtype=np.float64), proportiontocut=0.25, axis=axis)


def _mean(x: np.ndarray, axis: int | None = None) -> np.ndarray | float:
    return np.mean(x, axis=axis)


STATISTICS: dict[str, Statistic] = {"mean": _mean, "iqm": iqm}


def _strata(samples: Sequence[Sequence[float] | np.ndarray]) -> list[np.ndarray]:
    strata = [np.asarray(s, dtype=np.float64) for s in samples]
    if not strata or any(s.ndim != 1 or s.size == 0 for s in strata):
        raise ValueError("stratified bootstrap needs one or more non-empty 1-d samples")
    return strata


def stratified_bootstrap(
    samples: Sequence[Sequence[float] | np.ndarray],
    statistic: Statistic,
    *,
    reps: int = BOOTSTRAP_REPS,
    seed: int = BOOTSTRAP_SEED,
) -> np.ndarray:
    """``reps`` replicates of ``statistic(pooled resample, axis=1)``, resampling within each stratum."""
    rng = np.random.default_rng(seed)
    strata = _strata(samples)
    resampled = [s[rng.integers(0, s.size, size=(reps, s.size))] for s in strata]
    return np.asarray(statistic(np.concatenate(resampled, axis=1), axis=1), dtype=np.float64)


def stratified_bootstrap_ci(
    samples: Sequence[Sequence[float] | np.ndarray],
    statistic: Statistic,
    *,
    reps: int = BOOTSTRAP_REPS,
    seed: int = BOOTSTRAP_SEED,
    level: float = 0.95,
) -> tuple[float, float, float]:
    """(point estimate on the pooled sample, lower, upper) of a percentile interval."""
    strata = _strata(samples)
    point = float(statistic(np.concatenate(strata)))
    boots = stratified_bootstrap(strata, statistic, reps=reps, seed=seed)
    alpha = (1.0 - level) / 2.0
    lo, hi = np.percentile(boots, [100 * alpha, 100 * (1 - alpha)])
    return point, float(lo), float(hi)


def aggregate(
    df: pd.DataFrame,
    value: str,
    *,
    by: str = "algo",
    stratum: str = "task",
    reps: int = BOOTSTRAP_REPS,
    seed: int = BOOTSTRAP_SEED,
    level: float = 0.95,
) -> pd.DataFrame:
    """Mean and IQM of ``value`` per ``by`` group, with stratified-bootstrap intervals.

    Rows with NaN ``value`` are left out of the statistic, and counted in ``n_nan`` so
    that nothing disappears unseen. Columns: ``by, n, n_nan, n_strata, mean, mean_lo,
    mean_hi, iqm, iqm_lo, iqm_hi``.
    """
    out = []
    for key, group in df.groupby(by, sort=True):
        ok = group[group[value].notna()]
        row: dict[str, object] = {by: key, "n": len(ok), "n_nan": len(group) - len(ok), "n_strata": ok[stratum].nunique()}
        for name, fn in STATISTICS.items():
            if ok.empty:
                row[name] = row[f"{name}_lo"] = row[f"{name}_hi"] = np.nan
                continue
            samples = [g[value].to_numpy(dtype=float) for _, g in ok.groupby(stratum, sort=True)]
            point, lo, hi = stratified_bootstrap_ci(samples, fn, reps=reps, seed=seed, level=level)
            row[name], row[f"{name}_lo"], row[f"{name}_hi"] = point, lo, hi
        out.append(row)
    return pd.DataFrame(out)


def _pairwise_win(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """mean_{i,j} S(x_i, y_j) along the last two axes of broadcast (..., n, 1) vs (..., 1, m)."""
    diff = x[..., :, None] - y[..., None, :]
    return (np.sign(diff) * 0.5 + 0.5).mean(axis=(-2, -1))


def probability_of_improvement(
    x_by_task: Mapping[str, Sequence[float] | np.ndarray], y_by_task: Mapping[str, Sequence[float] | np.ndarray]
) -> float:
    """P(X > Y) averaged over the tasks both have (module docstring)."""
    tasks = sorted(set(x_by_task) & set(y_by_task))
    if not tasks:
        return float("nan")
    per_task = [
        float(_pairwise_win(np.asarray(x_by_task[t], dtype=float), np.asarray(y_by_task[t], dtype=float)))
        for t in tasks
    ]
    return float(np.mean(per_task))


def probability_of_improvement_ci(
    x_by_task: Mapping[str, Sequence[float] | np.ndarray],
    y_by_task: Mapping[str, Sequence[float] | np.ndarray],
    *,
    reps: int = BOOTSTRAP_REPS,
    seed: int = BOOTSTRAP_SEED,
    level: float = 0.95,
) -> tuple[float, float, float]:
    """P(X > Y) with a percentile interval from a stratified bootstrap of both algorithms' runs."""
    tasks = sorted(set(x_by_task) & set(y_by_task))
    if not tasks:
        return float("nan"), float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    boots = np.zeros(reps)
    for t in tasks:
        x = np.asarray(x_by_task[t], dtype=float)
        y = np.asarray(y_by_task[t], dtype=float)
        xs = x[rng.integers(0, x.size, size=(reps, x.size))]
        ys = y[rng.integers(0, y.size, size=(reps, y.size))]
        boots += _pairwise_win(xs, ys)
    boots /= len(tasks)
    alpha = (1.0 - level) / 2.0
    lo, hi = np.percentile(boots, [100 * alpha, 100 * (1 - alpha)])
    return probability_of_improvement(x_by_task, y_by_task), float(lo), float(hi)


def _pooled_statistic(stacks: np.ndarray, statistic: Statistic) -> np.ndarray:
    return np.asarray(statistic(stacks, axis=-1), dtype=np.float64)


@functools.lru_cache(maxsize=16)
def _splits(n: int, m: int, reps: int, seed: int, enumerate_all: bool = True) -> tuple[np.ndarray, bool]:
    """Rows of 0/1 (float64) marking which of ``n + m`` pooled runs a relabelling gives to x:
    every one of the C(n + m, n) splits when ``enumerate_all`` and there are at most
    ``PERMUTATION_EXACT_LIMIT`` (exact), else ``reps`` uniformly random splits from a
    generator seeded with ``seed`` (several tasks: independent draws per task, so that row
    i of every task together is one uniform relabelling within tasks)."""
    total = math.comb(n + m, n)
    if enumerate_all and total <= PERMUTATION_EXACT_LIMIT:
        chosen = np.array(list(itertools.combinations(range(n + m), n)), dtype=np.intp).reshape(total, n)
        exact = True
    else:
        chosen = np.argsort(np.random.default_rng(seed).random((reps, n + m)), axis=1)[:, :n]
        exact = False
    rows = np.zeros((chosen.shape[0], n + m))
    rows[np.arange(chosen.shape[0])[:, None], chosen] = 1.0
    rows.setflags(write=False)
    return rows, exact


def _integer_valued(values: Sequence[np.ndarray], factor: int) -> list[np.ndarray]:
    """``values`` rounded onto a grid of 2^-k, k as large as keeps every sum of up to
    ``factor`` of them, times ``factor``, below 2^52: such sums are integers in float64 and
    exact in any summation order (a BLAS product gives the same bits on every machine)."""
    top = max(float(np.max(np.abs(v))) if v.size else 0.0 for v in values)
    k = 52 - math.ceil(math.log2(max(top, 2.0**-30) * factor * factor + 1.0))
    return [np.round(np.ldexp(v, k)) for v in values]


def permutation_test(
    x_by_task: Mapping[str, Sequence[float] | np.ndarray],
    y_by_task: Mapping[str, Sequence[float] | np.ndarray],
    statistic: Statistic = _mean,
    *,
    paired: bool = True,
    reps: int = PERMUTATION_REPS,
    seed: int = BOOTSTRAP_SEED,
) -> tuple[float, float]:
    """``(T, p)``: ``T = statistic(x pooled over tasks) - statistic(y pooled)``, and the
    two-sided p-value of a permutation test of "x and y are exchangeable".

    ``paired``: run i of x and of y on a task share seed i (and the evaluation episodes), so
    the relabellings swap x_i and y_i within each pair: with n pairs in all, the 2^n swaps
    are enumerated when ``2^n <= PERMUTATION_EXACT_LIMIT`` (an exact test: its size is at
    most the nominal level, whatever the scores' distribution), otherwise ``reps`` are drawn
    (``p = (1 + #{|T*| >= |T|}) / (reps + 1)``, also of at most nominal size). The smallest
    p-value of n pairs is 2/2^n (1/512 at 10 seeds).

    Unpaired, the labels are permuted within each task (the runs of one algorithm on a task
    are exchangeable with the other's under the null): with one task the C(n + m, n) splits
    are enumerated when at most ``PERMUTATION_EXACT_LIMIT`` (smallest p 2/C(20, 10) =
    1.1e-5 at 10 seeds each), otherwise ``reps`` splits per task are drawn. The statistic
    is then the difference in means, computed from integer-valued sums
    (:func:`_integer_valued`), so p does not depend on the machine.

    The statistic is the one the table ranks by (the mean, by default), so a verdict about
    a pair is a verdict about the numbers printed beside it. A trimmed statistic such as the
    IQM is a poor choice here: swapping as many pairs as it trims leaves it unchanged, so at
    10 seeds its paired p-value can never fall below 112/1024.
    """
    tasks = sorted(set(x_by_task) & set(y_by_task))
    if not tasks:
        return float("nan"), float("nan")
    xs = [np.asarray(x_by_task[t], dtype=np.float64) for t in tasks]
    ys = [np.asarray(y_by_task[t], dtype=np.float64) for t in tasks]
    x, y = np.concatenate(xs), np.concatenate(ys)
    observed = float(_pooled_statistic(x, statistic) - _pooled_statistic(y, statistic))
    if not paired:
        if statistic is not _mean:
            raise ValueError("the unpaired permutation test is of the difference in means (statistic=_mean)")
        return observed, _two_sample_p(xs, ys, reps, seed)
    rng = np.random.default_rng(seed)
    if x.size != y.size:
        raise ValueError(f"paired samples differ in size ({x.size} vs {y.size})")
    n = x.size
    if 2**n <= PERMUTATION_EXACT_LIMIT:
        swap = ((np.arange(2**n)[:, None] >> np.arange(n)[None, :]) & 1).astype(bool)
        exact = True
    else:
        swap = rng.integers(0, 2, size=(reps, n)).astype(bool)
        exact = False
    xp, yp = np.where(swap, y, x), np.where(swap, x, y)
    null = _pooled_statistic(xp, statistic) - _pooled_statistic(yp, statistic)
    # Relabellings that give the observed |T| up to rounding count as extreme (ties are not
    # evidence), so equal samples get p = 1.
    extreme = np.abs(null) >= abs(observed) - 1e-9 * max(1.0, abs(observed))
    count = int(np.count_nonzero(extreme))
    p = count / null.size if exact else (1 + count) / (null.size + 1)
    return observed, float(min(1.0, p))


def _two_sample_p(xs: Sequence[np.ndarray], ys: Sequence[np.ndarray], reps: int, seed: int) -> float:
    """p of the unpaired test (labels permuted within each task) of the difference in means."""
    return two_sample_p_values([(xs, ys)], reps=reps, seed=seed)[0]


def two_sample_p_values(
    pairs: Sequence[tuple[Sequence[np.ndarray], Sequence[np.ndarray]]], *, reps: int = PERMUTATION_REPS,
    seed: int = BOOTSTRAP_SEED, chunk: int = 32,
) -> list[float]:
    """p of the unpaired permutation test of the difference in means for each ``(xs, ys)``
    pair (per task, the runs of x and of y), as :func:`permutation_test` with ``paired=False``;
    pairs of the same sizes share one matrix product per ``chunk`` of them.

    With N_x and N_y runs in all and S_x the sum of x's runs, T = S_x/N_x - (S - S_x)/N_y, so
    N_x N_y T = (N_x + N_y) S_x - N_x S: the relabellings' values of that integer-valued
    expression are compared with the observed one exactly (ties count as extreme)."""
    out: list[float] = [math.nan] * len(pairs)
    groups: dict[tuple[tuple[int, int], ...], list[int]] = {}
    for i, (xs, ys) in enumerate(pairs):
        groups.setdefault(tuple((len(a), len(b)) for a, b in zip(xs, ys)), []).append(i)
    for sizes, members in groups.items():
        nx, ny = sum(n for n, _ in sizes), sum(m for _, m in sizes)
        exact = len(sizes) == 1 and math.comb(nx + ny, nx) <= PERMUTATION_EXACT_LIMIT
        splits = [_splits(n, m, reps, seed + t, exact)[0] for t, (n, m) in enumerate(sizes)]
        for start in range(0, len(members), chunk):
            part = members[start:start + chunk]
            # Per task, one column per pair: its pooled runs on the pair's own integer grid.
            cols = [_integer_valued([np.concatenate([np.asarray(a, float), np.asarray(b, float)])
                                     for a, b in zip(*pairs[i])], nx + ny) for i in part]
            sums = sum(rows @ np.stack([c[t] for c in cols], axis=1) for t, rows in enumerate(splits))
            total = np.array([sum(z.sum() for z in c) for c in cols])
            observed = np.array([sum(z[:n].sum() for z, (n, _) in zip(c, sizes)) for c in cols])
            null = np.abs((nx + ny) * sums - nx * total)
            count = np.count_nonzero(null >= np.abs((nx + ny) * observed - nx * total), axis=0)
            for i, k in zip(part, count):
                out[i] = float(min(1.0, k / null.shape[0] if exact else (1 + k) / (null.shape[0] + 1)))
    return out


def holm(pvalues: Mapping[Any, float]) -> dict[Any, float]:
    """Holm's step-down adjusted p-values: with m tests and p_(1) <= ... <= p_(m),
    ``adj_(i) = max_{j <= i} min(1, (m - j + 1) p_(j))``; rejecting ``adj <= alpha`` keeps the
    chance of any false separation among the m pairs at most alpha. NaN p-values are left out."""
    items = sorted(((p, str(k), k) for k, p in pvalues.items() if p == p), key=lambda t: (t[0], t[1]))
    m = len(items)
    out: dict[Any, float] = {k: float("nan") for k, p in pvalues.items() if p != p}
    running = 0.0
    for j, (p, _, key) in enumerate(items):
        running = max(running, min(1.0, (m - j) * p))
        out[key] = running
    return out
