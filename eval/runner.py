"""Running one benchmark run: train, evaluate, save, and write its directory (Contract 3).

:func:`execute_run` is what ``cgrpo train`` calls in-process and what every sweep
worker (local process or Ray task) calls; it never raises for a failure of the run
itself, but records the traceback in ``error.txt`` and returns a failed
:class:`RunOutcome`, so that one crashed run cannot take the sweep down.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import json
import os
import platform
import random
import shlex
import shutil
import socket
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from constrained_grpo.constraints import get_constraints, override_limits
from constrained_grpo.deploy import upgrade_recorded
from constrained_grpo.registry import WARMSTART_CACHE_ENV, EvalResult, ResolvedConfig, agent_spec, build_agent, resolve, resolve_config
from constrained_grpo.schema import CONFIG_SCHEMA, EVAL_POLICIES, TaskMeta, eval_columns
from constrained_grpo.tasks import make_env, task_info, task_meta
from constrained_grpo.eval import storage
from constrained_grpo.eval import eval_progress
from constrained_grpo.eval.evaluation import EVAL_SEED, EvalProtocol, evaluate_agent
from constrained_grpo.eval.scoring.verdict import check_eval_size
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
    "EVAL_POLICIES",
    "EVAL_SEED",
    "EvalProtocol",
    "evaluate_agent",
    "run_meta",
    "RunOutcome",
    "RunSpec",
    "TaskMeta",
    "environment_versions",
    "check_run_eval_size",
    "execute_run",
    "recorded_config",
    "git_commit",
    "run_config",
    "task_meta",
]

#: Directory of the results root holding the shared text warm starts (never committed).
WARMSTART_DIR = ".warmstart"

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
        eval_episodes: episodes of the final evaluation, per policy (``EVAL_POLICIES``);
            None lets the task family's plan size it from the limits
            (:mod:`constrained_grpo.eval.evaluation`, docs/benchmark.md section 3).
        config: agent config overrides (``make_agent(**config)``), JSON values only.
        save_agent: whether to call ``agent.save`` into ``agent/``.
    """

    task: str
    algo: str
    seed: int
    steps: int
    eval_episodes: int | None = None
    config: Mapping[str, Any] = field(default_factory=dict)
    save_agent: bool = True

    def __post_init__(self) -> None:
        if self.steps < 1:
            raise ValueError(f"steps must be >= 1, got {self.steps}")
        if self.eval_episodes is not None and self.eval_episodes < 1:
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

    def difference(self, config: Mapping[str, Any]) -> str | None:
        """How a completed run's ``config.json`` differs from this run, or None when it is this
        run: the recorded run settings, and the whole resolved configuration the code gives
        them now (``config["algo"]["resolved"]``), so that a default changed in code since the
        run was made is seen (the settings a preset names alone would not show it)."""
        recorded = config.get("run", {}) if isinstance(config, Mapping) else {}
        if not isinstance(recorded, Mapping) or not self.same_results_as(recorded):
            return f"settings {dict(recorded) if isinstance(recorded, Mapping) else recorded}, not {self.to_dict()}"
        then = (config.get("algo") or {}).get("resolved") if isinstance(config.get("algo"), Mapping) else None
        then = upgrade_recorded(then)  # the deploy options' earlier names and absence (constrained_grpo.deploy)
        now = _as_recorded(resolve_config(self.algo, self.task, **self.config))
        if isinstance(then, Mapping):
            now = _without_new_nulls(now, then)
        if then == now:
            return None
        if not isinstance(then, Mapping):
            return "no resolved configuration recorded"
        keys = sorted(_changed_keys(then, now))
        shown = ", ".join(f"{k}: {_lookup(then, k)!r} -> {_lookup(now, k)!r}" for k in keys[:4])
        return f"a resolved configuration the code now gives otherwise ({shown}{', ...' if len(keys) > 4 else ''})"

    def command(self, out: str | Path) -> str:
        """The ``cgrpo train`` command that reruns exactly this run into results root ``out``
        (``config.json`` records it with ``out="."``: run it in the results root)."""
        args = ["cgrpo", "train", self.task, self.algo, "--seed", str(self.seed), "--steps", str(self.steps)]
        if self.eval_episodes is not None:
            args += ["--eval-episodes", str(self.eval_episodes)]
        args += ["--out", str(out)]
        for name, value in sorted(self.config.items()):
            args += [f"--config.{name}", json.dumps(value)]
        if not self.save_agent:
            args.append("--no-save")
        return shlex.join(args)


