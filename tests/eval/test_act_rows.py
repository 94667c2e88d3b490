"""An agent with ``act`` alone: played on the batched twin with the serial path's very
episodes and actions, or warned about before its slow evaluation; and the evaluation's
progress lines (episodes done of the plan, ETA)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from constrained_grpo.eval import eval_progress
from constrained_grpo.eval.act_rows import RowGenerators, SlowEvaluationWarning
from constrained_grpo.eval.evaluation import EVAL_SEED, evaluate_agent, play_batched, play_seeded


def _same(a, b) -> bool:
    return all(np.array_equal(getattr(a, f), getattr(b, f)) for f in ("returns", "costs", "lengths"))


class TorchActOnly:
    """A linear softmax policy sampling with torch's global generator (the tutorial's shape)."""

    def __init__(self, obs_dim: int, actions: int) -> None:
        g = torch.Generator().manual_seed(0)
        self.w = torch.randn(obs_dim, actions, generator=g) * 0.3

    def act(self, obs, deterministic: bool = True) -> int:
        logits = torch.as_tensor(np.asarray(obs, dtype=np.float32).ravel()) @ self.w
        if deterministic:
            return int(logits.argmax())
        return int(torch.multinomial(torch.softmax(logits, 0), 1))


class NumpyActOnly:
    """Draws from numpy's global generator, and only in some states (so the first rows don't)."""

    def act(self, obs, deterministic: bool = True) -> int:
        o = np.asarray(obs, dtype=np.float64).ravel()
        if deterministic:
            return int(o.argmax()) % 4
        return int(np.random.randint(4)) if o.argmax() % 3 else int(torch.randint(4, (1,)))


class OwnGenerator:
    """``act`` alone, drawing from a generator of its own that the harness reseeds per episode."""

    def __init__(self) -> None:
        self.rng = np.random.default_rng(0)

    def seed_evaluation(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def act(self, obs, deterministic: bool = True) -> int:
        return 3 if deterministic else int(self.rng.integers(4))


@pytest.mark.slow
def test_an_act_only_agent_on_highway_plays_the_serial_episodes_on_the_batched_twin():
    pytest.importorskip("highway_env")
    from constrained_grpo.tasks import make_env, make_vec_env

    task = "Highway/Highway-v1"
    env = make_env(task)
    agent = TorchActOnly(int(np.prod(env.observation_space.shape)), int(env.action_space.n))
    seeds = list(range(EVAL_SEED, EVAL_SEED + 8))
    try:
        for det in (False, True):
            rows = RowGenerators(agent.act)
            batched = play_batched(lambda b: make_vec_env(task, b), rows.act_batch, det, seeds, 4, begin=rows.begin_episodes)
            serial = play_seeded(env, agent.act, det, seeds, 4)
            assert _same(batched, serial), det
            assert not rows.numpy_rows  # torch alone: numpy's state is never swapped
    finally:
        env.close()
    # Through the harness: the twin, no warning, progress lines up to the planned count.
    lines: list[str] = []
    with warnings.catch_warnings(record=True) as caught, eval_progress.reporting(lines.append, every_s=0.0):
        warnings.simplefilter("always")
        results, protocol = evaluate_agent(agent, task, 26)
    assert protocol.batched and protocol.sampler == "episode-generator"
    assert not [w for w in caught if issubclass(w.category, SlowEvaluationWarning)]
    assert lines[-1].startswith("evaluation 52/52 episodes (100%)"), lines[-1]
    assert any("/52 episodes" in line and "ETA" in line for line in lines), lines
    assert len(np.unique(results["sampled"].lengths)) > 1  # it does sample


@pytest.mark.parametrize("agent", [NumpyActOnly(), TorchActOnly(9 * 3, 4)], ids=["numpy", "torch"])
def test_batched_act_only_evaluation_equals_the_serial_one_on_a_grid(agent):
    task = "Grid/HazardFuel3x3-v0"
    if isinstance(agent, TorchActOnly):
        from constrained_grpo.tasks import make_env

        env = make_env(task)
        agent = TorchActOnly(int(np.prod(env.observation_space.shape)), int(env.action_space.n))
        env.close()
    state = np.random.get_state()
    batched, pb = evaluate_agent(agent, task, 60, batched=True)
    serial, ps = evaluate_agent(agent, task, 60, batched=False)
    assert pb.batched and not ps.batched and pb.sampler == ps.sampler == "episode-generator"
    for policy in batched:
        assert _same(batched[policy], serial[policy]), policy
    assert len(np.unique(batched["sampled"].returns)) > 1
    # The caller's generator is left as it was.
    after = np.random.get_state()
    assert np.array_equal(state[1], after[1]) and state[2] == after[2]


def test_an_act_only_agent_that_cannot_be_batched_is_warned_about_first_with_an_estimate():
    events: list[str] = []
    slow: list[Warning] = []

    def shown(message, category, *args, **kwargs) -> None:
        events.append(f"warning: {message}")
        if issubclass(category, SlowEvaluationWarning):
            slow.append(message)

    with warnings.catch_warnings(), eval_progress.reporting(lambda line: events.append("progress"), every_s=0.0):
        warnings.simplefilter("always")
        warnings.showwarning = shown  # restored by catch_warnings
        _, protocol = evaluate_agent(OwnGenerator(), "Grid/HazardFuel3x3-v0", 40)
    assert len(slow) == 1 and not protocol.batched
    message = str(slow[0])
    assert message.startswith("OwnGenerator has act() alone") and "seed_evaluation" in message
    assert "40 episodes x 2 policies" in message and "is about " in message
    assert "def act_batch(self, obs, deterministic, uniforms)" in message
    assert len(message.splitlines()) <= 7  # the estimate, then the five-line fix
    # Before any episode of the evaluation: the progress hook has not been called yet.
    assert events[0].startswith("warning: OwnGenerator"), events[:2]
    assert events.count("progress") == 80


def test_progress_lines_come_at_most_every_interval_and_show_the_eta():
    now = [0.0]
    lines: list[str] = []
    progress = eval_progress.EvalProgress(lines.append, every_s=10.0, clock=lambda: now[0])
    progress.add(100)  # during a pilot: no total yet
    now[0] = 4.0
    progress.add(100)
    assert lines == []  # under 10 s since the start
    now[0] = 12.0
    progress.add(100)
    assert lines == ["evaluation 300 episodes (pilot, sizing the plan), 12 s elapsed"]
    progress.planned(1200)
    now[0] = 24.0
    progress.add(0)  # a batched step where no episode ended is still a time to report
    assert lines[-1] == "evaluation 300/1,200 episodes (25%), 24 s elapsed, ETA 1 min 12 s"


@pytest.mark.slow
def test_a_sweep_prints_each_runs_evaluation_lines(tmp_path):
    from cgrpo_toy_agent import TASK, TOY

    from constrained_grpo.eval.runner import RunSpec
    from constrained_grpo.eval.sweep import run_sweep

    lines: list[str] = []
    spec = RunSpec(TASK, TOY, 0, 200, 40, {}, False)
    report = run_sweep([spec], tmp_path, workers=1, progress=False, echo=lines.append)
    assert report.ok, report.failed
    mine = [line for line in lines if line.startswith(f"[sweep] {spec.key}: ")]
    assert mine[0].endswith("evaluating the final policy, sampled and greedy, on 40 episodes each ..."), lines
    assert mine[-1].startswith(f"[sweep] {spec.key}: evaluated 40 episodes per policy in "), lines


def test_the_evaluations_warnings_reach_the_progress_lines_as_they_are_raised():
    lines: list[str] = []
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        with eval_progress.reporting(lines.append, every_s=0.0):
            evaluate_agent(OwnGenerator(), "Grid/HazardFuel3x3-v0", 40)
    assert lines[0].startswith("warning: OwnGenerator has act() alone"), lines[:2]
    assert lines[1].startswith("evaluation 1/80 episodes")  # then the episodes, one line each here
