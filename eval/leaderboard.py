"""The leaderboard: per-task and aggregated rankings, as Markdown and static HTML.

Ranking rule ("return subject to satisfaction"): on a task, an algorithm is
*feasible* when, for every constraint, its mean over seeds of the normalised
violation max(0, J_k - d_k)/d_k of the evaluation cost is at most ``tol``. Feasible
algorithms come first, by IQM of evaluation return (highest first); infeasible ones
follow, by their largest mean normalised violation (smallest first). Aggregated per
suite (over the tasks with an exact optimum, whose returns can be normalised): number
of tasks feasible (most first), then the mean of the per-task ranks (lowest first),
then IQM of normalised return.

The output is a pure function of the long table and the task metadata: rows and
columns are sorted, numbers are formatted to fixed decimals, the bootstrap has a
fixed seed, and nothing depends on the time or the paths, so the same tables give
byte-identical files.
"""

from __future__ import annotations

import html
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from constrained_grpo.eval import stats, storage
from constrained_grpo.eval.loader import ResultsError, read_table_csv, validate_table
from constrained_grpo.eval.metrics import run_metrics
from constrained_grpo.eval.runner import TaskMeta

__all__ = [
    "DEFAULT_TOL",
    "Leaderboard",
    "Section",
    "build_leaderboard",
    "check_submission",
    "render_html",
    "render_markdown",
    "write_leaderboard",
]

#: Default tolerance on the normalised violation for "feasible".
DEFAULT_TOL = 0.1
_ALGO_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:+-]*$")


@dataclass(frozen=True)
class Section:
    """One titled table of the leaderboard (rendered to Markdown and to HTML alike)."""

    title: str
    notes: tuple[str, ...]
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]


@dataclass(frozen=True)
class Leaderboard:
    """Everything the leaderboard shows.

    Attributes:
        runs: one row of metrics per run (``metrics.run_metrics``).
        sections: the tables, in page order.
        per_task: per task, the algorithms' numbers in rank order.
        overall: per suite, the aggregated numbers in rank order.
    """

    runs: pd.DataFrame
    sections: tuple[Section, ...]
    per_task: dict[str, pd.DataFrame] = field(default_factory=dict)
    overall: dict[str, pd.DataFrame] = field(default_factory=dict)
    preamble: tuple[str, ...] = ()


