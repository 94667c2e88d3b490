"""The text acceptance experiment: warm start once per seed, then GRPO variants from it.

    # 1. supervised warm start, one checkpoint per seed (about a minute each on one core)
    python -m constrained_grpo.agents.text_experiment warmstart --env Math/ChainSum-v0 \\
        --seeds 0 1 2 --out results/runs/math
    # 2. cgrpo and grpo-screw from those checkpoints, same budget, side by side
    python -m constrained_grpo.agents.text_experiment run --env Math/ChainSum-v0 \\
        --algos cgrpo grpo-screw --seeds 0 1 2 --steps 12800 --out results/runs/math

Layout (Contract 3): ``<out>/warm/seed<k>/`` holds the warm-started checkpoint
(``model.safetensors``, ``config.json``) and ``eval.json``; ``<out>/<algo>/seed<k>/`` holds
``config.json``, ``progress.csv`` (rewritten atomically every iteration), ``eval.csv`` (one
row per evaluation problem) and the agent under ``model/``; ``<out>/summary.csv`` one row
per run.

The criterion (issue 7): over the last ``tail`` (20%) of iterations the mean violation
rate of each constraint is at most ``limit * (1 + tol)`` (tol 0.1, as the control
acceptance), *and* on ``eval_episodes`` held-out problems (reset seeds from
``eval_seed``, sampled at the training temperature) the accuracy is at least the
warm-started model's accuracy on the same problems minus ``acc_tol`` (0.02: about one
standard error at 512 problems). The same evaluation of the warm start is in
``eval.json``; strict ``>=`` is reported too (``acc_ge_warm``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from constrained_grpo.agents.experiment import flatten_record, tail_summary
from constrained_grpo.agents.text_adapter import TextRolloutAdapter
from constrained_grpo.agents.text_agent import TEXT_PRESETS, build_text_policy, make_text_grpo_agent
from constrained_grpo.files import atomic_write_csv

__all__ = ["evaluate_policy", "main", "run_one", "warm_start"]


def evaluate_policy(
    policy: Any, env_id: str, n: int, eval_seed: int, max_new_tokens: int, deterministic: bool, env_kwargs: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Accuracy and violation rates of ``policy`` on ``n`` problems from ``eval_seed``."""
    adapter = TextRolloutAdapter(env_id, env_kwargs, seed=eval_seed, max_new_tokens=max_new_tokens)
    result, summary = adapter.evaluate(policy, n, eval_seed, deterministic, torch.Generator().manual_seed(eval_seed))
    out = {
        "accuracy": float(result.returns.mean()),
        **{f"cost_{name}": float(result.costs[:, k].mean()) for k, name in enumerate(adapter.constraint_names)},
        "mean_tokens": float(result.lengths.mean()),
        "unfinished_frac": summary["unfinished_frac"],
        "n": n,
    }
    adapter.close()
    return out


def warm_start(env_id: str, seed: int, out_dir: Path, preset: str = "standard", lm: Mapping[str, Any] | None = None,
               eval_episodes: int = 512, eval_seed: int = 1_000_000, verbose: bool = True) -> dict[str, Any]:
    """Warm-start a fresh small model on ``env_id``'s demonstrations; save and evaluate it."""
    torch.set_num_threads(1)
    cfg = TEXT_PRESETS[preset].lm.updated(dict(lm or {}))
    from constrained_grpo.tasks import make_env

    env = make_env(env_id)
    log = (lambda r: print(f"[warm s{seed}] {r}", flush=True)) if verbose else None
    policy, sft = build_text_policy(cfg, env, seed, log=log)
    env.close()
    out_dir.mkdir(parents=True, exist_ok=True)
    policy.save_pretrained(out_dir)
    row: dict[str, Any] = {"env_id": env_id, "seed": seed, "sft_steps": cfg.sft_steps, "sft_final_loss": sft.final_loss if sft else None,
                           "sft_wall_s": sft.wall_s if sft else None}
    for mode, det in (("sampled", False), ("greedy", True)):
        ev = evaluate_policy(policy, env_id, eval_episodes, eval_seed, cfg.max_new_tokens, det)
        row.update({f"{mode}_{k}": v for k, v in ev.items()})
    (out_dir / "eval.json").write_text(json.dumps(row, indent=2))
    if verbose:
        print(json.dumps(row), flush=True)
    return row


