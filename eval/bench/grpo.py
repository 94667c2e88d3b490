"""Speed of the GRPO agents (``make bench``): ``<out>/grpo.csv``.

Two kinds of rows:

- ``kind=criterion``: for ``cgrpo`` and ``grpo-screw`` on ``Grid/HazardFuel-v0``, the
  wall-clock seconds and env steps until the acceptance criterion first holds over a
  sliding window of 20 iterations (mean costs <= limit x 1.1, mean return within 10% of
  the exact constrained optimum); empty if it never holds within the budget.
- ``kind=split``: the time split of one iteration (rollout, advantages, backward), as
  medians over the iterations of that run, and the advantage share of an iteration
  (target: under 5%).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from constrained_grpo.eval.scoring.metrics import first_time_criterion_met, optimum_return
from constrained_grpo.eval.bench import write_rows
from constrained_grpo.registry import make_agent

__all__ = ["ALGOS", "BUDGET_ENV_STEPS", "ENV_ID", "bench_algo", "run"]

ENV_ID = "Grid/HazardFuel-v0"
ALGOS: tuple[str, ...] = ("cgrpo", "grpo-screw")
#: Env steps per benchmark run (the acceptance runs use the same budget).
BUDGET_ENV_STEPS = 3_000_000
SEED = 0


def bench_algo(algo: str, env_id: str = ENV_ID, seed: int = SEED, budget: int = BUDGET_ENV_STEPS) -> list[dict[str, Any]]:
    """One training run of ``algo``; its criterion row and its time-split row."""
    agent = make_agent(algo, env_id, seed=seed)
    records: list[dict[str, Any]] = []
    start = time.perf_counter()
    agent.learn(budget, records.append)
    total_s = time.perf_counter() - start
    limits = agent.adapter.limits.tolist()
    optimum = optimum_return(agent)
    reached = first_time_criterion_met(records, limits, optimum) if optimum is not None else None
    base = {"algo": algo, "env_id": env_id, "seed": seed, "budget_env_steps": budget}
    criterion = {
        **base,
        "kind": "criterion",
        "reached": reached is not None,
        "criterion_env_steps": None if reached is None else reached["env_steps"],
        "criterion_wall_s": None if reached is None else round(reached["wall_s"], 2),
        "criterion_iteration": None if reached is None else reached["iteration"],
        "run_env_steps": records[-1]["env_steps"],
        "run_wall_s": round(total_s, 2),
        "iterations": len(records),
    }
    rollout = np.median([r["rollout_s"] for r in records])
    advantage = np.median([r["advantage_s"] for r in records])
    backward = np.median([r["backward_s"] for r in records])
    iteration = np.median([r["iteration_s"] for r in records])
    split = {
        **base,
        "kind": "split",
        "rollout_ms": round(1e3 * rollout, 3),
        "advantage_ms": round(1e3 * advantage, 3),
        "backward_ms": round(1e3 * backward, 3),
        "iteration_ms": round(1e3 * iteration, 3),
        "advantage_share": round(float(advantage / iteration), 5),
        "advantage_under_5pct": bool(advantage / iteration < 0.05),
        "samples_per_iteration": agent.config.num_samples,
        "env_steps_per_s": round(records[-1]["env_steps"] / total_s, 1),
    }
    return [criterion, split]


def run(out_dir: Path) -> list[Path]:
    rows: list[dict[str, Any]] = []
    for algo in ALGOS:
        rows += bench_algo(algo)
    return [write_rows(Path(out_dir) / "grpo.csv", rows)]
