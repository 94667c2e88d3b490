"""The baselines' multi-seed acceptance experiment.

Trains each algorithm for each seed on one task, writes one run directory per
(algo, seed) in Contract 3's layout (``config.json``, ``progress.csv``, ``eval.csv``) and
a ``summary.csv``, and prints, per run, the *final* figures: the mean over the last 20%
of iterations of the training episodes' return and cost per constraint. The criterion
(issue 4, as for the GRPO agent): every final cost ``J_k <= d_k + tol * d_k`` and, where
the task knows its exact constrained optimum ``R*``, ``|R - R*| <= tol * |R*|``::

    python -m constrained_grpo.baselines.experiment --task Grid/HazardFuel-v0 \\
        --algos ppo-lag ppo --seeds 0 1 2 3 4 --steps 300000 --out results/baselines/acceptance

``--set key=value`` passes a config option to every algorithm that has it (values are
read as JSON where they parse, e.g. ``--set multiplier_lr=0.05 ent_coef=0.02``); so
``ppo`` and ``ppo-lag`` share their PPO settings, and ``ppo`` skips the multiplier ones.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from constrained_grpo.baselines.agent import BASELINES
from constrained_grpo.constraints import get_constraints
from constrained_grpo.files import atomic_write_csv
from constrained_grpo.registry import flatten_log_record, make_agent, validate_log_record
from constrained_grpo.tasks import make_env

__all__ = ["RunSummary", "final_figures", "main", "plot_runs", "run_one"]

FINAL_FRACTION = 0.2
TOLERANCE = 0.1


@dataclass(frozen=True)
class RunSummary:
    """Final figures of one run (means over the last ``FINAL_FRACTION`` of iterations)."""

    algo: str
    seed: int
    env_steps: int
    wall_s: float
    ep_return: float
    ep_cost: tuple[float, ...]
    multipliers: tuple[float, ...]
    eval_return: float
    eval_cost: tuple[float, ...]
    within_limits: bool
    return_ok: bool | None

    @property
    def meets_criterion(self) -> bool:
        return self.within_limits and self.return_ok is not False


def final_figures(records: Sequence[Mapping[str, Any]], fraction: float = FINAL_FRACTION) -> dict[str, Any]:
    """Means of ``ep_return``, ``ep_cost`` and ``multipliers`` over the last ``fraction``
    of the iterations (at least one)."""
    if not records:
        raise ValueError("no log records: the run trained no iteration")
    n = max(1, math.ceil(fraction * len(records)))
    tail = records[-n:]
    out: dict[str, Any] = {
        "ep_return": float(np.nanmean([r["ep_return"] for r in tail])),
        "ep_cost": np.nanmean([r["ep_cost"] for r in tail], axis=0).tolist(),
    }
    mult = [r["multipliers"] for r in tail if len(r["multipliers"])]
    out["multipliers"] = np.mean(mult, axis=0).tolist() if mult else []
    return out


def _flatten(record: Mapping[str, Any], names: Sequence[str]) -> dict[str, Any]:
    """One progress.csv row: lists become ``cost_<name>`` and ``lambda_<name>`` columns."""
    row = flatten_log_record(record, names)
    if "cost_estimate" in record:
        for name, value in zip(names, record["cost_estimate"]):
            row[f"cost_estimate_{name}"] = value
    return row


def run_one(
    algo: str,
    task: str,
    seed: int,
    steps: int,
    out: Path,
    config: Mapping[str, Any],
    eval_episodes: int = 100,
    optimum: float | None = None,
) -> RunSummary:
    """Train one (algo, seed), write its run directory and return its final figures."""
    run_dir = out / f"{algo}_seed{seed}"
    run_dir.mkdir(parents=True, exist_ok=True)
    agent = make_agent(algo, task, seed=seed, **config)
    names = [c.name for c in agent.constraints]
    limits = np.array([c.limit for c in agent.constraints])
    (run_dir / "config.json").write_text(
        json.dumps({"algo": algo, "task": task, "seed": seed, "steps": steps,
                    "config": agent.config.to_dict(), "limits": limits.tolist()}, indent=2)
    )
    records: list[dict[str, Any]] = []

    def log(record: dict[str, Any]) -> None:
        validate_log_record(record, len(names))
        records.append(record)

    start = time.perf_counter()
    agent.learn(steps, log)
    wall = time.perf_counter() - start
    atomic_write_csv(run_dir / "progress.csv", [_flatten(r, names) for r in records])
    # Stochastic evaluation: a constrained optimum mixes routes, which a greedy policy cannot.
    result = agent.evaluate(eval_episodes, deterministic=False)
    atomic_write_csv(
        run_dir / "eval.csv",
        [{"episode": i, "return": float(result.returns[i]), "length": int(result.lengths[i]),
          **{f"cost_{n}": float(c) for n, c in zip(names, result.costs[i])}} for i in range(eval_episodes)],
    )
    final = final_figures(records)
    cost = np.asarray(final["ep_cost"])
    return RunSummary(
        algo=algo,
        seed=seed,
        env_steps=agent.env_steps,
        wall_s=wall,
        ep_return=final["ep_return"],
        ep_cost=tuple(cost.tolist()),
        multipliers=tuple(final["multipliers"]),
        eval_return=float(result.returns.mean()),
        eval_cost=tuple(result.costs.mean(axis=0).tolist()),
        within_limits=bool(np.all(cost <= limits * (1 + TOLERANCE))),
        return_ok=None if optimum is None else bool(abs(final["ep_return"] - optimum) <= TOLERANCE * abs(optimum)),
    )


def plot_runs(out: Path, algos: Sequence[str], limits: Sequence[float], names: Sequence[str],
              optimum: float | None) -> Path:
    """``out/curves.png``: return, each cost (with its limit) and each multiplier against
    env steps, one line per seed, one colour per algorithm."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd
    from matplotlib.ticker import FuncFormatter

    panels = ["ep_return", *[f"cost_{n}" for n in names], *[f"lambda_{n}" for n in names]]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.4))
    for colour, algo in zip(("C0", "C1", "C2", "C3", "C4"), algos):
        for i, progress in enumerate(sorted(out.glob(f"{algo}_seed*/progress.csv"))):
            frame = pd.read_csv(progress)
            for ax, col in zip(axes, panels):
                if col in frame:
                    ax.plot(frame["env_steps"], frame[col], color=colour, alpha=0.6, lw=1,
                            label=algo if i == 0 else None)
    for ax, col in zip(axes, panels):
        ax.set_title(col)
        ax.set_xlabel("env steps (thousands)")
        ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x / 1e3:.0f}"))
        if col.startswith("cost_"):
            ax.axhline(limits[names.index(col[5:])], color="k", ls="--", lw=1)
        if col == "ep_return" and optimum is not None:
            ax.axhline(optimum, color="k", ls="--", lw=1)
    axes[0].legend()
    fig.tight_layout()
    path = out / "curves.png"
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def _options_for(algo: str, overrides: Mapping[str, Any]) -> dict[str, Any]:
    """The ``--set`` options that ``algo`` has (all of them for a non-baseline algorithm)."""
    spec = BASELINES.get(algo)
    if spec is None:
        return dict(overrides)
    valid = set(spec.config_cls.valid_options())
    skipped = sorted(set(overrides) - valid)
    if skipped:
        print(f"{algo}: skipping option(s) it does not have: {skipped}", flush=True)
    return {k: v for k, v in overrides.items() if k in valid}


