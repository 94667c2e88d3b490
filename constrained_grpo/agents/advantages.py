"""Group advantage estimators, aggregators and effective weights, as pure numpy functions.

Arrays are shaped ``[P, G, C]``: P starts (prompts, or reset seeds), G samples per start
(a *group*), C = 1 + K components (component 0 = return R, components 1..K = episodic
costs C_k). Multipliers ``lambdas`` have shape ``(K,)``.

Notation (docs/papers.md): ``Z_j`` is component j standardized within its group,
``Z_j = (x_j - mean_j) / std_j``, and 0 where ``std_j = 0`` (never NaN). Standard
deviations are population ones (``ddof=0``); TRL's ``torch.std`` is the unbiased one,
larger by ``sqrt(G / (G - 1))``, a constant factor that the clipped loss absorbs.

The *signed component weights* of an aggregator are

    c = [lambda_R, -lambda_1, ..., -lambda_K]

(reward pushed up, costs pushed down), with ``lambda_R = reward_weight`` (1 by default).

Estimators (operate along the group axis, any trailing shape):

- ``zscore``     GRPO (DeepSeekMath 2024):        A = (x - mean) / std
- ``mean``       Dr. GRPO:                        A = x - mean
- ``batch_std``  TRL ``scale_rewards="batch"``:   A = (x - mean_group) / std_batch
- ``softmax``    SoftmaxGRPO (arXiv 2608.09271):  A = G softmax(x / tau) - 1
- ``maxrl``      MaxRL (arXiv 2602.02710):        A = (x' - mean) / mean on x' = x - min(0, min_batch x)
- ``is``         IS-GRPO (derived, no public code): A = (x - mean) / mean_p(std_p), the expected
                 update of z-scores on starts drawn with probability proportional to their std

Aggregators (``[P, G, 1+K]`` -> ``[P, G]``):

- ``reward``  reward only (unconstrained GRPO):   A = E(R)
- ``screw``   scalarize rewards, then estimate:   S = sum_j c_j x_j;  A = E(S)
- ``scadv``   Constrained GRPO (arXiv 2602.05863): A = sum_j c_j E(x_j)  [/ (1 + sum_k lambda_k)]
- ``gdpo``    GDPO (arXiv 2601.05242):            A = batchnorm(sum_j c_j Z_j)
- ``dara``    DARA density weights:               A = batchnorm(sum_j w_j c_j Z_j)  (symmetric)
                                                  A = batchnorm(sum_j [w_j (c_j Z_j)_+ + (c_j Z_j)_-])
- ``corr``    CorrGRPO (arXiv 2609.36820):        A = sum_j c_j (x_j - mean_j) / sqrt(sum_jl rho_jl + eps)
- ``mdp``     MDP-GRPO (arXiv 2606.06058):        A = sum_j |c_j| [(1 - alpha) PT(z_j) + alpha PT(delta_j)]
                                                  on the signed components sign(c_j) x_j

``eps`` (the config's ``adv_eps``) is added to every standard deviation that divides:
the group std of ``zscore``, the batch std of ``batch_std``, and for GDPO and DARA both
the per-component group std of ``Z_j = (x_j - mean) / (std + eps)`` and the std of the
final ``batchnorm``. ``mean`` and ``softmax`` have no std; ``maxrl`` adds it to its mean.

Effective weights (:func:`effective_weights`) say how much each component moves the
advantage, per unit of its within-group standard deviation. For ScRew with z-scores
this is Theorem 4.1 of arXiv 2602.05863: ``w_j = lambda_j sigma_j / sigma_S``; the shared
denominator ``sigma_S`` makes every weight depend on every multiplier. For ScAdv with
z-scores it is ``lambda_j`` (divided by ``1 + sum lambda`` when normalized).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

__all__ = [
    "AGGREGATORS",
    "ESTIMATORS",
    "MDP_DEFAULTS",
    "AdvantageSpec",
    "batch_normalize",
    "batch_std",
    "compute_advantages",
    "corrgrpo",
    "dara",
    "dara_weights",
    "effective_weights",
    "estimator_slope",
    "gdpo",
    "group_std",
    "is_grpo",
    "is_prompt_probs",
    "maxrl",
    "mdp_grpo",
    "mean_only",
    "prospect",
    "reward_only",
    "scadv",
    "screw",
    "signed_weights",
    "softmax_adv",
    "standardize",
    "zscore",
]

#: A group std at most this (times the scale of the values) counts as 0: a group of equal
#: values must give advantage 0, and float round-off in the mean (mean([0.1] * 3) is not
#: exactly 0.1) would otherwise be blown up to +-1 by a division by ~1e-17.
ZERO_STD_RTOL = 1e-9

Estimator = Callable[..., np.ndarray]


def _zero_tol(x: np.ndarray, axis: int | tuple[int, ...]) -> np.ndarray:
    """Threshold below which a std over ``axis`` counts as zero."""
    scale = np.abs(x).max(axis=axis, keepdims=True) if x.size else np.zeros(())
    return ZERO_STD_RTOL * np.maximum(scale, 1.0)


def _deviation_std(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(x - mean_g x, std_g x)`` over the group axis (axis 1), the std kept as a size-1
    axis: the operations of ``np.std`` in its order (so the same floats), done once."""
    g = x.shape[1]
    deviation = x - x.sum(axis=1, keepdims=True) / g
    return deviation, np.sqrt((deviation * deviation).sum(axis=1, keepdims=True) / g)


