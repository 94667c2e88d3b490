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

Aggregators (``[P, G, 1+K]`` -> ``[P, G]``):

- ``reward``  reward only (unconstrained GRPO):   A = E(R)
- ``screw``   scalarize rewards, then estimate:   S = sum_j c_j x_j;  A = E(S)
- ``scadv``   Constrained GRPO (arXiv 2602.05863): A = sum_j c_j E(x_j)  [/ (1 + sum_k lambda_k)]
- ``gdpo``    GDPO (arXiv 2601.05242):            A = batchnorm(sum_j c_j Z_j)
- ``dara``    DARA density weights:               A = batchnorm(sum_j w_j c_j Z_j)  (symmetric)
                                                  A = batchnorm(sum_j [w_j (c_j Z_j)_+ + (c_j Z_j)_-])

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

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

__all__ = [
    "AGGREGATORS",
    "ESTIMATORS",
    "AdvantageSpec",
    "batch_normalize",
    "batch_std",
    "compute_advantages",
    "dara",
    "dara_weights",
    "effective_weights",
    "estimator_slope",
    "gdpo",
    "group_std",
    "maxrl",
    "mean_only",
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


#: Group advantage estimators by name.
ESTIMATORS: dict[str, Estimator] = {
    "zscore": zscore,
    "mean": mean_only,
    "batch_std": batch_std,
    "softmax": softmax_adv,
    "maxrl": maxrl,
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


#: Aggregator names (the function each dispatches to is in :func:`compute_advantages`).
AGGREGATORS: tuple[str, ...] = ("reward", "screw", "scadv", "gdpo", "dara")


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

    def __post_init__(self) -> None:
        if self.aggregator not in AGGREGATORS:
            raise ValueError(f"unknown aggregator {self.aggregator!r}; choose one of {list(AGGREGATORS)}")
        if self.estimator not in ESTIMATORS:
            raise ValueError(f"unknown estimator {self.estimator!r}; choose one of {sorted(ESTIMATORS)}")


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
