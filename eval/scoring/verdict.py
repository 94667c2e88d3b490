"""The per-run feasibility verdict: exact one-sided bounds on each evaluated cost, and the
episodes a verdict needs.

A run's final policy is evaluated on n episodes; ``J_k`` is the mean episodic cost of
constraint k, ``d_k`` its limit, ``c_k = c(d_k)`` its scale (d, or 1 when d = 0) and
``t_k = d_k + tol c_k`` the tolerated level. Each cost gets a one-sided lower bound ``L_k``
and upper bound ``U_k``:

* indicator constraints (cost 1 at most once per episode, so ``J_k`` is a probability):
  Clopper-Pearson's exact binomial bounds on the x violating episodes of n,
  ``U = Beta^{-1}(1 - a; x + 1, n - x)`` (1 when x = n) and ``L = Beta^{-1}(a; x, n - x + 1)``
  (0 when x = 0): 0 events in 50 give U = 0.058 at a = 0.05, never a zero-width interval;
* other costs: Student's t, ``J -/+ t_{1-a, n-1} s' / sqrt(n)`` with ``s' = max(s, c / sqrt(n))``:
  a sample with no spread is treated as if one episode of n had been off by the limit's
  scale, so a zero variance never certifies by itself.

The verdict (:func:`cost_verdict`, :func:`run_verdict`):

* **within** when every ``U_k <= t_k`` with ``a = alpha``. This is an intersection-union test:
  if some ``J_k > t_k``, the chance of calling the run within is at most ``alpha`` (0.05),
  with no correction for K;
* **breaks** when some ``L_k > t_k`` with ``a = alpha / K`` (Bonferroni over the K
  constraints): if every ``J_k <= t_k``, the chance of calling the run a violator is at most
  ``alpha``;
* **undetermined** otherwise: the episodes cannot tell.

For indicator costs both error bounds are exact (Clopper-Pearson is conservative); the t
bound is approximate for small n and skewed costs. The power to certify a policy sitting
exactly at its limit (``J = d``) is :func:`certify_power` (an exact binomial sum for an
indicator); :func:`episodes_to_certify` is the smallest n that reaches a given power, the
evaluation size a task's limits call for (docs/benchmark.md, section 3).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

from constrained_grpo.eval.scoring.stability import limit_scale

__all__ = [
    "ALPHA",
    "CostStats",
    "EvalSizeError",
    "TOL",
    "certifiable_minimum",
    "check_eval_size",
    "plan_episodes",
    "SCORE_GRID",
    "VERDICTS",
    "certify_power",
    "cost_quantiles",
    "cost_bounds",
    "cost_stats",
    "cost_verdict",
    "episodes_to_certify",
    "episodes_to_decide",
    "run_episodes_to_decide",
    "run_verdict",
]

#: Size of each one-sided test: within (per constraint, intersection-union) and breaks (over all K).
ALPHA = 0.05
#: The relative tolerance the evaluation is planned for (the leaderboard's default ``--tol``).
TOL = 0.1
#: A constraint's verdict: its cost is within the tolerated level, over it, or the data cannot tell.
VERDICTS: tuple[str, ...] = ("within", "over", "undetermined")
#: Points of the quantile grid over which the expected score averages (metrics.expected_score).
SCORE_GRID = 1024


# The quantiles below depend only on counts and grid sizes, which repeat across a board's
# runs: each is computed once (the same scipy call, so the same value on every use).
@functools.lru_cache(maxsize=4096)
def _beta_ppf(q: float, a: float, b: float) -> float:
    return float(sps.beta.ppf(q, a, b))


@functools.lru_cache(maxsize=4096)
def _t_ppf(q: float, df: int) -> float:
    return float(sps.t.ppf(q, df))


@functools.lru_cache(maxsize=1024)
def _beta_grid(points: int, a: float, b: float) -> np.ndarray:
    grid = sps.beta.ppf((np.arange(points) + 0.5) / points, a, b)
    grid.setflags(write=False)
    return grid


@functools.lru_cache(maxsize=8)
def _normal_grid(points: int) -> np.ndarray:
    grid = sps.norm.ppf((np.arange(points) + 0.5) / points)
    grid.setflags(write=False)
    return grid


@dataclass(frozen=True)
class CostStats:
    """All that the verdict rule reads of one cost's n evaluation episodes x_1..x_n.

    ``mean`` = fsum(x) / n and ``ss`` = fsum((x_i - mean)^2), both summed exactly (the same
    bits in any episode order, on any machine); ``binary``: every x_i is 0 or 1, ``events``
    the number of nonzero x_i; ``finite``: no x_i is NaN or infinite. A compact record keeps
    these instead of the episodes, and every bound and quantile below is a function of them.
    """

    n: int
    mean: float
    ss: float
    binary: bool
    events: int
    finite: bool = True

    @property
    def sd(self) -> float:
        """Sample standard deviation (ddof 1; 0 for one episode)."""
        return math.sqrt(self.ss / (self.n - 1)) if self.n > 1 else 0.0

    @property
    def se(self) -> float:
        """Standard error of the mean, s / sqrt(n); NaN for fewer than two episodes."""
        return math.sqrt(self.ss / (self.n - 1) / self.n) if self.n > 1 else math.nan


def cost_stats(costs: Sequence[float] | np.ndarray) -> CostStats:
    """:class:`CostStats` of the episodes ``costs``."""
    x = np.asarray(costs, dtype=float).ravel()
    n = x.size
    finite = bool(np.isfinite(x).all())
    if n == 0 or not finite:
        return CostStats(n, math.nan, math.nan, False, 0, finite)
    mean = math.fsum(x.tolist()) / n
    ss = math.fsum(((x - mean) ** 2).tolist())
    binary = bool(np.all((x == 0.0) | (x == 1.0)))
    return CostStats(n, mean, ss, binary, int(np.count_nonzero(x)), True)


def _as_stats(costs: Sequence[float] | np.ndarray | CostStats) -> CostStats:
    return costs if isinstance(costs, CostStats) else cost_stats(costs)


def _mean_and_floored_sd(s: CostStats, limit: float) -> tuple[float, float]:
    """Exact mean and sample sd (ddof 1; 0 for one episode), the sd floored at c(d)/sqrt(n)."""
    return s.mean, max(s.sd, limit_scale(limit) / math.sqrt(s.n))


def _tolerated(limit: float, tol: float) -> float:
    """t = d + tol c(d): the level a cost is judged against."""
    return limit + tol * limit_scale(limit)


def cost_bounds(
    costs: Sequence[float] | np.ndarray | CostStats, limit: float, indicator: bool, *, alpha_lower: float, alpha_upper: float
) -> tuple[float, float]:
    """One-sided bounds ``(L, U)`` on the mean episodic cost, ``P(J < L) <= alpha_lower`` and
    ``P(J > U) <= alpha_upper`` (module docstring); NaN for fewer than two episodes.

    An indicator constraint whose episodes are all 0 or 1 gets Clopper-Pearson's exact
    bounds; any other cost Student's t with the standard deviation floored at ``c(d)/sqrt(n)``.
    ``costs``: the episodes' costs or their :class:`CostStats`.
    """
    s = _as_stats(costs)
    n = s.n
    if n < 2 or not s.finite:
        return math.nan, math.nan
    if indicator and s.binary:
        events = s.events
        lower = 0.0 if events == 0 else _beta_ppf(alpha_lower, events, n - events + 1)
        upper = 1.0 if events == n else _beta_ppf(1.0 - alpha_upper, events + 1, n - events)
        return lower, upper
    mean, sd = _mean_and_floored_sd(s, limit)
    half = sd / math.sqrt(n)
    return (mean - _t_ppf(1.0 - alpha_lower, n - 1) * half,
            mean + _t_ppf(1.0 - alpha_upper, n - 1) * half)


def cost_verdict(lower: float, upper: float, limit: float, tol: float) -> str:
    """``"within"`` when ``U <= d + tol c(d)``, ``"over"`` when ``L > d + tol c(d)``, else
    ``"undetermined"`` (also when a bound is unknown)."""
    level = _tolerated(limit, tol)
    if math.isfinite(upper) and upper <= level:
        return "within"
    if math.isfinite(lower) and lower > level:
        return "over"
    return "undetermined"


def run_verdict(
    costs: Sequence[np.ndarray | CostStats], limits: Sequence[float], indicators: Sequence[bool], tol: float, alpha: float = ALPHA
) -> tuple[list[tuple[float, float]], list[str]]:
    """Bounds and verdicts of a run's K constraints: upper bounds at ``alpha`` each (a run is
    within only if all are), lower bounds at ``alpha / K`` (a run breaks if any is over)."""
    k = max(1, len(limits))
    bounds = [
        cost_bounds(c, d, ind, alpha_lower=alpha / k, alpha_upper=alpha)
        for c, d, ind in zip(costs, limits, indicators)
    ]
    return bounds, [cost_verdict(lo, hi, d, tol) for (lo, hi), d in zip(bounds, limits)]


def _certifiable_events(n: np.ndarray | int, limit: float, tol: float, alpha: float) -> np.ndarray:
    """The largest event count x of n episodes whose Clopper-Pearson upper bound is within
    ``t = d + tol c(d)`` (-1 when not even 0 events is). By the bound's duality with the
    binomial tail, ``U(x) <= t`` exactly when ``P(Bin(n, t) <= x) <= alpha``."""
    level = _tolerated(limit, tol)
    n = np.asarray(n)
    q = sps.binom.ppf(alpha, n, level)  # the smallest x with P(Bin(n, t) <= x) >= alpha
    return np.where(sps.binom.cdf(q, n, level) > alpha, q - 1, q).astype(np.int64)


def certify_power(limit: float, tol: float, n: int, *, rate: float | None = None, alpha: float = ALPHA) -> float:
    """P(an indicator constraint is called within | n episodes, true rate ``rate``): the
    exact binomial probability of at most the certifiable number of events. ``rate``
    defaults to the limit itself (a policy sitting at its limit, as a constrained optimum does);
    at ``rate = d + tol c(d)`` it is the test's type I error, at most ``alpha``."""
    p = limit if rate is None else rate
    x = int(_certifiable_events(n, limit, tol, alpha))
    return 0.0 if x < 0 else float(sps.binom.cdf(x, n, p))


