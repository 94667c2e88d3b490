"""The Ray backend of sweeps end to end: a Ray that the sweep starts and shuts down itself,
and ``cgrpo bench --backend ray --ray-address`` against a running cluster.

Both give the table of the default local backend, column by column (wall-clock times
aside), and leave no Ray process behind. The toy agent reaches Ray's workers by
``PYTHONPATH``: a Ray started by the sweep passes on the driver's ``sys.path`` (which
``conftest`` extends), and a cluster's nodes must have it in their own environment.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

pytestmark = pytest.mark.slow  # a Ray cluster starts in each test

ray = pytest.importorskip("ray", reason="the Ray backend needs the [ray] extra: pip install 'constrained-grpo[ray]'")

from cgrpo_toy_agent import TASK, TOY, subprocess_env  # noqa: E402
from constrained_grpo.eval import storage  # noqa: E402
from constrained_grpo.eval.scoring.loader import load_results, load_run  # noqa: E402
from constrained_grpo.eval.sweep import expand_grid, run_sweep  # noqa: E402

QUIET = {"progress": False, "echo": lambda line: None}
#: Two tiny runs: what the CLI part asks for with ``--seeds 2 --steps 200 --eval-episodes 3 --no-save``.
SPECS = expand_grid([TASK], [TOY], [0, 1], 200, eval_episodes=13, save_agent=False)
#: Long-table columns that differ between any two executions (seconds since training began).
TIMING_COLUMNS = ("wall_s",)
#: ``done.json`` fields that depend on the machine and the clock.
TIMING_DONE_FIELDS = ("wall_s", "host")
#: Command lines of Ray's own processes: the raylet and GCS binaries, workers (``ray::...``),
#: and the Python scripts in Ray's package (log monitor, dashboard, autoscaler). Matched at the
#: start only: other processes may carry Ray's folders in their arguments (a fork server's sys.path).
_RAY_PROCESS = re.compile(r"^(\S*/)?(raylet|gcs_server)(\s|$)|^ray::|^\S*python\S*\s+(-\S+\s+)*\S*/site-packages/ray/")


def _ray_processes() -> dict[int, str]:
    """pid -> command line of every Ray process on the machine (``ps``)."""
    listing = subprocess.run(["ps", "-eo", "pid=,args="], capture_output=True, text=True, check=True).stdout
    procs = {}
    for line in listing.splitlines():
        pid, _, args = line.strip().partition(" ")
        if _RAY_PROCESS.search(args):
            procs[int(pid)] = args
    return procs


def _new_ray_processes(before: dict[int, str], timeout_s: float = 20.0) -> dict[int, str]:
    """Ray processes that were not running ``before``, after waiting up to ``timeout_s`` for them to exit."""
    deadline = time.monotonic() + timeout_s
    while True:
        new = {pid: args for pid, args in _ray_processes().items() if pid not in before}
        if not new or time.monotonic() > deadline:
            return new
        time.sleep(0.2)


@pytest.fixture()
def ray_down() -> Iterator[dict[int, str]]:
    """No Ray in this process before the test; afterwards (pass or fail) Ray shut down and
    none of the Ray processes started meanwhile left. Yields the Ray processes of before."""
    assert not ray.is_initialized(), "another test left Ray initialised in this process"
    before = _ray_processes()
    try:
        yield before
    finally:
        if ray.is_initialized():
            ray.shutdown()
        left = _new_ray_processes(before)
        assert not left, f"Ray processes left running after the test: {left}"


@pytest.fixture(scope="module")
def local_results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``SPECS`` run by the default local backend: the reference table."""
    out = tmp_path_factory.mktemp("local")
    report = run_sweep(SPECS, out, workers=2, **QUIET)
    assert report.ok, report.summary()
    return out


def assert_same_columns(a: pd.DataFrame, b: pd.DataFrame, what: str) -> None:
    """Equal tables, compared exactly column by column, timing columns aside."""
    assert list(a.columns) == list(b.columns), what
    assert len(a) == len(b) and len(a) > 0, what
    for col in a.columns:
        if col not in TIMING_COLUMNS:
            pd.testing.assert_series_equal(a[col], b[col], check_exact=True, obj=f"{what}, column {col!r}")


