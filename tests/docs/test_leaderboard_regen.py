"""``cgrpo leaderboard results/standard --out results`` regenerates the committed leaderboard byte for byte.

``cgrpo leaderboard DIR`` reads the compact record in DIR (``record.json`` and one ``.npz``
per task), or every run directory under it (a folder holding ``config.json``; complete when
it also holds ``done.json``, with ``progress.csv`` and ``eval.csv``), and writes
``DIR/leaderboard.md``, ``DIR/leaderboard.html``, ``DIR/runs.csv`` (metrics per run),
``DIR/pairs.csv`` (the rank tests) and, with ``--table``, ``DIR/results.csv`` (the long table). The test copies the committed
files of ``results/`` (``git ls-files``; every file when the tree is not a git checkout),
less those four outputs, to a temporary folder, runs the command there, and compares the
outputs with the committed ones: ``leaderboard.md`` and ``leaderboard.html`` must be
committed, ``runs.csv``, ``pairs.csv`` and ``results.csv`` are compared when they are.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from constrained_grpo.eval.scoring import record
from constrained_grpo.eval.scoring.loader import find_runs

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "results"
REQUIRED_OUTPUTS = ("leaderboard.md", "leaderboard.html")
OPTIONAL_OUTPUTS = ("runs.csv", "pairs.csv", "results.csv")


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


# About 25 s on an idle 2-core machine (two rebuilds from the compact record of about 12 s).
@pytest.mark.timeout(600)
def test_leaderboard_regenerates_byte_for_byte(tmp_path: Path) -> None:
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

    # Twice, with one and with two BLAS threads: what is written must not depend on the
    # machine's summation order. The two run side by side (the suite runs one test at a time,
    # so the second core is otherwise idle), each into its own folder.
    procs = {}
    for threads in ("1", "2"):
        env = {**os.environ, "OPENBLAS_NUM_THREADS": threads, "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads}
        procs[threads] = subprocess.Popen(
            [*cgrpo_command(), "leaderboard", "results/standard", "--out", f"out-{threads}", "--quiet",
             *(["--table"] if "results.csv" in outputs else [])],
            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        )
    try:
        for threads, proc in procs.items():
            _, stderr = proc.communicate(timeout=550)
            assert proc.returncode == 0, f"cgrpo leaderboard results/standard failed ({proc.returncode}):\n{stderr[-4000:]}"
            _compare(outputs, tmp_path / f"out-{threads}", threads)
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()


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
