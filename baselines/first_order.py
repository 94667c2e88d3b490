"""First-order constrained baselines: ``focops``, ``cup``, ``p3o`` and ``rcpo``.

All are :class:`~constrained_grpo.baselines.constrained_base.ConstrainedPolicyOptimization`
models: PPO-Lagrangian's rollout, cost critic (K heads), reward and cost GAE and episodic
cost estimate ``Jhat_k``, with the method's own advantage and actor loss, trained by
``n_epochs`` passes of minibatch Adam. The losses are plain functions of tensors
(``focops_loss``, ``ppo_clip_loss``, ``cup_projection_loss``, ``p3o_loss``), unit-tested
on hand-worked numbers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch as th
from stable_baselines3.common.vec_env import VecEnv

from constrained_grpo.baselines.buffers import CostRolloutBufferSamples
from constrained_grpo.baselines.config import PPOLagConfig
from constrained_grpo.baselines.constrained_base import (
    ConstrainedPolicyOptimization,
    Forward,
    kl_per_state,
    lag_model_kwargs,
)
from constrained_grpo.baselines.ppo_lagrangian import PPOLagrangian, lagrangian_advantage, normalize_advantage
from constrained_grpo.constraints import Constraint
from constrained_grpo.multipliers import Multiplier

__all__ = [
    "CUP",
    "CUPConfig",
    "FOCOPS",
    "FOCOPSConfig",
    "P3O",
    "P3OConfig",
    "RCPO",
    "RCPOConfig",
    "cup_projection_loss",
    "focops_loss",
    "focops_target",
    "p3o_loss",
    "ppo_clip_loss",
]


# --- the losses (unit-tested by hand) ---------------------------------------------------
def ppo_clip_loss(ratio: th.Tensor, adv: th.Tensor, clip: float) -> th.Tensor:
    """PPO's clipped surrogate, as a loss: ``-mean(min(ratio A, clip(ratio, 1-eps, 1+eps) A))``."""
    return -th.min(ratio * adv, th.clamp(ratio, 1 - clip, 1 + clip) * adv).mean()


def focops_loss(kl: th.Tensor, ratio: th.Tensor, adv: th.Tensor, lam: float, eta: float) -> th.Tensor:
    """FOCOPS's actor loss (Zhang, Vuong & Ross 2020, eq. 11, OmniSafe ``FOCOPS``):

        mean_s [ (KL(pi_theta || pi_old)[s] - ratio A / lambda) * 1{KL[s] <= eta} ]

    ``A = A_r - sum_k nu_k A_ck`` (here normalised by ``1 + sum nu``); states whose KL
    already exceeds ``eta`` drop out (the KL-bounded target)."""
    mask = (kl.detach() <= eta).to(kl.dtype)
    return ((kl - ratio * adv / lam) * mask).mean()


def focops_target(old_probs: np.ndarray, adv: np.ndarray, lam: float) -> np.ndarray:
    """The non-parametric optimum FOCOPS fits, per state:
    ``pi*(a|s) = pi_old(a|s) exp(A(s,a) / lambda) / Z(s)``."""
    logits = np.log(old_probs) + np.asarray(adv, float) / lam
    logits -= logits.max(axis=-1, keepdims=True)
    w = np.exp(logits)
    return w / w.sum(axis=-1, keepdims=True)


def cup_projection_loss(kl: th.Tensor, ratio: th.Tensor, cost_adv: th.Tensor, nu: th.Tensor, coef: float) -> th.Tensor:
    """CUP's projection step (Yang et al. 2022, OmniSafe ``CUP``):

        mean_s [ coef * ratio * sum_k nu_k A_ck + KL(pi_theta || pi_{k+1/2})[s] ],

    ``ratio = pi_theta / pi_old`` (the rollout policy), ``coef = (1 - gamma lambda_GAE) / (1 - gamma)``."""
    return (coef * ratio * (cost_adv @ nu) + kl).mean()


