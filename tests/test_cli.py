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
from inprocess import run_cgrpo

HERE = Path(__file__).resolve().parent
TOY = "cgrpo_toy_agent:ToyAgent"
TOY_UNCONSTRAINED = "cgrpo_toy_agent:unconstrained"
TASK = "Grid/HazardFuel3x3-v0"


def cgrpo_subprocess(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """Run the installed ``cgrpo`` (or ``python -m constrained_grpo.cli`` where it is not on PATH):
    the one smoke test per verb that the entry point itself starts."""
    exe = shutil.which("cgrpo", path=str(Path(sys.executable).parent))
    cmd = [exe] if exe else [sys.executable, "-m", "constrained_grpo.cli"]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE / "eval"), *filter(None, [env.get("PYTHONPATH")])])
    env["OMP_NUM_THREADS"] = "1"
    return subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=timeout, env=env)


def cgrpo(*args: str) -> subprocess.CompletedProcess[str]:
    """``cgrpo ARGS`` in this process (tests/inprocess.py), the toy agent importable."""
    return run_cgrpo(*args, pythonpath=[HERE / "eval"])


def test_parse_config_args():
    rest, cfg = parse_config_args(["train", "T", "A", "--config.lr", "0.01", "--config.name=adam", "--config.xs", "[1, 2]",
                                   "--config.flag", "true", "--seed", "3"])
    assert rest == ["train", "T", "A", "--seed", "3"]
    assert cfg == {"lr": 0.01, "name": "adam", "xs": [1, 2], "flag": True}
    with pytest.raises(CliError, match="needs a value"):
        parse_config_args(["--config.lr"])


@pytest.mark.slow
def test_envs_lists_tasks_with_limits():
    r = cgrpo_subprocess("envs", "--family", "gridworld")  # other families start simulators: slow
    assert r.returncode == 0, r.stderr
    assert "Grid/HazardFuel-v0" in r.stdout and "hazard" in r.stdout and "<= 0.1" in r.stdout and "<= 12" in r.stdout


@pytest.mark.slow
def test_check_passes_and_unknown_id_is_a_clear_error():
    r = cgrpo_subprocess("check", TASK, "--steps", "50")
    assert r.returncode == 0 and "OK" in r.stdout, r.stderr
    bad = cgrpo("check", "Grid/Nope-v0")
    assert bad.returncode == 2 and "unknown task id 'Grid/Nope-v0'" in bad.stderr and "Traceback" not in bad.stderr


@pytest.mark.slow
def test_algos_lists_the_registry():
    r = cgrpo_subprocess("algos")
    assert r.returncode == 0, r.stderr
    from constrained_grpo.registry import list_agents

    for name in list_agents():
        assert name in r.stdout


@pytest.mark.slow
def test_train_writes_a_run_and_skips_it_next_time(tmp_path: Path):
    args = ("train", TASK, TOY, "--seed", "1", "--steps", "150", "--eval-episodes", "13", "--out", str(tmp_path),
            "--config.episodes_per_iter", "2", "--config.lr_lambda=0.1")
    r = cgrpo_subprocess(*args)
    assert r.returncode == 0, r.stderr
    assert "final policy, 13 episodes from reset seeds 1000000+i, sampled actions" in r.stdout
    assert "vs limit 0.2" in r.stdout and "average iterate" in r.stdout
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
    r = cgrpo_subprocess("bench", "--preset", "quick", "--tasks", TASK, "--algos", TOY, TOY_UNCONSTRAINED, "--seeds", "2",
              "--steps", "150", "--eval-episodes", "13", "--workers", "2", "--no-save", "--no-progress",
              "--config.episodes_per_iter", "2", "--out", str(out))
    assert r.returncode == 0, r.stderr[-3000:]
    assert "4 run(s) done" in r.stdout and f"cgrpo leaderboard {out}" in r.stdout
    return out


@pytest.mark.slow
def test_bench_runs_the_grid(bench_dir: Path):
    cfg = json.loads(next(bench_dir.rglob("seed_0/config.json")).read_text())
    assert cfg["run"]["config"] == {"episodes_per_iter": 2}
    r = cgrpo("bench", "--preset", "nope")
    assert r.returncode == 2 and "invalid choice" in r.stderr


