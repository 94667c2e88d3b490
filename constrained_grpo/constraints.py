"""Constraint specs and the cost-vector contract (docs/architecture.md, Contract 1).

A constrained task declares ``constraints: tuple[Constraint, ...]`` on its unwrapped
env. Constraint k bounds the expected episodic cost,

    J_k(pi) = E_pi[ sum_t c_{k,t} ] <= d_k ,

and every ``step`` reports this step's costs as ``info["costs"]`` (float64, shape
``(K,)``, in the order of ``constraints``) and their sum as ``info["cost"]``.
An *indicator* constraint emits cost 1 at most once per episode, so ``d_k`` is a
violation probability.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import gymnasium as gym
import numpy as np

__all__ = [
    "Constraint",
    "ConstraintError",
    "CostContractError",
    "costs_from_info",
    "get_constraints",
    "make_cost_info",
    "override_limits",
    "validate_limit",
]


class ConstraintError(ValueError):
    """A constraint spec or limit is invalid."""


class CostContractError(ValueError):
    """An env does not follow the cost contract (docs/architecture.md, Contract 1)."""


def validate_limit(name: str, limit: Any) -> float:
    """Return ``limit`` as a float, or raise naming the bad value and the fix."""
    try:
        value = float(limit)
    except (TypeError, ValueError):
        raise ConstraintError(
            f"limit for constraint {name!r} must be a number, got {limit!r}; "
            "pass a finite float >= 0, e.g. limit=0.1"
        ) from None
    if not math.isfinite(value) or value < 0:
        raise ConstraintError(
            f"limit for constraint {name!r} must be finite and >= 0, got {limit!r}; "
            "pass a finite float >= 0 (a limit of 0 forbids any cost)"
        )
    return value


@dataclass(frozen=True)
class Constraint:
    """One constraint ``E[sum_t c_t] <= limit`` of a task.

    Attributes:
        name: identifier used in logs and result columns (``cost_<name>``,
            ``lambda_<name>``); lowercase letters, digits and ``_``.
        limit: the bound ``d`` on the expected episodic cost.
        description: one line saying what is counted.
        indicator: True if the cost is 1 at most once per episode, so that ``limit``
            is a violation probability.
    """

    name: str
    limit: float
    description: str = ""
    indicator: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name or not all(
            ch.isalnum() or ch == "_" for ch in self.name
        ) or self.name.lower() != self.name:
            raise ConstraintError(
                f"constraint name must be a non-empty lowercase identifier "
                f"(letters, digits, '_'), got {self.name!r}"
            )
        object.__setattr__(self, "limit", validate_limit(self.name, self.limit))
        if self.indicator and self.limit > 1.0:
            raise ConstraintError(
                f"limit for constraint {self.name!r} is a probability (the cost is 1 at most once per episode), "
                f"got {self.limit:g}; pass a value in [0, 1], e.g. limit=0.1"
            )

    def with_limit(self, limit: float) -> "Constraint":
        """A copy with another limit (validated)."""
        return replace(self, limit=limit)


def override_limits(
    constraints: Sequence[Constraint], limits: Mapping[str, float] | Sequence[float] | None
) -> tuple[Constraint, ...]:
    """Apply user limits to declared constraints.

    ``limits`` is either a mapping ``{name: limit}`` (only declared names allowed) or a
    sequence with one limit per constraint, in order.
    """
    constraints = tuple(constraints)
    if limits is None:
        return constraints
    names = [c.name for c in constraints]
    if isinstance(limits, Mapping):
        unknown = [k for k in limits if k not in names]
        if unknown:
            raise ConstraintError(
                f"limit given for unknown constraint(s) {unknown}; this task's constraints are {names}"
            )
        return tuple(c.with_limit(limits[c.name]) if c.name in limits else c for c in constraints)
    values = list(limits)
    if len(values) != len(constraints):
        raise ConstraintError(
            f"got {len(values)} limit(s) {values} for {len(constraints)} constraint(s) {names}; "
            "give one limit per constraint, or a mapping {name: limit}"
        )
    return tuple(c.with_limit(v) for c, v in zip(constraints, values))


def get_constraints(env: gym.Env | Any) -> tuple[Constraint, ...]:
    """The constraints declared by ``env`` (raise if there are none).

    Looked up through the wrapper chain, outermost first, so that an adapter such as
    ``SafetyGymnasiumToContract`` can declare them for a legacy env.
    """
    base = getattr(env, "unwrapped", env)
    constraints = getattr(env, "constraints", None)
    if constraints is None and hasattr(env, "get_wrapper_attr"):
        try:
            constraints = env.get_wrapper_attr("constraints")
        except AttributeError:
            constraints = None
    if constraints is None:
        raise CostContractError(
            f"{type(base).__name__} declares no `constraints`; a constrained task must set "
            "`constraints: tuple[Constraint, ...]` on its unwrapped env and report "
            "info['costs'] (docs/architecture.md, Contract 1)"
        )
    constraints = tuple(constraints)
    if not all(isinstance(c, Constraint) for c in constraints):
        raise CostContractError(
            f"{type(base).__name__}.constraints must hold Constraint objects, got "
            f"{[type(c).__name__ for c in constraints]}"
        )
    return constraints


def make_cost_info(costs: np.ndarray | Sequence[float]) -> dict[str, Any]:
    """The info entries for one step's cost vector: ``{"costs": c, "cost": sum(c)}``.

    >>> make_cost_info([1.0, 0.5])
    {'costs': array([1. , 0.5]), 'cost': 1.5}
    """
    arr = np.asarray(costs, dtype=np.float64)
    return {"costs": arr, "cost": float(arr.sum())}


def costs_from_info(info: Mapping[str, Any], num_constraints: int | None = None) -> np.ndarray:
    """Read the cost vector of one (non-vectorized) step from ``info``.

    Accepts ``info["costs"]`` (the contract) and, for a single-constraint task,
    Safety-Gymnasium's scalar ``info["cost"]``. Raises ``CostContractError`` otherwise.
    """
    if "costs" in info:
        costs = np.asarray(info["costs"], dtype=np.float64)
        if costs.ndim != 1:
            raise CostContractError(
                f"info['costs'] must have shape (K,), got shape {costs.shape}"
            )
    elif "cost" in info and num_constraints in (None, 1):
        costs = np.asarray([info["cost"]], dtype=np.float64)
    else:
        raise CostContractError(
            f"step info has no cost vector (keys: {sorted(info)}); a constrained task must put "
            "this step's costs in info['costs'] as a float64 array of shape (K,) "
            "(docs/architecture.md, Contract 1)"
        )
    if num_constraints is not None and costs.shape != (num_constraints,):
        raise CostContractError(
            f"info['costs'] has shape {costs.shape} but the task declares "
            f"{num_constraints} constraint(s)"
        )
    return costs
