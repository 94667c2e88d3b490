"""The task table entry and the registration helper shared by every task family."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

__all__ = ["TaskInfo", "register_table"]


@dataclass(frozen=True)
class TaskInfo:
    """One registered task: its id, family, constructor keywords and a one-line summary."""

    env_id: str
    family: str
    entry_point: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    description: str = ""
    vector_entry_point: str | None = None


def register_table(tasks: tuple[TaskInfo, ...]) -> None:
    """Register every task of a family's table with gymnasium (idempotent)."""
    for task in tasks:
        if task.env_id in gym.registry:
            continue
        gym.register(
            id=task.env_id,
            entry_point=task.entry_point,
            vector_entry_point=task.vector_entry_point,
            kwargs=dict(task.kwargs),
        )