def episodes_to_certify(
    limit: float, tol: float, *, power: float = 0.8, alpha: float = ALPHA, cap: int = 1_000_000
) -> int:
    """The fewest evaluation episodes n with which a policy at its indicator limit is called
    within with probability ``power`` (80%: 5,842 at d = 0.1, tol = 0.1; 2,577 at d = 0.2;
    12,382 at d = 0.05). Event counts are whole, so the power is a sawtooth in n: a few
    larger n fall back just under ``power`` before it climbs further."""
    if not 0.0 < limit < 1.0:
        raise ValueError(f"an indicator limit is a probability in (0, 1), got {limit}")
    start = 2
    while start <= cap:
        n = np.arange(start, min(cap, 2 * start) + 1)
        x = _certifiable_events(n, limit, tol, alpha)
        reach = np.flatnonzero((x >= 0) & (sps.binom.cdf(np.maximum(x, 0), n, limit) >= power))
        if reach.size:
            return int(n[reach[0]])
        start = 2 * start + 1
    raise ValueError(f"more than {cap} episodes are needed to certify d = {limit} with tol = {tol}")


def cost_quantiles(costs: Sequence[float] | np.ndarray | CostStats, limit: float, indicator: bool,
                   points: int = SCORE_GRID) -> np.ndarray:
    """What the episodes say about the true mean cost J, as ``points`` equally likely values:
    the quantiles at ``(m + 1/2) / points`` of Jeffreys' posterior Beta(x + 1/2, n - x + 1/2)
    for an indicator (x violating episodes of n; it has width at x = 0 too), else of the normal
    N(mean, s'^2 / n) with ``s'`` floored as in :func:`cost_bounds`. A fixed grid, not draws,
    so the result is the same on every machine. ``costs``: the episodes' or their :class:`CostStats`."""
    s = _as_stats(costs)
    n = s.n
    if n == 0 or not s.finite:
        return np.full(points, math.nan)
    if indicator and s.binary:
        return _beta_grid(points, s.events + 0.5, n - s.events + 0.5).copy()
    mean, sd = _mean_and_floored_sd(s, limit)
    return mean + _normal_grid(points) * sd / math.sqrt(n)


