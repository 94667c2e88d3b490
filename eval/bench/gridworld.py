"""Gridworld throughput: env-steps/s of the batched grid at B = 1, 64, 1024 and of the
single env (raw and through ``gymnasium.make``'s wrappers), on ``Grid/HazardFuel-v0``
(8x8, one-hot observation) and its slippery variant. Writes ``gridworld.csv``.

Targets on one core: >= 10 M env-steps/s at B = 1024; >= 40 k steps/s for the single env.
Each figure is the best of ``REPEATS`` timed windows (median and worst beside it).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from constrained_grpo.eval.bench import write_rows
from constrained_grpo.tasks import make_env, make_vec_env

TASKS = ("Grid/HazardFuel-v0", "Grid/HazardFuelSlip-v0")
BATCHES = (1, 64, 1024)


REPEATS = 7


def _repeat(measure: Callable[[], tuple[float, int]]) -> dict[str, Any]:
    """Best, median and worst rate of ``REPEATS`` timed windows, and the total steps.

    The best window is the reported figure (``timeit``'s convention: slower windows are
    slowed by other processes, not by the code); on a shared machine a window
    can lose a third of its time to them, so the median is written beside it.
    """
    rates, total = [], 0
    for _ in range(REPEATS):
        rate, steps = measure()
        rates.append(rate)
        total += steps
    return {"env_steps_per_s": round(max(rates)), "median": round(statistics.median(rates)),
            "worst": round(min(rates)), "repeats": REPEATS, "steps": total}


def _time_batched(env_id: str, batch: int, min_seconds: float = 0.4) -> dict[str, Any]:
    vec = make_vec_env(env_id, batch)
    vec.reset(seed=0)
    actions = np.random.default_rng(0).integers(0, 4, size=(256, batch))
    for i in range(20):  # warm-up
        vec.step(actions[i])

    def window() -> tuple[float, int]:
        steps, start = 0, time.perf_counter()
        while time.perf_counter() - start < min_seconds:
            for i in range(256):
                vec.step(actions[i])
            steps += 256 * batch
        return steps / (time.perf_counter() - start), steps

    return _repeat(window)


def _time_single(env_id: str, raw: bool, min_seconds: float = 0.4) -> dict[str, Any]:
    env = make_env(env_id)
    if raw:
        env = env.unwrapped
    env.reset(seed=0)
    actions = np.random.default_rng(0).integers(0, 4, size=4096).tolist()

    def window() -> tuple[float, int]:
        steps, start = 0, time.perf_counter()
        while time.perf_counter() - start < min_seconds:
            for a in actions:
                _, _, term, trunc, _ = env.step(a)
                if term or trunc:
                    env.reset()
            steps += len(actions)
        return steps / (time.perf_counter() - start), steps

    return _repeat(window)


def run(out_dir: Path) -> list[Path]:
    rows = []
    for env_id in TASKS:
        for batch in BATCHES:
            target = 10e6 if batch == 1024 else None
            rows.append({"task": env_id, "impl": "batched", "batch": batch,
                         **_time_batched(env_id, batch), "target": target})
        for raw in (True, False):
            rows.append({"task": env_id, "impl": "single_raw" if raw else "single_make", "batch": 1,
                         **_time_single(env_id, raw), "target": 40e3})
    for r in rows:
        print(f"  {r['task']:24s} {r['impl']:12s} B={r['batch']:<5d} {r['env_steps_per_s']:>12,d} steps/s"
              f" (best of {r['repeats']}; median {r['median']:,d}, worst {r['worst']:,d})")
    return [write_rows(Path(out_dir) / "gridworld.csv", rows)]
