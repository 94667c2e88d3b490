"""Training throughput over whole standard-budget runs (``make bench``): ``<out>/training_run.csv``.

The throughput rows of :mod:`~constrained_grpo.eval.bench.training` time a fresh agent's
first window (40,960 env steps for the SB3-based learners, 300k for the GRPO agents). A run
is longer: once the policy is good its episodes are shorter, and the GRPO agents' costs per
episode weigh more. Here ``cgrpo``, ``grpo-screw``, ``ppo-lag`` and plain SB3 ``PPO``
(``sb3-ppo``) each train one whole run of ``Grid/HazardFuel-v0`` at the standard preset's
budget (3M env steps, seed 0), in a fresh process, back to back, timed over that first
window, over the rest and over the whole run (env steps per CPU second of the training
process, torch on one thread). Run alone with ``python -m constrained_grpo.eval.bench.training_run``.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from constrained_grpo.eval.bench.training import ALGOS_RUN, GRID, _in_child, _load, grid_window

__all__ = ["run"]


def run(out_dir: Path, algos: Sequence[str] = ALGOS_RUN) -> list[Path]:
    """Time each whole run, print it, and write ``<out_dir>/training_run.csv``."""
    from constrained_grpo.eval.bench import code_version, write_rows
    from constrained_grpo.eval.presets import get_preset

    code_version()
    budget = get_preset("standard").budgets()[GRID]
    rows = []
    for algo in algos:
        load = _load()
        res = _in_child("run", algo=algo, task=GRID, steps=budget, first=grid_window(algo), seed=0, config={})
        print(f"[training_run] {algo:10s}: {res['env_steps_per_cpu_s']:>11,.0f} env steps per CPU s over "
              f"{res['env_steps']:,} ({res['first_env_steps_per_cpu_s']:,.0f} over the first "
              f"{res['first_env_steps']:,}, {res['rest_env_steps_per_cpu_s']:,.0f} after), load {load}", flush=True)
        rows.append({"kind": "run", "task": GRID, "algo": algo, "seed": 0, **res, "load_1m": load})
    return [write_rows(Path(out_dir) / "training_run.csv", rows)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m constrained_grpo.eval.bench.training_run", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("results/bench"))
    parser.add_argument("--algos", nargs="+", default=list(ALGOS_RUN))
    args = parser.parse_args(argv)
    run(args.out, args.algos)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
