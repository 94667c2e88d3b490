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
    GridModel,
    GridOptions,
    next_key,
    seed_key,
    task_options,
    uniform_draw,
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
        self._next = m.next_cell.reshape(-1)
        self._goal = m.is_goal
        self._hazard = m.is_hazard
        self._mud = m.is_mud
        self._gem = m.is_gem
        self._has_gem = bool(m.is_gem.any()) and o.gem_reward != 0.0
        self._reward_of_cell = np.where(m.is_goal, o.goal_reward, 0.0) - o.step_penalty
        self._cost_kinds = [(c.name, c.indicator) for c in self.constraints]
        self._range = np.arange(self.num_envs)
        self._p = m.pos_dim
        self._initial = m.initial_obs

        b = self.num_envs
        self._keys = np.zeros(b, dtype=np.uint64)
        self._cell = np.full(b, m.start, dtype=np.int64)
        self._t = np.zeros(b, dtype=np.int64)
        self._gem_taken = np.zeros(b, dtype=bool)
        self._hazard_seen = np.zeros(b, dtype=bool)
        self._mud_seen = np.zeros(b, dtype=bool)
        self._needs_reset = True
        self._np_random = None

    def optimum(self) -> Any:
        """The exact optima of this task (see ``GridWorldEnv.optimum``)."""
        from constrained_grpo.envs.gridworld.optimum import solve_optimum

        return solve_optimum(self.options)

    def _observe(self) -> np.ndarray:
        m, p = self.model, self._p
        obs = np.zeros((self.num_envs, m.obs_dim), dtype=np.float32)
        if self.options.obs_mode == "onehot":
            obs[self._range, self._cell] = 1.0
        else:
            obs[:, :2] = m.coords[self._cell]
        obs[:, p] = self._gem_taken
        obs[:, p + 1] = self._hazard_seen
        obs[:, p + 2] = self._mud_seen
        obs[:, p + 3] = self._t * (1.0 / m.max_steps)
        return obs

    def reset(self, *, seed: int | list[int] | None = None, options: dict[str, Any] | None = None):
        if seed is not None:
            seeds = [seed + i for i in range(self.num_envs)] if isinstance(seed, (int, np.integer)) else list(seed)
            if len(seeds) != self.num_envs:
                raise ValueError(f"got {len(seeds)} seeds for {self.num_envs} grids")
            self._keys = np.array([seed_key(int(s)) for s in seeds], dtype=np.uint64)
            self._np_random, _ = gym.utils.seeding.np_random(seeds[0])
        elif self._needs_reset:
            rng = np.random.default_rng()
            self._keys = np.array([seed_key(int(s)) for s in rng.integers(0, 2**63, self.num_envs)], dtype=np.uint64)
        else:
            self._keys = next_key(self._keys)
        self._needs_reset = False
        self._cell[:] = self.model.start
        self._t[:] = 0
        self._gem_taken[:] = False
        self._hazard_seen[:] = False
        self._mud_seen[:] = False
        return self._observe(), {}

    def step(self, actions: Any):
        if self._needs_reset:
            raise gym.error.ResetNeeded("call reset() before step()")
        a = np.asarray(actions, dtype=np.int64).reshape(self.num_envs)
        if a.min() < 0 or a.max() > 3:
            raise ValueError(f"actions must lie in 0..3, got {a[(a < 0) | (a > 3)][:5].tolist()}")
        o, t = self.options, self._t
        if o.slip > 0.0:
            slipped = uniform_draw(self._keys, t, DRAW_SLIP) < o.slip
            if slipped.any():
                random_a = (uniform_draw(self._keys, t, DRAW_SLIP_ACTION) * 4).astype(np.int64)
                a = np.where(slipped, random_a, a)
        cell = self._next[self._cell * 4 + a]
        self._cell = cell
        reward = self._reward_of_cell[cell]
        if self._has_gem:
            gem = self._gem[cell] & ~self._gem_taken
            reward = reward + gem * o.gem_reward
            self._gem_taken |= gem
        hazard = self._hazard[cell]
        if o.hazard_prob < 1.0:
            hazard = hazard & (uniform_draw(self._keys, t, DRAW_HAZARD) < o.hazard_prob)
        mud = self._mud[cell]
        costs = np.empty((self.num_envs, len(self._cost_kinds)), dtype=np.float64)
        for k, (name, indicator) in enumerate(self._cost_kinds):
            if name == "fuel":
                costs[:, k] = 1.0
            elif name == "hazard":
                costs[:, k] = (hazard & ~self._hazard_seen) if indicator else hazard
            else:
                costs[:, k] = (mud & ~self._mud_seen) if indicator else mud
        self._hazard_seen |= hazard
        self._mud_seen |= mud
        self._t = t = t + 1
        terminated = self._goal[cell]
        truncated = (t >= self.model.max_steps) & ~terminated
        obs = self._observe()
        info: dict[str, Any] = {"costs": costs, "cost": costs.sum(axis=1)}
        done = terminated | truncated
        if done.any():
            info["final_obs"] = obs.copy()
            info["_final_obs"] = done
            obs[done] = self._initial
            self._keys = np.where(done, next_key(self._keys), self._keys)
            self._cell[done] = self.model.start
            self._t[done] = 0
            self._gem_taken[done] = False
            self._hazard_seen[done] = False
            self._mud_seen[done] = False
        return obs, reward, terminated, truncated, info
