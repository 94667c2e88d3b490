"""constrained-grpo: a Gymnasium benchmark suite for constrained RL, with Constrained GRPO.

The core package holds the contracts shared by every part (docs/architecture.md):
constraint specs and the cost vector, the algorithm registry, the Lagrange multipliers,
the constrained env checker and the cost wrappers.
"""

from constrained_grpo.constraints import (
    Constraint,
    ConstraintError,
    CostContractError,
    costs_from_info,
    get_constraints,
    make_cost_info,
)
from constrained_grpo.env_checker import check_constrained_env
from constrained_grpo.multipliers import MultiplierConfig, make_multiplier
from constrained_grpo.registry import (
    EvalResult,
    agent_spec,
    list_agents,
    make_agent,
    register_agent,
)
from constrained_grpo.tasks import make_env, make_vec_env

__version__ = "0.1.0"

__all__ = [
    "Constraint",
    "ConstraintError",
    "CostContractError",
    "EvalResult",
    "MultiplierConfig",
    "agent_spec",
    "check_constrained_env",
    "costs_from_info",
    "get_constraints",
    "list_agents",
    "make_agent",
    "make_cost_info",
    "make_env",
    "make_multiplier",
    "make_vec_env",
    "register_agent",
]
