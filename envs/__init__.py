"""Task families. Importing this package registers every task id with gymnasium.

Each family registers its ids from one table, under its own namespace, idempotently.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

__all__ = ["TASKS", "TaskInfo", "list_tasks", "register_tasks", "task_info"]


@dataclass(frozen=True)
class TaskInfo:
    """One registered task: its id, family, constructor keywords and a one-line summary."""

    env_id: str
    family: str
    entry_point: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    description: str = ""
    vector_entry_point: str | None = None


_GRID = "constrained_grpo.envs.gridworld.env:GridWorldEnv"
_GRID_VEC = "constrained_grpo.envs.gridworld.batched:BatchedGridWorld"


def _grid(name: str, description: str, **kwargs: Any) -> TaskInfo:
    return TaskInfo(f"Grid/{name}-v0", "gridworld", _GRID, kwargs, description, _GRID_VEC)


#: Every task of the suite. Per-task defaults (limits, sizes) live here, beside the id.
TASKS: tuple[TaskInfo, ...] = (
    _grid("Fuel", "8x8 route choice, K=1: fuel budget against the gem route", constraints=("fuel",)),
    _grid(
        "HazardFuel",
        "8x8 route choice, K=2: hazard indicator on the short route vs fuel on the long one",
        constraints=("hazard", "fuel"),
    ),
    _grid(
        "HazardFuelMud",
        "8x8 route choice, K=3: hazard and mud indicators vs fuel",
        constraints=("hazard", "fuel", "mud"),
    ),
    _grid(
        "HazardFuelSlip",
        "8x8, K=2, slip 0.1 and hazard events with probability 0.5 (stochastic indicator)",
        constraints=("hazard", "fuel"),
        slip=0.1,
        hazard_prob=0.5,
    ),
    _grid(
        "HazardFuelCumulative",
        "8x8, K=2, cumulative hazard cost (one per hazard step) instead of an indicator",
        constraints=("hazard", "fuel"),
        indicator=False,
    ),
    _grid(
        "HazardFuelCoords",
        "8x8, K=2, coordinate observation instead of one-hot",
        constraints=("hazard", "fuel"),
        obs_mode="coords",
    ),
    _grid(
        "HazardFuel3x3",
        "3x3, K=2: the smallest instance, solvable by hand (optimum 1.2, unconstrained 1.5)",
        size=3,
        constraints=("hazard", "fuel"),
        default_limits={"hazard": 0.2, "fuel": 4.4},
    ),
    _grid(
        "HazardFuel12x12",
        "12x12, K=2: the long-horizon instance (gem route of 33 steps)",
        size=12,
        constraints=("hazard", "fuel"),
    ),
)

_BY_ID = {t.env_id: t for t in TASKS}


def register_tasks() -> None:
    """Register every task in :data:`TASKS` (idempotent)."""
    for task in TASKS:
        if task.env_id in gym.registry:
            continue
        gym.register(
            id=task.env_id,
            entry_point=task.entry_point,
            vector_entry_point=task.vector_entry_point,
            kwargs=dict(task.kwargs),
            disable_env_checker=False,
        )


def list_tasks(family: str | None = None) -> list[str]:
    """Ids of the registered tasks, optionally of one family."""
    return [t.env_id for t in TASKS if family is None or t.family == family]


def task_info(env_id: str) -> TaskInfo:
    """The table entry of ``env_id``."""
    try:
        return _BY_ID[env_id]
    except KeyError:
        raise gym.error.UnregisteredEnv(f"unknown task id {env_id!r}; registered tasks: {list_tasks()}") from None


register_tasks()
