"""The algorithm registry (docs/architecture.md, Contract 2).

``make_agent(name, env_id, seed=0, **config)`` builds a registered agent; the name may
also be a dotted path ``"package.module:factory"``. Built-in algorithms are registered
by their packages (``constrained_grpo.agents``, ``constrained_grpo.baselines``), which
are imported on the first lookup so that the core never imports an agent statically.

Every agent offers ``learn(total_env_steps, log)``, ``evaluate(n_episodes,
deterministic)``, ``save(path)`` and ``load(path)``; see :class:`Agent`.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from constrained_grpo.options import did_you_mean, merge_options
from constrained_grpo.schema import LOG_REQUIRED_KEYS, flatten_record

__all__ = [
    "AgentSpec",
    "Agent",
    "EvalResult",
    "LOG_REQUIRED_KEYS",
    "WARMSTART_CACHE_ENV",
    "agent_spec",
    "list_agents",
    "load_entry_point",
    "make_agent",
    "register_agent",
    "resolve_config",
    "flatten_log_record",
    "validate_log_record",
]

#: Packages that register built-in algorithms when imported.
BUILTIN_AGENT_PACKAGES: tuple[str, ...] = ("constrained_grpo.agents", "constrained_grpo.baselines", "constrained_grpo.references")

#: Environment variable naming a directory where agents cache what is costly to build and
#: the same for every run of a task and seed (the text agents' supervised warm start); the
#: harness sets it to the results root's ``.warmstart/`` while it builds a run's agent.
WARMSTART_CACHE_ENV = "CGRPO_WARMSTART_CACHE"

#: The one flattener of a log record (``schema.flatten_record``), under its registry name.
flatten_log_record = flatten_record


@dataclass(frozen=True)
class EvalResult:
    """Per-episode results of ``Agent.evaluate``.

    Attributes:
        returns: shape ``(n,)``, undiscounted episodic return.
        costs: shape ``(n, K)``, episodic cost per constraint.
        lengths: shape ``(n,)``, episode lengths.
    """

    returns: np.ndarray
    costs: np.ndarray
    lengths: np.ndarray

    def __post_init__(self) -> None:
        n = len(self.returns)
        if self.costs.ndim != 2 or self.costs.shape[0] != n or len(self.lengths) != n:
            raise ValueError(
                f"EvalResult shapes disagree: returns {np.shape(self.returns)}, "
                f"costs {np.shape(self.costs)} (want (n, K)), lengths {np.shape(self.lengths)}"
            )


@runtime_checkable
class Agent(Protocol):
    """What every registered algorithm offers."""

    def learn(self, total_env_steps: int, log: Callable[[dict[str, Any]], None] | None = None) -> Any:
        """Train for ``total_env_steps`` env steps, calling ``log(record)`` every iteration."""

    def evaluate(self, n_episodes: int, deterministic: bool = True) -> EvalResult:
        """Run ``n_episodes`` evaluation episodes."""

    def save(self, path: str | Path) -> None:
        """Write weights (safe format) and config under ``path``."""


@dataclass(frozen=True)
class AgentSpec:
    """A registered algorithm.

    Attributes:
        name: registry key, e.g. ``"cgrpo"``.
        entry_point: ``"module:attr"`` or a callable ``(env_id, seed, **config) -> Agent``.
        defaults: config values this name fixes (a variant is a name plus defaults).
        description: one line for ``cgrpo algos`` and the leaderboard.
        constrained: whether the agent uses the constraints (has multipliers).
        lambda_in_reward_units: whether its multiplier lambda_k weighs cost k against the
            reward in the reward's own units (reward - sum_k lambda_k cost_k, as in ScRew or
            PPO-Lagrangian), so that lambda is comparable with the LP's optimal dual lambda*;
            False where lambda weighs standardized advantages (ScAdv) or there is none.
        reference: a fixed reference policy (``constrained_grpo.references``), shown on the
            leaderboard as an unranked anchor.
        acts_on_text: whether it can act on a text task (a language-model policy, the GRPO
            family); the benchmark presets run only such algorithms on text tasks.
    """

    name: str
    entry_point: str | Callable[..., Any]
    defaults: Mapping[str, Any] = field(default_factory=dict)
    description: str = ""
    constrained: bool = True
    lambda_in_reward_units: bool = False
    reference: bool = False
    acts_on_text: bool = False


_REGISTRY: dict[str, AgentSpec] = {}
_builtins_loaded = False


def register_agent(
    name: str,
    entry_point: str | Callable[..., Any],
    *,
    defaults: Mapping[str, Any] | None = None,
    description: str = "",
    constrained: bool = True,
    lambda_in_reward_units: bool = False,
    reference: bool = False,
    acts_on_text: bool = False,
    override: bool = False,
) -> AgentSpec:
    """Register an algorithm; registering the same spec twice is a no-op."""
    spec = AgentSpec(name, entry_point, dict(defaults or {}), description, constrained, lambda_in_reward_units,
                     reference, acts_on_text)
    old = _REGISTRY.get(name)
    if old is not None and old != spec and not override:
        raise ValueError(
            f"algorithm {name!r} is already registered with entry point {old.entry_point!r}; "
            "pick another name or pass override=True"
        )
    _REGISTRY[name] = spec
    return spec


def _load_builtins() -> None:
    global _builtins_loaded
    if _builtins_loaded:
        return
    _builtins_loaded = True
    for package in BUILTIN_AGENT_PACKAGES:
        try:
            importlib.import_module(package)
        except ModuleNotFoundError as err:
            # A package that is not installed registers nothing; a broken import inside it is real.
            if err.name != package:
                raise


def list_agents() -> list[str]:
    """Names of every registered algorithm, sorted."""
    _load_builtins()
    return sorted(_REGISTRY)


def load_entry_point(entry_point: str | Callable[..., Any]) -> Callable[..., Any]:
    """Resolve ``"module:attr"`` (or ``"module.attr"``) to the object it names."""
    if callable(entry_point):
        return entry_point
    module_name, sep, attr = entry_point.partition(":")
    if not sep:
        module_name, _, attr = entry_point.rpartition(".")
    if not module_name or not attr:
        raise ValueError(f"entry point {entry_point!r} is not of the form 'package.module:name'")
    module = importlib.import_module(module_name)
    try:
        return getattr(module, attr)
    except AttributeError:
        raise ValueError(f"module {module_name!r} has no attribute {attr!r}") from None


def agent_spec(name: str) -> AgentSpec:
    """The spec registered under ``name``; a dotted path gives an ad-hoc spec."""
    _load_builtins()
    if name in _REGISTRY:
        return _REGISTRY[name]
    if ":" in name:
        return AgentSpec(name, name, {}, f"custom algorithm {name}")
    raise KeyError(
        f"unknown algorithm {name!r}{did_you_mean([name], _REGISTRY)}; registered: {sorted(_REGISTRY)} "
        "(or pass a dotted path 'package.module:factory')"
    )


def make_agent(name: str, env_id: str, seed: int = 0, **config: Any) -> Agent:
    """Build the agent registered as ``name`` for task ``env_id``.

    ``config`` overrides the spec's defaults; the factory validates it (a misspelled
    option is an error).
    """
    spec = agent_spec(name)
    factory = load_entry_point(spec.entry_point)
    merged = merge_options(spec.defaults, config)
    return factory(env_id, seed=seed, **merged)


def resolve_config(name: str, env_id: str, **config: Any) -> dict[str, Any]:
    """The whole configuration ``make_agent(name, env_id, **config)`` would build, as JSON
    values, validated without building the agent (a misspelled option or a value of the
    wrong type raises the agent's one-line error).

    The factory resolves it when it offers ``factory.resolve_config(env_id, **options)``
    (every built-in family does); otherwise the options as given are the configuration.
    """
    spec = agent_spec(name)
    factory = load_entry_point(spec.entry_point)
    merged = merge_options(spec.defaults, config)
    resolver = getattr(factory, "resolve_config", None)
    if callable(resolver):
        return dict(resolver(env_id, **merged))
    _check_options(name, factory, env_id, merged)
    return {"config": merged}


def _check_options(name: str, factory: Any, env_id: str, options: Mapping[str, Any]) -> None:
    """The options bound to the factory's signature as :func:`make_agent` calls it, or a
    one-line ``ValueError`` naming the option and the ones it takes (a factory without
    ``resolve_config``, e.g. a user's ``module:Class``; one taking ``**kwargs`` is not checked)."""
    import inspect

    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):  # a builtin or a C callable: nothing to read
        return
    try:
        signature.bind(env_id, seed=0, **options)
    except TypeError as err:
        takes = [p for p in signature.parameters if p not in ("self", "env_id", "seed")
                 and signature.parameters[p].kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)]
        raise ValueError(f"{name}: {err}; it takes {takes}") from None


def validate_log_record(record: Mapping[str, Any], num_constraints: int | None = None) -> None:
    """Check a ``learn`` log record against Contract 2; raise naming what is wrong."""
    missing = [k for k in LOG_REQUIRED_KEYS if k not in record]
    if missing:
        raise ValueError(f"log record misses {missing}; it has {sorted(record)}")
    for key in ("env_steps", "wall_s", "ep_return"):
        value = record[key]
        if not isinstance(value, (int, float, np.integer, np.floating)):
            raise ValueError(f"log record {key}={value!r} must be a number")
    if num_constraints is not None:
        if len(record["ep_cost"]) != num_constraints:
            raise ValueError(
                f"log record ep_cost has {len(record['ep_cost'])} entries, task has {num_constraints}"
            )
        if len(record["multipliers"]) not in (0, num_constraints):
            raise ValueError(
                f"log record multipliers has {len(record['multipliers'])} entries; "
                f"want 0 (unconstrained) or {num_constraints}"
            )
    if not math.isfinite(float(record["env_steps"])):
        raise ValueError(f"log record env_steps={record['env_steps']!r} is not finite")
