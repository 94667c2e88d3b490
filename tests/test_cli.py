"""Subprocess smoke tests of every ``cgrpo`` command, with tiny budgets."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from constrained_grpo.cli import CliError, parse_config_args

HERE = Path(__file__).resolve().parent
TOY = "cgrpo_toy_agent:ToyAgent"
TOY_UNCONSTRAINED = "cgrpo_toy_agent:unconstrained"
TASK = "Grid/HazardFuel3x3-v0"


def cgrpo(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """Run the installed ``cgrpo`` (or ``python -m constrained_grpo.cli`` where it is not on PATH)."""
    exe = shutil.which("cgrpo", path=str(Path(sys.executable).parent))
    cmd = [exe] if exe else [sys.executable, "-m", "constrained_grpo.cli"]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE / "eval"), *filter(None, [env.get("PYTHONPATH")])])
    env["OMP_NUM_THREADS"] = "1"
    return subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=timeout, env=env)


def test_parse_config_args():
    rest, cfg = parse_config_args(["train", "T", "A", "--config.lr", "0.01", "--config.name=adam", "--config.xs", "[1, 2]",
                                   "--config.flag", "true", "--seed", "3"])
    assert rest == ["train", "T", "A", "--seed", "3"]
    assert cfg == {"lr": 0.01, "name": "adam", "xs": [1, 2], "flag": True}
    with pytest.raises(CliError, match="needs a value"):
        parse_config_args(["--config.lr"])


def test_envs_lists_tasks_with_limits():
    r = cgrpo("envs", "--family", "gridworld")  # other families start simulators: slow
    assert r.returncode == 0, r.stderr
    assert "Grid/HazardFuel-v0" in r.stdout and "hazard" in r.stdout and "<= 0.1" in r.stdout and "<= 12" in r.stdout


def test_check_passes_and_unknown_id_is_a_clear_error():
    r = cgrpo("check", TASK, "--steps", "50")
    assert r.returncode == 0 and "OK" in r.stdout, r.stderr
    bad = cgrpo("check", "Grid/Nope-v0")
    assert bad.returncode == 2 and "unknown task id 'Grid/Nope-v0'" in bad.stderr and "Traceback" not in bad.stderr


def test_algos_lists_the_registry():
    r = cgrpo("algos")
    assert r.returncode == 0, r.stderr
    from constrained_grpo.registry import list_agents

    for name in list_agents():
        assert name in r.stdout


def test_train_writes_a_run_and_skips_it_next_time(tmp_path: Path):
    args = ("train", TASK, TOY, "--seed", "1", "--steps", "150", "--eval-episodes", "3", "--out", str(tmp_path),
            "--config.episodes_per_iter", "2", "--config.lr_lambda=0.1")
    r = cgrpo(*args)
    assert r.returncode == 0, r.stderr
    assert "eval return" in r.stdout
    run = tmp_path / "Grid" / "HazardFuel3x3-v0" / "cgrpo_toy_agent_ToyAgent" / "seed_1"
    config = json.loads((run / "config.json").read_text())
    assert config["run"]["config"] == {"episodes_per_iter": 2, "lr_lambda": 0.1}
    assert (run / "agent" / "config.json").exists() and (run / "done.json").exists()
    again = cgrpo(*args)
    assert again.returncode == 0 and "complete already" in again.stdout
    unknown = cgrpo("train", TASK, "no-such-algo", "--steps", "10", "--out", str(tmp_path))
    assert unknown.returncode == 2 and "unknown algorithm 'no-such-algo'" in unknown.stderr


@pytest.fixture(scope="module")
def bench_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("bench")
    r = cgrpo("bench", "--preset", "quick", "--tasks", TASK, "--algos", TOY, TOY_UNCONSTRAINED, "--seeds", "2",
              "--steps", "150", "--eval-episodes", "3", "--workers", "2", "--no-save", "--no-progress",
              "--config.episodes_per_iter", "2", "--out", str(out))
    assert r.returncode == 0, r.stderr[-3000:]
    assert "4 run(s) done" in r.stdout and f"cgrpo leaderboard {out}" in r.stdout
    return out


def test_bench_runs_the_grid(bench_dir: Path):
    cfg = json.loads(next(bench_dir.rglob("seed_0/config.json")).read_text())
    assert cfg["run"]["config"] == {"episodes_per_iter": 2}
    r = cgrpo("bench", "--preset", "nope")
    assert r.returncode == 2 and "invalid choice" in r.stderr


def test_leaderboard_and_check(bench_dir: Path, tmp_path: Path):
    r = cgrpo("leaderboard", str(bench_dir))
    assert r.returncode == 0, r.stderr
    assert "# constrained-grpo leaderboard" in r.stdout and "[95% CI]" in r.stdout
    md = (bench_dir / "leaderboard.md").read_text()
    assert md + "\n" == r.stdout or md == r.stdout.rstrip("\n") or md.strip() == r.stdout.strip()
    assert (bench_dir / "leaderboard.html").read_text().startswith("<!DOCTYPE html>")
    ok = cgrpo("leaderboard", str(bench_dir), "--check", str(bench_dir / "results.csv"))
    assert ok.returncode == 0 and ok.stdout.startswith("OK"), ok.stdout + ok.stderr
    bad = tmp_path / "bad.csv"
    pd.read_csv(bench_dir / "results.csv").drop(columns=["kind"]).to_csv(bad, index=False)
    rejected = cgrpo("leaderboard", str(bench_dir), "--check", str(bad))
    assert rejected.returncode == 1 and "REJECTED" in rejected.stdout and "'kind'" in rejected.stdout


def test_plot(bench_dir: Path):
    r = cgrpo("plot", str(bench_dir))
    assert r.returncode == 0, r.stderr
    pngs = sorted((bench_dir / "plots").glob("*.png"))
    assert len(pngs) == 4 and all(str(p) in r.stdout for p in pngs)


def test_malformed_results_get_a_clear_error(tmp_path: Path):
    r = cgrpo("leaderboard", str(tmp_path / "missing"))
    assert r.returncode == 2 and "does not exist" in r.stderr and "Traceback" not in r.stderr
