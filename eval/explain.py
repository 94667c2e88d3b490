"""One plain sentence per algorithm of a leaderboard, built from its numbers.

Per task, the ranked algorithms in rank order, then the reference policies. A sentence says
whether the algorithm's evaluated policy keeps every limit (on how many seeds: a seed keeps
them when ``max_k max(0, J_k - d_k) / d_k <= tol``, the leaderboard's feasibility), its mean
evaluated return ``R = (1/n) sum_seeds R_seed`` against the exact optimum ``R*`` where the
task has one, and for each broken limit the mean cost ``J_k`` against ``d_k`` and the share
of evaluation episodes over ``d_k`` (``1 - within_k``), over the seeds that break it. "highest return" marks the ranked
algorithm(s) with the largest ``R``.

>>> print(explain_sentence("ppo", {"return": 1.5, "seeds": 5, "feasible": 0, "broken": {"hazard": 5},
...       "cost": {"hazard": 0.62}, "over": {"hazard": 0.62}}, _meta_for_doc(), highest=True))
ppo: highest return, 1.5 against R* = 1.2; breaks the hazard limit on 5/5 seeds (hazard 0.62 per episode against 0.2, 62% of episodes over it).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from constrained_grpo.constraints import Constraint
from constrained_grpo.eval.leaderboard import DEFAULT_TOL, Leaderboard
from constrained_grpo.schema import TaskMeta

__all__ = ["algo_summary", "explain", "explain_sentence", "explain_task"]


def _g(x: float) -> str:
    """A number in at most 3 significant digits (``1.2``, ``0.62``, ``18``)."""
    return f"{x:.3g}"


def _mean(values: Sequence[float]) -> float:
    """Exact mean (``math.fsum``): the sentence does not depend on the order of the seeds."""
    return math.fsum(values) / len(values) if len(values) else math.nan


def _limits_word(k: int) -> str:
    return "the limit" if k == 1 else ("both limits" if k == 2 else f"all {k} limits")


def algo_summary(runs: pd.DataFrame, meta: TaskMeta, tol: float = DEFAULT_TOL) -> dict[str, Any]:
    """What a sentence needs from one algorithm's runs (rows of ``Leaderboard.runs``) on one task:
    seeds, feasible seeds, mean return, and per constraint the mean cost, the share of
    episodes over the limit and the seeds whose normalised violation exceeds ``tol``."""
    g = runs.sort_values("seed")
    names = meta.constraint_names
    return {
        "seeds": len(g),
        "feasible": int(g["feasible"].astype(bool).sum()),
        "return": _mean(g["eval_return"].astype(float).tolist()),
        "cost": {k: _mean(g[f"eval_cost_{k}"].astype(float).tolist()) for k in names},
        "over": {k: 1.0 - _mean(g[f"within_{k}"].astype(float).tolist()) for k in names},
        "broken": {k: int((g[f"violation_{k}"].astype(float) > tol).sum()) for k in names},
        # The same two numbers over the seeds that break limit k only: what "breaks" refers to.
        "broken_cost": {k: _mean(g.loc[g[f"violation_{k}"].astype(float) > tol, f"eval_cost_{k}"].astype(float).tolist())
                        for k in names},
        "broken_over": {k: 1.0 - _mean(g.loc[g[f"violation_{k}"].astype(float) > tol, f"within_{k}"].astype(float).tolist())
                        for k in names},
    }


def explain_sentence(algo: str, summary: Mapping[str, Any], meta: TaskMeta, *, highest: bool = False,
                     reference: bool = False) -> str:
    """One sentence for ``algo`` from its :func:`algo_summary` on task ``meta``."""
    n, f = int(summary["seeds"]), int(summary["feasible"])
    name = f"{algo} (reference, unranked)" if reference else algo
    ret = float(summary["return"])
    if meta.optimum_return is not None:
        value = f"{_g(ret)} against R* = {_g(meta.optimum_return)}"
    else:
        value = _g(ret)
    head = f"highest return, {value}" if highest else f"return {value}"
    seeds = f"all {n} seeds" if f == n and n > 1 else ("its only seed" if n == 1 else f"{f}/{n} seeds")
    if f == n:
        return f"{name}: within {_limits_word(len(meta.constraints))} on {seeds}, {head}."
    limits = {c.name: c.limit for c in meta.constraints}
    broken = []
    for k, count in summary["broken"].items():
        if count:
            cost, over = summary.get("broken_cost", summary["cost"])[k], summary.get("broken_over", summary["over"])[k]
            where = "" if count == n else ", on those seeds"
            broken.append(f"breaks the {k} limit on {count}/{n} seeds ({k} {_g(cost)} per episode against "
                          f"{_g(limits[k])}, {over:.0%} of episodes over it{where})")
    if not broken:  # infeasible through the mean violation of seeds that each stay within tol: not reachable
        broken.append("breaks a limit")
    kept = f"within {_limits_word(len(meta.constraints))} on {f}/{n} seeds; " if f else ""
    return f"{name}: {head}; {kept}{'; '.join(broken)}."


def explain_task(lb: Leaderboard, meta: TaskMeta, tol: float = DEFAULT_TOL) -> list[str]:
    """The sentences of one task: ranked algorithms in rank order, then the reference policies."""
    runs = lb.runs[lb.runs["task"] == meta.task]
    if runs.empty:
        return []
    is_ref = runs["reference"].astype(bool) if "reference" in runs else pd.Series(False, index=runs.index)
    ranked, refs = runs[~is_ref], runs[is_ref]
    order = lb.per_task[meta.task]["algo"].astype(str).tolist() if meta.task in lb.per_task else sorted(ranked["algo"].unique())
    summaries = {a: algo_summary(ranked[ranked["algo"] == a], meta, tol) for a in order}
    best = max((s["return"] for s in summaries.values() if math.isfinite(s["return"])), default=math.nan)
    lines = [explain_sentence(a, s, meta, highest=len(summaries) > 1 and math.isclose(s["return"], best, rel_tol=0, abs_tol=1e-9))
             for a, s in summaries.items()]
    for a in sorted(refs["algo"].unique()):
        lines.append(explain_sentence(a, algo_summary(refs[refs["algo"] == a], meta, tol), meta, reference=True))
    return lines


def explain(lb: Leaderboard, tasks: Mapping[str, TaskMeta], tol: float = DEFAULT_TOL) -> str:
    """Every task's sentences under a one-line heading (R* and the limits), as plain text."""
    out: list[str] = []
    for task in sorted(lb.runs["task"].unique()):
        meta = tasks[task]
        limits = ", ".join(f"{c.name} <= {_g(c.limit)}" for c in meta.constraints)
        optimum = f"R* = {_g(meta.optimum_return)}; " if meta.optimum_return is not None else ""
        out.append(f"{task} ({optimum}limits {limits}):")
        out += [f"  {line}" for line in explain_task(lb, meta, tol)]
    return "\n".join(out)


def _meta_for_doc() -> TaskMeta:
    """The doctest's task: one indicator constraint, hazard <= 0.2, R* = 1.2."""
    return TaskMeta("Doc", "gridworld", (Constraint("hazard", 0.2, "", indicator=True),), optimum_return=1.2)
