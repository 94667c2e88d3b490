"""Training throughput and time-to-criterion of every algorithm (``make bench``): ``<out>/training.csv``.

Three kinds of rows (whole standard-budget runs are timed by :mod:`~constrained_grpo.eval.bench.training_run`,
with :func:`child_run`):

- ``kind=throughput``: env steps per second of ``agent.learn()`` (wall-clock and this
  process's CPU time, torch, OpenMP, MKL and OpenBLAS on one thread each, as a sweep worker
  runs) for every registered learner (40,960 env steps for the SB3-based ones, about 300k
  for the GRPO agents) on
  ``Grid/HazardFuel-v0``, beside plain stable-baselines3 ``PPO`` (``sb3-ppo``) with
  ``PPOConfig``'s settings on the same vector env as the baselines (the batched twin),
  and the peak resident memory of the training process. Each measurement runs in a fresh
  process (so that its peak RSS is its own), after one warm-up rollout or iteration, in
  interleaved rounds: round r times every algorithm back to back, so that the machine's
  load hits them alike; ``vs_sb3_ppo`` is the ratio of CPU-time speeds to ``sb3-ppo`` in
  the same round. A ``median`` row per algorithm summarises the rounds.
- the same on ``Highway/Highway-v0`` at a small budget (one round, one rollout or GRPO
  iteration, no warm-up). Its vector env steps in worker processes, whose CPU time and
  memory the ``env_steps_per_cpu_s`` and ``peak_rss_mb`` columns do not include: compare
  highway rows by ``env_steps_per_s`` (wall-clock).
- ``kind=criterion``: for ``cgrpo``, ``grpo-screw``, ``ppo-lag`` and ``pid-lag`` on
  ``Grid/HazardFuel-v0``, seeds 0-2, the env steps and training seconds until the
  acceptance criterion first holds over a sliding window of 20 iterations (every mean
  episodic cost <= 1.1 x its limit, mean return >= 0.9 R*, R* the exact constrained
  optimum), training at most ``cap`` (10M) env steps; empty where it never holds.

Every row carries ``load_1m`` (the 1-minute load average when it was measured) and the
environment columns of :func:`~constrained_grpo.eval.bench.write_rows`. Run alone with
``python -m constrained_grpo.eval.bench.training [--rounds 3] [--cap 10000000]``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

__all__ = ["ALGOS_CRITERION", "ALGOS_RUN", "GRID", "HIGHWAY", "child_criterion", "child_run", "child_throughput", "run"]

GRID = "Grid/HazardFuel-v0"
HIGHWAY = "Highway/Highway-v0"
SB3_PPO = "sb3-ppo"
ALGOS_CRITERION: tuple[str, ...] = ("cgrpo", "grpo-screw", "ppo-lag", "pid-lag")
ALGOS_RUN: tuple[str, ...] = ("cgrpo", "grpo-screw", "ppo-lag", SB3_PPO)
ALGOS_HIGHWAY: tuple[str, ...] = (SB3_PPO, "ppo", "ppo-lag", "pid-lag", "cgrpo", "grpo-screw")
#: Env steps timed per throughput measurement on the gridworld: 10 baseline rollouts of
#: 4096 steps, or about 100 GRPO iterations.
GRID_STEPS = 40_960
GRPO_GRID_STEPS = 300_000
#: Criterion runs train in chunks of this many env steps, checking the criterion between them.
CRITERION_CHUNK = 200_000
CRITERION_WINDOW = 20


def grid_window(algo: str) -> int:
    """The env steps a throughput measurement times on the gridworld for ``algo``."""
    from constrained_grpo.baselines.agent import BASELINES as SB3_BASED

    return GRID_STEPS if algo == SB3_PPO or algo in SB3_BASED else GRPO_GRID_STEPS


def _peak_rss_mb() -> float:
    """This process's peak resident set size in MiB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _learner(algo: str, task: str, seed: int, config: dict[str, Any]) -> tuple[Callable[[int], Any], Callable[[], int], Any]:
    """``(learn(steps), env_steps(), agent or model)`` for ``algo`` on ``task``."""
    if algo == SB3_PPO:
        from stable_baselines3 import PPO

        from constrained_grpo.baselines.agent import make_baseline_vec_env, sb3_ppo_kwargs, use_batched_env
        from constrained_grpo.baselines.config import PPOConfig
        from constrained_grpo.tasks import task_constraints

        cfg = PPOConfig.from_dict(config)
        cfg = cfg.resolved(use_batched_env(task, cfg))
        model = PPO("MlpPolicy", make_baseline_vec_env(task, cfg, task_constraints(task)), **sb3_ppo_kwargs(cfg, seed))
        return (lambda n: model.learn(n, reset_num_timesteps=False)), (lambda: int(model.num_timesteps)), model
    from constrained_grpo.registry import make_agent

    agent = make_agent(algo, task, seed=seed, **config)
    if hasattr(agent, "trainer"):
        return agent.learn, (lambda: int(agent.trainer.env_steps)), agent
    return agent.learn, (lambda: int(agent.env_steps)), agent


