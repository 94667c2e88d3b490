"""A run's scalars reach TensorBoard and W&B, under the documented names, its evaluation's at its end."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from cgrpo_toy_agent import HERE, TASK, TOY
from inprocess import run_cgrpo
from constrained_grpo.eval.monitor import TENSORBOARD_ENV
from constrained_grpo.eval.runner import RunSpec, execute_run, task_meta
from constrained_grpo.eval.scoring.loader import load_run
from constrained_grpo.eval.scoring.metrics import run_metrics


def test_tensorboard_gets_the_evaluations_return_costs_and_verdicts(tmp_path: Path, monkeypatch):
    pytest.importorskip("torch.utils.tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    monkeypatch.setenv(TENSORBOARD_ENV, str(tmp_path / "tb"))
    spec = RunSpec(TASK, TOY, 0, 300, 40, {}, False)
    outcome = execute_run(spec, tmp_path / "runs", meta=task_meta(TASK))
    assert outcome.status == "done", outcome.error
    table, meta = load_run(spec.run_dir(tmp_path / "runs"), known_algos=None)
    m = run_metrics(table, {meta.task: meta}).iloc[0]

    acc = EventAccumulator(str(tmp_path / "tb" / TASK / "cgrpo_toy_agent_ToyAgent" / "seed_0"))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert {"return", "cost/hazard"} <= tags  # the training rows, as before
    final_steps = int(table.loc[table["kind"] == "train", "env_steps"].max())

    def last(tag: str) -> float:
        (event,) = acc.Scalars(tag)  # once, at the run's end
        assert event.step == final_steps
        return event.value

    assert last("eval/return") == pytest.approx(m["eval_return"], abs=1e-6)
    assert last("eval/greedy_return") == pytest.approx(m["greedy_return"], abs=1e-6)
    assert last("eval/episodes") == 40
    verdict = {"within": 1.0, "over": 0.0, "undetermined": 0.5}
    for name in ("hazard", "fuel"):
        assert last(f"eval/cost/{name}") == pytest.approx(m[f"eval_cost_{name}"], abs=1e-6)
        assert last(f"eval/cost_upper/{name}") == pytest.approx(m[f"eval_cost_hi_{name}"], abs=1e-6)
        assert last(f"eval/within/{name}") == verdict[m[f"verdict_{name}"]]
    assert last("eval/feasible") == {"feasible": 1.0, "violates": 0.0, "undetermined": 0.5}[m["feasibility"]]


class _FakeRun:
    """What a W&B run records of the calls made to it."""

    def __init__(self, **init: Any) -> None:
        self.init = init
        self.defined: list[tuple[str, dict[str, Any]]] = []
        self.logged: list[dict[str, float]] = []
        self.summary: dict[str, float] = {}
        self.finished = 0

    def define_metric(self, name: str, **options: Any) -> None:
        self.defined.append((name, options))

    def log(self, data: dict[str, float], **options: Any) -> None:
        assert not options, options  # the x axis is the logged env_steps, not W&B's own step
        self.logged.append(dict(data))

    def finish(self) -> None:
        self.finished += 1


def _fake_wandb() -> types.ModuleType:
    """A ``wandb`` module whose ``init`` hands out :class:`_FakeRun` objects, kept in ``runs``."""
    fake = types.ModuleType("wandb")
    fake.runs = []

    def init(**options: Any) -> _FakeRun:
        fake.runs.append(_FakeRun(**options))
        return fake.runs[-1]

    fake.init = init
    return fake


@pytest.mark.slow
def test_wandb_gets_the_training_scalars_and_the_evaluations_from_cgrpo_train(tmp_path: Path, monkeypatch):
    """``cgrpo train --wandb P``: one W&B run named after the run folder, a point per progress
    row and the evaluation's scalars last, against env steps; finished at the end."""
    fake = _fake_wandb()
    monkeypatch.setitem(sys.modules, "wandb", fake)
    runs = tmp_path / "runs"
    r = run_cgrpo("train", TASK, TOY, "--steps", "300", "--eval-episodes", "40", "--out", str(runs), "--quiet",
                  "--wandb", "course-project", pythonpath=[HERE])
    assert r.returncode == 0, r.stderr
    (run,) = fake.runs  # one W&B run for the one run folder
    assert run.init["project"] == "course-project"
    assert run.init["name"] == f"{TASK}/cgrpo_toy_agent_ToyAgent/seed_0"
    assert ("*", {"step_metric": "env_steps"}) in run.defined
    assert run.finished == 1

    folder = runs / TASK / "cgrpo_toy_agent_ToyAgent" / "seed_0"
    progress = pd.read_csv(folder / "progress.csv")
    *train, last = run.logged
    assert len(train) == len(progress) >= 2
    assert [p["env_steps"] for p in train] == progress["env_steps"].astype(float).tolist()
    for point, (_, row) in zip(train, progress.iterrows()):
        assert point["limit/hazard"] == 0.2 and point["limit/fuel"] == 4.4  # the task's limits
        assert point["return"] == pytest.approx(row["return"])
        assert point["cost/fuel"] == pytest.approx(row["cost_fuel"])
        assert point["lambda/hazard"] == pytest.approx(row["lambda_hazard"])
        assert not any(tag.startswith("eval/") for tag in point)
    # The pace between two rows: their env steps over their wall seconds.
    one, two = progress.iloc[0], progress.iloc[1]
    assert train[1]["steps_per_s"] == pytest.approx((two["env_steps"] - one["env_steps"]) / (two["wall_s"] - one["wall_s"]))

    # The evaluation's scalars, once, at the last training step: 40 episodes per policy, their means.
    episodes = pd.read_csv(folder / "eval.csv")
    sampled, greedy = episodes[episodes["policy"] == "sampled"], episodes[episodes["policy"] == "deterministic"]
    assert len(sampled) == len(greedy) == 40
    assert last["env_steps"] == train[-1]["env_steps"]
    assert last["eval/episodes"] == 40
    assert last["eval/return"] == pytest.approx(sampled["return"].mean())
    assert last["eval/greedy_return"] == pytest.approx(greedy["return"].mean())
    for name in ("hazard", "fuel"):
        assert last[f"eval/cost/{name}"] == pytest.approx(sampled[f"cost_{name}"].mean())
        assert last[f"eval/cost_upper/{name}"] >= last[f"eval/cost/{name}"]
    # The toy walks at random: from the start it crosses the hazard far more often than the limit
    # 0.2 allows and burns fuel beyond 4.4, so 40 episodes show both limits broken.
    assert last["eval/within/hazard"] == 0.0 and last["eval/within/fuel"] == 0.0 and last["eval/feasible"] == 0.0
    assert json.loads((folder / "done.json").read_text())["eval"]["episodes"] == 40
    assert run.summary == {tag: value for tag, value in last.items() if tag != "env_steps"}


def test_wandb_without_the_package_is_refused_before_any_folder(tmp_path: Path, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # ``import wandb`` raises ImportError
    for verb in (["train", TASK, TOY], ["bench", "--tasks", TASK, "--algos", TOY, "--seeds", "1"]):
        out = tmp_path / verb[0]
        r = run_cgrpo(*verb, "--steps", "64", "--out", str(out), "--wandb", "course-project", pythonpath=[HERE])
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
        assert r.stderr.strip().splitlines()[-1].endswith(
            "--wandb needs the wandb package: pip install wandb (and wandb login)"), r.stderr
        assert not out.exists()