def _num(x: float, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "—"
    text = f"{x:.{digits}f}"
    return "0." + "0" * digits if text == "-0." + "0" * digits else text


def _ci(point: float, lo: float, hi: float, digits: int = 3) -> str:
    if not math.isfinite(point):
        return "—"
    return f"{_num(point, digits)} [{_num(lo, digits)}, {_num(hi, digits)}]"


def _limit(x: float) -> str:
    return f"{x:g}"


def _per_task(runs: pd.DataFrame, meta: TaskMeta, tol: float, reps: int, seed: int) -> pd.DataFrame:
    """Numbers of each algorithm on one task, in rank order."""
    names = meta.constraint_names
    out = []
    for algo, g in runs.groupby("algo", sort=True):
        row: dict[str, object] = {"algo": algo, "seeds": len(g)}
        ret = g["eval_return"].to_numpy(dtype=float)
        row["return"], row["return_lo"], row["return_hi"] = stats.stratified_bootstrap_ci([ret], stats.iqm, reps=reps, seed=seed)
        norm = g["eval_return_norm"].to_numpy(dtype=float)
        if np.isfinite(norm).all():
            row["norm"], row["norm_lo"], row["norm_hi"] = stats.stratified_bootstrap_ci([norm], stats.iqm, reps=reps, seed=seed)
        else:
            row["norm"] = row["norm_lo"] = row["norm_hi"] = math.nan
        row["final_return"] = float(g["final_return"].mean())
        mean_viol = []
        for k in names:
            row[f"cost_{k}"] = float(g[f"eval_cost_{k}"].mean())
            row[f"within_{k}"] = float(g[f"within_{k}"].mean())
            row[f"violation_{k}"] = float(g[f"violation_{k}"].mean())
            mean_viol.append(row[f"violation_{k}"])
        row["violation"] = max(mean_viol) if mean_viol else 0.0
        row["feasible"] = bool(row["violation"] <= tol)  # type: ignore[operator]
        row["train_violation"] = float(np.mean([g[f"train_violation_{k}"].mean() for k in names])) if names else 0.0
        stab = g["stability"].to_numpy(dtype=float)
        if np.isfinite(stab).all():
            row["stability"], row["stability_lo"], row["stability_hi"] = stats.stratified_bootstrap_ci([stab], np.mean, reps=reps, seed=seed)
            row["drift"] = float(g[[f"drift_{k}" for k in names]].max(axis=1).mean())
            row["osc"] = float(g[[f"osc_{k}" for k in names]].sum(axis=1).mean())
            row["settling"] = float(g[[f"settling_{k}" for k in names]].max(axis=1).mean())
        else:
            for col in ("stability", "stability_lo", "stability_hi", "drift", "osc", "settling"):
                row[col] = math.nan
        out.append(row)
    df = pd.DataFrame(out)
    # Feasible first by return (high first); then infeasible by violation (small first).
    df["_f"] = ~df["feasible"]
    df["_key"] = np.where(df["feasible"], -df["return"], df["violation"])
    df["_tie"] = -df["return"]
    df = df.sort_values(["_f", "_key", "_tie", "algo"], kind="mergesort").drop(columns=["_f", "_key", "_tie"])
    df.insert(0, "rank", np.arange(1, len(df) + 1))
    return df.reset_index(drop=True)


def _overall(runs: pd.DataFrame, per_task: Mapping[str, pd.DataFrame], tasks: Sequence[str], reps: int, seed: int) -> pd.DataFrame:
    """Per algorithm over ``tasks`` (stratified by task), in rank order."""
    sub = runs[runs["task"].isin(tasks)]
    agg = stats.aggregate(sub, "eval_return_norm", reps=reps, seed=seed).set_index("algo")
    stab = stats.aggregate(sub, "stability", reps=reps, seed=seed).set_index("algo")
    out = []
    for algo in sorted(sub["algo"].unique()):
        g = sub[sub["algo"] == algo]
        feasible = sum(bool(per_task[t].set_index("algo").loc[algo, "feasible"]) for t in tasks if algo in set(per_task[t]["algo"]))
        out.append({
            "algo": algo,
            "tasks": g["task"].nunique(),
            "runs": len(g),
            "feasible_tasks": feasible,
            "iqm": agg.loc[algo, "iqm"], "iqm_lo": agg.loc[algo, "iqm_lo"], "iqm_hi": agg.loc[algo, "iqm_hi"],
            "mean": agg.loc[algo, "mean"], "mean_lo": agg.loc[algo, "mean_lo"], "mean_hi": agg.loc[algo, "mean_hi"],
            "satisfied_runs": float(g["satisfied"].mean()),
            "violation": float(g["violation"].mean()),
            "stability": stab.loc[algo, "iqm"], "stability_lo": stab.loc[algo, "iqm_lo"], "stability_hi": stab.loc[algo, "iqm_hi"],
            "mean_rank": float(np.mean([per_task[t].set_index("algo").loc[algo, "rank"] for t in tasks if algo in set(per_task[t]["algo"])])),
        })
    df = pd.DataFrame(out)
    df["_iqm"] = -df["iqm"]
    df["_feas"] = -df["feasible_tasks"]
    df = df.sort_values(["_feas", "mean_rank", "_iqm", "algo"], kind="mergesort").drop(columns=["_feas", "_iqm"])
    df.insert(0, "rank", np.arange(1, len(df) + 1))
    return df.reset_index(drop=True)


def build_leaderboard(
    table: pd.DataFrame,
    tasks: Mapping[str, TaskMeta],
    *,
    tol: float = DEFAULT_TOL,
    reps: int = stats.BOOTSTRAP_REPS,
    seed: int = stats.BOOTSTRAP_SEED,
) -> Leaderboard:
    """Metrics, rankings and the page's sections from a long table."""
    runs = run_metrics(table, tasks, tol=tol)
    preamble = (
        f"{len(runs)} runs, {runs['task'].nunique()} task(s), {runs['algo'].nunique()} algorithm(s).",
        f"Ranking: feasible algorithms first (mean normalised violation max(0, J - d)/d of the evaluation cost "
        f"<= {tol:g} for every constraint), by IQM of the deterministic-evaluation return; then the infeasible "
        "ones by their largest violation.",
        "Aggregate per suite (tasks with an exact optimum): most tasks feasible first, then the mean per-task rank, "
        "then IQM of the normalised return 1 - (R* - R)/|R*|.",
        f"Intervals: 95% percentile stratified bootstrap ({reps} replicates, seed {seed}) over seeds, "
        "stratified by task in the aggregates (rliable).",
        "Stability: 1/(1 + 2 |drift| R^2 (1 + [climbing while violated]) + CV) of each multiplier over the second "
        "half of training, worst multiplier per run (1 = constant; see constrained_grpo.eval.metrics). "
        "drift: relative change along the trend; osc.: reversals of the multipliers; settling: fraction of training "
        "before the multiplier stays within 10% of its final value.",
    )
    sections: list[Section] = []
    per_task: dict[str, pd.DataFrame] = {}
    for task in sorted(runs["task"].unique()):
        meta = tasks[task]
        df = _per_task(runs[runs["task"] == task], meta, tol, reps, seed)
        per_task[task] = df
        header = ["rank", "algo", "seeds", "feasible", "return IQM [95% CI]", "norm. return IQM [95% CI]", "final train return"]
        for c in meta.constraints:
            header += [f"J {c.name} (d={_limit(c.limit)})", f"within {c.name}", f"viol. {c.name}"]
        header += ["train viol.", "stability [95% CI]", "drift", "osc.", "settling"]
        rows = []
        for r in df.to_dict("records"):
            cells = [str(r["rank"]), str(r["algo"]), str(r["seeds"]), "yes" if r["feasible"] else "no",
                     _ci(r["return"], r["return_lo"], r["return_hi"]), _ci(r["norm"], r["norm_lo"], r["norm_hi"]),
                     _num(r["final_return"])]
            for k in meta.constraint_names:
                cells += [_num(r[f"cost_{k}"]), _num(r[f"within_{k}"], 2), _num(r[f"violation_{k}"])]
            cells += [_num(r["train_violation"]), _ci(r["stability"], r["stability_lo"], r["stability_hi"]),
                      _num(r["drift"]), _num(r["osc"], 1), _num(r["settling"], 2)]
            rows.append(tuple(cells))
        notes = [f"Suite {meta.suite}; constraints: " + ", ".join(f"{c.name} <= {_limit(c.limit)}" for c in meta.constraints) + "."]
        if meta.optimum_return is not None:
            mult = ", ".join(f"{n}={_num(m)}" for n, m in zip(meta.constraint_names, meta.optimal_multipliers or ()))
            notes.append(
                f"Exact constrained optimum R* = {_num(meta.optimum_return, 4)} (unconstrained "
                f"{_num(meta.unconstrained_return or math.nan, 4)}; optimal multipliers {mult}); "
                "normalised return = 1 - (R* - R)/|R*|."
            )
        sections.append(Section(f"Task {task}", tuple(notes), tuple(header), tuple(rows)))

    overall: dict[str, pd.DataFrame] = {}
    for suite in sorted(runs["suite"].unique()):
        suite_tasks = sorted(runs.loc[runs["suite"] == suite, "task"].unique())
        with_opt = [t for t in suite_tasks if tasks[t].optimum_return is not None]
        without = [t for t in suite_tasks if t not in with_opt]
        if not with_opt:
            sections.append(Section(f"Suite {suite}: aggregate", (
                "No task of this suite has an exact optimum, so returns cannot be normalised across tasks; "
                "see the per-task tables.",), (), ()))
            continue
        df = _overall(runs, per_task, with_opt, reps, seed)
        overall[suite] = df
        header = ("rank", "algo", "tasks", "runs", "feasible tasks", "mean task rank", "norm. return IQM [95% CI]",
                  "norm. return mean [95% CI]", "runs satisfied", "mean viol.", "stability IQM [95% CI]")
        rows = [
            (str(r["rank"]), str(r["algo"]), str(r["tasks"]), str(r["runs"]), f"{r['feasible_tasks']}/{r['tasks']}",
             _num(r["mean_rank"], 2),
             _ci(r["iqm"], r["iqm_lo"], r["iqm_hi"]), _ci(r["mean"], r["mean_lo"], r["mean_hi"]),
             _num(r["satisfied_runs"], 2), _num(r["violation"]), _ci(r["stability"], r["stability_lo"], r["stability_hi"]))
            for r in df.to_dict("records")
        ]
        notes = [f"Over {len(with_opt)} task(s): " + ", ".join(with_opt) + "."]
        if without:
            notes.append("Left out (no exact optimum to normalise by): " + ", ".join(without) + ".")
        sections.append(Section(f"Suite {suite}: aggregate", tuple(notes), header, tuple(rows)))

        order = list(df["algo"])
        if len(order) < 2:
            continue
        scores = {
            a: {t: g["eval_return_norm"].to_numpy(dtype=float) for t, g in runs[(runs["algo"] == a) & runs["task"].isin(with_opt)].groupby("task", sort=True)}
            for a in order
        }
        poi_rows = []
        for a in order:
            cells = [a]
            for b in order:
                if a == b:
                    cells.append("—")
                else:
                    cells.append(_ci(*stats.probability_of_improvement_ci(scores[a], scores[b], reps=reps, seed=seed), digits=2))
            poi_rows.append(tuple(cells))
        sections.append(Section(
            f"Suite {suite}: probability of improvement",
            ("P(row > column) of the normalised evaluation return, averaged over tasks, with 95% CI (rliable).",),
            ("algo", *order),
            tuple(poi_rows),
        ))
    return Leaderboard(runs, tuple(sections), per_task, overall, preamble)


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|")


def render_markdown(lb: Leaderboard) -> str:
    """The leaderboard as GitHub Markdown."""
    lines = ["# constrained-grpo leaderboard", ""]
    lines += [f"- {p}" for p in lb.preamble]
    lines.append("")
    for s in lb.sections:
        lines += [f"## {s.title}", ""]
        for note in s.notes:
            lines += [note, ""]
        if s.header:
            lines.append("| " + " | ".join(_md_cell(h) for h in s.header) + " |")
            lines.append("|" + "|".join("---" for _ in s.header) + "|")
            lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in s.rows]
            lines.append("")
    return "\n".join(lines)


