"""Agents of the suite: the Constrained GRPO family. Importing registers them.

Names (``constrained_grpo.list_agents()``): ``cgrpo`` (ScAdv), ``grpo-screw`` (ScRew),
``grpo`` (unconstrained) and the variants of :data:`~constrained_grpo.agents.variants.VARIANTS`.
"""

from constrained_grpo.agents.agent import GRPOAgent, load_agent, make_grpo_agent
from constrained_grpo.agents.config import PRESETS, GRPOConfig, make_config
from constrained_grpo.agents.trainer import GRPOTrainer, NonFiniteRolloutError, RolloutAdapter, RolloutBatch
from constrained_grpo.agents.variants import VARIANTS, register_variants

register_variants()

__all__ = [
    "GRPOAgent",
    "GRPOConfig",
    "GRPOTrainer",
    "NonFiniteRolloutError",
    "PRESETS",
    "RolloutAdapter",
    "RolloutBatch",
    "VARIANTS",
    "load_agent",
    "make_config",
    "make_grpo_agent",
    "register_variants",
]
