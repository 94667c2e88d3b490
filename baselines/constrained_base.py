"""Pieces shared by the constrained baselines beyond PPO-Lagrangian (``trpo-lag``, ``cpo``,
``pcpo``, ``focops``, ``cup``, ``p3o``, ``rcpo``).

Every one of them is a :class:`~constrained_grpo.baselines.ppo_lagrangian.PPOLagrangian`:
the same rollout, cost critic (one head per constraint), reward and cost GAE, episodic
cost estimate ``Jhat_k`` and multiplier rule; only the advantage mix and the policy
update differ. :class:`ConstrainedPolicyOptimization` runs that update as

1. ``_update_actor()``: the method's own actor step (first-order minibatch loop or a
   trust-region step);
2. the critics, where the actor step did not train them (:meth:`fit_critics`): ``n_epochs``
   passes of minibatch Adam on ``vf_coef (V - R)^2 + cost_vf_coef mean_k (V_ck - R_ck)^2``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.distributions import Distribution
from stable_baselines3.common.utils import explained_variance
from torch.nn import functional as F

from constrained_grpo.nonfinite import NonFiniteUpdateError
from constrained_grpo.baselines.buffers import CostRolloutBufferSamples
from constrained_grpo.baselines.config import PPOLagConfig
from constrained_grpo.baselines.ppo_lagrangian import PPOLagrangian, actor_parameters, clip_grad_norms_

__all__ = [
    "ConstrainedPolicyOptimization",
    "Forward",
    "actor_parameters",
    "kl_per_state",
    "lag_model_kwargs",
]


def lag_model_kwargs(config: PPOLagConfig) -> dict[str, Any]:
    """The cost keywords of :class:`PPOLagrangian` that ``config`` sets (as the agent passes them)."""
    return dict(
        cost_gamma=config.cost_gamma,
        cost_gae_lambda=config.cost_gae_lambda,
        cost_vf_coef=config.cost_vf_coef,
        cost_net_arch=config.cost_net_arch,
        cost_advantage_norm=config.cost_advantage_norm,
        cost_window=config.cost_window,
        policy_optimism=config.policy_optimism,
        augmented_weights=config.augmented_weights,
    )


def kl_per_state(p: Distribution, q: Distribution, over_actions: str = "sum") -> th.Tensor:
    """``KL(p(.|s) || q(.|s))`` per state, shape ``(B,)``: categorical, or a diagonal
    Gaussian summed over its action dimensions (the KL of the joint distribution), or
    averaged over them with ``over_actions="mean"`` (OmniSafe 0.5.0's trust region takes
    ``kl_divergence(Normal, Normal).mean()`` over states and dimensions alike)."""
    if over_actions not in ("sum", "mean"):
        raise ValueError(f"over_actions={over_actions!r}: use 'sum' or 'mean'")
    kl = th.distributions.kl_divergence(p.distribution, q.distribution)  # type: ignore[arg-type]
    if kl.ndim == 1:
        return kl
    return kl.sum(dim=-1) if over_actions == "sum" else kl.mean(dim=-1)


@dataclass
class Forward:
    """One forward pass of the policy on a minibatch."""

    dist: Distribution
    log_prob: th.Tensor
    entropy: th.Tensor | None
    values: th.Tensor
    cost_values: th.Tensor


class ConstrainedPolicyOptimization(PPOLagrangian):
    """A :class:`PPOLagrangian` whose policy update is ``_update_actor`` plus the critics'
    regression (module docstring). Subclasses set the advantage mix (``_mix_advantages``)
    and the actor step."""

    #: Whether ``_update_actor`` already trains the critics (first-order minibatch loops do).
    actor_step_trains_critics: bool = True

    # --- helpers ----------------------------------------------------------------------
    def _actions(self, data: CostRolloutBufferSamples) -> th.Tensor:
        if isinstance(self.action_space, spaces.Discrete):
            return data.actions.long().flatten()
        return data.actions

    def forward(self, data: CostRolloutBufferSamples, policy: Any = None) -> Forward:
        """The policy's distribution, log-probabilities of the taken actions, entropy and
        both critics on ``data`` (``policy``: another policy of the same shape)."""
        policy = self.policy if policy is None else policy
        latent_pi, latent_vf, vf_features = policy._latents(data.observations)
        dist = policy._get_action_dist_from_latent(latent_pi)
        actions = self._actions(data)
        return Forward(
            dist, dist.log_prob(actions), dist.entropy(), policy.value_net(latent_vf).flatten(),
            policy.cost_value_net(vf_features),
        )

    def frozen_distribution(self) -> Callable[[Any], Any]:
        """``data -> pi_frozen(. | data.observations)`` of a copy of the current policy that no
        update touches (the reference of a KL term), without gradients."""
        frozen = self.frozen_policy()

        def reference(data: Any) -> Any:
            with th.no_grad():
                return frozen.get_distribution(data.observations)

        return reference

    def frozen_policy(self) -> Any:
        """A copy of the current policy whose weights no update touches (the old policy)."""
        # SB3 keeps the last distribution (a non-leaf tensor) on the policy; deepcopy refuses it.
        action_dist = getattr(self.policy, "action_dist", None)
        last = getattr(action_dist, "distribution", None)
        if last is not None:
            action_dist.distribution = None  # type: ignore[union-attr]
        try:
            old = copy.deepcopy(self.policy)
        finally:
            if last is not None:
                action_dist.distribution = last  # type: ignore[union-attr]
        old.set_training_mode(False)
        for p in old.parameters():
            p.requires_grad_(False)
        return old

    def critic_loss(self, out: Forward, data: CostRolloutBufferSamples) -> tuple[th.Tensor, th.Tensor]:
        """(reward value loss, cost value loss: mean over the K heads)."""
        return F.mse_loss(out.values, data.returns), F.mse_loss(out.cost_values, data.cost_returns)

    def _step(self, loss: th.Tensor, what: str) -> None:
        if not th.isfinite(loss):
            raise NonFiniteUpdateError(
                f"{type(self).__name__} update {self._n_updates + 1}: non-finite {what} {loss.item()}; "
                "training stopped before the step"
            )
        sb3_parameters, cost_parameters = self._split_parameters()
        self.policy.optimizer.zero_grad()
        loss.backward()
        clip_grad_norms_((sb3_parameters, cost_parameters), self.max_grad_norm)
        self.policy.optimizer.step()

    def fit_critics(self) -> tuple[float, float]:
        """``n_epochs`` passes of minibatch Adam on both critics' squared TD(lambda) errors;
        returns the mean (value loss, cost value loss)."""
        value_losses, cost_losses = [], []
        for _ in range(self.n_epochs):
            for data in self.rollout_buffer.get(self.batch_size):
                # The critics alone: no actor pass (its parameters get no gradient here).
                value_loss = F.mse_loss(self.policy.predict_values(data.observations).flatten(), data.returns)
                cost_loss = F.mse_loss(self.policy.predict_cost_values(data.observations), data.cost_returns)
                self._step(self.vf_coef * value_loss + self.cost_vf_coef * cost_loss, "critic loss")
                value_losses.append(value_loss.item())
                cost_losses.append(cost_loss.item())
        return float(np.mean(value_losses)), float(np.mean(cost_losses))

    def minibatch_loop(
        self,
        policy_loss: Callable[[Forward, CostRolloutBufferSamples], th.Tensor],
        kl_reference: Callable[[CostRolloutBufferSamples], Distribution] | None = None,
        train_critics: bool = True,
        kl_stop: float | None = None,
    ) -> dict[str, float]:
        """``n_epochs`` passes of minibatch Adam on ``policy_loss(out, data)`` (plus the
        critics' losses when ``train_critics``); stops after a pass whose full-batch
        ``KL(ref || new)`` exceeds ``kl_stop`` (OmniSafe's ``kl_early_stop``:
        ``kl_divergence(old, new).sum(-1).mean()`` over the epoch's data after each pass),
        ``ref`` being ``kl_reference`` or else the policy as the loop starts."""
        pg, vl, cl, kls, ents = [], [], [], [], []
        full = reference = None
        if kl_stop is not None:
            full = self.full_batch()
            with th.no_grad():
                # SB3 reuses one distribution object per policy: keep this one's tensors apart.
                reference = copy.copy(kl_reference(full) if kl_reference is not None else self.policy.get_distribution(full.observations))
        passes = 0
        for _ in range(self.n_epochs):
            epoch_kl = []
            for data in self.rollout_buffer.get(self.batch_size):
                out = self.forward(data)
                loss = policy_loss(out, data)
                pg.append(loss.item())
                if out.entropy is not None:
                    entropy_loss = -out.entropy.mean()
                    ents.append(entropy_loss.item())
                    loss = loss + self.ent_coef * entropy_loss
                if train_critics:
                    value_loss, cost_loss = self.critic_loss(out, data)
                    vl.append(value_loss.item())
                    cl.append(cost_loss.item())
                    loss = loss + self.vf_coef * value_loss + self.cost_vf_coef * cost_loss
                self._step(loss, "loss")
                with th.no_grad():
                    if kl_reference is None:
                        log_ratio = out.log_prob - data.old_log_prob
                        epoch_kl.append(((th.exp(log_ratio) - 1) - log_ratio).mean().item())
                    else:
                        epoch_kl.append(kl_per_state(kl_reference(data), out.dist).mean().item())
            kls.extend(epoch_kl)
            self._n_updates += 1
            passes += 1
            if full is not None:
                with th.no_grad():
                    kl = kl_per_state(reference, self.policy.get_distribution(full.observations)).mean().item()
                if kl > kl_stop:  # type: ignore[operator]
                    break
        record = {"policy_gradient_loss": float(np.mean(pg)), "approx_kl": float(np.mean(kls)), "update_passes": float(passes)}
        if ents:
            record["entropy_loss"] = float(np.mean(ents))
        if vl:
            record.update(value_loss=float(np.mean(vl)), cost_value_loss=float(np.mean(cl)))
        return record

    # --- the update ---------------------------------------------------------------------
    def _update_actor(self) -> dict[str, float]:
        """The method's actor step; returns losses to log (``train/<key>``)."""
        raise NotImplementedError

    def train(self) -> None:
        self.policy.set_training_mode(True)
        self._update_learning_rate(self.policy.optimizer)
        record = self._update_actor()
        if not self.actor_step_trains_critics:
            record["value_loss"], record["cost_value_loss"] = self.fit_critics()
        buf = self.rollout_buffer
        for key, value in record.items():
            self.logger.record(f"train/{key}", value)
        self.logger.record("train/explained_variance", explained_variance(buf.values.flatten(), buf.returns.flatten()))
        self.logger.record(
            "train/cost_explained_variance",
            explained_variance(buf.cost_values.reshape(-1), buf.cost_returns.reshape(-1)),
        )
        self.logger.record("train/n_updates", self._n_updates, exclude="tensorboard")

    def mean_episode_length(self) -> float:
        """``L``: the rollout's steps over its episode starts (at least one start), the
        factor between a per-step cost surrogate and an episodic cost."""
        starts = self.rollout_buffer.episode_starts
        return float(starts.size) / max(float(starts.sum()), 1.0)

    def full_batch(self) -> CostRolloutBufferSamples:
        """The whole rollout as one batch."""
        return next(self.rollout_buffer.get(None))

