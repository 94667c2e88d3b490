"""The last-iterate study: which multiplier rule or remedy lets the *final* policy meet its limits.

Plain primal-dual updates converge on average, not in the last iterate (ReLOAD, arXiv
2302.01275): a Lagrangian learner can meet its limits over its training tail while the
policy a user deploys, the last one, violates them. The study runs ``cgrpo`` with each
multiplier rule of :mod:`constrained_grpo.multipliers` and each deployed-policy remedy of
:mod:`constrained_grpo.agents.final_policy` (``cgrpo-*`` variants) and ``ppo-lag`` with dual
ascent on three gridworlds, ``ppo-lag``'s last-iterate rules (``ppo-lag-ogda``, ``ppo-lag-al``,
``crpo``) on Grid/HazardFuel-v0, and scores both iterates of every run with the
leaderboard's rules::

    cgrpo bench --preset last-iterate --workers 2 --no-save --out runs/last-iterate
    python -m constrained_grpo.eval.studies.last_iterate analyze runs/last-iterate --out results/last_iterate
    python -m constrained_grpo.eval.studies.last_iterate report results/last_iterate

``analyze`` scores the run directories into ``runs.csv`` (one row per run: both verdicts,
both returns, the stability class) and ``traces.csv.gz`` (the training traces of each
algorithm's first seed), then writes the report from those two files, which is what
``report`` does alone: the committed report regenerates from the committed tables, and the
per-episode logs from the bench command (330 runs, about 1 h on 2 cores).

For each (task, algorithm): final-policy feasibility by the verdict of this round (exact
one-sided bounds at the family's planned evaluation size; ``undetermined`` is not within),
average-iterate feasibility (the training tail's mean costs within ``d (1 + tol)``), the exact
McNemar test of their paired difference over seeds, the normalised return of both iterates
and their paired difference with t intervals over seeds, and the multiplier's stability class
(the most common over seeds). The goal of the study, a configuration whose final policy is
within on at least 9 of 10 seeds on Grid/HazardFuel-v0 with normalised return at least 0.95
(the lower end of its interval) while its average iterate stays within, is stated per row.
"""

from __future__ import annotations

import argparse
import math
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats as sps

from constrained_grpo.eval.presets import PRESETS
from constrained_grpo.eval.scoring.loader import ResultsError, algo_properties, load_results
from constrained_grpo.eval.scoring.metrics import run_metrics
from constrained_grpo.eval.scoring.verdict import TOL
from constrained_grpo.files import atomic_write_csv, atomic_write_text

__all__ = ["ALGOS", "GOAL_RETURN", "GOAL_SEEDS", "TASKS", "analyze", "mcnemar_exact", "paired_t_interval", "summarize"]

