"""The exact constrained optimum of a gridworld, by a linear program over occupancy measures.

The state is augmented with the elapsed time ``t`` and the flags that the rewards and
costs depend on, which makes the finite-horizon CMDP exact (including truncation at
``max_steps`` and indicator costs). With occupancy ``x[t, s, a] >= 0``:

    max_x   sum x[t,s,a] r(s,a)
    s.t.    sum_a x[0,s,a] = mu0(s)
            sum_a x[t,s',a] = sum_{s,a} x[t-1,s,a] P(s'|s,a)     (non-terminal s')
            sum x[t,s,a] c_k(s,a) <= d_k                          for every constraint k

Its value is the best expected return of any (history-dependent, randomised) policy
under the limits; the duals of the cost rows are the optimal multipliers lambda*_k.
Dropping the cost rows gives the unconstrained optimum.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import sparse
from scipy.optimize import linprog

from constrained_grpo.constraints import ConstraintError
from constrained_grpo.envs.gridworld.model import GridModel, GridOptions

__all__ = ["GridOptimum", "solve_optimum"]


@dataclass(frozen=True)
class GridOptimum:
    """Exact optima of a gridworld task.

    Attributes:
        constrained_return: max expected return subject to every limit.
        unconstrained_return: max expected return ignoring the limits.
        constrained_costs: expected episodic costs of the constrained optimum (K,).
        unconstrained_costs: expected episodic costs of an unconstrained optimum (K,).
        multipliers: optimal Lagrange multipliers lambda*_k (LP duals), (K,).
        binding: whether each limit binds (lambda*_k > 0), (K,).
        cost_names, limits: the constraints solved for.
        num_variables: size of the LP.
    """

    constrained_return: float
    unconstrained_return: float
    constrained_costs: tuple[float, ...]
    unconstrained_costs: tuple[float, ...]
    multipliers: tuple[float, ...]
    binding: tuple[bool, ...]
    cost_names: tuple[str, ...]
    limits: tuple[float, ...]
    num_variables: int

    def gap(self, achieved_return: float) -> float:
        """Relative gap ``(R* - R) / |R*|`` of an achieved return to the constrained optimum."""
        return (self.constrained_return - achieved_return) / max(abs(self.constrained_return), 1e-12)


def _build(model: GridModel) -> tuple[sparse.csr_matrix, np.ndarray, np.ndarray, np.ndarray, int]:
    """Enumerate the reachable time-augmented states; return A_eq, b_eq, r, C (K x n)."""
    o = model.options
    track_gem = bool(model.is_gem.any()) and o.gem_reward != 0.0
    ind = {c.name: c.indicator for c in model.constraints}
    track_hazard = ind.get("hazard", False)
    track_mud = ind.get("mud", False)
    names = model.cost_names
    slip, q = float(o.slip), float(o.hazard_prob)

    def outcomes(cell: int, flags: tuple[bool, bool, bool], a: int) -> list[tuple[float, Any, float, np.ndarray, bool]]:
        res = []
        for a2 in range(4):
            pa = (1 - slip) * (a2 == a) + slip / 4
            if pa <= 0:
                continue
            nxt = int(model.next_cell[cell, a2])
            events = [(q, True), (1 - q, False)] if model.is_hazard[nxt] else [(1.0, False)]
            for ph, hz in events:
                p = pa * ph
                if p <= 0:
                    continue
                gem, hseen, mseen = flags
                reward = -o.step_penalty
                if model.is_goal[nxt]:
                    reward += o.goal_reward
                if model.is_gem[nxt] and not gem:
                    reward += o.gem_reward
                mud = bool(model.is_mud[nxt])
                costs = np.zeros(len(names))
                for k, name in enumerate(names):
                    if name == "fuel":
                        costs[k] = 1.0
                    elif name == "hazard":
                        costs[k] = float(hz and not (ind[name] and hseen))
                    else:
                        costs[k] = float(mud and not (ind[name] and mseen))
                new_flags = (
                    (gem or bool(model.is_gem[nxt])) and track_gem,
                    (hseen or hz) and track_hazard,
                    (mseen or mud) and track_mud,
                )
                res.append((p, (nxt, new_flags), reward, costs, bool(model.is_goal[nxt])))
        return res

    layers: list[dict[Any, int]] = [{(model.start, (False, False, False)): 0}]
    var_index: list[tuple[int, Any, int]] = []  # (t, state, a)
    rewards: list[float] = []
    costs: list[np.ndarray] = []
    eq_rows: list[int] = []
    eq_cols: list[int] = []
    eq_vals: list[float] = []
    # Row of state s at layer t: offset[t] + layers[t][s].
    offsets = [0]
    for t in range(model.max_steps):
        nxt_layer: dict[Any, int] = {}
        inflow: list[tuple[Any, int, float]] = []
        for state, sidx in layers[t].items():
            cell, flags = state
            for a in range(4):
                col = len(var_index)
                var_index.append((t, state, a))
                eq_rows.append(offsets[t] + sidx)
                eq_cols.append(col)
                eq_vals.append(1.0)
                r_exp = 0.0
                c_exp = np.zeros(len(names))
                for p, nstate, rew, cst, term in outcomes(cell, flags, a):
                    r_exp += p * rew
                    c_exp += p * cst
                    if not term and t + 1 < model.max_steps:
                        if nstate not in nxt_layer:
                            nxt_layer[nstate] = len(nxt_layer)
                        inflow.append((nstate, col, p))
                rewards.append(r_exp)
                costs.append(c_exp)
        offsets.append(offsets[t] + len(layers[t]))
        for nstate, col, p in inflow:
            eq_rows.append(offsets[t + 1] + nxt_layer[nstate])
            eq_cols.append(col)
            eq_vals.append(-p)
        if not nxt_layer:
            break
        layers.append(nxt_layer)
    n_rows = offsets[-1]  # every layer was expanded: the last one has no successors
    a_eq = sparse.csr_matrix((eq_vals, (eq_rows, eq_cols)), shape=(n_rows, len(var_index)))
    b_eq = np.zeros(n_rows)
    b_eq[0] = 1.0
    return a_eq, b_eq, np.asarray(rewards), np.asarray(costs).T.reshape(len(names), -1), len(var_index)


_CACHE: dict[tuple[Any, ...], GridOptimum] = {}


def _solve(options: GridOptions) -> GridOptimum:
    model = GridModel(options)
    a_eq, b_eq, r, c, n = _build(model)
    limits = np.array([con.limit for con in model.constraints])
    free = linprog(-r, A_eq=a_eq, b_eq=b_eq, bounds=(0, None), method="highs")
    if free.status != 0:
        raise RuntimeError(f"unconstrained LP failed: {free.message}")
    res = linprog(-r, A_ub=sparse.csr_matrix(c), b_ub=limits, A_eq=a_eq, b_eq=b_eq, bounds=(0, None), method="highs")
    if res.status == 2:
        # Report the least cost each constraint can reach on its own, to say what is feasible.
        least = []
        for k in range(len(limits)):
            lo = linprog(c[k], A_eq=a_eq, b_eq=b_eq, bounds=(0, None), method="highs")
            least.append(round(float(lo.fun), 6))
        raise ConstraintError(
            f"no policy satisfies the limits {dict(zip(model.cost_names, limits.tolist()))} on this "
            f"gridworld (the least achievable expected costs, one at a time, are "
            f"{dict(zip(model.cost_names, least))}); loosen the limits"
        )
    if res.status != 0:
        raise RuntimeError(f"constrained LP failed: {res.message}")
    duals = -np.asarray(res.ineqlin.marginals)
    return GridOptimum(
        constrained_return=float(-res.fun),
        unconstrained_return=float(-free.fun),
        constrained_costs=tuple(float(v) for v in c @ res.x),
        unconstrained_costs=tuple(float(v) for v in c @ free.x),
        multipliers=tuple(float(v) for v in duals),
        binding=tuple(bool(v > 1e-9) for v in duals),
        cost_names=model.cost_names,
        limits=tuple(float(v) for v in limits),
        num_variables=n,
    )


def solve_optimum(options: GridOptions | dict[str, Any]) -> GridOptimum:
    """Exact optima of the gridworld with these options (cached per option set)."""
    if isinstance(options, dict):
        from constrained_grpo.envs.gridworld.model import task_options

        options = task_options(options)
    key = options.key()
    if key not in _CACHE:
        _CACHE[key] = _solve(options)
    return _CACHE[key]
