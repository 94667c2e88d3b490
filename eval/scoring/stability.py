r"""Multiplier stability, cost tracking and distance to the optimal dual.

Pure functions of one run's series (numpy only). Notation: iterations t = 0..T-1 with
cumulative env steps s_t, multiplier lambda_t, mean episodic cost J_t (NaN for an
iteration that finished no episode) and limit d >= 0. The *second half* is
H = {t : t >= floor(T/2)}, n = |H|; the *end* is the last m = max(1, ceil(0.2 T))
iterations (the window of the training-tail criterion). Sums are exactly rounded
(``math.fsum``), so no result depends on summation order.

Scales. Costs are measured against the limit, e_t = (J_t - d) / c(d) with c(d) = d,
or 1 when d = 0 (the error is then in cost units). The multiplier is measured against

    sigma = max(|mean_{t in H} lambda_t|, lambda_ref),   lambda_ref = 1 by default,

relative to its own level when lambda is large (scale-free), absolute when lambda -> 0,
so that blips of 0.01 around 0 are small rather than infinite. lambda_ref is in the
multiplier's units: reward per unit of cost for the Lagrangian r - lambda c shared by
every constrained agent here (lambda = 1 prices one unit of cost at one unit of reward).
An agent whose multiplier has other units passes its own ``lambda_ref``. Across
algorithms, :func:`cost_tracking` is the comparable figure: it is in units of d.

Multiplier stability (:func:`multiplier_stability`). Over H, with

    U = max_{t <= u in H} (lambda_u - lambda_t)    the largest rise,
    D = max_{t <= u in H} (lambda_t - lambda_u)    the largest fall,
    A = U / (2 sigma)                              the amplitude,
    B = min(U, D) / (2 sigma)                      the reversal amplitude,
    v_H = mean_{t in H} e_t,  v_end = mean_{end} e_t  (finite J_t only; 0 if none),

and, splitting H into its halves H1 and H2 and writing A_end for the largest rise over the
end window divided by 2 sigma, the verdict is the first that applies:

1. "at bound": lambda_max is given and lambda_t >= (1 - 1e-6) lambda_max for at least
   half of H. The projection holds lambda; the multiplier the constraint asks for is
   larger than the algorithm allows.
2. "stuck": v_H > tol and v_end > tol (violated through the second half) while lambda does
   not move, max(U, D) <= 0.01 sigma (``OSC_REL_TOL``, the noise level of ``oscillations``):
   the dual update is not working (a zero or tiny step, a frozen or clipped multiplier). A
   failure, flagged on the leaderboard.
3. "diverging": violated through the second half and B <= tol (lambda moves one way). A
   fixed point of the dual update lambda <- max(0, lambda + eta (J - d)) needs J <= d;
   while the violation lasts, a climbing lambda climbs without bound and a falling one
   leaves the violation in place: neither approaches a fixed point. The test uses the
   mean over H and over the end, not the last value, because where an oscillation of J
   around d stops is a matter of phase.
4. "settled": A <= tol; or lambda converges monotonically: B <= tol (no reversal), the
   rise decelerates (the largest rise over H2 at most 3/4 of that over H1) and the end is
   flat (A_end <= tol). A slow approach to a constant is convergence, not an oscillation.
5. "drifting": B <= tol and A > tol otherwise: lambda keeps rising (not decelerating, or
   still rising at the end) while its constraint holds or is slack. It has not settled, and
   a price that climbs on a slack constraint costs return for nothing.
6. "bounded oscillation": A > tol with reversals (B > tol).

Two more, checked first and last: "switch", a multiplier that takes exactly two values over
training, 0 and c >= tol lambda_ref (CRPO's {0, 1}, P3O's {0, 20}: an on/off rule, not a price
that adapts; blips of 0.01 off 0 are a settled multiplier), has no stability score (NaN); and a "settled" multiplier that ends at or above
tol lambda_ref, not below (1 - tol) times its value at the start of the second half, while its
constraint is slack there (v_H < -tol) is "held while slack" (a decay towards 0 is settled): the fixed point of a slack constraint is lambda = 0, and a price held on
it costs return for nothing. It scores in the lower half, 1 / (2 (1 + A + |v_H| / tol)).

Only rises count in A: lambda >= 0, so a non-increasing lambda converges (a bounded
monotone sequence); a decay to 0 while the constraint holds is convergence to the fixed
point lambda = 0 of a slack constraint. A rise is bounded only by lambda_max and, within
a finite run, cannot be told from divergence; in an oscillation of amplitude a around
m >= lambda_ref the largest rise is 2a, so A = a / m. The score orders the classes, then
the amplitude within a class:

    score = 1/2 + 1 / (2 (1 + A'))                       settled: [1/2 + 1/(2(1+tol)), 1]
                                                         (A' = A, or A_end when converging)
    score = 1/2 + 1 / (2 (1 + A))                        bounded oscillation: (1/2, that)
    score = 1 / (2 (1 + A + max(0, v_H) / tol))        drifting, at bound, diverging, stuck: (0, 1/2]

Ordering rules, in this order: (i) class: every settled multiplier (score >= 0.955 at
tol = 0.1) outranks every bounded oscillation (score > 1/2), which outranks every drifting,
stuck or diverging multiplier and every one at its bound (score <= 1/2); a drifting one
(v_H <= tol) outranks a diverging one with the same rise; (ii) within settled and bounded
oscillation, the smaller amplitude ranks higher; (iii) within the worst class, the smaller
A + max(0, v_H)/tol ranks higher. A flat multiplier is settled (score 1) only while its
constraint holds, and stuck while it is violated.

Descriptive figures (not in the score): ``tv`` = sum_{t, t+1 in H} |lambda_{t+1} -
lambda_t|; ``oscillations``: sign changes between consecutive increments of lambda over H
larger than 0.01 sigma (smaller moves are noise and skipped); ``drift`` = beta
(s_last - s_first) / sigma over H, beta the least-squares slope of lambda against s;
``overshoot`` = max(0, max_t lambda_t - lambda_f) / max(|lambda_f|, lambda_ref) and
``settling`` = s_{t*} / s_{T-1}, t* the first t after which |lambda_u - lambda_f| <= tol
max(|lambda_f|, lambda_ref) for every u >= t, over the whole run, with lambda_f the mean
of the last max(1, ceil(0.1 T)) values.

Cost tracking (:func:`cost_tracking`). The constraint is *active* over H when
v_H >= -tol (J on average near or above d) or, given lambda, when
mean_H lambda > tol max(max_t lambda_t, lambda_ref) (lambda still holds the cost down).
Then ``mean_abs_rel_error`` = mean_{t in H} |e_t| (NaN when inactive: a slack constraint
has no target to track); ``overshoot`` = max_{t in H} max(0, e_t) in either case.

Distance to the optimal dual (:func:`dual_distance`): ||lambda_f - lambda*||_2 over the
constraints (lambda_f a run's final multipliers, e.g. the mean of the last 10% of
values; lambda* the optimal dual of the task's LP), in the multiplier's units; meaningful only for an algorithm whose lambda is
in the task's reward units. :func:`relative_dual_distance` divides it by
max(||lambda*||_2, lambda_ref), which stays finite when every lambda*_k = 0.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "BOUND_RTOL",
    "BOUND_SHARE",
    "END_FRAC",
    "FINAL_FRAC",
    "LAMBDA_REF",
    "OSC_REL_TOL",
    "VERDICTS",
    "StabilityResult",
    "Tracking",
    "cost_tracking",
    "dual_distance",
    "largest_fall",
    "largest_rise",
    "limit_scale",
    "multiplier_stability",
    "relative_dual_distance",
]

#: Floor of the multiplier scale sigma, in the multiplier's units (reward per unit of cost).
LAMBDA_REF = 1.0
#: Increments of lambda below OSC_REL_TOL * sigma are noise for ``oscillations``.
OSC_REL_TOL = 0.01
#: The end window of the violation test: the last max(1, ceil(END_FRAC T)) iterations.
END_FRAC = 0.2
#: lambda_f is the mean of the last max(1, ceil(FINAL_FRAC T)) values.
FINAL_FRAC = 0.1
#: "at bound" when lambda sits at its bound for at least this share of the second half.
BOUND_SHARE = 0.5
#: lambda_t counts as at the bound when lambda_t >= (1 - BOUND_RTOL) lambda_max.
BOUND_RTOL = 1e-6
#: The verdicts, best first (the last four share the lower half of the score).
VERDICTS = ("settled", "bounded oscillation", "drifting", "held while slack", "diverging", "stuck", "at bound",
            "switch")
#: "settled" for a monotone rise whose largest rise over the second quarter of H is at most
#: this share of that over the first: a decelerating approach to a constant.
CONVERGING_RATIO = 0.75

Series = Sequence[float] | np.ndarray


@dataclass(frozen=True)
class StabilityResult:
    """Stability of one multiplier trajectory (module docstring for each formula).

    score in [0, 1], 1 best (NaN for a switch); verdict one of :data:`VERDICTS`; amplitude A over the second
    half; tv, oscillations and drift over the second half; settling and overshoot (of
    lambda) over the whole run.
    """

    score: float
    verdict: str
    amplitude: float
    tv: float
    oscillations: int
    drift: float
    settling: float
    overshoot: float


@dataclass(frozen=True)
class Tracking:
    """How one cost tracks its limit over the second half (module docstring).

    active: the constraint binds; mean_abs_rel_error: mean |J_t - d| / c(d), NaN when not
    active; overshoot: max max(0, J_t - d) / c(d) (NaN without any cost estimate).
    """

    active: bool
    mean_abs_rel_error: float
    overshoot: float


# ------------------------------------------------------------------------------ checks


def _series(name: str, x: Series, *, allow_nan: bool = False) -> np.ndarray:
    a = np.asarray(x, dtype=np.float64)
    if a.ndim != 1 or a.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-d series, got shape {a.shape}")
    bad = np.isinf(a) if allow_nan else ~np.isfinite(a)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        what = "finite or NaN (no estimate)" if allow_nan else "finite"
        raise ValueError(f"{name} must be {what}, got {a[i]} at iteration {i}")
    return a


def _steps(env_steps: Series, length: int, other: str) -> np.ndarray:
    s = _series("env_steps", env_steps)
    if len(s) != length:
        raise ValueError(f"env_steps ({len(s)}) and {other} ({length}) differ in length: pass one value per iteration")
    back = np.flatnonzero(np.diff(s) < 0)
    if back.size:
        i = int(back[0]) + 1
        raise ValueError(
            f"env_steps must be non-decreasing (cumulative steps), got {s[i]} after {s[i - 1]} at iteration {i}"
        )
    return s


def _number(name: str, value: float, *, zero: bool) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        v = math.nan
    if not (math.isfinite(v) and (v >= 0 if zero else v > 0)):
        raise ValueError(f"{name} must be a finite number {'>=' if zero else '>'} 0, got {value!r}")
    return v


def _positive(name: str, value: float) -> float:
    return _number(name, value, zero=False)


def _limit(limit: float) -> float:
    return _number("limit", limit, zero=True)


def _mean(x: np.ndarray) -> float:
    return math.fsum(x.tolist()) / len(x)


def limit_scale(limit: float) -> float:
    """c(d) = d, or 1 when d = 0: a zero limit has no scale, so errors are then in cost units."""
    return limit if limit > 0 else 1.0


def _finite_mean(x: np.ndarray) -> float:
    f = x[np.isfinite(x)]
    return _mean(f) if f.size else math.nan


# ---------------------------------------------------------------------- building blocks


def largest_rise(x: Series) -> float:
    """U = max_{t <= u} (x_u - x_t) >= 0: the largest rise (run-up) of the series."""
    a = _series("x", x)
    return float(np.max(a - np.minimum.accumulate(a)))


def largest_fall(x: Series) -> float:
    """D = max_{t <= u} (x_t - x_u) >= 0: the largest fall (drawdown) of the series."""
    a = _series("x", x)
    return float(np.max(np.maximum.accumulate(a) - a))


def _slope(s: np.ndarray, x: np.ndarray) -> float:
    sc = s - _mean(s)
    den = math.fsum((sc * sc).tolist())
    return math.fsum((sc * (x - _mean(x))).tolist()) / den if den > 0 else 0.0


def _oscillations(x: np.ndarray, threshold: float) -> int:
    d = np.diff(x)
    sign = np.sign(d[np.abs(d) > threshold])
    return int(np.sum(sign[1:] != sign[:-1]))


def _settling(s: np.ndarray, x: np.ndarray, final: float, band: float) -> float:
    outside = np.abs(x - final) > band
    t_star = min(int(np.flatnonzero(outside)[-1]) + 1, len(x) - 1) if outside.any() else 0
    return float(s[t_star] / s[-1]) if s[-1] > 0 else 1.0


# ------------------------------------------------------------------------ the metrics


def multiplier_stability(
    env_steps: Series,
    lam: Series,
    cost: Series,
    limit: float,
    *,
    lambda_max: float | None = None,
    tol: float = 0.1,
    lambda_ref: float = LAMBDA_REF,
) -> StabilityResult:
    """Verdict and score of one multiplier (formulas and ordering in the module docstring).

    ``lam`` and ``cost`` are the multiplier and the mean episodic cost of its constraint
    per training iteration (cost NaN where no episode finished; an iteration without an
    estimate is no evidence of violation); ``limit`` is d; ``lambda_max`` the bound of
    the agent's projection [0, lambda_max] (without it "at bound" is never returned).
    """
    x = _series("lam", lam)
    j = _series("cost", cost, allow_nan=True)
    if len(j) != len(x):
        raise ValueError(f"cost ({len(j)}) and lam ({len(x)}) differ in length: pass one value per iteration")
    s = _steps(env_steps, len(x), "lam")
    d = _limit(limit)
    tol = _positive("tol", tol)
    lambda_ref = _positive("lambda_ref", lambda_ref)
    if lambda_max is not None:
        lambda_max = _positive("lambda_max", lambda_max)
        if float(x.max()) > lambda_max * (1 + BOUND_RTOL):
            raise ValueError(
                f"lam reaches {float(x.max())} above lambda_max={lambda_max}: pass the bound the agent projects onto"
            )

    T = len(x)
    h = T // 2
    xh, sh = x[h:], s[h:]
    sigma = max(abs(_mean(xh)), lambda_ref)
    rise, fall = largest_rise(xh), largest_fall(xh)
    amplitude = rise / (2 * sigma)
    reversal = min(rise, fall) / (2 * sigma)

    e = (j - d) / limit_scale(d)
    v_half = _finite_mean(e[h:])
    v_end = _finite_mean(e[T - max(1, math.ceil(END_FRAC * T)):])
    v_half = 0.0 if math.isnan(v_half) else v_half  # no estimate: no evidence of violation
    v_end = 0.0 if math.isnan(v_end) else v_end

    m = max(1, math.ceil(END_FRAC * T))
    amplitude_end = largest_rise(x[T - m:]) / (2 * sigma)
    q = len(xh) // 2
    converging = (reversal <= tol and amplitude_end <= tol and q >= 1
                  and largest_rise(xh[q:]) <= CONVERGING_RATIO * largest_rise(xh[:q + 1]))
    violated = v_half > tol and v_end > tol
    at_bound = lambda_max is not None and int(np.sum(xh >= lambda_max * (1 - BOUND_RTOL))) >= BOUND_SHARE * len(xh)
    effective = amplitude
    values = np.unique(x)
    if values.size == 2 and values[0] == 0.0 and values[1] >= tol * lambda_ref:
        verdict = "switch"
    elif at_bound:
        verdict = "at bound"
    elif violated and max(rise, fall) <= OSC_REL_TOL * sigma:
        verdict = "stuck"
    elif violated and reversal <= tol:
        verdict = "diverging"
    elif amplitude <= tol:
        verdict = "settled"
    elif converging:
        verdict, effective = "settled", amplitude_end
    elif reversal <= tol:
        verdict = "drifting"
    else:
        verdict = "bounded oscillation"
    final_h = _mean(x[T - max(1, math.ceil(FINAL_FRAC * T)):])
    if verdict == "settled" and v_half < -tol and final_h >= tol * lambda_ref and final_h >= (1 - tol) * float(xh[0]):
        verdict = "held while slack"
    if verdict == "switch":
        score = math.nan
    elif verdict == "held while slack":
        score = 0.5 / (1.0 + amplitude + abs(v_half) / tol)
    elif verdict in ("settled", "bounded oscillation"):
        score = 0.5 + 0.5 / (1.0 + effective)
    else:
        score = 0.5 / (1.0 + amplitude + max(0.0, v_half) / tol)

    final = _mean(x[T - max(1, math.ceil(FINAL_FRAC * T)):])
    final_scale = max(abs(final), lambda_ref)
    return StabilityResult(
        score=float(score),
        verdict=verdict,
        amplitude=float(amplitude),
        tv=math.fsum(np.abs(np.diff(xh)).tolist()),
        oscillations=_oscillations(xh, OSC_REL_TOL * sigma),
        drift=_slope(sh, xh) * float(sh[-1] - sh[0]) / sigma,
        settling=_settling(s, x, final, tol * final_scale),
        overshoot=max(0.0, float(x.max()) - final) / final_scale,
    )


def cost_tracking(
    env_steps: Series,
    cost: Series,
    limit: float,
    lam: Series | None = None,
    *,
    tol: float = 0.1,
    lambda_ref: float = LAMBDA_REF,
) -> Tracking:
    """How the cost tracks its limit over the second half (formulas in the module docstring).

    Means are per iteration, over the iterations with a cost estimate; ``env_steps`` is
    checked against the other series. ``lam`` (optional) marks the constraint active
    while its multiplier still holds the cost below d.
    """
    j = _series("cost", cost, allow_nan=True)
    _steps(env_steps, len(j), "cost")
    d = _limit(limit)
    tol = _positive("tol", tol)
    lambda_ref = _positive("lambda_ref", lambda_ref)
    h = len(j) // 2
    e = (j[h:] - d) / limit_scale(d)
    e = e[np.isfinite(e)]
    v_half = _mean(e) if e.size else math.nan
    active = bool(e.size and v_half >= -tol)
    if lam is not None:
        x = _series("lam", lam)
        if len(x) != len(j):
            raise ValueError(f"lam ({len(x)}) and cost ({len(j)}) differ in length: pass one value per iteration")
        active = active or _mean(x[h:]) > tol * max(float(x.max()), lambda_ref)
    return Tracking(
        active=active,
        mean_abs_rel_error=_mean(np.abs(e)) if active and e.size else math.nan,
        overshoot=float(np.max(np.maximum(e, 0.0))) if e.size else math.nan,
    )


def _duals(lam_final: Sequence[float], lam_star: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    f = _series("lam_final", lam_final)
    star = _series("lam_star", lam_star)
    if len(f) != len(star):
        raise ValueError(
            f"lam_final ({len(f)}) and lam_star ({len(star)}) differ in length: "
            "pass one value per constraint, in the same order"
        )
    return f, star


def dual_distance(lam_final: Sequence[float], lam_star: Sequence[float]) -> float:
    """||lambda_f - lambda*||_2 over the constraints, in the multiplier's units."""
    f, star = _duals(lam_final, lam_star)
    return math.sqrt(math.fsum(((f - star) ** 2).tolist()))


def relative_dual_distance(
    lam_final: Sequence[float], lam_star: Sequence[float], *, lambda_ref: float = LAMBDA_REF
) -> float:
    """||lambda_f - lambda*||_2 / max(||lambda*||_2, lambda_ref): unit-free, finite when lambda* = 0."""
    f, star = _duals(lam_final, lam_star)
    lambda_ref = _positive("lambda_ref", lambda_ref)
    norm = math.sqrt(math.fsum((star**2).tolist()))
    return dual_distance(f, star) / max(norm, lambda_ref)
