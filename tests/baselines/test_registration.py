"""A baseline is one row of ``BASELINES``: that row alone registers it (entry point, resolved
configuration, capabilities), builds it, and reloads it from a save."""

from __future__ import annotations

import numpy as np
import pytest

from constrained_grpo import registry
from constrained_grpo.baselines import (
    BASELINES,
    BaselineAgent,
    BaselineFactory,
    BaselineSpec,
    PPOConfig,
    PPOLagConfig,
    load_agent,
    register_baselines,
)
from constrained_grpo.registry import agent_spec, make_agent, resolve_config

TASK = "Grid/HazardFuel3x3-v0"

#: (constrained, lambda_in_reward_units) of every built-in row: only PPO is unconstrained; lambda
#: is in reward units where the advantage is A_r - sum lambda A_c (or r - lambda c), not where it
#: is CPO/PCPO/CUP's nu, P3O's fixed penalty or Saute's (no multiplier).
EXPECTED_CAPABILITIES: dict[str, tuple[bool, bool]] = {
    "ppo": (False, False),
    "ppo-lag": (True, True),
    "pid-lag": (True, True),
    "ppo-lag-ogda": (True, True),
    "ppo-lag-al": (True, True),
    "crpo": (True, False),  # a 0/1 switch, no multiplier
    "trpo-lag": (True, True),
    "cpo": (True, False),
    "pcpo": (True, False),
    "focops": (True, True),
    "cup": (True, False),
    "p3o": (True, False),
    "rcpo": (True, True),
    "saute-ppo": (True, False),
    "ppo-lag-omnisafe": (True, True),
    "pid-lag-omnisafe": (True, True),
    "trpo-lag-omnisafe": (True, True),
}


@pytest.fixture
def private_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows and names added by a test stay in it."""
    registry.list_agents()
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))


def test_every_row_is_registered_with_its_capabilities() -> None:
    assert set(BASELINES) == set(EXPECTED_CAPABILITIES)
    names = set(registry.list_agents())
    for name, row in BASELINES.items():
        assert name in names
        spec = agent_spec(name)
        assert spec.entry_point == BaselineFactory(name)
        assert (spec.constrained, spec.lambda_in_reward_units) == EXPECTED_CAPABILITIES[name], name
        assert spec.description == row.description and dict(spec.defaults) == dict(row.preset)
        assert not spec.reference and not spec.acts_on_text


def test_one_row_registers_builds_resolves_and_reloads(
    private_registry: None, monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    name = "ppo-lag-onerow"
    row = BaselineSpec(PPOLagConfig, {"multiplier": {"rule": "pid", "kp": 0.3}, "learning_rate": 1e-3}, "one-row test baseline")
    monkeypatch.setitem(BASELINES, name, row)
    register_baselines()

    spec = agent_spec(name)
    assert (spec.description, spec.constrained, spec.lambda_in_reward_units) == ("one-row test baseline", True, True)
    resolved = resolve_config(name, TASK, n_envs=2)
    assert (resolved["kind"], resolved["algo"]) == ("baseline", name)
    cfg = resolved["config"]
    # Row preset (pid, kp 0.3, lr 1e-3), the gridworld's row (gamma 1), the caller's n_envs;
    # the row's multiplier dict updates PPOLagConfig's field by field (ki keeps its default).
    assert cfg["multiplier"]["rule"] == "pid" and cfg["multiplier"]["kp"] == 0.3
    assert cfg["multiplier"]["ki"] == PPOLagConfig().multiplier.ki
    assert (cfg["learning_rate"], cfg["gamma"], cfg["n_envs"]) == (1e-3, 1.0, 2)
    assert resolve_config(name, TASK, learning_rate=5e-4)["config"]["learning_rate"] == 5e-4

    agent = make_agent(name, TASK, seed=0, n_envs=2, n_steps=8, batch_size=8)
    assert isinstance(agent, BaselineAgent) and agent.name == name
    assert agent.config.multiplier.rule == "pid" and agent.config.multiplier.kp == 0.3
    np.testing.assert_array_equal(agent.multipliers, np.zeros(agent.num_constraints))
    # The same row reads the save back (load_agent finds the config class by the name).
    again = load_agent(agent.save(tmp_path / "agent"))
    assert again.name == name and again.config == agent.config


def test_unconstrained_row_and_explicit_lambda_flag(private_registry: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(BASELINES, "ppo-onerow", BaselineSpec(PPOConfig, {"ent_coef": 0.01}, "plain"))
    monkeypatch.setitem(BASELINES, "lag-nu-onerow", BaselineSpec(PPOLagConfig, {}, "nu, not lambda", False))
    register_baselines()
    assert (agent_spec("ppo-onerow").constrained, agent_spec("ppo-onerow").lambda_in_reward_units) == (False, False)
    assert (agent_spec("lag-nu-onerow").constrained, agent_spec("lag-nu-onerow").lambda_in_reward_units) == (True, False)
    assert resolve_config("ppo-onerow", TASK)["config"]["ent_coef"] == 0.01


def test_registering_again_is_a_noop(private_registry: None) -> None:
    before = dict(registry._REGISTRY)
    register_baselines()
    assert registry._REGISTRY == before


def test_a_row_needs_a_ppo_config_class() -> None:
    with pytest.raises(TypeError, match="config_cls=<class 'dict'> must be PPOConfig"):
        BaselineSpec(dict, {}, "not a config")  # type: ignore[arg-type]


@pytest.mark.parametrize(("cls_name", "critic_lr", "linear_lr_decay"),
                         [("OmniSafePPOLagConfig", 3e-4, True), ("OmniSafeTRPOLagConfig", 1e-3, False)])
def test_omnisafe_configs_share_their_options(cls_name: str, critic_lr: float, linear_lr_decay: bool) -> None:
    # PPOLag.yaml / TRPOLag.yaml: critic lr 3e-4 / 1e-3, linear lr decay on / off; the rest alike.
    from constrained_grpo.baselines import omnisafe

    cls = getattr(omnisafe, cls_name)
    cfg = cls()
    assert (cfg.obs_normalize, cfg.obs_clip, cfg.critic_l2, cfg.reset_each_rollout) == (True, 5.0, 1e-3, True)
    assert (cfg.critic_lr, cfg.linear_lr_decay) == (critic_lr, linear_lr_decay)
    assert list(cfg.to_dict())[-6:] == ["obs_normalize", "obs_clip", "critic_lr", "critic_l2", "linear_lr_decay",
                                        "reset_each_rollout"]
    with pytest.raises(ValueError, match=rf"{cls_name}\.critic_l2=-0\.5 must be a finite number >= 0"):
        cls(critic_l2=-0.5)
    with pytest.raises(ValueError, match=rf"{cls_name}\.learning_rate=-1\.0"):  # the SB3 config's own checks still run
        cls(learning_rate=-1.0)
