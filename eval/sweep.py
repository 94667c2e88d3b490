"""Sweeps over task x algorithm x seed, on a local process pool or on Ray.

Scheduling is the same for both backends (:func:`run_sweep`):

* a run whose directory holds ``done.json`` is skipped (resume); one recorded with
  other settings is an error, so a rerun never mixes two budgets under one name;
* at most ``workers`` runs are in flight; each runs in a fresh process (local: one
  single-worker ``ProcessPoolExecutor`` per run, started by ``forkserver`` with the
  agent packages preloaded, or ``spawn``, so a run that kills its process breaks only
  its own pool; Ray: one task with ``num_cpus=1`` and no Ray-level retries);
* a failed attempt is reported with its traceback and retried ``retries`` times;
  results of other runs are on disk already and never depend on it;
* a run that another live process is writing (a second sweep on the same folder) is not
  a failure: it waits, then counts as skipped once that process has completed it;
* nothing outlives the driver: a local worker exits when the driver's end of a pipe
  closes (the driver exits, is killed, or is interrupted) and, on Linux where the driver
  is its parent, when the driver dies (``PR_SET_PDEATHSIG``); SIGTERM of the driver is
  handled like Ctrl-C. Progress comes back on a plain pipe-backed queue: no manager
  process whose loss would fail the runs in flight;
* a tqdm bar counts runs (done / running / failed, ETA) and, on a terminal, one bar per
  running run counts its env steps; a run's final evaluation prints a line as it starts, at
  least every :data:`~constrained_grpo.eval.eval_progress.EVERY_S` seconds while it plays
  (episodes done of the plan, ETA), and as it ends.

Local workers write their run directory directly. A Ray task runs in a scratch
directory on its node and returns the files, which the driver writes atomically,
``done.json`` last, so a cluster needs no shared file system.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import multiprocessing
import os
import queue as queue_mod
import re
import signal
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from constrained_grpo.eval import storage
from constrained_grpo.registry import BUILTIN_AGENT_PACKAGES
from constrained_grpo.tasks import IMPORT_ENV
from constrained_grpo.eval.runner import (
    RunOutcome,
    RunSpec,
    TaskMeta,
    recorded_config,
    check_run_eval_size,
    deployment_of,
    environment_versions,
    execute_run,
    git_commit,
    run_meta,
    task_meta,
)
from constrained_grpo.eval.scoring.verdict import EvalSizeError

__all__ = ["BACKENDS", "SweepConfigError", "SweepReport", "expand_grid", "run_sweep"]

BACKENDS = ("local", "ray")


class SweepConfigError(ValueError):
    """The sweep cannot start as asked (a conflicting completed run, an unknown backend, ...)."""


@dataclass
class SweepReport:
    """What a sweep did.

    Attributes:
        done: keys of runs completed by this sweep.
        skipped: keys of runs found complete on disk.
        failed: key -> traceback of the last attempt, for runs that failed every attempt.
        retried: keys of runs that failed once and were retried.
        wall_s: seconds the sweep took.
    """

    done: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    retried: list[str] = field(default_factory=list)
    wall_s: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.failed

    def summary(self) -> str:
        text = (
            f"{len(self.done)} run(s) done, {len(self.skipped)} skipped (already complete), "
            f"{len(self.failed)} failed, {len(self.retried)} retried, in {self.wall_s:.1f} s"
        )
        for key, tb in sorted(self.failed.items()):
            text += f"\nFAILED {key}:\n{tb.rstrip()}"
        return text


def expand_grid(
    tasks: Sequence[str],
    algos: Sequence[str],
    seeds: Iterable[int],
    steps: int | Mapping[str, int],
    *,
    eval_episodes: int | None = None,
    config: Mapping[str, Mapping[str, Any]] | None = None,
    save_agent: bool = True,
) -> list[RunSpec]:
    """The runs of ``tasks x algos x seeds`` in that order.

    ``steps`` is one budget or ``{task: budget}``; ``config`` maps an algorithm name to
    its config overrides; ``eval_episodes`` None lets each task family's plan size the evaluation.
    """
    seeds = list(seeds)
    config = config or {}
    specs = []
    for task in tasks:
        budget = steps[task] if isinstance(steps, Mapping) else steps
        for algo in algos:
            for seed in seeds:
                specs.append(RunSpec(task, algo, int(seed), int(budget), eval_episodes, dict(config.get(algo, {})), save_agent))
    return specs


def _provenance() -> dict[str, Any]:
    import shlex

    return {
        "versions": environment_versions(),
        "git": git_commit(),
        "invoked_as": shlex.join([Path(sys.argv[0]).name, *sys.argv[1:]]),
    }


# ---------------------------------------------------------------------------- local backend


#: The progress queue of a local worker process (set by :func:`_init_worker`).
_PROGRESS: Any = None


def _die_with_parent(driver: int) -> None:
    """Linux: have the kernel SIGKILL this process when its parent, the driver, dies.

    Only where the driver is the parent (``spawn``): a ``forkserver`` worker's parent is
    the fork server, whose death alone must not end runs in flight (the driver starts a
    new one); there the pipe watch alone stands for the driver.
    """
    if os.getppid() == driver:
        from constrained_grpo.eval._forkserver_guard import die_with_parent

        die_with_parent()


def _watch_driver(watch: Any) -> None:
    """Block until the driver's end of ``watch`` closes, then end this process at once.

    The driver holds the only write end, so EOF means it exited, was killed, or gave the
    run up; the run's files are written atomically and its lock dies with the process.
    """
    try:
        while True:
            watch.recv_bytes()
    except (EOFError, OSError):
        pass
    os._exit(1)


#: The variables that size OpenMP's (torch's intra-op pool), MKL's and OpenBLAS's thread pools.
THREAD_VARIABLES: tuple[str, ...] = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def one_thread_env(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` with every pool of :data:`THREAD_VARIABLES` at one thread where it sets none:
    a run shares its core with the other workers, and an idle BLAS thread spinning beside it
    costs CPU time without speeding its small products."""
    return {**environ, **{var: "1" for var in THREAD_VARIABLES if var not in environ}}


