"""The acceptance experiment: GRPO variants x seeds on a task, scored against the exact optimum.

    python -m constrained_grpo.agents.experiment --algos cgrpo grpo-screw --seeds 0 1 2 3 4 \\
        --env Grid/HazardFuel-v0 --steps 3000000 --out results/runs/acceptance

Each run writes a directory ``<out>/<algo>/seed<k>/`` (Contract 3): ``config.json``,
``progress.csv`` (one row per iteration, rewritten atomically after every iteration so
an interrupted run keeps everything logged), ``eval.csv`` (one row per evaluation
episode) and the saved agent under ``model/``. ``<out>/summary.csv`` has one row per run.

The criterion (issue 3): over the last ``tail`` (20%) of iterations, the mean episodic
cost of each constraint is at most ``limit * (1 + tol)`` and the mean return is within
``tol`` (10%) of the exact constrained optimum.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from constrained_grpo.files import atomic_write_csv
from constrained_grpo.registry import flatten_log_record as flatten_record  # re-exported for the text experiment
from constrained_grpo.registry import make_agent

__all__ = ["TailSummary", "first_time_criterion_met", "flatten_record", "main", "optimum_return", "run_experiment", "run_one", "tail_summary"]


def optimum_return(agent: Any) -> float | None:
    """The exact constrained optimum of the agent's task under its limits, if the task has one."""
    env = agent.adapter.env
    solver = getattr(env, "optimum", None) or getattr(getattr(env, "unwrapped", None), "optimum", None)
    if solver is None:
        return None
    opt = solver()
    limits = tuple(float(v) for v in agent.adapter.limits)
    if tuple(float(v) for v in opt.limits) != limits:
        return None  # the agent's overridden limits differ from the task's: no exact reference
    return float(opt.constrained_return)


@dataclass(frozen=True)
class TailSummary:
    """Means over the last ``tail`` fraction of iterations, and the verdict."""

    ep_return: float
    ep_cost: tuple[float, ...]
    multipliers: tuple[float, ...]
    within_limits: bool
    return_ok: bool | None
    passed: bool
    num_iterations: int


def tail_summary(
    records: Sequence[Mapping[str, Any]],
    limits: Sequence[float],
    optimum: float | None,
    tail: float = 0.2,
    tol: float = 0.1,
) -> TailSummary:
    """Score the last ``tail`` of ``records``: costs <= limit (1 + tol), return >= optimum (1 - tol)."""
    if not records:
        raise ValueError("no iterations to summarize")
    n = max(1, int(round(len(records) * tail)))
    last = records[-n:]
    ret = float(np.mean([r["ep_return"] for r in last]))
    costs = np.mean([r["ep_cost"] for r in last], axis=0)
    mult = np.mean([r["multipliers"] for r in last], axis=0) if last[0]["multipliers"] else np.zeros(0)
    lim = np.asarray(limits, dtype=np.float64)
    within = bool(np.all(costs <= lim * (1.0 + tol)))
    return_ok = None if optimum is None else bool(ret >= optimum - tol * abs(optimum))
    return TailSummary(
        ep_return=ret,
        ep_cost=tuple(float(c) for c in np.atleast_1d(costs)),
        multipliers=tuple(float(m) for m in mult),
        within_limits=within,
        return_ok=return_ok,
        passed=within and bool(return_ok),
        num_iterations=len(records),
    )


def first_time_criterion_met(
    records: Sequence[Mapping[str, Any]],
    limits: Sequence[float],
    optimum: float,
    window: int = 20,
    tol: float = 0.1,
) -> dict[str, Any] | None:
    """The first iteration at which the last ``window`` iterations meet the criterion.

    Returns ``{"iteration", "env_steps", "wall_s"}`` of that iteration, or None.
    """
    for end in range(window, len(records) + 1):
        s = tail_summary(records[end - window:end], limits, optimum, tail=1.0, tol=tol)
        if s.passed:
            r = records[end - 1]
            return {"iteration": r["iteration"], "env_steps": r["env_steps"], "wall_s": r["wall_s"]}
    return None


