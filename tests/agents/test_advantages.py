"""Hand-worked tests of the group estimators, aggregators and effective weights."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from constrained_grpo.agents.advantages import (
    ESTIMATORS,
    AdvantageSpec,
    batch_std,
    compute_advantages,
    dara,
    dara_weights,
    effective_weights,
    estimator_slope,
    gdpo,
    maxrl,
    mean_only,
    reward_only,
    scadv,
    screw,
    softmax_adv,
    zscore,
)

R5 = math.sqrt(5.0)

# One group of G=4 samples, components [R, C1, C2]:
#   R  = 1 2 3 4   mean 2.5, std sqrt(5)/2  -> Z_R  = [-3, -1, 1, 3] / sqrt(5)
#   C1 = 0 0 1 1   mean 0.5, std 0.5        -> Z_C1 = [-1, -1, 1, 1]
#   C2 = 2 0 0 2   mean 1,   std 1          -> Z_C2 = [ 1, -1, -1, 1]
X = np.array([[[1, 0, 2], [2, 0, 0], [3, 1, 0], [4, 1, 2]]], dtype=float)
Z_R = np.array([-3, -1, 1, 3]) / R5
Z_C1 = np.array([-1.0, -1, 1, 1])
Z_C2 = np.array([1.0, -1, -1, 1])


# --- estimators -------------------------------------------------------------------------


def test_zscore_by_hand() -> None:
    np.testing.assert_allclose(zscore(X[..., 0])[0], Z_R)
    np.testing.assert_allclose(zscore(X)[0], np.stack([Z_R, Z_C1, Z_C2], axis=1))


def test_mean_only_by_hand() -> None:
    np.testing.assert_allclose(mean_only(X[..., 0])[0], [-1.5, -0.5, 0.5, 1.5])


def test_batch_std_by_hand() -> None:
    # groups [0, 2] and [4, 6]: group-centred [-1, 1] each; batch values 0 2 4 6, std sqrt(5)
    x = np.array([[0.0, 2.0], [4.0, 6.0]])
    np.testing.assert_allclose(batch_std(x), np.array([[-1, 1], [-1, 1]]) / R5)


def test_softmax_by_hand() -> None:
    # softmax([0, ln 3]) = [1/4, 3/4]  ->  2 p - 1 = [-1/2, 1/2]
    np.testing.assert_allclose(softmax_adv(np.array([[0.0, math.log(3)]]), tau=1.0), [[-0.5, 0.5]])
    # the temperature divides x: tau = 2 on [0, 2 ln 3] gives the same
    np.testing.assert_allclose(softmax_adv(np.array([[0.0, 2 * math.log(3)]]), tau=2.0), [[-0.5, 0.5]])


def test_softmax_large_tau_recovers_centred_reinforce() -> None:
    x = np.array([[1.0, 2.0, 4.0, 5.0]])
    tau = 1e6
    np.testing.assert_allclose(softmax_adv(x, tau=tau) * tau, x - x.mean(), rtol=1e-4)


def test_softmax_rejects_non_positive_tau() -> None:
    with pytest.raises(ValueError, match="tau"):
        softmax_adv(np.zeros((1, 2)), tau=0.0)


def test_maxrl_by_hand() -> None:
    np.testing.assert_allclose(maxrl(np.array([[0.0, 0, 1, 1]])), [[-1, -1, 1, 1]])
    np.testing.assert_allclose(maxrl(np.array([[0.0, 0, 0, 1]])), [[-1, -1, -1, 3]])
    np.testing.assert_array_equal(maxrl(np.zeros((1, 4))), np.zeros((1, 4)))


def test_maxrl_shifts_negative_inputs_by_the_batch_minimum() -> None:
    # Issue 16: returns [-10, -5, -7, -1] used to give A = 0 (mean <= 0). Shifted by -10:
    # x' = [0, 5, 3, 9], mean 4.25, A = x' / 4.25 - 1.
    np.testing.assert_allclose(maxrl(np.array([[-10.0, -5, -7, -1]])), [[-1.0, 0.75 / 4.25, -1.25 / 4.25, 4.75 / 4.25]])
    # A mean just above 0 used to explode to +-1e8; shifted: x' = [0, 2 + 2e-8] -> [-1, 1].
    np.testing.assert_allclose(maxrl(np.array([[-1.0, 1 + 2e-8]])), [[-1.0, 1.0]])
    # One shift for the whole batch (not per group): min = -1, x' = [[0, 2], [1, 3]].
    np.testing.assert_allclose(maxrl(np.array([[-1.0, 1], [0, 2]])), [[-1.0, 1], [-0.5, 0.5]])
    # Per component: in ScAdv the reward is shifted, the (non-negative) costs are not.
    x = np.array([[[-2.0, 0.0], [2.0, 1.0]], [[0.0, 1.0], [0.0, 3.0]]])  # [P=2, G=2, 1+K=2]
    # R' = [[0, 4], [2, 2]] -> [[-1, 1], [0, 0]];  C = [[0, 1], [1, 3]] -> [[-1, 1], [-0.5, 0.5]]
    np.testing.assert_allclose(scadv(x, [0.5], estimator="maxrl"), [[-1 + 0.5, 1 - 0.5], [0.25, -0.25]])


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_zero_std_group_gives_zero_not_nan(name: str) -> None:
    # mean([0.1] * 3) is not exactly 0.1 in floating point: the std is ~1e-17, not 0.
    x = np.array([[0.1, 0.1, 0.1], [1.0, 2.0, 3.0]])
    adv = ESTIMATORS[name](x)
    assert np.all(np.isfinite(adv))
    if name != "batch_std":  # batch-std centres per group too: the constant group is 0 as well
        np.testing.assert_array_equal(adv[0], 0.0)
    np.testing.assert_array_equal(batch_std(x)[0], 0.0)
    np.testing.assert_array_equal(zscore(np.full((2, 5), 7.0)), 0.0)


@settings(max_examples=50, deadline=None)
@given(arrays(np.float64, (3, 5), elements=st.floats(-100, 100, allow_nan=False)))
def test_estimators_are_finite_and_centred(x: np.ndarray) -> None:
    for name, fn in ESTIMATORS.items():
        adv = fn(x)
        assert np.all(np.isfinite(adv)), name
        if name in ("zscore", "mean", "batch_std", "softmax"):
            np.testing.assert_allclose(adv.sum(axis=1), 0.0, atol=1e-8)
    # MaxRL on shifted (non-negative) values: A in [-1, G - 1], whatever the signs of x.
    adv = maxrl(x)
    assert np.all(adv >= -1 - 1e-9) and np.all(adv <= x.shape[1] - 1 + 1e-9)


def test_estimator_slope_is_the_linear_factor() -> None:
    x = X[..., 0]
    assert estimator_slope(x, "zscore")[0] == pytest.approx(2 / R5)  # 1 / std
    assert estimator_slope(x, "mean")[0] == pytest.approx(1.0)
    assert estimator_slope(x, "maxrl")[0] == pytest.approx(1 / 2.5)  # 1 / mean
    assert estimator_slope(np.ones((1, 3)), "zscore")[0] == 0.0


# --- aggregators ------------------------------------------------------------------------


def test_screw_by_hand() -> None:
    # S = R - C1 - 0.5 C2 = [0, 2, 2, 2]; mean 1.5, std sqrt(3)/2
    expected = np.array([-1.5, 0.5, 0.5, 0.5]) / (math.sqrt(3) / 2)
    np.testing.assert_allclose(screw(X, [1.0, 0.5])[0], expected)


def test_scadv_by_hand() -> None:
    expected = Z_R - 1.0 * Z_C1 - 0.5 * Z_C2
    np.testing.assert_allclose(scadv(X, [1.0, 0.5])[0], expected)
    np.testing.assert_allclose(scadv(X, [1.0, 0.5], normalize=True)[0], expected / 2.5)
    # another estimator applies per component: mean-only
    centred = X[0] - X[0].mean(axis=0)
    np.testing.assert_allclose(scadv(X, [1.0, 0.5], estimator="mean")[0], centred @ [1.0, -1.0, -0.5])


def test_reward_only_ignores_costs() -> None:
    np.testing.assert_allclose(reward_only(X)[0], Z_R)


def test_gdpo_by_hand() -> None:
    v = Z_R - Z_C1 - 0.5 * Z_C2  # sums to 0 within the group, so the batch mean is 0
    np.testing.assert_allclose(gdpo(X, [1.0, 0.5])[0], v / np.sqrt(np.mean(v**2)))


def test_adv_eps_enters_the_group_and_batch_stds_of_gdpo_and_dara() -> None:
    # Issue 16: adv_eps used to reach only the final batchnorm. eps = 0.5 by hand on X:
    # sigma = [sqrt(5)/2, 0.5, 1]; Z_j = (x_j - mean_j) / (sigma_j + 0.5).
    eps, lam = 0.5, [1.0, 0.5]
    centred = X[0] - X[0].mean(axis=0)
    z = centred / (np.array([R5 / 2, 0.5, 1.0]) + eps)
    v = z @ np.array([1.0, -1.0, -0.5])  # sums to 0 in the group: the batch mean is 0
    expected = v / (np.sqrt(np.mean(v**2)) + eps)
    np.testing.assert_allclose(gdpo(X, lam, eps=eps)[0], expected)
    old = (Z_R - Z_C1 - 0.5 * Z_C2) / (np.sqrt(np.mean((Z_R - Z_C1 - 0.5 * Z_C2) ** 2)) + eps)
    assert np.max(np.abs(gdpo(X, lam, eps=eps)[0] - old)) > 0.05
    # DARA (one group: every component varies, so every density weight is 1) = GDPO here.
    np.testing.assert_allclose(dara(X, lam, eps=eps)[0], expected)
    # The effective weights carry the same eps: A = sum_j sign(c_j) w_j (x_j - mean_j) / sigma_j.
    for aggregator in ("gdpo", "dara"):
        w = effective_weights(X, lam, AdvantageSpec(aggregator, eps=eps))
        rebuilt = (centred / np.array([R5 / 2, 0.5, 1.0])) @ (w * np.array([1.0, -1.0, -1.0]))
        np.testing.assert_allclose(rebuilt, expected, err_msg=aggregator)
    # The config passes adv_eps through to both.
    from constrained_grpo.agents.config import make_config

    spec = make_config("quick", aggregator="gdpo", adv_eps=eps).advantage_spec
    np.testing.assert_allclose(compute_advantages(X, lam, spec)[0], expected)


def test_aggregators_check_multiplier_count() -> None:
    with pytest.raises(ValueError, match="one multiplier per cost"):
        scadv(X, [1.0])
    with pytest.raises(ValueError, match=r"\[P, G, 1\+K\]"):
        screw(X[0], [1.0, 0.5])


def test_unknown_names_are_errors() -> None:
    with pytest.raises(ValueError, match="unknown estimator 'z'"):
        scadv(X, [1.0, 0.5], estimator="z")
    with pytest.raises(ValueError, match="unknown aggregator"):
        AdvantageSpec(aggregator="sum")


# --- DARA -------------------------------------------------------------------------------

# 4 groups of 2. R varies in all 4 groups (pi = 1); C1 in one group (pi = 1/4);
# C2 in none (pi = 0).
DARA_X = np.array(
    [
        [[0, 0, 1], [1, 0, 1]],
        [[1, 0, 1], [0, 0, 1]],
        [[0, 1, 0], [2, 0, 0]],
        [[3, 0, 0], [1, 0, 0]],
    ],
    dtype=float,
)


def test_dara_weights_on_a_hand_built_batch() -> None:
    w, pi = dara_weights(DARA_X)
    np.testing.assert_allclose(pi, [1.0, 0.25, 0.0])
    # w = min(5, sqrt(max pi / pi)): [1, sqrt(4) = 2, inf -> 5]
    np.testing.assert_allclose(w, [1.0, 2.0, 5.0])
    # the cap: pi = 1/36 would give 6, capped at 5; a lower cap bites earlier
    w_capped, _ = dara_weights(DARA_X, max_weight=1.5)
    np.testing.assert_allclose(w_capped, [1.0, 1.5, 1.5])


def test_dara_symmetric_and_asymmetric_by_hand() -> None:
    lam = np.array([0.5, 2.0])
    # Z per group (G=2 z-scores are +-1): R: [-1,1],[1,-1],[-1,1],[1,-1]; C1 only group 2: [1,-1]
    z_r = np.array([[-1, 1], [1, -1], [-1, 1], [1, -1]], dtype=float)
    z_c1 = np.array([[0, 0], [0, 0], [1, -1], [0, 0]], dtype=float)
    u_r, u_c1 = 1.0 * z_r, -0.5 * z_c1  # u_j = c_j Z_j
    sym = 1.0 * u_r + 2.0 * u_c1  # weights w = [1, 2, 5]; C2 never varies
    np.testing.assert_allclose(dara(DARA_X, lam), (sym - sym.mean()) / sym.std())
    asym = (np.maximum(u_r, 0) + np.minimum(u_r, 0)) + (2.0 * np.maximum(u_c1, 0) + np.minimum(u_c1, 0))
    np.testing.assert_allclose(dara(DARA_X, lam, symmetric=False), (asym - asym.mean()) / asym.std())


# --- effective weights --------------------------------------------------------------------


def test_effective_weights_screw_by_hand() -> None:
    # sigma_R = sqrt(5)/2, sigma_C1 = 0.5, sigma_C2 = 1, sigma_S = sqrt(3)/2
    spec = AdvantageSpec(aggregator="screw")
    w = effective_weights(X, [1.0, 0.5], spec)
    s = math.sqrt(3) / 2
    np.testing.assert_allclose(w, [(R5 / 2) / s, 0.5 / s, 0.5 * 1.0 / s])


def test_effective_weights_scadv_are_the_multipliers() -> None:
    np.testing.assert_allclose(effective_weights(X, [1.0, 0.5], AdvantageSpec("scadv")), [1.0, 1.0, 0.5])
    spec = AdvantageSpec("scadv", normalize=True)
    np.testing.assert_allclose(effective_weights(X, [1.0, 0.5], spec), np.array([1.0, 1.0, 0.5]) / 2.5)


def test_raising_lambda2_moves_screw_weights_on_reward_and_cost1_but_not_scadv() -> None:
    """Thm 4.1 of arXiv 2602.05863: ScRew's shared sigma_S couples every weight."""
    low, high = np.array([1.0, 0.5]), np.array([1.0, 2.0])
    screw_low = effective_weights(X, low, AdvantageSpec("screw"))
    screw_high = effective_weights(X, high, AdvantageSpec("screw"))
    # with lambda_2 = 2: S = R - C1 - 2 C2 = [-3, 2, 2, -1], sigma_S = sqrt(4.5)
    np.testing.assert_allclose(screw_high[:2], [(R5 / 2) / math.sqrt(4.5), 0.5 / math.sqrt(4.5)])
    assert abs(screw_high[0] - screw_low[0]) > 0.5
    assert abs(screw_high[1] - screw_low[1]) > 0.2
    scadv_low = effective_weights(X, low, AdvantageSpec("scadv"))
    scadv_high = effective_weights(X, high, AdvantageSpec("scadv"))
    np.testing.assert_array_equal(scadv_low[:2], scadv_high[:2])
    assert scadv_high[2] == 2.0


