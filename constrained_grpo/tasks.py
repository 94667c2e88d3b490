"""Making task envs by id, and rolling out evaluation episodes.

Task families register their ids on ``import constrained_grpo.envs``; the helpers
here import that package on demand (by name, so the core never imports a task family
statically) and give one place where an unknown id gets a helpful error.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

from constrained_grpo.constraints import Constraint, costs_from_info, get_constraints
from constrained_grpo.registry import EvalResult

__all__ = ["FinalStepCosts", "ensure_tasks_registered", "make_env", "make_vec_env", "rollout_episodes", "task_constraints"]

TASK_PACKAGE = "constrained_grpo.envs"


def ensure_tasks_registered() -> None:
    """Import the task families so that their ids are in gymnasium's registry."""
    importlib.import_module(TASK_PACKAGE)


def _check_id(env_id: str) -> None:
    ensure_tasks_registered()
    if env_id not in gym.registry:
        tasks = importlib.import_module(TASK_PACKAGE).list_tasks()
        raise gym.error.UnregisteredEnv(
            f"unknown task id {env_id!r}; registered tasks: {tasks} (run `cgrpo envs` to list "
            "them with their constraints)"
        )


def make_env(env_id: str, **kwargs: Any) -> gym.Env:
    """``gymnasium.make(env_id, **kwargs)`` after registering the task families."""
    _check_id(env_id)
    return gym.make(env_id, **kwargs)


def make_vec_env(env_id: str, num_envs: int, **kwargs: Any) -> gym.vector.VectorEnv:
    """A vector env of ``num_envs`` copies, with same-step autoreset.

    Uses the task's own batched implementation (``vector_entry_point``) where it has one,
    otherwise a ``SyncVectorEnv``. The autoreset mode is pinned to ``SAME_STEP``: a
    finished episode's last observation is in ``info["final_obs"]`` and the returned
    observation already belongs to the next episode.
    """
    _check_id(env_id)
    spec = gym.spec(env_id)
    if spec.vector_entry_point is not None:
        return gym.make_vec(env_id, num_envs=num_envs, vectorization_mode="vector_entry_point", **kwargs)
    vec = gym.make_vec(
        env_id,
        num_envs=num_envs,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP},
        **kwargs,
    )
    return FinalStepCosts(vec)


class FinalStepCosts(gym.vector.VectorWrapper):
    """Puts a finished copy's last-step costs back into ``info["costs"]`` / ``info["cost"]``.

    ``SyncVectorEnv`` with same-step autoreset resets a finished copy inside ``step`` and
    reports the reset's info in row i, so the costs of the step that ended the episode
    would read 0 there; it keeps them only in ``info["final_info"]``. The batched twins
    report the step's costs in ``info["costs"]`` for every row, and so does this wrapper.
    """

    def step(self, actions: Any):
        obs, reward, terminated, truncated, info = self.env.step(actions)
        final = info.get("final_info")
        if final is not None and "costs" in final:
            done = np.asarray(info.get("_final_info", terminated | truncated), dtype=bool)
            k = np.asarray(final["costs"]).shape[-1]
            costs = np.zeros((self.num_envs, k)) if "costs" not in info else np.array(info["costs"], dtype=np.float64)
            costs[done] = np.asarray(final["costs"], dtype=np.float64)[done]
            info["costs"], info["_costs"] = costs, np.ones(self.num_envs, dtype=bool)
            info["cost"], info["_cost"] = costs.sum(axis=1), np.ones(self.num_envs, dtype=bool)
        return obs, reward, terminated, truncated, info


def task_constraints(env_id: str, **kwargs: Any) -> tuple[Constraint, ...]:
    """The constraints of task ``env_id`` made with ``kwargs``."""
    env = make_env(env_id, **kwargs)
    try:
        return get_constraints(env)
    finally:
        env.close()


def rollout_episodes(
    env: gym.Env,
    act: Callable[[np.ndarray], Any],
    n_episodes: int,
    seed: int | None = None,
) -> EvalResult:
    """Run ``n_episodes`` full episodes of ``act(obs) -> action`` on ``env``.

    Episode ``i`` starts from ``reset(seed=seed + i)`` when ``seed`` is given, so an
    evaluation is reproducible and independent of training's random stream.
    """
    if n_episodes < 1:
        raise ValueError(f"n_episodes must be >= 1, got {n_episodes}")
    k = len(get_constraints(env))
    returns = np.zeros(n_episodes)
    costs = np.zeros((n_episodes, k))
    lengths = np.zeros(n_episodes, dtype=np.int64)
    for i in range(n_episodes):
        obs, _ = env.reset(seed=None if seed is None else seed + i)
        done = False
        while not done:
            obs, reward, terminated, truncated, info = env.step(act(obs))
            returns[i] += float(reward)
            costs[i] += costs_from_info(info, k)
            lengths[i] += 1
            done = terminated or truncated
    return EvalResult(returns=returns, costs=costs, lengths=lengths)
