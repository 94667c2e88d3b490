"""Ranking as pure functions: per-seed scores in; positions, rank intervals, letters and
p-values out (rliable's style: no loading, no rendering).

The rule (docs/benchmark.md, section 4):

* **Position** by the estimate: 1 + the number of algorithms whose mean score is strictly
  higher (exact ties share a position; means compared at 12 significant digits).
* **Pair test** of "equal mean scores": Welch's t, t = (x̄ - ȳ)/sqrt(s_x²/n + s_y²/m), and the
  pair's p is the larger of two p-values of it:
  (a) its permutation p over the C(n + m, n) relabellings of the two algorithms' runs, exact
  when the two algorithms' runs are exchangeable (the same score distribution, whatever its
  shape) and only asymptotically valid for equal means under unequal spreads (Chung & Romano,
  Ann. Statist. 2013); at 10 seeds a steady algorithm against a much wider one whose ten runs
  fall on one side gets p = 2/C(20, 10) however equal their means; and
  (b) Student's t with min(n, m) - 1 degrees of freedom, conservative for equal means of
  normal scores whatever their variances (Hsu 1938; Mickey & Brown 1966).
  The larger of two p-values is valid wherever either is: P(max <= u) <= u under either model.
  No test of a mean is valid for every distribution at any number of seeds (Bahadur & Savage,
  Ann. Math. Statist. 1956): a skewed algorithm whose ten runs all miss its tail looks tight
  and shifted to every test (docs/benchmark.md, section 5, gives the measured rates).
  The permutation p is exact up to ``EXACT_LIMIT`` relabellings (all C(20, 10) = 184,756 at 10
  seeds each), both computed from integer-valued sums so that p does not depend on summation
  order.
* **Family-wise**: Holm's step-down correction over every tested pair of the task at
  ``ALPHA`` (a valid p-value per pair is all Holm needs: P(any false separation) <= ALPHA).
  b is *separated above* a when mean(b) > mean(a), the Holm-adjusted p <= ALPHA, and the
  difference of means exceeds the pair's ``resolution`` (what one run's evaluation can
  resolve: pairs closer than that are never called different).
* **Rank interval** [L, U] (Mogstad, Romano, Shaikh & Wilhelm, REStud 2024, with all pairs
  Holm-corrected): L = 1 + #(separated above), U = k - #(separated below). All k intervals
  hold together with probability >= 1 - ALPHA, since they are wrong only if some separation is.
* **Letters** (Piepho, JCGS 2004): two algorithms share a letter exactly when not separated.
  The letters are the maximal cliques of the "not separated" graph (every such pair lies in
  one, and a clique holds no separated pair), redundant ones dropped, named in the order of
  their best-placed member.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "ALPHA",
    "EXACT_LIMIT",
    "MIN_SEEDS",
    "Ranking",
    "compact_letters",
    "holm",
    "positions",
    "rank",
    "rank_intervals",
    "stratified_t_p_values",
    "stratified_welch_p_values",
    "welch_p_values",
    "welch_t_p_values",
]

#: Family-wise error rate of a task's separations.
ALPHA = 0.05
#: Fewest seeds per algorithm for a pair to be tested (fewer: never separated).
MIN_SEEDS = 5
#: Relabellings enumerated exactly up to this many (C(20, 10) = 184,756), else drawn.
EXACT_LIMIT = 2**18
#: Random relabellings per pair when there are too many to enumerate (per stage: see
#: :func:`stratified_welch_p_values`).
MC_REPS = 20_000


@dataclass(frozen=True)
class Ranking:
    """A ranking of k algorithms, rows in the order of the estimate (mean score, highest first;
    exact ties listed by name but sharing a position).

    Attributes:
        algos: the algorithms, in row order.
        mean: their mean scores.
        position: 1 + #(strictly higher mean).
        lower, upper: the simultaneous rank interval [L, U].
        letters: the compact letter display (two rows share a letter iff not separated).
        p, p_holm: k x k symmetric matrices of the pair tests' p-values (NaN: not tested).
        p_permutation, p_t: the two p-values ``p`` is the larger of (the permutation test's and
            the conservative t-test's; NaN where the p-values were given).
        separated: k x k, ``separated[i, j]`` when algorithm i is separated above j.
        alpha: the family-wise level.
    """

    algos: tuple[str, ...]
    mean: np.ndarray
    position: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    letters: tuple[str, ...]
    p: np.ndarray
    p_holm: np.ndarray
    separated: np.ndarray
    alpha: float = ALPHA
    p_permutation: np.ndarray | None = None
    p_t: np.ndarray | None = None

    def not_separated(self, algo: str) -> list[str]:
        """The algorithms the tests do not separate from ``algo``, in row order."""
        i = self.algos.index(algo)
        return [b for j, b in enumerate(self.algos) if j != i and not (self.separated[i, j] or self.separated[j, i])]

    def pairs(self) -> list[dict[str, object]]:
        """One record per pair (a < b by name): mean difference, the permutation and t-test
        p-values, p (the larger), Holm-adjusted p, separated."""
        idx = {a: i for i, a in enumerate(self.algos)}
        out = []
        for a, b in itertools.combinations(sorted(self.algos), 2):
            i, j = idx[a], idx[b]
            if not math.isfinite(float(self.p[i, j])):
                continue
            parts = {name: float(m[i, j]) if m is not None else math.nan
                     for name, m in (("p_permutation", self.p_permutation), ("p_t", self.p_t))}
            out.append({"a": a, "b": b, "mean_a_minus_b": float(self.mean[i] - self.mean[j]), **parts, "p": float(self.p[i, j]),
                        "p_holm": float(self.p_holm[i, j]), "separated": bool(self.separated[i, j] or self.separated[j, i])})
        return out


def _round_key(x: float) -> float:
    # Means of equal scores summed along different paths may differ in the last bits.
    return float(f"{x:.12g}") if math.isfinite(x) else x


def positions(means: Sequence[float]) -> np.ndarray:
    """1 + #(strictly higher mean), means compared at 12 significant digits.

    >>> positions([0.5, 0.9, 0.5, 0.1]).tolist()
    [2, 1, 2, 4]
    """
    keys = np.array([_round_key(float(m)) for m in means])
    return np.array([1 + int(np.sum(keys > k)) for k in keys], dtype=int)


def rank_intervals(separated: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """L = 1 + #(separated above), U = k - #(separated below), from ``separated[i, j]`` (i above j).

    >>> s = np.array([[0, 1, 1], [0, 0, 0], [0, 0, 0]], bool)
    >>> [x.tolist() for x in rank_intervals(s)]
    [[1, 2, 2], [1, 3, 3]]
    """
    s = np.asarray(separated, bool)
    k = s.shape[0]
    return 1 + s.sum(axis=0), k - s.sum(axis=1)


def holm(p: Sequence[float]) -> np.ndarray:
    """Holm's step-down adjusted p-values: with p_(1) <= ... <= p_(m),
    adj_(i) = max_{j <= i} min(1, (m - j + 1) p_(j)); NaN entries are left out.

    >>> holm([0.01, 0.04, 0.03, float("nan")]).round(3).tolist()
    [0.03, 0.06, 0.06, nan]
    """
    p = np.asarray(p, float)
    out = np.full(p.shape, np.nan)
    ok = np.flatnonzero(np.isfinite(p))
    order = ok[np.argsort(p[ok], kind="stable")]
    m, running = order.size, 0.0
    for j, i in enumerate(order):
        running = max(running, min(1.0, (m - j) * float(p[i])))
        out[i] = running
    return out


# ----------------------------------------------------------------------- the pair test


@functools.lru_cache(maxsize=8)
def _splits(n: int, m: int) -> np.ndarray:
    """0/1 rows marking which of the n + m pooled runs each relabelling gives to x: all
    C(n + m, n), or, when n = m, the half that gives run 0 to x (the other half are their
    complements, whose |t| is the same)."""
    if n == m:
        chosen = np.array([(0, *c) for c in itertools.combinations(range(1, 2 * n), n - 1)], dtype=np.intp)
    else:
        chosen = np.array(list(itertools.combinations(range(n + m), n)), dtype=np.intp)
    rows = np.zeros((chosen.shape[0], n + m))
    rows[np.arange(chosen.shape[0])[:, None], chosen] = 1.0
    rows.setflags(write=False)
    return rows


def _integer_grid(z: np.ndarray, total: int) -> np.ndarray:
    """``z`` rounded onto a grid 2^-k, scaled to integers of at most 2^26/total in size, so
    that the sums, sums of squares and the products n Q - A² below are exact in float64
    (and so independent of summation order)."""
    top = float(np.max(np.abs(z))) if z.size else 0.0
    k = math.floor(26 - math.log2(total) - math.log2(max(top, 2.0**-30)))
    return np.round(np.ldexp(z, k))


def _welch_t2(a: np.ndarray, q: np.ndarray, tz: np.ndarray, tq: np.ndarray, n: int, m: int) -> np.ndarray:
    """Welch's t² from x's integer sum A and sum of squares Q (totals tz, tq over both):
    t² = (mA - nB)² / (m²(nQ - A²)/(n - 1) + n²(mR - B²)/(m - 1)), B = tz - A, R = tq - Q;
    0 where both samples are constant and equal-meaned, inf where constant and apart."""
    b, r = tz - a, tq - q
    num = (m * a - n * b) ** 2
    den = m * m * (n * q - a * a) / (n - 1) + n * n * (m * r - b * b) / (m - 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        t2 = np.where(den > 0, num / np.where(den > 0, den, 1.0), np.where(num > 0, np.inf, 0.0))
    return t2


def _count_extreme(rows: np.ndarray, z: np.ndarray, tz: np.ndarray, tq: np.ndarray, n: int, m: int,
                   obs: np.ndarray) -> np.ndarray:
    """Per column of ``z``, #{relabellings with t*² >= t²(1 - 1e-12)}, as num* >= c den* with
    c = that threshold (den >= 0; c huge where t² = inf, so only den* = 0 counts), in place."""
    c = np.where(np.isinf(obs), 1e300, obs * (1 - 1e-12))
    a = rows @ z
    q = rows @ (z * z)
    r = tq - q
    b = tz - a
    num = m * a
    num -= n * b
    num *= num
    q *= n
    q -= a * a
    q *= m * m / (n - 1)
    r *= m
    b *= b
    r -= b
    r *= n * n / (m - 1)
    q += r
    with np.errstate(over="ignore"):
        q *= c
    return np.count_nonzero(num >= q, axis=0)


def welch_p_values(pairs: Sequence[tuple[np.ndarray, np.ndarray]], *, chunk: int = 16) -> np.ndarray:
    """Two-sided p of the exact permutation test of Welch's t for each ``(x, y)``:
    p = #{relabellings with t*² >= t²} / #relabellings (the observed one included; ties,
    up to 1e-12 relative, count as extreme, so identical samples get p = 1). Pairs of the
    same sizes share one matrix product per ``chunk``. Raises when a pair has more than
    ``EXACT_LIMIT`` relabellings (use :func:`stratified_welch_p_values`)."""
    out = np.full(len(pairs), np.nan)
    groups: dict[tuple[int, int], list[int]] = {}
    for i, (x, y) in enumerate(pairs):
        n, m = len(x), len(y)
        if min(n, m) < 2:
            continue
        if math.comb(n + m, n) > EXACT_LIMIT:
            raise ValueError(f"{n} and {m} runs: {math.comb(n + m, n):,} relabellings exceed EXACT_LIMIT={EXACT_LIMIT:,}; "
                             "use stratified_welch_p_values (Monte Carlo)")
        groups.setdefault((n, m), []).append(i)
    for (n, m), members in groups.items():
        rows = _splits(n, m)
        for start in range(0, len(members), chunk):
            part = members[start:start + chunk]
            z = np.stack([_integer_grid(np.concatenate([np.asarray(pairs[i][0], float), np.asarray(pairs[i][1], float)]), n + m)
                          for i in part], axis=1)  # (n + m, c)
            tz, tq = z.sum(axis=0), (z * z).sum(axis=0)
            obs = _welch_t2(z[:n].sum(axis=0), (z[:n] ** 2).sum(axis=0), tz, tq, n, m)
            count = _count_extreme(rows, z, tz, tq, n, m, obs)
            out[part] = np.minimum(1.0, count / rows.shape[0])
    return out


def welch_t_p_values(pairs: Sequence[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """Two-sided p of Welch's t for each ``(x, y)``, t = (x̄ - ȳ)/sqrt(s_x²/n + s_y²/m), referred
    to Student's t with min(n, m) - 1 degrees of freedom: p = 2 P(T_{min(n,m)-1} >= |t|).

    With normal scores this bound holds for every ratio of the two variances (Hsu 1938;
    Mickey & Brown, Ann. Math. Statist. 1966: the tail of Welch's t never exceeds that of t
    with the smaller sample's degrees of freedom), where the permutation test of the same t is
    only asymptotically valid. It is :func:`stratified_t_p_values` with one stratum (sums on
    the integer grid: p does not depend on summation order); two constant samples give p = 0
    when apart and 1 when equal. NaN for a pair with fewer than 2 runs on a side."""
    return stratified_t_p_values([([x], [y]) for x, y in pairs])


def _stratified_t2(strata: Sequence[np.ndarray], sizes: Sequence[tuple[int, int]], sel: Sequence[np.ndarray]) -> np.ndarray:
    """The studentised difference of pooled means over strata (tasks), squared, per relabelling
    (rows) and pair (columns): T = (Σ_t S_xt/N_x - Σ_t S_yt/N_y) / sqrt(Σ_t n_t s²_xt/N_x² +
    m_t s²_yt/N_y²). ``strata[t]``: (n_t + m_t, P) pooled runs of stratum t, x's first;
    ``sel[t]``: (R, n_t + m_t) 0/1 rows of which runs go to x."""
    nx, ny = sum(n for n, _ in sizes), sum(m for _, m in sizes)
    diff: np.ndarray | float = 0.0
    var: np.ndarray | float = 0.0
    for z, (n, m), rows in zip(strata, sizes, sel):
        a, q = rows @ z, rows @ (z * z)
        b, r = z.sum(axis=0) - a, (z * z).sum(axis=0) - q
        diff = diff + a / nx - b / ny
        var = var + (q - a * a / n) / (n - 1) * n / nx**2 + (r - b * b / m) / (m - 1) * m / ny**2
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(var > 0, diff**2 / np.where(var > 0, var, 1.0), np.where(diff != 0, np.inf, 0.0))


def stratified_t_p_values(pairs: Sequence[tuple[Sequence[np.ndarray], Sequence[np.ndarray]]]) -> np.ndarray:
    """Two-sided p of the studentised pooled mean difference over strata (:func:`_stratified_t2`)
    referred to Student's t with the smallest of the strata's min(n_t, m_t) - 1 degrees of
    freedom. With normal scores this is conservative for any variances: T² = Z²/D with D a
    weighted mean of independent χ²_ν/ν, smaller in convex order than χ² with the smallest ν
    over its ν, and P(Z² > cD) is convex in D (the argument of Mickey & Brown for two samples).
    One stratum is Welch's t (:func:`welch_t_p_values`)."""
    from scipy.stats import t as student_t

    out = np.full(len(pairs), np.nan)
    for i, (xs, ys) in enumerate(pairs):
        sizes = [(len(x), len(y)) for x, y in zip(xs, ys)]
        if not sizes or min(min(n, m) for n, m in sizes) < 2:
            continue
        pooled = [np.concatenate([np.asarray(x, float), np.asarray(y, float)]) for x, y in zip(xs, ys)]
        z = np.split(_integer_grid(np.concatenate(pooled), max(v.size for v in pooled)), np.cumsum([v.size for v in pooled])[:-1])
        first = [np.concatenate([np.ones(n), np.zeros(m)])[None, :] for n, m in sizes]
        t2 = float(_stratified_t2([v[:, None] for v in z], sizes, first)[0, 0])
        df = min(min(n, m) for n, m in sizes) - 1
        out[i] = 0.0 if math.isinf(t2) else min(1.0, 2.0 * float(student_t.sf(math.sqrt(t2), df)))
    return out


def _random_splits(n: int, m: int, reps: int, rng: np.random.Generator) -> np.ndarray:
    pick = np.argsort(rng.random((reps, n + m)), axis=1)[:, :n]
    rows = np.zeros((reps, n + m))
    rows[np.arange(reps)[:, None], pick] = 1.0
    return rows


def stratified_welch_p_values(
    pairs: Sequence[tuple[Sequence[np.ndarray], Sequence[np.ndarray]]], *, alpha: float = ALPHA,
    reps: int = MC_REPS, seed: int = 0, stages: int = 3, chunk: int = 32, at_least: np.ndarray | None = None,
) -> np.ndarray:
    """p of the unpaired permutation test of the studentised pooled mean difference
    (:func:`_stratified_t2`), labels permuted within each stratum, for each ``(xs, ys)``
    (per stratum, x's runs and y's).

    A pair of one stratum with at most ``EXACT_LIMIT`` relabellings is Welch's t, tested
    exactly (:func:`welch_p_values`). Otherwise Monte Carlo, p = (1 + #{t*² >= t²}) / (R + 1),
    valid for any R; pairs with the same
    strata sizes share the relabellings. So that no Holm decision depends on the generator's
    seed, the draws grow in stages: after each, every pair whose 99.9% Clopper-Pearson
    interval for its exact p could move a Holm decision at ``alpha`` (every p at the low end
    of its interval against every p at the high end: Holm is monotone) gets 8 times as many
    fresh draws, up to ``stages``. ``at_least``: per pair, a p-value the decisions take the
    larger of with this one (the conservative t-test's, as :func:`rank` does), so that the
    stages settle the decisions on the combined p."""
    out = np.full(len(pairs), np.nan)
    count = np.zeros(len(pairs))
    total = np.zeros(len(pairs))
    todo = [i for i, (xs, ys) in enumerate(pairs) if len(xs) and min(min(len(x) for x in xs), min(len(y) for y in ys)) >= 2]
    # One stratum whose relabellings can be enumerated: the statistic is Welch's t, tested exactly.
    exact = [i for i in todo if len(pairs[i][0]) == 1
             and math.comb(len(pairs[i][0][0]) + len(pairs[i][1][0]), len(pairs[i][0][0])) <= EXACT_LIMIT]
    if exact:
        out[exact] = welch_p_values([(np.asarray(pairs[i][0][0], float), np.asarray(pairs[i][1][0], float)) for i in exact])
        todo = [i for i in todo if i not in set(exact)]
    grids: dict[int, list[np.ndarray]] = {}
    for i in todo:
        # One integer grid per pair over its strata: sums exact, so p does not depend on the BLAS.
        pooled = [np.concatenate([np.asarray(x, float), np.asarray(y, float)]) for x, y in zip(*pairs[i])]
        z = _integer_grid(np.concatenate(pooled), max(v.size for v in pooled))
        grids[i] = np.split(z, np.cumsum([v.size for v in pooled])[:-1])
    r = reps
    for stage in range(stages):
        groups: dict[tuple[tuple[int, int], ...], list[int]] = {}
        for i in todo:
            groups.setdefault(tuple((len(x), len(y)) for x, y in zip(*pairs[i])), []).append(i)
        for g, (sizes, members) in enumerate(sorted(groups.items())):
            rng = np.random.default_rng([seed, stage, g])
            sel = [_random_splits(n, m, r, rng) for n, m in sizes]
            first = [np.concatenate([np.ones(n), np.zeros(m)])[None, :] for n, m in sizes]
            for start in range(0, len(members), chunk):
                part = members[start:start + chunk]
                strata = [np.stack([grids[i][t] for i in part], axis=1) for t in range(len(sizes))]
                obs = _stratified_t2(strata, sizes, first)[0]
                t2 = _stratified_t2(strata, sizes, sel)
                count[part] += np.count_nonzero(t2 >= obs * (1 - 1e-12), axis=0)
                total[part] += r
        for i in todo:
            out[i] = (1 + count[i]) / (1 + total[i])
        if stage == stages - 1:
            break
        lo, hi = _cp_band(count, total, 0.001)
        lo, hi = np.where(np.isfinite(out), lo, np.nan), np.where(np.isfinite(out), hi, np.nan)
        lo[exact], hi[exact] = out[exact], out[exact]  # exact p-values have no Monte Carlo band
        if at_least is not None:
            lo, hi = np.fmax(lo, at_least), np.fmax(hi, at_least)
        most, least = holm(lo) <= alpha, holm(hi) <= alpha
        todo = [i for i in todo if most[i] != least[i]]
        if not todo:
            break
        r *= 8
    return out


def _cp_band(k: np.ndarray, n: np.ndarray, level: float) -> tuple[np.ndarray, np.ndarray]:
    """Clopper-Pearson two-sided (1 - level) interval for each k of n."""
    from scipy.stats import beta

    with np.errstate(invalid="ignore", divide="ignore"):
        lo = np.where(k > 0, beta.ppf(level / 2, k, n - k + 1), 0.0)
        hi = np.where(k < n, beta.ppf(1 - level / 2, k + 1, n - k), 1.0)
    return lo, hi


# ---------------------------------------------------------------------------- letters


def compact_letters(separated: np.ndarray) -> list[str]:
    """Per row, its letters: rows i and j share one exactly when neither is separated from the
    other (``separated`` as in :class:`Ranking`, rows in display order).

    >>> s = np.zeros((4, 4), bool); s[0, 2] = s[0, 3] = s[1, 3] = True
    >>> compact_letters(s)
    ['a', 'ab', 'bc', 'c']
    """
    s = np.asarray(separated, bool)
    k = s.shape[0]
    apart = s | s.T
    adj = [{j for j in range(k) if j != i and not apart[i, j]} for i in range(k)]
    cliques: list[frozenset[int]] = []

    def expand(r: set[int], p: set[int], x: set[int]) -> None:  # Bron-Kerbosch with a pivot
        if not p and not x:
            cliques.append(frozenset(r))
            return
        pivot = max(p | x, key=lambda u: (len(adj[u] & p), -u))
        for v in sorted(p - adj[pivot]):
            expand(r | {v}, p & adj[v], x & adj[v])
            p = p - {v}
            x = x | {v}

    expand(set(), set(range(k)), set())
    cliques.sort(key=lambda c: sorted(c))
    # Drop a clique whose members and pairs other cliques already cover (last letters first).
    kept = list(cliques)
    for c in reversed(cliques):
        rest = [d for d in kept if d != c]
        pairs_ok = all(any(i in d and j in d for d in rest) for i, j in itertools.combinations(sorted(c), 2))
        if pairs_ok and all(any(i in d for d in rest) for i in c):
            kept = rest
    names = _letter_names(len(kept))
    sep = "" if all(len(x) == 1 for x in names) else ","
    return [sep.join(names[j] for j, c in enumerate(kept) if i in c) for i in range(k)]


def _letter_names(n: int) -> list[str]:
    base = [chr(c) for c in range(ord("a"), ord("z") + 1)] + [chr(c) for c in range(ord("A"), ord("Z") + 1)]
    return base[:n] if n <= len(base) else [f"g{i + 1}" for i in range(n)]


# ------------------------------------------------------------------------------ rank


def rank(
    scores: Mapping[str, Sequence[float] | np.ndarray] | np.ndarray,
    names: Sequence[str] | None = None,
    *,
    alpha: float = ALPHA,
    resolution: Mapping[tuple[str, str], float] | float = 0.0,
    p_values: Mapping[tuple[str, str], float | tuple[float, float]] | None = None,
) -> Ranking:
    """Rank algorithms from per-seed scores (higher is better).

    ``scores``: per algorithm its runs' scores, or a (runs x algorithms) array with
    ``names`` (NaN: a missing run). Every pair with >= ``MIN_SEEDS`` runs each is tested
    (:func:`welch_p_values`; beyond ``EXACT_LIMIT`` relabellings, one stratum of
    :func:`stratified_welch_p_values`; the larger of that and :func:`welch_t_p_values`; or
    ``p_values`` given per sorted pair, each a p or its (permutation, t) parts);
    Holm over them at ``alpha``; a pair whose mean difference is at most its ``resolution``
    (a number, or per sorted pair) is never separated. See the module docstring."""
    if isinstance(scores, np.ndarray):
        if scores.ndim != 2 or names is None or len(names) != scores.shape[1]:
            raise ValueError(f"scores of shape {scores.shape}: give a (runs, algorithms) array and one name per column")
        data = {str(a): scores[:, j][np.isfinite(scores[:, j])] for j, a in enumerate(names)}
    else:
        data = {str(a): np.asarray(v, float) for a, v in scores.items()}
    if not (0 < alpha < 1):
        raise ValueError(f"alpha={alpha!r}: the family-wise level must be in (0, 1), e.g. 0.05")
    means = {a: float(np.mean(v)) if v.size else math.nan for a, v in data.items()}
    algos = tuple(sorted(data, key=lambda a: (-_round_key(means[a]) if math.isfinite(means[a]) else math.inf, a)))
    k = len(algos)
    mean = np.array([means[a] for a in algos])
    tested = [(i, j) for i, j in itertools.combinations(range(k), 2)
              if min(data[algos[i]].size, data[algos[j]].size) >= MIN_SEEDS]

    def key(i: int, j: int) -> tuple[str, str]:
        return tuple(sorted((algos[i], algos[j])))  # type: ignore[return-value]

    if p_values is not None:
        given = [p_values.get(key(i, j), math.nan) for i, j in tested]
        parts = np.array([v if isinstance(v, tuple) else (math.nan, math.nan) for v in given], float).reshape(-1, 2)
        perm_p, t_p = parts[:, 0], parts[:, 1]
        raw = np.array([max(v) if isinstance(v, tuple) else float(v) for v in given], float)
    else:
        # The larger of the permutation p (exact where the relabellings can be enumerated, else
        # Monte Carlo with seed-stable decisions) and the conservative t-test's.
        pairs = [(data[algos[i]], data[algos[j]]) for i, j in tested]
        t_p = welch_t_p_values(pairs)
        raw = np.full(len(tested), np.nan)
        exact = [t for t, (i, j) in enumerate(tested)
                 if math.comb(data[algos[i]].size + data[algos[j]].size, data[algos[i]].size) <= EXACT_LIMIT]
        drawn = [t for t in range(len(tested)) if t not in set(exact)]
        raw[exact] = welch_p_values([pairs[t] for t in exact])
        if drawn:
            raw[drawn] = stratified_welch_p_values([([pairs[t][0]], [pairs[t][1]]) for t in drawn], alpha=alpha,
                                                   at_least=t_p[drawn])
        perm_p = raw
        raw = np.fmax(perm_p, t_p)
    adj = holm(raw) if len(tested) else np.array([])
    p = np.full((k, k), np.nan)
    q = np.full((k, k), np.nan)
    pp = np.full((k, k), np.nan)
    pt = np.full((k, k), np.nan)
    sep = np.zeros((k, k), bool)
    for (i, j), pij, qij, a, b in zip(tested, raw, adj, perm_p, t_p):
        p[i, j] = p[j, i] = pij
        pp[i, j] = pp[j, i] = a
        pt[i, j] = pt[j, i] = b
        q[i, j] = q[j, i] = qij
        d = _round_key(mean[i]) - _round_key(mean[j])
        res = resolution if isinstance(resolution, (int, float)) else float(resolution.get(key(i, j), 0.0))
        if qij <= alpha and abs(mean[i] - mean[j]) > res and d != 0:
            if d > 0:
                sep[i, j] = True
            else:
                sep[j, i] = True
    lower, upper = rank_intervals(sep)
    return Ranking(algos, mean, positions(mean), lower, upper, tuple(compact_letters(sep)), p, q, sep, alpha, pp, pt)
