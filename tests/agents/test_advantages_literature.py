"""CorrGRPO, IS-GRPO and MDP-GRPO against their sources, and the mechanism each paper names.

The source computations below are transcribed from the public code (CorrGRPO: verl's
``compute_grpo_covariance_coefficient_outcome_advantage`` in github HKUST-KnowComp/CorrGRPO,
commit 3586915; MDP-GRPO: the ``dual_anchor`` branch of the GRPO trainer of github
m-salmani78/trl, branch MDP-GRPO) in torch, operation for operation, and run on the same
numbers as ours. IS-GRPO has no public code: its test is the property its paper states.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from constrained_grpo.agents.advantages import (
    AdvantageSpec,
    compute_advantages,
    corrgrpo,
    effective_weights,
    is_grpo,
    is_prompt_probs,
    mdp_grpo,
    prospect,
    scadv,
    screw,
    zscore,
)
from constrained_grpo.agents.config import make_config



# --- CorrGRPO ---------------------------------------------------------------------------


def _verl_corrgrpo(components: np.ndarray, weights: np.ndarray, epsilon: float = 1e-6) -> np.ndarray:
    """verl's CorrGRPO estimator on ``[P, G, C]`` scores with reward weights ``weights``:
    weighted scores, per group the sample covariance, its correlation coefficients (zero rows
    for a constant component), their sum clamped at 0, the centred total over sqrt(sum + eps)."""
    scores = torch.as_tensor(components, dtype=torch.float64) * torch.as_tensor(weights, dtype=torch.float64)
    out = torch.zeros(scores.shape[:2], dtype=torch.float64)
    for p in range(scores.shape[0]):
        group_scores = scores[p]
        centered_scores = group_scores - group_scores.mean(dim=0, keepdim=True)
        centered_total_reward = centered_scores.sum(dim=-1)
        covariance = centered_scores.T @ centered_scores / (group_scores.size(0) - 1)
        variances = covariance.diagonal()
        inverse_std = torch.where(variances > 0, torch.rsqrt(variances), torch.zeros_like(variances))
        coefficients = covariance * inverse_std[:, None] * inverse_std[None, :]
        coefficient_sum = coefficients.sum().clamp_min(0)
        out[p] = centered_total_reward / torch.sqrt(coefficient_sum + epsilon)
    return out.numpy()


def test_corrgrpo_equals_the_verl_estimator_on_a_fixed_batch() -> None:
    x = np.round(np.random.default_rng(57).normal(size=(5, 8, 3)) * [1.0, 0.5, 3.0] + [0.0, 1.0, 2.0], 3)
    x[1, :, 2] = 4.0  # a cost constant in group 1: a zero row and column there
    x[2, :, 1] = x[2, :, 0] * 2.0 + 1.0  # a cost perfectly correlated with the reward in group 2
    lam = np.array([0.7, 0.2])
    weights = np.array([1.0, -0.7, -0.2])  # the signed weights c = [1, -lambda]
    np.testing.assert_allclose(corrgrpo(x, lam), _verl_corrgrpo(x, weights), rtol=1e-10, atol=1e-12)
    # A multiplier at 0 drops its cost from both sum and denominator, as a zero reward weight does in verl.
    np.testing.assert_allclose(corrgrpo(x, [0.0, 0.2]), _verl_corrgrpo(x, np.array([1.0, 0.0, -0.2])), atol=1e-12)
    # The agent's path: adv_eps adds to verl's 1e-6.
    np.testing.assert_allclose(compute_advantages(x, lam, AdvantageSpec("corr")), corrgrpo(x, lam))


def test_corrgrpo_readmes_worked_example() -> None:
    """The release's three-component example (README, Figure 2): correlations 0.9756 between the
    first two and 0.1098 between each and the third, whose std is 9 times theirs; the third's
    variance is about 91.1% of GRPO's covariance sum, and CorrGRPO's multiplier is about 0.4307.
    We build four rollouts with exactly those correlations and stds."""
    rho = np.array([[1.0, 0.9756, 0.1098], [0.9756, 1.0, 0.1098], [0.1098, 0.1098, 1.0]])
    basis = np.linalg.qr(np.column_stack([np.ones(4), np.eye(4)[:, :3]]))[0][:, 1:]  # centred, orthonormal
    z = basis @ np.linalg.cholesky(rho).T * math.sqrt(3.0)  # sample (n - 1) std 1, correlations rho
    x = (z * [1.0, 1.0, 9.0] + [5.0, 3.0, 20.0])[None]
    cov = np.cov(x[0].T)
    assert 81.0 * cov[0, 0] / cov.sum() == pytest.approx(0.911, abs=5e-4)
    centred_total = (x[0] - x[0].mean(axis=0)).sum(axis=1)
    # Three rewards with unit weights: the aggregator with reward_weight 1 and costs entering as
    # negated rewards (-lambda (-r) = r) with lambda = 1.
    signed = np.concatenate([x[..., :1], -x[..., 1:]], axis=-1)
    adv = corrgrpo(signed, [1.0, 1.0])[0]
    ratio = adv / centred_total
    np.testing.assert_allclose(ratio, ratio[0])
    assert round(float(ratio[0]), 4) == 0.4307
    # GRPO on the sum divides by its std: 1 / sqrt(sum Cov) with the same centred total.
    grpo_multiplier = 1.0 / math.sqrt(cov.sum())
    assert grpo_multiplier < ratio[0]


def test_corr_denominator_ignores_scale_where_the_covariance_one_is_dominated_by_it() -> None:
    """Mechanism: std S = sqrt(sum_jl c_j c_l Cov_jl) grows with a component's scale and shrinks
    every other component's advantage; sqrt(sum rho) does not move, and it grows with the
    components' correlation (sqrt(2 + 2 rho) for two rewards)."""
    rng = np.random.default_rng(16)
    base = rng.normal(size=(1, 16))
    noise = rng.normal(size=(1, 16))
    for rho_target in (0.0, 0.5, 0.95):
        second = rho_target * base + math.sqrt(1 - rho_target**2) * noise
        for scale in (1.0, 100.0):
            x = np.stack([base, -scale * second], axis=-1)  # a cost that moves with the reward, sign flipped
            adv_corr = corrgrpo(x, [1.0], eps=0.0)
            centred = (x[0] - x[0].mean(axis=0)) @ np.array([1.0, -1.0])
            denominator = float(np.mean(centred / adv_corr[0]))
            r = np.corrcoef(base[0], second[0])[0, 1]
            assert denominator == pytest.approx(math.sqrt(2 + 2 * r), rel=1e-9)
            screw_denominator = float(np.std(centred))
            assert denominator <= 2.0  # at most the number of components
            if scale == 100.0:  # the large-scale component dominates std S
                assert screw_denominator > 0.9 * scale * np.std(second) > 30 * denominator
    # Effective weights: CorrGRPO keeps the small component's weight per unit of its std, ScRew shrinks it.
    x = np.stack([base, -100.0 * noise], axis=-1)
    w_corr = effective_weights(x, [1.0], AdvantageSpec("corr"))
    w_screw = effective_weights(x, [1.0], AdvantageSpec("screw"))
    assert w_screw[0] < 0.02 and w_corr[0] > 0.3
    np.testing.assert_allclose(w_corr[1] / w_corr[0], 100.0 * noise.std() / base.std(), rtol=1e-9)