def group_std(x: np.ndarray) -> np.ndarray:
    """Population std over the group axis (axis 1), kept as a size-1 axis."""
    return _deviation_std(x)[1]


def _centred_std(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(x - mean_g x, varies, std_g x)``: the centred values, exactly 0 in a group of
    equal values; ``varies`` is True where the group's std is not zero (``[P, 1, ...]``)."""
    deviation, std = _deviation_std(x)
    varies = std > _zero_tol(x, 1)
    return np.where(varies, deviation, 0.0), varies, std


def _centred(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(x - mean_g x, varies)`` of :func:`_centred_std`."""
    centred, varies, _ = _centred_std(x)
    return centred, varies


# --- group estimators -----------------------------------------------------------------


def zscore(x: np.ndarray, eps: float = 0.0) -> np.ndarray:
    """GRPO: ``(x - mean_g x) / (std_g x + eps)``; 0 in a group whose std is 0."""
    x = np.asarray(x, dtype=np.float64)
    centred, varies, std = _centred_std(x)
    return np.where(varies, centred / np.where(varies, std + eps, 1.0), 0.0)


def standardize(x: np.ndarray, eps: float = 0.0) -> np.ndarray:
    """``Z = (x - mean_g x) / (std_g x + eps)``: each component z-scored within its group
    (0 where its std is 0)."""
    return zscore(x, eps=eps)


def mean_only(x: np.ndarray, eps: float = 0.0) -> np.ndarray:
    """Dr. GRPO: ``x - mean_g x`` (no std division; ``eps`` unused)."""
    return _centred(np.asarray(x, dtype=np.float64))[0]


def batch_std(x: np.ndarray, eps: float = 0.0) -> np.ndarray:
    """``(x - mean_g x) / (std_batch x + eps)``: group baseline, one scale for the batch.

    The batch std is taken over all P x G samples (axes 0 and 1), per trailing component.
    """
    x = np.asarray(x, dtype=np.float64)
    centred, _ = _centred(x)
    std = np.std(x, axis=(0, 1), keepdims=True)
    varies = std > _zero_tol(x, (0, 1))
    return np.where(varies, centred / np.where(varies, std + eps, 1.0), 0.0)


def softmax_adv(x: np.ndarray, tau: float = 1.0, eps: float = 0.0) -> np.ndarray:
    """SoftmaxGRPO: ``G softmax_g(x / tau) - 1``.

    Sums to 0 within a group. As ``tau -> inf``, ``G softmax(x/tau) - 1 ~ (x - mean x)/tau``
    (centred REINFORCE); as ``tau -> 0`` all weight goes to the group's best samples.
    A group of equal values gives exactly 0.
    """
    if not tau > 0:
        raise ValueError(f"softmax temperature tau={tau!r} must be > 0")
    x = np.asarray(x, dtype=np.float64)
    g = x.shape[1]
    z = x / tau
    z = z - z.max(axis=1, keepdims=True)  # stable exp
    p = np.exp(z)
    p /= p.sum(axis=1, keepdims=True)
    adv = g * p - 1.0
    varies = group_std(x) > _zero_tol(x, 1)
    return np.where(varies, adv, 0.0)


def maxrl(x: np.ndarray, eps: float = 0.0) -> np.ndarray:
    """MaxRL: ``A = (x' - mean_g x') / (mean_g x' + eps)`` on ``x' = x - min(0, min_batch x)``.

    MaxRL is defined for non-negative rewards such as success indicators, where dividing
    by the success rate ``mean x`` weights hard starts up (the gradient of
    ``log E[x]``); such inputs are used as they are. Inputs that go below 0 (a step
    penalty, a scalarized ``R - lambda C``) are shifted, per component, by their minimum
    over the whole batch (all ``P x G`` samples): the worst sample of the batch counts as
    a failure (``x' = 0``) and the estimator is MaxRL's on ``log E[x - min x]``. Without
    the shift a group with ``mean <= 0`` would lose its signal and one with a mean just
    above 0 would be blown up without bound. On ``x' >= 0`` every advantage lies in
    ``[-1, G - 1]``; a group whose values are all equal gets 0.
    """
    x = np.asarray(x, dtype=np.float64)
    if x.size:
        x = x - np.minimum(0.0, x.min(axis=(0, 1), keepdims=True))
    mean = x.mean(axis=1, keepdims=True)
    centred, varies = _centred(x)
    positive = varies & (mean > 0)
    return np.where(positive, centred / np.where(positive, mean + eps, 1.0), 0.0)


def is_prompt_probs(x: np.ndarray) -> np.ndarray:
    """IS-GRPO's proposal over starts: ``q_p = sigma_p / sum_r sigma_r`` (``[P, 1, ...]``).

    ``sigma_p`` is start p's group std (0 for a group of equal values); every ``q_p`` is 0
    where no group varies.
    """
    x = np.asarray(x, dtype=np.float64)
    _, varies, std = _centred_std(x)
    sigma = np.where(varies, std, 0.0)
    total = sigma.sum(axis=0, keepdims=True)
    return np.where(total > 0, sigma / np.where(total > 0, total, 1.0), 0.0)


def is_grpo(x: np.ndarray, eps: float = 0.0) -> np.ndarray:
    """IS-GRPO: ``A_p = (x_p - mean_g x_p) / (mean_r sigma_r + eps)``.

    GRPO's z-score of start p moves the policy by ``g_p / sigma_p`` in expectation
    (``g_p`` the policy gradient of start p's expected value): over starts drawn uniformly
    its mean ``(1/P) sum_p g_p / sigma_p`` weighs each start by ``1 / sigma_p`` and is not
    the full gradient ``(1/P) sum_p g_p``. Drawing the P starts of the update with
    replacement with probability ``q_p = sigma_p / sum_r sigma_r`` (:func:`is_prompt_probs`)
    and applying each drawn start's z-score once per draw is an importance-sampling
    estimate of the full gradient: start p is drawn ``n_p`` times, ``E[n_p] = P q_p``, and
    ``E[sum_p n_p g_p / sigma_p] = (P / sum_r sigma_r) sum_p g_p``, the full gradient
    scaled by ``1 / mean_r sigma_r`` (a REINFORCE step with a step size that adapts across
    iterations). This function returns that expected update, ``A_p = P q_p Z_p``, which
    equals the formula above: the conditional expectation of the drawn estimate given the
    batch: the same mean, without the resampling's variance. The mean of the stds runs over all P
    starts (axis 0), per trailing component; 0 where no group varies.
    """
    x = np.asarray(x, dtype=np.float64)
    centred, varies, std = _centred_std(x)
    sigma_bar = np.where(varies, std, 0.0).mean(axis=0, keepdims=True)
    positive = sigma_bar > 0
    return np.where(positive, centred / np.where(positive, sigma_bar + eps, 1.0), 0.0)


#: Group advantage estimators by name.
ESTIMATORS: dict[str, Estimator] = {
    "zscore": zscore,
    "mean": mean_only,
    "batch_std": batch_std,
    "softmax": softmax_adv,
    "maxrl": maxrl,
    "is": is_grpo,
}


def _estimate(x: np.ndarray, estimator: str, eps: float, tau: float) -> np.ndarray:
    try:
        fn = ESTIMATORS[estimator]
    except KeyError:
        raise ValueError(f"unknown estimator {estimator!r}; choose one of {sorted(ESTIMATORS)}") from None
    if estimator == "softmax":
        return fn(x, tau=tau, eps=eps)
    return fn(x, eps=eps)


def estimator_slope(x: np.ndarray, estimator: str = "zscore", eps: float = 0.0, tau: float = 1.0) -> np.ndarray:
    """Per-group least-squares slope of the estimator's output on the centred input.

    ``s_p = sum_i A_pi (x_pi - xbar_p) / sum_i (x_pi - xbar_p)^2`` for ``x`` of shape
    ``[P, G, ...]``; 0 in a group whose values are all equal. For a linear estimator
    ``A = g (x - xbar)`` this is ``g`` exactly: ``1/std`` (z-score), ``1`` (mean),
    ``1/std_batch`` (batch-std), ``1/mean`` (MaxRL); for SoftmaxGRPO it is about ``1/tau``.
    """
    x = np.asarray(x, dtype=np.float64)
    return _slope(x, estimator, eps, tau, _centred_std(x))


def _slope(
    x: np.ndarray, estimator: str, eps: float, tau: float, stats: tuple[np.ndarray, np.ndarray, np.ndarray]
) -> np.ndarray:
    """:func:`estimator_slope` of float64 ``x`` given its :func:`_centred_std`."""
    centred, varies_kept, std = stats
    if estimator == "zscore":  # zscore's own operations on the statistics at hand
        adv = np.where(varies_kept, centred / np.where(varies_kept, std + eps, 1.0), 0.0)
    else:
        adv = _estimate(x, estimator, eps, tau)
    ss = np.sum(centred**2, axis=1)
    varies = varies_kept[:, 0]
    return np.where(varies, np.sum(adv * centred, axis=1) / np.where(varies, ss, 1.0), 0.0)


def batch_normalize(a: np.ndarray, eps: float = 0.0) -> np.ndarray:
    """``(a - mean_batch a) / (std_batch a + eps)`` over every entry; 0 if the batch is constant."""
    a = np.asarray(a, dtype=np.float64)
    std = a.std()
    if not std > ZERO_STD_RTOL * max(float(np.max(np.abs(a))) if a.size else 0.0, 1.0):
        return np.zeros_like(a)
    return (a - a.mean()) / (std + eps)


# --- aggregators ----------------------------------------------------------------------


def signed_weights(lambdas: np.ndarray, reward_weight: float = 1.0) -> np.ndarray:
    """``c = [lambda_R, -lambda_1, ..., -lambda_K]``: reward pushed up, costs down."""
    lam = np.asarray(lambdas, dtype=np.float64).reshape(-1)
    return np.concatenate([[float(reward_weight)], -lam])


def _check_components(x: np.ndarray, lambdas: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    x = np.asarray(x, dtype=np.float64)
    lam = np.asarray(lambdas, dtype=np.float64).reshape(-1)
    if x.ndim != 3:
        raise ValueError(f"components must be shaped [P, G, 1+K], got shape {x.shape}")
    if x.shape[2] != 1 + lam.size:
        raise ValueError(
            f"components have {x.shape[2]} entries (1 reward + {x.shape[2] - 1} costs) but "
            f"{lam.size} multiplier(s) were given; pass one multiplier per cost"
        )
    return x, lam


def reward_only(x: np.ndarray, estimator: str = "zscore", eps: float = 0.0, tau: float = 1.0) -> np.ndarray:
    """Unconstrained GRPO: ``A = E(R)``, the costs ignored."""
    x = np.asarray(x, dtype=np.float64)
    return _estimate(x[..., 0], estimator, eps, tau)


def screw(
    x: np.ndarray,
    lambdas: np.ndarray,
    estimator: str = "zscore",
    reward_weight: float = 1.0,
    eps: float = 0.0,
    tau: float = 1.0,
) -> np.ndarray:
    """ScRew (standard practice): ``S = lambda_R R - sum_k lambda_k C_k``, then ``A = E(S)``.

    With z-scores, ``A_i = (S_i - mean S) / std S``: one shared scale ``std S`` that depends
    on every multiplier and on the within-group correlations of the components.
    """
    x, lam = _check_components(x, lambdas)
    s = x @ signed_weights(lam, reward_weight)
    return _estimate(s, estimator, eps, tau)


def scadv(
    x: np.ndarray,
    lambdas: np.ndarray,
    estimator: str = "zscore",
    normalize: bool = False,
    reward_weight: float = 1.0,
    eps: float = 0.0,
    tau: float = 1.0,
) -> np.ndarray:
    """ScAdv (Constrained GRPO, arXiv 2602.05863): estimate each component, then scalarize.

        A = lambda_R E(R) - sum_k lambda_k E(C_k)          [/ (1 + sum_k lambda_k) if normalize]

    With z-scores, ``E(x_j) = Z_j``: the weight on each component is its multiplier alone.
    """
    x, lam = _check_components(x, lambdas)
    adv_reward = _estimate(x[..., 0], estimator, eps, tau)  # [P, G]
    adv_costs = _estimate(x[..., 1:], estimator, eps, tau)  # [P, G, K]
    adv = reward_weight * adv_reward - adv_costs @ lam
    if normalize:
        adv = adv / (1.0 + lam.sum())
    return adv


def gdpo(x: np.ndarray, lambdas: np.ndarray, reward_weight: float = 1.0, eps: float = 0.0) -> np.ndarray:
    """GDPO (arXiv 2601.05242): ``A = batchnorm(sum_j c_j Z_j)``.

    Each component is z-scored in its group (decoupled normalization), the weighted sum
    is then normalized once over the whole batch; ``eps`` is added to both stds.
    """
    x, lam = _check_components(x, lambdas)
    return batch_normalize(standardize(x, eps) @ signed_weights(lam, reward_weight), eps)


def dara_weights(x: np.ndarray, max_weight: float = 5.0) -> tuple[np.ndarray, np.ndarray]:
    """DARA density weights ``(w, pi)`` of each component, each shaped ``(1+K,)``.

    ``pi_j`` = fraction of groups in which component j has a nonzero advantage (its values
    are not all equal); ``w_j = min(max_weight, sqrt(max_i pi_i / pi_j))`` (``max_weight``
    where ``pi_j = 0``): a sparse signal is weighted up, by at most ``max_weight``.
    """
    x = np.asarray(x, dtype=np.float64)
    varies = group_std(x)[:, 0, :] > _zero_tol(x, 1)[:, 0, :]  # [P, C]
    pi = varies.mean(axis=0)
    with np.errstate(divide="ignore"):
        ratio = np.where(pi > 0, np.sqrt(pi.max() / np.where(pi > 0, pi, 1.0)), np.inf)
    return np.minimum(max_weight, ratio), pi


def dara(
    x: np.ndarray,
    lambdas: np.ndarray,
    symmetric: bool = True,
    max_weight: float = 5.0,
    reward_weight: float = 1.0,
    eps: float = 0.0,
) -> np.ndarray:
    """DARA: density-weighted sum of signed standardized components, batch-normalized.

    With ``u_j = c_j Z_j`` and DARA weights ``w_j`` (:func:`dara_weights`):
    symmetric ``sum_j w_j u_j``; asymmetric ``sum_j [w_j max(u_j, 0) + min(u_j, 0)]``
    (only the good side of a sparse signal is amplified); then ``batchnorm``. ``eps`` is
    added to the stds of ``Z_j`` and of the batchnorm.
    """
    x, lam = _check_components(x, lambdas)
    w, _ = dara_weights(x, max_weight)
    u = standardize(x, eps) * signed_weights(lam, reward_weight)  # [P, G, 1+K]
    if symmetric:
        total = (w * u).sum(axis=-1)
    else:
        total = (w * np.maximum(u, 0.0) + np.minimum(u, 0.0)).sum(axis=-1)
    return batch_normalize(total, eps)


#: CorrGRPO's epsilon inside the square root of its denominator (verl's ``epsilon`` default
#: in ``compute_grpo_covariance_coefficient_outcome_advantage``); ``adv_eps`` is added to it.
CORR_EPS = 1e-6


def _corr_sums(x: np.ndarray, c: np.ndarray) -> np.ndarray:
    """``sum_jl rho_jl`` per group ``[P]`` of the weighted components ``c_j x_j``.

    ``rho`` is the Pearson correlation within the group; a component that is constant in the
    group (or weighted 0) has a zero row and column (verl's finite extension). Since
    ``rho(c_j x_j, c_l x_l) = s_j s_l rho(x_j, x_l)`` with ``s = sign(c)``, the sum is
    ``sum_i (sum_j s_j Z_ij)^2 / G``, the variance of the signed z-scores' sum: never below 0.
    """
    s = np.sign(c)
    u = (standardize(x) * s).sum(axis=-1)  # [P, G]
    return (u * u).mean(axis=1)


def corrgrpo(x: np.ndarray, lambdas: np.ndarray, reward_weight: float = 1.0, eps: float = CORR_EPS) -> np.ndarray:
    """CorrGRPO (arXiv 2609.36820): the centred weighted sum over the root of the summed
    within-group correlations of the weighted components,

        A_i = sum_j c_j (x_ij - mean_g x_j) / sqrt(max(0, sum_jl rho_jl) + eps)

    where GRPO on the sum ``S = sum_j c_j x_j`` divides by ``std S = sqrt(sum_jl c_j c_l
    Cov_jl)``. Transcribed from ``compute_grpo_covariance_coefficient_outcome_advantage``
    (verl/trainer/ppo/core_algos.py of github HKUST-KnowComp/CorrGRPO, commit 3586915),
    with the signed weights ``c = [lambda_R, -lambda_1, ..., -lambda_K]`` as its reward
    weights. The denominator is dimensionless (between 0 and the number of varying
    components): the advantage keeps the units of the components, and a large-scale
    component cannot shrink the others' advantages as it does through ``std S``. Where
    the signed z-scores cancel sample by sample (a reward and a cost that rise together,
    weighted +1 and -lambda) the sum is 0 and the advantage is the centred sum over
    ``sqrt(eps)``, as in the source.
    """
    x, lam = _check_components(x, lambdas)
    c = signed_weights(lam, reward_weight)
    centred, _ = _centred(x)
    numerator = centred @ c  # [P, G]
    return numerator / np.sqrt(_corr_sums(x, c) + eps)[:, None]


def prospect(v: np.ndarray, beta: float = 0.8, lambda_pos: float = 1.25, lambda_neg: float = 1.8) -> np.ndarray:
    """MDP-GRPO's prospect-theoretic shaping: ``lambda_+ tanh(beta v)`` for ``v >= 0``,
    ``lambda_- tanh(beta v)`` for ``v < 0``: bounded by ``lambda_+`` above and
    ``-lambda_-`` below; ``lambda_- > lambda_+`` weighs a loss above a gain of the same size
    (Kahneman and Tversky's loss aversion). Defaults of the release's ``training/train.py``
    (github m-salmani78/MDP-GRPO)."""
    t = np.tanh(beta * np.asarray(v, dtype=np.float64))
    return np.where(t >= 0, lambda_pos * t, lambda_neg * t)


def _dual_anchor(
    u: np.ndarray, alpha: float, beta: float, lambda_pos: float, lambda_neg: float, goal_count: float
) -> np.ndarray:
    """``(1 - alpha) PT(z) + alpha PT(delta)`` of ``u`` ``[P, G, ...]`` (higher is better)."""
    g = u.shape[1]
    z = zscore(u)
    lo = u.min(axis=(0, 1), keepdims=True)
    span = u.max(axis=(0, 1), keepdims=True) - lo
    has_span = span > _zero_tol(u, (0, 1))
    r = np.where(has_span, (u - lo) / np.where(has_span, span, 1.0), 0.5)  # in [0, 1]
    goal_mean = np.maximum(0.5, r.mean(axis=1, keepdims=True))
    goal_std = math.sqrt(g / (4.0 * goal_count))
    delta = np.where(has_span, (r - goal_mean) / goal_std, 0.0)
    shaped_z, shaped_delta = (prospect(v, beta, lambda_pos, lambda_neg) for v in (z, delta))
    return (1.0 - alpha) * shaped_z + alpha * shaped_delta


def mdp_grpo(
    x: np.ndarray,
    lambdas: np.ndarray,
    reward_weight: float = 1.0,
    alpha: float = 0.2,
    beta: float = 0.8,
    lambda_pos: float = 1.25,
    lambda_neg: float = 1.8,
    goal_count: float = 1.0,
) -> np.ndarray:
    """MDP-GRPO's dual-anchor, prospect-shaped advantage (arXiv 2606.06058), per component:

        A = sum_j |c_j| D(u_j),   u_j = sign(c_j) x_j  (reward up, costs down: higher is better)
        D(u) = (1 - alpha) PT(z) + alpha PT(delta)
        z = (u - mean_g u) / std_g u                       (0 in a group of equal values)
        r = (u - min_batch u) / (max_batch u - min_batch u)  in [0, 1]
        delta = (r - max(1/2, mean_g r)) / sqrt(G / (4 C))

    with ``PT`` :func:`prospect`. Transcribed from the release's GRPO trainer
    (github m-salmani78/trl, branch MDP-GRPO, trl/trainer/grpo_trainer.py, the
    ``advantage_mode == "dual_anchor"`` branch: ``dual_anchor_reward_is_normalized``,
    ``dual_anchor_goal_mu_mode="max_half_and_group_mean"``, prospect shaping on both
    anchors). The source's reward is the satisfied fraction of C instruction checks, in
    [0, 1]; here each component is one signal (``goal_count`` C = 1) mapped onto [0, 1] by
    its range over the batch (the worst sample 0, the best 1; a component constant over
    the batch gets delta = 0). The goal anchor is what restores a gradient where z-scores
    have none: a group whose samples are all equal has z = 0 but delta < 0 when it sits
    below the anchor (all failing: pushed away from what it does), delta = 0 when it is at
    the batch's best. ``alpha = 0.2`` is the release's ``full_pipeline.sh``.
    """
    x, lam = _check_components(x, lambdas)
    c = signed_weights(lam, reward_weight)
    u = x * np.where(c < 0, -1.0, 1.0)
    d = _dual_anchor(u, alpha, beta, lambda_pos, lambda_neg, goal_count)  # [P, G, 1+K]
    return d @ np.abs(c)


#: MDP-GRPO's knobs at the release's values (github m-salmani78/MDP-GRPO): alpha from
#: ``full_pipeline.sh``, the prospect shaping's from ``training/train.py`` (loss-averse).
MDP_DEFAULTS: dict[str, float] = {
    "mdp_alpha": 0.2,
    "prospect_beta": 0.8,
    "prospect_lambda_pos": 1.25,
    "prospect_lambda_neg": 1.8,
}

#: Aggregator names (the function each dispatches to is in :func:`compute_advantages`).
AGGREGATORS: tuple[str, ...] = ("reward", "screw", "scadv", "gdpo", "dara", "corr", "mdp")


@dataclass(frozen=True)
class AdvantageSpec:
    """The advantage knobs of a config, gathered for the pure functions below."""

    aggregator: str = "scadv"
    estimator: str = "zscore"
    normalize: bool = False
    reward_weight: float = 1.0
    eps: float = 0.0
    tau: float = 1.0
    dara_symmetric: bool = True
    dara_max_weight: float = 5.0
    mdp_alpha: float = MDP_DEFAULTS["mdp_alpha"]
    prospect_beta: float = MDP_DEFAULTS["prospect_beta"]
    prospect_lambda_pos: float = MDP_DEFAULTS["prospect_lambda_pos"]
    prospect_lambda_neg: float = MDP_DEFAULTS["prospect_lambda_neg"]

    def __post_init__(self) -> None:
        if self.aggregator not in AGGREGATORS:
            raise ValueError(f"unknown aggregator {self.aggregator!r}; choose one of {list(AGGREGATORS)}")
        if self.estimator not in ESTIMATORS:
            raise ValueError(f"unknown estimator {self.estimator!r}; choose one of {sorted(ESTIMATORS)}")


def _mdp_knobs(spec: AdvantageSpec) -> tuple[float, float, float, float]:
    return spec.mdp_alpha, spec.prospect_beta, spec.prospect_lambda_pos, spec.prospect_lambda_neg


def compute_advantages(x: np.ndarray, lambdas: np.ndarray, spec: AdvantageSpec) -> np.ndarray:
    """Advantages ``[P, G]`` of components ``x`` ``[P, G, 1+K]`` under ``spec``."""
    if spec.aggregator == "reward":
        return reward_only(x, spec.estimator, spec.eps, spec.tau)
    if spec.aggregator == "screw":
        return screw(x, lambdas, spec.estimator, spec.reward_weight, spec.eps, spec.tau)
    if spec.aggregator == "scadv":
        return scadv(x, lambdas, spec.estimator, spec.normalize, spec.reward_weight, spec.eps, spec.tau)
    if spec.aggregator == "gdpo":
        return gdpo(x, lambdas, spec.reward_weight, spec.eps)
    if spec.aggregator == "corr":
        return corrgrpo(x, lambdas, spec.reward_weight, CORR_EPS + spec.eps)
    if spec.aggregator == "mdp":
        return mdp_grpo(x, lambdas, spec.reward_weight, *_mdp_knobs(spec))
    return dara(x, lambdas, spec.dara_symmetric, spec.dara_max_weight, spec.reward_weight, spec.eps)


def effective_weights(x: np.ndarray, lambdas: np.ndarray, spec: AdvantageSpec) -> np.ndarray:
    """Weight ``(1+K,)`` the aggregator puts on each component, per unit of its group std.

    In group p, the advantage moves by ``w_pj`` per within-group standard deviation of
    component j (first order; exact for linear estimators):

    - ``reward``: ``w_p0 = sigma_p0 g_p(R)``, 0 for costs;
    - ``screw``:  ``w_pj = |c_j| sigma_pj g_p(S)``; with z-scores ``g_p(S) = 1 / sigma_pS``,
      i.e. ``lambda_j sigma_j / sigma_S`` (Thm 4.1 of arXiv 2602.05863);
    - ``scadv``:  ``w_pj = |c_j| sigma_pj g_p(x_j)`` [/ (1 + sum lambda)]; ``lambda_j`` with z-scores;
    - ``gdpo``:   ``w_pj = |c_j| s_pj / (sigma_batch(sum_i c_i Z_i) + eps)``;
    - ``corr``:   ``w_pj = |c_j| sigma_pj / sqrt(sum_il rho_pil + eps)`` (exact: CorrGRPO is linear);
    - ``mdp``:    ``w_pj = |c_j| sigma_pj m_pj`` with ``m_pj`` the least-squares slope of the
      dual anchor ``D(u_j)`` on the centred ``u_j = sign(c_j) x_j`` in group p;
    - ``dara``:   ``w_pj = |c_j| m_j s_pj / (sigma_batch(total) + eps)``, ``m_j = w_j`` (symmetric)
      or the least-squares slope ``w_j f_j + (1 - f_j)`` with ``f_j`` the share of ``u_j^2``
      on its positive side (asymmetric),

    where ``g_p`` is :func:`estimator_slope`, ``c`` the signed weights and
    ``s_pj = sigma_pj / (sigma_pj + eps)`` (1 when ``eps = 0``). The batch value is
    the mean of ``w_pj`` over the groups in which component j varies (0 if it varies in none):
    the weight a component gets whenever it carries signal.
    """
    x, lam = _check_components(x, lambdas)
    c = np.abs(signed_weights(lam, spec.reward_weight))
    stats = _centred_std(x)
    _, varies_kept, std = stats
    sigma = std[:, 0, :]  # [P, C]
    varies = varies_kept[:, 0, :]
    if spec.aggregator == "reward":
        w = np.zeros_like(sigma)
        w[:, 0] = sigma[:, 0] * estimator_slope(x[..., 0], spec.estimator, spec.eps, spec.tau)
    elif spec.aggregator == "screw":
        s = x @ signed_weights(lam, spec.reward_weight)
        w = c * sigma * estimator_slope(s, spec.estimator, spec.eps, spec.tau)[:, None]
    elif spec.aggregator == "scadv":
        w = c * sigma * _slope(x, spec.estimator, spec.eps, spec.tau, stats)
        if spec.normalize:
            w = w / (1.0 + lam.sum())
    elif spec.aggregator == "corr":
        sums = _corr_sums(x, signed_weights(lam, spec.reward_weight))
        w = c * sigma / np.sqrt(sums + CORR_EPS + spec.eps)[:, None]
    elif spec.aggregator == "mdp":
        # The dual anchor is not linear in x: its least-squares slope on the centred
        # (signed) component in each group, as :func:`estimator_slope` does for estimators.
        signs = np.where(signed_weights(lam, spec.reward_weight) < 0, -1.0, 1.0)
        d = _dual_anchor(x * signs, *_mdp_knobs(spec), 1.0)
        centred = stats[0] * signs
        ss = np.sum(centred**2, axis=1)
        slope = np.where(varies, np.sum(d * centred, axis=1) / np.where(varies, ss, 1.0), 0.0)
        w = c * sigma * slope
    elif spec.aggregator == "gdpo":
        shrink = sigma / np.where(varies, sigma + spec.eps, 1.0)
        total_std = float((standardize(x, spec.eps) @ signed_weights(lam, spec.reward_weight)).std())
        w = c * shrink / (total_std + spec.eps) if total_std > 0 else np.zeros_like(sigma)
    else:
        shrink = sigma / np.where(varies, sigma + spec.eps, 1.0)
        dw, _ = dara_weights(x, spec.dara_max_weight)
        u = standardize(x, spec.eps) * signed_weights(lam, spec.reward_weight)
        if spec.dara_symmetric:
            m = dw
            total = (dw * u).sum(axis=-1)
        else:
            pos = np.sum(np.maximum(u, 0.0) ** 2, axis=(0, 1))
            tot = np.sum(u**2, axis=(0, 1))
            f = np.where(tot > 0, pos / np.where(tot > 0, tot, 1.0), 0.0)
            m = dw * f + (1.0 - f)
            total = (dw * np.maximum(u, 0.0) + np.minimum(u, 0.0)).sum(axis=-1)
        total_std = float(total.std())
        w = c * m * shrink / (total_std + spec.eps) if total_std > 0 else np.zeros_like(sigma)
    counts = varies.sum(axis=0)
    sums = np.where(varies, w, 0.0).sum(axis=0)
    return np.where(counts > 0, sums / np.maximum(counts, 1), 0.0)