def run_one(
    algo: str,
    env_id: str,
    seed: int,
    total_env_steps: int,
    out_dir: Path | None = None,
    eval_episodes: int = 100,
    verbose: bool = False,
    **config: Any,
) -> dict[str, Any]:
    """Train ``algo`` on ``env_id`` with ``seed``; return the run's summary row."""
    agent = make_agent(algo, env_id, seed=seed, **config)
    names = agent.adapter.constraint_names
    limits = agent.adapter.limits.tolist()
    records: list[dict[str, Any]] = []
    rows: list[dict[str, Any]] = []
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        meta = {"algo": algo, "env_id": env_id, "seed": seed, "total_env_steps": total_env_steps, "config": agent.config.to_dict()}
        (out_dir / "config.json").write_text(json.dumps(meta, indent=2, sort_keys=True))

    def log(record: dict[str, Any]) -> None:
        records.append(record)
        rows.append(flatten_record(record, names))
        if out_dir is not None:
            atomic_write_csv(out_dir / "progress.csv", rows, fsync=False)
        if verbose and (record["iteration"] % 25 == 0):
            print(
                f"[{algo} s{seed}] it {record['iteration']} steps {record['env_steps']} "
                f"R {record['ep_return']:.3f} C {np.round(record['ep_cost'], 3).tolist()} "
                f"lambda {np.round(record['multipliers'], 3).tolist()}",
                flush=True,
            )

    start = time.perf_counter()
    agent.learn(total_env_steps, log)
    train_s = time.perf_counter() - start
    evaluation = agent.evaluate(eval_episodes, deterministic=False)
    if out_dir is not None:
        eval_rows = [
            {"episode": i, "return": float(evaluation.returns[i]), "length": int(evaluation.lengths[i]),
             **{f"cost_{n}": float(evaluation.costs[i, k]) for k, n in enumerate(names)}}
            for i in range(len(evaluation.returns))
        ]
        atomic_write_csv(out_dir / "eval.csv", eval_rows)
        agent.save(out_dir / "model")
    optimum = optimum_return(agent)
    tail = tail_summary(records, limits, optimum)
    reached = first_time_criterion_met(records, limits, optimum) if optimum is not None else None
    row: dict[str, Any] = {
        "algo": algo,
        "env_id": env_id,
        "seed": seed,
        "env_steps": records[-1]["env_steps"],
        "iterations": len(records),
        "train_s": train_s,
        "optimum": optimum,
        "tail_return": tail.ep_return,
        **{f"tail_cost_{n}": c for n, c in zip(names, tail.ep_cost)},
        **{f"tail_lambda_{n}": m for n, m in zip(names, tail.multipliers)},
        "within_limits": tail.within_limits,
        "return_ok": tail.return_ok,
        "passed": tail.passed,
        "eval_return": float(evaluation.returns.mean()),
        **{f"eval_cost_{n}": float(evaluation.costs[:, k].mean()) for k, n in enumerate(names)},
        "criterion_env_steps": None if reached is None else reached["env_steps"],
        "criterion_wall_s": None if reached is None else reached["wall_s"],
    }
    return row


def run_experiment(
    algos: Sequence[str],
    env_id: str,
    seeds: Sequence[int],
    total_env_steps: int,
    out_dir: Path | None = None,
    verbose: bool = True,
    eval_episodes: int = 100,
    **config: Any,
) -> list[dict[str, Any]]:
    """Every ``algo`` x ``seed``; writes ``<out_dir>/summary.csv`` after each run."""
    rows: list[dict[str, Any]] = []
    for algo in algos:
        for seed in seeds:
            run_dir = None if out_dir is None else out_dir / algo / f"seed{seed}"
            row = run_one(algo, env_id, seed, total_env_steps, run_dir, eval_episodes, verbose=verbose, **config)
            rows.append(row)
            if verbose:
                print(json.dumps({k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items()}), flush=True)
            if out_dir is not None:
                atomic_write_csv(out_dir / "summary.csv", rows)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m constrained_grpo.agents.experiment", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algos", nargs="+", default=["cgrpo", "grpo-screw"])
    parser.add_argument("--env", default="Grid/HazardFuel-v0")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    parser.add_argument("--steps", type=int, default=3_000_000, help="env steps per run")
    parser.add_argument("--out", type=Path, default=None, help="output directory (none: print only)")
    parser.add_argument("--config", type=json.loads, default={}, help='JSON dict of GRPO options, e.g. \'{"lr": 0.001}\'')
    parser.add_argument("--eval-episodes", type=int, default=100, help="episodes of the final evaluation")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    rows = run_experiment(args.algos, args.env, args.seeds, args.steps, args.out, verbose=not args.quiet,
                          eval_episodes=args.eval_episodes, **args.config)
    for algo in args.algos:
        mine = [r for r in rows if r["algo"] == algo]
        print(f"{algo}: passed {sum(bool(r['passed']) for r in mine)}/{len(mine)}; "
              f"tail return {np.mean([r['tail_return'] for r in mine]):.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