class EvalSizeError(ValueError):
    """An evaluation too small for the verdict rule (a one-line message naming the minimum)."""


def certifiable_minimum(limit: float, tol: float = TOL, alpha: float = ALPHA) -> int:
    """The fewest episodes with which an indicator limit can be certified at all: with n
    episodes and no event the exact upper bound is ``1 - alpha^(1/n)``, at most the tolerated
    ``t = d + tol c(d)`` only when ``n >= ln(alpha) / ln(1 - t)`` (26 at d = 0.1, 53 at 0.05)."""
    level = _tolerated(limit, tol)
    if level >= 1.0:
        return 2
    n = max(2, math.ceil(math.log(alpha) / math.log1p(-level)))
    return n if _certifiable_events(n, limit, tol, alpha) >= 0 else n + 1


def check_eval_size(episodes: int, constraints: Sequence[object], what: str, tol: float = TOL, alpha: float = ALPHA) -> None:
    """Raise :class:`EvalSizeError` when ``episodes`` cannot certify some indicator limit
    (fewer than :func:`certifiable_minimum`); ``what`` names the setting in the message."""
    needs = [(certifiable_minimum(c.limit, tol, alpha), c) for c in constraints if getattr(c, "indicator", False)]
    if not needs:
        return
    minimum, worst = max(needs, key=lambda x: x[0])
    if episodes < minimum:
        raise EvalSizeError(
            f"{what} = {episodes} episodes cannot show the {worst.name!r} limit {worst.limit:g} kept (even 0 events give "
            f"an exact 95% bound above {_tolerated(worst.limit, tol):.4g}); use at least {minimum}, or leave the "
            "count to the task's plan"
        )


