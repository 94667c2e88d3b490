"""Speed of the SB3 baselines: env steps per second of ``ppo-lag`` training next to plain
stable-baselines3 ``PPO`` with the same hyperparameters on the same vector env (the task's
batched twin where it has one), in one run.

Writes ``<out_dir>/baselines.csv``: one row per (algorithm, round) plus a ``median`` row
per algorithm, with env steps per second of wall-clock time and of this process's CPU
time, and ``overhead_vs_sb3`` = 1 - median over rounds of (CPU steps/s of the algorithm) /
(CPU steps/s of plain SB3 PPO) in the same round. CPU time (torch on one thread) is what the cost machinery
adds; wall-clock time on a shared machine also counts other processes' load. The
algorithms run in interleaved rounds so that such load hits them alike. Run alone with
``python -m constrained_grpo.eval.bench --only baselines``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch as th
from stable_baselines3 import PPO

from constrained_grpo.baselines.agent import make_baseline_vec_env, sb3_ppo_kwargs, use_batched_env
from constrained_grpo.baselines.config import PPOConfig
from constrained_grpo.eval.bench import write_rows
from constrained_grpo.registry import make_agent
from constrained_grpo.tasks import task_constraints

__all__ = ["run"]

TASK = "Grid/HazardFuel-v0"
ALGOS: tuple[str, ...] = ("sb3-ppo", "ppo", "ppo-lag")


def _config(task: str) -> PPOConfig:
    """PPOConfig's defaults as the agents resolve them for ``task``."""
    config = PPOConfig()
    return config.resolved(use_batched_env(task, config))


def _sb3_ppo_learner(task: str, seed: int) -> Callable[[int], Any]:
    """Plain SB3 PPO with PPOConfig's settings on the vector env the agents get for the task."""
    config = _config(task)
    env = make_baseline_vec_env(task, config, task_constraints(task))
    model = PPO("MlpPolicy", env, **sb3_ppo_kwargs(config, seed))
    return lambda steps: model.learn(steps, reset_num_timesteps=False)


def _agent_learner(name: str, task: str, seed: int) -> Callable[[int], Any]:
    agent = make_agent(name, task, seed=seed)
    return lambda steps: agent.learn(steps)


def run(out_dir: Path, task: str = TASK, rounds: int = 11, rollouts: int = 2, seed: int = 0) -> list[Path]:
    """Time ``rollouts`` rollouts of each algorithm in ``rounds`` interleaved rounds."""
    config = _config(task)
    steps = rollouts * config.rollout_steps
    th.set_num_threads(config.torch_threads)  # the agents' setting, for plain SB3 too
    learners = {
        algo: _sb3_ppo_learner(task, seed) if algo == "sb3-ppo" else _agent_learner(algo, task, seed)
        for algo in ALGOS
    }
    for learn in learners.values():  # warm-up: first reset, first allocations
        learn(config.rollout_steps)
    rows: list[dict[str, Any]] = []
    speeds: dict[str, list[float]] = {algo: [] for algo in ALGOS}
    walls: dict[str, list[float]] = {algo: [] for algo in ALGOS}
    for r in range(rounds):
        for algo, learn in learners.items():
            start, start_cpu = time.perf_counter(), time.process_time()
            learn(steps)
            wall, cpu = time.perf_counter() - start, time.process_time() - start_cpu
            speeds[algo].append(steps / cpu)
            walls[algo].append(steps / wall)
            rows.append({"task": task, "algo": algo, "round": r, "env_steps": steps, "wall_s": round(wall, 3),
                         "cpu_s": round(cpu, 3), "env_steps_per_s": round(steps / wall, 1),
                         "env_steps_per_cpu_s": round(steps / cpu, 1)})
    for algo in ALGOS:
        med, med_wall = statistics.median(speeds[algo]), statistics.median(walls[algo])
        # Paired by round: the machine's speed drifts between rounds, and a round's three
        # windows are back to back, so the per-round ratio cancels most of that drift.
        overhead = 1.0 - statistics.median(a / b for a, b in zip(speeds[algo], speeds["sb3-ppo"]))
        rows.append({"task": task, "algo": algo, "round": "median", "env_steps": steps * rounds,
                     "env_steps_per_s": round(med_wall, 1), "env_steps_per_cpu_s": round(med, 1),
                     "overhead_vs_sb3": round(overhead, 4)})
        print(f"[baselines] {algo:8s} {med:8.1f} env steps per CPU s ({med_wall:7.1f} per wall s)  "
              f"overhead vs SB3 PPO {overhead:+.1%} (median of per-round ratios)", flush=True)
    return [write_rows(Path(out_dir) / "baselines.csv", rows)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m constrained_grpo.eval.bench.baselines", description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("results/bench"))
    parser.add_argument("--task", default=TASK)
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--rollouts", type=int, default=2)
    args = parser.parse_args(argv)
    run(args.out, task=args.task, rounds=args.rounds, rollouts=args.rollouts)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
