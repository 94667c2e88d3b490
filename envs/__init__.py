"""Task families. Importing this package registers every task id with gymnasium.

Each family keeps its table of ids in a light module (``<family>/tasks.py``, no heavy
imports) and registers it under its own namespace, idempotently. The family's simulator
is imported only when one of its envs is made.
"""

from __future__ import annotations

import gymnasium as gym

from constrained_grpo.envs.gridworld.tasks import GRID_TASKS
from constrained_grpo.envs.highway.tasks import HIGHWAY_TASKS
from constrained_grpo.envs.math.tasks import MATH_TASKS
from constrained_grpo.envs.registration import TaskInfo, register_table
from constrained_grpo.envs.safety.tasks import SAFETY_TASKS

__all__ = ["TASKS", "TaskInfo", "list_tasks", "register_tasks", "task_info"]

#: Every task of the suite, family by family.
TASKS: tuple[TaskInfo, ...] = GRID_TASKS + HIGHWAY_TASKS + SAFETY_TASKS + MATH_TASKS

_BY_ID = {t.env_id: t for t in TASKS}


def register_tasks() -> None:
    """Register every task in :data:`TASKS` (idempotent)."""
    register_table(TASKS)


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
