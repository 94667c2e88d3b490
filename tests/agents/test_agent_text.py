"""The GRPO registry names on a math task: dispatch to the text agent, and its save/load round trip."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from constrained_grpo import make_agent
from constrained_grpo.agents import GRPOAgent, load_agent
from constrained_grpo.agents.agent import is_text_task
from constrained_grpo.agents.text_agent import TextGRPOAgent

MATH = "Math/ChainSum-v0"


def test_math_is_a_text_family():
    assert is_text_task(MATH) and not is_text_task("Grid/HazardFuel3x3-v0")


@pytest.mark.parametrize(("algo", "aggregator"), [("cgrpo", "scadv"), ("grpo-screw", "screw"), ("grpo", "reward")])
def test_grpo_names_build_the_text_agent_on_math(algo: str, aggregator: str):
    agent = make_agent(algo, MATH, seed=0, preset="quick")
    assert isinstance(agent, TextGRPOAgent)
    assert agent.algo == algo and agent.config.aggregator == aggregator
    assert agent.config.num_groups == 4 and agent.config.group_size == 4  # the text quick preset
    assert agent.lm.sft_steps == 20


def test_control_tasks_still_get_the_control_agent():
    agent = make_agent("cgrpo", "Grid/HazardFuel3x3-v0", seed=0, preset="quick")
    assert isinstance(agent, GRPOAgent)
    with pytest.raises(ValueError, match=r"lm=.*language-model policy.*'gridworld' task"):
        make_agent("cgrpo", "Grid/HazardFuel3x3-v0", seed=0, preset="quick", lm={"n_layers": 1})


def test_text_agent_learn_save_load_round_trip(tmp_path: Path):
    agent = make_agent("cgrpo", MATH, seed=0, preset="quick")
    records: list[dict] = []
    agent.learn(32, records.append)  # two iterations of 4 prompts x 4 completions
    assert [r["env_steps"] for r in records] == [16, 32]
    # The untrained model violates: the text preset's dual ascent (lr 1) has moved some multiplier.
    assert agent.multipliers.shape == (len(agent.constraints),) and np.any(agent.multipliers > 0)
    saved = agent.save(tmp_path / "agent")
    assert json.loads((saved / "config.json").read_text())["kind"] == "text"

    restored = load_agent(saved)
    assert isinstance(restored, TextGRPOAgent)
    assert restored.algo == "cgrpo" and restored.env_id == MATH and restored.config == agent.config
    np.testing.assert_array_equal(restored.multipliers, agent.multipliers)
    assert restored.trainer.env_steps == agent.trainer.env_steps == 32
    name, weight = next(iter(agent.policy.state_dict().items()))
    assert torch.equal(restored.policy.state_dict()[name], weight)
    # The restored model decodes as the trained one: same greedy answers.
    a, b = agent.evaluate(4, deterministic=True), restored.evaluate(4, deterministic=True)
    np.testing.assert_array_equal(a.returns, b.returns)
    np.testing.assert_array_equal(a.costs, b.costs)


def test_a_task_text_row_sits_between_the_preset_and_the_user():
    """ChainSumHard-v1 declares a 6,000-step warm start (``TaskInfo.defaults["text"]``): its runs
    resolve with it, a user's other ``lm`` keys keep it, the user's own ``sft_steps`` wins, and a
    task without the row keeps the text preset's 1,500."""
    from constrained_grpo.registry import resolve

    def lm(task: str, **config: object) -> dict:
        resolved = resolve("cgrpo", task, **config).to_dict()
        return resolved["lm"]

    assert lm("Math/ChainSumHard-v1")["sft_steps"] == 6000
    assert lm("Math/ChainSumHard-v1", lm={"temperature": 0.9}) == lm("Math/ChainSumHard-v1") | {"temperature": 0.9}
    assert lm("Math/ChainSumHard-v1", lm={"sft_steps": 100})["sft_steps"] == 100
    assert lm(MATH)["sft_steps"] == 1500
    warm = resolve("ref-warmstart", "Math/ChainSumHard-v1").to_dict()["config"]
    assert warm["lm"]["sft_steps"] == 6000  # the reference is the learners' starting point
