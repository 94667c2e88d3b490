"""Safety-Gymnasium tasks (and any legacy-gymnasium env) through an isolated bridge process.

Safety-Gymnasium 1.0.0 needs gymnasium 0.28 and numpy < 1.24, so it runs in a second
Python environment (``make safety``), in a worker process that :class:`LegacyBridgeEnv`
and :class:`LegacyBridgeVectorEnv` talk to over a pipe (docs/safety_bridge.md).
"""

from constrained_grpo.envs.safety.bridge import (
    BridgeError,
    BridgeUnavailable,
    LegacyEnvError,
    WorkerCrashed,
    find_safety_python,
)
from constrained_grpo.envs.safety.env import LegacyBridgeEnv, LegacyBridgeVectorEnv
from constrained_grpo.envs.safety.tasks import SAFETY_TASKS

__all__ = [
    "SAFETY_TASKS",
    "BridgeError",
    "BridgeUnavailable",
    "LegacyBridgeEnv",
    "LegacyBridgeVectorEnv",
    "LegacyEnvError",
    "WorkerCrashed",
    "find_safety_python",
]
