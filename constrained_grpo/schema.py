"""The record schema (docs/architecture.md, Contract 3): one place that says what a run writes.

* :class:`TaskMeta`: what the metrics need to know about a task (``config.json["task"]``).
* ``CONFIG_SCHEMA`` / ``CONFIG_KEYS``: the version and the top-level keys of ``config.json``.
* :func:`flatten_record`: THE one map from a ``learn`` log record (Contract 2) to a row of
  ``progress.csv``; :func:`progress_columns` orders that file's header.
* :func:`eval_columns`: the header of ``eval.csv`` (one row per (policy, episode)).
* ``CORE_COLUMNS``: the leading columns of the long table; a train row is keyed by
  ``iteration``, an eval row by ``(policy, episode)`` (``kind`` says which).

Agents emit the canonical record keys below and nothing else renames them: the reader
accepts exactly these columns. The module imports no trainer (numpy and the
``Constraint`` dataclass only), so the read side can score committed tables without torch.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from constrained_grpo.constraints import Constraint

__all__ = [
    "CONFIG_KEYS",
    "CONFIG_SCHEMA",
    "CORE_COLUMNS",
    "EVAL_POLICIES",
    "LOG_REQUIRED_KEYS",
    "RECORD_COLUMNS",
    "RESERVED_PREFIXES",
    "TaskMeta",
    "eval_columns",
    "flatten_record",
    "progress_columns",
]

#: Version of the ``config.json`` layout; the loader refuses other versions.
CONFIG_SCHEMA = 1
#: Top-level keys of ``config.json`` (``runner.run_config``); ``eval`` is the evaluation protocol.
CONFIG_KEYS: tuple[str, ...] = ("schema", "run", "task", "algo", "eval", "command", "versions", "git", "invoked_as")

#: Keys every ``learn`` log record carries (Contract 2).
LOG_REQUIRED_KEYS: tuple[str, ...] = ("env_steps", "wall_s", "ep_return", "ep_cost", "multipliers")
#: Record key -> progress.csv column (prefix, for the K-vectors ``ep_cost`` and ``multipliers``).
#: Every other key keeps its name: a scalar ``x`` is column ``x``, a vector ``x`` columns
#: ``x_<name>`` (K entries: the constraints; K + 1: ``reward`` then the constraints; else
#: ``x_<i>``), a mapping ``x`` columns ``x_<key>``. The agent's own ``iteration`` counter is
#: stored as ``agent_iteration``: the table numbers its rows itself.
RECORD_COLUMNS: Mapping[str, str] = {"ep_return": "return", "ep_cost": "cost", "multipliers": "lambda",
                                     "iteration": "agent_iteration"}

#: Column prefixes the long table reserves: ``cost_<name>`` and ``lambda_<name>`` for the
#: task's constraints, ``eff_w_<component>`` for ``reward`` and the constraints. An agent's own
#: key must not fall in them (PPO-Lagrangian's cost critic logs ``value_loss_cost``, not
#: ``cost_value_loss``), or the reader would take it for a constraint's column.
RESERVED_PREFIXES: tuple[str, ...] = ("cost_", "lambda_", "eff_w_")

#: The final policy is evaluated twice on the same episodes: sampling its actions (the
#: primary evaluation: a constrained optimum is in general a mixture of routes, which only
#: a stochastic policy represents) and taking the mode (what a greedy deployment does).
EVAL_POLICIES: tuple[str, ...] = ("sampled", "deterministic")

#: Fixed leading columns of the long table, in order. ``iteration``: the training iteration
#: (train rows; on eval rows the last one, whose policy was evaluated); ``episode``: the
#: evaluation episode index per policy (eval rows only, empty on train rows).
CORE_COLUMNS: tuple[str, ...] = (
    "suite", "task", "algo", "seed", "kind", "policy", "iteration", "episode", "reset_seed", "env_steps", "wall_s",
    "return", "length",
)


def progress_columns(constraint_names: Sequence[str], seen: Sequence[str]) -> list[str]:
    """Header of ``progress.csv``: iteration, env_steps, wall_s, return, cost_*, lambda_*
    (those present in ``seen``), then the rest of ``seen`` in first-seen order."""
    first = ["iteration", "env_steps", "wall_s", "return"]
    first += [f"cost_{n}" for n in constraint_names] + [f"lambda_{n}" for n in constraint_names]
    head = [c for c in first if c in seen]
    return head + [c for c in seen if c not in head]


def eval_columns(constraint_names: Sequence[str]) -> list[str]:
    """Header of ``eval.csv``: episode, policy, reset_seed, return, length, cost_<name>..."""
    return ["episode", "policy", "reset_seed", "return", "length", *[f"cost_{n}" for n in constraint_names]]


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    return repr(obj)


def _scalar(value: Any) -> Any:
    if isinstance(value, (bool, np.bool_)):
        return int(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value)
    if value is None or isinstance(value, str):
        return value
    item = getattr(value, "item", None)  # 0-d numpy arrays and torch tensors
    if callable(item):
        try:
            return _scalar(item())
        except (TypeError, ValueError, RuntimeError):
            pass
    return str(value)


def _sequence_names(n: int, constraint_names: Sequence[str]) -> list[str]:
    """Column suffixes of a logged vector of length ``n``: K entries name the constraints,
    K + 1 are (reward, constraints...), the component order of the GRPO arrays; else numbered."""
    k = len(constraint_names)
    if n == k:
        return list(constraint_names)
    if n == k + 1:
        return ["reward", *constraint_names]
    return [str(i) for i in range(n)]


def flatten_record(record: Mapping[str, Any], constraint_names: Sequence[str]) -> dict[str, Any]:
    """One ``learn`` log record as flat ``progress.csv`` cells (``RECORD_COLUMNS``); a column
    in a reserved prefix that names no component (``RESERVED_PREFIXES``) is an error.

    >>> flatten_record({"iteration": 3, "env_steps": 8, "wall_s": 0.5, "ep_return": 1.0, "ep_cost": [0.0, 3.0],
    ...                 "multipliers": [], "eff_w": [1.0, 0.5, 0.25]}, ["hazard", "fuel"])
    ... # doctest: +NORMALIZE_WHITESPACE
    {'agent_iteration': 3, 'env_steps': 8, 'wall_s': 0.5, 'return': 1.0, 'cost_hazard': 0.0, 'cost_fuel': 3.0,
     'eff_w_reward': 1.0, 'eff_w_hazard': 0.5, 'eff_w_fuel': 0.25}
    """
    flat: dict[str, Any] = {}

    def put(key: str, value: Any) -> None:
        if isinstance(value, Mapping):
            for sub, v in value.items():
                put(f"{key}_{sub}", v)
            return
        if hasattr(value, "tolist") and np.ndim(value) > 0:
            value = np.asarray(value).tolist()
        if isinstance(value, (list, tuple)):
            if any(isinstance(v, (list, tuple, Mapping)) for v in value):
                flat[key] = json.dumps(value, default=_json_default)
                return
            for suffix, v in zip(_sequence_names(len(value), constraint_names), value):
                flat[f"{key}_{suffix}"] = _scalar(v)
            return
        flat[key] = _scalar(value)

    for key, value in record.items():
        put(RECORD_COLUMNS.get(key, key), value)
    components = {"cost_": list(constraint_names), "lambda_": list(constraint_names),
                  "eff_w_": ["reward", *constraint_names]}
    for column in flat:
        for prefix in RESERVED_PREFIXES:
            if column.startswith(prefix) and column[len(prefix):] not in components[prefix]:
                raise ValueError(
                    f"log record column {column!r} falls in the reserved {prefix}<name> columns but names none "
                    f"of {components[prefix]}; rename the key so that it does not start with {prefix!r}"
                )
    return flat


@dataclass(frozen=True)
class TaskMeta:
    """What the metrics need to know about a task (``config.json["task"]``).

    Attributes:
        task: task id.
        suite: the task family (``gridworld``, ...): the stratum of cross-task aggregates.
        constraints: the task's constraints (names and limits d_k).
        optimum_return: exact constrained optimum R*, where the task provides one.
        unconstrained_return: exact unconstrained optimum, where provided.
        optimal_multipliers: lambda*_k (LP duals), where provided.
    """

    task: str
    suite: str
    constraints: tuple[Constraint, ...]
    optimum_return: float | None = None
    unconstrained_return: float | None = None
    optimal_multipliers: tuple[float, ...] | None = None

    @property
    def constraint_names(self) -> list[str]:
        return [c.name for c in self.constraints]

    @property
    def limits(self) -> dict[str, float]:
        return {c.name: c.limit for c in self.constraints}

    def to_dict(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "suite": self.suite,
            "constraints": [asdict(c) for c in self.constraints],
            "optimum": None
            if self.optimum_return is None
            else {
                "constrained_return": self.optimum_return,
                "unconstrained_return": self.unconstrained_return,
                "multipliers": None if self.optimal_multipliers is None else list(self.optimal_multipliers),
            },
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "TaskMeta":
        opt = data.get("optimum") or {}
        mult = opt.get("multipliers")
        return cls(
            task=data["task"],
            suite=data["suite"],
            constraints=tuple(Constraint(**c) for c in data["constraints"]),
            optimum_return=opt.get("constrained_return"),
            unconstrained_return=opt.get("unconstrained_return"),
            optimal_multipliers=None if mult is None else tuple(float(m) for m in mult),
        )
