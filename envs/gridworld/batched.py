"""B gridworlds stepped at once with numpy: the vector twin of ``GridWorldEnv``.

Same-step autoreset: when grid ``i`` ends an episode, the returned observation is the
first of its next episode, ``info["final_obs"][i]`` holds the last one and
``info["_final_obs"][i]`` is True. Grid ``i`` reset with seed ``s_i`` follows exactly
the trajectory of ``GridWorldEnv`` reset with ``s_i`` under the same actions (tested),
and its later episodes follow ``GridWorldEnv.reset()`` without a seed.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from constrained_grpo.constraints import Constraint
from constrained_grpo.envs.gridworld.model import (
    DRAW_HAZARD,
    DRAW_SLIP,
    DRAW_SLIP_ACTION,
    EPISODE_GAMMA,
    GridModel,
    GridOptions,
    next_key,
    seed_key,
    splitmix64,
    task_options,
    STEP_COUNTER,
    counters_below,
    draw_counters,
    uniform_draws,
)

__all__ = ["BatchedGridWorld"]


class BatchedGridWorld(gym.vector.VectorEnv):
    """``num_envs`` gridworlds in flat numpy arrays.

    ``reset(seed=s)`` with an int seeds grid ``i`` with ``s + i`` (gymnasium's vector
    convention); a list gives one seed per grid, so ``[s] * G`` makes a GRPO group.
    ``info`` of a step::

        {"costs": float64 (B, K), "cost": float64 (B,),
         "final_obs": float32 (B, D), "_final_obs": bool (B,)}   # when any grid finished
    """

    metadata = {"autoreset_mode": AutoresetMode.SAME_STEP, "render_modes": []}

    def __init__(self, num_envs: int = 1, **kwargs: Any):
        if not isinstance(num_envs, (int, np.integer)) or num_envs < 1:
            raise ValueError(f"num_envs must be a positive integer, got {num_envs!r}")
        self.options: GridOptions = task_options(kwargs)
        self.model = m = GridModel(self.options)
        self.constraints: tuple[Constraint, ...] = m.constraints
        self.num_envs = int(num_envs)
        self.single_observation_space = spaces.Box(0.0, 1.0, shape=(m.obs_dim,), dtype=np.float32)
        self.single_action_space = spaces.Discrete(4)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.render_mode = None

        o = self.options
        tables = m.tables
        k = len(self.constraints)
        # The state is kept as its table base index 8 * s, and the step's outcome columns
        # [costs..., sum of costs, reward, terminated] sit in one table, so a step needs
        # one gather.
        self._next_base = tables.next_state * 8
        self._outcome = np.concatenate(
            [
                tables.costs,
                tables.costs.sum(axis=1, keepdims=True),
                tables.reward[:, None],
                tables.terminated[:, None].astype(np.float64),
            ],
            axis=1,
        )
        self._k = k
        self._obs_rows = tables.obs
        self._start_base = tables.start_state * 8
        self._time_col = m.obs_dim - 1
        self._max_steps = m.max_steps
        self._stochastic = o.slip > 0.0 or 0.0 < o.hazard_prob < 1.0
        self._hit = 1 if o.hazard_prob >= 1.0 else 0
        self._action_offset = np.arange(4, dtype=np.int64) * 2 + self._hit
        b = self.num_envs
        self._keys = np.zeros(b, dtype=np.uint64)
        self._base = np.full(b, self._start_base, dtype=np.int64)
        self._t = np.zeros(b, dtype=np.int64)
        # Hash inputs of this step's hazard draws, advanced by one addition per step.
        self._hazard_counters = np.zeros(b, dtype=np.uint64)
        self._needs_reset = True
        self._np_random = None

    def optimum(self) -> Any:
        """The exact optima of this task (see ``GridWorldEnv.optimum``)."""
        from constrained_grpo.envs.gridworld.optimum import solve_optimum

        return solve_optimum(self.options)

    def _observe(self) -> np.ndarray:
        obs = np.take(self._obs_rows, self._base >> 3, axis=0)
        obs[:, self._time_col] = self._t / self._max_steps
        return obs

    def reset(self, *, seed: int | list[int] | None = None, options: dict[str, Any] | None = None):
        if seed is not None:
            seeds = [seed + i for i in range(self.num_envs)] if isinstance(seed, (int, np.integer)) else list(seed)
            if len(seeds) != self.num_envs:
                raise ValueError(f"got {len(seeds)} seeds for {self.num_envs} grids")
            ints = np.asarray(seeds)
            if ints.dtype.kind in "iu" and bool((ints >= 0).all()):
                # seed_key on the whole array at once (uint64 arithmetic wraps as MASK64 does).
                self._keys = splitmix64(ints.astype(np.uint64) * np.uint64(EPISODE_GAMMA))
            else:
                self._keys = np.array([seed_key(int(s)) for s in seeds], dtype=np.uint64)
            self._np_random, _ = gym.utils.seeding.np_random(seeds[0])
        elif self._needs_reset:
            rng = np.random.default_rng()
            self._keys = np.array([seed_key(int(s)) for s in rng.integers(0, 2**63, self.num_envs)], dtype=np.uint64)
        else:
            self._keys = next_key(self._keys)
        self._needs_reset = False
        self._base[:] = self._start_base
        self._t[:] = 0
        self._hazard_counters = draw_counters(self._keys, self._t, DRAW_HAZARD)
        return self._observe(), {}

    def step(self, actions: Any):
        if self._needs_reset:
            raise gym.error.ResetNeeded("call reset() before step()")
        a = np.asarray(actions, dtype=np.int64).reshape(self.num_envs)
        if a.min() < 0:  # take() below raises for actions > 3
            raise ValueError(f"actions must lie in 0..3, got {a[a < 0][:5].tolist()}")
        o, t = self.options, self._t
        try:
            offset = np.take(self._action_offset, a)
        except IndexError:
            raise ValueError(f"actions must lie in 0..3, got {a[a > 3][:5].tolist()}") from None
        # Table index 8 s + 2 a + hit; hit (a hazard event) only matters on hazard cells.
        if o.slip > 0.0:
            u = uniform_draws(self._keys, t, (DRAW_SLIP, DRAW_SLIP_ACTION))
            random_offset = np.take(self._action_offset, (u[:, 1] * 4).astype(np.int64))
            offset = np.where(u[:, 0] < o.slip, random_offset, offset)
        if 0.0 < o.hazard_prob < 1.0:
            offset = offset + counters_below(self._hazard_counters, o.hazard_prob)
            self._hazard_counters += STEP_COUNTER
        i = self._base + offset
        base = np.take(self._next_base, i)
        outcome = np.take(self._outcome, i, axis=0)
        costs = outcome[:, : self._k]
        reward = outcome[:, self._k + 1]
        terminated = outcome[:, self._k + 2] > 0.5
        self._t = t = t + 1
        truncated = (t >= self._max_steps) & ~terminated
        info: dict[str, Any] = {"costs": costs, "cost": outcome[:, self._k]}
        done = terminated | truncated
        if done.any():
            idx = np.flatnonzero(done)
            # Only finished rows are written, so the zero pages of the rest stay untouched.
            final_obs = np.zeros((self.num_envs, self._obs_rows.shape[1]), dtype=np.float32)
            final_obs[idx] = np.take(self._obs_rows, base[idx] >> 3, axis=0)
            final_obs[idx, self._time_col] = t[idx] / self._max_steps
            info["final_obs"] = final_obs
            info["_final_obs"] = done
            if self._stochastic:
                self._keys[idx] = next_key(self._keys[idx])
                self._hazard_counters[idx] = draw_counters(self._keys[idx], 0, DRAW_HAZARD)
            base[idx] = self._start_base
            t[idx] = 0
        self._base = base
        return self._observe(), reward, terminated, truncated, info