@pytest.mark.slow
def test_leaderboard_and_check(bench_dir: Path, tmp_path: Path):
    r = cgrpo_subprocess("leaderboard", str(bench_dir))
    assert r.returncode == 0, r.stderr
    assert "# constrained-grpo leaderboard" in r.stdout and "[95% CI]" in r.stdout
    assert not (bench_dir / "results.csv").exists()  # the long table only on request
    assert cgrpo("leaderboard", str(bench_dir), "--table", "--quiet").returncode == 0
    md = (bench_dir / "leaderboard.md").read_text()
    assert md + "\n" == r.stdout or md == r.stdout.rstrip("\n") or md.strip() == r.stdout.strip()
    assert (bench_dir / "leaderboard.html").read_text().startswith("<!DOCTYPE html>")
    # The results' own runs clash with themselves (the rule --add applies); renamed, they are
    # a copy under a second name (issue 54); checked alone, the renamed table is valid.
    clash = cgrpo("leaderboard", str(bench_dir), "--check", str(bench_dir / "results.csv"))
    assert clash.returncode == 1 and "in the results already" in clash.stdout, clash.stdout + clash.stderr
    renamed = tmp_path / "renamed.csv"
    table = pd.read_csv(bench_dir / "results.csv")
    table.assign(algo=table["algo"].str.replace("cgrpo_toy_agent:", "mine-", regex=False)).to_csv(renamed, index=False)
    copy = cgrpo("leaderboard", str(bench_dir), "--check", str(renamed))
    assert copy.returncode == 1 and "same evaluation episodes as" in copy.stdout, copy.stdout + copy.stderr
    ok = cgrpo("leaderboard", str(tmp_path / "no-board"), "--check", str(renamed))
    assert ok.returncode == 0 and ok.stdout.startswith("OK"), ok.stdout + ok.stderr
    bad = tmp_path / "bad.csv"
    pd.read_csv(bench_dir / "results.csv").drop(columns=["kind"]).to_csv(bad, index=False)
    rejected = cgrpo("leaderboard", str(bench_dir), "--check", str(bad))
    assert rejected.returncode == 1 and "REJECTED" in rejected.stdout and "'kind'" in rejected.stdout
    assert rejected.stdout.count(str(bad)) == 1  # the path once


@pytest.mark.slow
def test_plot(bench_dir: Path):
    r = cgrpo_subprocess("plot", str(bench_dir))
    assert r.returncode == 0, r.stderr
    pngs = sorted((bench_dir / "plots").glob("*.png"))
    assert len(pngs) == 4 and all(str(p) in r.stdout for p in pngs)


@pytest.mark.slow
def test_malformed_results_get_a_clear_error(tmp_path: Path):
    r = cgrpo("leaderboard", str(tmp_path / "missing"))
    assert r.returncode == 2 and "does not exist" in r.stderr and "Traceback" not in r.stderr


# --------------------------------------------------------------- input validation (issue 17)


def run_main(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    """``cgrpo ARGV`` in this process: exit status and stderr."""
    from constrained_grpo.cli import main

    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse usage errors
        code = int(exc.code or 0)
    return code, capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["train", TASK, TOY, "--seed", "-1"], "--seed must be >= 0, got -1"),
        (["train", TASK, TOY, "--steps", "0"], "--steps must be >= 1, got 0"),
        (["check", TASK, "--steps", "-5"], "--steps must be >= 1, got -5"),
        (["bench", "--workers", "0"], "--workers must be >= 1, got 0"),
        (["bench", "--seeds", "0"], "--seeds must be >= 1, got 0"),
        (["bench", "--seeds", "5-2"], "the range ends before it starts"),
        (["bench", "--seeds", "1,1"], "seeds are distinct whole numbers >= 0"),
        (["bench", "--seeds", "ten"], "give a count (10), a range (100-109) or a list (0,3,7)"),
        (["train", TASK, TOY, "--steps", "2.5"], "'2.5' is not a whole number; write one such as 20000 or 2e4"),
        (["train", TASK, "cgrpo", "--config.limits", '{"hazard": 2}'],
         "limit for constraint 'hazard' is a probability (the cost is 1 at most once per episode), got 2"),
        (["train", TASK, "PPO_Lag"], "unknown algorithm 'PPO_Lag' (did you mean 'ppo-lag'?)"),
        (["train", "Math/ChainSum-v0", "ppo-lag"],
         "ppo-lag cannot train on Math/ChainSum-v0: the math tasks take and give text, and ppo-lag's policy acts on "
         "vectors; use one that trains a language model: cgrpo"),
        (["leaderboard", ".", "--tol", "nan"], "--tol must be a finite number >= 0"),
        (["leaderboard", ".", "--tol", "inf"], "--tol must be a finite number >= 0"),
        (["leaderboard", ".", "--tol", "-1"], "--tol must be a finite number >= 0"),
        (["leaderboard", ".", "--check", "."], "--check . is a folder; give the submission's CSV file"),
        (["train", TASK, TOY, "--config.lr", "[1,"], "--config.lr: '[1,' is not a valid value"),
        (["train", TASK, TOY, "--config.lr", "NaN"], "NaN is not a finite number"),
        (["train", TASK, TOY, "--config.env_kwargs", '{"size": 3000'], "--config.env_kwargs"),
    ],
)
def test_bad_arguments_are_one_line_errors_before_any_work(capsys, tmp_path: Path, monkeypatch, argv, message):
    monkeypatch.chdir(tmp_path)
    code, err = run_main(capsys, *argv, *(["--out", str(tmp_path / "out")] if argv[0] in ("train", "bench") else []))
    assert code == 2 and message in err and "Traceback" not in err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())  # nothing written


