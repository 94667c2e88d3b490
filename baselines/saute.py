"""Saute RL (Sootla, Cowen-Rivers, Jafferjee et al. 2022): constraints as state, for any
algorithm; registered as ``saute-ppo`` (SB3's PPO on the augmented task;
:class:`~constrained_grpo.baselines.saute_agent.SauteAgent`).

The state is augmented with the remaining safety budget of each constraint, normalised
by its limit d_k (> 0), and the reward is reshaped once a budget is spent:

    z_{k,0} = 1,      z_{k,t+1} = (z_{k,t} - c_{k,t} / d_k) / gamma_s
    s~_t = (s_t, z_t),    r~_t = r_t if min_k z_{k,t+1} >= 0 else r_unsafe

(``gamma_s`` = 1 for our undiscounted episodic limits; ``z >= 0`` allows spending the
budget exactly, ``J_k <= d_k``). Saute enforces the constraint on every episode
(almost surely), which is stricter than a limit on the expected episodic cost: an
indicator cost of 1 against a limit of 0.2 spends the whole budget at once.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from stable_baselines3.common.vec_env import VecEnv, VecEnvWrapper
from stable_baselines3.common.vec_env.base_vec_env import VecEnvObs, VecEnvStepReturn

from constrained_grpo.baselines.config import PPOConfig
from constrained_grpo.baselines.vec_env import GymVectorVecEnv
from constrained_grpo.constraints import costs_from_info
from constrained_grpo.nonfinite import NonFiniteRolloutError

__all__ = ["SauteConfig", "SauteObservation", "SauteVecEnv", "SauteVectorObservation", "saute_reward", "saute_update"]

#: Slack on ``z >= 0`` so that a budget spent exactly (``sum c = d`` in floating point) counts as kept.
BUDGET_TOL = 1e-9


def saute_update(z: np.ndarray, costs: np.ndarray, limits: np.ndarray, gamma_s: float = 1.0) -> np.ndarray:
    """``z' = (z - c / d) / gamma_s``, elementwise over ``(..., K)``."""
    return (np.asarray(z, float) - np.asarray(costs, float) / np.asarray(limits, float)) / gamma_s


def saute_reward(reward: np.ndarray, z_next: np.ndarray, unsafe_reward: float) -> np.ndarray:
    """``r`` where every remaining budget ``z'_k >= 0``, else ``unsafe_reward``."""
    safe = np.all(np.asarray(z_next) >= -BUDGET_TOL, axis=-1)
    return np.where(safe, reward, unsafe_reward)


def _augmented_space(space: spaces.Space, k: int) -> spaces.Box:
    if not (isinstance(space, spaces.Box) and len(space.shape) == 1):
        raise ValueError(f"Saute appends the budgets to a flat Box observation; this task's is {space}")
    low = np.concatenate([space.low, np.full(k, -np.inf)]).astype(space.dtype)
    high = np.concatenate([space.high, np.full(k, np.inf)]).astype(space.dtype)
    return spaces.Box(low, high, dtype=space.dtype)


def _check_limits(limits: np.ndarray) -> np.ndarray:
    limits = np.asarray(limits, float)
    if not np.all(np.isfinite(limits) & (limits > 0)):
        raise ValueError(f"Saute normalises the budget by each limit; limits={limits.tolist()} must all be > 0")
    return limits


class SauteVecEnv(VecEnvWrapper):
    """The Saute task over an SB3 ``VecEnv`` whose steps carry ``info["costs"]`` (or a
    :class:`GymVectorVecEnv`'s ``step_costs``): augmented observations (also the
    ``terminal_observation`` of an ended episode) and reshaped rewards. The episode
    statistics ``info["episode"]`` stay the task's own (true return and costs)."""

    def __init__(self, venv: VecEnv, limits: np.ndarray, gamma_s: float = 1.0, unsafe_reward: float = -1.0):
        self.limits = _check_limits(limits)
        self.k = len(self.limits)
        self.gamma_s = float(gamma_s)
        self.unsafe_reward = float(unsafe_reward)
        super().__init__(venv, observation_space=_augmented_space(venv.observation_space, self.k))
        self.z = np.ones((self.num_envs, self.k))

    def _augment(self, obs: np.ndarray, z: np.ndarray) -> np.ndarray:
        return np.concatenate([obs, z.astype(obs.dtype)], axis=-1)

    def reset(self) -> VecEnvObs:
        obs = self.venv.reset()
        self.z = np.ones((self.num_envs, self.k))
        return self._augment(np.asarray(obs), self.z)

    def step_wait(self) -> VecEnvStepReturn:
        obs, rewards, dones, infos = self.venv.step_wait()
        if isinstance(self.venv, GymVectorVecEnv):
            costs = self.venv.step_costs
        else:
            costs = np.stack([costs_from_info(info, self.k) for info in infos])
        if not np.isfinite(costs).all():
            # Named as the cost it is: the budget it would spend goes into the observation next.
            rows = np.flatnonzero(~np.isfinite(np.asarray(costs)).all(axis=1))
            raise NonFiniteRolloutError(f"non-finite cost from env(s) {rows[:8].tolist()}; training stopped before "
                                        "the budget took it. Check the task's cost for NaN or inf.")
        z_next = saute_update(self.z, costs, self.limits, self.gamma_s)
        rewards = saute_reward(rewards, z_next, self.unsafe_reward).astype(np.float32)
        for i in np.flatnonzero(dones):
            terminal = infos[i].get("terminal_observation")
            if terminal is not None:
                infos[i]["terminal_observation"] = self._augment(np.asarray(terminal), z_next[i])
        z_next[dones] = 1.0
        self.z = z_next
        return self._augment(np.asarray(obs), self.z), rewards, dones, infos


