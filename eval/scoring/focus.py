"""One's own algorithm singled out: the leaderboard restricted to some algorithms and tasks,
one algorithm highlighted.

A view, never a new ranking: the ranks, intervals and tests are the whole board's (an
algorithm's place among all of them), and the rows left out are only not printed. The
task-level lines of ``--explain`` (the task's verdict and its rank groups) stay whole,
since they are about every algorithm of the task.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import replace

import pandas as pd

from constrained_grpo.eval.scoring.explain import _g, explain_task, task_summary
from constrained_grpo.eval.scoring.leaderboard import Leaderboard, Section
from constrained_grpo.schema import TaskMeta

__all__ = ["HIGHLIGHT_MARK", "check_names", "explain_focused", "focus"]

#: Appended to the highlighted algorithm's name in printed tables.
HIGHLIGHT_MARK = " ◀"


def check_names(option: str, names: Collection[str] | None, known: Collection[str],
                deployed: Mapping[str, tuple[str, str]] | None = None) -> None:
    """A one-line ``ValueError`` for a name ``option`` gives that the board does not hold;
    ``deployed``: names of runs that deploy another rule on a learner's trainings (an alias such
    as ``cgrpo-best``), with their ``(learner, rule)``: the board ranks the learner, not them."""
    unknown = sorted(set(names or ()) - set(known))
    aliases = [n for n in unknown if n in (deployed or {})]
    if aliases:
        learner, rule = (deployed or {})[aliases[0]]
        raise ValueError(f"{option} {aliases[0]}: deploys {learner}'s trainings by {rule!r}, not ranked (the board ranks "
                         f"{learner} on its last iterate; the rule is in {learner}'s rows of the deployment tables): "
                         f"name {learner}")
    if unknown:
        raise ValueError(f"{option} {' '.join(unknown)}: not on this board; choose from {', '.join(sorted(known))}")


def _kept(algo: str, algos: Collection[str] | None, highlight: str | None) -> bool:
    return algos is None or algo in algos or algo == highlight


def _learners(runs: pd.DataFrame) -> pd.Series:
    """Per run, the name its rows carry in the tables: its learner (an alias's runs are its
    learner's deployments), or its algorithm where the runs record no learner."""
    return (runs["learner"] if "learner" in runs else runs["algo"]).astype(str)


def _section(s: Section, algos: Collection[str] | None, tasks: Collection[str] | None, highlight: str | None,
             all_algos: Collection[str]) -> Section | None:
    if s.title.startswith("Task ") and tasks is not None and s.title.removeprefix("Task ") not in tasks:
        return None
    parts = tuple(p for p in (_section(p, algos, tasks, highlight, all_algos) for p in s.parts) if p is not None and p.rows)
    s = replace(s, parts=parts)
    name = next((h for h in ("algo", "learner") if h in s.header), None)
    if name is None:
        return s
    at = s.header.index(name)
    # A matrix section (probability of improvement) has one column per algorithm too.
    cols = [i for i, h in enumerate(s.header) if i == at or h not in all_algos or _kept(h, algos, highlight)]
    rows = []
    for row in s.rows:
        if not _kept(row[at], algos, highlight):
            continue
        cells = [row[i] for i in cols]
        if row[at] == highlight:
            cells[cols.index(at)] = row[at] + HIGHLIGHT_MARK
        rows.append(tuple(cells))
    return replace(s, header=tuple(s.header[i] for i in cols), rows=tuple(rows))


def focus(lb: Leaderboard, algos: Collection[str] | None = None, tasks: Collection[str] | None = None,
          highlight: str | None = None) -> Leaderboard:
    """``lb`` showing only ``algos`` (and ``highlight``) on ``tasks`` (None: all), the
    highlighted algorithm's rows marked with :data:`HIGHLIGHT_MARK` and ``highlight`` set;
    ranks and tests as computed on the whole board, said in the preamble."""
    learners = _learners(lb.runs)
    all_algos = set(learners)
    sections = tuple(s for s in (_section(s, algos, tasks, highlight, all_algos) for s in lb.sections) if s is not None)
    keep = learners.map(lambda a: _kept(a, algos, highlight))  # a learner's deployments stay with it
    if tasks is not None:
        keep &= lb.runs["task"].isin(set(tasks))
    preamble = list(lb.preamble)
    if algos is not None or tasks is not None:
        shown = sorted(set(learners[keep]))
        preamble.append(f"Showing {len(shown)} of {len(all_algos)} algorithm(s)"
                        + (f" on {len(set(tasks))} task(s)" if tasks is not None else "")
                        + ": ranks, intervals and tests are the whole board's.")
    if highlight is not None:
        preamble.append(f"Highlighted: {highlight} (rows marked{HIGHLIGHT_MARK}).")

    def rows(frames: Mapping[str, object]) -> dict:
        return {t: df[df["algo"].astype(str).map(lambda a: _kept(a, algos, highlight))]  # type: ignore[index]
                for t, df in frames.items() if tasks is None or t in tasks}

    return replace(lb, sections=sections, runs=lb.runs[keep], per_task=rows(lb.per_task),
                   references=rows(lb.references), preamble=tuple(preamble), highlight=highlight)


def explain_focused(lb: Leaderboard, metas: Mapping[str, TaskMeta], algos: Collection[str] | None = None,
                    tasks: Collection[str] | None = None, highlight: str | None = None) -> str:
    """``explain`` of the whole board, with the sentences of ``algos`` (and ``highlight``) only,
    on ``tasks``; the highlighted algorithm's sentences start with ``>`` instead of a space."""
    out: list[str] = []
    for task in sorted(lb.runs["task"].unique()):
        if tasks is not None and task not in tasks:
            continue
        meta = metas[task]
        limits = ", ".join(f"{c.name} <= {_g(c.limit)}" for c in meta.constraints)
        optimum = f"R* = {_g(meta.optimum_return)}; " if meta.optimum_return is not None else ""
        out.append(f"{task} ({optimum}limits {limits}):")
        out += [f"  {line}" for line in task_summary(lb, meta)]
        names = sorted(set(_learners(lb.runs)[lb.runs["task"] == task]), key=len, reverse=True)
        for line in explain_task(lb, meta):  # whole-board sentences ("highest return" among all)
            # A sentence starts with its algorithm's name (which may hold a ':'): the longest that fits.
            algo = next((a for a in names if line.startswith((f"{a}: ", f"{a} (reference, unranked): "))), None)
            if algo is not None and _kept(algo, algos, highlight):
                out.append(("> " if algo == highlight else "  ") + line)
    return "\n".join(out)
