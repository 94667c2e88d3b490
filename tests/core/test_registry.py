import pytest

import constrained_grpo
from constrained_grpo import registry
from constrained_grpo.registry import (
    AgentSpec,
    agent_spec,
    list_agents,
    load_entry_point,
    make_agent,
    register_agent,
    validate_log_record,
)


@pytest.fixture(autouse=True)
def _private_registry(monkeypatch):
    """Names registered here stay in this module: other tests compare against the registry."""
    registry.list_agents()  # load the built-in algorithms first
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))


def _factory(env_id, seed=0, **config):
    return {"env_id": env_id, "seed": seed, **config}


def test_register_and_make():
    register_agent("test-dummy", _factory, defaults={"alpha": 1}, description="d", override=True)
    assert "test-dummy" in list_agents()
    agent = make_agent("test-dummy", "Grid/HazardFuel-v0", seed=3, beta=2)
    assert agent == {"env_id": "Grid/HazardFuel-v0", "seed": 3, "alpha": 1, "beta": 2}
    # Config overrides the variant's defaults.
    assert make_agent("test-dummy", "x", alpha=5)["alpha"] == 5
    assert isinstance(agent_spec("test-dummy"), AgentSpec)


def test_register_twice_same_is_noop_different_is_error():
    register_agent("test-twice", _factory, override=True)
    register_agent("test-twice", _factory)
    with pytest.raises(ValueError, match="already registered"):
        register_agent("test-twice", "some.module:other")


def test_dotted_path_and_unknown(tmp_path, monkeypatch):
    (tmp_path / "registry_dotted_algos.py").write_text(
        "def make(env_id, seed=0, **config):\n    return ('made', env_id, seed, config)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert make_agent("registry_dotted_algos:make", "T", seed=1, lr=0.1) == ("made", "T", 1, {"lr": 0.1})
    assert load_entry_point("math:sqrt")(4.0) == 2.0
    with pytest.raises(KeyError, match="unknown algorithm 'nope'.*registered"):
        make_agent("nope", "T")
    with pytest.raises(ValueError, match="form"):
        load_entry_point("nodots")


def test_top_level_exports():
    assert constrained_grpo.make_agent is make_agent and constrained_grpo.list_agents is list_agents


def test_validate_log_record():
    good = {"env_steps": 10, "wall_s": 0.1, "ep_return": 1.0, "ep_cost": [0.0, 1.0], "multipliers": []}
    validate_log_record(good, 2)
    with pytest.raises(ValueError, match="misses"):
        validate_log_record({"env_steps": 1}, 2)
    with pytest.raises(ValueError, match="ep_cost has 1"):
        validate_log_record({**good, "ep_cost": [0.0]}, 2)
    with pytest.raises(ValueError, match="multipliers has 1"):
        validate_log_record({**good, "multipliers": [0.3]}, 2)


def test_log_record_contract_comes_from_the_schema():
    # One definition of the record: the registry validates and flattens with the schema's.
    from constrained_grpo import schema

    assert registry.LOG_REQUIRED_KEYS is schema.LOG_REQUIRED_KEYS
    assert registry.flatten_log_record is schema.flatten_record
    row = registry.flatten_log_record(
        {"env_steps": 10, "wall_s": 0.1, "ep_return": 1.0, "ep_cost": [0.0, 2.0], "multipliers": [0.5, 0.0]},
        ["hazard", "fuel"])
    assert row == {"env_steps": 10, "wall_s": 0.1, "return": 1.0, "cost_hazard": 0.0, "cost_fuel": 2.0,
                   "lambda_hazard": 0.5, "lambda_fuel": 0.0}