def _init_worker(watch: Any = None, progress: Any = None, driver: int | None = None,
                 user: tuple[dict[str, str], list[str]] | None = None) -> None:
    """Initialise a local worker: one thread per run, the progress queue, the driver watch,
    and the driver's user modules (``user``: its ``$CGRPO_IMPORT`` and ``PYTHONPATH`` now, and
    its ``sys.path``). A fork server started earlier in the driver's process, before an
    ``--import``, forks workers with its own environment, not the driver's current one."""
    global _PROGRESS
    if user is not None:
        env, path = user
        os.environ.update(env)
        sys.path[:0] = [p for p in path if p not in sys.path]
    # Set before torch is imported in this fresh process: one thread per run (see runner).
    os.environ.update(one_thread_env(os.environ))
    _PROGRESS = progress
    if driver is not None:
        _die_with_parent(driver)
    if watch is not None:
        threading.Thread(target=_watch_driver, args=(watch,), name="cgrpo-driver-watch", daemon=True).start()


def _local_job(spec: dict[str, Any], out: str, meta: dict[str, Any], prov: dict[str, Any], attempt: int,
               siblings: list[dict[str, Any]] | None = None) -> RunOutcome:
    key = RunSpec.from_dict(spec).key

    def progress(env_steps: int | str) -> None:
        if _PROGRESS is not None:
            _PROGRESS.put_nowait((key, env_steps))

    return execute_run(
        RunSpec.from_dict(spec), out, meta=TaskMeta.from_dict(meta), provenance=prov, attempt=attempt, on_progress=progress,
        on_stage=progress,  # the evaluation's start, progress and end, as lines (str)
        siblings=[RunSpec.from_dict(s) for s in siblings or ()],
    )


#: Modules the fork server imports once, so that a run's process starts with them loaded
#: (importing torch, SB3 and the agents costs seconds, paid once per sweep, not per run).
#: The guard comes first: the server dies with the driver even while it imports the rest.
_PRELOAD = ("constrained_grpo.eval._forkserver_guard", "constrained_grpo.eval.runner", *BUILTIN_AGENT_PACKAGES)


def _mp_context() -> multiprocessing.context.BaseContext:
    """``forkserver`` with the agent packages preloaded where available, else ``spawn``.

    Both start runs in a clean process (never a fork of the driver, whose threads and
    state a fork would copy); the fork server itself is single-threaded.
    """
    if "forkserver" in multiprocessing.get_all_start_methods():
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(list(_PRELOAD))
        return ctx
    return multiprocessing.get_context("spawn")


