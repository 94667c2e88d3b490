"""The GRPO policy loss, in small torch functions.

Shapes: ``N`` samples (episodes or completions) of up to ``T`` steps (actions or tokens);
per-step log-probabilities ``[N, T]``, a validity ``mask`` ``[N, T]`` (bool) and one
advantage per sample ``adv`` ``[N]`` (GRPO gives every step of a sample its sample's
advantage).

Clipped surrogate (PPO; GRPO), per step with ``r_t = exp(logp_t - logp_old_t)``:

    pg_loss_clipped = - mean_t min(r_t A, clip(r_t, 1 - eps_low, 1 + eps_high) A)

``eps_high > eps_low`` is the asymmetric "clip-higher" of DAPO. The sequence-level option
(GSPO) uses one ratio per sample, ``s = exp(mean_t (logp_t - logp_old_t))``.

Mu-GRPO's negative-advantage veto (arXiv 2605.17570): for a sample with ``A < 0``, the
steps *after* the first step whose ratio leaves ``[1 - eps_low, 1 + eps_high]`` get no
update: once the policy has moved away from the sampled trajectory, later steps of a
bad sample no longer describe what the policy would do, and pushing them down further
only destroys probability mass that stale data cannot judge. A vetoed step's term is
set to 0 but still counts in the averaging denominator, so the veto drops updates and
re-weights nothing else: every kept step's gradient is the one it has without the veto.

``approx_kl`` (logged) is the k3 estimate of ``KL(pi_old || pi)`` from old-policy samples,
``(r - 1) - log r`` (Schulman 2020), the form PPO (and the PPO-Lagrangian baseline) logs.

KL to a frozen reference uses the k3 estimator (Schulman 2020; DeepSeekMath):
``kl_t = exp(ref_t - logp_t) - (ref_t - logp_t) - 1 >= 0``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

__all__ = [
    "LOSS_AGGREGATIONS",
    "PolicyLossTerms",
    "kl_k3",
    "linear_categorical_grads",
    "linear_log_softmax",
    "log_softmax_columns",
    "matmul",
    "masked_mean",
    "negative_advantage_veto",
    "pg_loss_clipped",
    "policy_loss",
]

#: How per-step terms are averaged: over every valid step of the minibatch (``token``,
#: DAPO), per sample then over samples (``sequence``, the original GRPO), or summed and
#: divided by ``N * T`` (``sum``, Dr. GRPO: no length normalization).
LOSS_AGGREGATIONS: tuple[str, ...] = ("token", "sequence", "sum")


def masked_mean(values: torch.Tensor, mask: torch.Tensor, agg: str = "token") -> torch.Tensor:
    """Average ``values`` ``[N, T]`` over the valid steps ``mask`` as ``agg`` says."""
    m = mask.to(values.dtype)
    if agg == "token":
        return (values * m).sum() / m.sum().clamp_min(1.0)
    if agg == "sequence":
        per_sample = (values * m).sum(dim=1) / m.sum(dim=1).clamp_min(1.0)
        return per_sample.mean()
    if agg == "sum":
        return (values * m).sum() / max(values.numel(), 1)
    raise ValueError(f"unknown loss aggregation {agg!r}; choose one of {list(LOSS_AGGREGATIONS)}")


def negative_advantage_veto(
    ratio: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor, eps_low: float, eps_high: float
) -> torch.Tensor:
    """Mu-GRPO: the mask with the steps after the first out-of-region ratio removed (A < 0 only).

    Returns a bool ``[N, T]``; computed without gradient. A step is *out* when its ratio
    is outside ``[1 - eps_low, 1 + eps_high]``; for a sample with ``A < 0`` every step
    strictly after its first out step is dropped. The out (trigger) step itself is kept,
    with the clipped surrogate's usual gradient: none when ``r < 1 - eps_low`` (the clip
    binds), ``r A`` when ``r > 1 + eps_high`` (``min`` picks the unclipped ``r A < 0``),
    as it would have without the veto.
    """
    with torch.no_grad():
        out = ((ratio < 1.0 - eps_low) | (ratio > 1.0 + eps_high)) & mask
        seen_before = (torch.cumsum(out.to(torch.int64), dim=1) - out.to(torch.int64)) > 0
        vetoed = seen_before & (adv < 0).unsqueeze(1)
        return mask & ~vetoed


def pg_loss_clipped(
    logp: torch.Tensor,
    logp_old: torch.Tensor,
    adv: torch.Tensor,
    mask: torch.Tensor,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    ratio_level: str = "step",
    agg: str = "token",
    veto: bool = False,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Clipped surrogate loss and diagnostics (``clip_frac``, ``approx_kl``, ``veto_frac``).

    ``ratio_level="step"``: per-step ratios ``r_t`` (PPO/GRPO). ``"sequence"``: one ratio per
    sample ``s = exp(mean_t log r_t)`` (GSPO), broadcast to its steps. ``veto`` zeroes the
    terms of the steps :func:`negative_advantage_veto` drops (judged on the per-step
    ratios) and keeps ``mask`` as the averaging denominator, so no kept step changes weight.
    """
    if ratio_level not in ("step", "sequence"):
        raise ValueError(f"unknown ratio_level {ratio_level!r}; choose 'step' or 'sequence'")
    m = mask.to(logp.dtype)
    log_ratio = (logp - logp_old) * m
    if ratio_level == "sequence":
        seq_log_ratio = log_ratio.sum(dim=1) / m.sum(dim=1).clamp_min(1.0)
        ratio = torch.exp(seq_log_ratio).unsqueeze(1).expand_as(logp)
    else:
        ratio = torch.exp(log_ratio)
    a = adv.unsqueeze(1)
    surrogate = ratio * a
    surrogate_clipped = torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high) * a
    per_step = torch.minimum(surrogate, surrogate_clipped)
    kept = mask
    if veto:
        kept = negative_advantage_veto(torch.exp(log_ratio), adv, mask, eps_low, eps_high)
        per_step = torch.where(kept, per_step, torch.zeros_like(per_step))
    # Denominator from ``mask``, not ``kept``: a vetoed step must not raise the others' weight.
    pg_loss = -masked_mean(per_step, mask, agg)
    with torch.no_grad():
        clipped = (surrogate_clipped < surrogate) & mask
        stats = {
            "clip_frac": masked_mean(clipped.to(logp.dtype), mask),
            # k3 estimate of KL(old || new) from old-policy samples: (r - 1) - log r, r = new / old.
            "approx_kl": masked_mean(torch.expm1(log_ratio) - log_ratio, mask),
            "veto_frac": 1.0 - kept.sum() / mask.sum().clamp_min(1),
        }
    return pg_loss, stats


