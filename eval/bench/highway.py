"""Highway throughput: env-steps/s of each ``Highway/...`` task next to raw highway-env,
measured in the same run on the same seeded action sequence. Writes ``highway.csv``.

For each task three single-process implementations are timed, each over the same
actions from ``reset(seed=0)`` (later episodes reset without a seed):

* ``raw``: highway-env's registered env (``highway-fast-v0``, ``merge-v1``,
  ``roundabout-v1``, ``intersection-v2``; for continuous tasks with
  ``ContinuousAction``), where highway-env can run it (its merge and roundabout fail
  on continuous actions);
* ``reference``: the task with ``fast=False`` (highway-env's pandas observation and
  neighbour search, plus the task's cost bookkeeping);
* ``ours``: the task as registered (numpy observation, binary-search neighbours,
  vectorised closest lane).

``ratio_vs_raw`` / ``ratio_vs_reference`` are ours' steps/s over theirs; the goal for
``Highway/Highway-v0`` is >= 2x raw ``highway-fast-v0``. ``same_trajectory`` says
whether the observations of the whole run equal raw highway-env's (NaN read as 0).
Each implementation is timed ``REPEATS`` times, interleaved, and the best rate kept,
which damps the noise of a shared machine. Then ``HighwayVectorEnv`` (B = 8 across
all cores) on ``Highway/Highway-v0``, and the batched simulator
(:class:`~constrained_grpo.envs.highway.batched.HighwayBatchedVectorEnv`, what
``make_vec_env`` returns for the straight-highway tasks) on one core at
B = 1, 64 and 256 (``impl`` ``batched_B<B>``); its ``ratio_vs_raw`` is over the same
run's raw ``highway-fast-v0``, with the goal >= 50x at B = 256.
"""

from __future__ import annotations

import hashlib
import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from constrained_grpo.eval.bench import write_rows

#: (task id, steps per timed run).
TASKS: tuple[tuple[str, int], ...] = (
    ("Highway/Highway-v0", 150),
    ("Highway/HighwayContinuous-v0", 100),
    ("Highway/Merge-v0", 120),
    ("Highway/MergeContinuous-v0", 100),
    ("Highway/Roundabout-v0", 80),
    ("Highway/RoundaboutContinuous-v0", 80),
    ("Highway/Intersection-v0", 50),
    ("Highway/IntersectionContinuous-v0", 50),
)
REPEATS = 2
VECTOR_ENVS = 8
VECTOR_STEPS = 40
#: (batch size B, batched steps per timed run) of the batched simulator.
BATCHED: tuple[tuple[int, int], ...] = ((1, 150), (64, 40), (256, 20))
BATCHED_TASKS: tuple[str, ...] = ("Highway/Highway-v0", "Highway/HighwayContinuous-v0")
BATCHED_TARGET = 50.0


@contextmanager
def _pristine_idm():
    """highway-env's IntersectionEnv writes IDM constants on ``IDMVehicle`` itself; undo
    it after a raw intersection run, so later raw runs see highway-env's defaults."""
    from highway_env.vehicle.behavior import IDMVehicle

    names = ("DISTANCE_WANTED", "COMFORT_ACC_MAX", "COMFORT_ACC_MIN")
    saved = {k: IDMVehicle.__dict__[k] for k in names}
    try:
        yield
    finally:
        for k, v in saved.items():
            setattr(IDMVehicle, k, v)


def _make(task: str, impl: str) -> Any | None:
    import gymnasium as gym

    from constrained_grpo.envs import task_info
    from constrained_grpo.envs.highway.options import SCENARIOS
    from constrained_grpo.tasks import make_env

    kwargs = task_info(task).kwargs
    if impl == "raw":
        scenario, mode = kwargs["scenario"], kwargs["action_mode"]
        if mode == "continuous" and scenario in ("merge", "roundabout"):
            return None  # highway-env's reward compares the action array with [0, 2] and fails
        config = {"action": {"type": "ContinuousAction"}} if mode == "continuous" else None
        return gym.make(SCENARIOS[scenario].base_env, config=config).unwrapped
    return make_env(task, fast=(impl == "ours")).unwrapped


def _actions(env: Any, steps: int) -> list[Any]:
    rng = np.random.default_rng(0)
    if hasattr(env.action_space, "n"):
        return rng.integers(0, env.action_space.n, size=steps).tolist()
    return list(rng.uniform(-0.5, 0.5, size=(steps, 2)).astype(np.float32))


def _time(env: Any, actions: list[Any]) -> tuple[float, str]:
    """Steps/s over ``actions`` (resets included) and a digest of the observations."""
    digest = hashlib.sha256()
    start = time.perf_counter()
    obs, _ = env.reset(seed=0)
    digest.update(np.nan_to_num(np.asarray(obs, dtype=np.float32).reshape(-1)).tobytes())
    for a in actions:
        obs, _, terminated, truncated, _ = env.step(a)
        digest.update(np.nan_to_num(np.asarray(obs, dtype=np.float32).reshape(-1)).tobytes())
        if terminated or truncated:
            obs, _ = env.reset()
    return len(actions) / (time.perf_counter() - start), digest.hexdigest()


