"""Gridworld throughput: env-steps/s of the batched grid at B = 1, 64, 1024 and of the
single env (raw and through ``gymnasium.make``'s wrappers), on ``Grid/HazardFuel-v0``
(8x8, one-hot observation) and its slippery variant. Writes ``gridworld.csv``.

Targets on one core: >= 10 M env-steps/s at B = 1024; >= 40 k steps/s for the single env.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from constrained_grpo.eval.speed import write_rows
from constrained_grpo.tasks import make_env, make_vec_env

TASKS = ("Grid/HazardFuel-v0", "Grid/HazardFuelSlip-v0")
BATCHES = (1, 64, 1024)


def _time_batched(env_id: str, batch: int, min_seconds: float = 1.0) -> tuple[float, int]:
    vec = make_vec_env(env_id, batch)
    vec.reset(seed=0)
    actions = np.random.default_rng(0).integers(0, 4, size=(256, batch))
    for i in range(20):  # warm-up
        vec.step(actions[i])
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < min_seconds:
        for i in range(256):
            vec.step(actions[i])
        steps += 256 * batch
    return steps / (time.perf_counter() - start), steps


def _time_single(env_id: str, raw: bool, min_seconds: float = 1.0) -> tuple[float, int]:
    env = make_env(env_id)
    if raw:
        env = env.unwrapped
    env.reset(seed=0)
    actions = np.random.default_rng(0).integers(0, 4, size=4096).tolist()
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < min_seconds:
        for a in actions:
            _, _, term, trunc, _ = env.step(a)
            if term or trunc:
                env.reset()
        steps += len(actions)
    return steps / (time.perf_counter() - start), steps


def run(out_dir: Path) -> list[Path]:
    rows = []
    for env_id in TASKS:
        for batch in BATCHES:
            rate, steps = _time_batched(env_id, batch)
            target = 10e6 if batch == 1024 else None
            rows.append({"task": env_id, "impl": "batched", "batch": batch, "steps": steps,
                         "env_steps_per_s": round(rate), "target": target})
        for raw in (True, False):
            rate, steps = _time_single(env_id, raw)
            rows.append({"task": env_id, "impl": "single_raw" if raw else "single_make", "batch": 1,
                         "steps": steps, "env_steps_per_s": round(rate), "target": 40e3})
    for r in rows:
        print(f"  {r['task']:24s} {r['impl']:12s} B={r['batch']:<5d} {r['env_steps_per_s']:>12,d} steps/s")
    return [write_rows(Path(out_dir) / "gridworld.csv", rows)]