def test_corr_effective_weights_rebuild_the_advantage_exactly() -> None:
    x = np.random.default_rng(57).normal(size=(1, 6, 3))
    lam = np.array([0.5, 2.0])
    w = effective_weights(x, lam, AdvantageSpec("corr"))
    z = zscore(x)[0]
    np.testing.assert_allclose(w[0] * z[:, 0] - w[1] * z[:, 1] - w[2] * z[:, 2], corrgrpo(x, lam)[0], atol=1e-12)


# --- IS-GRPO ----------------------------------------------------------------------------


def _bandit_batch() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Three starts, each a two-armed bandit with a softmax policy; G = 4 samples per start
    whose empirical distribution is the policy's exactly (so the group mean and std are the
    policy's): pi(arm 1) = 1/4, 1/2, 3/4. Rewards of very different scales (heterogeneous
    within-start variances): arm rewards [0, 1], [0, 10], [2, 0]."""
    probs = np.array([[0.75, 0.25], [0.5, 0.5], [0.25, 0.75]])
    rewards = np.array([[0.0, 1.0], [0.0, 10.0], [2.0, 0.0]])
    arms = np.array([[0, 0, 0, 1], [0, 0, 1, 1], [0, 1, 1, 1]])
    x = np.take_along_axis(rewards, arms, axis=1)  # [P, G]
    return probs, rewards, arms, x


def _update(adv: np.ndarray, probs: np.ndarray, arms: np.ndarray) -> np.ndarray:
    """sum_p sum_i A_pi grad log pi_p(a_pi) / G for softmax logits: grad log pi(a) = e_a - pi."""
    g = arms.shape[1]
    grads = np.eye(2)[arms] - probs[:, None, :]  # [P, G, 2]
    return (adv[..., None] * grads).sum(axis=1) / g  # [P, 2]


def test_is_grpo_expected_update_is_the_full_gradient_by_enumeration() -> None:
    probs, rewards, arms, x = _bandit_batch()
    p_count = x.shape[0]
    mean = (probs * rewards).sum(axis=1, keepdims=True)
    full_gradient = probs * (rewards - mean) / p_count  # d/dtheta_pa of (1/P) sum_p E_pi r_p: pi_a (r_a - mu_p)
    # IS-GRPO as sampling: P draws of starts with replacement, q_p proportional to the start's
    # std, each drawn start's z-scores applied once per draw. Enumerate all P^P draws.
    q = is_prompt_probs(x)[:, 0]
    z = zscore(x)
    expected = np.zeros_like(full_gradient)
    for draw in itertools.product(range(p_count), repeat=p_count):
        counts = np.bincount(draw, minlength=p_count)
        expected += np.prod(q[list(draw)]) * _update(counts[:, None] * z, probs, arms)
    # ... equals the update of our (expected) advantages ...
    np.testing.assert_allclose(expected, _update(is_grpo(x), probs, arms), atol=1e-12)
    # ... which is the full gradient times P / mean std (a step size, not a direction).
    sigma_bar = np.std(x, axis=1).mean()
    np.testing.assert_allclose(expected, full_gradient * p_count / sigma_bar, atol=1e-12)
    # GRPO's z-scores (every start once) weigh start p by 1 / sigma_p: not the full gradient's direction.
    grpo = _update(z, probs, arms).ravel()
    cosine = grpo @ full_gradient.ravel() / np.linalg.norm(grpo) / np.linalg.norm(full_gradient)
    assert cosine < 0.8


def test_is_grpo_by_hand_and_on_constant_groups() -> None:
    # groups [0, 2] (std 1) and [0, 6] (std 3): mean std 2 -> [-1, 1] / 2 and [-3, 3] / 2
    np.testing.assert_allclose(is_grpo(np.array([[0.0, 2.0], [0.0, 6.0]])), [[-0.5, 0.5], [-1.5, 1.5]])
    # A constant group is never drawn (q = 0), and it counts in the mean std with 0.
    x = np.array([[1.0, 1.0], [0.0, 6.0]])
    np.testing.assert_allclose(is_prompt_probs(x)[:, 0, ...].ravel(), [0.0, 1.0])
    np.testing.assert_allclose(is_grpo(x), [[0.0, 0.0], [-2.0, 2.0]])
    np.testing.assert_array_equal(is_grpo(np.ones((3, 4))), 0.0)
    # cgrpo-is: ScAdv with this estimator per component.
    x3 = np.random.default_rng(57).normal(size=(4, 5, 3))
    np.testing.assert_allclose(
        compute_advantages(x3, [0.5, 1.0], AdvantageSpec("scadv", "is")),
        is_grpo(x3[..., 0]) - 0.5 * is_grpo(x3[..., 1]) - 1.0 * is_grpo(x3[..., 2]),
    )


# --- MDP-GRPO ---------------------------------------------------------------------------


def _release_dual_anchor(rewards: np.ndarray, constraints: float, alpha: float, beta: float, lam_pos: float,
                         lam_neg: float) -> np.ndarray:
    """The release's dual-anchor advantage (rewards normalized to [0, 1], goal mean
    max(1/2, group mean), prospect shaping on both anchors), on ``[P, G]`` rewards."""
    eps = 1e-8
    rewards_grouped = torch.as_tensor(rewards, dtype=torch.float64)
    num_generations = rewards_grouped.shape[1]
    mean_grouped = rewards_grouped.mean(dim=1, keepdim=True)
    std_pop = rewards_grouped.std(dim=1, unbiased=False, keepdim=True).clamp_min(eps)
    z = (rewards_grouped - mean_grouped) / std_pop
    c = torch.full((rewards_grouped.shape[0],), float(constraints), dtype=torch.float64).clamp_min(1.0)
    half = torch.full_like(c, 0.5)
    goal_std = torch.sqrt((1.0 * num_generations) / (4.0 * c)).clamp_min(eps)
    goal_mu = torch.maximum(half, mean_grouped.squeeze(1))
    delta_raw = (rewards_grouped - goal_mu.unsqueeze(1)) / goal_std.unsqueeze(1)

    def shape(v: torch.Tensor) -> torch.Tensor:
        t = torch.tanh(beta * v)
        return torch.where(v >= 0, lam_pos * t, lam_neg * t)

    return ((1.0 - alpha) * shape(z) + alpha * shape(delta_raw)).numpy()


@pytest.mark.parametrize("constraints", [1, 3])
def test_mdp_grpo_equals_the_release_on_a_fixed_batch(constraints: int) -> None:
    # Satisfied fractions of C checks, with a 0 and a 1 in the batch (our [0, 1] map is then the identity).
    g = 4
    r = np.array([[0, 1, 2, 3], [3, 3, 3, 3], [0, 0, 0, 0], [1, 1, 2, 1]], dtype=float) / 3.0
    knobs = {"alpha": 0.2, "beta": 0.8, "lambda_pos": 2.0, "lambda_neg": 1.25}  # full_pipeline.sh
    ours = mdp_grpo(r[..., None], [], goal_count=constraints, **knobs)
    np.testing.assert_allclose(ours, _release_dual_anchor(r, constraints, **{
        "alpha": 0.2, "beta": 0.8, "lam_pos": 2.0, "lam_neg": 1.25}), atol=1e-12)
    assert ours.shape == (4, g)


def test_mdp_grpo_zero_variance_groups_get_a_finite_goal_signal() -> None:
    """z-scores give nothing in a group of equal values; the goal anchor pushes a group that
    fails everywhere down (away from what it does) and leaves one at the batch's best alone."""
    x = np.array([[[0.0, 0.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0]],   # reward 0 everywhere, cost 0
                  [[1.0, 0.0], [1.0, 0.0], [1.0, 0.0], [1.0, 0.0]],   # reward 1 everywhere
                  [[0.0, 1.0], [1.0, 0.0], [0.0, 1.0], [1.0, 0.0]]])  # mixed
    adv = mdp_grpo(x, [0.5])
    assert np.all(np.isfinite(adv))
    np.testing.assert_array_equal(scadv(x, [0.5])[:2], 0.0)  # GRPO's z-scores: nothing
    # Failing group: reward delta = (0 - 1/2) / sqrt(4 / 4) = -1/2 -> alpha PT(-1/2); its cost (0,
    # the batch's best) at the anchor max(1/2, 1) = 1 -> 0.
    expected = 0.2 * 1.8 * math.tanh(0.8 * -0.5)
    np.testing.assert_allclose(adv[0], expected)
    np.testing.assert_allclose(adv[1], 0.0, atol=1e-15)
    # Bounded: |A| <= sum_j |c_j| max(lambda_+, lambda_-).
    assert np.all(np.abs(adv) <= 1.5 * 1.8)