def _sd_plan(sd: float, limit: float, tol: float, power: float, alpha: float) -> int:
    """n with which the t bound certifies a cost at its limit with ``power`` (normal approximation):
    ``n = ((z_{1-alpha} + z_{power}) s / (tol c(d)))^2``."""
    z = float(sps.norm.ppf(1.0 - alpha) + sps.norm.ppf(power))
    return max(2, math.ceil((z * sd / (tol * limit_scale(limit))) ** 2))


def episodes_to_decide(mean: float, sd: float, limit: float, tol: float, *, alpha: float, power: float = 0.8,
                       indicator: bool = False) -> float:
    """Episodes with which a cost whose true mean and spread are ``mean`` and ``sd`` is
    decided (its one-sided bound at ``alpha`` on the far side of ``t = d + tol c(d)``) with
    probability ``power``: for an indicator below t, by the exact binomial power at that rate
    (:func:`_episodes_to_certify_at`; infinite above 10M); otherwise by the normal approximation
    ``n = ((z_{1-alpha} + z_{power}) s / |J - t|)^2`` with ``s`` floored at ``c(d)/sqrt(n)``
    as :func:`cost_bounds` floors it. Infinite when J sits at t (within 1e-9 c(d), the
    rounding of t itself); NaN for an unknown mean or spread."""
    level = _tolerated(limit, tol)
    gap = abs(mean - level)
    if not (math.isfinite(mean) and math.isfinite(sd)):
        return math.nan
    if gap <= 1e-9 * limit_scale(limit):
        return math.inf
    if indicator and mean < level and 0.0 < limit < 1.0:
        return float(_episodes_to_certify_at(max(mean, 0.0), limit, tol, power, alpha))
    z = float(sps.norm.ppf(1.0 - alpha) + sps.norm.ppf(power))
    # n = (z s / gap)^2 with s = max(sd, c / sqrt(n)): the floor binds when n <= z c / gap.
    return float(max(2, math.ceil((z * sd / gap) ** 2), math.ceil(z * limit_scale(limit) / gap)))


