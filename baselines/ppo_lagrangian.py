"""PPO-Lagrangian on stable-baselines3 (SB3 2.9.2): SB3's PPO plus the cost machinery.

For ``max_pi J_r(pi)  s.t.  J_k(pi) <= d_k`` (k = 1..K) one iteration is

1. collect a rollout, storing each step's cost vector ``info["costs"]`` beside SB3's
   reward data (:class:`CostRolloutBuffer`); the cost critic's ``V_c(s_t)`` does not
   choose actions, so it is evaluated once on the whole rollout afterwards, and so are
   both critics' values of time-limit-truncated episodes' terminal observations;
2. reward GAE ``A_r`` and, per constraint, cost GAE ``A_ck``;
3. one multiplier step from ``Jhat_k``, the mean episodic cost of the episodes that
   ended in this rollout (the last ``cost_window`` episodes if none ended), with any
   rule of :mod:`constrained_grpo.multipliers` (dual ascent for PPO-Lag, PID for PID-Lag);
4. the actor's advantage, with normalised ``A_r`` and ``A_ck`` (one hook,
   :func:`lagrangian_advantage`, like OmniSafe's ``_compute_adv_surrogate``):

       A = (A_r - sum_k lambda_k A_ck) / (1 + sum_k lambda_k);

5. SB3's PPO update on ``A`` (clipped surrogate, reward value loss, entropy) with the
   cost value loss ``cost_vf_coef * mean_k (V_ck(s) - R_ck)^2`` on the cost TD(lambda)
   targets added to the same loss: one backward pass and one optimizer step per
   minibatch, so the cost critic adds little to an iteration's time.

``collect_rollouts`` and ``train`` follow SB3 2.9.2's code (``OnPolicyAlgorithm`` and
``PPO``); the lines marked ``cost:`` are ours, the rest is SB3's with its comments cut.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.type_aliases import MaybeCallback
from stable_baselines3.common.utils import explained_variance, obs_as_tensor
from stable_baselines3.common.vec_env import VecEnv
from torch.nn import functional as F

from constrained_grpo.nonfinite import NonFiniteUpdateError
from constrained_grpo.baselines.buffers import CostRolloutBuffer
from constrained_grpo.baselines.config import COST_ADVANTAGE_NORMS
from constrained_grpo.baselines.policies import CostActorCriticPolicy
from constrained_grpo.baselines.vec_env import GymVectorVecEnv
from constrained_grpo.constraints import Constraint, costs_from_info
from constrained_grpo.multipliers import Multiplier
from constrained_grpo.optimism import OptimisticStep

__all__ = ["PPOLagrangian", "actor_parameters", "clip_grad_norms_", "lagrangian_advantage", "normalize_advantage"]


def normalize_advantage(adv: np.ndarray, mode: str, eps: float = 1e-8) -> np.ndarray:
    """Normalise each column of ``adv`` ``(B, K)`` (or a vector) over the batch.

    ``standardize``: ``(a - mean) / std``, and 0 where ``std < eps`` (a constant
    component carries no signal: never a NaN); ``center``: ``a - mean``; ``none``: ``a``.
    """
    if mode not in COST_ADVANTAGE_NORMS:
        raise ValueError(f"normalisation {mode!r}; choose one of {list(COST_ADVANTAGE_NORMS)}")
    adv = np.asarray(adv, dtype=np.float64)
    if mode == "none":
        return adv
    centered = adv - adv.mean(axis=0)
    if mode == "center":
        return centered
    std = adv.std(axis=0)
    return np.where(std > eps, centered / np.where(std > eps, std, 1.0), 0.0)


def actor_parameters(policy: th.nn.Module) -> list[th.nn.Parameter]:
    """The policy's parameters minus both critics' (``mlp_extractor.value_net``,
    ``value_net``, ``cost_value_net``): the actor MLP, ``action_net`` and ``log_std``."""
    critic = {id(p) for name in ("value_net", "cost_value_net") for p in getattr(policy, name).parameters()}
    critic |= {id(p) for p in policy.mlp_extractor.value_net.parameters()}
    return [p for p in policy.parameters() if id(p) not in critic]


def lagrangian_advantage(
    adv_reward: np.ndarray,
    adv_costs: np.ndarray,
    multipliers: np.ndarray,
    reward_norm: str = "standardize",
    cost_norm: str = "standardize",
    reward_weight: float = 1.0,
) -> np.ndarray:
    """The actor's advantage ``(w A_r - sum_k lambda_k A_ck) / (w + sum_k lambda_k)``, ``w = 1``
    but under CRPO's switch (``w = 0`` on a step on a violated cost).

    ``adv_reward`` ``(B,)``, ``adv_costs`` ``(B, K)``, ``multipliers`` ``(K,)``; each
    component is first normalised over the batch (:func:`normalize_advantage`). The
    division keeps the scale of the actor's advantage bounded as the multipliers grow.
    """
    a_r = normalize_advantage(adv_reward, reward_norm)
    a_c = normalize_advantage(adv_costs, cost_norm)
    lam = np.asarray(multipliers, dtype=np.float64)
    if a_c.ndim != 2 or a_c.shape[1] != lam.size or a_c.shape[0] != a_r.shape[0]:
        raise ValueError(
            f"shapes disagree: adv_reward {a_r.shape}, adv_costs {a_c.shape} (want (B, K)), "
            f"multipliers {lam.shape}"
        )
    total = reward_weight + lam.sum()
    return (reward_weight * a_r - a_c @ lam) / (total if total > 0 else 1.0)


@th.no_grad()
def clip_grad_norms_(groups: Sequence[Sequence[th.nn.Parameter]], max_norm: float) -> None:
    """``torch.nn.utils.clip_grad_norm_(group, max_norm)`` for each group of parameters
    (2-norm, CPU or one device), with the same arithmetic, in one pass over the gradients:

        g <- g * min(max_norm / (||g_group||_2 + 1e-6), 1)   for every g of a group.
    """
    grads = [[p.grad for p in group if p.grad is not None] for group in groups]
    grads = [g for g in grads if g]
    if not grads:
        return
    norms = th._foreach_norm([g for group in grads for g in group], 2.0)
    totals, start = [], 0
    for group in grads:
        totals.append(th.linalg.vector_norm(th.stack(norms[start : start + len(group)]), 2.0))
        start += len(group)
    coefs = th.clamp(float(max_norm) / (th.stack(totals) + 1e-6), max=1.0)
    for group, coef in zip(grads, coefs):
        th._foreach_mul_(group, coef)


class PPOLagrangian(PPO):
    """SB3's PPO with cost critics, cost GAE and Lagrange multipliers (module docstring).

    Args:
        env: a VecEnv of tasks that follow the cost contract.
        constraints: the K constraints (their limits are the multipliers' targets).
        multiplier: the K multipliers with their update rule.
        cost_gamma, cost_gae_lambda: cost GAE parameters (None: the reward's).
        cost_vf_coef: weight of the cost value loss.
        cost_net_arch: hidden sizes of the cost critic (None: the value net's).
        cost_advantage_norm: ``standardize``, ``center`` or ``none`` for each ``A_ck``.
        cost_window: episodes kept for ``Jhat`` when a rollout completes none.
        policy_optimism: beta of the optimistic policy step on the actor's parameters
            (:class:`~constrained_grpo.optimism.OptimisticStep`); PPO-Lagrangian's own update only.
        normalize_advantage: standardize ``A_r`` over the rollout before the mix (SB3's
            per-minibatch normalisation is switched off: it would undo the mix's scale).
        **ppo_kwargs: SB3 ``PPO`` keywords.
    """

    rollout_buffer: CostRolloutBuffer
    policy: CostActorCriticPolicy

    def __init__(
        self,
        env: VecEnv,
        constraints: Sequence[Constraint],
        multiplier: Multiplier,
        *,
        cost_gamma: float | None = None,
        cost_gae_lambda: float | None = None,
        cost_vf_coef: float = 0.5,
        cost_net_arch: Sequence[int] | None = None,
        cost_advantage_norm: str = "center",
        cost_window: int = 100,
        normalize_advantage: bool = True,
        policy_optimism: float = 0.0,
        augmented_weights: str = "before-step",
        policy_kwargs: dict[str, Any] | None = None,
        **ppo_kwargs: Any,
    ):
        self.constraints = tuple(constraints)
        self.n_costs = len(self.constraints)
        if multiplier.num_constraints != self.n_costs:
            raise ValueError(
                f"{multiplier.num_constraints} multiplier(s) for {self.n_costs} constraint(s) "
                f"{[c.name for c in self.constraints]}; make one per constraint"
            )
        if cost_advantage_norm not in COST_ADVANTAGE_NORMS:
            raise ValueError(f"cost_advantage_norm={cost_advantage_norm!r}; choose one of {list(COST_ADVANTAGE_NORMS)}")
        if policy_optimism and type(self).train is not PPOLagrangian.train:
            raise ValueError(
                f"policy_optimism={policy_optimism!r}: {type(self).__name__} has its own update; the optimistic "
                "policy step is available on PPO-Lagrangian's (ppo-lag, pid-lag and their variants)"
            )
        if multiplier.config.rule in ("augmented", "crpo") and type(self)._mix_advantages is not PPOLagrangian._mix_advantages:
            raise ValueError(
                f"multiplier rule {multiplier.config.rule!r}: {type(self).__name__} mixes its advantage its own way "
                "and would ignore the rule's weights; use it with ppo-lag or pid-lag, or pick dual_ascent, pid, adam or log_sgd"
            )
        self.optimism = OptimisticStep(policy_optimism)
        self.multiplier = multiplier
        self.cost_vf_coef = cost_vf_coef
        self.cost_advantage_norm = cost_advantage_norm
        self.reward_advantage_norm = "standardize" if normalize_advantage else "none"
        self.cost_window = deque(maxlen=cost_window)
        self.cost_estimate: np.ndarray | None = None  # Jhat of the last multiplier step
        # The augmented Lagrangian's (w_R, lambda~) of this rollout, taken before the multiplier step.
        self._rollout_weights: tuple[float, np.ndarray] | None = None
        self.augmented_weights = augmented_weights
        policy_kwargs = {**(policy_kwargs or {}), "n_costs": self.n_costs}
        if cost_net_arch is not None:
            policy_kwargs["cost_net_arch"] = list(cost_net_arch)
        super().__init__(
            CostActorCriticPolicy,
            env,
            normalize_advantage=False,
            rollout_buffer_class=CostRolloutBuffer,
            rollout_buffer_kwargs={
                "n_costs": self.n_costs,
                "cost_gamma": cost_gamma,
                "cost_gae_lambda": cost_gae_lambda,
            },
            policy_kwargs=policy_kwargs,
            **ppo_kwargs,
        )
        self._episode_costs = np.zeros((self.n_envs, self.n_costs))

    def _split_parameters(self) -> tuple[list[th.nn.Parameter], list[th.nn.Parameter]]:
        """(SB3's actor and reward critic parameters, the cost critic's parameters)."""
        cost = list(self.policy.cost_value_net.parameters())
        ids = {id(p) for p in cost}
        return [p for p in self.policy.parameters() if id(p) not in ids], cost

    def _excluded_save_params(self) -> list[str]:
        # The agent saves the multiplier state as JSON beside SB3's zip; nothing here needs pickling.
        return [*super()._excluded_save_params(), "multiplier", "optimism", "cost_window", "_episode_costs", "constraints"]

    def _setup_learn(
        self,
        total_timesteps: int,
        callback: MaybeCallback = None,
        reset_num_timesteps: bool = True,
        tb_log_name: str = "run",
        progress_bar: bool = False,
    ) -> tuple[int, BaseCallback]:
        if reset_num_timesteps or self._last_obs is None:
            # SB3 resets the env here: the running episodic costs restart with it.
            self._episode_costs = np.zeros((self.n_envs, self.n_costs))
        return super()._setup_learn(total_timesteps, callback, reset_num_timesteps, tb_log_name, progress_bar)

    def _read_costs(self, infos: Sequence[dict[str, Any]]) -> np.ndarray:
        """This step's cost vectors ``(n_envs, K)`` from ``info["costs"]`` (Contract 1)."""
        try:
            costs = np.array([info["costs"] for info in infos], dtype=np.float64)
            if costs.shape == (len(infos), self.n_costs):
                return costs
        except (KeyError, ValueError, TypeError):
            pass
        # Slow path, only to raise the contract's error for the offending info.
        return np.stack([costs_from_info(info, self.n_costs) for info in infos])

    def collect_rollouts(
        self,
        env: VecEnv,
        callback: BaseCallback,
        rollout_buffer: CostRolloutBuffer,  # type: ignore[override]
        n_rollout_steps: int,
    ) -> bool:
        """SB3 2.9.2's ``OnPolicyAlgorithm.collect_rollouts``; lines marked ``cost:`` are ours."""
        assert self._last_obs is not None, "No previous observation was provided"
        self.policy.set_training_mode(False)
        n_steps = 0
        rollout_buffer.reset()
        if self.use_sde:
            self.policy.reset_noise(env.num_envs)
        callback.on_rollout_start()
        finished: list[np.ndarray] = []  # cost: episodic cost vectors of episodes ending in this rollout
        truncated: list[tuple[int, int, np.ndarray, np.ndarray]] = []  # cost: (step, env, cost, terminal obs)

        while n_steps < n_rollout_steps:
            if self.use_sde and self.sde_sample_freq > 0 and n_steps % self.sde_sample_freq == 0:
                self.policy.reset_noise(env.num_envs)
            with th.no_grad():
                obs_tensor = obs_as_tensor(self._last_obs, self.device)  # type: ignore[arg-type]
                actions, values, log_probs = self.policy(obs_tensor)
            actions = actions.cpu().numpy()
            clipped_actions = actions
            if isinstance(self.action_space, spaces.Box):
                if self.policy.squash_output:
                    clipped_actions = self.policy.unscale_action(clipped_actions)
                else:
                    clipped_actions = np.clip(actions, self.action_space.low, self.action_space.high)

            new_obs, rewards, dones, infos = env.step(clipped_actions)
            # cost: a batched twin hands over the whole (n_envs, K) matrix; else gather the infos.
            costs = env.step_costs if isinstance(env, GymVectorVecEnv) else self._read_costs(infos)
            self._episode_costs += costs  # cost: running episodic costs, before any bootstrap
            for idx in np.flatnonzero(dones):  # cost:
                finished.append(self._episode_costs[idx].copy())
                self._episode_costs[idx] = 0.0

            self.num_timesteps += env.num_envs
            callback.update_locals(locals())
            if not callback.on_step():
                return False
            self._update_info_buffer(infos, dones)
            n_steps += 1
            if isinstance(self.action_space, spaces.Discrete):
                actions = actions.reshape(-1, 1)

            # Bootstrap a time-limit truncation with the critics (SB3 GitHub issue #633).
            # cost: both critics' values of the terminal observations are added after the
            # rollout, in batches (_bootstrap_truncations), instead of one forward pass each.
            for idx in np.flatnonzero(dones):
                info = infos[idx]
                if info.get("terminal_observation") is not None and info.get("TimeLimit.truncated", False):
                    truncated.append((rollout_buffer.pos, int(idx), costs[idx].copy(), info["terminal_observation"]))

            rollout_buffer.add(
                self._last_obs,  # type: ignore[arg-type]
                actions,
                rewards,
                self._last_episode_starts,  # type: ignore[arg-type]
                values,
                log_probs,
                costs=costs,  # cost:
            )
            self._last_obs = new_obs  # type: ignore[assignment]
            self._last_episode_starts = dones

        with th.no_grad():
            obs_tensor = obs_as_tensor(new_obs, self.device)  # type: ignore[arg-type]
            values = self.policy.predict_values(obs_tensor)
        last_cost_values = self._bootstrap_truncations(rollout_buffer, truncated, obs_tensor)  # cost:
        rollout_buffer.compute_returns_and_advantage(last_values=values, dones=dones, last_cost_values=last_cost_values)
        self._update_multipliers(finished)  # cost: once per rollout, before the policy update
        self._mix_advantages()  # cost: the actor's advantage, read by SB3's PPO.train
        callback.update_locals(locals())
        callback.on_rollout_end()
        return True

    @th.no_grad()
    def _bootstrap_truncations(
        self,
        buffer: CostRolloutBuffer,
        truncated: list[tuple[int, int, np.ndarray, np.ndarray]],
        last_obs: th.Tensor,
    ) -> th.Tensor:
        """The critics on the whole rollout, after it: ``V_c(s_t)`` into the buffer; for each
        time-limit truncation ``(t, i)``, ``r_t += gamma V(s_terminal)`` and
        ``c_t += gamma_c V_c(s_terminal)`` (SB3 adds the first during the rollout); returns
        ``V_c`` of the observation after the last step.

        The policy acts without the cost critic, and no weight changes during a rollout, so
        batched forward passes replace one per step and one per truncated episode. The
        terminal observations go through in blocks of exactly ``n_envs`` rows (the last one
        zero-padded): a row's value then never depends on how many episodes were truncated
        (a BLAS may round a batch of one differently from a batch of many).
        """
        obs = buffer.observations
        n_steps, n_envs = obs.shape[:2]
        flat = obs_as_tensor(obs.reshape(n_steps * n_envs, *obs.shape[2:]), self.device)
        buffer.set_cost_values(self.policy.predict_cost_values(flat).cpu().numpy().reshape(n_steps, n_envs, -1))
        if truncated:
            terminal = np.stack([np.asarray(t[3], dtype=obs.dtype).reshape(obs.shape[2:]) for t in truncated])
            pad = -len(terminal) % n_envs
            if pad:
                terminal = np.concatenate([terminal, np.zeros((pad, *terminal.shape[1:]), dtype=terminal.dtype)])
            values, cost_values = [], []
            for block in np.split(terminal, len(terminal) // n_envs):
                block_t = obs_as_tensor(block, self.device)
                values.append(self.policy.predict_values(block_t).cpu().numpy().reshape(-1))
                cost_values.append(self.policy.predict_cost_values(block_t).cpu().numpy())
            value, cost_value = np.concatenate(values), np.concatenate(cost_values)
            for j, (step, idx, cost, _) in enumerate(truncated):
                buffer.rewards[step, idx] += self.gamma * value[j]
                buffer.costs[step, idx] = cost + buffer.cost_gamma * cost_value[j]
        return self.policy.predict_cost_values(last_obs)

    def _estimate_costs(self, finished: list[np.ndarray]) -> np.ndarray | None:
        """``Jhat``: the mean episodic cost of this rollout's finished episodes (of the recent
        window when none finished); None before any episode has ended. Sets ``cost_estimate``."""
        self.cost_window.extend(finished)
        if finished:
            self.cost_estimate = np.mean(finished, axis=0)
        elif self.cost_window:
            self.cost_estimate = np.mean(self.cost_window, axis=0)
        else:
            return None
        return self.cost_estimate

    def _update_multipliers(self, finished: list[np.ndarray]) -> None:
        """One multiplier step on ``Jhat`` = mean episodic cost of this rollout's episodes.

        The augmented Lagrangian's weights are taken *before* the step, as the method defines
        them: the policy step on rollout t weighs cost k by ``max(0, lambda_t + rho e_t)``, then
        ``lambda_{t+1} = lambda_t + eta e_t``. Taken after it, the weight would be
        ``lambda_t + (rho + eta) e_t``: a penalty of rho + eta, not rho. The Lagrangian rules
        keep PPO-Lagrangian's order (the multiplier just updated on the rollout weighs it)."""
        self._rollout_weights = None
        estimate = self._estimate_costs(finished)
        if estimate is None:
            return  # no episode has ended yet: nothing to estimate J_c from
        if self.multiplier.config.rule == "augmented" and self.augmented_weights == "before-step":
            self._rollout_weights = self.multiplier.weights(estimate)
        self.multiplier.update(estimate)
        for c, j, lam in zip(self.constraints, estimate, self.multiplier.values):
            self.logger.record(f"rollout/ep_cost_{c.name}", float(j))
            self.logger.record(f"train/lambda_{c.name}", float(lam))

    def _mix_advantages(self) -> None:
        buf = self.rollout_buffer
        shape = buf.reward_advantages.shape
        # The rule's weights on this rollout's estimate: the multipliers just updated on it,
        # CRPO's switch, or the augmented Lagrangian's max(0, lambda + rho e) from the
        # multiplier before its step (_update_multipliers).
        pre_step = self._rollout_weights
        reward_weight, lambdas = pre_step if pre_step is not None else self.multiplier.weights(self.cost_estimate)
        mixed = lagrangian_advantage(
            buf.reward_advantages.reshape(-1),
            buf.cost_advantages.reshape(-1, self.n_costs),
            lambdas,
            reward_norm=self.reward_advantage_norm,
            cost_norm=self.cost_advantage_norm,
            reward_weight=reward_weight,
        )
        buf.advantages = mixed.reshape(shape).astype(np.float32)

    def train(self) -> None:
        """SB3 2.9.2's ``PPO.train`` on the Lagrangian advantage, with the cost value loss
        added to the same loss (lines marked ``cost:`` are ours)."""
        self.policy.set_training_mode(True)
        self._update_learning_rate(self.policy.optimizer)
        clip_range = self.clip_range(self._current_progress_remaining)  # type: ignore[operator]
        if self.clip_range_vf is not None:
            clip_range_vf = self.clip_range_vf(self._current_progress_remaining)  # type: ignore[operator]
        entropy_losses, pg_losses, value_losses, clip_fractions = [], [], [], []
        cost_value_losses = []  # cost:
        sb3_parameters, cost_parameters = self._split_parameters()  # cost:
        self.optimism.before(actor_parameters(self.policy))  # cost: the optimistic policy step (off by default)
        continue_training = True
        for epoch in range(self.n_epochs):
            approx_kl_divs = []
            for rollout_data in self.rollout_buffer.get(self.batch_size):
                actions = rollout_data.actions
                if isinstance(self.action_space, spaces.Discrete):
                    actions = rollout_data.actions.long().flatten()
                values, cost_values, log_prob, entropy = self.policy.evaluate_actions_with_costs(  # cost:
                    rollout_data.observations, actions
                )
                values = values.flatten()
                # cost: no per-minibatch normalisation; the advantage was normalised and mixed per rollout.
                advantages = rollout_data.advantages
                ratio = th.exp(log_prob - rollout_data.old_log_prob)
                policy_loss_1 = advantages * ratio
                policy_loss_2 = advantages * th.clamp(ratio, 1 - clip_range, 1 + clip_range)
                policy_loss = -th.min(policy_loss_1, policy_loss_2).mean()
                pg_losses.append(policy_loss.item())
                clip_fractions.append(th.mean((th.abs(ratio - 1) > clip_range).float()).item())
                if self.clip_range_vf is None:
                    values_pred = values
                else:
                    values_pred = rollout_data.old_values + th.clamp(
                        values - rollout_data.old_values, -clip_range_vf, clip_range_vf
                    )
                value_loss = F.mse_loss(rollout_data.returns, values_pred)
                value_losses.append(value_loss.item())
                # cost: mean over the K heads of the squared error to the cost TD(lambda) targets.
                cost_value_loss = F.mse_loss(cost_values, rollout_data.cost_returns)  # type: ignore[attr-defined]
                cost_value_losses.append(cost_value_loss.item())
                entropy_loss = -th.mean(-log_prob) if entropy is None else -th.mean(entropy)
                entropy_losses.append(entropy_loss.item())
                loss = (
                    policy_loss
                    + self.ent_coef * entropy_loss
                    + self.vf_coef * value_loss
                    + self.cost_vf_coef * cost_value_loss  # cost:
                )
                with th.no_grad():
                    log_ratio = log_prob - rollout_data.old_log_prob
                    approx_kl_div = th.mean((th.exp(log_ratio) - 1) - log_ratio).cpu().numpy()
                    approx_kl_divs.append(approx_kl_div)
                if self.target_kl is not None and approx_kl_div > 1.5 * self.target_kl:
                    continue_training = False
                    break
                if not th.isfinite(loss):  # cost: stop before a NaN step corrupts every weight
                    raise NonFiniteUpdateError(
                        f"PPO-Lagrangian update {self._n_updates + 1}: non-finite loss {loss.item()} (policy "
                        f"{policy_loss.item()}, value {value_loss.item()}, cost value {cost_value_loss.item()}); "
                        "training stopped before the step"
                    )
                self.policy.optimizer.zero_grad()
                loss.backward()
                # cost: clip the cost critic apart, so that a large cost regression error
                # (costs may count in tens) cannot shrink the actor's step.
                clip_grad_norms_((sb3_parameters, cost_parameters), self.max_grad_norm)
                self.policy.optimizer.step()
            self._n_updates += 1
            if not continue_training:
                break
        self.optimism.after(actor_parameters(self.policy))  # cost:

        buf = self.rollout_buffer
        self.logger.record("train/entropy_loss", np.mean(entropy_losses))
        self.logger.record("train/policy_gradient_loss", np.mean(pg_losses))
        self.logger.record("train/value_loss", np.mean(value_losses))
        self.logger.record("train/cost_value_loss", np.mean(cost_value_losses))  # cost:
        self.logger.record("train/approx_kl", np.mean(approx_kl_divs))
        self.logger.record("train/clip_fraction", np.mean(clip_fractions))
        self.logger.record("train/loss", loss.item())
        self.logger.record("train/explained_variance", explained_variance(buf.values.flatten(), buf.returns.flatten()))
        self.logger.record(  # cost:
            "train/cost_explained_variance",
            explained_variance(buf.cost_values.reshape(-1), buf.cost_returns.reshape(-1)),
        )
        self.logger.record("train/n_updates", self._n_updates, exclude="tensorboard")
        self.logger.record("train/clip_range", clip_range)
        if self.clip_range_vf is not None:
            self.logger.record("train/clip_range_vf", clip_range_vf)
