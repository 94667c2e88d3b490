"""The agent contract is declared (``registry.OPTIONAL_METHODS``) and checked when an algorithm
is registered, imported or built: a method of a harness name with another signature is refused
in one line, instead of silently changing the evaluation path."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from constrained_grpo.cli import main
from constrained_grpo.registry import (
    OPTIONAL_METHODS,
    AgentContractError,
    agent_methods,
    check_agent_class,
    load_entry_point,
    register_agent,
)


class _Good:
    def learn(self, total_env_steps, log=None):
        return self

    def evaluate(self, n_episodes, deterministic=True):
        raise NotImplementedError

    def save(self, path):
        pass

    def act(self, obs, deterministic=True):
        return 0

    def act_batch(self, obs, deterministic, uniforms):
        return np.zeros(len(obs), dtype=np.int64)


class _WrongActBatch(_Good):
    def act_batch(self, obs):  # the harness passes (obs, deterministic, uniforms)
        return np.zeros(len(obs), dtype=np.int64)


class _TextEvaluate(_Good):
    def evaluate(self, n_episodes, deterministic=True, seed=None):
        raise NotImplementedError


def test_the_declared_methods_are_what_the_harness_calls() -> None:
    assert {"act", "act_batch", "begin_episodes", "seed_evaluation", "wrap_eval_env", "wrap_eval_vec_env",
            "evaluate", "learn", "save"} == set(OPTIONAL_METHODS)
    methods = agent_methods(_Good())
    assert methods.act is not None and methods.act_batch is not None
    assert methods.begin_episodes is None and methods.seed_evaluation is None and methods.wrap_eval_env is None
    assert not methods.seeded_evaluate and agent_methods(_TextEvaluate()).seeded_evaluate


def test_a_wrong_act_batch_is_refused_in_one_line_naming_it() -> None:
    with pytest.raises(AgentContractError) as info:
        check_agent_class(_WrongActBatch, "mine")
    message = str(info.value)
    assert "\n" not in message
    assert "algorithm mine: _WrongActBatch.act_batch(self, obs)" in message
    assert "act_batch(obs, deterministic, uniforms)" in message
    with pytest.raises(AgentContractError, match="act_batch"):
        register_agent("contract-test-wrong", _WrongActBatch)
    with pytest.raises(AgentContractError, match="act_batch"):
        agent_methods(_WrongActBatch())


def test_keyword_only_and_defaulted_parameters_that_fit_the_call_pass() -> None:
    class Flexible(_Good):
        def act(self, obs, deterministic=True, *, extra=None):
            return 0

        def act_batch(self, obs, deterministic=False, uniforms=None, **kwargs):
            return np.zeros(len(obs))

        def begin_episodes(self, *seeds):
            pass

    check_agent_class(Flexible)

    class NeedsMore(_Good):
        def seed_evaluation(self, seed, stream):
            pass

    with pytest.raises(AgentContractError, match=r"seed_evaluation\(self, seed, stream\).*seed_evaluation\(seed\)"):
        check_agent_class(NeedsMore)


def test_every_builtin_agent_class_keeps_the_contract() -> None:
    from constrained_grpo.agents.agent import GRPOAgent
    from constrained_grpo.agents.text_agent import TextGRPOAgent
    from constrained_grpo.baselines.agent import BaselineAgent
    from constrained_grpo.baselines.saute_agent import SauteAgent

    for cls in (GRPOAgent, TextGRPOAgent, BaselineAgent, SauteAgent):
        check_agent_class(cls)


def test_a_user_module_with_a_wrong_signature_is_refused_when_imported(tmp_path: Path, monkeypatch, capsys) -> None:
    (tmp_path / "wrong_sig_algo.py").write_text(textwrap.dedent("""
        from constrained_grpo.registry import register_agent

        class Mine:
            def learn(self, total_env_steps, log=None):
                return self
            def evaluate(self, n_episodes, deterministic=True):
                raise NotImplementedError
            def save(self, path):
                pass
            def act_batch(self, obs, deterministic):
                return obs

        register_agent("wrong-sig", Mine)
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("CGRPO_IMPORT", "")  # main() may set it: the test's value is put back after
    with pytest.raises(SystemExit) as info:
        main(["algos", "--import", "wrong_sig_algo"])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--import wrong_sig_algo: algorithm wrong-sig: Mine.act_batch(self, obs, deterministic)" in err
    assert "act_batch(obs, deterministic, uniforms)" in err
    sys.modules.pop("wrong_sig_algo", None)


def test_a_dotted_class_path_is_checked_when_loaded(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "wrong_sig_class.py").write_text("class Mine:\n    def act(self):\n        return 0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(AgentContractError, match=r"wrong_sig_class:Mine: Mine\.act\(self\)"):
        load_entry_point("wrong_sig_class:Mine")
    sys.modules.pop("wrong_sig_class", None)