def test_numbers_and_seeds_are_read_as_users_write_them():
    from constrained_grpo.cli import _parser

    args = _parser().parse_args(["bench", "--seeds", "100-109", "--steps", "1e5", "--eval-episodes", "2_000"])
    assert args.seeds == tuple(range(100, 110)) and args.steps == 100_000 and args.eval_episodes == 2000
    assert _parser().parse_args(["bench", "--seeds", "0,3,7"]).seeds == (0, 3, 7)
    assert _parser().parse_args(["bench", "--seeds", "4"]).seeds == 4
    assert _parser().parse_args(["train", TASK, TOY, "--steps", "2.5e4"]).steps == 25_000
    # Held-out seeds reach the runs: the preset's grid takes the range.
    from constrained_grpo.eval.presets import resolve

    assert resolve("quick", algos=["ppo"], seeds=(100, 101)).seeds == (100, 101)


def test_unwritable_out_is_a_one_line_error(capsys, tmp_path: Path):
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    code, err = run_main(capsys, "train", TASK, TOY, "--out", str(blocked / "runs"))
    assert code == 2 and f"--out {blocked / 'runs'} is not a writable folder" in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--config.lr", "true", "GRPOConfig option 'lr' takes a number, got True"),
        ("--config.lr", "abc", "GRPOConfig option 'lr' takes a number, got 'abc'"),
        ("--config.group_size", "2.5", "GRPOConfig option 'group_size' takes an integer, got 2.5"),
        ("--config.multiplier", '{"lr": "fast"}', "MultiplierConfig option 'lr' takes a number, got 'fast'"),
    ],
)
def test_config_values_of_the_wrong_type_name_the_field(capsys, tmp_path: Path, option, value, message):
    code, err = run_main(capsys, "train", TASK, "cgrpo", "--steps", "10", "--out", str(tmp_path), option, value)
    assert code == 2 and message in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []  # no half-made run folder left behind


def test_grid_sizes_are_bounded_before_memory_runs_out():
    import gymnasium as gym

    import constrained_grpo.envs  # noqa: F401  (registers the tasks)

    with pytest.raises(ValueError, match=r"size=3000 is too large: grid sizes go up to 64"):
        gym.make("Grid/HazardFuel-v0", size=3000)
    with pytest.raises(ValueError, match=r"too large: at most 4096 cells"):
        gym.make("Grid/HazardFuel-v0", layout=("S" + "." * 99 + "G",) * 50)


def test_train_refuses_a_complete_run_with_other_settings_unless_forced(capsys, tmp_path: Path):
    """A run trained with --steps 300 is not "complete already" for --steps 200."""
    sys.path.insert(0, str(HERE / "eval"))
    try:
        base = ["train", TASK, TOY, "--steps", "300", "--eval-episodes", "13", "--no-save", "--out", str(tmp_path)]
        assert run_main(capsys, *base)[0] == 0
        run = tmp_path / "Grid" / "HazardFuel3x3-v0" / "cgrpo_toy_agent_ToyAgent" / "seed_0"
        other = [*base[:4], "200", *base[5:]]
        code, err = run_main(capsys, *other)
        assert code == 2 and "holds a completed run with settings" in err and "--force" in err
        assert json.loads((run / "config.json").read_text())["run"]["steps"] == 300
        code, err = run_main(capsys, *other, "--force")
        assert code == 0, err
        assert json.loads((run / "config.json").read_text())["run"]["steps"] == 200
        assert run_main(capsys, *other)[0] == 0  # the same settings: complete already
        # Too few episodes to certify the hazard limit (0.2 needs 13) is refused before --force
        # removes anything: the complete run stays.
        code, err = run_main(capsys, *[*other[:6], "12", *other[7:]], "--force")
        assert code == 2 and "use at least 13" in err and "Traceback" not in err
        assert (run / "done.json").exists() and json.loads((run / "config.json").read_text())["run"]["eval_episodes"] == 13
    finally:
        sys.path.remove(str(HERE / "eval"))


def test_bench_refuses_a_bad_option_before_any_run(capsys, tmp_path: Path):
    code, err = run_main(capsys, "bench", "--preset", "quick", "--tasks", TASK, "--algos", "cgrpo", "ppo-lag",
                         "--seeds", "1", "--steps", "100", "--no-progress", "--out", str(tmp_path / "b"),
                         "--config.cgrpo.entropy_coeff", "0.1")
    assert code == 2 and "Traceback" not in err
    assert "--config for cgrpo on Grid/HazardFuel3x3-v0: unknown GRPO option(s) ['entropy_coeff']" in err
    assert not any((tmp_path / "b").rglob("config.json"))  # no run was started