def run_one(
    algo: str, env_id: str, seed: int, total_env_steps: int, out_dir: Path, warm_dir: Path,
    eval_episodes: int = 512, tail: float = 0.2, tol: float = 0.1, acc_tol: float = 0.02, verbose: bool = True, **config: Any,
) -> dict[str, Any]:
    """Train ``algo`` from the warm checkpoint in ``warm_dir``; evaluate; return the summary row."""
    lm = dict(config.pop("lm", {}) or {})
    lm["init_from"] = str(warm_dir)
    agent = make_text_grpo_agent(env_id, seed=seed, algo=algo, lm=lm, **config)
    names = agent.adapter.constraint_names
    limits = agent.adapter.limits.tolist()
    out_dir.mkdir(parents=True, exist_ok=True)
    meta = {"algo": algo, "env_id": env_id, "seed": seed, "total_env_steps": total_env_steps, "warm_start": str(warm_dir),
            "config": agent.config.to_dict(), "lm": agent.lm.to_dict()}
    (out_dir / "config.json").write_text(json.dumps(meta, indent=2, sort_keys=True))
    records: list[dict[str, Any]] = []
    rows: list[dict[str, Any]] = []

    def log(record: dict[str, Any]) -> None:
        records.append(record)
        rows.append(flatten_record(record, names))
        atomic_write_csv(out_dir / "progress.csv", rows, fsync=False)
        if verbose and record["iteration"] % 20 == 0:
            print(f"[{algo} s{seed}] it {record['iteration']} acc {record['accuracy']:.3f} "
                  f"C {np.round(record['ep_cost'], 3).tolist()} lambda {np.round(record['multipliers'], 2).tolist()} "
                  f"len {record['ep_length']:.1f} ({record['iteration_s']:.2f} s/it)", flush=True)

    start = time.perf_counter()
    agent.learn(total_env_steps, log)
    train_s = time.perf_counter() - start
    evaluation = agent.evaluate(eval_episodes, deterministic=False)
    atomic_write_csv(out_dir / "eval.csv", [
        {"episode": i, "return": float(evaluation.returns[i]), "length": int(evaluation.lengths[i]),
         **{f"cost_{n}": float(evaluation.costs[i, k]) for k, n in enumerate(names)}}
        for i in range(len(evaluation.returns))
    ])
    agent.save(out_dir / "model")
    warm = json.loads((warm_dir / "eval.json").read_text())
    ts = tail_summary(records, limits, None, tail=tail, tol=tol)
    acc = float(evaluation.returns.mean())
    eval_costs = {n: float(evaluation.costs[:, k].mean()) for k, n in enumerate(names)}
    row: dict[str, Any] = {
        "algo": algo, "env_id": env_id, "seed": seed, "env_steps": records[-1]["env_steps"], "iterations": len(records),
        "train_s": round(train_s, 1),
        "warm_accuracy": warm["sampled_accuracy"],
        **{f"warm_cost_{n}": warm[f"sampled_cost_{n}"] for n in names},
        "tail_accuracy": float(np.mean([r["accuracy"] for r in records[-max(1, int(round(len(records) * tail))):]])),
        **{f"tail_cost_{n}": c for n, c in zip(names, ts.ep_cost)},
        **{f"tail_lambda_{n}": m for n, m in zip(names, ts.multipliers)},
        "eval_accuracy": acc,
        **{f"eval_cost_{n}": c for n, c in eval_costs.items()},
        "within_limits": ts.within_limits,
        "eval_within_limits": all(eval_costs[n] <= lim * (1 + tol) for n, lim in zip(names, limits)),
        "acc_ge_warm": acc >= warm["sampled_accuracy"],
        "acc_ok": acc >= warm["sampled_accuracy"] - acc_tol,
    }
    row["passed"] = bool(row["within_limits"] and row["acc_ok"])
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m constrained_grpo.agents.text_experiment", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["warmstart", "run"])
    parser.add_argument("--env", default="Math/ChainSum-v0")
    parser.add_argument("--algos", nargs="+", default=["cgrpo", "grpo-screw"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=12800, help="completions per GRPO run")
    parser.add_argument("--eval-episodes", type=int, default=512)
    parser.add_argument("--out", type=Path, default=Path("results/runs/math"))
    parser.add_argument("--lm", type=json.loads, default={}, help="JSON dict of LMConfig options (warm start)")
    parser.add_argument("--config", type=json.loads, default={}, help="JSON dict of GRPO options")
    parser.add_argument("--warm-from", type=Path, default=None,
                        help="one warm checkpoint for every seed (default: <out>/warm/seed<k>)")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    if args.command == "warmstart":
        rows = [warm_start(args.env, s, args.out / "warm" / f"seed{s}", lm=args.lm, eval_episodes=args.eval_episodes,
                           verbose=not args.quiet) for s in args.seeds]
        atomic_write_csv(args.out / "warm" / "summary.csv", rows)
        return 0
    rows: list[dict[str, Any]] = []
    for algo in args.algos:
        for seed in args.seeds:
            warm = args.warm_from if args.warm_from is not None else args.out / "warm" / f"seed{seed}"
            row = run_one(algo, args.env, seed, args.steps, args.out / algo / f"seed{seed}", warm,
                          eval_episodes=args.eval_episodes, verbose=not args.quiet, **args.config)
            rows.append(row)
            print(json.dumps({k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items()}), flush=True)
            atomic_write_csv(args.out / "summary.csv", rows)
    for algo in args.algos:
        mine = [r for r in rows if r["algo"] == algo]
        print(f"{algo}: passed {sum(r['passed'] for r in mine)}/{len(mine)}; eval accuracy "
              f"{np.mean([r['eval_accuracy'] for r in mine]):.3f} (warm {np.mean([r['warm_accuracy'] for r in mine]):.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