def _time_vector(task: str, num_envs: int, steps: int) -> tuple[float, int]:
    """``HighwayVectorEnv`` (worker processes) on all cores."""
    from constrained_grpo.envs import task_info

    from constrained_grpo.envs.highway.vector import HighwayVectorEnv

    workers = os.cpu_count() or 1
    vec = HighwayVectorEnv(num_envs, num_workers=workers, **task_info(task).kwargs)
    try:
        vec.reset(seed=0)
        actions = np.random.default_rng(0).integers(0, 5, size=(steps, num_envs))
        start = time.perf_counter()
        for a in actions:
            vec.step(a)
        return steps * num_envs / (time.perf_counter() - start), workers
    finally:
        vec.close()


def _time_batched(task: str, num_envs: int, steps: int) -> float:
    """Env-steps/s of the batched simulator, best of ``REPEATS`` (autoresets included)."""
    from constrained_grpo.envs import task_info
    from constrained_grpo.envs.highway.batched import HighwayBatchedVectorEnv

    vec = HighwayBatchedVectorEnv(num_envs=num_envs, **task_info(task).kwargs)
    rng = np.random.default_rng(0)
    if vec.sim.discrete:
        actions = rng.integers(0, 5, size=(steps, num_envs))
    else:
        actions = rng.uniform(-0.5, 0.5, size=(steps, num_envs, 2)).astype(np.float32)
    best = 0.0
    pin = hasattr(os, "sched_setaffinity")
    if pin:  # one core, as the goal says (numpy could otherwise thread)
        saved = os.sched_getaffinity(0)
        os.sched_setaffinity(0, {min(saved)})
    try:
        for _ in range(REPEATS):
            vec.reset(seed=0)
            start = time.perf_counter()
            for a in actions:
                vec.step(a)
            best = max(best, steps * num_envs / (time.perf_counter() - start))
    finally:
        if pin:
            os.sched_setaffinity(0, saved)
        vec.close()
    return best


def run(out_dir: Path) -> list[Path]:
    try:
        import highway_env  # noqa: F401
    except ImportError:
        print('  [highway] skipped: highway-env is not installed (pip install -e ".[highway]")')
        return []
    from constrained_grpo.envs import task_info

    rows: list[dict[str, Any]] = []
    for task, steps in TASKS:
        base = task_info(task).kwargs["scenario"]
        with _pristine_idm():
            envs = {impl: _make(task, impl) for impl in ("raw", "reference", "ours")}
            actions = _actions(envs["ours"], steps)
            best: dict[str, float] = {}
            digests: dict[str, str] = {}
            for _ in range(REPEATS):
                for impl, env in envs.items():
                    if env is None:
                        continue
                    rate, digests[impl] = _time(env, actions)
                    best[impl] = max(best.get(impl, 0.0), rate)
            for env in envs.values():
                if env is not None:
                    env.close()
        from constrained_grpo.envs.highway.options import SCENARIOS

        for impl in ("raw", "reference", "ours"):
            if impl not in best:
                continue
            rows.append({
                "task": task,
                "base_env": SCENARIOS[base].base_env,
                "impl": impl,
                "workers": 1,
                "steps": steps,
                "env_steps_per_s": round(best[impl], 2),
                "ratio_vs_raw": round(best[impl] / best["raw"], 3) if "raw" in best else None,
                "ratio_vs_reference": round(best[impl] / best["reference"], 3),
                "same_trajectory": digests[impl] == digests["raw"] if "raw" in digests else None,
                "target_ratio_vs_raw": 2.0 if task == "Highway/Highway-v0" else None,
            })
    rate, workers = _time_vector("Highway/Highway-v0", VECTOR_ENVS, VECTOR_STEPS)
    single = next(r for r in rows if r["task"] == "Highway/Highway-v0" and r["impl"] == "raw")["env_steps_per_s"]
    rows.append({
        "task": "Highway/Highway-v0", "base_env": "highway-fast-v0", "impl": f"vector_B{VECTOR_ENVS}",
        "workers": workers, "steps": VECTOR_STEPS * VECTOR_ENVS, "env_steps_per_s": round(rate, 2),
        "ratio_vs_raw": round(rate / single, 3), "ratio_vs_reference": None, "same_trajectory": None,
        "target_ratio_vs_raw": None,
    })
    for task in BATCHED_TASKS:
        raw = next(r for r in rows if r["task"] == task and r["impl"] == "raw")["env_steps_per_s"]
        for num_envs, steps in BATCHED:
            rate = _time_batched(task, num_envs, steps)
            rows.append({
                "task": task, "base_env": "highway-fast-v0", "impl": f"batched_B{num_envs}", "workers": 1,
                "steps": steps * num_envs, "env_steps_per_s": round(rate, 2), "ratio_vs_raw": round(rate / raw, 3),
                "ratio_vs_reference": None, "same_trajectory": None,
                "target_ratio_vs_raw": BATCHED_TARGET if num_envs == 256 else None,
            })
    for r in rows:
        ratio = "" if r["ratio_vs_raw"] is None else f"  x{r['ratio_vs_raw']:.2f} vs raw"
        print(f"  {r['task']:34s} {r['impl']:12s} {r['env_steps_per_s']:>8.1f} steps/s{ratio}")
    return [write_rows(Path(out_dir) / "highway.csv", rows)]
