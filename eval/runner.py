"""Running one benchmark run: train, evaluate, save, and write its directory (Contract 3).

:func:`execute_run` is what ``cgrpo train`` calls in-process and what every sweep
worker (local process or Ray task) calls; it never raises for a failure of the run
itself, but records the traceback in ``error.txt`` and returns a failed
:class:`RunOutcome`, so that one crashed run cannot take the sweep down.
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
import os
import platform
import random
import shlex
import socket
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from constrained_grpo.constraints import Constraint, get_constraints
from constrained_grpo.registry import EvalResult, agent_spec, make_agent
from constrained_grpo.tasks import make_env
from constrained_grpo.eval import storage
from constrained_grpo.eval.storage import (
    AGENT_DIR,
    CONFIG_FILE,
    DONE_FILE,
    ERROR_FILE,
    EVAL_FILE,
    PROGRESS_FILE,
    RUNNING_FILE,
)

__all__ = [
    "CONFIG_SCHEMA",
    "RunOutcome",
    "RunSpec",
    "TaskMeta",
    "environment_versions",
    "execute_run",
    "git_commit",
    "run_config",
    "task_meta",
]

#: Version of the ``config.json`` layout; the loader refuses other versions.
CONFIG_SCHEMA = 1

_VERSION_PACKAGES = {
    "numpy": "numpy",
    "torch": "torch",
    "gymnasium": "gymnasium",
    "stable_baselines3": "stable-baselines3",
    "constrained_grpo": "constrained-grpo",
    "pandas": "pandas",
    "scipy": "scipy",
}


@dataclass(frozen=True)
class RunSpec:
    """One cell of a sweep: everything that determines a run's results.

    Attributes:
        task: registered task id, e.g. ``"Grid/HazardFuel-v0"``.
        algo: registered algorithm name (or a dotted path ``"pkg.mod:factory"``).
        seed: seed passed to ``make_agent``; also seeds ``random``, numpy and torch.
        steps: ``total_env_steps`` given to ``agent.learn``.
        eval_episodes: episodes of the final deterministic evaluation.
        config: agent config overrides (``make_agent(**config)``), JSON values only.
        save_agent: whether to call ``agent.save`` into ``agent/``.
    """

    task: str
    algo: str
    seed: int
    steps: int
    eval_episodes: int = 20
    config: Mapping[str, Any] = field(default_factory=dict)
    save_agent: bool = True

    def __post_init__(self) -> None:
        if self.steps < 1:
            raise ValueError(f"steps must be >= 1, got {self.steps}")
        if self.eval_episodes < 1:
            raise ValueError(f"eval_episodes must be >= 1, got {self.eval_episodes}")
        # Round-trip through JSON now, so that a config that cannot be recorded fails early.
        object.__setattr__(self, "config", json.loads(json.dumps(dict(self.config), sort_keys=True)))

    @property
    def key(self) -> str:
        """``task/algo/seed_n``: the run's name in messages."""
        return f"{self.task}/{self.algo}/seed_{self.seed}"

    def run_dir(self, out: str | Path) -> Path:
        """The run's directory under ``out``."""
        return storage.run_dir(out, self.task, self.algo, self.seed)

    def to_dict(self) -> dict[str, Any]:
        """The fields as JSON values (what ``config.json["run"]`` holds)."""
        return asdict(self) | {"config": dict(self.config)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "RunSpec":
        """Inverse of :meth:`to_dict`."""
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})

    def same_results_as(self, other: Mapping[str, Any]) -> bool:
        """Whether a recorded ``config.json["run"]`` describes the same run (``save_agent`` aside)."""
        mine = self.to_dict()
        return all(mine[k] == other.get(k) for k in ("task", "algo", "seed", "steps", "eval_episodes", "config"))

    def command(self, out: str | Path) -> str:
        """The ``cgrpo train`` command that reruns exactly this run."""
        args = ["cgrpo", "train", self.task, self.algo, "--seed", str(self.seed), "--steps", str(self.steps)]
        args += ["--eval-episodes", str(self.eval_episodes), "--out", str(out)]
        for name, value in sorted(self.config.items()):
            args += [f"--config.{name}", json.dumps(value)]
        if not self.save_agent:
            args.append("--no-save")
        return shlex.join(args)


