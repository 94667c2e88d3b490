"""Registry entry points of the constrained baselines beyond ``ppo-lag`` / ``pid-lag``
(one per name: the registry calls ``factory(env_id, seed, **config)``)."""

from __future__ import annotations

from functools import partial
from typing import Any

from constrained_grpo.baselines.agent import BaselineAgent, make_baseline, resolve_baseline_config

__all__ = [
    "make_cpo", "make_cup", "make_focops", "make_p3o", "make_pcpo", "make_pid_lag_omnisafe", "make_ppo_lag_omnisafe",
    "make_rcpo", "make_trpo_lag", "make_trpo_lag_omnisafe",
]


def make_trpo_lag(env_id: str, seed: int = 0, **config: Any) -> BaselineAgent:
    """Registry entry point of ``trpo-lag``."""
    return make_baseline("trpo-lag", env_id, seed, **config)


def make_cpo(env_id: str, seed: int = 0, **config: Any) -> BaselineAgent:
    """Registry entry point of ``cpo``."""
    return make_baseline("cpo", env_id, seed, **config)


def make_pcpo(env_id: str, seed: int = 0, **config: Any) -> BaselineAgent:
    """Registry entry point of ``pcpo``."""
    return make_baseline("pcpo", env_id, seed, **config)


def make_focops(env_id: str, seed: int = 0, **config: Any) -> BaselineAgent:
    """Registry entry point of ``focops``."""
    return make_baseline("focops", env_id, seed, **config)


def make_cup(env_id: str, seed: int = 0, **config: Any) -> BaselineAgent:
    """Registry entry point of ``cup``."""
    return make_baseline("cup", env_id, seed, **config)


def make_p3o(env_id: str, seed: int = 0, **config: Any) -> BaselineAgent:
    """Registry entry point of ``p3o``."""
    return make_baseline("p3o", env_id, seed, **config)


def make_rcpo(env_id: str, seed: int = 0, **config: Any) -> BaselineAgent:
    """Registry entry point of ``rcpo``."""
    return make_baseline("rcpo", env_id, seed, **config)


def make_ppo_lag_omnisafe(env_id: str, seed: int = 0, **config: Any) -> BaselineAgent:
    """Registry entry point of ``ppo-lag-omnisafe``."""
    return make_baseline("ppo-lag-omnisafe", env_id, seed, **config)


def make_pid_lag_omnisafe(env_id: str, seed: int = 0, **config: Any) -> BaselineAgent:
    """Registry entry point of ``pid-lag-omnisafe``."""
    return make_baseline("pid-lag-omnisafe", env_id, seed, **config)


def make_trpo_lag_omnisafe(env_id: str, seed: int = 0, **config: Any) -> BaselineAgent:
    """Registry entry point of ``trpo-lag-omnisafe``."""
    return make_baseline("trpo-lag-omnisafe", env_id, seed, **config)


for _name, _factory in (("trpo-lag", make_trpo_lag), ("cpo", make_cpo), ("pcpo", make_pcpo), ("focops", make_focops),
                        ("cup", make_cup), ("p3o", make_p3o), ("rcpo", make_rcpo),
                        ("ppo-lag-omnisafe", make_ppo_lag_omnisafe), ("pid-lag-omnisafe", make_pid_lag_omnisafe),
                        ("trpo-lag-omnisafe", make_trpo_lag_omnisafe)):
    # registry.resolve_config reads it: options validated before any work, recorded whole.
    _factory.resolve_config = partial(resolve_baseline_config, _name)  # type: ignore[attr-defined]