class SauteObservation(gym.Wrapper):
    """One env with Saute's augmented observation and the task's own reward (for
    evaluating a Saute policy on the task's true return and costs)."""

    def __init__(self, env: gym.Env, limits: np.ndarray, gamma_s: float = 1.0):
        super().__init__(env)
        self.limits = _check_limits(limits)
        self.gamma_s = float(gamma_s)
        self.observation_space = _augmented_space(env.observation_space, len(self.limits))
        self.z = np.ones(len(self.limits))

    def reset(self, **kwargs: Any) -> tuple[np.ndarray, dict[str, Any]]:
        obs, info = self.env.reset(**kwargs)
        self.z = np.ones(len(self.limits))
        return np.concatenate([obs, self.z.astype(obs.dtype)]), info

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.z = saute_update(self.z, costs_from_info(info, len(self.limits)), self.limits, self.gamma_s)
        return np.concatenate([obs, self.z.astype(obs.dtype)]), reward, terminated, truncated, info


class SauteVectorObservation(gym.vector.VectorWrapper):
    """:class:`SauteObservation` over a gymnasium vector env with same-step autoreset
    (``make_vec_env``, the task's batched twin): each row's budgets are updated from the
    step's ``info["costs"]``, and a row whose episode ended starts the next with ``z = 1``
    (its returned observation already belongs to that episode). Rewards, terminations and
    costs stay the task's, so the harness evaluates a Saute policy on the batched twin with
    the same episodes as on one env."""

    def __init__(self, env: gym.vector.VectorEnv, limits: np.ndarray, gamma_s: float = 1.0):
        super().__init__(env)
        self.limits = _check_limits(limits)
        self.gamma_s = float(gamma_s)
        k = len(self.limits)
        self.single_observation_space = _augmented_space(env.single_observation_space, k)
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, self.num_envs)
        self.z = np.ones((self.num_envs, k))

    def _augment(self, obs: np.ndarray) -> np.ndarray:
        obs = np.asarray(obs)
        return np.concatenate([obs, self.z.astype(obs.dtype)], axis=-1)

    def reset(self, **kwargs: Any) -> tuple[np.ndarray, dict[str, Any]]:
        mask = (kwargs.get("options") or {}).get("reset_mask")  # a partial reset: those rows only
        obs, info = self.env.reset(**kwargs)
        if mask is None:
            self.z = np.ones((self.num_envs, len(self.limits)))
        else:
            self.z[np.asarray(mask, dtype=bool)] = 1.0
        return self._augment(obs), info

    def step(self, actions: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(actions)
        costs = np.asarray(info["costs"], dtype=np.float64).reshape(self.num_envs, len(self.limits))
        self.z = saute_update(self.z, costs, self.limits, self.gamma_s)
        self.z[np.asarray(terminated) | np.asarray(truncated)] = 1.0
        return self._augment(obs), reward, terminated, truncated, info


@dataclass(frozen=True)
class SauteConfig(PPOConfig):
    """PPO's config plus Saute's budget (``saute-ppo``)."""

    #: A constrained method (for listings), though it learns no multiplier.
    constrained_method: ClassVar[bool] = True

    limits: Mapping[str, float] | tuple[float, ...] | None = None
    """Override the task's limits d_k (each > 0): ``{name: limit}`` or one per constraint."""
    saute_gamma: float = 1.0
    """gamma_s of the budget update (1: undiscounted episodic limits)."""
    saute_unsafe_reward: float = -1.0
    """The reward once a budget is spent (Saute's ``n``; OmniSafe's ``unsafe_reward``)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0 < self.saute_gamma <= 1:
            raise ValueError(f"saute_gamma={self.saute_gamma!r} must lie in (0, 1]")
        if not math.isfinite(self.saute_unsafe_reward):
            raise ValueError(f"saute_unsafe_reward={self.saute_unsafe_reward!r} must be finite, e.g. -1.0")

    @classmethod
    def agent_class(cls) -> type[Any]:
        """The agent class that trains this config (read by ``make_baseline`` and ``load_agent``)."""
        from constrained_grpo.baselines.saute_agent import SauteAgent

        return SauteAgent

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        if self.limits is not None:
            out["limits"] = dict(self.limits) if isinstance(self.limits, Mapping) else list(self.limits)
        return out
