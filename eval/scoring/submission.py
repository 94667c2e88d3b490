"""The rules a third party's runs meet before they join a board (docs/leaderboard_schema.md).

``--check`` and ``--add`` apply the same rules (:func:`check_submission`):

- the table itself (:func:`~constrained_grpo.eval.scoring.loader.check_submission_table`:
  schema, names, possible episodes, paired reset seeds, no seed copied to another);
- the protocol of the board it joins, per task: at least as many seeds per algorithm as the
  board's algorithms have (10 on the standard board) and at least as many evaluation
  episodes per policy as every run of the board has (the task's plan), read from its runs;
- rankable with the board (``leaderboard.comparability``: the same evaluated policies and
  first reset seed, budgets within ``BUDGET_RATIO``);
- no run whose evaluation equals a run of another algorithm, in the submission or on the
  board (the same episodes, returns and costs, summarised exactly as a compact record keeps
  them: :func:`~constrained_grpo.eval.scoring.metrics.eval_summaries`).

Seeds that converge to one deterministic policy do evaluate identically (on the standard
board, 9 of trpo-lag's 10 seeds on Grid/HazardFuel-v0 share their evaluation with another seed,
in groups of 5, 2 and 2; saute-ppo's 10 seeds on Grid/HazardFuel3x3-v0 all evaluate alike): a
self-reported table cannot tell that from a copy, so it is
refused, and such policies are ranked by re-evaluating them (``cgrpo leaderboard DIR
--reevaluate RUNS``, docs/benchmark.md section 7).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from constrained_grpo.eval.scoring.loader import ResultsError, check_submission_table
from constrained_grpo.schema import TaskMeta

__all__ = ["board_protocol", "check_submission", "mark_modified", "mark_submitted"]

#: How rows that joined the board are described on the page and in the tables.
SELF_REPORTED = "self-reported"
MAINTAINER = "maintainer-evaluated"


def _summaries(table: pd.DataFrame, evals: pd.DataFrame | None, tasks: Mapping[str, TaskMeta]) -> pd.DataFrame:
    """The evaluation summaries of ``table``'s runs (``evals`` where it holds only train rows)."""
    from constrained_grpo.eval.scoring.metrics import eval_summaries

    if evals is not None:
        return evals
    return eval_summaries(table, {t: m for t, m in tasks.items() if t in set(table["task"])})


def board_protocol(summaries: pd.DataFrame, references: Collection[str] = ()) -> dict[str, tuple[int, dict[str, int]]]:
    """Per task, what the board's ranked algorithms were run with: the most seeds of one
    algorithm, and per evaluated policy the fewest evaluation episodes of one run (a run's
    plan grows with its costs' spread beyond what its limits need, section 3 of
    docs/benchmark.md: the fewest is what every run of the task was owed)."""
    own = summaries[~summaries["algo"].isin(set(references))]
    out: dict[str, tuple[int, dict[str, int]]] = {}
    for task, g in own.groupby("task", sort=True):
        seeds = int(g.groupby("algo")["seed"].nunique().max())
        episodes = {str(p): int(e) for p, e in g.groupby("policy")["episodes"].min().items()}
        out[str(task)] = (seeds, episodes)
    return out


def _fingerprints(summaries: pd.DataFrame) -> dict[tuple[str, str, int], tuple[Any, ...]]:
    """Per run, its evaluation summaries as one hashable value (exact sums and counts: equal
    for the same episodes in any order)."""
    stats = [c for c in summaries.columns if c.startswith(("return_mean", "mean_", "ss_", "events_", "within_"))]
    out: dict[tuple[str, str, int], tuple[Any, ...]] = {}
    for (task, algo, seed), g in summaries.groupby(["task", "algo", "seed"], sort=True):
        g = g.sort_values("policy")
        values = g[["policy", "episodes", "first_seed", *stats]].astype(object).where(g[["policy", "episodes", "first_seed", *stats]].notna(), None)
        out[(str(task), str(algo), int(seed))] = tuple(map(tuple, values.to_numpy().tolist()))
    return out


def _greedy_alike(fingerprint: tuple[Any, ...]) -> bool:
    """Whether a run's sampled and greedy evaluations summarise alike (:func:`_fingerprints`,
    one row per policy): a deterministic policy's."""
    rows = {row[0]: row[1:] for row in fingerprint}
    return "sampled" in rows and rows["sampled"] == rows.get("deterministic")


def _check_protocol(mine: pd.DataFrame, protocol: Mapping[str, tuple[int, dict[str, int]]], source: str) -> None:
    for (task, algo), g in mine.groupby(["task", "algo"], sort=True):
        if task not in protocol:
            continue
        seeds, episodes = protocol[task]
        have = int(g["seed"].nunique())
        if have < seeds:
            raise ResultsError(f"{source}: {task} {algo}: {have} seed(s), but the board runs {seeds} per algorithm; "
                               f"submit {seeds} seeds (0-{seeds - 1})")
        for (seed, policy), n in g.groupby(["seed", "policy"])["episodes"].first().items():
            need = episodes.get(str(policy))
            if need is not None and int(n) < need:
                raise ResultsError(
                    f"{source}: {task} {algo} seed {int(seed)}: {int(n)} evaluation episodes of the {policy} policy, but the "
                    f"board's plan is {need} per policy; evaluate on the task's plan (leave --eval-episodes unset)")


