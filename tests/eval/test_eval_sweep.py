"""Sweeps: resume, retries, crashes, SIGKILL in the middle, and the Ray backend."""

from __future__ import annotations

import json
import re
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import pytest

from cgrpo_toy_agent import TASK, TOY, TOY_UNCONSTRAINED, subprocess_env
from constrained_grpo.eval import storage
from constrained_grpo.eval.scoring.loader import ResultsError, load_results
from constrained_grpo.eval.sweep import SweepConfigError, expand_grid, run_sweep

QUIET = {"progress": False, "echo": lambda line: None}


def comparable(table: pd.DataFrame) -> pd.DataFrame:
    """The table without wall-clock times, which differ between any two executions."""
    return table.drop(columns=["wall_s"])


@pytest.mark.slow
def test_local_sweep_resumes_and_is_reproducible(tmp_path: Path):
    specs = expand_grid([TASK], [TOY, TOY_UNCONSTRAINED], [0, 1], 200, eval_episodes=13, save_agent=False)
    report = run_sweep(specs, tmp_path / "a", workers=2, **QUIET)
    assert report.ok and sorted(report.done) == sorted(s.key for s in specs)
    again = run_sweep(specs, tmp_path / "a", workers=2, **QUIET)
    assert again.done == [] and sorted(again.skipped) == sorted(s.key for s in specs)
    # Same seeds, another directory: the same table.
    run_sweep(specs[:2], tmp_path / "b", workers=1, **QUIET)
    a = load_results(tmp_path / "a").table
    b = load_results(tmp_path / "b").table
    pd.testing.assert_frame_equal(comparable(a[a["algo"] == TOY]).reset_index(drop=True), comparable(b).reset_index(drop=True))


def test_changed_settings_are_not_silently_skipped(tmp_path: Path):
    run_sweep(expand_grid([TASK], [TOY], [0], 100, eval_episodes=13, save_agent=False), tmp_path, workers=1, **QUIET)
    with pytest.raises(SweepConfigError, match="holds a completed run with settings"):
        run_sweep(expand_grid([TASK], [TOY], [0], 200, eval_episodes=13, save_agent=False), tmp_path, workers=1, **QUIET)


def test_a_default_changed_in_code_is_seen_in_completed_runs(tmp_path: Path):
    """Completed runs were matched on the settings they name (a preset's), so a default
    changed in code still counted its old runs as done."""
    specs = expand_grid([TASK], [TOY], [0], 100, eval_episodes=13, save_agent=False)
    run_sweep(specs, tmp_path, workers=1, **QUIET)
    config_path = specs[0].run_dir(tmp_path) / "config.json"
    config = json.loads(config_path.read_text())
    now = json.loads(json.dumps(config["algo"]["resolved"]))
    config["algo"]["resolved"]["config"]["lr"] = 0.5  # the run was made when the agent had this default
    config_path.write_text(json.dumps(config))
    with pytest.raises(SweepConfigError, match=r"resolved configuration the code now gives otherwise \(config\.lr: 0\.5 -> None\)"):
        run_sweep(specs, tmp_path, workers=1, **QUIET)
    report = run_sweep(specs, tmp_path, workers=1, force=True, **QUIET)  # --force redoes it with today's defaults
    assert report.done == [specs[0].key]
    assert json.loads(config_path.read_text())["algo"]["resolved"] == now