def _as_recorded(value: Any) -> Any:
    """``value`` as ``config.json`` holds it (JSON types, as :func:`storage.atomic_write_json` writes)."""
    return json.loads(json.dumps(value, sort_keys=True, default=storage._json_default))


def _without_new_nulls(now: Any, then: Mapping[str, Any]) -> Any:
    """``now`` without the keys, at any depth, that ``then`` lacks and that are null in ``now``:
    an option added since the run was made, at its null default (which keeps the behaviour
    from before it, e.g. ``kl_coef_neg``), does not make the run another."""
    if not isinstance(now, Mapping):
        return now
    return {k: _without_new_nulls(v, then[k]) if isinstance(then.get(k), Mapping) else v
            for k, v in now.items() if k in then or v is not None}


def _changed_keys(a: Any, b: Any, prefix: str = "") -> list[str]:
    """Dotted keys at which two nested mappings differ."""
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return [k for key in sorted(set(a) | set(b)) for k in _changed_keys(a.get(key), b.get(key), f"{prefix}{key}.")]
    return [] if a == b else [prefix.rstrip(".")]


def _lookup(tree: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        tree = tree.get(part) if isinstance(tree, Mapping) else None
    return tree


@functools.lru_cache(maxsize=64)
def _custom_task_meta(task: str, env_kwargs_json: str, limits_json: str) -> TaskMeta:
    env_kwargs = json.loads(env_kwargs_json)
    limits = json.loads(limits_json)
    try:
        # Limits are constructor keywords (Contract 1): the env built with them solves its
        # own optimum for those limits.
        env = make_env(task, **env_kwargs, **({} if limits is None else {"limits": limits}))
    except TypeError:
        env = make_env(task, **env_kwargs)
        limits_in_env = False
    else:
        limits_in_env = True
    try:
        constraints = get_constraints(env)
        if not limits_in_env:
            constraints = override_limits(constraints, limits)
        solver = getattr(env.unwrapped, "optimum", None) if limits_in_env or limits is None else None
        opt = solver() if callable(solver) else None
    finally:
        env.close()
    suite = task_info(task).family.name
    if opt is None:
        return TaskMeta(task, suite, constraints)
    return TaskMeta(task, suite, constraints, float(opt.constrained_return), float(opt.unconstrained_return),
                    tuple(float(m) for m in opt.multipliers))


def check_run_eval_size(spec: "RunSpec", meta: TaskMeta, what: str | None = None) -> None:
    """Refuse, before any work, a run whose ``eval_episodes`` cannot certify one of its indicator
    limits (``verdict.EvalSizeError``, one line naming the minimum and ``what``, the setting,
    by default the run's); a planned run passes."""
    if spec.eval_episodes is not None:
        check_eval_size(int(spec.eval_episodes), meta.constraints, what or f"{spec.key}: eval_episodes")


def run_meta(spec: "RunSpec", base: TaskMeta | None = None) -> TaskMeta:
    """The task as a run trains on it: the registered task, or, when the run's config sets
    ``env_kwargs`` or ``limits``, the task built with them (its limits, and its exact optimum
    for those limits where the env solves one). ``base`` is the registered task's metadata."""
    env_kwargs = dict(spec.config.get("env_kwargs") or {})
    limits = spec.config.get("limits")
    if not env_kwargs and limits is None:
        return base if base is not None else task_meta(spec.task)
    return _custom_task_meta(spec.task, json.dumps(env_kwargs, sort_keys=True), json.dumps(limits, sort_keys=True))


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


def portable_command(command: str, root: str | Path) -> str:
    """``command`` with no absolute path of this machine: an argument (or the value of a
    ``--flag=VALUE``) that is an absolute path becomes relative to the results ``root``
    when it lies under it (``--out /x/results`` with root ``/x/results`` -> ``--out .``),
    and its bare file name otherwise."""
    base = os.path.abspath(root)

    def portable(arg: str) -> str:
        flag, eq, value = arg.partition("=") if arg.startswith("--") else ("", "", arg)
        if not os.path.isabs(value):
            return arg
        path = os.path.abspath(value)
        inside = path == base or path.startswith(base.rstrip(os.sep) + os.sep)
        return flag + eq + (Path(os.path.relpath(path, base)).as_posix() if inside else Path(path).name)

    return shlex.join(portable(arg) for arg in shlex.split(command))


def run_config(spec: RunSpec, out: str | Path, meta: TaskMeta, provenance: Mapping[str, Any] | None = None,
               resolved: ResolvedConfig | None = None) -> dict[str, Any]:
    """The content of ``config.json``: the run, its task, the algorithm (``resolved``, the
    configuration the agent is built from; resolved here when not given), versions, commit, command.

    Nothing in it names a path of this machine, so that results stay valid when moved:
    ``command`` reruns the run from the results root (``--out .``), and ``invoked_as`` has
    its absolute paths made relative to that root (:func:`portable_command`)."""
    spec_info = agent_spec(spec.algo)
    prov = dict(provenance) if provenance is not None else {
        "versions": environment_versions(),
        "git": git_commit(),
        "invoked_as": shlex.join([Path(sys.argv[0]).name, *sys.argv[1:]]),
    }
    if isinstance(prov.get("invoked_as"), str):
        prov["invoked_as"] = portable_command(prov["invoked_as"], out)
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
            "lambda_in_reward_units": spec_info.lambda_in_reward_units,
            "reference": spec_info.reference,
            # An alias (cgrpo-best) names the learning algorithm it trains; deployment is a factor.
            "alias_of": spec_info.alias_of,
            # What the agent is built from: defaults, variant, family table, preset and overrides.
            "resolved": (resolved if resolved is not None else resolve(spec.algo, spec.task, **spec.config)).to_dict(),
            "defaults": dict(spec_info.defaults),
            "config": dict(spec.config),
        },
        "eval": {"episodes": spec.eval_episodes, "first_seed": EVAL_SEED, "policies": list(EVAL_POLICIES),
                 "plan": task_info(spec.task).family.eval.to_dict() if spec.eval_episodes is None else None},
        "command": spec.command("."),
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
        also: the keys of the runs completed with it from the same training (its siblings:
            the learner's other deployment rules, :func:`execute_run`).
    """

    key: str
    status: str
    attempt: int
    wall_s: float
    error: str | None = None
    also: tuple[str, ...] = ()


def _deploy_rule(resolved: Mapping[str, Any]) -> str:
    """The deployment rule of a resolved configuration (``ResolvedConfig.to_dict()``): ``last``
    where it sets none (a text agent, a user's agent without the option)."""
    return str((resolved.get("config") or {}).get("deploy", "last"))


def deployment_of(spec: RunSpec) -> tuple[str, str]:
    """``(training, rule)``: a digest of everything that decides ``spec``'s training (task,
    seed, budget, evaluation size, saving, the learner and its whole resolved configuration
    but the deployment rule) and the rule it deploys. Runs with one training digest and
    different rules train identically, so one training serves them all (``siblings`` of
    :func:`execute_run`); a text task's agent deploys its last iterate only and gets a
    digest of its own."""
    resolved = resolve(spec.algo, spec.task, **spec.config).to_dict()
    rule = _deploy_rule(resolved)
    config = {k: v for k, v in (resolved.get("config") or {}).items() if k != "deploy"}
    info = agent_spec(spec.algo)
    learner = info.alias_of or spec.algo
    text = bool(getattr(task_info(spec.task).family, "text", False))
    key = {"task": spec.task, "seed": spec.seed, "steps": spec.steps, "eval_episodes": spec.eval_episodes,
           "save_agent": spec.save_agent, "learner": learner, "config": config,
           "alone": spec.key if text or "deploy" not in (resolved.get("config") or {}) else None}
    return json.dumps(key, sort_keys=True, default=str), rule


def _seed_everything(seed: int) -> None:
    """Seed the global generators, torch's included, whichever process runs the run.

    (An agent that relied on global seeding would otherwise differ between ``cgrpo
    train``, where torch may not be imported yet, and a sweep worker, where it is.)
    """
    import torch

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


@contextlib.contextmanager
def _environ(name: str, value: str) -> Iterator[None]:
    """``os.environ[name] = value`` within the block, the previous value (or none) after it."""
    before = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before


def _limit_threads() -> None:
    """One intra-op thread: the sweep parallelises over runs, and results then do not
    depend on the machine's core count (a multi-threaded reduction may sum in another order)."""
    import torch

    if torch.get_num_threads() != 1:
        torch.set_num_threads(1)


def _write_eval(path: Path, results: Mapping[str, EvalResult], protocol: EvalProtocol, names: list[str]) -> int:
    """``eval.csv`` (``schema.eval_columns``): one row per (policy, episode) with the episode's
    reset seed (empty when the agent evaluated itself)."""
    rows = []
    for policy, result in results.items():
        returns = np.asarray(result.returns, dtype=np.float64)
        costs = np.asarray(result.costs, dtype=np.float64)
        lengths = np.asarray(result.lengths)
        if costs.shape != (len(returns), len(names)):
            raise ValueError(
                f"the {policy} evaluation returned costs of shape {costs.shape}; the task has {len(names)} "
                f"constraint(s) {names}, so it must be ({len(returns)}, {len(names)})"
            )
        rows += [
            {"episode": i, "policy": policy,
             "reset_seed": "" if protocol.first_seed is None else protocol.first_seed + i,
             "return": float(returns[i]), "length": int(lengths[i])}
            | {f"cost_{n}": float(costs[i, k]) for k, n in enumerate(names)}
            for i in range(len(returns))
        ]
    storage.atomic_write_bytes(path, storage.csv_bytes(rows, eval_columns(names)))
    return len(rows)


def _evaluation_tags(path: Path) -> dict[str, float]:
    """The finished run's evaluation scalars (``monitor.evaluation_tags``), {} if unreadable."""
    from constrained_grpo.eval.monitor import evaluation_tags
    from constrained_grpo.eval.scoring.loader import load_run
    from constrained_grpo.eval.scoring.metrics import run_metrics

    try:
        table, meta = load_run(path, known_algos=None)
        return evaluation_tags(run_metrics(table, {meta.task: meta}).iloc[0], meta.constraint_names)
    except Exception:  # the scalars are a view of files on disk already: never fail the run for them
        return {}


def execute_run(
    spec: RunSpec,
    out: str | Path,
    *,
    meta: TaskMeta | None = None,
    provenance: Mapping[str, Any] | None = None,
    attempt: int = 1,
    on_progress: Callable[[int], None] | None = None,
    recorded_out: str | Path | None = None,
    on_stage: Callable[[str], None] | None = None,
    resolved: ResolvedConfig | None = None,
    siblings: tuple[RunSpec, ...] | list[RunSpec] = (),
) -> RunOutcome:
    """Train, evaluate and save one run into ``spec.run_dir(out)``.

    ``siblings``: runs of the same training under other deployment rules (the same
    :func:`deployment_of` digest, each its own rule, e.g. ``cgrpo-best`` and ``cgrpo-mix``
    beside ``cgrpo``). The agent trains once keeping what every rule deploys
    (``keep_deployments``), then each run is evaluated and written as if it had trained alone
    (its own ``config.json``, the training's ``progress.csv``, its evaluation, ``done.json``
    naming the run that trained under ``shared_training``). A sibling that another process
    holds, or one already complete, is left out; so is every sibling where the agent cannot
    keep several rules. ``RunOutcome.also`` lists those completed.

    The directory is cleared of a previous incomplete attempt, ``config.json`` is
    written first and ``done.json`` last. ``on_progress(env_steps)`` is called after
    every log record (for progress bars), ``on_stage(line)`` as the final evaluation
    starts, while it plays (:mod:`~constrained_grpo.eval.eval_progress`) and as it ends (for a console:
    evaluating can take longer than training). A failure is caught, its traceback written to
    ``error.txt`` and returned in the outcome. ``recorded_out`` is the results root named
    in the rerun command (default ``out``; a Ray task writes to a scratch ``out``). ``resolved``
    is the run's configuration when the caller has resolved it already (``cgrpo train``); it is
    resolved once here otherwise, recorded in ``config.json`` and the agent built from it.
    """
    start = time.perf_counter()
    path = spec.run_dir(out)
    try:
        with storage.run_lock(path):
            if storage.is_complete(path):
                # Done by another process meanwhile: it counts only if it is this very run.
                differs = spec.difference(recorded_config(path))
                if differs is not None:
                    return RunOutcome(spec.key, "failed", attempt, 0.0, (
                        f"{path} holds a completed run with {differs}; use another --out directory, "
                        "or rerun with --force to replace it\n"))
                return RunOutcome(spec.key, "done", attempt, 0.0)
            storage.clear_run_dir(path)
            with contextlib.ExitStack() as held:
                riders = _hold_siblings(held, spec, siblings, out)
                written: list[Path] = [path]
                try:
                    also = _execute(spec, out if recorded_out is None else recorded_out, path, meta, provenance, attempt,
                                    on_progress, start, on_stage, resolved, riders, written)
                except Exception:
                    tb = traceback.format_exc()
                    for run_path in written:
                        storage.atomic_write_text(run_path / ERROR_FILE, f"attempt {attempt}\n{tb}")
                        (run_path / RUNNING_FILE).unlink(missing_ok=True)  # no process runs it any more
                    return RunOutcome(spec.key, "failed", attempt, time.perf_counter() - start, tb)
    except storage.RunBusyError as err:
        return RunOutcome(spec.key, "busy", attempt, time.perf_counter() - start, str(err))
    return RunOutcome(spec.key, "done", attempt, time.perf_counter() - start, also=also)


def _hold_siblings(held: contextlib.ExitStack, spec: RunSpec, siblings: tuple[RunSpec, ...] | list[RunSpec],
                   out: str | Path) -> list[tuple[RunSpec, Path]]:
    """The siblings this attempt writes, with their folders, each locked on ``held``: one per
    rule other than ``spec``'s, of ``spec``'s training, neither complete nor held by another
    process."""
    if not siblings:
        return []
    training, rule = deployment_of(spec)
    rules, riders = {rule}, []
    for sibling in siblings:
        digest, other = deployment_of(sibling)
        if digest != training or other in rules or sibling.key == spec.key:
            continue
        path = sibling.run_dir(out)
        if storage.is_complete(path):
            continue
        try:
            held.enter_context(storage.run_lock(path))
        except storage.RunBusyError:
            continue
        if storage.is_complete(path):  # completed meanwhile by the process that held it
            continue
        rules.add(other)
        riders.append((sibling, path))
    return riders


def recorded_config(path: Path) -> dict[str, Any]:
    """``config.json`` of a run directory, {} when unreadable."""
    try:
        recorded = storage.read_json(path / CONFIG_FILE)
    except (OSError, ValueError):
        return {}
    return recorded if isinstance(recorded, dict) else {}


def _execute(
    spec: RunSpec,
    out: str | Path,
    path: Path,
    meta: TaskMeta | None,
    provenance: Mapping[str, Any] | None,
    attempt: int,
    on_progress: Callable[[int], None] | None,
    start: float,
    on_stage: Callable[[str], None] | None = None,
    resolved: ResolvedConfig | None = None,
    riders: list[tuple[RunSpec, Path]] | None = None,
    written: list[Path] | None = None,
) -> tuple[str, ...]:
    """Train ``spec`` (keeping what each rider deploys), evaluate and write it and each rider
    ``(run, folder)``; the riders' keys written. ``written`` holds the run folders begun and not
    yet complete (where a failure writes ``error.txt``)."""
    meta = run_meta(spec, meta)
    names = meta.constraint_names
    if resolved is None:
        resolved = resolve(spec.algo, spec.task, **spec.config)
    elif (resolved.algo, resolved.env_id) != (spec.algo, spec.task):
        raise ValueError(f"the resolved configuration is {resolved.algo} on {resolved.env_id}, the run {spec.algo} on {spec.task}")
    written = [] if written is None else written
    storage.atomic_write_json(path / CONFIG_FILE, run_config(spec, out, meta, provenance, resolved))
    running = {"pid": os.getpid(), "host": socket.gethostname(), "attempt": attempt, "started_unix": time.time()}
    storage.atomic_write_json(path / RUNNING_FILE, running)
    _limit_threads()
    _seed_everything(spec.seed)
    # Agents of one task and seed share what is costly to build (the text agents' warm start),
    # computed by the first run. path is storage.run_dir(root, task, algo, seed): the task's
    # parts, algo and seed below root.
    root = Path(path).parents[len([p for p in spec.task.split("/") if p]) + 1]
    with _environ(WARMSTART_CACHE_ENV, str(root / WARMSTART_DIR)):
        agent = build_agent(resolved, spec.seed)
    _limit_threads()
    runs: list[tuple[RunSpec, Path, ResolvedConfig]] = [(spec, path, resolved)]
    if riders and hasattr(agent, "keep_deployments"):
        for rider, rider_path in riders:
            storage.clear_run_dir(rider_path)
            rider_resolved = resolve(rider.algo, rider.task, **rider.config)
            storage.atomic_write_json(rider_path / CONFIG_FILE, run_config(rider, out, meta, provenance, rider_resolved))
            storage.atomic_write_json(rider_path / RUNNING_FILE, running)
            written.append(rider_path)
            runs.append((rider, rider_path, rider_resolved))
        agent.keep_deployments([_deploy_rule(r.to_dict()) for _, _, r in runs[1:]])

    def report(row: Mapping[str, Any]) -> None:
        if on_progress is not None:
            try:
                on_progress(int(row["env_steps"]))
            except Exception:  # a broken progress channel must never fail the run
                pass

    log = storage.ProgressLog(path / PROGRESS_FILE, names, on_record=report)
    try:
        agent.learn(spec.steps, log)
    finally:
        # Also when learn raises: progress.csv then holds every iteration logged before the error.
        if log.rows:
            log.close(sinks=False)  # open for the evaluation's scalars (monitor.evaluation_tags)
    if not log.rows:
        raise RuntimeError(
            f"{spec.algo}.learn({spec.steps}) logged no iteration; Contract 2 requires log(record) "
            "once per iteration (docs/architecture.md)"
        )
    trained_s = time.perf_counter() - start
    for _, run_path, _ in runs[1:]:  # one training: the same log, iteration for iteration
        shutil.copyfile(path / PROGRESS_FILE, run_path / PROGRESS_FILE)
    shared = None if len(runs) == 1 else {"trained_by": spec.key, "runs": [r.key for r, _, _ in runs],
                                          "train_s": round(trained_s, 3)}
    # The evaluation of the group's run that deployed the last iterate: a rule that deploys it
    # too (best-feasible where no candidate is shown within) plays the same policy on the same
    # episodes, so its evaluation is that one, row for row (tests/eval/test_shared_training.py).
    last_played: tuple[str, Mapping[str, EvalResult], EvalProtocol] | None = None
    for run, run_path, run_resolved in runs:
        began = time.perf_counter()
        if len(runs) > 1:
            agent.use_deployment(_deploy_rule(run_resolved.to_dict()), run.algo)
        named = "" if len(runs) == 1 else f" ({run.algo})"
        plays_last = len(runs) > 1 and bool(getattr(agent, "deploys_last_iterate", False))
        reused = last_played if plays_last else None
        if reused is not None:
            _, results, protocol = reused
            if on_stage is not None:
                on_stage(f"the final policy{named} is the last iterate, evaluated with {reused[0]}: its evaluation reused")
        else:
            if on_stage is not None:
                size = (f"{run.eval_episodes:,} episodes" if run.eval_episodes is not None
                        else "the episodes its limits call for (the task's plan)")
                on_stage(f"evaluating the final policy{named}, sampled and greedy, on {size} each ...")
            with eval_progress.reporting(on_stage):  # episodes done of the plan and ETA, every EVERY_S seconds
                results, protocol = evaluate_agent(agent, run.task, run.eval_episodes, run.config.get("env_kwargs"),
                                                   constraints=meta.constraints)
            if on_stage is not None:
                on_stage(f"evaluated {protocol.episodes:,} episodes per policy{named} in {time.perf_counter() - began:.1f} s")
            if plays_last:
                last_played = (run.key, results, protocol)
        n_eval = _write_eval(run_path / EVAL_FILE, results, protocol, names)
        if run.save_agent:
            agent.save(run_path / AGENT_DIR)
        done = {
            "attempt": attempt,
            # A sibling's time is the training it shares and its own evaluation.
            "wall_s": time.perf_counter() - start if run is spec else trained_s + time.perf_counter() - began,
            "env_steps": int(log.rows[-1]["env_steps"]),
            "progress_rows": len(log.rows),
            "eval_rows": n_eval,
            "eval": protocol.to_dict(),
            # The multipliers' projection bound, where the agent has one: "at bound" needs it.
            "lambda_max": getattr(agent, "lambda_max", None),
            # The deployment rule and what it kept (best-feasible: the iteration, its cost bounds).
            "deployed": getattr(agent, "deployment", None),
            "host": socket.gethostname(),
        }
        if shared is not None:  # which run trained, and the runs that share its training
            done["shared_training"] = shared
        if reused is not None:  # the run whose evaluation of the same policy this one is
            done["eval_of"] = reused[0]
        (run_path / RUNNING_FILE).unlink(missing_ok=True)
        (run_path / ERROR_FILE).unlink(missing_ok=True)
        storage.atomic_write_json(run_path / DONE_FILE, done)
        written.remove(run_path)
        if run is spec and log.has_sinks:
            log.summary(_evaluation_tags(path))
    log.close_sinks()
    return tuple(r.key for r, _, _ in runs[1:])