@pytest.mark.slow
def test_train_and_bench_resolve_one_configuration_and_record_it(capsys, tmp_path: Path):
    """One (algo, task, overrides) is one configuration, whichever command runs it, and
    config.json records it whole; `cgrpo algos NAME --task ID` prints it."""
    from constrained_grpo.eval.presets import resolve
    from constrained_grpo.registry import resolve_config

    overrides = {"lr": 0.02, "multiplier": {"lr": 0.3}}
    code, _ = run_main(capsys, "train", TASK, "cgrpo", "--steps", "300", "--eval-episodes", "13", "--no-save",
                       "--out", str(tmp_path / "t"), "--config.lr", "0.02", "--config.multiplier", '{"lr": 0.3}')
    assert code == 0
    recorded = json.loads(next((tmp_path / "t").rglob("config.json")).read_text())["algo"]["resolved"]
    assert recorded == resolve_config("cgrpo", TASK, **overrides)
    assert recorded["config"]["lr"] == 0.02 and recorded["config"]["multiplier"]["lr"] == 0.3
    assert recorded["config"]["hidden_sizes"] == []  # the gridworld row of the family table applies
    # bench builds the same RunSpec config for the same overrides when its preset adds none.
    preset = resolve("standard", tasks=[TASK], algos=["cgrpo"], seeds=1, steps=300, eval_episodes=13)
    bench_config = {**dict(preset.config.get("cgrpo", {})), **overrides}
    assert resolve_config("cgrpo", TASK, **bench_config) == recorded
    # ... and `cgrpo bench` itself, run with the same overrides, records the same configuration.
    code, err = run_main(capsys, "bench", "--preset", "standard", "--tasks", TASK, "--algos", "cgrpo", "--seeds", "1",
                         "--steps", "300", "--eval-episodes", "13", "--workers", "1", "--no-save", "--no-progress",
                         "--out", str(tmp_path / "b"), "--config.cgrpo.lr", "0.02",
                         "--config.cgrpo.multiplier", '{"lr": 0.3}')
    assert code == 0, err[-2000:]
    benched = json.loads(next((tmp_path / "b").rglob("config.json")).read_text())["algo"]["resolved"]
    assert benched == recorded
    code = run_main(capsys, "algos", "cgrpo", "--task", TASK)[0]
    assert code == 0


def test_algos_prints_the_resolved_configuration(capsys):
    from constrained_grpo.cli import main

    assert main(["algos", "grpo-screw", "--task", TASK]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["algo"] == "grpo-screw" and shown["config"]["aggregator"] == "screw"
    assert main(["algos", "grpo-screw"]) == 2
    assert "needs --task ID" in capsys.readouterr().err


def test_algos_lists_every_name_in_aligned_columns_and_references_as_such(capsys):
    from constrained_grpo.cli import main
    from constrained_grpo.registry import agent_spec, list_agents

    assert main(["algos"]) == 0
    *lines, aliases = capsys.readouterr().out.splitlines()
    names = list_agents(aliases=False)  # learning algorithms; a deployment rule is an option of a run
    assert [ln.split()[0] for ln in lines] == names and "cgrpo-best" not in names
    assert aliases.startswith("aliases") and "cgrpo-best = cgrpo deploy=best-feasible" in aliases
    width = max(len(n) for n in names)
    # The kind column starts after the longest name (trpo-lag-omnisafe, 17 characters) on every line.
    assert {ln[width + 2:].split()[0] for ln in lines} <= {"constrained", "unconstrained", "reference"}
    assert all(ln[width:width + 2] == "  " for ln in lines)
    kinds = {ln.split()[0]: ln.split()[1] for ln in lines}
    assert {n for n, k in kinds.items() if k == "reference"} == {n for n in names if agent_spec(n).reference}
    assert kinds["ref-random"] == "reference" and kinds["ppo"] == "unconstrained" and kinds["cpo"] == "constrained"


def test_a_usage_error_imports_neither_pandas_nor_scipy_nor_torch():
    """Argument errors and --help come before the heavy imports (pandas, scipy, torch: over a
    second of CPU together), so a typo is answered at once."""
    import subprocess
    import sys

    code = ("import sys\nfrom constrained_grpo.cli import main\n"
            "for argv in (['train', '--bogus'], ['--help'], ['bench', '--seeds', 'ten']):\n"
            "    try:\n        main(argv)\n    except SystemExit:\n        pass\n"
            "print(sorted(m for m in ('pandas', 'scipy', 'torch', 'stable_baselines3') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout + out.stderr