@pytest.mark.slow
def test_crashes_are_retried_reported_and_isolated(tmp_path: Path):
    markers = tmp_path / "markers"
    specs = (
        expand_grid([TASK], [TOY], [0], 200, eval_episodes=13, config={TOY: {"crash": "once", "marker_dir": str(markers)}}, save_agent=False)
        + expand_grid([TASK], [TOY], [1], 200, eval_episodes=13, config={TOY: {"crash": "always"}}, save_agent=False)
        + expand_grid([TASK], [TOY], [2], 200, eval_episodes=13, config={TOY: {"crash": "kill_once", "marker_dir": str(markers)}}, save_agent=False)
        + expand_grid([TASK], [TOY_UNCONSTRAINED], [0, 1], 200, eval_episodes=13, save_agent=False)
    )
    lines: list[str] = []
    report = run_sweep(specs, tmp_path / "out", workers=2, progress=False, echo=lines.append)
    key = f"{TASK}/{TOY}/seed_"
    assert sorted(report.done) == sorted([key + "0", key + "2", f"{TASK}/{TOY_UNCONSTRAINED}/seed_0", f"{TASK}/{TOY_UNCONSTRAINED}/seed_1"])
    assert list(report.failed) == [key + "1"] and "toy agent crash (always)" in report.failed[key + "1"]
    assert sorted(report.retried) == [key + "0", key + "1", key + "2"]
    text = "\n".join(lines)
    assert "RuntimeError: toy agent crash (once)" in text  # the traceback is shown
    assert "died abruptly" in text  # the SIGKILLed worker
    assert "FAILED after 2 attempt(s) (" in text
    # Every ended run says how far the sweep is, in a log too: k/N, elapsed, and an ETA until the last.
    ended = [ln for ln in lines if ln.startswith("[sweep] done ") or "FAILED after" in ln]
    counts = [int(re.search(r"; (\d+)/5, |\((\d+)/5, ", ln).group(1) or re.search(r"\((\d+)/5, ", ln).group(1))
              for ln in ended]
    assert sorted(counts) == [1, 2, 3, 4, 5] and all("elapsed" in ln for ln in ended)
    assert sum("ETA" in ln for ln in ended) == 4  # none once the last has ended
    res = load_results(tmp_path / "out", allow_incomplete=True)
    assert len(res.table.groupby(["algo", "seed"])) == 4
    assert "toy agent crash" in res.failed[str(storage.run_dir(tmp_path / "out", TASK, TOY, 1))]


def _tmp_files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if ".tmp-" in p.name]


@pytest.mark.slow
def test_sigkill_mid_sweep_then_resume(tmp_path: Path):
    """Kill the whole sweep (driver and workers) while runs are writing; rerun; all present once."""
    out = tmp_path / "sweep"
    cmd = [sys.executable, "-m", "constrained_grpo.cli", "bench", "--preset", "quick", "--tasks", TASK,
           "--algos", TOY, "--seeds", "6", "--steps", "300", "--eval-episodes", "13", "--workers", "2",
           "--config.sleep_s", "0.03", "--no-save", "--no-progress", "--out", str(out)]
    env = subprocess_env() | {"CGRPO_PROGRESS_FLUSH_S": "0"}  # rewrite progress.csv at every record

    # A reader polls the results while the sweep writes: it must never meet a broken file.
    stop = threading.Event()
    errors: list[str] = []

    def reader() -> None:
        while not stop.is_set():
            for path in out.rglob("progress.csv"):
                try:
                    df = pd.read_csv(path)
                    if df.isna().all(axis=1).any() or list(df["iteration"]) != list(range(len(df))):
                        errors.append(f"{path}: torn rows")
                except FileNotFoundError:
                    pass  # cleared by a new attempt between listing and reading
                except Exception as err:  # noqa: BLE001 - any parse error is the failure under test
                    errors.append(f"{path}: {err}")
            try:
                load_results(out, allow_incomplete=True, known_algos=[TOY])
            except ResultsError as err:
                if "no complete run" not in str(err) and "does not exist" not in str(err) and "no run directories" not in str(err):
                    errors.append(str(err))
            time.sleep(0.02)

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        for line in proc.stderr:  # wait until one run is done and others are under way
            if "[sweep] done" in line or time.monotonic() > deadline:
                break
        time.sleep(0.3)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    runs = [p for p in out.rglob("seed_*") if p.is_dir()]
    complete = [p for p in runs if storage.is_complete(p)]
    assert 1 <= len(complete) < 6, "the kill should land mid-sweep"

    rerun = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180)
    stop.set()
    thread.join(timeout=10)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert f"{len(complete)} of 6 run(s) already complete" in rerun.stderr
    assert errors == []
    res = load_results(out, known_algos=[TOY])
    counts = res.table[res.table["kind"] == "train"].groupby("seed").size()
    assert sorted(counts.index) == list(range(6))
    for seed in range(6):
        path = storage.run_dir(out, TASK, TOY, seed)
        done = json.loads((path / "done.json").read_text())
        assert counts[seed] == done["progress_rows"]
        assert not (path / "running.json").exists() and not (path / "error.txt").exists()
    assert _tmp_files(out) == []
