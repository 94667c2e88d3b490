"""Final-evaluation speed: the harness's evaluation of trained agents beside raw batched env
steps, in one run. Writes ``evaluation.csv``.

Rows, per task: ``raw`` plays the episodes on the batched twin with a policy that costs
nothing (uniformly random actions from the episodes' draws), the floor any evaluation of
that many episodes pays; ``<algo> batched`` is the harness's evaluation of a trained agent
on the twin (``evaluate_agent``'s path), ``<algo> serial`` the same agent one episode after
another on one env (the serial path; on highway, highway-env itself), on fewer episodes.

Targets: 10,000 gridworld episodes of any trained agent in at most 10x the time of 10,000
raw episodes (``vs_raw``, the ratio of times for the same episode count); 1,000 highway
episodes of a trained agent in under a minute of one core (``wall_s``). Agents are trained
briefly (``TRAIN_STEPS``): enough to act like a policy, not a tuned one.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from constrained_grpo.eval.evaluation import EVAL_SEED, play_batched, play_serial
from constrained_grpo.eval.bench import write_rows

#: (task, episodes batched, episodes serial, algorithms and their training steps).
CASES: tuple[tuple[str, int, int, dict[str, int]], ...] = (
    ("Grid/HazardFuel-v0", 10_000, 500, {"cgrpo": 200_000, "ppo-lag": 20_000, "ref-optimal": 1}),
    ("Highway/Highway-v1", 1_000, 20, {"cgrpo": 5_000, "ppo-lag": 5_000}),
)


def _random_act(n: int):
    def act(obs: np.ndarray, deterministic: bool, u: np.ndarray) -> np.ndarray:
        return np.minimum((u[:, 0] * n).astype(np.int64), n - 1)

    return act


def _timed(fn) -> tuple[Any, float]:
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def _row(task: str, what: str, path: str, episodes: int, res: Any, wall: float, raw_per_episode: float | None) -> dict[str, Any]:
    steps = int(res.lengths.sum())
    return {
        "task": task, "policy": what, "path": path, "episodes": episodes, "env_steps": steps,
        "wall_s": round(wall, 3), "us_per_step": round(1e6 * wall / steps, 2),
        "ms_per_1000_episodes": round(1e6 * wall / episodes, 1),
        "vs_raw": None if raw_per_episode is None else round((wall / episodes) / raw_per_episode, 2),
    }


def run(out_dir: Path) -> list[Path]:
    import torch

    from constrained_grpo.constraints import get_constraints
    from constrained_grpo.registry import make_agent
    from constrained_grpo.tasks import make_env, make_vec_env

    torch.set_num_threads(1)  # one core, as a sweep worker runs
    rows: list[dict[str, Any]] = []
    for task, n_batched, n_serial, algos in CASES:
        env = make_env(task)
        k, n_actions = len(get_constraints(env)), int(env.action_space.n)
        seeds = list(range(EVAL_SEED, EVAL_SEED + n_batched))
        make = lambda b, task=task: make_vec_env(task, b)  # noqa: E731
        res, wall = _timed(lambda: play_batched(make, _random_act(n_actions), False, seeds, k))
        raw = wall / n_batched
        rows.append(_row(task, "raw (random actions)", "batched", n_batched, res, wall, 1.0 * raw))
        for algo, steps in algos.items():
            agent = make_agent(algo, task, seed=0)
            agent.learn(steps)
            res, wall = _timed(lambda: play_batched(make, agent.act_batch, False, seeds, k))
            rows.append(_row(task, f"{algo} sampled", "batched", n_batched, res, wall, raw))
            res, wall = _timed(lambda: play_serial(env, agent.act_batch, False, seeds[:n_serial], k))
            rows.append(_row(task, f"{algo} sampled", "serial", n_serial, res, wall, raw))
        env.close()
    return [write_rows(Path(out_dir) / "evaluation.csv", rows)]
