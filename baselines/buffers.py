"""A rollout buffer that also stores cost vectors, cost values and cost GAE.

Extends stable-baselines3's ``RolloutBuffer`` (SB3 2.9.2) through its documented slot
(``rollout_buffer_class``): the reward part is SB3's own, the cost part runs the same
GAE recursion on a trailing constraint axis, one estimate per constraint k:

    delta_{k,t} = c_{k,t} + gamma_c * V_ck(s_{t+1}) * (1 - done_{t+1}) - V_ck(s_t)
    A_{k,t}     = delta_{k,t} + gamma_c * lambda_c * (1 - done_{t+1}) * A_{k,t+1}
    R_{k,t}     = A_{k,t} + V_ck(s_t)                   (the TD(lambda) target)
"""

from __future__ import annotations

from collections.abc import Generator
from typing import NamedTuple

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.buffers import RolloutBuffer
from stable_baselines3.common.vec_env import VecNormalize

__all__ = ["CostRolloutBuffer", "CostRolloutBufferSamples", "gae"]


def gae(
    rewards: np.ndarray,
    values: np.ndarray,
    episode_starts: np.ndarray,
    last_values: np.ndarray,
    last_dones: np.ndarray,
    gamma: float,
    gae_lambda: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Generalized advantage estimation with SB3's conventions, over any trailing axes.

    Shapes: ``rewards`` and ``values`` ``(T, N, ...)``, ``episode_starts`` ``(T, N)``
    (1 where step t is the first of an episode), ``last_values`` ``(N, ...)`` (value of
    the observation after the last step), ``last_dones`` ``(N,)``. With
    ``m_{t+1} = 1 - episode_starts[t+1]`` (``1 - last_dones`` after the last step):

        delta_t = r_t + gamma * V_{t+1} * m_{t+1} - V_t
        A_t     = delta_t + gamma * lambda * m_{t+1} * A_{t+1}

    Returns ``(advantages, returns)`` with ``returns = advantages + values``.
    """
    rewards = np.asarray(rewards, dtype=np.float32)
    values = np.asarray(values, dtype=np.float32)
    n_steps = rewards.shape[0]
    # Broadcast the (T, N) masks over the trailing axes (the constraints).
    extra = (1,) * (rewards.ndim - 2)
    starts = np.asarray(episode_starts, dtype=np.float32).reshape(*episode_starts.shape, *extra)
    last_mask = (1.0 - np.asarray(last_dones, dtype=np.float32)).reshape(-1, *extra)
    advantages = np.zeros_like(rewards)
    last_gae = np.zeros_like(rewards[0])
    for t in reversed(range(n_steps)):
        if t == n_steps - 1:
            next_non_terminal, next_values = last_mask, np.asarray(last_values, dtype=np.float32)
        else:
            next_non_terminal, next_values = 1.0 - starts[t + 1], values[t + 1]
        delta = rewards[t] + gamma * next_values * next_non_terminal - values[t]
        last_gae = delta + gamma * gae_lambda * next_non_terminal * last_gae
        advantages[t] = last_gae
    return advantages, advantages + values


class CostRolloutBufferSamples(NamedTuple):
    """SB3's ``RolloutBufferSamples`` fields, then the cost fields (shape ``(B, K)``)."""

    observations: th.Tensor
    actions: th.Tensor
    old_values: th.Tensor
    old_log_prob: th.Tensor
    advantages: th.Tensor
    returns: th.Tensor
    old_cost_values: th.Tensor
    cost_advantages: th.Tensor
    cost_returns: th.Tensor


class CostRolloutBuffer(RolloutBuffer):
    """SB3's ``RolloutBuffer`` plus per-step cost vectors ``(T, N, K)`` and their GAE.

    ``advantages`` holds the reward GAE after ``compute_returns_and_advantage``; the
    algorithm may overwrite it with the Lagrangian advantage before ``get`` (which is
    what SB3's PPO update then reads). ``reward_advantages`` keeps the reward GAE.
    """

    costs: np.ndarray
    cost_values: np.ndarray
    cost_advantages: np.ndarray
    cost_returns: np.ndarray
    reward_advantages: np.ndarray

    def __init__(
        self,
        buffer_size: int,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        device: th.device | str = "auto",
        gae_lambda: float = 1,
        gamma: float = 0.99,
        n_envs: int = 1,
        n_costs: int = 1,
        cost_gamma: float | None = None,
        cost_gae_lambda: float | None = None,
    ):
        if n_costs < 1:
            raise ValueError(f"n_costs={n_costs} must be >= 1 (one per constraint)")
        # Set before super().__init__, which calls reset().
        self.n_costs = int(n_costs)
        self.cost_gamma = gamma if cost_gamma is None else float(cost_gamma)
        self.cost_gae_lambda = gae_lambda if cost_gae_lambda is None else float(cost_gae_lambda)
        super().__init__(buffer_size, observation_space, action_space, device, gae_lambda, gamma, n_envs)

    def reset(self) -> None:
        self._torch_cache: tuple[th.Tensor, ...] | None = None
        self._cost_values_set = False  # every step's V_c given to add(), or set by set_cost_values()
        shape = (self.buffer_size, self.n_envs, self.n_costs)
        self.costs = np.zeros(shape, dtype=np.float32)
        self.cost_values = np.zeros(shape, dtype=np.float32)
        self.cost_advantages = np.zeros(shape, dtype=np.float32)
        self.cost_returns = np.zeros(shape, dtype=np.float32)
        self.reward_advantages = np.zeros((self.buffer_size, self.n_envs), dtype=np.float32)
        super().reset()

    def add(  # type: ignore[override]
        self,
        obs: np.ndarray,
        action: np.ndarray,
        reward: np.ndarray,
        episode_start: np.ndarray,
        value: th.Tensor,
        log_prob: th.Tensor,
        costs: np.ndarray | None = None,
        cost_values: th.Tensor | None = None,
    ) -> None:
        """SB3's ``add`` plus this step's costs ``(N, K)`` and, optionally, its cost values
        ``(N, K)`` (else :meth:`set_cost_values` gives the whole rollout's at once)."""
        if costs is None:
            raise TypeError("CostRolloutBuffer.add needs costs= (shape (n_envs, K))")
        self.costs[self.pos] = np.asarray(costs, dtype=np.float32).reshape(self.n_envs, self.n_costs)
        if cost_values is not None:
            self.cost_values[self.pos] = cost_values.cpu().numpy().reshape(self.n_envs, self.n_costs)
            self._cost_values_set = self.pos == 0 or self._cost_values_set
        else:
            self._cost_values_set = False
        super().add(obs, action, reward, episode_start, value, log_prob)  # advances self.pos

    def set_cost_values(self, cost_values: np.ndarray) -> None:
        """``V_c(s_t)`` of every stored step at once, shape ``(T, N, K)``: the cost critic
        does not choose actions, so the algorithm may evaluate it once per rollout."""
        self.cost_values[...] = np.asarray(cost_values, dtype=np.float32).reshape(self.cost_values.shape)
        self._cost_values_set = True

    def compute_returns_and_advantage(  # type: ignore[override]
        self, last_values: th.Tensor, dones: np.ndarray, last_cost_values: th.Tensor | None = None
    ) -> None:
        """Reward GAE (SB3's) and cost GAE per constraint (see the module docstring)."""
        if last_cost_values is None:
            raise TypeError("CostRolloutBuffer needs last_cost_values= (shape (n_envs, K)) for the cost GAE")
        if not self._cost_values_set:
            raise TypeError(
                "CostRolloutBuffer has no cost values for some steps: pass cost_values= to every add() "
                "or call set_cost_values() before compute_returns_and_advantage()"
            )
        super().compute_returns_and_advantage(last_values, dones)
        self.reward_advantages = self.advantages.copy()
        self.cost_advantages, self.cost_returns = gae(
            self.costs,
            self.cost_values,
            self.episode_starts,
            last_cost_values.clone().cpu().numpy().reshape(self.n_envs, self.n_costs),
            dones,
            self.cost_gamma,
            self.cost_gae_lambda,
        )

    def get(self, batch_size: int | None = None) -> Generator[CostRolloutBufferSamples, None, None]:  # type: ignore[override]
        if not self.generator_ready:
            # SB3's get() flattens its own arrays to (T * N, ...); do the same for ours.
            for name in ("cost_values", "cost_advantages", "cost_returns"):
                self.__dict__[name] = self.swap_and_flatten(self.__dict__[name])
        yield from super().get(batch_size)  # type: ignore[misc]

    def _get_samples(  # type: ignore[override]
        self, batch_inds: np.ndarray, env: VecNormalize | None = None
    ) -> CostRolloutBufferSamples:
        """The rows ``batch_inds`` of every flattened array, as SB3's ``_get_samples`` gives
        them (same values and dtypes), gathered from tensors made once per rollout: one
        ``index_select`` per field instead of a numpy gather and a tensor copy."""
        if env is not None:  # SB3 normalises observations and rewards through the VecNormalize
            base = super()._get_samples(batch_inds, env)
            return CostRolloutBufferSamples(
                *base,
                self.to_torch(self.cost_values[batch_inds]),
                self.to_torch(self.cost_advantages[batch_inds]),
                self.to_torch(self.cost_returns[batch_inds]),
            )
        if self._torch_cache is None:
            arrays = (
                self.observations,
                self.actions.astype(np.float32, copy=False),
                self.values.reshape(-1),
                self.log_probs.reshape(-1),
                self.advantages.reshape(-1),
                self.returns.reshape(-1),
                self.cost_values,
                self.cost_advantages,
                self.cost_returns,
            )
            self._torch_cache = tuple(th.as_tensor(np.ascontiguousarray(a), device=self.device) for a in arrays)
        index = th.as_tensor(batch_inds, device=self.device)
        return CostRolloutBufferSamples(*(t.index_select(0, index) for t in self._torch_cache))
