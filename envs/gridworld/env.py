"""The single gridworld env (one grid, pure-Python stepping for speed)."""

from __future__ import annotations

from collections.abc import Mapping
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

    def possible_episodes(self, returns: Any, lengths: Any, costs: Mapping[str, Any]) -> np.ndarray:
        """Whether each episode's return, length and costs are an outcome of this task: it
        ends on a goal (``a = 1``, after at least the shortest route's steps) or at the horizon
        (``a = 0``, ``T = max_steps``); it earns ``a goal_reward + b gem_reward - T step_penalty``
        (``b = 1`` only if the gem is on its way: ``T`` at least the steps to the gem, and on to
        the goal when it ends there); fuel is ``T``; an indicator cost is 0 or 1 and a counted
        one a whole number at most ``T``; a hazard (when certain) or mud cost of 0 means the
        route entered none of those cells, so the shortest routes avoid them. ``lengths`` may
        be NaN (unknown): fuel gives ``T`` then, and without either only the costs are checked."""
        r = np.asarray(returns, dtype=float)
        t = np.asarray(lengths, dtype=float) if lengths is not None else np.full(r.shape, np.nan)
        if "fuel" in costs:
            t = np.where(np.isnan(t), np.asarray(costs["fuel"], dtype=float), t)
        ok = np.ones(r.shape, dtype=bool)
        clean = {name: np.zeros(r.shape, dtype=bool) for name in ("hazard", "mud")}
        for name, values in costs.items():
            c = np.asarray(values, dtype=float)
            if name == "fuel":
                ok &= np.isnan(t) | (c == t)
                continue
            high = 1.0 if self._indicator.get(name, False) else np.where(np.isnan(t), self.max_episode_steps, t)
            ok &= (c == np.round(c)) & (c >= 0) & (c <= high)
            if name in clean and (name == "mud" or self._hazard_prob >= 1.0):
                clean[name] = c == 0.0
        known = ~np.isnan(t)
        whole = known & (t == np.round(t)) & (t >= 1) & (t <= self.max_episode_steps)
        p, horizon = self._step_penalty, self.max_episode_steps
        match = np.zeros(r.shape, dtype=bool)
        for avoid_hazard in (False, True):
            for avoid_mud in (False, True):
                rows = (clean["hazard"] == avoid_hazard) & (clean["mud"] == avoid_mud)
                if not rows.any():
                    continue
                dist_goal, to_gem, gem_to_goal = self._route_lengths(avoid_hazard, avoid_mud)
                for a in (0, 1):
                    if a and dist_goal is None:
                        continue  # no goal on a route that avoids those cells
                    for b in ((0, 1) if to_gem is not None and self._gem_reward != 0.0 else (0,)):
                        if b and a and gem_to_goal is None:
                            continue  # no goal beyond the gem
                        earned = a * self._goal_reward + b * self._gem_reward - t * p
                        length_ok = (t >= dist_goal) if a else (t == horizon)
                        if b:
                            length_ok &= t >= (to_gem + gem_to_goal if a else to_gem)
                        match |= rows & length_ok & (np.abs(r - earned) <= 1e-6 * np.maximum(1.0, np.abs(earned)))
        return ok & (~known | (whole & match))

    def episode_rule(self) -> str:
        """:meth:`possible_episodes` in words, with this task's numbers."""
        goal, to_gem, _ = self._route_lengths(False, False)
        gem = (f" + {self._gem_reward:g} if it takes the gem (at least {to_gem} steps away)" if to_gem is not None else "")
        return (f"an episode ends on the goal after at least {goal} steps (more if it avoids the hazards or the mud) or "
                f"at the horizon of {self.max_episode_steps}, earns {self._goal_reward:g} for the goal{gem} - "
                f"{self._step_penalty:g} per step, and spends 1 fuel per step")

    def _route_lengths(self, avoid_hazard: bool, avoid_mud: bool) -> tuple[int | None, int | None, int | None]:
        """Steps from the start to a goal, from the start to the gem and from the gem to a goal
        on routes that enter no hazard (``avoid_hazard``) or mud (``avoid_mud``) cell; None
        where there is no such route (or no gem)."""
        from collections import deque

        blocked = {c for c in range(len(self._next))
                   if (avoid_hazard and self._hazard[c]) or (avoid_mud and self._mud[c])}

        def bfs(origin: int) -> dict[int, int]:
            dist, queue = {origin: 0}, deque([origin])
            while queue:
                cell = queue.popleft()
                if self._goal[cell] and cell != origin:
                    continue  # the goal ends the episode
                for nxt in self._next[cell]:
                    if nxt not in dist and nxt not in blocked:
                        dist[nxt] = dist[cell] + 1
                        queue.append(nxt)
            return dist

        from_start = bfs(self.model.start)
        goals = [d for c, d in from_start.items() if self._goal[c]]
        gems = [c for c, g in enumerate(self._gem) if g and c in from_start]
        if not gems:
            return (min(goals) if goals else None), None, None
        from_gem = bfs(gems[0])
        on = [d for c, d in from_gem.items() if self._goal[c]]
        return (min(goals) if goals else None), from_start[gems[0]], (min(on) if on else None)

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
