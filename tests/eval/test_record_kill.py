"""``record pack ROOT NEW --out ROOT`` killed by SIGKILL at every write step leaves a folder
that loads as the old record or the new one; packing again (the same command before the
manifest's rename, the record into itself after it) leaves exactly the new record's files.

The pack runs in a child process (``python -c``) that counts the mutations of the record's
folder (a file opened for writing, each write to it, its fsync, every rename and unlink) and
SIGKILLs itself at the k-th: before the call, except a write, which it cuts after half its
bytes (a torn temporary file). A first child runs to the end and reports the steps, N; then
one child per k in 1..N.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from cgrpo_toy_agent import TASK, TOY, subprocess_env

from constrained_grpo.eval.runner import RunSpec, execute_run, task_meta
from constrained_grpo.eval.scoring import record

#: A task beside TASK in the new runs, so that the pack writes two task files one by one.
OTHER = "Grid/Fuel-v0"

#: The child: hooks on the calls that change files under ROOT (argv[1]), then the CLI's
#: pack of ROOT and NEW (argv[2]) into ROOT; dies at mutation argv[3] (0: never, and prints
#: the steps as JSON). Only paths under ROOT count: imports may touch caches elsewhere.
CHILD = r"""
import builtins, io, json, os, signal, sys

root, new, kill_at = os.path.realpath(sys.argv[1]), sys.argv[2], int(sys.argv[3])
steps = []
fds = {}  # descriptor -> path of the files opened for writing under ROOT


def ours(path):
    return isinstance(path, (str, bytes, os.PathLike)) and os.path.realpath(os.fsdecode(path)).startswith(root + os.sep)


def mutation(what, path):
    # Counts one change; True when it is the one to die at.
    steps.append(f"{what} {os.path.basename(os.fsdecode(path))}")
    return len(steps) == kill_at


def die():
    os.kill(os.getpid(), signal.SIGKILL)


