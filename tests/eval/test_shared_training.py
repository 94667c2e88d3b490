"""One training, several deployments: a sweep that holds a learner under several deployment
rules (``cgrpo``, ``cgrpo-best``, ``cgrpo-mix``) trains it once per seed, and every run it
writes is the run that learner would have written training alone under that rule."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from constrained_grpo.eval import storage
from constrained_grpo.eval.runner import RunSpec, deployment_of, execute_run
from constrained_grpo.eval.sweep import expand_grid, run_sweep

TASK = "Grid/HazardFuel3x3-v0"
QUIET = {"progress": False, "echo": lambda line: None}
#: (learner, its run config, budget): a GRPO agent and an SB3-based learner, both a few seconds.
LEARNERS = {
    "cgrpo": ({"preset": "quick"}, 12_000),
    "ppo-lag": ({"n_envs": 4, "n_steps": 32, "batch_size": 64, "n_epochs": 2, "deploy_snapshots": 4}, 20 * 128),
}


def _specs(learner: str, algos: list[str]) -> list[RunSpec]:
    config, steps = LEARNERS[learner]
    return expand_grid([TASK], algos, [3], steps, eval_episodes=300, config={a: config for a in algos}, save_agent=False)


def _without_times(value: object) -> object:
    """``value`` without wall-clock fields, which differ between any two executions."""
    if isinstance(value, dict):
        return {k: _without_times(v) for k, v in value.items() if k not in ("wall_s",)}
    if isinstance(value, list):
        return [_without_times(v) for v in value]
    return value


def _run(spec: RunSpec, out: Path) -> dict[str, object]:
    path = spec.run_dir(out)
    progress = pd.read_csv(path / storage.PROGRESS_FILE)
    return {
        "eval": (path / storage.EVAL_FILE).read_bytes(),
        "progress": progress.drop(columns=[c for c in progress.columns if c.endswith("_s") or "per_s" in c or "fps" in c]),
        "done": json.loads((path / storage.DONE_FILE).read_text()),
        "config": json.loads((path / storage.CONFIG_FILE).read_text()),
    }


@pytest.mark.slow
@pytest.mark.parametrize("learner", sorted(LEARNERS))
def test_one_training_writes_each_rule_as_if_it_had_trained_alone(learner: str, tmp_path: Path) -> None:
    algos = [learner, f"{learner}-best", f"{learner}-mix"]
    specs = _specs(learner, algos)
    assert len({deployment_of(s)[0] for s in specs}) == 1  # one training digest, three rules
    assert [deployment_of(s)[1] for s in specs] == ["last", "best-feasible", "tail-mixture"]

    alone = tmp_path / "alone"
    for spec in specs:  # each rule trained on its own
        assert execute_run(spec, alone).status == "done"
    together = tmp_path / "together"
    report = run_sweep(specs, together, workers=1, **QUIET)
    assert report.ok and sorted(report.done) == sorted(s.key for s in specs)

    keys = [s.key for s in specs]
    for spec in specs:
        a, b = _run(spec, alone), _run(spec, together)
        # The run trained with its siblings is the run trained alone: the same log iteration for
        # iteration, the same deployed policy (and selection record), the same evaluation.
        pd.testing.assert_frame_equal(a["progress"], b["progress"])
        assert a["eval"] == b["eval"], spec.key
        assert _without_times(a["done"]["deployed"]) == _without_times(b["done"]["deployed"])
        assert a["config"]["algo"] == b["config"]["algo"]
        assert "shared_training" not in a["done"]
        assert b["done"]["shared_training"]["trained_by"] == keys[0]
        assert b["done"]["shared_training"]["runs"] == keys
    # The rules deploy what they say: best-feasible a validated candidate or the last iterate,
    # the mixture several members; a rule's evaluation is the learner's exactly where it deploys
    # the last iterate.
    best = _run(specs[1], together)["done"]["deployed"]
    assert best["rule"] == "best-feasible" and best["validation"]["deployed"] is not None
    assert _run(specs[2], together)["done"]["deployed"]["kept"] > 1
    for spec in specs[1:]:
        done = _run(spec, together)["done"]
        assert done.get("eval_of") == (keys[0] if done["deployed"]["kept"] == 0 else None), spec.key


@pytest.mark.slow
def test_a_rule_that_deploys_the_last_iterate_is_evaluated_once(tmp_path: Path) -> None:
    # A fuel limit no training batch keeps: best-feasible shows no candidate within and deploys
    # the last iterate, the policy the learner's run has just evaluated on the same episodes.
    config = {"preset": "quick", "limits": {"hazard": 1.0, "fuel": 2.05}}
    specs = expand_grid([TASK], ["cgrpo", "cgrpo-best"], [3], 12_000, eval_episodes=300,
                        config={"cgrpo": config, "cgrpo-best": config}, save_agent=False)
    together = tmp_path / "together"
    assert run_sweep(specs, together, workers=1, **QUIET).ok
    best = _run(specs[1], together)
    assert best["done"]["deployed"]["kept"] == 0 and best["done"]["deployed"]["validation"]["deployed"] == "last"
    assert best["done"]["eval_of"] == specs[0].key
    assert best["eval"] == _run(specs[0], together)["eval"]
    # ... and that evaluation is the one best-feasible's run trained alone plays.
    alone = tmp_path / "alone"
    assert execute_run(specs[1], alone).status == "done"
    assert _run(specs[1], alone)["eval"] == best["eval"]
    assert "eval_of" not in _run(specs[1], alone)["done"]


@pytest.mark.slow
def test_a_complete_sibling_is_not_redone(tmp_path: Path) -> None:
    specs = _specs("cgrpo", ["cgrpo", "cgrpo-best", "cgrpo-mix"])
    out = tmp_path / "runs"
    first = run_sweep(specs[1:2], out, workers=1, **QUIET)
    assert first.done == [specs[1].key]
    before = (specs[1].run_dir(out) / storage.DONE_FILE).read_bytes()
    report = run_sweep(specs, out, workers=2, **QUIET)
    assert sorted(report.done) == sorted([specs[0].key, specs[2].key]) and report.skipped == [specs[1].key]
    assert (specs[1].run_dir(out) / storage.DONE_FILE).read_bytes() == before
    shared = json.loads((specs[2].run_dir(out) / storage.DONE_FILE).read_text())["shared_training"]
    assert shared["runs"] == [specs[0].key, specs[2].key]


def test_runs_of_different_trainings_or_text_tasks_do_not_share() -> None:
    base = RunSpec(TASK, "cgrpo", 3, 10_000)
    assert deployment_of(base)[0] == deployment_of(RunSpec(TASK, "cgrpo-best", 3, 10_000))[0]
    for other in (RunSpec(TASK, "cgrpo-best", 4, 10_000),  # another seed
                  RunSpec(TASK, "cgrpo-best", 3, 20_000),  # another budget
                  RunSpec(TASK, "grpo", 3, 10_000),  # another learner
                  RunSpec(TASK, "cgrpo-best", 3, 10_000, config={"lr": 1e-3}),  # another setting
                  RunSpec(TASK, "ppo-lag-best", 3, 10_000)):
        assert deployment_of(base)[0] != deployment_of(other)[0], other.key
    # A text agent deploys its last iterate only: its runs are each their own training.
    text = RunSpec("Math/ChainSum-v0", "cgrpo", 0, 1_000)
    assert json.loads(deployment_of(text)[0])["alone"] == text.key
    assert json.loads(deployment_of(base)[0])["alone"] is None
