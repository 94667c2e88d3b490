"""One plain sentence per algorithm of a leaderboard, built from its numbers.

Per task, the ranked algorithms in rank order, then the reference policies. A sentence says
whether the algorithm's evaluated policy keeps every limit, with the leaderboard's
three-valued verdict per seed (``constrained_grpo.eval.scoring.verdict``: a seed keeps the limits when
the one-sided 95% upper bound ``U_k`` of each evaluated cost is within ``d_k (1 + tol)``, breaks
limit k when its lower bound is above, and cannot be told otherwise), its mean evaluated return
``R = (1/n) sum_seeds R_seed`` against the exact optimum ``R*`` where the task has one, for each
broken limit the mean cost ``J_k`` against ``d_k`` and the share of evaluation episodes over
``d_k`` (``1 - within_k``) over the seeds that break it, and for the seeds that cannot be told
the mean cost and upper bound ``U_k``. The sentence says the run has not converged at its budget
where seeds whose final policy is not within the limits have an average iterate (the training
tail, the last 20% of iterations: ``tail_feasible``) that is; and, where there is no such seed,
where the final policy scores below its average iterate by more than the seeds' spread
allows: the leaderboard's 95% bootstrap interval over seeds of the paired difference
``mean_seeds(score - tail_score)`` lies below 0 (with at least ``MIN_SEEDS_FOR_CI`` seeds).
A learner whose dual ascent swings its policy across a limit is then not read as one that
settles on the wrong side of it. The other direction (a final policy better than its
training tail) is ordinary progress and not flagged. "highest return" marks the ranked
algorithm(s) with the largest ``R``. Each learner speaks once, of its last iterate; a run that
deploys its trainings by another rule (an alias such as cgrpo-best) gets a sentence of the
learner's from the deployment table (:func:`deployment_sentence`), never one of its own.

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
from constrained_grpo.eval.scoring import stats
from constrained_grpo.eval.scoring.leaderboard import Leaderboard
from constrained_grpo.schema import TaskMeta

__all__ = ["algo_summary", "deployment_sentence", "explain", "explain_sentence", "explain_task", "rank_groups",
           "task_summary"]


def _g(x: float) -> str:
    """A number in at most 3 significant digits (``1.2``, ``0.62``, ``18``)."""
    return f"{x:.3g}"


def _mean(values: Sequence[float]) -> float:
    """Exact mean (``math.fsum``): the sentence does not depend on the order of the seeds."""
    return math.fsum(values) / len(values) if len(values) else math.nan


def _limits_word(k: int) -> str:
    return "the limit" if k == 1 else ("both limits" if k == 2 else f"all {k} limits")


def algo_summary(runs: pd.DataFrame, meta: TaskMeta) -> dict[str, Any]:
    """What a sentence needs from one algorithm's runs (rows of ``Leaderboard.runs``) on one task:
    seeds, feasible and undetermined seeds, mean return, and per constraint the mean cost, the
    share of episodes over the limit, the seeds that break it (verdict "over", from the
    tolerance the leaderboard was built with) and those that cannot be told."""
    g = runs.sort_values("seed")
    names = meta.constraint_names
    over = {k: g[f"verdict_{k}"] == "over" for k in names}
    undetermined = g["feasibility"] == "undetermined"
    unsure = {k: undetermined & (g[f"verdict_{k}"] == "undetermined") for k in names}

    def mean_of(col: str, rows: pd.Series) -> float:
        return _mean(g.loc[rows, col].astype(float).tolist())

    tail_ok = (g["tail_feasible"].astype(bool) if "tail_feasible" in g and "final_return" in g
               else pd.Series(False, index=g.index))

    return {
        "seeds": len(g),
        "feasible": int((g["feasibility"] == "feasible").sum()),
        "undetermined": int(undetermined.sum()),
        "return": _mean(g["eval_return"].astype(float).tolist()),
        "cost": {k: _mean(g[f"eval_cost_{k}"].astype(float).tolist()) for k in names},
        "over": {k: 1.0 - _mean(g[f"within_{k}"].astype(float).tolist()) for k in names},
        "broken": {k: int(over[k].sum()) for k in names},
        # The same two numbers over the seeds that break limit k only: what "breaks" refers to.
        "broken_cost": {k: mean_of(f"eval_cost_{k}", over[k]) for k in names},
        "broken_over": {k: 1.0 - mean_of(f"within_{k}", over[k]) for k in names},
        # Over the undetermined seeds whose cost k cannot be told: J_k and its upper bound U_k.
        "unsure": {k: int(unsure[k].sum()) for k in names},
        "unsure_cost": {k: mean_of(f"eval_cost_{k}", unsure[k]) for k in names},
        "unsure_upper": {k: mean_of(f"eval_cost_hi_{k}", unsure[k]) for k in names},
        # Seeds whose final policy breaks a limit while their average iterate (the training tail)
        # keeps them: the run has not converged at its budget, it cycles around the limits. Only
        # a clear break counts: the tail's verdict is a point one, and a final policy its episodes
        # cannot tell (undetermined) may be the very same policy.
        "unconverged": int(((g["feasibility"] == "violates") & tail_ok).sum()),
        "unconverged_return": (mean_of("final_return", (g["feasibility"] == "violates") & tail_ok)
                               if "final_return" in g else math.nan),
        # The average iterate's mean costs over all seeds (the leaderboard's table has its return
        # and score, not its costs): what the sentence quotes when the final policy scores
        # clearly below its average iterate.
        "tail_cost": {k: _mean(g[f"final_cost_{k}"].astype(float).tolist()) for k in names if f"final_cost_{k}" in g},
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
    parts = []
    for k, count in summary["broken"].items():
        if count:
            cost, over = summary.get("broken_cost", summary["cost"])[k], summary.get("broken_over", summary["over"])[k]
            where = "" if count == n else ", on those seeds"
            parts.append(f"breaks the {k} limit on {count}/{n} seeds ({k} {_g(cost)} per episode against "
                         f"{_g(limits[k])}, {over:.0%} of episodes over it{where})")
    u = int(summary.get("undetermined", 0))
    if u:
        close = [f"{k} {_g(summary['unsure_cost'][k])}, upper bound {_g(summary['unsure_upper'][k])}, against {_g(limits[k])}"
                 for k, count in summary.get("unsure", {}).items() if count]
        detail = (f" ({'; '.join(close)}: the 95% bounds over the evaluation episodes straddle the tolerated level)"
                  if close else "")
        parts.append(f"too close to call on {u}/{n} seeds{detail}")
    if not parts:  # neither feasible, broken nor undetermined: not reachable
        parts.append("breaks a limit")
    m = int(summary.get("unconverged", 0))
    gap = summary.get("iterate_gap")  # the leaderboard row's numbers, where it prints an interval
    if m and not reference:
        parts.append(f"not converged on {m}/{n} seeds: there its average iterate (the last 20% of training) keeps "
                     f"{_limits_word(len(meta.constraints))}, return {_g(float(summary['unconverged_return']))}, "
                     "while its final policy is not shown within them")
    elif gap is not None and gap["hi"] < 0 and not reference:
        tail = ", ".join([f"return {_g(gap['tail_return'])}"]
                         + [f"{k} {_g(float(v))}" for k, v in summary.get("tail_cost", {}).items()])
        parts.append(f"not converged at its budget: its final policy scores {_g(gap['score'])} against "
                     f"{_g(gap['tail_score'])} for its average iterate (the last 20% of training: {tail} "
                     f"per episode), a difference whose 95% interval over seeds, [{_g(gap['lo'])}, "
                     f"{_g(gap['hi'])}], lies below 0")
    kept = f"within {_limits_word(len(meta.constraints))} on {f}/{n} seeds; " if f else ""
    return f"{name}: {head}; {kept}{'; '.join(parts)}."


def deployment_sentence(r: Mapping[str, Any]) -> str:
    """One sentence for a row of the deployment table (``Leaderboard.deployments``): the rule's
    paired gain in score over the learner's last iterate with its 95% interval (no gain claimed
    where it contains 0) and the seeds within the limits under each, with McNemar's verdict.

    >>> print(deployment_sentence({"learner": "a", "deploy": "best-feasible", "algo": "a-best", "seeds": 10,
    ...     "gain_mean": 2.1, "gain_lo": 0.45, "gain_hi": 3.8, "gain": "gain", "feasible_last": 3,
    ...     "feasible_deploy": 10, "moved_in": 7, "moved_out": 0, "limits_p": 0.015625, "limits": "into"}))
    a: deployed by best-feasible (the runs a-best, not ranked), against its last iterate paired over 10 seeds: gains 2.1 [0.45, 3.8] in score; within the limits on 3/10 seeds, then 10/10 (7 moved in, 0 out: into the limits, McNemar p = 0.016).
    """
    n = int(r["seeds"])
    interval = f"[{_g(float(r['gain_lo']))}, {_g(float(r['gain_hi']))}]"
    gain = {"gain": f"gains {_g(float(r['gain_mean']))} {interval} in score",
            "loss": f"loses {_g(-float(r['gain_mean']))} in score (gain {_g(float(r['gain_mean']))} {interval})",
            "not shown": f"no gain or loss in score shown (95% interval {interval})"}.get(str(r["gain"]), "too few seeds to compare")
    verdict = {"into": "into the limits", "out of": "out of the limits"}.get(str(r["limits"]), "no change shown")
    runs = f"the runs {r['algo']}, not ranked" if r.get("algo") and r["algo"] != r["learner"] else "not ranked"
    return (f"{r['learner']}: deployed by {r['deploy']} ({runs}), against its last iterate paired over {n} seeds: {gain}; "
            f"within the limits on {int(r['feasible_last'])}/{n} seeds, then {int(r['feasible_deploy'])}/{n} "
            f"({int(r['moved_in'])} moved in, {int(r['moved_out'])} out: {verdict}, McNemar p = {float(r['limits_p']):.2g}).")


def explain_task(lb: Leaderboard, meta: TaskMeta) -> list[str]:
    """The sentences of one task: ranked algorithms in rank order, their deployments by another
    rule (:func:`deployment_sentence`), then the reference policies."""
    runs = lb.runs[lb.runs["task"] == meta.task]
    if "deploy" in runs:  # each learner once, on its last iterate; another rule's runs are its deployments
        runs = runs[runs["deploy"] == "last"]
        runs = runs.assign(algo=runs["learner"])
    if runs.empty:
        return []
    is_ref = runs["reference"].astype(bool) if "reference" in runs else pd.Series(False, index=runs.index)
    ranked, refs = runs[~is_ref], runs[is_ref]
    table = lb.per_task.get(meta.task)
    order = table["algo"].astype(str).tolist() if table is not None else sorted(ranked["algo"].unique())
    summaries = {a: algo_summary(ranked[ranked["algo"] == a], meta) for a in order}
    gap_columns = ("iterate_gap_lo", "iterate_gap_hi", "score", "tail_score", "tail_return")
    if table is not None and set(gap_columns) <= set(table.columns):
        # The leaderboard's interval of the paired difference final - average iterate, where it
        # prints one (enough seeds), with the two scores and the average iterate's return it shows.
        for _, row in table.iterrows():
            if int(row["seeds"]) >= stats.MIN_SEEDS_FOR_CI:
                lo, hi, score, tail_score, tail_return = (float(row[c]) for c in gap_columns)
                summaries[str(row["algo"])]["iterate_gap"] = {"lo": lo, "hi": hi, "score": score,
                                                              "tail_score": tail_score, "tail_return": tail_return}
    best = max((s["return"] for s in summaries.values() if math.isfinite(s["return"])), default=math.nan)
    lines = [explain_sentence(a, s, meta, highest=len(summaries) > 1 and math.isclose(s["return"], best, rel_tol=0, abs_tol=1e-9))
             for a, s in summaries.items()]
    deployed = getattr(lb, "deployments", None)
    if deployed is not None and len(deployed):
        lines += [deployment_sentence(r) for r in deployed[deployed["scope"] == meta.task].to_dict("records")]
    for a in sorted(refs["algo"].unique()):
        lines.append(explain_sentence(a, algo_summary(refs[refs["algo"] == a], meta), meta, reference=True))
    return lines


def rank_groups(ranked: pd.DataFrame) -> str:
    """The task's rows in the order of the mean score, each with its rank interval and group
    letters: ``a 1 [1, 2] (a, score 0.99); b 2 [1, 3] (ab, score 0.77)``."""
    from constrained_grpo.eval.scoring.page import rank_text

    parts = []
    for r in ranked.to_dict("records"):
        letters = str(r.get("letters") or "")
        parts.append(f"{r['algo']} {rank_text(r).removeprefix('rank ')} ({letters + ', ' if letters else ''}"
                     f"score {_g(float(r['score']))})")
    return "; ".join(parts)


def task_summary(lb: Leaderboard, meta: TaskMeta) -> list[str]:
    """Two lines before the sentences: the task's verdict (``page.task_verdict``) and its
    rows in the order of the mean score with their rank intervals and groups."""
    from constrained_grpo.eval.scoring.page import task_verdict

    ranked = lb.per_task.get(meta.task)
    lines = [task_verdict(ranked, meta, lb.not_ranked.get(meta.task, ()), getattr(lb, "tol", None))]
    if ranked is not None and len(ranked) > 1 and ranked["rank"].notna().all():
        a = ranked.attrs
        lines.append(f"By mean score, each with [L, U], the ranks the data allow at 95% for all at once, and its group "
                     f"(a shared letter: not told apart; {a.get('pairs_separated', 0)} of {a.get('pairs', 0)} pairs "
                     f"separated, p-values in pairs.csv): {rank_groups(ranked)}.")
    return lines


def explain(lb: Leaderboard, tasks: Mapping[str, TaskMeta]) -> str:
    """Every task's sentences under a one-line heading (R* and the limits), as plain text."""
    out: list[str] = []
    for task in sorted(lb.runs["task"].unique()):
        meta = tasks[task]
        limits = ", ".join(f"{c.name} <= {_g(c.limit)}" for c in meta.constraints)
        optimum = f"R* = {_g(meta.optimum_return)}; " if meta.optimum_return is not None else ""
        out.append(f"{task} ({optimum}limits {limits}):")
        out += [f"  {line}" for line in task_summary(lb, meta)]
        out += [f"  {line}" for line in explain_task(lb, meta)]
    return "\n".join(out)


def _meta_for_doc() -> TaskMeta:
    """The doctest's task: one indicator constraint, hazard <= 0.2, R* = 1.2."""
    return TaskMeta("Doc", "gridworld", (Constraint("hazard", 0.2, "", indicator=True),), optimum_return=1.2)