def p3o_loss(ratio: th.Tensor, adv: th.Tensor, cost_adv: th.Tensor, violation: th.Tensor, clip: float, kappa: float) -> tuple[th.Tensor, th.Tensor]:
    """P3O's exact-penalty loss (Zhang et al. 2022, eq. 13):

        L = L_clip(A_r) + kappa * sum_k max(0, Lc_k + c_k),
        Lc_k = mean(max(ratio A_ck, clip(ratio, 1-eps, 1+eps) A_ck))

    (the cost surrogate clipped pessimistically, per step), ``c_k`` the violation in the
    same per-step units (the caller passes ``(Jhat_k - d_k) / L``). Returns ``(L, active)``
    where ``active_k = 1{Lc_k + c_k > 0}``: the penalty is off once the predicted cost
    change ``Lc_k`` covers the violation (its subgradient weight is kappa where on)."""
    clipped = th.clamp(ratio, 1 - clip, 1 + clip)[:, None]
    lc = th.max(ratio[:, None] * cost_adv, clipped * cost_adv).mean(dim=0)
    inner = lc + violation
    return ppo_clip_loss(ratio, adv, clip) + kappa * th.relu(inner).sum(), (inner > 0).to(inner.dtype)


# --- configs --------------------------------------------------------------------------
@dataclass(frozen=True)
class _FirstOrderConfig(PPOLagConfig):
    def model_class(self) -> type[PPOLagrangian]:
        raise NotImplementedError

    def model_options(self) -> dict[str, Any]:
        return {}

    def build_model(self, env: VecEnv, constraints: Sequence[Constraint], multiplier: Multiplier, sb3_kwargs: dict[str, Any]) -> PPOLagrangian:
        return self.model_class()(env, constraints, multiplier, **self.model_options(), **lag_model_kwargs(self), **sb3_kwargs)


@dataclass(frozen=True)
class FOCOPSConfig(_FirstOrderConfig):
    """``focops``: PPO-Lagrangian's config plus FOCOPS's temperature and KL bound (paper and
    OmniSafe defaults: lambda 1.5, eta 0.02); an iteration's passes stop once the full-batch
    KL exceeds ``target_kl`` 0.02 (the authors' code and OmniSafe's FOCOPS.yaml)."""

    target_kl: float | None = 0.02

    focops_lam: float = 1.5
    """Temperature lambda of the target ``pi_old exp(A / lambda)``."""
    focops_eta: float = 0.02
    """Per-state KL bound eta: states beyond it leave the loss."""

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("focops_lam", "focops_eta"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name}={value!r} must be a finite number > 0")

    def model_class(self) -> type[PPOLagrangian]:
        return FOCOPS

    def model_options(self) -> dict[str, Any]:
        return {"focops_lam": self.focops_lam, "focops_eta": self.focops_eta}


@dataclass(frozen=True)
class CUPConfig(_FirstOrderConfig):
    """``cup``: PPO-Lagrangian's config (the projection's coefficient follows from gamma
    and gae_lambda); both steps' passes stop once the full-batch KL exceeds ``target_kl``
    0.01 (OmniSafe's CUP.yaml)."""

    target_kl: float | None = 0.01

    def model_class(self) -> type[PPOLagrangian]:
        return CUP


@dataclass(frozen=True)
class P3OConfig(_FirstOrderConfig):
    """``p3o``: PPO-Lagrangian's config plus the penalty weight kappa (paper: 20)."""

    p3o_kappa: float = 20.0
    """Weight kappa of the exact penalty ``max(0, Lc_k + c_k)``."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not (math.isfinite(self.p3o_kappa) and self.p3o_kappa >= 0):
            raise ValueError(f"p3o_kappa={self.p3o_kappa!r} must be a finite number >= 0, e.g. 20")

    def model_class(self) -> type[PPOLagrangian]:
        return P3O

    def model_options(self) -> dict[str, Any]:
        return {"p3o_kappa": self.p3o_kappa}


@dataclass(frozen=True)
class RCPOConfig(_FirstOrderConfig):
    """``rcpo``: PPO-Lagrangian's config; the advantage is not divided by ``1 + sum lambda``."""

    def model_class(self) -> type[PPOLagrangian]:
        return RCPO