PRESET = PRESETS["last-iterate"]
TASKS: tuple[str, ...] = PRESET.tasks
#: The rules of constrained_grpo.multipliers on cgrpo, and ppo-lag with dual ascent and the rules.
ALGOS: tuple[str, ...] = PRESET.algos
GOAL_TASK = "Grid/HazardFuel-v0"
#: Final policy within on at least this many of 10 seeds ...
GOAL_SEEDS = 9
#: ... with the lower end of the normalised return's interval at least this.
GOAL_RETURN = 0.95
LEVEL = 0.95


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value of ``b`` and ``c`` discordant pairs: ``2 P(X <= min(b, c))``,
    ``X ~ Binomial(b + c, 1/2)``, capped at 1 (1 when no pair is discordant)."""
    n = b + c
    if n == 0:
        return 1.0
    return float(min(1.0, 2.0 * sps.binom.cdf(min(b, c), n, 0.5)))


def paired_t_interval(x: Sequence[float] | np.ndarray, level: float = LEVEL) -> tuple[float, float, float]:
    """Mean of ``x`` and its two-sided Student-t interval ``mean -+ t_{n-1} s / sqrt(n)``
    (NaN bounds below 2 values, the mean itself where every value is equal)."""
    x = np.asarray(x, dtype=float)
    x = x[np.isfinite(x)]
    if len(x) == 0:
        return math.nan, math.nan, math.nan
    mean = float(x.mean())
    if len(x) < 2:
        return mean, math.nan, math.nan
    half = float(sps.t.ppf(0.5 + level / 2, len(x) - 1) * x.std(ddof=1) / math.sqrt(len(x)))
    return mean, mean - half, mean + half


def _mode(values: pd.Series) -> str:
    values = values.dropna().astype(str)
    values = values[values != ""]
    if values.empty:
        return ""
    counts = values.value_counts()
    top = counts[counts == counts.max()].index
    return "/".join(sorted(top))  # a tie is shown as a tie


def summarize(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per (task, algorithm) of :func:`~constrained_grpo.eval.scoring.metrics.run_metrics`'s rows."""
    rows = []
    for (task, algo), g in runs.groupby(["task", "algo"], sort=False):
        final_in = g["feasibility"].eq("feasible").to_numpy()
        avg_in = g["tail_feasible"].astype(bool).to_numpy()
        b = int((avg_in & ~final_in).sum())  # the average iterate within, the final policy not
        c = int((final_in & ~avg_in).sum())
        fr = paired_t_interval(g["eval_return_norm"])
        ar = paired_t_interval(g["final_return_norm"])
        diff = paired_t_interval(g["eval_return_norm"].to_numpy(float) - g["final_return_norm"].to_numpy(float))
        row = {
            "task": task, "algo": algo, "seeds": len(g),
            "final_within": int(final_in.sum()),
            "final_over": int(g["feasibility"].eq("violates").sum()),
            "final_undetermined": int(g["feasibility"].eq("undetermined").sum()),
            "average_within": int(avg_in.sum()),
            "mcnemar_b": b, "mcnemar_c": c, "mcnemar_p": mcnemar_exact(b, c),
            "final_return_norm": fr[0], "final_return_lo": fr[1], "final_return_hi": fr[2],
            "average_return_norm": ar[0], "average_return_lo": ar[1], "average_return_hi": ar[2],
            "difference": diff[0], "difference_lo": diff[1], "difference_hi": diff[2],
            "stability_class": _mode(g["stability_class"]) if "stability_class" in g else "",
            "eval_episodes": int(g["eval_episodes"].min()),
        }
        row["goal"] = _goal(row) if task == GOAL_TASK else ""
        rows.append(row)
    return pd.DataFrame(rows)


def _goal(row: dict) -> str:
    """``met`` / ``not met`` / ``undetermined`` (the return's interval straddles 0.95)."""
    counts_ok = row["final_within"] >= GOAL_SEEDS * row["seeds"] / 10 and row["average_within"] >= GOAL_SEEDS * row["seeds"] / 10
    if not counts_ok or row["final_return_hi"] < GOAL_RETURN:
        return "not met"
    return "met" if row["final_return_lo"] >= GOAL_RETURN else "undetermined"


def _fmt(x: float, digits: int = 3) -> str:
    return "" if not (isinstance(x, (int, float)) and math.isfinite(x)) else f"{x:.{digits}f}"


def _interval(mean: float, lo: float, hi: float) -> str:
    return f"{_fmt(mean)} [{_fmt(lo)}, {_fmt(hi)}]"