def child_throughput(algo: str, task: str, steps: int, warmup: bool, seed: int, config: dict[str, Any]) -> dict[str, Any]:
    """One throughput measurement (run in a fresh process by :func:`run`)."""
    import torch

    torch.set_num_threads(1)
    learn, env_steps, obj = _learner(algo, task, seed, config)
    if warmup:
        learn(1)  # one rollout or iteration: first reset, first allocations
    n0 = env_steps()
    start, start_cpu = time.perf_counter(), time.process_time()
    learn(steps)
    wall, cpu = time.perf_counter() - start, time.process_time() - start_cpu
    n = env_steps() - n0
    num_envs = getattr(getattr(obj, "env", None), "num_envs", None)
    if num_envs is None and hasattr(obj, "adapter"):
        num_envs = obj.adapter.num_envs
    return {
        "env_steps": n,
        "wall_s": round(wall, 3),
        "cpu_s": round(cpu, 3),
        "env_steps_per_s": round(n / wall, 1),
        "env_steps_per_cpu_s": round(n / cpu, 1),
        "peak_rss_mb": round(_peak_rss_mb(), 1),
        "num_envs": num_envs,
    }


def child_criterion(
    algo: str, task: str, seed: int, cap: int, config: dict[str, Any], chunk: int = CRITERION_CHUNK
) -> dict[str, Any]:
    """One time-to-criterion run (run in a fresh process by :func:`run`): train in chunks of
    ``chunk`` env steps until the criterion holds or ``cap`` env steps are trained."""
    import torch

    from constrained_grpo.eval.scoring.metrics import first_time_criterion_met
    from constrained_grpo.tasks import make_env

    torch.set_num_threads(1)
    learn, env_steps, agent = _learner(algo, task, seed, config)
    limits = [float(c.limit) for c in agent.constraints]
    env = make_env(task)
    try:
        opt = env.unwrapped.optimum()
    finally:
        env.close()
    if [float(v) for v in opt.limits] != limits:
        raise ValueError(f"{algo} on {task}: limits {limits} differ from the optimum's {list(opt.limits)}")
    optimum = float(opt.constrained_return)
    records: list[dict[str, Any]] = []
    reached = None
    scanned = 0
    start = time.perf_counter()
    while env_steps() < cap and reached is None:
        learn(min(chunk, cap - env_steps()), records.append)
        # Only the windows that end in the new records are new.
        first = max(0, scanned - CRITERION_WINDOW + 1)
        reached = first_time_criterion_met(records[first:], limits, optimum, window=CRITERION_WINDOW)
        scanned = len(records)
    total = time.perf_counter() - start
    return {
        "reached": reached is not None,
        "criterion_env_steps": None if reached is None else int(reached["env_steps"]),
        "criterion_train_s": None if reached is None else round(float(reached["wall_s"]), 2),
        "criterion_iteration": None if reached is None else int(reached["iteration"]),
        "run_env_steps": env_steps(),
        "run_wall_s": round(total, 2),
        "iterations": len(records),
        "optimum_return": round(optimum, 6),
        "peak_rss_mb": round(_peak_rss_mb(), 1),
    }


def child_run(algo: str, task: str, steps: int, first: int, seed: int, config: dict[str, Any]) -> dict[str, Any]:
    """One whole run of ``steps`` env steps, timed over its first ``first`` and over the rest."""
    import torch

    torch.set_num_threads(1)
    learn, env_steps, _ = _learner(algo, task, seed, config)
    start, start_cpu = time.perf_counter(), time.process_time()
    learn(first)
    n1, cpu1 = env_steps(), time.process_time() - start_cpu
    learn(steps - n1)
    wall, cpu = time.perf_counter() - start, time.process_time() - start_cpu
    n = env_steps()
    return {
        "env_steps": n, "wall_s": round(wall, 3), "cpu_s": round(cpu, 3),
        "env_steps_per_s": round(n / wall, 1), "env_steps_per_cpu_s": round(n / cpu, 1),
        "first_env_steps": n1, "first_env_steps_per_cpu_s": round(n1 / cpu1, 1),
        "rest_env_steps_per_cpu_s": round((n - n1) / (cpu - cpu1), 1),
        "peak_rss_mb": round(_peak_rss_mb(), 1),
    }


