"""The gridworld task family: route choice under hazard, fuel and mud constraints."""

from constrained_grpo.envs.gridworld.batched import BatchedGridWorld
from constrained_grpo.envs.gridworld.env import GridWorldEnv
from constrained_grpo.envs.gridworld.model import GridModel, GridOptions, default_layout

__all__ = ["BatchedGridWorld", "GridModel", "GridOptimum", "GridOptions", "GridWorldEnv", "default_layout", "solve_optimum"]


def __getattr__(name: str) -> object:
    # The LP solver imports scipy.optimize (a few hundred ms): only when the optimum is asked for.
    if name in ("GridOptimum", "solve_optimum"):
        from constrained_grpo.envs.gridworld import optimum

        return getattr(optimum, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
