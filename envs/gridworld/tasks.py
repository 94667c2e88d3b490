"""The gridworld task table. Per-task defaults (limits, sizes) live here, beside the id."""

from __future__ import annotations

from typing import Any

from constrained_grpo.envs.gridworld.optima import REGISTERED_OPTIMA
from constrained_grpo.envs.registration import Binding, EvalPlan, Family, TaskInfo

__all__ = ["GRIDWORLD", "GRID_TASKS"]

_GRID = "constrained_grpo.envs.gridworld.env:GridWorldEnv"
_GRID_VEC = "constrained_grpo.envs.gridworld.batched:BatchedGridWorld"


#: The gridworld family's facts. Reasons, one line each (the runs behind them: docs/tuning.md):
#:
#: - ``eval``: episodes cost microseconds on the batched twin, so the plan asks for 99% power
#:   to certify a policy at its limit (14,790 episodes at an indicator limit of 0.1, 6,534 at
#:   0.2), at most 20,000: the exact optimum is then within, and scores 1.00, on every grid.
#: - ``grpo``: the observation is a one-hot cell, so a linear policy is tabular and does not
#:   carry the first route's habit into unvisited cells; it takes a larger step size; a
#:   stronger entropy bonus keeps the far route in reach; ``ki`` 0.05 removes the
#:   steady-state error the proportional term leaves within the budget.
#: - ``sb3``: finite-horizon tasks with an exact optimum. R*, the leaderboard and the GRPO
#:   agents score the undiscounted episodic return ``sum_t r_t`` (and costs ``sum_t c_{k,t}``),
#:   so the baselines optimise that too: ``gamma = 1`` (``cost_gamma`` follows it). With 0.99
#:   the 21-step gem route of Grid/HazardFuel-v0 is worth ``0.99^12 ~ 0.89`` of what it scores
#:   relative to the 9-step safe route: a different problem from the one ranked.
#:   ``gae_lambda`` stays 0.95 < 1: it trades the variance of the Monte-Carlo return for the
#:   critic's bias, not the objective. The horizon is part of the task (the LP's too), so an
#:   episode cut by it is not bootstrapped (``time_limit_bootstrap``).
GRIDWORLD = Family(
    "gridworld",
    EvalPlan(power=0.99, cap=20_000, pilot=1_000),
    references=("ref-random", "ref-optimal", "ref-unconstrained"),
    defaults={
        "grpo": {"hidden_sizes": (), "lr": 1e-2, "entropy_coef": 0.08, "multiplier": {"ki": 0.05}},
        "sb3": {"gamma": 1.0, "time_limit_bootstrap": False},
    },
    return_bounds=True,
    episode_check=True,
    # Binding: the exact optimum decides (the unconstrained optimum breaks a limit, the
    # constrained one keeps them), and the recorded unconstrained learners and references agree.
    binding=Binding(unconstrained=("ref-unconstrained", "ppo", "grpo"), keepers=("ref-optimal",), exact=True),
    optima=REGISTERED_OPTIMA,
)


def _grid(name: str, description: str, defaults: dict[str, Any] | None = None, **kwargs: Any) -> TaskInfo:
    return TaskInfo(f"Grid/{name}-v0", GRIDWORLD, _GRID, kwargs, description, _GRID_VEC, defaults=defaults or {}, batched_eval=True)


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
        # Coordinates need hidden layers to be mapped to actions.
        defaults={"grpo": {"hidden_sizes": (64, 64), "lr": 3e-3}},
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