@dataclass(frozen=True)
class TaskMeta:
    """What the metrics need to know about a task.

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


def _suite_of(task: str) -> str:
    try:
        from constrained_grpo.envs import task_info

        return task_info(task).family
    except Exception:  # a task outside the suite's table: its namespace, if any
        return task.split("/")[0].lower() if "/" in task else "custom"


@functools.lru_cache(maxsize=None)
def task_meta(task: str, with_optimum: bool = True) -> TaskMeta:
    """Constraints, family and (if the env offers ``optimum()``) the exact optimum of ``task``.

    Solving the optimum is a linear program that takes seconds (minutes for the largest
    grids), so a sweep calls this once per task in the driver and hands it to the runs.
    """
    env = make_env(task)
    try:
        constraints = get_constraints(env)
        solver = getattr(env.unwrapped, "optimum", None) if with_optimum else None
        opt = solver() if callable(solver) else None
    finally:
        env.close()
    if opt is None:
        return TaskMeta(task, _suite_of(task), constraints)
    return TaskMeta(
        task,
        _suite_of(task),
        constraints,
        float(opt.constrained_return),
        float(opt.unconstrained_return),
        tuple(float(m) for m in opt.multipliers),
    )


@functools.lru_cache(maxsize=1)
def environment_versions() -> dict[str, str | None]:
    """Versions of Python and of the packages that shape results."""
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for key, dist in _VERSION_PACKAGES.items():
        try:
            versions[key] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            versions[key] = None
    return versions


@functools.lru_cache(maxsize=1)
def git_commit() -> dict[str, Any] | None:
    """``{"commit": sha, "dirty": bool}`` of the source checkout, or None outside git."""
    root = Path(__file__).resolve().parent.parent
    try:
        sha = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
        status = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return {"commit": sha, "dirty": bool(status.strip())}


def run_config(spec: RunSpec, out: str | Path, meta: TaskMeta, provenance: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The content of ``config.json``: the run, its task, the algorithm, versions, commit, command."""
    spec_info = agent_spec(spec.algo)
    prov = dict(provenance) if provenance is not None else {
        "versions": environment_versions(),
        "git": git_commit(),
        "invoked_as": shlex.join([Path(sys.argv[0]).name, *sys.argv[1:]]),
    }
    try:
        task_kwargs = dict(make_env_spec_kwargs(spec.task))
    except Exception:  # the kwargs are informative; the task id is what reruns it
        task_kwargs = {}
    return {
        "schema": CONFIG_SCHEMA,
        "run": spec.to_dict(),
        "task": meta.to_dict() | {"kwargs": task_kwargs},
        "algo": {
            "name": spec.algo,
            "description": spec_info.description,
            "constrained": spec_info.constrained,
            "defaults": dict(spec_info.defaults),
            "config": dict(spec.config),
        },
        "command": spec.command(out),
        **prov,
    }


def make_env_spec_kwargs(task: str) -> Mapping[str, Any]:
    """The registered constructor keywords of ``task`` (``gymnasium.spec(task).kwargs``)."""
    import gymnasium as gym

    from constrained_grpo.tasks import ensure_tasks_registered

    ensure_tasks_registered()
    return gym.spec(task).kwargs


@dataclass(frozen=True)
class RunOutcome:
    """What an attempt of a run came to.

    Attributes:
        key: the run's ``task/algo/seed_n``.
        status: ``"done"``, ``"failed"`` or ``"busy"`` (another process holds the run).
        attempt: 1 for the first try, 2 for the retry, ...
        wall_s: seconds the attempt took.
        error: the traceback of a failed attempt.
    """

    key: str
    status: str
    attempt: int
    wall_s: float
    error: str | None = None


def _seed_everything(seed: int) -> None:
    """Seed the global generators, torch's included, whichever process runs the run.

    (An agent that relied on global seeding would otherwise differ between ``cgrpo
    train``, where torch may not be imported yet, and a sweep worker, where it is.)
    """
    import torch

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def _limit_threads() -> None:
    """One intra-op thread: the sweep parallelises over runs, and results then do not
    depend on the machine's core count (a multi-threaded reduction may sum in another order)."""
    import torch

    if torch.get_num_threads() != 1:
        torch.set_num_threads(1)


