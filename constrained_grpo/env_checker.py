"""``check_constrained_env``: gymnasium's ``check_env`` plus the cost contract."""

from __future__ import annotations

import warnings
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.utils.env_checker import check_env, data_equivalence

from constrained_grpo.constraints import Constraint, CostContractError, get_constraints

__all__ = ["check_constrained_env"]


def _check_cost_info(info: dict[str, Any], constraints: tuple[Constraint, ...], where: str) -> np.ndarray:
    k = len(constraints)
    if "costs" not in info:
        raise CostContractError(
            f"{where}: info has no 'costs' (keys: {sorted(info)}); put this step's cost "
            f"vector, a float64 array of shape ({k},), in info['costs']"
        )
    costs = info["costs"]
    if not isinstance(costs, np.ndarray):
        raise CostContractError(
            f"{where}: info['costs'] must be a numpy array, got {type(costs).__name__}"
        )
    if costs.shape != (k,):
        raise CostContractError(
            f"{where}: info['costs'] has shape {costs.shape}, but the env declares {k} "
            f"constraint(s) {[c.name for c in constraints]}; it must have shape ({k},)"
        )
    if costs.dtype != np.float64:
        raise CostContractError(f"{where}: info['costs'] has dtype {costs.dtype}; it must be float64")
    if not np.all(np.isfinite(costs)):
        raise CostContractError(f"{where}: info['costs'] = {costs.tolist()} is not finite")
    if "cost" not in info:
        raise CostContractError(f"{where}: info has no 'cost' (the sum of info['costs'])")
    total = info["cost"]
    if not isinstance(total, (float, np.floating)) or not np.isclose(total, costs.sum(), rtol=1e-9, atol=1e-12):
        raise CostContractError(
            f"{where}: info['cost'] = {total!r} must be a float equal to sum(info['costs']) = {costs.sum()!r}"
        )
    return costs


def _trajectory(env: gym.Env, seed: int, actions: list[Any]) -> list[tuple[Any, ...]]:
    obs, _ = env.reset(seed=seed)
    steps: list[tuple[Any, ...]] = [(obs,)]
    for action in actions:
        obs, reward, terminated, truncated, info = env.step(action)
        steps.append((obs, float(reward), np.asarray(info.get("costs")), terminated, truncated))
        if terminated or truncated:
            obs, _ = env.reset()
            steps.append((obs,))
    return steps


def check_constrained_env(
    env: gym.Env, *, num_steps: int = 300, seed: int = 0, skip_gym_check: bool = False
) -> dict[str, Any]:
    """Check ``env`` against gymnasium's API and the cost contract.

    Runs ``gymnasium.utils.env_checker.check_env`` (unless ``skip_gym_check``), then

    * the env declares a non-empty tuple of :class:`Constraint` with distinct names;
    * for ``num_steps`` random steps, ``info["costs"]`` is a finite float64 array of shape
      ``(K,)`` and ``info["cost"]`` equals its sum;
    * ``reset(seed=s)`` twice gives identical initial observations, and identical action
      sequences then give identical trajectories (observations, rewards, costs, flags).

    Returns a short report; raises :class:`CostContractError` naming the first problem.
    """
    constraints = get_constraints(env)
    if not constraints:
        raise CostContractError("the env declares an empty tuple of constraints; declare at least one")
    names = [c.name for c in constraints]
    if len(set(names)) != len(names):
        raise CostContractError(f"constraint names must be distinct, got {names}")

    if not skip_gym_check:
        with warnings.catch_warnings():
            # check_env warns when given a wrapped env; wrappers are part of what we check.
            warnings.filterwarnings("ignore", message=".*different from the unwrapped version.*")
            check_env(env, skip_render_check=True)

    env.action_space.seed(seed)
    actions = [env.action_space.sample() for _ in range(num_steps)]
    env.reset(seed=seed)
    episodes = 0
    for t, action in enumerate(actions):
        _, _, terminated, truncated, info = env.step(action)
        _check_cost_info(info, constraints, f"step {t}")
        if terminated or truncated:
            episodes += 1
            env.reset()

    first_a, _ = env.reset(seed=seed + 1)
    first_b, _ = env.reset(seed=seed + 1)
    if not data_equivalence(first_a, first_b, exact=True):
        raise CostContractError(
            f"reset(seed={seed + 1}) twice gave different initial observations; reset(seed=s) "
            "must fully determine the initial state (a GRPO group shares it)"
        )
    run_a = _trajectory(env, seed + 1, actions)
    run_b = _trajectory(env, seed + 1, actions)
    for t, (a, b) in enumerate(zip(run_a, run_b)):
        if not data_equivalence(a, b, exact=True):
            raise CostContractError(
                f"reset(seed={seed + 1}) and the same actions gave different trajectories at "
                f"record {t}: {a!r} vs {b!r}; every random draw must come from the seeded reset"
            )
    return {"constraints": names, "limits": [c.limit for c in constraints], "steps": num_steps, "episodes": episodes}
