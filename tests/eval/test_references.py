"""Reference policies: the LP's optimal policy, run through the harness, lands on R* and the
limits (an end-to-end check of evaluation, task and optimum); references are never ranked."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from constrained_grpo.eval.leaderboard import build_leaderboard, render_markdown
from constrained_grpo.eval.loader import algo_properties, load_results
from constrained_grpo.eval.runner import EVAL_SEED, RunSpec, execute_run, task_meta
from constrained_grpo.registry import agent_spec, make_agent

TASK = "Grid/HazardFuel-v0"


@pytest.mark.parametrize("task", ["Grid/HazardFuel-v0", "Grid/HazardFuel3x3-v0"])
def test_the_optimal_policy_through_the_harness_lands_on_the_optimum(tmp_path: Path, task: str):
    meta = task_meta(task)
    n = 3000
    outcome = execute_run(RunSpec(task, "ref-optimal", 0, 1, n, {}, False), tmp_path, meta=meta)
    assert outcome.status == "done", outcome.error
    ev = pd.read_csv(next(tmp_path.rglob("eval.csv")))
    sampled = ev[ev["policy"] == "sampled"]
    assert list(sampled["reset_seed"]) == [EVAL_SEED + i for i in range(n)]
    ret = sampled["return"].to_numpy()
    half = 2.58 * ret.std() / math.sqrt(n)  # 99%: the test must not fail by chance
    assert abs(ret.mean() - meta.optimum_return) <= half, (ret.mean(), meta.optimum_return, half)
    for c in meta.constraints:
        cost = sampled[f"cost_{c.name}"].to_numpy()
        assert abs(cost.mean() - c.limit) <= 2.58 * cost.std() / math.sqrt(n) + 1e-9, (c.name, cost.mean(), c.limit)


def test_reference_policies_are_registered_with_their_capability():
    for name in ("ref-random", "ref-optimal", "ref-unconstrained"):
        spec = agent_spec(name)
        assert spec.reference and not spec.constrained
    with pytest.raises(ValueError, match="offers no 'optimal' reference policy"):
        make_agent("ref-optimal", "Highway/Highway-v0")


def test_references_are_shown_but_never_ranked(tmp_path: Path):
    meta = task_meta("Grid/HazardFuel3x3-v0")
    for algo, steps in (("ref-optimal", 1), ("ref-random", 1), ("cgrpo_toy_agent:ToyAgent", 300)):
        outcome = execute_run(RunSpec(meta.task, algo, 0, steps, 50, {}, False), tmp_path, meta=meta)
        assert outcome.status == "done", outcome.error
    res = load_results(tmp_path)
    props = algo_properties(tmp_path)
    refs = [a for a, p in props.items() if p["reference"]]
    assert sorted(refs) == ["ref-optimal", "ref-random"]
    lb = build_leaderboard(res.table, res.tasks, reps=100, references=refs)
    # The references' budgets differ from the toy's by far; that refuses nothing, since they are not compared.
    assert lb.not_ranked == {}
    assert list(lb.per_task[meta.task]["algo"]) == ["cgrpo_toy_agent:ToyAgent"]
    md = render_markdown(lb)
    assert "| ref | ref-optimal |" in md and "| ref | ref-random |" in md
    assert list(lb.overall["gridworld"]["algo"]) == ["cgrpo_toy_agent:ToyAgent"]
    assert bool(lb.runs.set_index("algo").loc["ref-optimal", "reference"])
    assert np.isfinite(lb.runs.set_index("algo").loc["ref-optimal", "score"])
