"""The highway-driving task family on highway-env (``Highway/...`` ids).

Light on purpose: the table (``tasks``) and the options (``options``) import nothing
from highway-env; the simulator is imported when a task is made (``env``,
``scenarios``, ``fast``, ``costs``, ``vector``).
"""

from constrained_grpo.envs.highway.tasks import HIGHWAY_TASKS

__all__ = ["HIGHWAY_TASKS"]
