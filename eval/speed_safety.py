"""Safety-Gymnasium throughput: env-steps/s through the bridge vs in-process, for 1 and 8
envs, on ``Safety/PointGoal1-v0``. Writes ``safety.csv``.

*In-process* is the legacy env stepped by a plain loop in its own interpreter
(``.venv-safety``), no bridge; *bridge* is our process stepping ``make_env`` (1 env) or
``make_vec_env`` (8 envs, one worker, one round trip per vector step). Both step the same
actions from a seeded reset, after a warm-up, within one episode: a Safety-Gymnasium reset
costs seconds (MuJoCo decodes the skybox images on every rebuild), the same on both sides,
so it is reported apart (``reset_s``) rather than mixed into the stepping rate.

Target: the batched bridge reaches >= 0.85x the in-process rate. Skipped (no CSV) when the
second environment is not built (``make safety``).
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import numpy as np

from constrained_grpo.envs.safety.bridge import BridgeUnavailable, find_safety_python
from constrained_grpo.eval.speed import write_rows
from constrained_grpo.tasks import make_env, make_vec_env

TASK = "Safety/PointGoal1-v0"
LEGACY = "SafetyPointGoal1-v0"
#: (envs, timed vector steps): both sides stay inside the first 1000-step episode.
CASES = ((1, 800), (8, 300))
WARMUP = 20
TARGET = 0.85

_IN_PROCESS = r"""
import json, sys, time
import numpy as np
import safety_gymnasium
env_id, num_envs, steps, warmup = sys.argv[1], *map(int, sys.argv[2:])
envs = [safety_gymnasium.make(env_id) for _ in range(num_envs)]
start = time.perf_counter()
for i, env in enumerate(envs):
    env.reset(seed=i)
reset_s = (time.perf_counter() - start) / num_envs
actions = np.random.default_rng(0).uniform(-1.0, 1.0, size=(warmup + steps, num_envs, 2))

def run(rows):
    for a in rows:
        for i, env in enumerate(envs):
            obs, reward, cost, terminated, truncated, info = env.step(a[i])
            if terminated or truncated:
                env.reset()

run(actions[:warmup])
start = time.perf_counter()
run(actions[warmup:])
print(json.dumps({"rate": steps * num_envs / (time.perf_counter() - start), "reset_s": reset_s}))
"""


def _in_process(python: str, num_envs: int, steps: int) -> dict[str, float]:
    args = [python, "-c", _IN_PROCESS, LEGACY, str(num_envs), str(steps), str(WARMUP)]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=1800, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"in-process benchmark failed in {python}:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _bridge(num_envs: int, steps: int) -> dict[str, float]:
    actions = np.random.default_rng(0).uniform(-1.0, 1.0, size=(WARMUP + steps, num_envs, 2))
    if num_envs == 1:
        env = make_env(TASK)
        start = time.perf_counter()
        env.reset(seed=0)
        reset_s = time.perf_counter() - start

        def run(rows: np.ndarray) -> None:
            for a in rows:
                *_, terminated, truncated, _ = env.step(a[0])
                if terminated or truncated:
                    env.reset()
    else:
        env = make_vec_env(TASK, num_envs)
        start = time.perf_counter()
        env.reset(seed=0)
        reset_s = (time.perf_counter() - start) / num_envs

        def run(rows: np.ndarray) -> None:
            for a in rows:
                env.step(a)
    try:
        run(actions[:WARMUP])
        start = time.perf_counter()
        run(actions[WARMUP:])
        rate = steps * num_envs / (time.perf_counter() - start)
    finally:
        env.close()
    return {"rate": rate, "reset_s": reset_s}


def run(out_dir: Path) -> list[Path]:
    try:
        python = find_safety_python()
    except BridgeUnavailable as exc:
        print(f"  safety: skipped, {exc}")
        return []
    rows = []
    for num_envs, steps in CASES:
        base = _in_process(python, num_envs, steps)
        bridged = _bridge(num_envs, steps)
        for impl, res in (("in_process", base), ("bridge", bridged)):
            rows.append({
                "task": TASK, "impl": impl, "batch": num_envs, "steps": steps * num_envs,
                "env_steps_per_s": round(res["rate"], 1), "reset_s": round(res["reset_s"], 3),
                "ratio_vs_in_process": round(res["rate"] / base["rate"], 3),
                "target": TARGET if impl == "bridge" else None, "legacy_python": python,
            })
    for r in rows:
        print(f"  {r['task']} {r['impl']:10s} B={r['batch']:<2d} {r['env_steps_per_s']:>9,.1f} steps/s "
              f"({r['ratio_vs_in_process']:.3f}x in-process; reset {r['reset_s']:.2f} s)")
    return [write_rows(Path(out_dir) / "safety.csv", rows)]
