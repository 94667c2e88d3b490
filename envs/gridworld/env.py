"""The single gridworld env (one grid, pure-Python stepping for speed)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from constrained_grpo.constraints import Constraint
from constrained_grpo.envs.gridworld.model import (
    ACTION_NAMES,
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

__all__ = ["GridWorldEnv"]


class GridWorldEnv(gym.Env[np.ndarray, np.int64]):
    """A route-choice gridworld with a reward and K costs (see ``model`` for the rules).

    ``info`` of every step::

        {"costs": float64 (K,), "cost": float, "cell": int, "slipped": bool}

    ``reset(seed=s)`` fixes the episode key from which every random draw (slip, hazard
    events) is derived, so ``s`` determines the whole episode given the actions.
    """

    metadata = {"render_modes": ["ansi"], "render_fps": 4}

    def __init__(self, render_mode: str | None = None, **kwargs: Any):
        options = task_options(kwargs)
        self.model = GridModel(options)
        m = self.model
        self.options: GridOptions = options
        self.constraints: tuple[Constraint, ...] = m.constraints
        if render_mode not in (None, "ansi"):
            raise ValueError(f"render_mode={render_mode!r}; the gridworld supports None or 'ansi'")
        self.render_mode = render_mode
        self.observation_space = spaces.Box(0.0, 1.0, shape=(m.obs_dim,), dtype=np.float32)
        self.action_space = spaces.Discrete(4)

        # Plain Python tables: scalar stepping is several times faster without numpy.
        self._next = m.next_cell.tolist()
        self._goal = m.is_goal.tolist()
        self._hazard = m.is_hazard.tolist()
        self._mud = m.is_mud.tolist()
        self._gem = m.is_gem.tolist()
        self._coords = m.coords.tolist()
        self._onehot = options.obs_mode == "onehot"
        self._slip = float(options.slip)
        self._hazard_prob = float(options.hazard_prob)
        self._goal_reward = float(options.goal_reward)
        self._gem_reward = float(options.gem_reward)
        self._step_penalty = float(options.step_penalty)
        self._indicator = {c.name: c.indicator for c in self.constraints}
        self._cost_names = m.cost_names
        self._key: int | None = None
        self._cell = m.start
        self._t = 0
        self._flags = [False, False, False]  # gem taken, hazard event, mud entered

    def optimum(self) -> Any:
        """The exact constrained and unconstrained optima (``GridOptimum``), cached."""
        from constrained_grpo.envs.gridworld.optimum import solve_optimum

        return solve_optimum(self.options)

    def return_bounds(self) -> tuple[float, float]:
        """Bounds every episode's return satisfies: an episode of T <= max_steps steps earns
        ``a goal_reward + b gem_reward - T step_penalty`` with a, b in {0, 1} (the goal ends the
        episode; the gem pays once), so it lies in ``[min(0, goal) + min(0, gem) - max(p, p T_max),
        max(0, goal) + max(0, gem) - min(p, p T_max)]``, p = step_penalty. (The LP's unconstrained
        optimum bounds only the expected return, which one lucky episode of a slippery grid may exceed.)"""
        goal, gem, p, t_max = self._goal_reward, self._gem_reward, self._step_penalty, self.max_episode_steps
        return (min(0.0, goal) + min(0.0, gem) - max(p, p * t_max), max(0.0, goal) + max(0.0, gem) - min(p, p * t_max))

    @property
    def max_episode_steps(self) -> int:
        """The horizon: an episode is truncated after this many steps."""
        return int(self.model.max_steps)

    def reference_policies(self) -> dict[str, Any]:
        """Policies that anchor the leaderboard, as ``act(obs, deterministic)``: ``optimal``,
        the LP's constrained optimum (its expected return is R* and its costs meet the
        limits), and ``unconstrained``, the cheapest reward-maximising policy."""
        from constrained_grpo.envs.gridworld.policies import optimal_policy

        opt = self.optimum()
        return {"optimal": optimal_policy(self.model, opt, True), "unconstrained": optimal_policy(self.model, opt, False)}

    def _obs(self) -> np.ndarray:
        m = self.model
        obs = np.zeros(m.obs_dim, dtype=np.float32)
        if self._onehot:
            obs[self._cell] = 1.0
        else:
            obs[0], obs[1] = self._coords[self._cell]
        p = m.pos_dim
        obs[p], obs[p + 1], obs[p + 2] = self._flags
        obs[p + 3] = self._t / m.max_steps
        return obs

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        if seed is not None:
            self._key = seed_key(seed)
        elif self._key is None:
            self._key = seed_key(int(self.np_random.integers(0, 2**63)))
        else:
            self._key = next_key(self._key)
        self._cell = self.model.start
        self._t = 0
        self._flags = [False, False, False]
        return self._obs(), {"cell": self._cell}

    def step(self, action: Any):
        if self._key is None:
            raise gym.error.ResetNeeded("call reset() before step()")
        a = int(action)
        if not 0 <= a < 4:
            raise ValueError(f"action {action!r} is not one of 0..3 {ACTION_NAMES}")
        key, t = self._key, self._t
        slipped = False
        if self._slip > 0.0 and uniform_draw(key, t, DRAW_SLIP) < self._slip:
            slipped = True
            a = int(uniform_draw(key, t, DRAW_SLIP_ACTION) * 4)
        cell = self._next[self._cell][a]
        self._cell = cell
        self._t = t + 1
        reward = -self._step_penalty
        terminated = self._goal[cell]
        if terminated:
            reward += self._goal_reward
        gem_taken, hazard_seen, mud_seen = self._flags
        if self._gem[cell] and not gem_taken:
            reward += self._gem_reward
            gem_taken = True
        hazard = self._hazard[cell] and (
            self._hazard_prob >= 1.0 or uniform_draw(key, t, DRAW_HAZARD) < self._hazard_prob
        )
        mud = self._mud[cell]
        costs = np.empty(len(self._cost_names), dtype=np.float64)
        for k, name in enumerate(self._cost_names):
            if name == "fuel":
                costs[k] = 1.0
            elif name == "hazard":
                costs[k] = float(hazard and not (self._indicator["hazard"] and hazard_seen))
            else:
                costs[k] = float(mud and not (self._indicator["mud"] and mud_seen))
        self._flags = [gem_taken, hazard_seen or hazard, mud_seen or mud]
        truncated = (not terminated) and self._t >= self.model.max_steps
        info = {"costs": costs, "cost": float(costs.sum()), "cell": cell, "slipped": slipped}
        return self._obs(), reward, terminated, truncated, info

    def render(self) -> str | None:
        if self.render_mode == "ansi":
            return self.model.render_ascii(self._cell)
        return None