class _LocalBackend:
    """One single-worker process pool per run: a crash is attributed to exactly that run.

    Workers get the read end of a pipe whose only write end the driver holds (see
    :func:`_watch_driver`), and send progress on a pipe-backed queue.
    """

    def __init__(self, workers: int) -> None:
        self.capacity = max(1, int(workers))
        self._ctx = _mp_context()
        self.queue = self._ctx.Queue()
        self._watch_r, self._watch_w = self._ctx.Pipe(duplex=False)
        self._jobs: dict[cf.Future, tuple[RunSpec, int, cf.ProcessPoolExecutor]] = {}
        self._finished: list[cf.ProcessPoolExecutor] = []

    #: One training serves the runs that deploy it by other rules (``siblings`` of ``execute_run``).
    shares_training = True

    def submit(self, spec: RunSpec, out: Path, meta: TaskMeta, prov: dict[str, Any], attempt: int,
               siblings: Sequence[RunSpec] = ()) -> None:
        for tries_left in (2, 1, 0):
            user = ({k: os.environ[k] for k in (IMPORT_ENV, "PYTHONPATH") if k in os.environ}, list(sys.path))
            pool = cf.ProcessPoolExecutor(max_workers=1, mp_context=self._ctx, initializer=_init_worker,
                                          initargs=(self._watch_r, self.queue, os.getpid(), user))
            try:
                fut = pool.submit(_local_job, spec.to_dict(), str(out), meta.to_dict(), prov, attempt,
                                  [s.to_dict() for s in siblings])
                break
            except (OSError, EOFError):
                # The fork server died between the liveness check and the start (OSError: it refused
                # the connection; EOFError: it closed it before sending the new pid); the next start
                # restarts it.
                pool.shutdown(wait=False, cancel_futures=True)
                if not tries_left:
                    raise
                time.sleep(0.2)
        self._jobs[fut] = (spec, attempt, pool)

    def wait(self, timeout: float) -> list[RunOutcome]:
        if not self._jobs:
            time.sleep(timeout)
            return []
        finished, _ = cf.wait(list(self._jobs), timeout=timeout, return_when=cf.FIRST_COMPLETED)
        outcomes = []
        for fut in finished:
            spec, attempt, pool = self._jobs.pop(fut)
            pool.shutdown(wait=False)
            self._finished.append(pool)
            try:
                outcomes.append(fut.result())
            except cf.process.BrokenProcessPool:
                outcomes.append(RunOutcome(spec.key, "failed", attempt, 0.0,
                                           "the worker process died abruptly (killed by a signal, out of memory, "
                                           "or a crash in native code); no Python traceback is available\n"))
            except Exception:  # pickling errors and the like: report, never lose the sweep
                outcomes.append(RunOutcome(spec.key, "failed", attempt, 0.0, traceback.format_exc()))
        return outcomes

    def drain_progress(self) -> list[tuple[str, int]]:
        items = []
        try:
            while True:
                items.append(self.queue.get_nowait())
        except (queue_mod.Empty, OSError, EOFError, ValueError):
            pass
        return items

    def close(self) -> None:
        """Give every unfinished run up: its worker sees the watch pipe close and exits."""
        self._watch_w.close()
        for _, _, pool in self._jobs.values():
            processes = list((getattr(pool, "_processes", None) or {}).values())
            pool.shutdown(wait=False, cancel_futures=True)
            for proc in processes:
                with contextlib.suppress(Exception):
                    proc.kill()
        for _, _, pool in self._jobs.values():
            for proc in list((getattr(pool, "_processes", None) or {}).values()):
                with contextlib.suppress(Exception):
                    proc.join(5.0)
        self._jobs.clear()
        # A finished pool's manager thread may still be closing its wakeup pipe; the interpreter's
        # exit hook writes to every registered pipe unlocked, and one closed under it prints
        # "Exception ignored ... Bad file descriptor" after the sweep. Let those threads end first.
        for pool in self._finished:
            thread = getattr(pool, "_executor_manager_thread", None)
            if thread is not None:
                thread.join(10.0)
        self._finished.clear()
        self.queue.close()
        self.queue.cancel_join_thread()
        self._watch_r.close()


# ------------------------------------------------------------------------------ Ray backend


