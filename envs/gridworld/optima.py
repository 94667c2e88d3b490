"""The exact optima of the registered gridworld tasks (R*, the duals lambda*, the unconstrained
optimum), as their LP solves them (:mod:`.optimum`), kept as the family's ``optima``: the loader
compares the optimum a record or a run folder carries with these, without solving the LP again
(1-25 s per 8x8 grid).
tests/eval/test_trust.py solves some of them again. Grid/HazardFuel12x12-v0 is not listed: its
LP is solved when a board holds it."""

from __future__ import annotations

from typing import Any

__all__ = ["REGISTERED_OPTIMA"]

#: Task id -> ``TaskMeta.to_dict()["optimum"]`` of the registered task.
REGISTERED_OPTIMA: dict[str, dict[str, Any]] = {
    'Grid/Fuel-v0': {
        "constrained_return": 1.1785714285714288,
        "multipliers": [0.035714285714285754],
        "unconstrained_return": 1.5,
    },
    'Grid/HazardFuel-v0': {
        "constrained_return": 1.1333333333333337,
        "multipliers": [0.08333333333333348, 0.04166666666666674],
        "unconstrained_return": 1.5,
    },
    'Grid/HazardFuel3x3-v0': {
        "constrained_return": 1.2000000000000002,
        "multipliers": [0.49999999999999994, 0.25000000000000006],
        "unconstrained_return": 1.5,
    },
    'Grid/HazardFuelCoords-v0': {
        "constrained_return": 1.1333333333333337,
        "multipliers": [0.08333333333333348, 0.04166666666666674],
        "unconstrained_return": 1.5,
    },
    'Grid/HazardFuelCumulative-v0': {
        "constrained_return": 1.1319444444444442,
        "multipliers": [0.01388888888888895, 0.041666666666666664],
        "unconstrained_return": 1.5,
    },
    'Grid/HazardFuelMud-v0': {
        "constrained_return": 1.0900000000000003,
        "multipliers": [0.20000000000000018, 0.050000000000000044, 0.10000000000000009],
        "unconstrained_return": 1.5,
    },
    'Grid/HazardFuelSlip-v0': {
        "constrained_return": 1.083662215408618,
        "multipliers": [0.09946893472851208, 0.0382296780795765],
        "unconstrained_return": 1.4987071332530342,
    },
}