def _in_child(kind: str, **kwargs: Any) -> dict[str, Any]:
    """Run ``child_<kind>(**kwargs)`` in a fresh interpreter; its result dict."""
    from constrained_grpo.eval.sweep import one_thread_env

    cmd = [sys.executable, "-m", "constrained_grpo.eval.bench.training", "--child", json.dumps({"kind": kind, **kwargs})]
    # One thread per pool, as a sweep worker runs (OpenBLAS would otherwise start one per core).
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env=one_thread_env(os.environ))
    if proc.returncode != 0:
        raise RuntimeError(f"benchmark child {kind} {kwargs} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _load() -> float:
    return round(os.getloadavg()[0], 2)


def _throughput_rows(task: str, algos: Sequence[str], rounds: int, steps_of: Callable[[str], int],
                     warmup: bool, config_of: Callable[[str], dict[str, Any]]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    speeds: dict[str, list[float]] = {a: [] for a in algos}
    for r in range(rounds):
        per_round: dict[str, dict[str, Any]] = {}
        for algo in algos:
            load = _load()
            res = _in_child("throughput", algo=algo, task=task, steps=steps_of(algo), warmup=warmup, seed=0,
                            config=config_of(algo))
            per_round[algo] = res
            speeds[algo].append(res["env_steps_per_cpu_s"])
            print(f"[training] {task} {algo:15s} round {r}: {res['env_steps_per_s']:>11,.0f} env steps/s "
                  f"({res['env_steps_per_cpu_s']:>11,.0f} per CPU s), peak RSS {res['peak_rss_mb']:.0f} MB, "
                  f"load {load}", flush=True)
            rows.append({"kind": "throughput", "task": task, "algo": algo, "round": r, **res, "load_1m": load})
        if SB3_PPO in per_round:
            ref = per_round[SB3_PPO]["env_steps_per_cpu_s"]
            for row in rows[-len(algos):]:
                row["vs_sb3_ppo"] = round(row["env_steps_per_cpu_s"] / ref, 4)
    for algo in algos:
        mine = [row for row in rows if row["algo"] == algo]
        summary: dict[str, Any] = {
            "kind": "throughput", "task": task, "algo": algo, "round": "median",
            "env_steps": sum(row["env_steps"] for row in mine),
            "env_steps_per_s": round(statistics.median(row["env_steps_per_s"] for row in mine), 1),
            "env_steps_per_cpu_s": round(statistics.median(speeds[algo]), 1),
            "peak_rss_mb": max(row["peak_rss_mb"] for row in mine),
            "num_envs": mine[0]["num_envs"],
            "load_1m": round(statistics.median(row["load_1m"] for row in mine), 2),
        }
        if SB3_PPO in algos:
            # Paired by round: a round's measurements are back to back, so the ratio cancels drift.
            summary["vs_sb3_ppo"] = round(statistics.median(row["vs_sb3_ppo"] for row in mine), 4)
        rows.append(summary)
    return rows


def run(
    out_dir: Path,
    rounds: int = 3,
    cap: int = 10_000_000,
    seeds: Sequence[int] = (0, 1, 2),
    highway: bool = True,
    criterion: bool = True,
    algos: Sequence[str] | None = None,
) -> list[Path]:
    """Measure, print progress, and write ``<out_dir>/training.csv``."""
    import torch

    from constrained_grpo.baselines.agent import BASELINES as SB3_BASED
    from constrained_grpo.eval.bench import code_version, write_rows
    from constrained_grpo.registry import agent_spec, list_agents

    code_version()  # the commit as the measurement starts (cached for every row)
    torch.set_num_threads(1)  # as in every child, so that the torch_threads column says what ran
    if rounds < 1 or cap < 1:
        raise ValueError(f"rounds={rounds} and cap={cap} must be >= 1")
    # Every registered learner (the fixed reference policies do not train).
    names = [SB3_PPO, *(algos if algos is not None else [a for a in list_agents() if not agent_spec(a).reference])]
    rows = _throughput_rows(
        GRID, names, rounds,
        steps_of=grid_window,
        warmup=True,
        config_of=lambda a: {},
    )
    if highway:
        rows += _throughput_rows(
            HIGHWAY, [a for a in ALGOS_HIGHWAY if a in names], 1,
            steps_of=lambda a: 1,  # one rollout (4096 steps) or one GRPO iteration
            warmup=False,
            # The standard preset's highway scope: the GRPO agents' quick preset (8 x 8 episodes).
            config_of=lambda a: {} if a == SB3_PPO or a in SB3_BASED else {"preset": "quick"},
        )
    if criterion:
        for algo in [a for a in ALGOS_CRITERION if a in names]:
            for seed in seeds:
                load = _load()
                res = _in_child("criterion", algo=algo, task=GRID, seed=int(seed), cap=int(cap), config={})
                print(f"[training] criterion {algo:10s} seed {seed}: reached={res['reached']} at "
                      f"{res['criterion_env_steps']} env steps, {res['criterion_train_s']} s "
                      f"(run {res['run_env_steps']} steps, {res['run_wall_s']} s), load {load}", flush=True)
                rows.append({"kind": "criterion", "task": GRID, "algo": algo, "seed": seed, "cap_env_steps": cap,
                             "window_iterations": CRITERION_WINDOW, **res, "load_1m": load})
    return [write_rows(Path(out_dir) / "training.csv", rows)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m constrained_grpo.eval.bench.training", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("results/bench"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cap", type=int, default=10_000_000, help="env-step cap of each criterion run")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--algos", nargs="+", default=None, help="subset of the registered algorithms")
    parser.add_argument("--no-highway", action="store_true")
    parser.add_argument("--no-criterion", action="store_true")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        spec = json.loads(args.child)
        kind = spec.pop("kind")
        result = {"throughput": child_throughput, "criterion": child_criterion, "run": child_run}[kind](**spec)
        print(json.dumps(result), flush=True)
        return 0
    run(args.out, rounds=args.rounds, cap=args.cap, seeds=args.seeds, highway=not args.no_highway,
        criterion=not args.no_criterion, algos=args.algos)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