def test_effective_weights_match_a_linear_aggregator_exactly() -> None:
    """For ScRew with z-scores, A = sum_j c_j (w_j) Z_j holds sample by sample."""
    lam = np.array([1.0, 0.5])
    w = effective_weights(X, lam, AdvantageSpec("screw"))
    reconstructed = w[0] * Z_R - w[1] * Z_C1 - w[2] * Z_C2
    np.testing.assert_allclose(reconstructed, screw(X, lam)[0])


def test_effective_weights_skip_groups_without_signal() -> None:
    # second group: every component constant -> contributes nothing, no NaN
    x = np.concatenate([X, np.ones((1, 4, 3))], axis=0)
    for aggregator in ("reward", "screw", "scadv", "gdpo", "dara"):
        w = effective_weights(x, [1.0, 0.5], AdvantageSpec(aggregator))
        assert np.all(np.isfinite(w)), aggregator
    np.testing.assert_allclose(effective_weights(x, [1.0, 0.5], AdvantageSpec("scadv")), [1.0, 1.0, 0.5])
    np.testing.assert_array_equal(effective_weights(np.ones((2, 3, 3)), [1.0, 1.0], AdvantageSpec("screw")), 0.0)


def test_effective_weights_reward_only() -> None:
    w = effective_weights(X, [1.0, 0.5], AdvantageSpec("reward"))
    np.testing.assert_allclose(w, [1.0, 0.0, 0.0])


