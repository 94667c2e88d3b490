"""Scripted gridworld policies: shortest routes that avoid chosen cell kinds.

They serve as sanity baselines and for teaching: on ``Grid/HazardFuel-v0`` the
``short`` route breaks the hazard limit, the ``gem`` route breaks the fuel limit, and
only a mixture of routes reaches the exact constrained optimum.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np

from constrained_grpo.envs.gridworld.model import GridModel

__all__ = ["ROUTES", "cell_of", "optimal_policy", "route_actions", "route_policy"]

#: route name -> (cell kinds to avoid, whether to collect the gem first)
ROUTES: dict[str, tuple[str, bool]] = {
    "short": ("", False),
    "safe": ("H", False),
    "clean": ("HM", False),
    "gem": ("HM", True),
}


def _bfs_path(model: GridModel, start: int, targets: set[int], avoid: str) -> list[int]:
    """Actions of a shortest path from ``start`` to any of ``targets`` not entering ``avoid`` cells."""
    blocked = np.zeros(model.n_cells, dtype=bool)
    for ch in avoid:
        blocked |= np.array([c == ch for c in "".join(model.layout)])
    prev: dict[int, tuple[int, int]] = {start: (-1, -1)}
    queue = deque([start])
    while queue:
        cell = queue.popleft()
        if cell in targets:
            actions = []
            while prev[cell][0] != -1:
                cell, a = prev[cell]
                actions.append(a)
            return actions[::-1]
        for a in range(4):
            nxt = int(model.next_cell[cell, a])
            if nxt not in prev and not blocked[nxt]:
                prev[nxt] = (cell, a)
                queue.append(nxt)
    raise ValueError(f"no route from cell {start} to {sorted(targets)} that avoids {avoid!r}")


def route_actions(model: GridModel, route: str) -> list[int]:
    """The action sequence of a named route (see :data:`ROUTES`) from the start."""
    if route not in ROUTES:
        raise ValueError(f"unknown route {route!r}; choose one of {sorted(ROUTES)}")
    avoid, via_gem = ROUTES[route]
    goals = {int(c) for c in np.flatnonzero(model.is_goal)}
    if via_gem and model.is_gem.any():
        gem = int(np.flatnonzero(model.is_gem)[0])
        first = _bfs_path(model, model.start, {gem}, avoid)
        return first + _bfs_path(model, gem, goals, avoid)
    return _bfs_path(model, model.start, goals, avoid)


def cells_of(model: GridModel, obs: np.ndarray) -> np.ndarray:
    """The agent's cell in each row of ``obs`` ``(B, D)``, one-hot or coordinate observations."""
    obs = np.asarray(obs, dtype=np.float64)
    if model.options.obs_mode == "onehot":
        return np.argmax(obs[:, : model.pos_dim], axis=1)
    rows = np.rint(obs[:, 0] * (model.n_rows - 1)).astype(np.int64)
    return rows * model.n_cols + np.rint(obs[:, 1] * (model.n_cols - 1)).astype(np.int64)


def cell_of(model: GridModel, obs: np.ndarray) -> int:
    """The agent's cell in one observation (:func:`cells_of`)."""
    return int(cells_of(model, np.asarray(obs)[None])[0])


class TabularPolicy:
    """A policy given by its action probabilities for a batch of observations,
    ``probs_batch(obs (B, D)) -> (B, 4)``, callable as ``act(obs, deterministic)``: the most
    likely action, or a draw from numpy's global generator (which the harness seeds)."""

    def __init__(self, probs_batch: Callable[[np.ndarray], np.ndarray]):
        self.probs_batch = probs_batch

    def probs(self, obs: np.ndarray) -> np.ndarray:
        """The action probabilities of one observation, ``(4,)``."""
        return self.probs_batch(np.asarray(obs)[None])[0]

    def __call__(self, obs: np.ndarray, deterministic: bool = False) -> int:
        probs = self.probs(obs)
        if deterministic:
            return int(np.argmax(probs))
        return int(np.searchsorted(np.cumsum(probs), np.random.random_sample() * probs.sum(), side="right").clip(0, 3))


def optimal_policy(model: GridModel, optimum: Any, constrained: bool = True) -> TabularPolicy:
    """The exact optimal policy of the LP (``optimum.action_probs``) as ``act(obs, deterministic)``.

    The observation holds the cell, the three flags and t / max_steps, which is the LP's
    time-augmented state ``(t, 8 cell + flags)``; the policy looks each one up in the LP's
    table of ``pi*(. | t, s)`` (built on first use). ``deterministic`` takes the most likely
    action, which is one route of a mixture and so is not optimal where the optimum mixes.
    """
    p = model.pos_dim
    tables: list[np.ndarray] = []

    def probs_batch(obs: np.ndarray) -> np.ndarray:
        if not tables:
            tables.append(optimum.policy_index.table(constrained, 8 * model.n_rows * model.n_cols))
        obs = np.asarray(obs, dtype=np.float64)
        flags = (obs[:, p] > 0.5) | (obs[:, p + 1] > 0.5).astype(np.int64) << 1 | (obs[:, p + 2] > 0.5).astype(np.int64) << 2
        t = np.clip(np.rint(obs[:, p + 3] * model.max_steps).astype(np.int64), 0, len(tables[0]) - 1)
        return tables[0][t, 8 * cells_of(model, obs) + flags]

    return TabularPolicy(probs_batch)


def route_policy(model: GridModel, route: str) -> Callable[[np.ndarray], int]:
    """A closed-loop policy ``obs -> action`` that follows ``route`` (re-planning after a slip).

    Reads the agent's cell from a one-hot or coordinate observation and the gem flag.
    """
    avoid, via_gem = ROUTES[route] if route in ROUTES else (None, None)
    if avoid is None:
        raise ValueError(f"unknown route {route!r}; choose one of {sorted(ROUTES)}")
    goals = {int(c) for c in np.flatnonzero(model.is_goal)}
    gem_cells = {int(c) for c in np.flatnonzero(model.is_gem)}

    def act(obs: np.ndarray) -> int:
        p = model.pos_dim
        cell = cell_of(model, obs)
        targets = gem_cells if via_gem and gem_cells and obs[p] < 0.5 else goals
        if cell in targets:
            targets = goals
        path = _bfs_path(model, cell, targets, avoid) if cell not in goals else [0]
        return path[0] if path else 0

    return act
