"""One configuration shape for the multiplier: ``multiplier={...}`` means the same for the
GRPO agents and the baselines; a flat ``multiplier_<field>`` key is refused with that spelling."""

from __future__ import annotations

import pytest

from constrained_grpo.registry import agent_spec, list_agents, resolve_config

TASK = "Grid/HazardFuel-v0"


def _multiplier(name: str, **config) -> dict:
    return resolve_config(name, TASK, **config)["config"]["multiplier"]


def test_nested_multiplier_sets_the_rule_for_every_algorithm_with_one() -> None:
    with_multiplier = [n for n in list_agents() if not agent_spec(n).reference and "multiplier" in
                       resolve_config(n, TASK)["config"]]
    assert {"cgrpo", "cgrpo-pid", "grpo-screw", "ppo-lag", "pid-lag"} <= set(with_multiplier)
    for name in with_multiplier:
        if _multiplier(name).get("optimistic"):  # the optimistic rows: another rule is refused with the fix
            with pytest.raises(ValueError, match="set optimistic=False with that rule"):
                _multiplier(name, multiplier={"rule": "log_sgd", "init": 0.5, "lr": 0.02})
            got = _multiplier(name, multiplier={"rule": "log_sgd", "init": 0.5, "lr": 0.02, "optimistic": False})
        else:
            got = _multiplier(name, multiplier={"rule": "log_sgd", "init": 0.5, "lr": 0.02})
        assert (got["rule"], got["init"], got["lr"]) == ("log_sgd", 0.5, 0.02), name


def test_partial_multiplier_updates_the_table_row_field_by_field() -> None:
    # pid-lag's row: pid, kp 0.05, ki 0.01, kd 0.01. A user kp replaces only kp (before,
    # the row's flat multiplier_kp overwrote the user's nested one).
    got = _multiplier("pid-lag", multiplier={"kp": 0.3})
    assert (got["rule"], got["kp"], got["ki"], got["kd"]) == ("pid", 0.3, 0.01, 0.01)
    # ppo-lag keeps its default dual-ascent step size and normalization under a new rule.
    got = _multiplier("ppo-lag", multiplier={"rule": "pid"})
    assert (got["rule"], got["lr"], got["normalize"]) == ("pid", 0.01, True)


def test_a_flat_key_is_refused_with_the_nested_spelling() -> None:
    for name in ("ppo-lag", "pid-lag"):
        with pytest.raises(ValueError, match=r"multiplier_kp=0.3: .* write multiplier=\{'kp': 0.3\}"):
            resolve_config(name, TASK, multiplier_kp=0.3)
    with pytest.raises(ValueError, match=r"\['multiplier_kp'\].*multiplier options go in multiplier="):
        resolve_config("cgrpo", TASK, multiplier_kp=0.3)


def test_bad_multiplier_options_fail_before_any_work() -> None:
    with pytest.raises(ValueError, match="multiplier"):
        resolve_config("ppo-lag", TASK, multiplier={"rulez": "pid"})
    with pytest.raises(TypeError, match="multiplier='pid' must be a dict"):
        resolve_config("ppo-lag", TASK, multiplier="pid")
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['multiplier'\]"):
        resolve_config("ppo", TASK, multiplier={"rule": "pid"})  # plain PPO has no multipliers
