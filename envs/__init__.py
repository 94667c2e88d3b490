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
from constrained_grpo.envs.registration import USER_FAMILY, Family, TaskInfo, register_table, register_task, user_tasks
from constrained_grpo.envs.safety.tasks import SAFETY_TASKS

__all__ = ["TASKS", "Family", "TaskInfo", "families", "list_tasks", "register_task", "register_tasks", "task_info"]

#: Every task of the suite, family by family.
TASKS: tuple[TaskInfo, ...] = GRID_TASKS + HIGHWAY_TASKS + SAFETY_TASKS + MATH_TASKS

_BY_ID = {t.env_id: t for t in TASKS}


def register_tasks() -> None:
    """Register every task in :data:`TASKS` (idempotent)."""
    register_table(TASKS)


def list_tasks(family: str | None = None) -> list[str]:
    """Ids of the suite's tasks, optionally of one family (by name)."""
    return [t.env_id for t in TASKS if family is None or t.family.name == family]


def families() -> list[str]:
    """Names of the suite's task families, in table order."""
    return list(dict.fromkeys(t.family.name for t in TASKS))


def task_info(env_id: str) -> TaskInfo:
    """The facts of task ``env_id``: its table entry, the entry a user module declared with
    :func:`register_task`, or, for an id registered with gymnasium alone, an entry of
    :data:`USER_FAMILY` (no option changed). The id's text plays no part."""
    if env_id in _BY_ID:
        return _BY_ID[env_id]
    declared = user_tasks().get(env_id)
    if declared is not None:
        return declared
    if env_id in gym.registry:
        spec = gym.spec(env_id)
        entry = spec.entry_point if isinstance(spec.entry_point, str) else getattr(spec.entry_point, "__name__", "")
        return TaskInfo(env_id, USER_FAMILY, entry, dict(spec.kwargs))
    raise gym.error.UnregisteredEnv(f"unknown task id {env_id!r}; registered tasks: {list_tasks()}")


register_tasks()