def test_compute_advantages_dispatches() -> None:
    lam = [1.0, 0.5]
    np.testing.assert_allclose(compute_advantages(X, lam, AdvantageSpec("screw")), screw(X, lam))
    np.testing.assert_allclose(compute_advantages(X, lam, AdvantageSpec("scadv", "mean")), scadv(X, lam, "mean"))
    np.testing.assert_allclose(compute_advantages(X, lam, AdvantageSpec("gdpo")), gdpo(X, lam))
    np.testing.assert_allclose(
        compute_advantages(X, lam, AdvantageSpec("dara", dara_symmetric=False)), dara(X, lam, symmetric=False)
    )
    np.testing.assert_allclose(compute_advantages(X, lam, AdvantageSpec("reward")), reward_only(X))


def test_group_statistics_are_numpys_to_the_bit() -> None:
    """The one-pass group mean/std gives exactly numpy's ``std`` and the z-score exactly
    ``(x - mean) / std``: advantages are the same floats as with ``np.std``."""
    from constrained_grpo.agents.advantages import group_std

    rng = np.random.default_rng(5)
    for shape in [(16, 16), (16, 16, 3), (3, 7, 2)]:
        x = rng.normal(size=shape) * 37.0
        np.testing.assert_array_equal(group_std(x), np.std(x, axis=1, keepdims=True))
        expected = (x - x.mean(axis=1, keepdims=True)) / np.std(x, axis=1, keepdims=True)
        np.testing.assert_array_equal(zscore(x), expected)
