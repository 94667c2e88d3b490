"""An SB3 ``VecEnv`` over a gymnasium ``VectorEnv`` (a task's batched twin).

stable-baselines3 2.9.2 steps its own ``VecEnv`` API; :class:`GymVectorVecEnv` gives it
any vector env from :func:`constrained_grpo.tasks.make_vec_env` (same-step autoreset),
e.g. the gridworld's numpy ``BatchedGridWorld`` or the highway's worker-process
``HighwayVectorEnv``, with the semantics of ``DummyVecEnv`` over ``RecordEpisodeCost``
copies, sub-env by sub-env:

- ``reset()`` seeds sub-env ``i`` with ``seed + i`` after ``seed(seed)`` (then never
  again: later episodes continue each sub-env's own random stream), as ``DummyVecEnv``;
- ``step_wait()`` returns float32 rewards, ``dones = terminated | truncated`` and one
  info dict per sub-env holding that sub-env's row of every vector info entry: the
  step's cost vector ``info["costs"]`` (K,) (also on the step that ends an episode),
  ``info["TimeLimit.truncated"] = truncated and not terminated``, and on a finished
  episode ``info["terminal_observation"]`` (its last observation; the returned one
  starts the next episode) and ``info["episode"] = {"r", "l", "c"}`` (return, length,
  float64 episodic cost vector), which is what ``RecordEpisodeCost`` records.

Given the same seeds and actions, it yields the episodes, rewards and costs of
``DummyVecEnv([RecordEpisodeCost(make_env(task))] * n)`` (tested). The step's cost matrix
is also kept whole in :attr:`GymVectorVecEnv.step_costs` ``(n, K)``, so that an
algorithm need not gather it back from the per-env dicts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode
from stable_baselines3.common.vec_env.base_vec_env import VecEnv, VecEnvIndices, VecEnvObs, VecEnvStepReturn

from constrained_grpo.constraints import CostContractError, Constraint
from constrained_grpo.tasks import ensure_tasks_registered, make_vec_env

__all__ = ["GymVectorVecEnv", "has_batched_twin", "make_sb3_vec_env", "split_vector_info"]


def has_batched_twin(env_id: str) -> bool:
    """Whether task ``env_id`` registers its own vector implementation (``vector_entry_point``);
    False for an unknown id (making it then raises the suite's error listing the tasks)."""
    ensure_tasks_registered()
    if env_id not in gym.registry:
        return False
    return gym.spec(env_id).vector_entry_point is not None


def split_vector_info(info: Mapping[str, Any], n: int) -> list[dict[str, Any]]:
    """Gymnasium's vector info (``key -> (n, ...)`` array, ``_key -> (n,)`` mask) as one
    dict per sub-env: entry ``key`` of sub-env ``i`` is ``info[key][i]`` where the mask is
    True (or absent); nested info dicts are split the same way."""
    out: list[dict[str, Any]] = [{} for _ in range(n)]
    for key, value in info.items():
        if key.startswith("_"):
            continue
        mask = info.get("_" + key)
        rows: Sequence[Any]
        if isinstance(value, Mapping):
            rows = split_vector_info(value, n)
        elif isinstance(value, np.ndarray) and value.ndim >= 1 and value.shape[0] == n:
            rows = list(value)  # views of the rows, made in C
        elif isinstance(value, (list, tuple)) and len(value) == n:
            rows = value
        else:
            continue  # not per sub-env
        if mask is None:
            for d, row in zip(out, rows):
                d[key] = row
        else:
            for i in np.flatnonzero(mask):
                out[i][key] = rows[i]
    return out


class GymVectorVecEnv(VecEnv):
    """SB3's ``VecEnv`` API over a same-step-autoreset gymnasium ``VectorEnv`` (module docstring).

    Args:
        env: the vector env (``make_vec_env(task, n)``); closed by :meth:`close`.
        constraints: the task's K constraints (their count fixes the cost vector's shape).
    """

    def __init__(self, env: gym.vector.VectorEnv, constraints: Sequence[Constraint]):
        mode = env.metadata.get("autoreset_mode")
        if mode not in (AutoresetMode.SAME_STEP, AutoresetMode.SAME_STEP.value):
            raise ValueError(
                f"GymVectorVecEnv needs a SAME_STEP autoreset vector env, got autoreset_mode={mode!r}; "
                "make it with constrained_grpo.tasks.make_vec_env"
            )
        self.venv = env
        self.k = len(constraints)
        n = env.num_envs
        super().__init__(n, env.single_observation_space, env.single_action_space)
        self.metadata = env.metadata
        self.actions: np.ndarray | None = None
        self.step_costs = np.zeros((n, self.k))
        self._return = np.zeros(n)
        self._length = np.zeros(n, dtype=np.int64)
        self._cost = np.zeros((n, self.k))
        #: False: a time-limit cut is reported as the episode's end (``TimeLimit.truncated``
        #: False), so that SB3 does not bootstrap it (``PPOConfig.time_limit_bootstrap``).
        self.time_limit_bootstrap = True

    # --- the VecEnv API -------------------------------------------------------------
    def reset(self) -> VecEnvObs:
        seeds = self._seeds
        if all(s is None for s in seeds):
            seed: list[int] | None = None
        elif any(s is None for s in seeds):
            raise ValueError(f"GymVectorVecEnv resets every sub-env at once: seed all of them or none, got {seeds}")
        else:
            seed = [int(s) for s in seeds]  # type: ignore[arg-type]
        options = self._options[0] if self._options else {}
        if any(o != options for o in self._options):
            raise ValueError("GymVectorVecEnv resets every sub-env at once: give them equal reset options")
        obs, info = self.venv.reset(seed=seed, options=options or None)
        self.reset_infos = split_vector_info(info, self.num_envs)
        self._return[:] = 0.0
        self._length[:] = 0
        self._cost[:] = 0.0
        self._reset_seeds()
        self._reset_options()
        return np.array(obs, dtype=self.observation_space.dtype, copy=True)

    def step_async(self, actions: np.ndarray) -> None:
        self.actions = actions

    def step_wait(self) -> VecEnvStepReturn:
        n = self.num_envs
        obs, reward, terminated, truncated, info = self.venv.step(self.actions)
        terminated = np.asarray(terminated, dtype=bool)
        truncated = np.asarray(truncated, dtype=bool)
        costs = np.asarray(info.get("costs"), dtype=np.float64) if "costs" in info else None
        if costs is None or costs.shape != (n, self.k):
            raise CostContractError(
                f"vector info['costs'] must have shape ({n}, {self.k}) (Contract 1: one cost vector per "
                f"sub-env and step), got {None if costs is None else costs.shape}"
            )
        reward64 = np.asarray(reward, dtype=np.float64)
        self._return += reward64
        self._length += 1
        self._cost += costs
        self.step_costs = costs
        dones = terminated | truncated
        final_obs = info.get("final_obs")
        final_info = info.get("final_info")
        step_info = {k: v for k, v in info.items() if k not in ("final_obs", "_final_obs", "final_info", "_final_info")}
        infos = split_vector_info(step_info, n)
        time_limit = truncated & ~terminated & self.time_limit_bootstrap
        for i in range(n):
            infos[i]["TimeLimit.truncated"] = bool(time_limit[i])
        if dones.any():
            finished = split_vector_info(final_info, n) if final_info is not None else None
            for i in np.flatnonzero(dones):
                d = infos[i]
                if finished is not None and finished[i]:
                    # A SyncVectorEnv reports the reset's info in row i; the step's own is in
                    # final_info (make_vec_env's FinalStepCosts also puts its costs back in row i).
                    d = infos[i] = {**finished[i], "costs": costs[i], "TimeLimit.truncated": bool(time_limit[i])}
                if final_obs is not None:
                    d["terminal_observation"] = final_obs[i]
                d["episode"] = {"r": float(self._return[i]), "l": int(self._length[i]), "c": self._cost[i].copy()}
            self._return[dones] = 0.0
            self._length[dones] = 0
            self._cost[dones] = 0.0
        obs = np.array(obs, dtype=self.observation_space.dtype, copy=True)
        return obs, reward64.astype(np.float32), dones, infos

    def close(self) -> None:
        self.venv.close()

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        """The vector env's attribute, once per requested sub-env (they share it)."""
        return [getattr(self.venv, attr_name)] * len(self._get_indices(indices))

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        raise NotImplementedError(
            "GymVectorVecEnv's sub-envs are rows of one vector env: set attributes on its .venv instead"
        )

    def env_method(self, method_name: str, *method_args: Any, indices: VecEnvIndices = None, **method_kwargs: Any) -> list[Any]:
        raise NotImplementedError(
            f"GymVectorVecEnv's sub-envs are rows of one vector env: call .venv.{method_name}(...) instead"
        )

    def env_is_wrapped(self, wrapper_class: type[gym.Wrapper], indices: VecEnvIndices = None) -> list[bool]:
        return [False] * len(self._get_indices(indices))

    def get_images(self) -> Sequence[np.ndarray | None]:
        return [None] * self.num_envs


def make_sb3_vec_env(env_id: str, n_envs: int, constraints: Sequence[Constraint], **env_kwargs: Any) -> GymVectorVecEnv:
    """:class:`GymVectorVecEnv` over ``make_vec_env(env_id, n_envs, **env_kwargs)``."""
    return GymVectorVecEnv(make_vec_env(env_id, n_envs, **env_kwargs), constraints)
