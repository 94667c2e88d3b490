"""Killing a ``cgrpo bench`` driver leaves nothing running, and a rerun completes every run once.

The driver runs in its own session, so "a process of ours" is any process of that
session (workers, the fork server, the resource tracker all inherit it).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cgrpo_toy_agent import TASK, TOY, subprocess_env

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads sessions from /proc (Linux)")

SEEDS = 4


def session_pids(sid: int) -> list[int]:
    """Live (not zombie) processes whose session id is ``sid``."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if fields[0] != "Z" and int(fields[3]) == sid:
            pids.append(int(entry.name))
    return pids


def wait_gone(sid: int, within: float = 60.0) -> list[int]:
    """The session's processes still alive after waiting up to ``within`` seconds for them to end
    (an orphan never ends; a minute leaves a loaded machine time to reap the others)."""
    deadline = time.monotonic() + within
    while session_pids(sid) and time.monotonic() < deadline:
        time.sleep(0.1)
    return session_pids(sid)


def bench(out: Path, steps: int) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "constrained_grpo.cli", "bench", "--tasks", TASK, "--algos", TOY,
           "--seeds", str(SEEDS), "--steps", str(steps), "--eval-episodes", "13", "--workers", "2",
           "--no-save", "--no-progress", "--config.sleep_s", "0.01", "--out", str(out)]
    return subprocess.Popen(cmd, env=subprocess_env(), start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def kill_at_random(out: Path, sig: signal.Signals, rng: random.Random, within: float) -> int:
    """Start a bench, send ``sig`` to its driver ``U(0, within)`` s after a run of it started,
    check that no process of it is left once it has ended; return the runs complete by then."""
    started = time.time()
    proc = bench(out, 10_000)
    sid = proc.pid  # a session leader's session id is its pid
    # Until a run has started: a sweep that never starts one is failed by the test's timeout marker.
    while not any(p.stat().st_mtime >= started for p in out.rglob("running.json")):
        time.sleep(0.05)
    time.sleep(rng.uniform(0.0, within))
    os.kill(proc.pid, sig)
    text, _ = proc.communicate(timeout=30)
    if sig == signal.SIGTERM:  # handled like Ctrl-C: a one-line message, no traceback
        assert proc.returncode == 130 and "interrupted" in text and "Traceback" not in text, text
    assert wait_gone(sid) == [], f"processes of the sweep killed by {sig.name} are still alive a minute later"
    complete = len(list(out.rglob("done.json")))
    assert complete < SEEDS, "the sweep ended before the kill; the test killed nothing"
    return complete


@pytest.mark.slow
def test_killed_driver_leaves_no_process_and_rerun_completes_once(tmp_path: Path):
    out = tmp_path / "out"
    rng = random.Random(17)
    kill_at_random(out, signal.SIGKILL, rng, 3.0)  # a run takes about 2.5 s: some may finish
    complete_before = kill_at_random(out, signal.SIGTERM, rng, 1.5)

    rerun = bench(out, 10_000)
    text, _ = rerun.communicate(timeout=120)
    assert rerun.returncode == 0 and "FAILED" not in text, text
    # Every run completed exactly once: the rerun trains the unfinished ones and skips the others.
    summary = f"{SEEDS - complete_before} run(s) done, {complete_before} skipped (already complete), 0 failed, 0 retried"
    assert summary in text, text
    done = sorted(out.rglob("done.json"))
    assert len(done) == SEEDS
    for marker in done:
        assert json.loads(marker.read_text())["attempt"] == 1
        assert not (marker.parent / "error.txt").exists() and not (marker.parent / "running.json").exists()
    assert wait_gone(rerun.pid) == []


def _fork_server(sid: int) -> int | None:
    for pid in session_pids(sid):
        try:
            if b"multiprocessing.forkserver" in Path(f"/proc/{pid}/cmdline").read_bytes():
                return pid
        except OSError:
            continue
    return None


@pytest.mark.slow
def test_a_driver_killed_while_the_fork_server_starts_leaves_nothing_behind(tmp_path: Path):
    """The fork server imports torch and the agents for seconds before it serves; a driver
    killed meanwhile must not leave it (or the resource tracker, which waits for the
    server's copy of its pipe) running: the server dies with its parent (``_forkserver_guard``)."""
    proc = bench(tmp_path / "out", 10_000)
    sid = proc.pid
    while _fork_server(sid) is None:  # a bench that never starts one is failed by the timeout marker
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)
    assert wait_gone(sid, within=3.0) == [], "the fork server or the resource tracker outlived the killed driver"
    assert not list((tmp_path / "out").rglob("done.json"))  # killed before any run could end