def _episodes_to_certify_at(rate: float, limit: float, tol: float, power: float, alpha: float,
                            cap: int = 10_000_000) -> float:
    """About the fewest n with which a true rate ``rate`` is certified within with probability
    ``power``: a doubling search, then bisection, on the exact binomial power (a few dozen
    evaluations; the power's sawtooth in n can put the answer a few episodes off the very
    fewest, which :func:`episodes_to_certify` finds by scanning). Infinite beyond ``cap``."""
    hi = 2
    while certify_power(limit, tol, hi, rate=rate, alpha=alpha) < power:
        if hi >= cap:
            return math.inf
        hi = min(cap, 2 * hi)
    lo = hi // 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if certify_power(limit, tol, mid, rate=rate, alpha=alpha) >= power:
            hi = mid
        else:
            lo = mid
    return float(hi)


def run_episodes_to_decide(costs: Sequence[tuple[float, float, str]], limits: Sequence[float],
                           indicators: Sequence[bool], tol: float, alpha: float = ALPHA, power: float = 0.8) -> float:
    """Episodes with which an undetermined run would be decided at its observed costs:
    ``costs[k] = (J_k, sd_k, verdict_k)``. A constraint observed above t decides "breaks"
    (lower bound at alpha / K), the fewest such; otherwise every undetermined one must
    decide "within" (at alpha), the most of those."""
    k = max(1, len(limits))
    over, within = [], []
    for (mean, sd, verdict), d, ind in zip(costs, limits, indicators):
        if verdict != "undetermined":
            continue
        if mean > _tolerated(d, tol):
            over.append(episodes_to_decide(mean, sd, d, tol, alpha=alpha / k, power=power, indicator=ind))
        else:
            within.append(episodes_to_decide(mean, sd, d, tol, alpha=alpha, power=power, indicator=ind))
    if over:
        return min(over)
    return max(within) if within else math.nan


def plan_episodes(
    constraints: Sequence[object],
    *,
    power: float,
    cap: int,
    pilot_costs: Sequence[np.ndarray] | None = None,
    tol: float = TOL,
    alpha: float = ALPHA,
) -> int:
    """Evaluation episodes for a run whose constraints are ``constraints``: the largest of,
    per indicator constraint, :func:`episodes_to_certify` at ``power`` and, per other cost,
    the normal-approximation size for the spread its pilot episodes show (``pilot_costs[k]``,
    sd floored as in :func:`cost_bounds`; none given: the cap), at most ``cap``. Raises
    :class:`EvalSizeError` when ``cap`` cannot certify some indicator limit at all."""
    check_eval_size(cap, constraints, "the evaluation cap", tol, alpha)
    sizes = [2]
    for k, c in enumerate(constraints):
        if getattr(c, "indicator", False):
            if 0.0 < c.limit < 1.0:
                try:
                    sizes.append(episodes_to_certify(c.limit, tol, power=power, alpha=alpha, cap=cap))
                except ValueError:  # the cap is short of the plan
                    return cap
            else:
                sizes.append(certifiable_minimum(c.limit, tol, alpha))
        elif pilot_costs is None:
            return cap
        else:
            _, sd = _mean_and_floored_sd(cost_stats(pilot_costs[k]), c.limit)
            sizes.append(_sd_plan(sd, c.limit, tol, power, alpha))
    return min(cap, max(sizes))