def _ray_job(spec: dict[str, Any], out: str, meta: dict[str, Any], prov: dict[str, Any], attempt: int, queue: Any) -> tuple[RunOutcome, dict[str, bytes]]:
    """Run in a scratch directory on the Ray node; return the outcome and the run's files."""
    _init_worker()
    run = RunSpec.from_dict(spec)

    def progress(env_steps: int | str) -> None:
        if queue is not None:
            queue.put_nowait((run.key, env_steps))

    with tempfile.TemporaryDirectory(prefix="cgrpo-run-") as scratch:
        outcome = execute_run(run, scratch, meta=TaskMeta.from_dict(meta), provenance=prov, attempt=attempt,
                              on_progress=progress, recorded_out=out, on_stage=progress)
        root = run.run_dir(scratch)
        files = {
            str(p.relative_to(root)): p.read_bytes()
            for p in sorted(root.rglob("*"))
            if p.is_file() and not p.name.startswith(".")
        }
    return outcome, files


def _write_returned_files(run_dir: Path, files: Mapping[str, bytes], outcome: RunOutcome) -> RunOutcome:
    """Write a Ray task's files into ``run_dir`` atomically, the completion marker last."""
    try:
        with storage.run_lock(run_dir):
            if storage.is_complete(run_dir):
                return outcome
            storage.clear_run_dir(run_dir)
            for rel in sorted(files):
                if rel != storage.DONE_FILE:
                    storage.atomic_write_bytes(run_dir / rel, files[rel])
            if storage.DONE_FILE in files:
                storage.atomic_write_bytes(run_dir / storage.DONE_FILE, files[storage.DONE_FILE])
    except storage.RunBusyError as err:
        return RunOutcome(outcome.key, "busy", outcome.attempt, outcome.wall_s, str(err))
    return outcome


