"""The gridworld task table. Per-task defaults (limits, sizes) live here, beside the id."""

from __future__ import annotations

from typing import Any

from constrained_grpo.envs.registration import TaskInfo

__all__ = ["GRID_TASKS"]

_GRID = "constrained_grpo.envs.gridworld.env:GridWorldEnv"
_GRID_VEC = "constrained_grpo.envs.gridworld.batched:BatchedGridWorld"


def _grid(name: str, description: str, **kwargs: Any) -> TaskInfo:
    return TaskInfo(f"Grid/{name}-v0", "gridworld", _GRID, kwargs, description, _GRID_VEC)


#: The gridworld tasks.
GRID_TASKS: tuple[TaskInfo, ...] = (
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