def _parse_sets(items: Sequence[str]) -> dict[str, Any]:
    config: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--set takes key=value, got {item!r}")
        try:
            config[key] = json.loads(value)
        except json.JSONDecodeError:
            config[key] = value
    return config


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m constrained_grpo.baselines.experiment", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="Grid/HazardFuel-v0")
    parser.add_argument("--algos", nargs="+", default=["ppo-lag", "ppo"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    parser.add_argument("--steps", type=int, default=300_000)
    parser.add_argument("--out", type=Path, default=Path("results/baselines/acceptance"))
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                        help="config option for every algorithm that has it")
    parser.add_argument("--eval-episodes", type=int, default=100)
    args = parser.parse_args(argv)
    overrides = _parse_sets(args.set)

    env = make_env(args.task)
    optimum_fn = getattr(env.unwrapped, "optimum", None)
    optimum = float(optimum_fn().constrained_return) if callable(optimum_fn) else None
    constraints = get_constraints(env)
    env.close()
    args.out.mkdir(parents=True, exist_ok=True)
    summaries: list[RunSummary] = []
    for algo in args.algos:
        config = _options_for(algo, overrides)
        for seed in args.seeds:
            s = run_one(algo, args.task, seed, args.steps, args.out, config, args.eval_episodes, optimum)
            summaries.append(s)
            print(
                f"{algo:8s} seed {seed}: steps {s.env_steps} ({s.wall_s:.0f} s)  return {s.ep_return:.3f}  "
                f"cost {[round(c, 3) for c in s.ep_cost]}  lambda {[round(m, 3) for m in s.multipliers]}  "
                f"eval return {s.eval_return:.3f} cost {[round(c, 3) for c in s.eval_cost]}  "
                f"within limits {s.within_limits}  return ok {s.return_ok}",
                flush=True,
            )
    rows = [
        {"algo": s.algo, "seed": s.seed, "env_steps": s.env_steps, "wall_s": round(s.wall_s, 1),
         "final_return": s.ep_return, **{f"final_cost_{i}": c for i, c in enumerate(s.ep_cost)},
         **{f"final_lambda_{i}": m for i, m in enumerate(s.multipliers)},
         "eval_return": s.eval_return, **{f"eval_cost_{i}": c for i, c in enumerate(s.eval_cost)},
         "within_limits": s.within_limits, "return_ok": s.return_ok, "meets_criterion": s.meets_criterion}
        for s in summaries
    ]
    atomic_write_csv(args.out / "summary.csv", rows)
    names = [c.name for c in constraints]
    print(f"curves: {plot_runs(args.out, args.algos, [c.limit for c in constraints], names, optimum)}")
    for algo in args.algos:
        mine = [s for s in summaries if s.algo == algo]
        print(f"{algo}: {sum(s.meets_criterion for s in mine)}/{len(mine)} seeds meet the criterion "
              f"(optimum {optimum}); mean final return {np.mean([s.ep_return for s in mine]):.3f}, "
              f"mean final cost {np.mean([s.ep_cost for s in mine], axis=0).round(3).tolist()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