def _write_eval(path: Path, result: EvalResult, names: list[str]) -> int:
    returns = np.asarray(result.returns, dtype=np.float64)
    costs = np.asarray(result.costs, dtype=np.float64)
    lengths = np.asarray(result.lengths)
    if costs.shape != (len(returns), len(names)):
        raise ValueError(
            f"evaluate() returned costs of shape {costs.shape}; the task has {len(names)} constraint(s) "
            f"{names}, so it must be ({len(returns)}, {len(names)})"
        )
    rows = [
        {"episode": i, "return": float(returns[i]), "length": int(lengths[i])}
        | {f"cost_{n}": float(costs[i, k]) for k, n in enumerate(names)}
        for i in range(len(returns))
    ]
    columns = ["episode", "return", "length", *[f"cost_{n}" for n in names]]
    storage.atomic_write_bytes(path, storage.csv_bytes(rows, columns))
    return len(rows)


def execute_run(
    spec: RunSpec,
    out: str | Path,
    *,
    meta: TaskMeta | None = None,
    provenance: Mapping[str, Any] | None = None,
    attempt: int = 1,
    on_progress: Callable[[int], None] | None = None,
    recorded_out: str | Path | None = None,
) -> RunOutcome:
    """Train, evaluate and save one run into ``spec.run_dir(out)``.

    The directory is cleared of a previous incomplete attempt, ``config.json`` is
    written first and ``done.json`` last. ``on_progress(env_steps)`` is called after
    every log record (for progress bars). A failure is caught, its traceback written to
    ``error.txt`` and returned in the outcome. ``recorded_out`` is the results root named
    in the rerun command (default ``out``; a Ray task writes to a scratch ``out``).
    """
    start = time.perf_counter()
    path = spec.run_dir(out)
    try:
        with storage.run_lock(path):
            if storage.is_complete(path):
                return RunOutcome(spec.key, "done", attempt, 0.0)
            storage.clear_run_dir(path)
            try:
                _execute(spec, out if recorded_out is None else recorded_out, path, meta, provenance, attempt, on_progress, start)
            except Exception:
                tb = traceback.format_exc()
                storage.atomic_write_text(path / ERROR_FILE, f"attempt {attempt}\n{tb}")
                return RunOutcome(spec.key, "failed", attempt, time.perf_counter() - start, tb)
    except storage.RunBusyError as err:
        return RunOutcome(spec.key, "busy", attempt, time.perf_counter() - start, str(err))
    return RunOutcome(spec.key, "done", attempt, time.perf_counter() - start)


def _execute(
    spec: RunSpec,
    out: str | Path,
    path: Path,
    meta: TaskMeta | None,
    provenance: Mapping[str, Any] | None,
    attempt: int,
    on_progress: Callable[[int], None] | None,
    start: float,
) -> None:
    meta = meta if meta is not None else task_meta(spec.task)
    names = meta.constraint_names
    storage.atomic_write_json(path / CONFIG_FILE, run_config(spec, out, meta, provenance))
    storage.atomic_write_json(
        path / RUNNING_FILE,
        {"pid": os.getpid(), "host": socket.gethostname(), "attempt": attempt, "started_unix": time.time()},
    )
    _limit_threads()
    _seed_everything(spec.seed)
    agent = make_agent(spec.algo, spec.task, seed=spec.seed, **spec.config)
    _limit_threads()

    def report(row: Mapping[str, Any]) -> None:
        if on_progress is not None:
            try:
                on_progress(int(row["env_steps"]))
            except Exception:  # a broken progress channel must never fail the run
                pass

    log = storage.ProgressLog(path / PROGRESS_FILE, names, on_record=report)
    agent.learn(spec.steps, log)
    if not log.rows:
        raise RuntimeError(
            f"{spec.algo}.learn({spec.steps}) logged no iteration; Contract 2 requires log(record) "
            "once per iteration (docs/architecture.md)"
        )
    log.close()
    n_eval = _write_eval(path / EVAL_FILE, agent.evaluate(spec.eval_episodes, deterministic=True), names)
    if spec.save_agent:
        agent.save(path / AGENT_DIR)
    done = {
        "attempt": attempt,
        "wall_s": time.perf_counter() - start,
        "env_steps": int(log.rows[-1]["env_steps"]),
        "progress_rows": len(log.rows),
        "eval_rows": n_eval,
        "host": socket.gethostname(),
    }
    (path / RUNNING_FILE).unlink(missing_ok=True)
    (path / ERROR_FILE).unlink(missing_ok=True)
    storage.atomic_write_json(path / DONE_FILE, done)