def test_prospect_shaping_is_bounded_and_loss_averse() -> None:
    v = np.linspace(-50, 50, 101)
    pt = prospect(v)
    assert pt.max() <= 1.25 and pt.min() >= -1.8
    np.testing.assert_allclose(prospect(np.array([0.5, -0.5])), [1.25 * math.tanh(0.4), -1.8 * math.tanh(0.4)])


def test_mdp_costs_are_shaped_as_losses_when_high() -> None:
    # One cost varying alone: the sample with the higher cost gets the negative side (lambda_- = 1.8).
    x = np.array([[[1.0, 0.0], [1.0, 1.0]]])
    adv = mdp_grpo(x, [1.0], alpha=0.0)
    np.testing.assert_allclose(adv[0], [1.25 * math.tanh(0.8), -1.8 * math.tanh(0.8)])


def test_new_aggregators_have_finite_effective_weights_and_dispatch_from_the_config() -> None:
    x = np.random.default_rng(57).normal(size=(6, 8, 3))
    x[0] = 1.0  # a group without signal
    for name in ("corr", "mdp"):
        w = effective_weights(x, [0.3, 2.0], AdvantageSpec(name))
        assert np.all(np.isfinite(w)) and np.all(w >= 0), name
    cfg = make_config("standard", aggregator="mdp", mdp_alpha=0.5, prospect_lambda_neg=3.0)
    np.testing.assert_allclose(
        compute_advantages(x, [0.3, 2.0], cfg.advantage_spec), mdp_grpo(x, [0.3, 2.0], alpha=0.5, lambda_neg=3.0)
    )
    with pytest.raises(ValueError, match="mdp_alpha=1.5"):
        make_config("standard", mdp_alpha=1.5)
    with pytest.raises(ValueError, match="prospect_beta"):
        make_config("standard", prospect_beta=0.0)
    # ScRew stays what it was: the new options leave the old aggregators alone.
    np.testing.assert_allclose(compute_advantages(x, [0.3, 2.0], cfg.updated({"aggregator": "screw"}).advantage_spec),
                               screw(x, [0.3, 2.0]))
