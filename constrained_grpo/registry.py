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
import inspect
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Protocol, runtime_checkable

import numpy as np

from constrained_grpo.options import did_you_mean, merge_options
from constrained_grpo.schema import LOG_REQUIRED_KEYS, flatten_record

__all__ = [
    "AgentSpec",
    "Agent",
    "ConfiguredFactory",
    "ResolvedConfig",
    "build_agent",
    "resolve",
    "AgentContractError",
    "AgentMethods",
    "OPTIONAL_METHODS",
    "OptionalAgentMethods",
    "agent_methods",
    "check_agent_class",
    "EvalResult",
    "LOG_REQUIRED_KEYS",
    "WARMSTART_CACHE_ENV",
    "DEPLOY_ALIAS_SUFFIXES",
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

#: An alias's suffix and the deployment rule it sets (:attr:`AgentSpec.alias_of`): ``<learner>-best``
#: and ``<learner>-mix`` name a learner's runs deployed by best-feasible and tail-mixture
#: (``constrained_grpo.deploy``), GRPO variants and SB3-based learners alike.
DEPLOY_ALIAS_SUFFIXES: dict[str, str] = {"best": "best-feasible", "mix": "tail-mixture"}


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
    """What every registered algorithm offers (Contract 2).

    Besides these three, the harness uses the optional methods of :data:`OPTIONAL_METHODS`
    where an agent defines them, called exactly as their signatures there say; an algorithm
    whose method of one of those names takes other arguments is refused when it is
    registered, imported or built (:func:`check_agent_class`).
    """

    def learn(self, total_env_steps: int, log: Callable[[dict[str, Any]], None] | None = None) -> Any:
        """Train for ``total_env_steps`` env steps, calling ``log(record)`` every iteration."""

    def evaluate(self, n_episodes: int, deterministic: bool = True) -> EvalResult:
        """Run ``n_episodes`` evaluation episodes."""

    def save(self, path: str | Path) -> None:
        """Write weights (safe format) and config under ``path``."""


class OptionalAgentMethods(Protocol):
    """The optional evaluation methods, with the signatures the harness calls them by.

    ``act(obs, deterministic)``: the action for one observation (the mode when
    ``deterministic``); the harness evaluates a control task through it (or ``act_batch``).
    ``act_batch(obs, deterministic, uniforms)``: actions for a batch ``(B, ...)``; a sampled
    action is the inverse transform of the episode's draws ``uniforms`` ``(B, D)``, so that an
    episode does not depend on its batch (:mod:`constrained_grpo.sampling`).
    ``begin_episodes(reset_seeds)``: the next ``act_batch`` rows start episodes with these
    reset seeds (a mixture picks its member per episode from them).
    ``seed_evaluation(seed)``: restart the generator that ``act(obs, False)`` samples with.
    ``evaluate(n_episodes, deterministic, seed=...)``: a text agent's evaluation over the
    harness's problem seeds (the ``seed`` keyword is what makes it the harness's).
    ``wrap_eval_env(env)`` / ``wrap_eval_vec_env(vec)``: the evaluation env (or its batched
    twin) with the observations the policy needs beyond the task's own (Saute's budget).
    """

    def act(self, obs: Any, deterministic: bool = True) -> Any: ...

    def act_batch(self, obs: np.ndarray, deterministic: bool, uniforms: np.ndarray) -> np.ndarray: ...

    def begin_episodes(self, reset_seeds: np.ndarray) -> None: ...

    def seed_evaluation(self, seed: int) -> None: ...

    def wrap_eval_env(self, env: Any) -> Any: ...

    def wrap_eval_vec_env(self, vec: Any) -> Any: ...


#: Every method the harness calls, with the call it makes: ``(positional args, keyword args)``
#: as placeholders that :func:`check_agent_class` binds against the method's signature.
OPTIONAL_METHODS: dict[str, tuple[tuple[str, ...], tuple[str, ...], str]] = {
    "learn": (("total_env_steps", "log"), (), "learn(total_env_steps, log)"),
    "save": (("path",), (), "save(path)"),
    "evaluate": (("n_episodes",), ("deterministic",), "evaluate(n_episodes, deterministic=...)"),
    "act": (("obs",), ("deterministic",), "act(obs, deterministic=...)"),
    "act_batch": (("obs", "deterministic", "uniforms"), (), "act_batch(obs, deterministic, uniforms)"),
    "begin_episodes": (("reset_seeds",), (), "begin_episodes(reset_seeds)"),
    "seed_evaluation": (("seed",), (), "seed_evaluation(seed)"),
    "wrap_eval_env": (("env",), (), "wrap_eval_env(env)"),
    "wrap_eval_vec_env": (("vec",), (), "wrap_eval_vec_env(vec)"),
}


class AgentContractError(TypeError):
    """An algorithm's method cannot be called as the harness calls it (one line, naming it)."""


@dataclass(frozen=True)
class AgentMethods:
    """The methods of one agent that the harness may call, each ``None`` where the agent
    lacks it; built by :func:`agent_methods`, which checks every signature first."""

    act: Callable[..., Any] | None
    act_batch: Callable[..., np.ndarray] | None
    evaluate: Callable[..., EvalResult] | None
    seeded_evaluate: bool  # evaluate takes the harness's ``seed=`` (a text agent)
    begin_episodes: Callable[[np.ndarray], None] | None
    seed_evaluation: Callable[[int], None] | None
    wrap_eval_env: Callable[[Any], Any] | None
    wrap_eval_vec_env: Callable[[Any], Any] | None


def _binds(fn: Callable[..., Any], args: Sequence[str], kwargs: Sequence[str]) -> bool:
    try:
        inspect.signature(fn).bind(*args, **{k: None for k in kwargs})
    except TypeError:
        return False
    except ValueError:  # no signature to read (a builtin): trust it
        return True
    return True


def check_agent_class(cls: type, name: str | None = None) -> None:
    """Refuse, in one line, a class whose method named as one of :data:`OPTIONAL_METHODS`
    cannot be called as the harness calls it; ``name`` is the algorithm's name for the message."""
    label = name or f"{cls.__module__}:{cls.__qualname__}"
    for method, (args, kwargs, call) in OPTIONAL_METHODS.items():
        fn = getattr(cls, method, None)
        if fn is None:
            continue
        if not callable(fn):
            raise AgentContractError(f"algorithm {label}: {method} is not a method; define it as {call} or rename it")
        bound = fn if isinstance(inspect.getattr_static(cls, method, None), (staticmethod, classmethod)) else _unbound(fn)
        if not _binds(bound, args, kwargs):
            raise AgentContractError(
                f"algorithm {label}: {cls.__qualname__}.{method}{_signature(fn)} cannot be called as the harness "
                f"calls it, {call}; change its parameters to match or rename the method"
            )


def _unbound(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A plain function of a class, with ``self`` bound to a placeholder."""
    import functools

    return functools.partial(fn, None) if inspect.isfunction(fn) else fn


def _signature(fn: Callable[..., Any]) -> str:
    try:
        return str(inspect.signature(fn))
    except (TypeError, ValueError):
        return "(...)"


def agent_methods(agent: Any) -> AgentMethods:
    """The harness's view of ``agent``: its optional methods, each checked against
    :data:`OPTIONAL_METHODS` (a wrong signature is a one-line ``TypeError``)."""
    check_agent_class(type(agent))

    def get(method: str) -> Callable[..., Any] | None:
        fn = getattr(agent, method, None)
        return fn if callable(fn) else None

    evaluate = get("evaluate")
    return AgentMethods(
        act=get("act"),
        act_batch=get("act_batch"),
        evaluate=evaluate,
        seeded_evaluate=evaluate is not None and _binds(evaluate, ("n_episodes",), ("deterministic", "seed")),
        begin_episodes=get("begin_episodes"),
        seed_evaluation=get("seed_evaluation"),
        wrap_eval_env=get("wrap_eval_env"),
        wrap_eval_vec_env=get("wrap_eval_vec_env"),
    )


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
        alias_of: for a convenience name that sets a deployment rule (``deploy``) on another
            algorithm, that algorithm: its runs are that algorithm's trainings, so it is not
            listed or ranked as an algorithm of its own (None: a learning algorithm).
    """

    name: str
    entry_point: str | Callable[..., Any]
    defaults: Mapping[str, Any] = field(default_factory=dict)
    description: str = ""
    constrained: bool = True
    lambda_in_reward_units: bool = False
    reference: bool = False
    acts_on_text: bool = False
    alias_of: str | None = None


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
    alias_of: str | None = None,
    override: bool = False,
) -> AgentSpec:
    """Register an algorithm; registering the same spec twice is a no-op. A class given as
    the entry point has its optional methods' signatures checked here (:func:`check_agent_class`)."""
    if isinstance(entry_point, type):
        check_agent_class(entry_point, name)
    spec = AgentSpec(name, entry_point, dict(defaults or {}), description, constrained, lambda_in_reward_units,
                     reference, acts_on_text, alias_of)
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


def list_agents(aliases: bool = True) -> list[str]:
    """Names of every registered algorithm, sorted; ``aliases=False``: the learning algorithms
    only (no name that sets a deployment rule on another, ``AgentSpec.alias_of``)."""
    _load_builtins()
    return sorted(n for n, s in _REGISTRY.items() if aliases or s.alias_of is None)


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
        target = getattr(module, attr)
    except AttributeError:
        raise ValueError(f"module {module_name!r} has no attribute {attr!r}") from None
    if isinstance(target, type):
        check_agent_class(target, entry_point)
    return target


def agent_spec(name: str) -> AgentSpec:
    """The spec registered under ``name``; a dotted path gives an ad-hoc spec."""
    _load_builtins()
    if name not in _REGISTRY and ":" not in name:
        # A run's worker process knows the --import modules only from $CGRPO_IMPORT: the names
        # they register exist there once they are imported (tasks.import_user_modules).
        from constrained_grpo.tasks import import_user_modules

        import_user_modules()
    if name in _REGISTRY:
        return _REGISTRY[name]
    if ":" in name:
        return AgentSpec(name, name, {}, f"custom algorithm {name}")
    raise KeyError(
        f"unknown algorithm {name!r}{did_you_mean([name], _REGISTRY)}; registered: {sorted(_REGISTRY)} "
        "(or pass a dotted path 'package.module:factory')"
    )


@runtime_checkable
class ConfiguredFactory(Protocol):
    """A factory that resolves a configuration before building (every built-in family):
    ``resolve_config(env_id, **options)`` gives the whole configuration as JSON values, and
    ``from_resolved(env_id, seed, resolved)`` builds the agent from exactly that mapping."""

    def __call__(self, env_id: str, seed: int = 0, **config: Any) -> Any: ...

    def resolve_config(self, env_id: str, **config: Any) -> dict[str, Any]: ...

    def from_resolved(self, env_id: str, seed: int, resolved: Mapping[str, Any]) -> Any: ...


@dataclass(frozen=True)
class ResolvedConfig:
    """A run's whole configuration, resolved once from its layers (the algorithm's registered
    defaults, its variant, its task family's and task's rows, the preset, the user's overrides):
    the one value an agent is built from (:func:`build_agent`) and what ``config.json`` records
    under ``algo.resolved`` (:meth:`to_dict`). ``values`` is read-only; :meth:`to_dict` gives a copy."""

    algo: str
    env_id: str
    values: Mapping[str, Any]

    def __post_init__(self) -> None:
        object.__setattr__(self, "values", _frozen(self.values))

    def to_dict(self) -> dict[str, Any]:
        """The configuration as plain (mutable) dicts and lists."""
        return _thawed(self.values)


def _frozen(value: Any) -> Any:
    if isinstance(value, Mapping):
        return MappingProxyType({k: _frozen(v) for k, v in value.items()})
    if isinstance(value, list):
        return tuple(_frozen(v) for v in value)
    return value


def _thawed(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _thawed(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [_thawed(v) for v in value]
    return value


def resolve(name: str, env_id: str, **config: Any) -> ResolvedConfig:
    """The whole configuration of algorithm ``name`` on ``env_id`` with the user's ``config``,
    validated without building the agent (a misspelled option or a value of the wrong type
    raises the agent's one-line error). A :class:`ConfiguredFactory` resolves it; for any other
    factory the spec's defaults under the options given are the configuration."""
    spec = agent_spec(name)
    factory = load_entry_point(spec.entry_point)
    merged = merge_options(spec.defaults, config)
    if isinstance(factory, ConfiguredFactory):
        return ResolvedConfig(name, env_id, dict(factory.resolve_config(env_id, **merged)))
    _check_options(name, factory, env_id, merged)
    return ResolvedConfig(name, env_id, {"kind": "custom", "config": merged})


def build_agent(resolved: ResolvedConfig, seed: int = 0) -> Agent:
    """The agent of ``resolved`` with ``seed``: built from that configuration and nothing else."""
    factory = load_entry_point(agent_spec(resolved.algo).entry_point)
    if isinstance(factory, ConfiguredFactory):
        agent = factory.from_resolved(resolved.env_id, seed, resolved.to_dict())
    else:
        agent = factory(resolved.env_id, seed=seed, **resolved.to_dict()["config"])
    check_agent_class(type(agent), resolved.algo)  # a factory's product: its class is first seen here
    return agent


def make_agent(name: str, env_id: str, seed: int = 0, **config: Any) -> Agent:
    """Build the agent registered as ``name`` for task ``env_id``: :func:`build_agent` of
    :func:`resolve` (``config`` overrides the spec's defaults; a misspelled option is an error)."""
    return build_agent(resolve(name, env_id, **config), seed)


def resolve_config(name: str, env_id: str, **config: Any) -> dict[str, Any]:
    """:func:`resolve` as plain JSON values (what ``cgrpo algos NAME --task ID`` prints)."""
    return resolve(name, env_id, **config).to_dict()


def _check_options(name: str, factory: Any, env_id: str, options: Mapping[str, Any]) -> None:
    """The options bound to the factory's signature as :func:`build_agent` calls it, or a
    one-line ``ValueError`` naming the option and the ones it takes (a factory without
    ``resolve_config``, e.g. a user's ``module:Class``; one taking ``**kwargs`` is not checked)."""
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
