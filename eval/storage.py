"""Run directories on disk (docs/architecture.md, Contract 3).

One run (task x algorithm x seed) owns ``OUT/<task>/<algo>/seed_<n>/``::

    config.json    everything needed to rerun it (written first)
    running.json   pid and attempt of the process running it (removed when done)
    progress.csv   one row per ``learn`` log record, rewritten whole while training
    eval.csv       one row per evaluation episode
    agent/         ``agent.save(path)``
    error.txt      traceback of the last failed attempt (removed when done)
    done.json      completion marker, written last, with the row counts of the CSVs

Every file is written to a hidden temporary name beside it and moved into place with
``os.replace``, which is atomic on POSIX: a reader (or a SIGKILL) sees the old file or
the new one, never half of one. A run counts as complete only once ``done.json``
exists, and the loader checks the CSVs' row counts against it.
"""

from __future__ import annotations

import contextlib
import csv
import fcntl
import io
import json
import math
import os
import re
import shutil
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from constrained_grpo.files import atomic_write_bytes, atomic_write_text
from constrained_grpo.registry import validate_log_record
from constrained_grpo.schema import flatten_record, progress_columns

__all__ = [
    "CONFIG_FILE",
    "DONE_FILE",
    "ERROR_FILE",
    "EVAL_FILE",
    "PROGRESS_FILE",
    "RUNNING_FILE",
    "AGENT_DIR",
    "ProgressLog",
    "RecordHook",
    "RunBusyError",
    "add_record_hook",
    "atomic_write_bytes",
    "atomic_write_json",
    "atomic_write_text",
    "clear_run_dir",
    "csv_bytes",
    "is_complete",
    "is_locked",
    "read_json",
    "run_dir",
    "run_lock",
    "safe_name",
]

CONFIG_FILE = "config.json"
PROGRESS_FILE = "progress.csv"
EVAL_FILE = "eval.csv"
DONE_FILE = "done.json"
ERROR_FILE = "error.txt"
RUNNING_FILE = "running.json"
AGENT_DIR = "agent"
LOCK_FILE = ".lock"


class RunBusyError(RuntimeError):
    """Another live process holds the run directory's lock."""


def safe_name(part: str) -> str:
    """A path component for ``part``: characters outside ``[A-Za-z0-9._-]`` become ``_``.

    >>> safe_name("mypkg.agents:make")
    'mypkg.agents_make'
    """
    name = re.sub(r"[^A-Za-z0-9._-]", "_", part)
    return "_" + name if name.startswith(".") or not name else name


def run_dir(out: str | Path, task: str, algo: str, seed: int) -> Path:
    """``out/<task>/<algo>/seed_<seed>``; a namespaced task id ``Grid/X-v0`` gives two levels."""
    parts = [safe_name(p) for p in task.split("/") if p]
    return Path(out).joinpath(*parts, safe_name(algo), f"seed_{int(seed)}")


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, (set, frozenset)):
        return sorted(obj)
    if isinstance(obj, Path):
        return str(obj)
    return repr(obj)


def atomic_write_json(path: Path, obj: Any) -> None:
    """Write ``obj`` as indented, key-sorted JSON (so equal objects give equal bytes)."""
    text = json.dumps(obj, indent=2, sort_keys=True, default=_json_default) + "\n"
    atomic_write_text(path, text)


def read_json(path: Path) -> Any:
    """Parse a JSON file; raise ``ValueError`` naming the file when it is not JSON."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as err:
        why = err if isinstance(err, json.JSONDecodeError) else type(err).__name__  # 200,000 '[' nest too deep
        raise ValueError(f"{path} is not valid JSON ({why}); delete the run directory and rerun it") from None


def _cell(value: Any) -> Any:
    """A CSV cell: floats by ``repr`` (round-trips exactly), NaN and None as empty."""
    if value is None:
        return ""
    if isinstance(value, float):
        return "" if math.isnan(value) else repr(value)
    return value


def csv_bytes(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> bytes:
    """Rows as CSV with the given header; a missing key is an empty cell."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([_cell(row.get(c)) for c in columns])
    return buf.getvalue().encode("utf-8")


#: Called as ``hook(run_path, row)`` after every stored record (``row`` as in progress.csv).
RecordHook = Callable[[Path, Mapping[str, Any]], None]
_RECORD_HOOKS: list[RecordHook] = []


def add_record_hook(hook: RecordHook) -> Callable[[], None]:
    """Call ``hook(run_path, row)`` for every record of every run this process trains
    (console progress, TensorBoard); returns the function that removes it again."""
    _RECORD_HOOKS.append(hook)

    def remove() -> None:
        if hook in _RECORD_HOOKS:
            _RECORD_HOOKS.remove(hook)

    return remove