def kl_k3(logp: torch.Tensor, logp_ref: torch.Tensor) -> torch.Tensor:
    """Per-step k3 estimate of ``KL(pi || pi_ref)``: ``exp(d) - d - 1`` with ``d = ref - logp``."""
    d = logp_ref - logp
    return torch.exp(d) - d - 1.0


@dataclass
class PolicyLossTerms:
    """The pieces of the policy loss: ``loss = pg_loss + kl_coef kl - entropy_coef entropy``."""

    loss: torch.Tensor
    pg_loss: torch.Tensor
    kl: torch.Tensor
    entropy: torch.Tensor
    clip_frac: torch.Tensor
    approx_kl: torch.Tensor
    veto_frac: torch.Tensor


def policy_loss(
    logp: torch.Tensor,
    logp_old: torch.Tensor,
    adv: torch.Tensor,
    mask: torch.Tensor,
    entropy: torch.Tensor,
    logp_ref: torch.Tensor | None = None,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    ratio_level: str = "step",
    agg: str = "token",
    veto: bool = False,
    kl_coef: float = 0.0,
    entropy_coef: float = 0.0,
    kl_coef_neg: float | None = None,
) -> PolicyLossTerms:
    """The full GRPO loss ``pg_loss_clipped + kl_coef * KL(pi || pi_ref) - entropy_coef * H``.

    With ``kl_coef_neg`` the KL coefficient is per sample, ``kl_coef_neg`` where ``A < 0`` and
    ``kl_coef`` elsewhere (MDP-GRPO's asymmetric KL, arXiv 2606.06058: held closer to the
    reference on what it pushes down); the logged ``kl`` stays the unweighted mean.
    """
    pg, stats = pg_loss_clipped(logp, logp_old, adv, mask, eps_low, eps_high, ratio_level, agg, veto)
    ent = masked_mean(entropy, mask, agg)
    loss = pg - entropy_coef * ent
    if logp_ref is not None:
        per_step = kl_k3(logp, logp_ref)
        kl = masked_mean(per_step, mask, agg)
        if kl_coef_neg is None:
            loss = loss + kl_coef * kl
        else:
            beta = torch.where(adv < 0, kl_coef_neg, kl_coef).to(per_step.dtype)
            loss = loss + masked_mean(beta[:, None] * per_step, mask, agg)
    else:
        kl = torch.zeros((), dtype=logp.dtype)
    return PolicyLossTerms(loss, pg, kl, ent, stats["clip_frac"], stats["approx_kl"], stats["veto_frac"])