_CSS = (
    "body{font-family:system-ui,sans-serif;margin:2em;max-width:110em}"
    "table{border-collapse:collapse;margin:0.5em 0 1.5em}"
    "th,td{border:1px solid #ccc;padding:0.25em 0.5em;text-align:right;white-space:nowrap}"
    "th{background:#f3f3f3}td:nth-child(2){text-align:left}"
    "tr.infeasible td{color:#777}"
)


def render_html(lb: Leaderboard) -> str:
    """The leaderboard as one static HTML page (no scripts, no external files)."""
    out = ["<!DOCTYPE html>", "<html lang=\"en\"><head><meta charset=\"utf-8\">",
           "<title>constrained-grpo leaderboard</title>", f"<style>{_CSS}</style></head><body>",
           "<h1>constrained-grpo leaderboard</h1>"]
    out += [f"<p>{html.escape(p)}</p>" for p in lb.preamble]
    for s in lb.sections:
        out.append(f"<h2>{html.escape(s.title)}</h2>")
        out += [f"<p>{html.escape(n)}</p>" for n in s.notes]
        if not s.header:
            continue
        out.append("<table><thead><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in s.header) + "</tr></thead><tbody>")
        feas_col = s.header.index("feasible") if "feasible" in s.header else None
        for row in s.rows:
            cls = ' class="infeasible"' if feas_col is not None and row[feas_col] == "no" else ""
            out.append(f"<tr{cls}>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>")
        out.append("</tbody></table>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def write_leaderboard(lb: Leaderboard, out: str | Path, *, table: pd.DataFrame | None = None) -> list[Path]:
    """Write ``leaderboard.md``, ``leaderboard.html``, ``runs.csv`` (per-run metrics) and,
    when ``table`` is given, ``results.csv`` (the long table, a valid submission)."""
    out = Path(out)
    paths = [out / "leaderboard.md", out / "leaderboard.html", out / "runs.csv"]
    storage.atomic_write_text(paths[0], render_markdown(lb))
    storage.atomic_write_text(paths[1], render_html(lb))
    storage.atomic_write_text(paths[2], lb.runs.to_csv(index=False, lineterminator="\n"))
    if table is not None:
        paths.append(out / "results.csv")
        storage.atomic_write_text(paths[3], table.to_csv(index=False, lineterminator="\n"))
    return paths


def check_submission(path: str | Path, tasks: Mapping[str, TaskMeta] | None = None) -> tuple[pd.DataFrame, dict[str, TaskMeta]]:
    """Validate a third-party submission (docs/leaderboard_schema.md); raise ``ResultsError`` with the reason.

    Beyond the long-table checks (``loader.validate_table``): algorithm names match
    ``[A-Za-z0-9][A-Za-z0-9._:+-]*``, and tasks are registered (or in ``tasks``).
    """
    table = read_table_csv(path)
    if "algo" in table.columns:
        for name in sorted(set(table["algo"].dropna().astype(str))):
            if not _ALGO_NAME.match(name):
                raise ResultsError(f"{path}: algorithm name {name!r} must match [A-Za-z0-9][A-Za-z0-9._:+-]*")
    return validate_table(table, tasks, source=str(path))