class Tracked:
    # A file opened for writing under ROOT: each write is a step.
    def __init__(self, fh, path):
        self._fh, self._path = fh, path

    def write(self, data):
        if mutation("write", self._path):
            self._fh.write(data[: len(data) // 2])
            self._fh.flush()  # the half reaches the file: a torn temporary
            die()
        return self._fh.write(data)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return self._fh.__exit__(*exc)

    def __getattr__(self, name):
        return getattr(self._fh, name)


real_open = builtins.open


def tracked_open(file, mode="r", *args, **kwargs):
    if not ours(file) or not set(mode) & set("wax+"):
        return real_open(file, mode, *args, **kwargs)
    if mutation("create", file):
        die()
    fh = real_open(file, mode, *args, **kwargs)
    fds[fh.fileno()] = file
    return Tracked(fh, file)


def hook(name, what, counts):
    real = getattr(os, name)

    def wrapper(*args, **kwargs):
        if counts(*args) and mutation(what, args[-1] if what == "rename" else args[0]):
            die()
        return real(*args, **kwargs)

    setattr(os, name, wrapper)


builtins.open = io.open = tracked_open
hook("replace", "rename", lambda src, dst: ours(dst))
hook("rename", "rename", lambda src, dst: ours(dst))
hook("unlink", "unlink", lambda path, **kw: ours(path))
hook("remove", "unlink", lambda path, **kw: ours(path))
real_fsync = os.fsync


def fsync(fd):
    if fd in fds and mutation("fsync", fds[fd]):
        die()
    return real_fsync(fd)


os.fsync = fsync

from constrained_grpo.eval.scoring import record

code = record.main(["pack", root, new, "--out", root])
print(json.dumps(steps))
sys.exit(code)
"""


def _child(root: Path, new: Path, kill_at: int) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", CHILD, str(root), str(new), str(kill_at)], env=subprocess_env(),
                          capture_output=True, text=True, timeout=120)


def _content(path: Path) -> tuple[pd.DataFrame, pd.DataFrame, dict, dict, dict]:
    rec = record.load_record(path, configs=True)
    return rec.table, rec.evals, rec.tasks, rec.algos, rec.configs


def _same(a: tuple, b: tuple) -> bool:
    return a[0].equals(b[0]) and a[1].equals(b[1]) and a[2:] == b[2:]


def _files(path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in path.iterdir()}


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.filterwarnings("ignore::constrained_grpo.eval.act_rows.SlowEvaluationWarning")  # the toy agent's OTHER run
def test_a_pack_into_its_own_folder_killed_at_every_write_step_loads_as_the_old_or_the_new_record(
        toy_results: Path, tmp_path: Path) -> None:
    # The old record: one algorithm's two seeds of TASK. The new runs: the other algorithm's
    # two seeds of TASK (TASK's file is rewritten under a new name, the old one unlinked) and a
    # run of OTHER (a second task file).
    half = tmp_path / "half"
    shutil.copytree(toy_results, half)
    moved = sorted((half / TASK).iterdir())[0]
    new = tmp_path / "new"
    (new / TASK).mkdir(parents=True)
    shutil.move(str(moved), new / TASK / moved.name)
    outcome = execute_run(RunSpec(OTHER, TOY, 0, 100, 5, {}, False), new, meta=task_meta(OTHER))
    assert outcome.status == "done", outcome.error
    first = tmp_path / "first"
    record.pack([half], first)
    whole = tmp_path / "whole"
    record.pack([first, new], whole)
    old_files, new_files = _files(first), _files(whole)
    old, wanted = _content(first), _content(whole)
    assert len(wanted[1]) > len(old[1]) and set(wanted[2]) == {TASK, OTHER} and set(old[2]) == {TASK}
    assert not (set(old_files) - {record.MANIFEST}) & set(new_files)  # TASK's file gets a new name

    # The uninterrupted child, for its steps and its result (the same bytes as packed here).
    root = tmp_path / "counted"
    shutil.copytree(first, root)
    done = _child(root, new, 0)
    assert done.returncode == 0, done.stdout + done.stderr
    steps = json.loads(done.stdout.splitlines()[-1])
    assert _files(root) == new_files
    # Every file the new record adds was written and renamed into place, every old task file
    # unlinked: the enumeration covers the change of the folder, not a part of it.
    added = set(new_files) - set(old_files) | {record.MANIFEST}
    removed = set(old_files) - set(new_files)
    assert {s.split()[1] for s in steps if s.startswith("rename")} == added
    assert {s.split()[1] for s in steps if s.startswith("unlink")} == removed
    for name in added:
        assert [s.split()[0] for s in steps if s.endswith(f" {name}") or s.split()[1].startswith(f".{name}.tmp-")] \
            == ["create", "write", "fsync", "rename"], (name, steps)
    n = len(steps)
    assert n >= 4 * len(added) + len(removed), steps  # create, write, fsync, rename per file; the unlinks

    resolved: dict[str, list[int]] = {"old": [], "new": []}
    for k in range(1, n + 1):
        root = tmp_path / f"killed_{k}"
        shutil.copytree(first, root)
        killed = _child(root, new, k)
        assert killed.returncode == -signal.SIGKILL, (k, steps[k - 1], killed.stdout + killed.stderr)
        now = _content(root)  # raises if the folder is neither record
        state = "old" if _same(now, old) else "new" if _same(now, wanted) else None
        assert state is not None, (k, steps[k - 1], sorted(p.name for p in root.iterdir()))
        resolved[state].append(k)
        if steps[k - 1].startswith("write"):  # killed mid-write: a torn temporary beside the record
            stem = steps[k - 1].split()[1].rsplit("-", 1)[0]  # ".NAME.tmp", the child's pid cut
            torn = [p for p in root.iterdir() if p.name.startswith(f"{stem}-")]
            assert len(torn) == 1 and 0 < torn[0].stat().st_size < len(new_files[stem[1:-len(".tmp")]]), (k, torn)
        # A second pack finishes the job: the same command before the switch; after it, the
        # record packed into itself (its runs are in it now). Nothing is lost, nothing is left.
        record.pack([root, new] if state == "old" else [root], root)
        assert _files(root) == new_files, (k, steps[k - 1], sorted(p.name for p in root.iterdir()))
    # The manifest's rename is the switch: every kill before it leaves the old record, every
    # one after it the new.
    switch = steps.index(f"rename {record.MANIFEST}") + 1
    assert resolved == {"old": list(range(1, switch + 1)), "new": list(range(switch + 1, n + 1))}, (resolved, steps)