# --- algorithms -----------------------------------------------------------------------
def _reward_advantage_only(model: PPOLagrangian) -> None:
    buf = model.rollout_buffer
    shape = buf.reward_advantages.shape
    adv = normalize_advantage(buf.reward_advantages.reshape(-1), model.reward_advantage_norm)
    buf.advantages = adv.reshape(shape).astype(np.float32)


class FOCOPS(ConstrainedPolicyOptimization):
    """First Order Constrained Optimization in Policy Space (Zhang, Vuong & Ross 2020).

    The non-parametric solution of ``max_pi E[A_r] - sum nu_k E[A_ck]`` within KL delta is
    ``pi*(a|s) ∝ pi_old(a|s) exp(A(s,a) / lambda)`` with ``A = A_r - sum_k nu_k A_ck``;
    the policy is fitted to it by minimising :func:`focops_loss` (``KL(pi_theta || pi_old)``
    minus the importance-weighted advantage over lambda, on states within ``eta``). The
    multipliers nu_k (any K) follow the configured rule on ``Jhat_k - d_k`` (the paper:
    projected gradient ascent); the advantage is PPO-Lagrangian's
    ``(A_r - sum nu_k A_ck) / (1 + sum nu_k)`` (OmniSafe).
    """

    def __init__(self, *args: Any, focops_lam: float = 1.5, focops_eta: float = 0.02, **kwargs: Any):
        self.focops_lam = focops_lam
        self.focops_eta = focops_eta
        super().__init__(*args, **kwargs)

    def _update_actor(self) -> dict[str, float]:
        reference = self.frozen_distribution()

        def loss(out: Forward, data: CostRolloutBufferSamples) -> th.Tensor:
            kl = kl_per_state(out.dist, reference(data))
            ratio = th.exp(out.log_prob - data.old_log_prob)
            return focops_loss(kl, ratio, data.advantages, self.focops_lam, self.focops_eta)

        return self.minibatch_loop(loss, kl_reference=reference, kl_stop=self.target_kl)


class CUP(ConstrainedPolicyOptimization):
    """Constrained Update Projection (Yang, Ji, Tang et al. 2022; OmniSafe ``CUP``).

    Two steps per iteration:

    1. performance improvement: PPO's clipped surrogate on the reward advantage alone,
       ``pi_{k+1/2} = argmax E[min(ratio A_r, clip(ratio) A_r)]`` (:func:`ppo_clip_loss`),
       with the critics;
    2. projection: from ``pi_{k+1/2}``, minimise :func:`cup_projection_loss`,
       ``E[coef * ratio * sum_k nu_k A_ck + KL(pi_theta || pi_{k+1/2})]``, i.e. pull the
       policy back towards lower cost while staying near the improved policy.

    ``nu_k`` (any K) follow the configured multiplier rule on ``Jhat_k - d_k``.
    """

    def _mix_advantages(self) -> None:
        _reward_advantage_only(self)

    def _update_actor(self) -> dict[str, float]:
        clip = self.clip_range(self._current_progress_remaining)  # type: ignore[operator]

        def improve(out: Forward, data: CostRolloutBufferSamples) -> th.Tensor:
            return ppo_clip_loss(th.exp(out.log_prob - data.old_log_prob), data.advantages, clip)

        record = self.minibatch_loop(improve, kl_stop=self.target_kl)
        reference = self.frozen_distribution()  # pi_{k+1/2}, the improved policy
        nu = th.as_tensor(self.multiplier.values, dtype=th.float32)
        coef = (1 - self.gamma * self.gae_lambda) / (1 - self.gamma) if self.gamma < 1 else 1.0
        cost_norm = self.cost_advantage_norm

        def project(out: Forward, data: CostRolloutBufferSamples) -> th.Tensor:
            kl = kl_per_state(out.dist, reference(data))
            ratio = th.exp(out.log_prob - data.old_log_prob)
            cost_adv = data.cost_advantages
            if cost_norm != "none":  # per minibatch (the full-rollout norm would need a second pass)
                cost_adv = cost_adv - cost_adv.mean(dim=0)
                if cost_norm == "standardize":
                    cost_adv = cost_adv / (cost_adv.std(dim=0) + 1e-8)
            return cup_projection_loss(kl, ratio, cost_adv, nu, coef)

        if float(nu.sum()) > 0:
            ent, self.ent_coef = self.ent_coef, 0.0
            try:
                second = self.minibatch_loop(project, kl_reference=reference, train_critics=False, kl_stop=self.target_kl)
            finally:
                self.ent_coef = ent
            record["projection_loss"] = second["policy_gradient_loss"]
            record["projection_passes"] = second["update_passes"]
        return record


