"""The per-run verdict rule (constrained_grpo.eval.scoring.verdict): exact bounds worked out by hand,
and its type I error and power computed exactly and checked by simulation."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import binom, norm

from constrained_grpo.eval.scoring.verdict import (
    ALPHA,
    certify_power,
    cost_bounds,
    cost_verdict,
    episodes_to_certify,
    episodes_to_decide,
    run_episodes_to_decide,
    run_verdict,
)


def _indicator(events: int, n: int) -> np.ndarray:
    x = np.zeros(n)
    x[:events] = 1.0
    return x


def test_clopper_pearson_closed_forms() -> None:
    # 0 events of n: P(Bin(n, U) = 0) = (1 - U)^n = alpha, so U = 1 - alpha^(1/n).
    lo, hi = cost_bounds(_indicator(0, 50), 0.05, True, alpha_lower=ALPHA, alpha_upper=ALPHA)
    assert lo == 0.0 and hi == pytest.approx(1 - 0.05 ** (1 / 50), rel=1e-10)  # 0.0582
    # ... which is above d(1 + tol) = 0.055: no events in 50 episodes cannot certify d = 0.05.
    assert hi > 0.055 and cost_verdict(lo, hi, 0.05, 0.1) == "undetermined"
    # n events of n: L = alpha^(1/n).
    lo, hi = cost_bounds(_indicator(20, 20), 0.1, True, alpha_lower=ALPHA, alpha_upper=ALPHA)
    assert hi == 1.0 and lo == pytest.approx(0.05 ** (1 / 20), rel=1e-10)


@pytest.mark.parametrize("events,n", [(1, 10), (7, 50), (61, 500), (300, 1000)])
def test_clopper_pearson_is_the_binomial_tail(events: int, n: int) -> None:
    lo, hi = cost_bounds(_indicator(events, n), 0.1, True, alpha_lower=0.025, alpha_upper=0.05)
    assert binom.cdf(events, n, hi) == pytest.approx(0.05, rel=1e-6)
    assert binom.sf(events - 1, n, lo) == pytest.approx(0.025, rel=1e-6)


def test_student_t_bound_and_its_zero_variance_floor() -> None:
    t3 = 2.353363434801823  # t_{0.95, 3}
    # [2, 8, 2, 8], d = 4.4: mean 5, s = sqrt(12) = 3.4641 > c/sqrt(n) = 2.2; U = 5 + t3 s / 2.
    lo, hi = cost_bounds([2.0, 8.0, 2.0, 8.0], 4.4, False, alpha_lower=ALPHA, alpha_upper=ALPHA)
    assert hi == pytest.approx(5 + t3 * math.sqrt(12) / 2, rel=1e-9) and lo == pytest.approx(5 - t3 * math.sqrt(12) / 2, rel=1e-9)
    # [4, 6, 4, 6]: s = 1.1547 < 2.2, so the floor sets the width: U = 5 + t3 * 2.2 / 2.
    assert cost_bounds([4.0, 6.0, 4.0, 6.0], 4.4, False, alpha_lower=ALPHA, alpha_upper=ALPHA)[1] == pytest.approx(
        5 + t3 * 1.1, rel=1e-9)
    # 100 identical episodes: sd floored at 4.4 / 10, half-width t_{0.95, 99} * 0.044 = 0.0731.
    t99 = 1.6603911559963895
    lo, hi = cost_bounds(np.full(100, 4.0), 4.4, False, alpha_lower=ALPHA, alpha_upper=ALPHA)
    assert hi == pytest.approx(4.0 + t99 * 0.044, rel=1e-9) and cost_verdict(lo, hi, 4.4, 0.1) == "within"
    # At 4.9, above d(1 + tol) = 4.84, zero spread still leaves it undetermined, not broken.
    lo, hi = cost_bounds(np.full(100, 4.9), 4.4, False, alpha_lower=ALPHA, alpha_upper=ALPHA)
    assert lo == pytest.approx(4.9 - t99 * 0.044, rel=1e-9) and lo < 4.84
    assert cost_verdict(lo, hi, 4.4, 0.1) == "undetermined"
    # An "indicator" whose episodes are not all 0 or 1 falls back to the t bound.
    assert cost_bounds([0.0, 2.0, 0.0, 2.0], 0.1, True, alpha_lower=ALPHA, alpha_upper=ALPHA)[1] == pytest.approx(
        1 + t3 * math.sqrt(4 / 3) / 2, rel=1e-9)


def test_bonferroni_over_constraints_for_breaks_only() -> None:
    # K = 2: the upper bounds are at alpha each (within needs every one), the lower at alpha / 2.
    costs = [_indicator(61, 500), _indicator(30, 500)]
    bounds, verdicts = run_verdict(costs, [0.1, 0.2], [True, True], 0.1)
    for (lo, hi), c in zip(bounds, costs):
        assert (lo, hi) == cost_bounds(c, 0.0, True, alpha_lower=ALPHA / 2, alpha_upper=ALPHA)
    assert verdicts == ["undetermined", "within"]


@pytest.mark.slow
def test_type_one_error_and_power_exact_and_simulated() -> None:
    """At J = d(1 + tol) the run is wrongly called within with probability <= alpha; at J = d
    it is rightly called within with the exact power; simulated through cost_bounds."""
    d, tol, n, reps = 0.1, 0.1, 500, 4000
    level = d * (1 + tol)
    rng = np.random.default_rng(0)
    size = certify_power(d, tol, n, rate=level)
    assert size <= ALPHA
    power = certify_power(d, tol, n)
    assert power == pytest.approx(0.1665, abs=1e-3)  # why 500 episodes cannot certify d = 0.1
    se = math.sqrt(ALPHA * (1 - ALPHA) / reps)
    for rate, exact in ((level, size), (d, power)):
        counts = rng.binomial(n, rate, size=reps)
        called = np.mean([cost_verdict(*cost_bounds(_indicator(int(x), n), d, True, alpha_lower=ALPHA,
                                                    alpha_upper=ALPHA), d, tol) == "within" for x in counts])
        assert abs(called - exact) <= 4 * max(se, math.sqrt(exact * (1 - exact) / reps)), (rate, called, exact)
    # Breaks at J = d(1 + tol) on both of K = 2 constraints: P(any lower bound above) <= alpha.
    counts = rng.binomial(n, level, size=(reps, 2))
    wrong = np.mean([("over" in run_verdict([_indicator(int(a), n), _indicator(int(b), n)], [d, d], [True, True], tol)[1])
                     for a, b in counts])
    assert wrong <= ALPHA + 4 * se


def test_student_t_size_on_a_skewed_cost() -> None:
    # A fuel-like cost: 4 on 70% of episodes, 6 on 30% (mean 4.6), limit d with d(1 + tol) = 4.6.
    d, tol, n, reps = 4.6 / 1.1, 0.1, 500, 3000
    rng = np.random.default_rng(1)
    draws = np.where(rng.random((reps, n)) < 0.3, 6.0, 4.0)
    called = np.mean([cost_verdict(*cost_bounds(x, d, False, alpha_lower=ALPHA, alpha_upper=ALPHA), d, tol) == "within"
                      for x in draws])
    assert called <= ALPHA + 4 * math.sqrt(ALPHA * (1 - ALPHA) / reps)


def test_episodes_to_certify_the_limits_of_the_suite() -> None:
    for d, n in ((0.05, 12_382), (0.1, 5_842), (0.2, 2_577)):
        assert episodes_to_certify(d, 0.1) == n
        assert certify_power(d, 0.1, n) >= 0.8 > certify_power(d, 0.1, n - 1)
        # The normal approximation (z_0.95 + z_0.8)^2 d (1 - d) / (tol d)^2 is within 10%.
        approx = (norm.ppf(0.95) + norm.ppf(0.8)) ** 2 * d * (1 - d) / (0.1 * d) ** 2
        assert abs(n - approx) / n < 0.1
    with pytest.raises(ValueError, match="probability"):
        episodes_to_certify(2.0, 0.1)


def test_episodes_to_decide_an_undetermined_run_by_hand() -> None:
    # A fuel-like cost 12.7 +- 2.0 against d = 12 (t = 13.2, 0.5 below): z_0.95 + z_0.8 =
    # 1.64485 + 0.84162 = 2.48647, n = (2.48647 x 2 / 0.5)^2 = 98.9; above t at 13.7 it decides
    # "breaks" at alpha / K = 0.025 with two constraints: (1.95996 + 0.84162) = 2.80159, 125.6.
    assert episodes_to_decide(12.7, 2.0, 12.0, 0.1, alpha=0.05) == 99
    assert episodes_to_decide(12.0 + 0.1 * 12.0, 2.0, 12.0, 0.1, alpha=0.05) == math.inf  # at t itself: never
    # No spread: the floor c(d)/sqrt(n) binds, n = z c / gap = 2.48647 x 12 / 0.5 = 59.7.
    assert episodes_to_decide(12.7, 0.0, 12.0, 0.1, alpha=0.05) == 60
    # An indicator below t: the exact binomial power, searched by bisection. With no event the
    # bound certifies once 0.89^n <= 0.05, n >= ln 0.05 / ln 0.89 = 25.7; at the limit itself the
    # plan's scan finds 5,842 (power 0.8), and the power's sawtooth lets the bisection stop a
    # little after it, never before.
    assert episodes_to_decide(0.0, 0.0, 0.1, 0.1, alpha=0.05, indicator=True) == 26
    at_limit = episodes_to_decide(0.1, 0.3, 0.1, 0.1, alpha=0.05, indicator=True)
    assert episodes_to_certify(0.1, 0.1) == 5842 <= at_limit <= 5842 * 1.03
    assert certify_power(0.1, 0.1, int(at_limit)) >= 0.8
    fuel, over = (12.7, 2.0, "undetermined"), (13.7, 2.0, "undetermined")
    hazard = (0.1, 0.3, "undetermined")
    both = [0.1, 12.0], [True, False]
    assert run_episodes_to_decide([hazard, fuel], *both, 0.1) == at_limit  # both below t: the most
    assert run_episodes_to_decide([hazard, over], *both, 0.1) == 126  # one above t: it decides the run
    assert math.isnan(run_episodes_to_decide([(0.05, 0.2, "within")], [0.1], [True], 0.1))  # nothing undetermined
