"""A run's configuration is resolved once (``registry.resolve``), recorded as ``config.json``'s
``algo.resolved``, and is the one thing its agent is built from: for every learner and
reference of the standard board on every board task, the built agent's settings equal the record."""

from __future__ import annotations

import json
from typing import Any

import pytest
import torch

from constrained_grpo.eval.presets import get_preset
from constrained_grpo.eval.runner import run_config, run_meta
from constrained_grpo.registry import ResolvedConfig, build_agent, make_agent, resolve

STANDARD_RUNS = {(s.task, s.algo): s for s in get_preset("standard").runs(save_agent=False) if s.seed == 0}
PROVENANCE = {"versions": {}, "git": None, "invoked_as": "cgrpo bench --preset standard"}


def _json(value: Any) -> Any:
    return json.loads(json.dumps(value, sort_keys=True))


def _settings(agent: Any) -> dict[str, Any]:
    """What a built agent trains with, read from the agent itself (not from its resolver)."""
    from constrained_grpo.agents.agent import GRPOAgent
    from constrained_grpo.agents.text_agent import TextGRPOAgent
    from constrained_grpo.baselines.agent import BaselineAgent
    from constrained_grpo.references import ReferenceAgent, WarmStartReference

    if isinstance(agent, WarmStartReference):
        inner = _settings(agent.agent)
        inner["algo"] = "grpo"  # the warm start is built as unconstrained grpo's starting point
        return {"kind": "reference", "policy": "warmstart", "config": {"episodes": agent.episodes, **inner}}
    if isinstance(agent, TextGRPOAgent):
        return {"kind": "text", "algo": agent.algo, "preset": agent.preset, "config": agent.config.to_dict(),
                "lm": agent.lm.to_dict()}
    if isinstance(agent, GRPOAgent):
        return {"kind": "control", "algo": agent.algo, "config": agent.config.to_dict()}
    if isinstance(agent, BaselineAgent):
        return {"kind": "baseline", "algo": agent.name, "config": agent.config.to_dict()}
    if isinstance(agent, ReferenceAgent):
        return {"kind": "reference", "policy": agent.policy, "config": {"episodes": agent.episodes}}
    raise AssertionError(f"no settings reader for {type(agent).__name__}")


def _comparable(recorded: dict[str, Any], agent: Any) -> dict[str, Any]:
    """The recorded configuration cut to what :func:`_settings` reads (a control agent keeps
    no preset name, a reference its env kwargs and limits through its env)."""
    from constrained_grpo.references import ReferenceAgent

    out = dict(recorded)
    if out.get("kind") == "control":
        out.pop("preset")
    if isinstance(agent, ReferenceAgent):
        out["config"] = {"episodes": out["config"]["episodes"]}
    return out


@pytest.fixture(scope="module", autouse=True)
def _no_warm_start():
    """The text agents' warm start (minutes of supervised steps) changes weights, not settings."""
    from constrained_grpo.agents import text_agent

    real = text_agent.build_text_policy
    text_agent.build_text_policy = lambda lm, env=None, seed=0, log=None: real(lm.updated({"sft_steps": 0}), env, seed, log)
    threads = torch.get_num_threads()
    yield
    text_agent.build_text_policy = real
    torch.set_num_threads(threads)


@pytest.mark.slow
@pytest.mark.parametrize(("task", "algo"), sorted(STANDARD_RUNS), ids=lambda v: v)
def test_the_built_agent_is_what_config_json_records(task: str, algo: str, tmp_path) -> None:
    spec = STANDARD_RUNS[task, algo]
    resolved = resolve(spec.algo, spec.task, **spec.config)
    recorded = _json(run_config(spec, tmp_path, run_meta(spec), PROVENANCE, resolved))["algo"]["resolved"]
    assert recorded == _json(resolve(spec.algo, spec.task, **spec.config).to_dict())  # one answer, every time
    agent = build_agent(resolved, seed=0)
    assert _json(_settings(agent)) == _comparable(recorded, agent)


def test_the_board_covers_every_board_task_and_learner() -> None:
    preset = get_preset("standard")
    assert {t for t, _ in STANDARD_RUNS} == set(preset.resolved_tasks())
    assert {a for _, a in STANDARD_RUNS} >= set(preset.algos)


def test_a_resolved_config_is_read_only_and_rebuilds_the_same_agent() -> None:
    resolved = resolve("ppo-lag", "Grid/HazardFuel3x3-v0", learning_rate=1e-3, multiplier={"lr": 0.02})
    assert isinstance(resolved, ResolvedConfig)
    with pytest.raises(TypeError):
        resolved.values["config"]["learning_rate"] = 1.0  # type: ignore[index]
    copy = resolved.to_dict()
    copy["config"]["learning_rate"] = 1.0
    assert resolved.to_dict()["config"]["learning_rate"] == 1e-3  # to_dict gives a copy
    assert resolved.to_dict()["config"]["multiplier"]["lr"] == 0.02
    agent = make_agent("ppo-lag", "Grid/HazardFuel3x3-v0", learning_rate=1e-3, multiplier={"lr": 0.02})
    assert agent.config.to_dict() == resolved.to_dict()["config"]


def test_the_harness_builds_from_the_configuration_it_records(tmp_path, monkeypatch) -> None:
    """execute_run resolves once: the agent it builds and config.json come from one value."""
    from constrained_grpo import registry
    from constrained_grpo.eval import runner

    calls: list[str] = []
    real = registry.resolve

    def counting(name: str, env_id: str, **config: Any) -> ResolvedConfig:
        calls.append(name)
        return real(name, env_id, **config)

    monkeypatch.setattr(runner, "resolve", counting)
    built: list[ResolvedConfig] = []
    real_build = runner.build_agent
    monkeypatch.setattr(runner, "build_agent", lambda r, seed: built.append(r) or real_build(r, seed))
    spec = runner.RunSpec("Grid/HazardFuel3x3-v0", "cgrpo", 0, 2_000, 20, {"preset": "quick"}, False)
    outcome = runner.execute_run(spec, tmp_path)
    assert outcome.status == "done", outcome.error
    assert calls == ["cgrpo"] and len(built) == 1
    recorded = json.loads((spec.run_dir(tmp_path) / "config.json").read_text())["algo"]["resolved"]
    assert recorded == _json(built[0].to_dict())