#: OpenBLAS runs a product of more multiply-adds than this (its default threshold) on
#: several threads, which ignore torch's thread setting and spin on a busy machine:
#: :func:`matmul` splits larger products into pieces of at most this size.
NUMPY_MATMUL_MAX = 262_144


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` in single-threaded pieces: rows of ``a`` split (exact), or else the
    inner dimension split and the partial products summed."""
    m, k = a.shape
    cols = b.shape[1]
    if m * k * cols <= NUMPY_MATMUL_MAX:
        return a @ b
    if m >= k:
        step = max(1, NUMPY_MATMUL_MAX // (k * cols))
        return np.concatenate([a[i : i + step] @ b for i in range(0, m, step)])
    step = max(1, NUMPY_MATMUL_MAX // (m * cols))
    out = a[:, :step] @ b[:step]
    for i in range(step, k, step):
        out += a[:, i : i + step] @ b[i : i + step]
    return out


def log_softmax_columns(z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(log_softmax, softmax)`` of logits ``z`` ``[A, M]``, one column per step (``z`` is
    overwritten). Actions run down the columns because numpy reduces a short last axis
    row by row, about 20x slower than across rows."""
    z -= z.max(axis=0)
    e = np.exp(z)
    total = e.sum(axis=0)
    return z - np.log(total), e / total


def linear_log_softmax(x: np.ndarray, weight: np.ndarray, bias: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(log_softmax(z), softmax(z))``, each ``[A, M]``, of the logits ``z = W x + b`` of the rows of ``x`` ``[M, D]``."""
    return log_softmax_columns(np.ascontiguousarray((matmul(x, np.ascontiguousarray(weight.T)) + bias).T))


def linear_categorical_grads(
    x: np.ndarray,
    actions: np.ndarray,
    logp_old: np.ndarray,
    adv: np.ndarray,
    weight: np.ndarray,
    layer_weight: np.ndarray,
    layer_bias: np.ndarray,
    logp_ref: np.ndarray | None = None,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    kl_coef: float = 0.0,
    entropy_coef: float = 0.0,
) -> tuple[np.ndarray, np.ndarray, list[float]]:
    """:func:`policy_loss` (per-step ratios, no veto) and its exact gradient for a linear softmax policy.

    The ``M`` valid steps come flat (numpy, float32): features ``x`` ``[M, D]``,
    ``actions``, ``logp_old``, their sample's advantage ``adv`` and averaging weight
    ``weight`` (each ``[M]``; the weight is ``1 / M`` for ``token``, ``1 / (n len_i)`` for
    ``sequence``, ``1 / (n T)`` for ``sum``). With logits ``z = W x + b``,
    ``l = log_softmax(z)``, ``p = exp(l)``, ``H = -sum_a p_a l_a`` and ``r = exp(l_a - logp_old)``:

        loss = -sum w min(r A, clip(r) A) - c_H sum w H + c_KL sum w (e^{ref - l_a} - (ref - l_a) - 1)
        g    = dloss/dl_a = -w A r [r A <= clip(r) A] + c_KL w (1 - e^{ref - l_a})
        dloss/dz = g onehot(a) - p (g - c_H w (l + H))

    (``dH/dz = -p (l + H)``, ``dl_a/dz = onehot(a) - p``; a tie of the two surrogates,
    inside the clip range, passes the whole gradient, as autograd's half + half), so
    ``dW = dz^T x`` and ``db = sum_steps dz``: a few array calls in place of autograd's graph.

    Returns ``(grad_W [A, D], grad_b [A], stats)`` with ``stats`` = ``[loss, pg_loss, kl,
    entropy, clip_frac, approx_kl]`` (``clip_frac`` and ``approx_kl`` averaged per step).
    """
    cols = np.arange(len(actions))
    logp_all, probs = linear_log_softmax(x, layer_weight, layer_bias)
    logp = logp_all[actions, cols]
    entropy = -(probs * logp_all).sum(axis=0)
    log_ratio = logp - logp_old
    ratio = np.exp(log_ratio)
    surrogate = ratio * adv
    surrogate_clipped = np.minimum(np.maximum(ratio, 1.0 - eps_low), 1.0 + eps_high) * adv
    g = np.where(surrogate <= surrogate_clipped, (-weight * adv) * ratio, np.float32(0.0))
    pg_loss = -float(np.minimum(surrogate, surrogate_clipped) @ weight)
    ent = float(entropy @ weight)
    loss = pg_loss - entropy_coef * ent
    kl = 0.0
    if logp_ref is not None:
        d = logp_ref - logp
        exp_d = np.exp(d)
        kl = float((exp_d - d - 1.0) @ weight)
        loss += kl_coef * kl
        g = g + (kl_coef * weight) * (1.0 - exp_d)
    grad_z = probs * ((entropy_coef * weight) * (logp_all + entropy) - g)
    grad_z[actions, cols] += g
    clip_frac = float(np.count_nonzero(surrogate_clipped < surrogate)) / len(cols)
    approx_kl = float((np.expm1(log_ratio) - log_ratio).sum()) / len(cols)
    return matmul(grad_z, x), grad_z.sum(axis=1), [loss, pg_loss, kl, ent, clip_frac, approx_kl]