class P3O(ConstrainedPolicyOptimization):
    """Penalized Proximal Policy Optimization (Zhang, Zhang, Shen et al. 2022).

    Minimises the exact-penalty loss of :func:`p3o_loss`,
    ``L_clip(A_r) + kappa * sum_k max(0, Lc_k + (Jhat_k - d_k) / L)``, which for kappa
    beyond the optimal multipliers has the constrained optimum (any K). Both terms of the
    penalty are per step, as in the paper's eq. 13: ``Lc_k`` is a mean over steps, and the
    episodic violation ``Jhat_k - d_k`` is divided by ``L``, the rollout's mean episode
    length (the paper's ``(1 - gamma)(J_C - d)`` for discounted costs; CPO's ``b_k`` uses the
    same ``L`` the other way round). No multiplier is learned: ``multipliers`` record the
    penalty's weight ``kappa * 1{active}`` of the last minibatch.
    """

    def __init__(self, *args: Any, p3o_kappa: float = 20.0, **kwargs: Any):
        self.p3o_kappa = p3o_kappa
        super().__init__(*args, **kwargs)

    def _mix_advantages(self) -> None:
        _reward_advantage_only(self)

    def _update_multipliers(self, finished: list[np.ndarray]) -> None:
        self._estimate_costs(finished)  # the penalty weight kappa is fixed: no multiplier step

    def _update_actor(self) -> dict[str, float]:
        clip = self.clip_range(self._current_progress_remaining)  # type: ignore[operator]
        limits = np.array([c.limit for c in self.constraints])
        estimate = self.cost_estimate if self.cost_estimate is not None else np.zeros_like(limits)
        violation = th.as_tensor((np.asarray(estimate) - limits) / self.mean_episode_length(), dtype=th.float32)
        cost_norm = self.cost_advantage_norm
        active = th.zeros(self.n_costs)

        def loss(out: Forward, data: CostRolloutBufferSamples) -> th.Tensor:
            nonlocal active
            cost_adv = data.cost_advantages
            if cost_norm != "none":
                cost_adv = cost_adv - cost_adv.mean(dim=0)
                if cost_norm == "standardize":
                    cost_adv = cost_adv / (cost_adv.std(dim=0) + 1e-8)
            ratio = th.exp(out.log_prob - data.old_log_prob)
            value, active = p3o_loss(ratio, data.advantages, cost_adv, violation, clip, self.p3o_kappa)
            return value

        record = self.minibatch_loop(loss, kl_stop=self.target_kl)
        self.multiplier.values = (self.p3o_kappa * active.double().numpy()).astype(np.float64)
        return record


class RCPO(PPOLagrangian):
    """Reward Constrained Policy Optimization (Tessler, Mankowitz & Mannor 2019).

    PPO on the penalised reward ``r - sum_k lambda_k c_k``; GAE being linear in the
    reward, its advantage is ``A_r - sum_k lambda_k A_ck`` (our two critics standing for
    ``V - sum lambda_k V_ck``), without PPO-Lagrangian's division by ``1 + sum lambda``;
    ``lambda_k`` (any K) ascend on ``Jhat_k - d_k`` with the configured rule.
    """

    def _mix_advantages(self) -> None:
        buf = self.rollout_buffer
        shape = buf.reward_advantages.shape
        lam = self.multiplier.values
        mixed = lagrangian_advantage(
            buf.reward_advantages.reshape(-1),
            buf.cost_advantages.reshape(-1, self.n_costs),
            lam,
            reward_norm=self.reward_advantage_norm,
            cost_norm=self.cost_advantage_norm,
        ) * (1.0 + lam.sum())
        buf.advantages = mixed.reshape(shape).astype(np.float32)