class ProgressLog:
    """The ``log`` callback handed to ``agent.learn``: validates, flattens and stores records.

    Every record is checked against Contract 2 (``validate_log_record``) and numbered
    (``iteration`` 0, 1, ...; an agent's own counter is kept as ``agent_iteration``).
    The whole ``progress.csv`` is rewritten atomically at most every ``flush_every_s``
    seconds (default: env ``CGRPO_PROGRESS_FLUSH_S``, else 2) and on ``close()``, so the
    file on disk is always a complete table of the first n iterations.
    """

    def __init__(
        self,
        path: Path,
        constraint_names: Sequence[str],
        *,
        flush_every_s: float | None = None,
        on_record: Callable[[Mapping[str, Any]], None] | None = None,
    ) -> None:
        self.path = Path(path)
        self.constraint_names = list(constraint_names)
        if flush_every_s is None:
            flush_every_s = float(os.environ.get("CGRPO_PROGRESS_FLUSH_S", "2.0"))
        self.flush_every_s = flush_every_s
        self.on_record = on_record
        self.rows: list[dict[str, Any]] = []
        self._columns: list[str] = []
        self._last_flush = time.monotonic()
        # Metric sinks asked for through the environment (so sweep workers get them too).
        from constrained_grpo.eval.monitor import sinks_from_env

        self._sinks = sinks_from_env()

    def __call__(self, record: Mapping[str, Any]) -> None:
        validate_log_record(record, len(self.constraint_names))
        # Agents count from 0 or from 1: the table numbers rows itself (the agent's counter is
        # ``agent_iteration``, schema.RECORD_COLUMNS).
        flat = flatten_record(record, self.constraint_names)
        row = {"iteration": len(self.rows), **flat}
        for key in row:
            if key not in self._columns:
                self._columns.append(key)
        self.rows.append(row)
        if self.on_record is not None:
            self.on_record(row)
        for hook in [*_RECORD_HOOKS, *self._sinks]:
            try:
                hook(self.path.parent, row)
            except Exception:  # a broken monitor must never fail the run
                pass
        if time.monotonic() - self._last_flush >= self.flush_every_s:
            self.flush(fsync=False)

    @property
    def columns(self) -> list[str]:
        """Header: iteration, env_steps, wall_s, return, cost_*, lambda_*, then the rest in first-seen order."""
        return progress_columns(self.constraint_names, self._columns)

    def flush(self, *, fsync: bool = True) -> None:
        """Rewrite ``progress.csv`` with every record so far."""
        atomic_write_bytes(self.path, csv_bytes(self.rows, self.columns), fsync=fsync)
        self._last_flush = time.monotonic()

    def close(self, *, sinks: bool = True) -> None:
        """Final rewrite of ``progress.csv``; closes the metric sinks (``sinks=False``: flushes
        them, left open for the run's :meth:`summary`)."""
        self.flush(fsync=True)
        if sinks:
            self.close_sinks()
            return
        for sink in self._sinks:
            with contextlib.suppress(Exception):
                getattr(sink, "flush", lambda: None)()

    def summary(self, tags: Mapping[str, float]) -> None:
        """Scalars of the finished run (its evaluation's, ``monitor.evaluation_tags``) to the
        metric sinks that take them, at the last record's env steps."""
        step = int(self.rows[-1]["env_steps"]) if self.rows else 0
        for sink in self._sinks:
            with contextlib.suppress(Exception):  # a broken monitor must never fail the run
                getattr(sink, "summary", lambda *a: None)(self.path.parent, tags, step)

    @property
    def has_sinks(self) -> bool:
        """Whether any metric sink listens (TensorBoard, W&B)."""
        return bool(self._sinks)

    def close_sinks(self) -> None:
        """Close the metric sinks (idempotent)."""
        for sink in self._sinks:
            with contextlib.suppress(Exception):
                sink.close()
        self._sinks = []


def is_complete(path: Path) -> bool:
    """Whether the run directory has its completion marker."""
    return (Path(path) / DONE_FILE).is_file()


def clear_run_dir(path: Path) -> None:
    """Remove what an interrupted or failed attempt left, before a new attempt starts.

    Never called on a complete run (the sweep skips those).
    """
    path = Path(path)
    if is_complete(path):
        raise RuntimeError(f"refusing to clear the complete run {path}")
    if not path.is_dir():
        return
    for child in path.iterdir():
        if child.name == LOCK_FILE:
            continue
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()


def is_locked(path: Path) -> bool:
    """Whether a live process holds the run directory's lock (:func:`run_lock`) right now."""
    lock = Path(path) / LOCK_FILE
    try:
        fd = os.open(lock, os.O_RDWR)
    except OSError:  # no lock file yet (or unreadable): nobody holds it
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


@contextlib.contextmanager
def run_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on the run directory for the duration of an attempt.

    The kernel drops the lock when its process dies, so a lock never outlives a killed
    sweep; a live orphan (its driver was killed alone) keeps a restarted sweep out of
    the directory instead of both writing into it. The lock file is removed as the lock is
    released (a finished run keeps no ``.lock``): a process that locked the file just as it
    was removed sees that the path no longer names its file, and locks the new one instead.
    """
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    lock = path / LOCK_FILE
    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise RunBusyError(
                f"{path} is being written by another live process (another sweep, or the orphaned "
                "worker of a killed one); wait for it to finish, then rerun to resume"
            ) from None
        try:
            same = os.stat(lock).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # the holder removed it as we locked it: lock the path's file anew
    try:
        yield
    finally:
        try:
            lock.unlink(missing_ok=True)  # while still held: nobody can lock this file in between
        finally:
            os.close(fd)