def assert_same_results(expected: Path, actual: Path) -> None:
    """The same long tables and the same run files, timing and host aside."""
    assert_same_columns(load_results(expected).table, load_results(actual).table, "long table")
    for spec in SPECS:
        da, db = spec.run_dir(expected), spec.run_dir(actual)
        # What the agent logs beyond the long table's schema (loss, its own counter) too.
        # (One run at a time: load_results(extra_columns=True) refuses columns outside the schema.)
        assert_same_columns(load_run(da, extra_columns=True)[0], load_run(db, extra_columns=True)[0], f"{spec.key} with extra columns")
        assert (da / storage.EVAL_FILE).read_bytes() == (db / storage.EVAL_FILE).read_bytes()
        ca, cb = (json.loads((d / storage.CONFIG_FILE).read_text()) for d in (da, db))
        for key in ("schema", "run", "task", "algo", "versions"):
            assert ca[key] == cb[key], key
        assert "--out . " in cb["command"] and str(actual) not in json.dumps(cb)  # portable, no scratch path
        done_a, done_b = ({k: v for k, v in json.loads((d / storage.DONE_FILE).read_text()).items()
                           if k not in TIMING_DONE_FIELDS} for d in (da, db))
        assert done_a == done_b


def assert_complete(out: Path) -> None:
    """Every run of ``SPECS`` complete under ``out``, with nothing of an attempt left over."""
    for spec in SPECS:
        path = spec.run_dir(out)
        assert storage.is_complete(path), path
        assert not (path / storage.RUNNING_FILE).exists() and not (path / storage.ERROR_FILE).exists()
    assert [p for p in out.rglob("*") if ".tmp-" in p.name] == []


def test_sweep_starts_ray_and_gives_the_local_table(tmp_path: Path, local_results: Path, ray_down: dict[int, str]):
    report = run_sweep(SPECS, tmp_path, backend="ray", workers=2, **QUIET)
    assert report.ok, report.summary()
    assert sorted(report.done) == sorted(s.key for s in SPECS) and report.retried == []
    # The sweep shuts down the Ray it started: nothing of it is left, before any teardown.
    assert not ray.is_initialized()
    left = _new_ray_processes(ray_down)
    assert not left, f"the sweep left Ray processes running: {left}"
    assert_complete(tmp_path)
    assert_same_results(local_results, tmp_path)


@pytest.fixture()
def ray_head(monkeypatch: pytest.MonkeyPatch, ray_down: dict[int, str]) -> Iterator[str]:
    """A one-CPU Ray cluster whose head this process runs; yields its address.

    A cluster's workers import agents from their node's environment, so the head is
    started with the toy agent on ``PYTHONPATH`` (as ``ray start`` on a real node would be).
    """
    for name, value in subprocess_env().items():
        if name in ("PYTHONPATH", "OMP_NUM_THREADS"):
            monkeypatch.setenv(name, value)
    ctx = ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        yield ctx.address_info["gcs_address"]
    finally:
        ray.shutdown()


def _drivers_seen() -> set[int]:
    """Process ids of the drivers that have connected to this process's cluster (itself included).

    Read from the GCS job table (a private API, but the public ``ray.util.state`` needs the dashboard).
    """
    return {int(job["DriverPid"]) for job in ray._private.state.jobs()}


def test_cli_bench_on_a_running_cluster(tmp_path: Path, local_results: Path, ray_head: str):
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "constrained_grpo.cli", "bench", "--preset", "quick", "--tasks", TASK,
           "--algos", TOY, "--seeds", "2", "--steps", "200", "--eval-episodes", "13", "--no-save",
           "--no-progress", "--backend", "ray", "--ray-address", ray_head, "--out", str(out)]
    env = subprocess_env()
    env.pop("RAY_ADDRESS", None)
    # cwd: not the repository, so that workers find the agent only through the node's environment.
    proc = subprocess.Popen(cmd, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, stderr[-3000:]
    assert "2 run(s) done, 0 skipped" in stdout, stdout
    # The CLI ran its tasks on this cluster (it connected as a driver) instead of starting its own.
    assert proc.pid in _drivers_seen()
    assert ray.cluster_resources().get("CPU") == 1  # and the cluster is still up
    assert_complete(out)
    assert_same_results(local_results, out)
