"""Highway evaluation beside training, per run (``make bench``): ``<out>/highway_eval.csv``.

A standard highway run trains the standard preset's budget for its task, then evaluates its
final policy on the task's plan (:func:`planned_episodes`, sampled and deterministic:
``Highway/Highway-v2``, the default, 3M env steps and 20,000 episodes per policy;
``Highway/Highway-v1`` 300k and 10,175). For each learner (``cgrpo``, the GRPO agents' config of the standard
preset; ``ppo-lag``, the SB3-based learners) this trains one run (seed 0) and times it,
then plays the plan's episodes of its final policy twice on the batched twin, the way the
harness does (:func:`~constrained_grpo.eval.evaluation.play_batched`): in waves (``refill=False``,
a wave of 2,048 rows runs until its longest episode ends) and with continuous batching
(a finished row starts the plan's next episode). Columns: ``train_s``, ``eval_s_waves``,
``eval_s_refilled`` (wall-clock, this process, torch on one thread), ``row_use_*`` (the
plan's env steps over the row-steps simulated), ``eval_share_*`` = ``eval_s / (train_s +
eval_s)``, with the target ``eval_share_refilled <= 0.25``, and ``same_episodes`` (the two
evaluations equal episode by episode). Run alone with
``python -m constrained_grpo.eval.bench.highway_eval [--task T] [--steps N] [--episodes N]``.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["ALGOS", "TARGET_SHARE", "TASK", "measure", "planned_episodes", "run"]

TASK = "Highway/Highway-v2"
ALGOS: tuple[str, ...] = ("cgrpo", "ppo-lag")
#: The evaluation's share of a run's time the issue asks for.
TARGET_SHARE = 0.25


def planned_episodes(task: str) -> int:
    """Episodes per policy the harness plans for ``task``'s indicator limits
    (:func:`~constrained_grpo.eval.scoring.verdict.plan_episodes` at its family's power and cap,
    as ``evaluate_agent`` does before any pilot): ``Highway-v1``'s collision limit 0.1 needs
    10,175; ``Highway-v2``'s 0.05 needs 21,551, over the cap of 20,000."""
    from constrained_grpo.eval.scoring.verdict import plan_episodes
    from constrained_grpo.tasks import task_constraints, task_info

    plan = task_info(task).family.eval
    return plan_episodes([c for c in task_constraints(task) if c.indicator], power=plan.power, cap=plan.cap)


class _Counting:
    """``make_vec(b)`` for the task, counting the row-steps simulated."""

    def __init__(self, task: str) -> None:
        self.task, self.row_steps = task, 0

    def __call__(self, b: int) -> Any:
        from constrained_grpo.tasks import make_vec_env

        vec = make_vec_env(self.task, b)
        step = vec.step

        def counted(actions: Any) -> Any:
            self.row_steps += b
            return step(actions)

        vec.step = counted
        return vec


def measure(algo: str, task: str = TASK, steps: int | None = None, episodes: int | None = None,
            seed: int = 0) -> dict[str, Any]:
    """Train ``algo`` for ``steps`` (None: the standard preset's budget for ``task``) and time its
    evaluation of ``episodes`` per policy (None: the task's plan) both ways."""
    import torch

    from constrained_grpo.eval.evaluation import EVAL_SEED, play_batched
    from constrained_grpo.eval.presets import get_preset
    from constrained_grpo.registry import agent_spec, make_agent
    from constrained_grpo.tasks import task_constraints, task_info

    if not task_info(task).batched_eval:
        raise ValueError(f"{task!r} has no batched twin to play the evaluation on; use a straight-highway task, "
                         f"e.g. {TASK!r}")
    torch.set_num_threads(1)
    standard = get_preset("standard")
    steps = int(standard.scope(task).steps or standard.steps) if steps is None else int(steps)
    episodes = planned_episodes(task) if episodes is None else int(episodes)
    config = {"preset": "quick"} if agent_spec(algo).acts_on_text else {}  # the standard preset's highway scope
    agent = make_agent(algo, task, seed=seed, **config)
    start = time.perf_counter()
    agent.learn(steps)
    train_s = time.perf_counter() - start
    k = len(task_constraints(task))
    seeds = list(range(EVAL_SEED, EVAL_SEED + int(episodes)))
    row: dict[str, Any] = {"task": task, "algo": algo, "seed": seed, "train_steps": steps, "train_s": round(train_s, 2),
                           "episodes": int(episodes), "policies": 2}
    results: dict[str, list[Any]] = {}
    for mode, refill in (("waves", False), ("refilled", True)):
        counter = _Counting(task)
        start = time.perf_counter()
        results[mode] = [play_batched(counter, agent.act_batch, det, seeds, k, refill=refill) for det in (False, True)]
        eval_s = time.perf_counter() - start
        played = sum(int(r.lengths.sum()) for r in results[mode])
        row[f"eval_s_{mode}"] = round(eval_s, 2)
        row[f"row_use_{mode}"] = round(played / counter.row_steps, 4)
        row[f"eval_share_{mode}"] = round(eval_s / (train_s + eval_s), 4)
    row["same_episodes"] = all(
        np.array_equal(a.returns, b.returns) and np.array_equal(a.costs, b.costs) and np.array_equal(a.lengths, b.lengths)
        for a, b in zip(results["waves"], results["refilled"]))
    row["crash_rate"] = round(float(np.mean([r.costs[:, 0].mean() for r in results["refilled"]])), 4)
    row["target_eval_share"] = TARGET_SHARE
    return row


def run(out_dir: Path, algos: Sequence[str] = ALGOS, steps: int | None = None, episodes: int | None = None,
        task: str = TASK, name: str = "highway_eval.csv") -> list[Path]:
    """Measure every algorithm of ``algos`` on ``task``, print each row, write ``<out_dir>/<name>``."""
    try:
        import highway_env  # noqa: F401
    except ImportError:
        print('  [highway_eval] skipped: highway-env is not installed (pip install -e ".[highway]")')
        return []
    from constrained_grpo.eval.bench import write_rows

    rows = []
    for algo in algos:
        row = measure(algo, task, steps=steps, episodes=episodes)
        row["load_1m"] = round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None
        print(f"  [highway_eval] {algo:8s} train {row['train_s']:8.1f} s  eval waves {row['eval_s_waves']:7.1f} s "
              f"(share {row['eval_share_waves']:.2f}, rows used {row['row_use_waves']:.2f})  refilled "
              f"{row['eval_s_refilled']:7.1f} s (share {row['eval_share_refilled']:.2f}, rows used "
              f"{row['row_use_refilled']:.2f})  same episodes {row['same_episodes']}", flush=True)
        rows.append(row)
    return [write_rows(Path(out_dir) / name, rows)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m constrained_grpo.eval.bench.highway_eval", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("results/bench"))
    parser.add_argument("--algos", nargs="+", default=list(ALGOS))
    parser.add_argument("--steps", type=int, default=None, help="training env steps (default: the standard budget)")
    parser.add_argument("--episodes", type=int, default=None, help="evaluation episodes per policy (default: the task's plan)")
    parser.add_argument("--task", default=TASK, help=f"a straight-highway task (default {TASK})")
    parser.add_argument("--name", default="highway_eval.csv", help="the CSV's file name under --out")
    args = parser.parse_args(argv)
    run(args.out, args.algos, args.steps, args.episodes, args.task, args.name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
