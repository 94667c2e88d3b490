"""Gymnasium wrappers for the cost contract.

* :class:`RecordEpisodeCost` and its vector twin :class:`RecordEpisodeCostVector` add
  the episodic cost vector to ``info["episode"]``.
* :class:`SafetyGymnasiumToContract` turns an env whose ``step`` returns
  Safety-Gymnasium's 6-tuple ``(obs, reward, cost, terminated, truncated, info)`` into a
  contract env, and :func:`to_safety_gymnasium_step` goes the other way.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, SupportsFloat, TypeVar

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

from constrained_grpo.constraints import (
    Constraint,
    CostContractError,
    costs_from_info,
    get_constraints,
    make_cost_info,
)

__all__ = [
    "RecordEpisodeCost",
    "RecordEpisodeCostVector",
    "SafetyGymnasiumToContract",
    "to_safety_gymnasium_step",
]

ObsType = TypeVar("ObsType")
ActType = TypeVar("ActType")


class RecordEpisodeCost(
    gym.Wrapper[ObsType, ActType, ObsType, ActType], gym.utils.RecordConstructorArgs
):
    """Record the episodic return, length, time and cost vector.

    At the end of an episode, ``info["episode"]`` holds ``r`` (return), ``l`` (length),
    ``t`` (seconds since the episode began) and ``c`` (float64 ``(K,)`` episodic costs)::

        >>> import gymnasium as gym, constrained_grpo.envs
        >>> env = RecordEpisodeCost(gym.make("Grid/HazardFuel3x3-v0"))
        >>> _ = env.reset(seed=0)
        >>> for a in (3, 3):  # right, right: through the hazard to the goal
        ...     obs, r, term, trunc, info = env.step(a)
        >>> info["episode"]["r"], info["episode"]["l"], info["episode"]["c"].tolist()
        (1.0, 2, [1.0, 2.0])
    """

    def __init__(self, env: gym.Env[ObsType, ActType]):
        gym.utils.RecordConstructorArgs.__init__(self)
        gym.Wrapper.__init__(self, env)
        self._k = len(get_constraints(env))
        self._return = 0.0
        self._length = 0
        self._cost = np.zeros(self._k)
        self._start = time.perf_counter()

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        self._return, self._length = 0.0, 0
        self._cost = np.zeros(self._k)
        self._start = time.perf_counter()
        return super().reset(seed=seed, options=options)

    def step(self, action: ActType):
        obs, reward, terminated, truncated, info = super().step(action)
        self._return += float(reward)
        self._length += 1
        self._cost += costs_from_info(info, self._k)
        if terminated or truncated:
            info = dict(info)
            info["episode"] = {
                "r": self._return,
                "l": self._length,
                "t": round(time.perf_counter() - self._start, 6),
                "c": self._cost.copy(),
            }
        return obs, reward, terminated, truncated, info


class RecordEpisodeCostVector(gym.vector.VectorWrapper):
    """Vector twin of :class:`RecordEpisodeCost` for same-step autoreset vector envs.

    When sub-env ``i`` finishes an episode, ``info["episode"]`` holds arrays ``r`` (B,),
    ``l`` (B,), ``c`` (B, K), valid where the mask ``info["_episode"]`` is True. Expects
    ``info["costs"]`` of shape ``(B, K)``.
    """

    def __init__(self, env: gym.vector.VectorEnv, constraints: Sequence[Constraint] | None = None):
        super().__init__(env)
        mode = env.metadata.get("autoreset_mode")
        if mode not in (AutoresetMode.SAME_STEP, AutoresetMode.SAME_STEP.value):
            raise ValueError(
                f"RecordEpisodeCostVector needs a SAME_STEP autoreset vector env, got {mode!r}; "
                "make it with constrained_grpo.tasks.make_vec_env"
            )
        if constraints is None:
            constraints = getattr(env, "constraints", None) or get_constraints(env.get_attr("unwrapped")[0])
        self._k = len(constraints)
        self._return = np.zeros(self.num_envs)
        self._length = np.zeros(self.num_envs, dtype=np.int64)
        self._cost = np.zeros((self.num_envs, self._k))

    def reset(self, *, seed: int | list[int] | None = None, options: dict[str, Any] | None = None):
        self._return[:] = 0.0
        self._length[:] = 0
        self._cost[:] = 0.0
        return super().reset(seed=seed, options=options)

    def step(self, actions: Any):
        obs, rewards, terminated, truncated, info = super().step(actions)
        costs = np.asarray(info.get("costs"), dtype=np.float64) if "costs" in info else None
        if costs is None or costs.shape != (self.num_envs, self._k):
            raise CostContractError(
                f"vector info['costs'] must have shape ({self.num_envs}, {self._k}), got "
                f"{None if costs is None else costs.shape}"
            )
        self._return += rewards
        self._length += 1
        self._cost += costs
        done = np.logical_or(terminated, truncated)
        if done.any():
            info = dict(info)
            info["episode"] = {
                "r": np.where(done, self._return, 0.0),
                "l": np.where(done, self._length, 0),
                "c": np.where(done[:, None], self._cost, 0.0),
            }
            info["_episode"] = done
            self._return[done] = 0.0
            self._length[done] = 0
            self._cost[done] = 0.0
        return obs, rewards, terminated, truncated, info


class SafetyGymnasiumToContract(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Adapt an env with Safety-Gymnasium's 6-tuple ``step`` to the cost contract.

    ``step`` returns the standard 5-tuple with ``info["costs"] = [cost]`` (or the
    vector, if the legacy env returns one) and ``info["cost"]`` their sum. The wrapper
    declares ``constraints`` (default: one constraint ``cost`` with limit 25, the
    limit of Safety-Gymnasium's benchmarks).
    """

    def __init__(self, env: gym.Env, constraints: Sequence[Constraint] | None = None):
        gym.utils.RecordConstructorArgs.__init__(self, constraints=constraints)
        gym.Wrapper.__init__(self, env)
        self.constraints: tuple[Constraint, ...] = tuple(
            constraints
            or (Constraint("cost", 25.0, "Safety-Gymnasium's aggregate cost per episode"),)
        )

    def step(self, action: Any):
        out = self.env.step(action)
        if len(out) != 6:
            raise CostContractError(
                f"expected Safety-Gymnasium's 6-tuple (obs, reward, cost, terminated, truncated, "
                f"info) from step(), got a {len(out)}-tuple; a 5-tuple env with info['costs'] "
                "needs no adapter"
            )
        obs, reward, cost, terminated, truncated, info = out
        costs = np.atleast_1d(np.asarray(cost, dtype=np.float64))
        if costs.shape != (len(self.constraints),):
            raise CostContractError(
                f"legacy env returned cost of shape {costs.shape}, but {len(self.constraints)} "
                "constraint(s) are declared"
            )
        info = {**dict(info), **make_cost_info(costs)}
        return obs, reward, bool(terminated), bool(truncated), info


def to_safety_gymnasium_step(
    step_result: tuple[Any, SupportsFloat, bool, bool, dict[str, Any]],
) -> tuple[Any, float, float, bool, bool, dict[str, Any]]:
    """Convert a contract 5-tuple to Safety-Gymnasium's ``(obs, r, cost, term, trunc, info)``.

    ``cost`` is ``info["cost"]``, the sum of the cost vector, which is how tools written
    for Safety-Gymnasium (OmniSafe, FSRL) read a single cost.
    """
    obs, reward, terminated, truncated, info = step_result
    costs = costs_from_info(info)
    return obs, float(reward), float(costs.sum()), terminated, truncated, info
