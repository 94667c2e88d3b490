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

from dataclasses import dataclass, field
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
        unconstrained_costs: expected episodic costs of the cheapest unconstrained
            optimum (least total cost among the reward-maximising policies), (K,).
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
    policy_index: "_PolicyIndex | None" = field(default=None, repr=False, compare=False)

    def gap(self, achieved_return: float) -> float:
        """Relative gap ``(R* - R) / |R*|`` of an achieved return to the constrained optimum."""
        return (self.constrained_return - achieved_return) / max(abs(self.constrained_return), 1e-12)

    def action_probs(self, t: int, state: int, constrained: bool = True) -> np.ndarray:
        """The optimal policy pi*(a | t, s) = x[t, s, a] / sum_a' x[t, s, a'] of the constrained
        (or the cheapest unconstrained) LP solution, at time t in state s = 8 * cell + flags.

        A state the optimal policy never reaches has no occupancy; any action is optimal
        there, and it gets the uniform distribution.
        """
        if self.policy_index is None:
            raise ValueError("this optimum was built without its policy")
        return self.policy_index.probs(t, state, constrained)


@dataclass(frozen=True)
class _PolicyIndex:
    """Where x[t, s, :] lives among the LP's variables, and both solutions."""

    layers: tuple[dict[int, int], ...]
    col_base: tuple[int, ...]
    keep: int
    x_constrained: np.ndarray
    x_unconstrained: np.ndarray

    def table(self, constrained: bool, n_states: int) -> np.ndarray:
        """``probs(t, s)`` for every t < T and s < ``n_states`` at once, ``(T + 1, n_states, 4)``
        (row T, past the horizon, uniform): what a batched evaluation looks up."""
        out = np.full((len(self.layers) + 1, n_states, 4), 0.25)
        states = np.arange(n_states)
        for t in range(len(self.layers)):
            out[t] = np.stack([self.probs(t, int(s), constrained) for s in states])
        return out

    def probs(self, t: int, state: int, constrained: bool) -> np.ndarray:
        uniform = np.full(4, 0.25)
        if not 0 <= t < len(self.layers):
            return uniform
        sidx = self.layers[t].get(int(state) & self.keep)
        if sidx is None:
            return uniform
        col = self.col_base[t] + 4 * sidx
        x = (self.x_constrained if constrained else self.x_unconstrained)[col:col + 4]
        x = np.maximum(x, 0.0)
        total = float(x.sum())
        return x / total if total > 1e-12 else uniform


def _build(model: GridModel) -> tuple[sparse.csr_matrix, np.ndarray, np.ndarray, np.ndarray, int, list[dict[int, int]], int]:
    """Enumerate the reachable time-augmented states; return A_eq, b_eq, r, C (K x n), n,
    the layers (per t, state -> its index; variable x[t, s, a] is column
    4 (sum of earlier layers' sizes) + 4 index + a) and the flag mask.

    Uses the same transition tables as the batched env. Flags that no reward or cost
    depends on are masked out of the state, which merges states without changing the
    optimum.
    """
    o = model.options
    tab = model.tables
    keep = ~np.int64(7) | tab.relevant_flags  # clear irrelevant flag bits of 8 * cell + flags
    slip, q = float(o.slip), float(o.hazard_prob)
    action_probs = [[(1 - slip) * (a2 == a) + slip / 4 for a2 in range(4)] for a in range(4)]
    hit_probs = [(0, 1 - q), (1, q)]

    layers: list[dict[int, int]] = [{tab.start_state: 0}]
    rewards: list[float] = []
    costs: list[np.ndarray] = []
    eq_rows: list[int] = []
    eq_cols: list[int] = []
    eq_vals: list[float] = []
    offsets = [0]  # row of state s at layer t: offsets[t] + layers[t][s]
    n_vars = 0
    for t in range(model.max_steps):
        nxt_layer: dict[int, int] = {}
        inflow: list[tuple[int, int, float]] = []
        last = t + 1 >= model.max_steps
        for state, sidx in layers[t].items():
            for a in range(4):
                col = n_vars
                n_vars += 1
                eq_rows.append(offsets[t] + sidx)
                eq_cols.append(col)
                eq_vals.append(1.0)
                r_exp = 0.0
                c_exp = np.zeros(tab.costs.shape[1])
                for a2, pa in enumerate(action_probs[a]):
                    for hit, ph in hit_probs:
                        p = pa * ph
                        if p <= 0.0:
                            continue
                        i = (state * 4 + a2) * 2 + hit
                        r_exp += p * tab.reward[i]
                        c_exp += p * tab.costs[i]
                        if not tab.terminated[i] and not last:
                            nstate = int(tab.next_state[i] & keep)
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
    a_eq = sparse.csr_matrix((eq_vals, (eq_rows, eq_cols)), shape=(n_rows, n_vars))
    b_eq = np.zeros(n_rows)
    b_eq[0] = 1.0
    return a_eq, b_eq, np.asarray(rewards), np.asarray(costs).T.reshape(tab.costs.shape[1], -1), n_vars, layers, int(keep)


_CACHE: dict[tuple[Any, ...], GridOptimum] = {}


def _solve(options: GridOptions) -> GridOptimum:
    model = GridModel(options)
    a_eq, b_eq, r, c, n, layers, keep = _build(model)
    limits = np.array([con.limit for con in model.constraints])
    free = linprog(-r, A_eq=a_eq, b_eq=b_eq, bounds=(0, None), method="highs")
    if free.status != 0:
        raise RuntimeError(f"unconstrained LP failed: {free.message}")
    best = float(-free.fun)
    # Among the unconstrained optima (often many: any route to the gem pays 1.5), report
    # the costs of the cheapest: min total cost s.t. the return stays optimal.
    cheapest = linprog(
        c.sum(axis=0), A_ub=-r[None, :], b_ub=[-(best - 1e-9)], A_eq=a_eq, b_eq=b_eq, bounds=(0, None), method="highs"
    )
    free_x = cheapest.x if cheapest.status == 0 else free.x
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
    bases = np.concatenate([[0], np.cumsum([4 * len(layer) for layer in layers])[:-1]]).astype(int)
    index = _PolicyIndex(tuple(layers), tuple(int(b) for b in bases), keep, np.asarray(res.x), np.asarray(free_x))
    return GridOptimum(
        constrained_return=float(-res.fun),
        unconstrained_return=best,
        constrained_costs=tuple(float(v) for v in c @ res.x),
        unconstrained_costs=tuple(float(v) for v in c @ free_x),
        multipliers=tuple(float(v) for v in duals),
        binding=tuple(bool(v > 1e-9) for v in duals),
        cost_names=model.cost_names,
        limits=tuple(float(v) for v in limits),
        num_variables=n,
        policy_index=index,
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
