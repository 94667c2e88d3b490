# %% [markdown]
# # Lab 4: training two learners (tutorial, sections 2 and 5)
#
# `cgrpo` (Constrained GRPO, ScAdv, PI multipliers) and `grpo-screw` (ScRew) on the 3x3
# map, two seeds each, at 200,000 env steps (a minute or two on 2 cores). Every
# run writes `config.json`, `progress.csv` (one row per iteration), `eval.csv` (the final
# policy on the same episodes for everyone, reset seeds 1000000 + i) and `done.json` under
# `lab_runs/<task>/<algo>/seed_<n>/`, as `cgrpo train` does; lab 5 ranks them.

# %%
from pathlib import Path

from constrained_grpo.eval.runner import RunSpec, execute_run, task_meta
from constrained_grpo.eval.scoring.loader import load_run
from constrained_grpo.eval.scoring.metrics import run_metrics

TASK, OUT, STEPS = "Grid/HazardFuel3x3-v0", Path("lab_runs"), 200_000
meta = task_meta(TASK)
for algo in ("cgrpo", "grpo-screw"):
    for seed in (0, 1):
        outcome = execute_run(RunSpec(TASK, algo, seed, STEPS, None, {}, False), OUT, meta=meta)
        print(f"{algo} seed {seed}: {outcome.status} in {outcome.wall_s:.0f} s")
        assert outcome.status == "done", outcome.error

# %% [markdown]
# One run's metrics: `run_metrics` reads its files and gives the verdicts the leaderboard uses
# (each cost's one-sided 95% bounds against `d (1 + 0.1)`).

# %%
table, run = load_run(OUT / TASK / "cgrpo" / "seed_0", known_algos=None)
m = run_metrics(table, {run.task: run}).iloc[0]
print(f"return {m['eval_return']:.3f} (R* {meta.optimum_return:.1f}); verdict {m['feasibility']}; "
      f"hazard {m['eval_cost_hazard']:.3f} ({m['verdict_hazard']}), fuel {m['eval_cost_fuel']:.3f} ({m['verdict_fuel']})")

# %% [markdown]
# ## Exercise
#
# For each run, print the final multipliers (the last row of `progress.csv`, columns
# `lambda_hazard`, `lambda_fuel`) beside `meta.optimal_multipliers`, and the evaluation's
# verdict. Which learner's multipliers come closer to `lambda* = (0.5, 0.25)` at this budget?
# Are two seeds enough to tell the two apart?

# %%
# Your answer here.

# %% [markdown]
# ## Solution

# %%
import numpy as np
import pandas as pd

rows = []
for algo in ("cgrpo", "grpo-screw"):
    for seed in (0, 1):
        path = OUT / TASK / algo / f"seed_{seed}"
        last = pd.read_csv(path / "progress.csv").iloc[-1]
        table, run = load_run(path, known_algos=None)
        m = run_metrics(table, {run.task: run}).iloc[0]
        lam = np.array([last["lambda_hazard"], last["lambda_fuel"]])
        rows.append({"algo": algo, "seed": seed, "lambda_hazard": lam[0], "lambda_fuel": lam[1],
                     "distance to lambda*": float(np.linalg.norm(lam - np.array(meta.optimal_multipliers))),
                     "verdict": m["feasibility"], "return": m["eval_return"]})
frame = pd.DataFrame(rows)
print(frame.round(3).to_string(index=False))
assert len(frame) == 4 and frame["verdict"].isin(["feasible", "violates", "undetermined"]).all()
# Two seeds: the seeds of one learner can differ more than the learners do; lab 5's
# rank test says whether the data separate them.
