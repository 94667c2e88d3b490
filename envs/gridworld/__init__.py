"""The gridworld task family: route choice under hazard, fuel and mud constraints."""

from constrained_grpo.envs.gridworld.batched import BatchedGridWorld
from constrained_grpo.envs.gridworld.env import GridWorldEnv
from constrained_grpo.envs.gridworld.model import GridModel, GridOptions, default_layout
from constrained_grpo.envs.gridworld.optimum import GridOptimum, solve_optimum

__all__ = ["BatchedGridWorld", "GridModel", "GridOptimum", "GridOptions", "GridWorldEnv", "default_layout", "solve_optimum"]