class _RayBackend:
    def __init__(self, workers: int | None, address: str | None) -> None:
        try:
            import ray
        except ImportError:
            raise SweepConfigError(
                "the Ray backend needs ray; install the extra: pip install 'constrained-grpo[ray]'"
            ) from None
        self.ray = ray
        self._owns = False
        if not ray.is_initialized():
            # A local Ray gets the driver's import path, so that agents given by dotted path import.
            env = {"PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
            ray.init(address=address, num_cpus=None if address else workers, runtime_env=None if address else {"env_vars": env},
                     include_dashboard=False, log_to_driver=False, configure_logging=False)
            self._owns = True
        cpus = int(ray.cluster_resources().get("CPU", 1))
        self.capacity = max(1, min(int(workers), cpus) if workers else cpus)
        from ray.util.queue import Queue

        self.queue = Queue(actor_options={"num_cpus": 0})
        self._remote = ray.remote(num_cpus=1, max_retries=0)(_ray_job)
        self._jobs: dict[Any, tuple[RunSpec, int, Path]] = {}

    #: A Ray task returns one run's files: each deployment rule trains on its own.
    shares_training = False

    def submit(self, spec: RunSpec, out: Path, meta: TaskMeta, prov: dict[str, Any], attempt: int,
               siblings: Sequence[RunSpec] = ()) -> None:
        ref = self._remote.remote(spec.to_dict(), str(out), meta.to_dict(), prov, attempt, self.queue)
        self._jobs[ref] = (spec, attempt, spec.run_dir(out))

    def wait(self, timeout: float) -> list[RunOutcome]:
        if not self._jobs:
            time.sleep(timeout)
            return []
        ready, _ = self.ray.wait(list(self._jobs), num_returns=1, timeout=timeout)
        outcomes = []
        for ref in ready:
            spec, attempt, run_dir = self._jobs.pop(ref)
            try:
                outcome, files = self.ray.get(ref)
            except Exception:  # the task's process died, or Ray lost it
                outcomes.append(RunOutcome(spec.key, "failed", attempt, 0.0, traceback.format_exc()))
                continue
            if outcome.status == "failed":
                # Keep the traceback beside the run, as a local attempt does.
                run_dir.mkdir(parents=True, exist_ok=True)
                files = {k: v for k, v in files.items() if k in (storage.CONFIG_FILE, storage.ERROR_FILE)}
                with storage.run_lock(run_dir):
                    if not storage.is_complete(run_dir):
                        storage.clear_run_dir(run_dir)
                        for rel, data in files.items():
                            storage.atomic_write_bytes(run_dir / rel, data)
                outcomes.append(outcome)
            else:
                outcomes.append(_write_returned_files(run_dir, files, outcome))
        return outcomes

    def drain_progress(self) -> list[tuple[str, int]]:
        items = []
        try:
            while not self.queue.empty():
                items.append(self.queue.get_nowait())
        except Exception:
            pass
        return items

    def close(self) -> None:
        for ref in self._jobs:
            self.ray.cancel(ref, force=True)
        try:
            self.ray.kill(self.queue.actor)
        except Exception:
            pass
        if self._owns:
            self.ray.shutdown()


# ------------------------------------------------------------------------------ the sweep


def without_recorded(specs: Sequence[RunSpec], records: Sequence[str | Path]) -> tuple[list[RunSpec], list[str]]:
    """``(specs to run, keys skipped)``: the runs that a compact record in ``records`` holds
    with this very configuration (:meth:`RunSpec.difference` of its ``config.json`` is None)
    are left out, so that a sweep split over several sessions resumes from what was packed."""
    from constrained_grpo.eval.scoring.record import load_record

    held: dict[tuple[str, str, int], Mapping[str, Any]] = {}
    for folder in records:
        held.update({key: cfg for key, (cfg, _) in load_record(folder, configs=True).configs.items()})
    todo, skipped = [], []
    for spec in specs:
        cfg = held.get((spec.task, spec.algo, int(spec.seed)))
        if cfg is not None and spec.difference(cfg) is None:
            skipped.append(spec.key)
        else:
            todo.append(spec)
    return todo, skipped


def _clock(seconds: float) -> str:
    """``1h02m``, ``4m05s`` or ``12s``."""
    s = int(round(seconds))
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")


def _check_resumable(specs: Sequence[RunSpec], out: Path, force: bool = False) -> tuple[list[RunSpec], list[str]]:
    """Split into runs to do and keys of complete runs; a complete run with other settings is
    an error, or (``force``) is marked incomplete and redone."""
    todo, skipped = [], []
    for spec in specs:
        path = spec.run_dir(out)
        if not storage.is_complete(path):
            todo.append(spec)
            continue
        differs = spec.difference(recorded_config(path))
        if differs is not None:
            if force:
                with storage.run_lock(path):
                    (path / storage.DONE_FILE).unlink(missing_ok=True)
                todo.append(spec)
                continue
            raise SweepConfigError(
                f"{path} holds a completed run with {differs}; use another --out directory, "
                "or pass --force to redo it with these settings"
            )
        skipped.append(spec.key)
    return todo, skipped


def _gist(line: str) -> str:
    """``line`` without its numbers: one warning of two seeds, whatever each of them measured."""
    return re.sub(r"\d[\d,.]*", "#", line)


def run_sweep(
    specs: Sequence[RunSpec],
    out: str | Path,
    *,
    backend: str = "local",
    workers: int | None = None,
    retries: int = 1,
    ray_address: str | None = None,
    progress: bool | None = None,
    echo: Callable[[str], None] | None = None,
    task_metas: Mapping[str, TaskMeta] | None = None,
    force: bool = False,
) -> SweepReport:
    """Run every spec into ``out`` (Contract 3 layout); return what happened.

    ``workers`` defaults to the CPU count (local) or the cluster's CPUs (Ray).
    ``progress=None`` shows bars on a terminal only; ``echo`` receives one line per
    finished, failed or retried run (default: stderr). ``force`` redoes completed runs
    recorded with other settings (otherwise :class:`SweepConfigError`).
    """
    if backend not in BACKENDS:
        raise SweepConfigError(f"unknown backend {backend!r}; choose one of {list(BACKENDS)}")
    if retries < 0:
        raise SweepConfigError(f"retries must be >= 0, got {retries}")
    keys = [s.key for s in specs]
    dup = sorted({k for k in keys if keys.count(k) > 1})
    if dup:
        raise SweepConfigError(f"the grid lists runs more than once: {dup}")
    out = Path(out)
    start = time.perf_counter()
    report = SweepReport()
    todo, report.skipped = _check_resumable(specs, out, force)
    say = echo if echo is not None else (lambda line: tqdm.write(line, file=sys.stderr))
    if report.skipped:
        say(f"[sweep] {len(report.skipped)} of {len(specs)} run(s) already complete under {out}; skipping them")
    if not todo:
        report.wall_s = time.perf_counter() - start
        return report

    metas = dict(task_metas or {})
    for task in sorted({s.task for s in todo}):
        if task not in metas:
            t0 = time.perf_counter()
            metas[task] = task_meta(task)
            if metas[task].optimum_return is not None:
                say(f"[sweep] {task}: exact optimum {metas[task].optimum_return:.4f} ({time.perf_counter() - t0:.1f} s)")
    for spec in todo:  # an evaluation too small to decide is the user's to fix, before any run starts
        try:
            check_run_eval_size(spec, run_meta(spec, metas[spec.task]))
        except EvalSizeError as err:
            raise SweepConfigError(str(err)) from None
    prov = _provenance()

    workers = workers if workers is not None else (None if backend == "ray" else (os.cpu_count() or 1))
    engine: _LocalBackend | _RayBackend = _LocalBackend(workers or 1) if backend == "local" else _RayBackend(workers, ray_address)
    disable = None if progress is None else not progress
    bar = tqdm(total=len(todo), desc="sweep", unit="run", disable=disable, file=sys.stderr, dynamic_ncols=True)
    run_bars: dict[str, tqdm] = {}
    run_slots: dict[str, int] = {}  # terminal line of each running run's bar
    pending: list[tuple[RunSpec, int]] = [(s, 1) for s in todo]
    not_before: dict[str, float] = {}  # runs another live process holds: when to look again
    running: dict[str, RunSpec] = {}
    riding: dict[str, list[tuple[RunSpec, int]]] = {}  # a run's siblings trained with it (other deployment rules)
    digests: dict[str, tuple[str, str]] = {}
    failed_count = 0

    def deployment(spec: RunSpec) -> tuple[str, str]:
        if spec.key not in digests:
            try:
                digests[spec.key] = deployment_of(spec)
            except Exception:  # resolution fails in the run itself, with its own error
                digests[spec.key] = (spec.key, "")
        return digests[spec.key]

    def take_siblings(spec: RunSpec) -> list[tuple[RunSpec, int]]:
        """The pending runs of ``spec``'s training under other rules (one per rule): they ride
        along, trained once (``execute_run``'s ``siblings``)."""
        if not getattr(engine, "shares_training", False):
            return []
        training, rule = deployment(spec)
        rules, riders = {rule}, []
        for item in list(pending):
            other = item[0]
            digest, other_rule = deployment(other)
            if digest == training and other_rule not in rules and not storage.is_locked(other.run_dir(out)):
                rules.add(other_rule)
                riders.append(item)
                pending.remove(item)
        return riders
    warned: dict[tuple[str, str], str] = {}  # (task/algo, a warning's gist) -> the run that said it first

    def drain() -> None:
        """Print the runs' evaluation lines (a warning shown in full once per task and algorithm,
        its seeds' repeats in one line) and move their progress bars."""
        for key, steps in engine.drain_progress():
            if isinstance(steps, str):  # a line from the run's evaluation (it can outlast training)
                if steps.startswith("warning: "):
                    first = warned.setdefault((key.rpartition("/seed_")[0], _gist(steps)), key)
                    if first != key:
                        say(f"[sweep] {key}: warning: the same as {first}'s above")
                        continue
                say(f"[sweep] {key}: {steps}")
                continue
            run_bar = run_bars.get(key)
            if run_bar is not None and steps > run_bar.n:
                run_bar.update(min(steps, run_bar.total) - run_bar.n)

    launched = time.perf_counter()
    ended_runs = 0

    def advance() -> None:
        nonlocal ended_runs
        ended_runs += 1
        bar.update(1)

    def tally() -> str:
        """``k/N, elapsed, ETA``: runs ended of this sweep's, and the rest at the pace so far."""
        ended, total = ended_runs, len(todo)
        elapsed = time.perf_counter() - launched
        eta = f", ETA {_clock(elapsed / ended * (total - ended))}" if 0 < ended < total else ""
        return f"{ended}/{total}, {_clock(elapsed)} elapsed{eta}"

    def postfix() -> None:
        bar.set_postfix_str(f"running={len(running)} failed={failed_count} skipped={len(report.skipped)}", refresh=True)

    def next_ready() -> tuple[RunSpec, int] | None:
        """The first pending run that no other live process holds (deferring those that one does)."""
        nonlocal failed_count
        now = time.monotonic()
        for i, (spec, attempt) in enumerate(pending):
            if not_before.get(spec.key, 0.0) > now:
                continue
            path = spec.run_dir(out)
            if storage.is_locked(path):
                if spec.key not in not_before:
                    say(f"[sweep] {spec.key} is being written by another live process; waiting for it")
                not_before[spec.key] = now + 1.0
                continue
            del pending[i]
            if storage.is_complete(path):  # completed by another sweep meanwhile
                differs = spec.difference(recorded_config(path))
                advance()
                if differs is None:
                    report.skipped.append(spec.key)
                    say(f"[sweep] {spec.key} was completed by another process; skipping it")
                else:
                    failed_count += 1
                    report.failed[spec.key] = f"{path} was completed by another process with {differs}\n"
                    say(f"[sweep] run {spec.key} FAILED: {report.failed[spec.key].rstrip()}")
                return next_ready()
            return spec, attempt
        return None

    previous_term = None
    if threading.current_thread() is threading.main_thread():
        # SIGTERM ends the sweep the way Ctrl-C does: the finally below stops every worker.
        previous_term = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        while pending or running:
            while pending and len(running) < engine.capacity:
                ready = next_ready()
                if ready is None:
                    break
                spec, attempt = ready
                riders = riding[spec.key] = take_siblings(spec)
                engine.submit(spec, out, metas[spec.task], prov, attempt, [r for r, _ in riders])
                running[spec.key] = spec
                if not bar.disable:
                    used = set(run_slots.values())
                    slot = run_slots[spec.key] = next(i for i in range(1, len(used) + 2) if i not in used)
                    run_bars[spec.key] = tqdm(total=spec.steps, desc=spec.key, unit="step", leave=False,
                                              position=slot, file=sys.stderr, dynamic_ncols=True)
            postfix()
            outcomes = engine.wait(timeout=0.25)
            drain()  # a run's last lines (its evaluation's) before its "done"
            for outcome in outcomes:
                spec = running.pop(outcome.key)
                # Siblings share the attempt's fate: a failure counts as theirs (retried as theirs
                # is); those a finished attempt left out go back to the queue, first, as they were.
                riders = riding.pop(outcome.key, [])
                failed_here = outcome.status == "failed"
                pending[:0] = [(r, a) for r, a in riders if not failed_here and r.key not in outcome.also]
                for rider, rider_attempt in riders if failed_here else ():
                    if rider_attempt <= retries:
                        report.retried.append(rider.key)
                        pending.append((rider, rider_attempt + 1))
                    else:
                        report.failed[rider.key] = outcome.error or "failed"
                        failed_count += 1
                        advance()
                        say(f"[sweep] run {rider.key} FAILED with {outcome.key}, which trained it ({tally()})")
                run_bar = run_bars.pop(outcome.key, None)
                run_slots.pop(outcome.key, None)
                if run_bar is not None:
                    run_bar.close()
                if outcome.status == "done":
                    report.done.append(outcome.key)
                    advance()
                    say(f"[sweep] done {outcome.key} (attempt {outcome.attempt}, {outcome.wall_s:.1f} s; {tally()})")
                    for rider, _ in riders:
                        if rider.key in outcome.also:
                            report.done.append(rider.key)
                            advance()
                            say(f"[sweep] done {rider.key} (trained once with {outcome.key}; {tally()})")
                elif outcome.status == "busy":
                    # Another live process took the run first: look again once it lets go.
                    not_before[outcome.key] = time.monotonic() + 1.0
                    pending.append((spec, outcome.attempt))
                elif outcome.attempt <= retries:
                    report.retried.append(outcome.key)
                    say(f"[sweep] run {outcome.key} failed (attempt {outcome.attempt} of {retries + 1}); "
                        f"retrying. Traceback:\n{(outcome.error or '').rstrip()}")
                    pending.append((spec, outcome.attempt + 1))
                else:
                    report.failed[outcome.key] = outcome.error or "failed"
                    failed_count += 1
                    advance()
                    say(f"[sweep] run {outcome.key} FAILED after {outcome.attempt} attempt(s) ({tally()}). Traceback:\n"
                        f"{(outcome.error or '').rstrip()}")
    finally:
        engine.close()
        if previous_term is not None:
            signal.signal(signal.SIGTERM, previous_term)
        for run_bar in run_bars.values():
            run_bar.close()
        bar.close()
    report.wall_s = time.perf_counter() - start
    return report