def render_markdown(summary: pd.DataFrame, command: str) -> str:
    """The study's report: one table per task."""
    lines = [
        "# Last-iterate study",
        "",
        "Which multiplier rule lets the final policy, the one a user deploys, meet its limits. "
        "Each run is scored twice: its **final policy**, evaluated by the harness at the gridworld plan's "
        "size with the verdict of docs/benchmark.md (exact one-sided bounds; `undetermined` is not within), "
        f"and its **average iterate**, the training tail (last 20% of iterations) with its mean costs within "
        f"d (1 + {TOL:g}). McNemar: exact two-sided test of the paired difference of the two verdicts over "
        "seeds (b: average within and final not; c: the reverse). Returns are normalised by the task's LP "
        f"optimum; intervals are {LEVEL:.0%} Student-t over seeds, the difference paired by seed. "
        "Stability: the multiplier's class (docs/benchmark.md), the most common over seeds (ties shown). "
        f"Goal on {GOAL_TASK}: final policy within on at least {GOAL_SEEDS}/10 seeds, its normalised return's "
        f"interval at or above {GOAL_RETURN} (`undetermined` where the interval straddles it), average iterate within too.",
        "",
        f"Regenerate from the committed tables: `{command}`; the runs themselves: `cgrpo bench --preset last-iterate "
        "--workers 2 --out runs/last-iterate`, then `python -m constrained_grpo.eval.studies.last_iterate analyze "
        "runs/last-iterate --out results/last_iterate`.",
        "",
    ]
    for task, g in summary.groupby("task", sort=False):
        lines += [f"## {task}", "",
                  "| algorithm | final within | average within | McNemar b/c, p | final return | average return | "
                  "final - average | stability | goal |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for _, r in g.iterrows():
            final = f"{r.final_within}/{r.seeds}" + (f" ({r.final_undetermined} undetermined)" if r.final_undetermined else "")
            lines.append(
                f"| {r.algo} | {final} | {r.average_within}/{r.seeds} | {r.mcnemar_b}/{r.mcnemar_c}, {_fmt(r.mcnemar_p)} | "
                f"{_interval(r.final_return_norm, r.final_return_lo, r.final_return_hi)} | "
                f"{_interval(r.average_return_norm, r.average_return_lo, r.average_return_hi)} | "
                f"{_interval(r.difference, r.difference_lo, r.difference_hi)} | {r.stability_class} | {r.goal} |"
            )
        lines.append("")
    met = summary[summary["goal"] == "met"]
    lines += ["## Verdict", ""]
    if len(met):
        lines.append(f"The goal is met by: {', '.join(met['algo'])} (on {GOAL_TASK}).")
    else:
        best = summary[summary["task"] == GOAL_TASK].sort_values(["final_within", "final_return_norm"], ascending=False)
        top = best.iloc[0] if len(best) else None
        lines.append("No configuration meets the goal" + (
            f"; the most final-feasible on {GOAL_TASK} is {top.algo}: final policy within on {top.final_within}/{top.seeds} "
            f"seeds, normalised return {_interval(top.final_return_norm, top.final_return_lo, top.final_return_hi)}."
            if top is not None else "."))
    return "\n".join(lines) + "\n"


def _traces_figure(traces: pd.DataFrame, task: str, out: Path) -> Path:
    """Costs relative to their limits and the multipliers over training, one row per algorithm (one seed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from constrained_grpo.eval.scoring.plots import env_steps_axis, outside_legend

    t = traces[traces["task"] == task]
    names = sorted(c[len("ratio_"):] for c in t.columns if c.startswith("ratio_") and t[c].notna().any())
    algos = [a for a in ALGOS if a in set(t["algo"])] + sorted(set(t["algo"]) - set(ALGOS))
    fig, axes = plt.subplots(len(algos), 2, figsize=(10, 1.5 * len(algos) + 0.8), sharex=True, squeeze=False,
                             layout="constrained")
    colors = dict(zip(names, ("#d62728", "#1f77b4", "#2ca02c", "#9467bd")))
    for i, algo in enumerate(algos):
        tr = t[t["algo"] == algo].sort_values("iteration")
        steps = tr["env_steps"].to_numpy(float)
        for k in names:
            axes[i, 0].plot(steps, tr[f"ratio_{k}"].to_numpy(float), lw=0.7, color=colors[k], label=k)
            if f"lambda_{k}" in tr and tr[f"lambda_{k}"].notna().any():
                axes[i, 1].plot(steps, tr[f"lambda_{k}"].to_numpy(float), lw=0.7, color=colors[k], label=k)
        axes[i, 0].axhline(1.0, color="k", lw=0.6, ls="--")
        axes[i, 0].axhline(1.0 + TOL, color="k", lw=0.4, ls=":")
        axes[i, 0].set_ylim(0.0, 3.0)  # the hazard spikes reach 8-10 d: clipped, so that the band at d stays legible
        axes[i, 0].set_ylabel(algo, rotation=0, ha="right", va="center", fontsize=8)
    axes[0, 0].set_title("batch cost / limit, clipped at 3 (dashed: the limit, dotted: its tolerance)", fontsize=9)
    axes[0, 1].set_title("multiplier (CRPO: its switch)", fontsize=9)
    for ax in axes[-1]:
        env_steps_axis(ax)  # 500k / 1.5M, the locator shared by the columns' axes
    seed = int(t["seed"].min()) if len(t) else 0
    fig.suptitle(f"{task}, seed {seed}", fontsize=10)
    outside_legend(fig)  # beside the panels: inside one it covered the traces near the limit
    path = out / f"traces_{task.split('/')[-1]}.png"
    fig.savefig(path, dpi=80, metadata={"Software": None})
    plt.close(fig)
    return path


#: runs.csv: what the summary needs of each run (rounded to 6 digits, the summary is taken from these).
_RUN_COLUMNS = ("task", "algo", "seed", "feasibility", "tail_feasible", "eval_return_norm", "final_return_norm",
                "violation", "tail_violation", "stability_class", "eval_episodes")
RUNS_FILE, TRACES_FILE = "runs.csv", "traces.csv.gz"


def collect(runs_dir: str | Path, out: str | Path, *, allow_incomplete: bool = False) -> list[Path]:
    """Score the run directories under ``runs_dir`` into ``out/runs.csv`` and ``out/traces.csv.gz``."""
    import gzip

    runs_dir, out = Path(runs_dir), Path(out)
    results = load_results(runs_dir, allow_incomplete=allow_incomplete)
    props = algo_properties(runs_dir)
    runs = run_metrics(
        results.table, results.tasks, tol=TOL,
        lambda_in_reward_units={a: p["lambda_in_reward_units"] for a, p in props.items()},
        lambda_max={a: p["lambda_max"] for a, p in props.items()}, evals=results.summaries,
    )
    order = {a: i for i, a in enumerate(ALGOS)}
    key = lambda col: col.map(lambda a: order.get(a, len(order))) if col.name == "algo" else col  # noqa: E731
    runs = runs.sort_values(["task", "algo", "seed"], key=key).reset_index(drop=True)
    table = results.table
    first = table[(table["kind"] == "train")].merge(runs.groupby(["task", "algo"])["seed"].min().reset_index())
    frames = []
    for task, g in first.groupby("task", sort=True):
        cols = {"task": g["task"], "algo": g["algo"], "seed": g["seed"], "iteration": g["iteration"], "env_steps": g["env_steps"]}
        for c in results.tasks[task].constraints:
            cols[f"ratio_{c.name}"] = g[f"cost_{c.name}"] / c.limit
            if f"lambda_{c.name}" in g:
                cols[f"lambda_{c.name}"] = g[f"lambda_{c.name}"]
        frames.append(pd.DataFrame(cols))
    traces = pd.concat(frames, ignore_index=True).sort_values(["task", "algo", "iteration"], key=key)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_csv(out / RUNS_FILE, runs[list(_RUN_COLUMNS)].round(6).to_dict("records"))
    text = traces.round(6).to_csv(index=False, lineterminator="\n")
    tmp = out / (TRACES_FILE + ".tmp")
    with open(tmp, "wb") as fh, gzip.GzipFile(fileobj=fh, mode="wb", mtime=0, filename="") as gz:
        gz.write(text.encode("utf-8"))
    tmp.replace(out / TRACES_FILE)
    return [out / RUNS_FILE, out / TRACES_FILE]


def report(out: str | Path, command: str | None = None) -> list[Path]:
    """``last_iterate.md``, ``summary.csv`` and one traces figure per task from ``out/runs.csv``
    and ``out/traces.csv.gz``."""
    out = Path(out)
    for name in (RUNS_FILE, TRACES_FILE):
        if not (out / name).is_file():
            raise FileNotFoundError(f"{out / name} is missing; run `python -m constrained_grpo.eval.studies.last_iterate analyze RUNS --out {out}` first")
    runs = pd.read_csv(out / RUNS_FILE, keep_default_na=False, na_values=[""])
    runs["tail_feasible"] = runs["tail_feasible"].astype(str).str.lower().eq("true")
    summary = summarize(runs)
    command = command or "python -m constrained_grpo.eval.studies.last_iterate report " + shlex.quote(str(out))
    atomic_write_text(out / "last_iterate.md", render_markdown(summary, command))
    atomic_write_csv(out / "summary.csv", summary.round(6).to_dict("records"))
    written = [out / "last_iterate.md", out / "summary.csv"]
    traces = pd.read_csv(out / TRACES_FILE)
    for task in summary["task"].unique():
        written.append(_traces_figure(traces, task, out))
    return written


def analyze(runs_dir: str | Path, out: str | Path, *, allow_incomplete: bool = False) -> list[Path]:
    """:func:`collect`, then :func:`report`."""
    paths = collect(runs_dir, out, allow_incomplete=allow_incomplete)
    return paths + report(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m constrained_grpo.eval.studies.last_iterate",
                                     description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("analyze", help="score the runs of `cgrpo bench --preset last-iterate`, then report")
    a.add_argument("runs", type=Path)
    a.add_argument("--out", type=Path, required=True)
    a.add_argument("--allow-incomplete", action="store_true", help="score the complete runs, list the rest")
    r = sub.add_parser("report", help="the report and figures from DIR/runs.csv and DIR/traces.csv.gz")
    r.add_argument("dir", type=Path)
    args = parser.parse_args(argv)
    try:
        if args.cmd == "analyze":
            if not args.runs.is_dir():
                parser.error(f"{args.runs} is not a directory of runs; run `cgrpo bench --preset last-iterate --out {args.runs}` first")
            paths = analyze(args.runs, args.out, allow_incomplete=args.allow_incomplete)
        else:
            paths = report(args.dir)
    except (ResultsError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for p in paths:
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
