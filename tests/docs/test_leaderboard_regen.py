"""``cgrpo leaderboard results/standard --out results`` regenerates the committed leaderboard byte for byte.

``cgrpo leaderboard DIR`` reads the compact record in DIR (``record.json`` and one ``.npz``
per task), or every run directory under it (a folder holding ``config.json``; complete when
it also holds ``done.json``, with ``progress.csv`` and ``eval.csv``), and writes
``DIR/leaderboard.md``, ``DIR/leaderboard.html``, ``DIR/runs.csv`` (metrics per run),
``DIR/pairs.csv`` (the rank tests), ``DIR/deployments.csv`` (the deployment tables) and, with
``--table``, ``DIR/results.csv`` (the long table). The test copies the committed files of
``results/`` (``git ls-files``; every file when the tree is not a git checkout), less those
outputs, to a temporary folder, runs the command there, and compares the outputs with the
committed ones: ``leaderboard.md`` and ``leaderboard.html`` must be committed, ``runs.csv``,
``pairs.csv``, ``deployments.csv`` and ``results.csv`` are compared when they are.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from constrained_grpo.eval.scoring import record
from constrained_grpo.eval.scoring.loader import find_runs

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "results"
REQUIRED_OUTPUTS = ("leaderboard.md", "leaderboard.html")
OPTIONAL_OUTPUTS = ("runs.csv", "pairs.csv", "deployments.csv", "results.csv")


def committed_results_files() -> list[Path]:
    """Paths, relative to ``results/``, of the files committed there (tracked by git)."""
    if not RESULTS.is_dir():
        return []
    try:
        out = subprocess.run(
            ["git", "-C", str(REPO), "ls-files", "-z", "--", "results"],
            capture_output=True, text=True, check=True, timeout=60,
        ).stdout
        files = [Path(p).relative_to("results") for p in out.split("\0") if p]
    except (OSError, subprocess.SubprocessError):  # not a git checkout (an sdist, say): take what is there
        files = [p.relative_to(RESULTS) for p in RESULTS.rglob("*") if p.is_file()]
    return sorted(f for f in files if (RESULTS / f).is_file())


def cgrpo_command() -> list[str]:
    script = Path(sys.executable).parent / "cgrpo"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "constrained_grpo.cli"]


#: The tasks of the thread-independence check: a gridworld (exact optimum, the suite aggregate)
#: and a text task, at a fraction of the whole record's cost (the highway's scores, which use
#: no optimum, are checked byte for byte by the whole board's regeneration).
THREAD_CHECK_TASKS = ("Grid/HazardFuel3x3-v0", "Math/ChainSum-v0")


def _leaderboard(cwd: Path, record_dir: str, out: str, threads: str | None, table: bool) -> None:
    """``cgrpo leaderboard RECORD --out OUT`` in ``cwd`` (with ``threads`` BLAS threads when given)."""
    env = dict(os.environ)
    if threads is not None:
        env.update(OPENBLAS_NUM_THREADS=threads, OMP_NUM_THREADS=threads, MKL_NUM_THREADS=threads)
    proc = subprocess.run([*cgrpo_command(), "leaderboard", record_dir, "--out", out, "--quiet", *(["--table"] if table else [])],
                          cwd=cwd, capture_output=True, text=True, env=env, timeout=550)
    assert proc.returncode == 0, f"cgrpo leaderboard {record_dir} failed ({proc.returncode}):\n{proc.stderr[-4000:]}"


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_leaderboard_regenerates_byte_for_byte(tmp_path: Path) -> None:
    """The whole committed board, once (about 15 s idle on 2 cores)."""
    files = committed_results_files()
    outputs = {f.name for f in files if f.parent == Path(".") and f.name in REQUIRED_OUTPUTS + OPTIONAL_OUTPUTS}
    inputs = [f for f in files if not (f.parent == Path(".") and f.name in outputs)]

    dest = tmp_path / "results"
    dest.mkdir()
    for rel in inputs:
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(RESULTS / rel, dest / rel)
    # The leaderboard ranks the standard preset's runs; the other experiments' runs under
    # results/ (results/coupling/runs) have other budgets and are analysed by their own command.
    # They are committed as a compact record (eval/scoring/record.py), or as run folders.
    standard = dest / "standard"
    runs = ([standard] if record.is_record(standard) else find_runs(standard)) if standard.is_dir() else []

    if not runs and "leaderboard.md" not in outputs:
        pytest.skip("no committed reference results yet")
    assert runs, (
        "results/leaderboard.md is committed but no run directory (with config.json) is: "
        "commit the runs it was built from, or remove it"
    )
    missing = [name for name in REQUIRED_OUTPUTS if name not in outputs]
    assert not missing, (
        f"{len(runs)} run(s) are committed under results/ but results/{missing[0]} is not: run "
        "`cgrpo leaderboard results/standard --out results` and commit " + ", ".join(f"results/{m}" for m in missing)
    )
    _leaderboard(tmp_path, "results/standard", "out", None, "results.csv" in outputs)
    _compare(outputs, tmp_path / "out", "the machine's")


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_what_the_leaderboard_writes_does_not_depend_on_blas_threads(tmp_path: Path) -> None:
    """What is written must not depend on the machine's summation order: a record of two
    tasks built with one and then with two BLAS threads, one after the other, gives the same
    bytes in every output."""
    source = RESULTS / "standard"
    if not record.is_record(source):
        pytest.skip("no committed compact record")
    meta = json.loads((source / "record.json").read_text())
    kept = [f for f in meta["files"] if f["task"] in THREAD_CHECK_TASKS]
    assert {f["task"] for f in kept} == set(THREAD_CHECK_TASKS), "a thread-check task is not in the committed record"
    sub = tmp_path / "sub"
    sub.mkdir()
    for f in kept:
        shutil.copy2(source / f["file"], sub / f["file"])
    meta["files"] = kept
    meta["tasks"] = {t: v for t, v in meta["tasks"].items() if t in THREAD_CHECK_TASKS}
    # The manifest lists the algorithms of the tasks kept (ref-safe-driver runs on highway only).
    present = set()
    for f in kept:
        with np.load(sub / f["file"], allow_pickle=False) as z:
            present |= {str(a) for a in z["algo.values"]}
    meta["algos"] = {a: v for a, v in meta["algos"].items() if a in present}
    (sub / "record.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    for threads in ("1", "2"):
        _leaderboard(tmp_path, "sub", f"out-{threads}", threads, True)
    names = sorted(p.name for p in (tmp_path / "out-1").iterdir() if p.is_file())
    assert {"leaderboard.md", "leaderboard.html", "runs.csv", "pairs.csv", "deployments.csv"} <= set(names) and len(names) >= 6
    for name in names:
        one, two = (tmp_path / "out-1" / name).read_bytes(), (tmp_path / "out-2" / name).read_bytes()
        assert one == two, f"{name} differs between 1 and 2 BLAS threads"


def _compare(outputs: set[str], dest: Path, threads: str) -> None:
    for name in sorted(outputs):
        committed = (RESULTS / name).read_bytes()
        regenerated = (dest / name).read_bytes()
        if committed != regenerated:
            a, b = committed.decode("utf-8", "replace").splitlines(), regenerated.decode("utf-8", "replace").splitlines()
            first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            pytest.fail(
                f"results/{name} differs from what `cgrpo leaderboard results/standard --out results` writes from the committed runs "
                f"({threads} BLAS thread(s)), "
                f"first at line {first + 1}:\n  committed:   {a[first] if first < len(a) else '<end of file>'}\n"
                f"  regenerated: {b[first] if first < len(b) else '<end of file>'}\n"
                "Regenerate it with `cgrpo leaderboard results/standard --out results` and commit the result."
            )