def _check_copies(mine: pd.DataFrame, board: pd.DataFrame | None, source: str) -> None:
    seen: dict[tuple[Any, ...], tuple[str, int, str]] = {}
    if board is not None:
        for (task, algo, seed), fp in _fingerprints(board).items():
            seen.setdefault((task, fp), (algo, seed, "on the board"))
    for (task, algo, seed), fp in _fingerprints(mine).items():
        twin = seen.get((task, fp))
        if twin is not None and twin[0] != algo:
            alike = (", and both play their sampled episodes as their greedy ones: deterministic policies that act "
                     "alike" if _greedy_alike(fp) else "")
            raise ResultsError(
                f"{source}: {task} {algo} seed {seed} has the same evaluation episodes as {twin[0]} seed {twin[1]} "
                f"{twin[2]}{alike}; a run under a second name is not a new algorithm, and a self-reported table cannot "
                "show that it is not one. A policy that truly evaluates alike is ranked by re-evaluating its saved "
                "agent (the run folder cgrpo wrote): docs/benchmark.md section 7")
        seen.setdefault((task, fp), (algo, seed, "in the submission"))


def check_submission(
    path: str | Path, tasks: Mapping[str, TaskMeta] | None = None, existing: pd.DataFrame | None = None,
    references: Collection[str] = (), existing_evals: pd.DataFrame | None = None,
) -> tuple[pd.DataFrame, dict[str, TaskMeta]]:
    """Validate a third-party submission (module docstring); raise ``ResultsError`` with a
    one-line reason naming the value and the fix. ``existing``: the board's long table (its
    train rows only for a compact record, whose evaluation summaries are ``existing_evals``);
    ``references``: its unranked reference policies."""
    from constrained_grpo.eval.scoring.leaderboard import _budget_refusal, comparability
    from constrained_grpo.eval.scoring.metrics import eval_summaries, run_metrics

    table, metas = check_submission_table(path, tasks, existing)
    mine = eval_summaries(table, metas)
    board = None
    if existing is not None and len(existing):
        all_tasks = {**(tasks or {}), **metas}
        board = _summaries(existing, existing_evals, all_tasks)
        _check_protocol(mine, board_protocol(board, references), str(path))
    if existing is not None and len(existing):
        own = set(table["task"])
        theirs = existing["task"].isin(own) & ~existing["algo"].isin(set(references))
        joined = pd.concat([existing[theirs], table], ignore_index=True)
        scope = {t: all_tasks[t] for t in own if t in all_tasks}
        evals = None
        if existing_evals is not None:
            kept = existing_evals["task"].isin(own) & ~existing_evals["algo"].isin(set(references))
            evals = pd.concat([existing_evals[kept], eval_summaries(table, scope)], ignore_index=True)
        runs = run_metrics(joined, scope, evals=evals)
        budget = _budget_refusal(runs, set(table["algo"]))
        if budget is not None:
            raise ResultsError(f"{path}: cannot be ranked with the results: {budget}")
        reasons = comparability(runs)
        if reasons:
            raise ResultsError(f"{path}: cannot be ranked with the results: " + "; ".join(
                f"{t}: {', '.join(r)}" for t, r in sorted(reasons.items())))
    _check_copies(mine, board, str(path))
    return table, metas


def mark_submitted(lb: Any, algos: Mapping[str, str]) -> Any:
    """``lb`` (a :class:`~constrained_grpo.eval.scoring.leaderboard.Leaderboard`) with the
    submitted algorithms marked: ``runs`` gains the boolean column ``submitted`` and the
    string column ``evaluated_by`` (``board``, :data:`SELF_REPORTED` or :data:`MAINTAINER`),
    and the preamble a line naming them. ``algos``: algorithm -> how it was evaluated."""
    runs = lb.runs.copy()
    runs["submitted"] = runs["algo"].isin(set(algos))
    runs["evaluated_by"] = runs["algo"].map(lambda a: algos.get(a, "board"))
    lines = list(lb.preamble)
    for how in (SELF_REPORTED, MAINTAINER):
        names = sorted(a for a, h in algos.items() if h == how)
        if not names:
            continue
        what = ("evaluated by their submitters, not re-run by the board" if how == SELF_REPORTED
                else "re-evaluated by the maintainer on private reset seeds")
        lines.append(f"Submitted, {how} ({what}): {', '.join(names)}.")
    return replace(lb, runs=runs, preamble=tuple(lines))


def mark_modified(lb: Any, modified: Mapping[str, Collection[str]]) -> Any:
    """``lb`` with a preamble line per task ranked on settings other than the registered
    task's (``loader.check_recorded`` under ``--allow-modified-tasks``), naming the differences."""
    lines = list(lb.preamble)
    for task in sorted(modified):
        lines.append(f"{task} is ranked on settings other than the registered task's (--allow-modified-tasks): "
                     + "; ".join(modified[task]) + ".")
    return replace(lb, preamble=tuple(lines))
