"""A run's evaluation scalars reach TensorBoard at its end, under the documented names."""

from __future__ import annotations

from pathlib import Path

import pytest

from cgrpo_toy_agent import TASK, TOY
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
