"""The command line for people at the keyboard: families that cannot start, user tasks,
"did you mean", live progress lines and TensorBoard scalars (issue 22)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from constrained_grpo.cli import format_progress
from constrained_grpo.eval.monitor import metric_tags
from inprocess import run_cgrpo

HERE = Path(__file__).resolve().parent
TUTORIAL = HERE.parent / "docs" / "tutorial.md"
TOY = "cgrpo_toy_agent:ToyAgent"
TASK = "Grid/HazardFuel3x3-v0"


def cgrpo_subprocess(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None,
                     timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """The installed ``cgrpo`` in a child process: the smoke tests of ``eval`` and ``render``."""
    exe = shutil.which("cgrpo", path=str(Path(sys.executable).parent))
    cmd = [exe] if exe else [sys.executable, "-m", "constrained_grpo.cli"]
    full = dict(os.environ)
    full["PYTHONPATH"] = os.pathsep.join([str(cwd or "."), str(HERE / "eval"), *filter(None, [full.get("PYTHONPATH")])])
    full["OMP_NUM_THREADS"] = "1"
    full.update(env or {})
    return subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=timeout, env=full, cwd=cwd)


def cgrpo(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``cgrpo ARGS`` in this process (tests/inprocess.py), with the folder ``cwd`` and the toy
    agent importable as a child process started there would have them."""
    return run_cgrpo(*args, cwd=cwd, env=env, pythonpath=[*([cwd] if cwd is not None else []), HERE / "eval"])


def tutorial_file(name: str) -> str:
    """The tutorial's ```python file=NAME``` block: the test uses the task the docs show."""
    match = re.search(rf"^```python file={re.escape(name)}\n(.*?)^```", TUTORIAL.read_text(), re.MULTILINE | re.DOTALL)
    assert match, f"docs/tutorial.md has no block file={name}"
    return match.group(1)


@pytest.mark.slow
def test_envs_lists_a_family_that_cannot_start_with_its_fix():
    # A Safety interpreter that does not exist: the bridge cannot start, the other families still list.
    r = cgrpo("envs", env={"CGRPO_SAFETY_PYTHON": "/nonexistent/python"})
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    assert "Grid/HazardFuel-v0" in r.stdout and "Math/ChainSum-v0" in r.stdout  # math comes after safety
    safety = [line for line in r.stdout.splitlines() if line.startswith("Safety/")]
    assert len(safety) == 22
    assert "UNAVAILABLE here: " in r.stdout and "make safety" in r.stdout and "/nonexistent/python" in r.stdout
    assert "the safety tasks cannot be made here" in r.stderr


@pytest.mark.slow
def test_user_task_through_import_and_module_syntax(tmp_path: Path):
    (tmp_path / "course_env.py").write_text(tutorial_file("course_env.py"))
    listed = cgrpo("envs", "--import", "course_env", "--family", "course", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.startswith("Course/Bridge-v0  [course]  one step: bridge or long way") and "fall       <= 0.1" in listed.stdout
    checked = cgrpo("check", "course_env:Course/Bridge-v0", "--steps", "20", cwd=tmp_path)
    assert checked.returncode == 0 and "Course/Bridge-v0: OK" in checked.stdout, checked.stderr
    small = cgrpo("train", "Course/Bridge-v0", TOY, "--import", "course_env", "--steps", "64", "--eval-episodes", "25",
                  "--out", str(tmp_path / "runs"), "--quiet", cwd=tmp_path)
    assert small.returncode == 2 and "use at least 26" in small.stderr and "Traceback" not in small.stderr
    assert not (tmp_path / "runs").exists()
    trained = cgrpo("train", "Course/Bridge-v0", TOY, "--import", "course_env", "--steps", "64",
                    "--out", str(tmp_path / "runs"), cwd=tmp_path)
    assert trained.returncode == 0, trained.stderr
    # The final evaluation is announced, then timed: it can take longer than the training.
    assert "evaluating the final policy, sampled and greedy, on the episodes its limits call for" in trained.stderr
    assert re.search(r"evaluated 2,000 episodes per policy in [\d.]+ s", trained.stderr)
    # The family's facts: its plan (10,175 episodes for d = 0.1 at 95% power) capped at its 2,000.
    done = json.loads((tmp_path / "runs/Course/Bridge-v0/cgrpo_toy_agent_ToyAgent/seed_0/done.json").read_text())
    assert done["eval"]["episodes"] == 2_000 and done["eval"]["rule"]["cap"] == 2_000
    assert "final policy, 2000 episodes" in trained.stdout
    # The tutorial's optimum() by hand: p* = d / 0.5 = 0.2, R* = 0.5 + 0.5 p* = 0.6, lambda* = 0.5 / 0.5 = 1.
    assert "optimum R* 0.6000" in trained.stdout
    config = json.loads((tmp_path / "runs/Course/Bridge-v0/cgrpo_toy_agent_ToyAgent/seed_0/config.json").read_text())
    assert config["task"]["optimum"] == {"constrained_return": 0.6, "multipliers": [1.0], "unconstrained_return": 1.0}
    assert config["task"]["suite"] == "course" and config["run"]["eval_episodes"] is None
    # bench: the grid `cgrpo bench --preset standard --tasks Course/Bridge-v0 --import course_env` runs.
    import importlib
    import sys

    from constrained_grpo.eval.presets import resolve

    sys.path.insert(0, str(tmp_path))
    try:
        importlib.import_module("course_env")
        runs = resolve("standard", tasks=["Course/Bridge-v0"], seeds=1, steps=64).runs()
    finally:
        sys.path.remove(str(tmp_path))
    assert [r.algo for r in runs][-1] == "ref-random"  # the family's reference, beside the algorithms
    assert {r.eval_episodes for r in runs} == {None}  # sized by the family's plan
    missing = cgrpo("envs", "--import", "no_such_module_22", cwd=tmp_path)
    assert missing.returncode == 2 and "--import no_such_module_22: cannot import it" in missing.stderr
    assert "Traceback" not in missing.stderr


@pytest.mark.slow
def test_bench_runs_an_algorithm_that_an_import_registers(tmp_path: Path):
    """``--import MODULE`` registers a name in every run's process too, and the sweep prints a
    slow-path warning in full once per algorithm, each run's evaluation lines before its "done".
    A sweep before it in this process starts the fork server without the module: the runs'
    processes, forked by that server, still get it from the driver."""
    first = cgrpo("bench", "--tasks", TASK, "--algos", TOY, "--seeds", "1", "--steps", "64", "--eval-episodes", "40",
                  "--workers", "1", "--no-progress", "--out", str(tmp_path / "before"), cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    (tmp_path / "my_algos.py").write_text(f'from constrained_grpo import register_agent\n\nregister_agent("my-toy", "{TOY}")\n')
    r = cgrpo("bench", "--import", "my_algos", "--tasks", TASK, "--algos", "my-toy", "--seeds", "2", "--steps", "64",
              "--eval-episodes", "40", "--workers", "1", "--no-progress", "--out", str(tmp_path / "runs"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "2 run(s) done, 0 skipped (already complete), 0 failed, 0 retried" in r.stdout
    assert "unknown algorithm" not in r.stderr and "failed (attempt" not in r.stderr
    for seed in (0, 1):
        assert (tmp_path / f"runs/{TASK}/my-toy/seed_{seed}/done.json").is_file()
    lines = r.stderr.splitlines()
    # The toy's act() draws from its own generator: one episode at a time, said once in full.
    assert sum("has act() alone" in line for line in lines) == 1 and r.stderr.count("def act_batch") == 1
    assert f"[sweep] {TASK}/my-toy/seed_0: warning: ToyAgent has act() alone" in r.stderr
    assert f"[sweep] {TASK}/my-toy/seed_1: warning: the same as {TASK}/my-toy/seed_0's above" in lines
    for seed in (0, 1):
        key = f"{TASK}/my-toy/seed_{seed}"
        evaluated = next(i for i, line in enumerate(lines) if line.startswith(f"[sweep] {key}: evaluated 40 episodes"))
        done = next(i for i, line in enumerate(lines) if line.startswith(f"[sweep] done {key} "))
        assert evaluated < done, lines


@pytest.mark.slow
def test_misspellings_get_did_you_mean_before_any_folder(tmp_path: Path):
    out = tmp_path / "runs"
    cases = [
        (("train", "Grid/HazardFule3x3-v0", "cgrpo"), "did you mean 'Grid/HazardFuel3x3-v0'?"),
        (("train", TASK, "cgrpoo"), "did you mean 'cgrpo'?"),
        (("train", TASK, "grpo", "--config.entropy_coeff", "0.1"), "did you mean 'entropy_coef'?"),
        (("bench", "--tasks", TASK, "--algos", "grpo-scerw"), "did you mean 'grpo-screw'?"),
    ]
    for args, hint in cases:
        r = cgrpo(*args, "--out", str(out))
        assert r.returncode == 2 and hint in r.stderr, (args, r.stderr)
        assert "Traceback" not in r.stderr
        assert not any(out.rglob("config.json")), args
    assert not out.exists() or not any(out.iterdir())


def test_progress_line_numbers():
    # 500 of 1,000 steps in 2 s: 250 steps/s, 500 left -> ETA 2 s; fuel 13 > 12 is over its limit.
    line = format_progress({"iteration": 3, "env_steps": 500, "wall_s": 2.0, "return": 1.25, "cost_hazard": 0.05,
                            "cost_fuel": 13.0, "lambda_hazard": 0.0, "lambda_fuel": 0.5}, 1000, {"hazard": 0.1, "fuel": 12.0})
    assert line == ("it 3  steps 500/1,000 (50%)  return 1.25  hazard 0.05/0.1  fuel 13/12 (over)  "
                    "lambda hazard 0 fuel 0.5  250 steps/s  ETA 2 s")
    eta = format_progress({"iteration": 0, "env_steps": 100, "wall_s": 1.0}, 100_100, {})
    assert eta.endswith("100 steps/s  ETA 16 min 40 s")


@pytest.mark.slow
def test_train_prints_progress_unless_quiet_and_writes_tensorboard(tmp_path: Path):
    tb = tmp_path / "tb"
    has_tb = importlib.util.find_spec("tensorboard") is not None  # extra [tb]
    args = ("train", TASK, TOY, "--steps", "200", "--eval-episodes", "13", "--out", str(tmp_path / "runs"),
            "--config.episodes_per_iter", "2")
    loud = cgrpo(*args, *(["--tensorboard", str(tb)] if has_tb else []))
    assert loud.returncode == 0, loud.stderr
    first = next(line for line in loud.stderr.splitlines() if line.startswith("it 0  steps "))
    assert "/200 (" in first and "hazard " in first and "/0.2" in first and "fuel " in first and "/4.4" in first
    assert "lambda hazard " in first and "steps/s  ETA " in first
    quiet = cgrpo(*args, "--force", "--quiet")
    assert quiet.returncode == 0 and "it 0  steps" not in quiet.stderr
    if not has_tb:
        pytest.skip("tensorboard is not installed (pip install 'constrained-grpo[tb]')")

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = tb / TASK / "cgrpo_toy_agent_ToyAgent" / "seed_0"
    acc = EventAccumulator(str(events))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert {"return", "cost/hazard", "cost/fuel", "limit/hazard", "limit/fuel", "lambda/hazard", "lambda/fuel", "steps_per_s"} <= tags
    assert [e.value for e in acc.Scalars("limit/fuel")][0] == pytest.approx(4.4)
    progress = (tmp_path / "runs" / TASK / "cgrpo_toy_agent_ToyAgent" / "seed_0" / "progress.csv").read_text().splitlines()
    assert len(acc.Scalars("return")) == len(progress) - 1  # one point per iteration (the --quiet rerun, same seed, logs as many)


def test_every_algorithm_family_gets_the_same_tags():
    # A GRPO row and an SB3-baseline row (column names as their progress.csv files have them).
    grpo = {"iteration": 0, "env_steps": 2000, "wall_s": 0.5, "return": 1.0, "cost_hazard": 0.3, "cost_fuel": 9.0,
            "lambda_hazard": 0.2, "lambda_fuel": 0.1, "eff_w_reward": 0.9, "eff_w_hazard": 0.05, "eff_w_fuel": 0.05,
            "loss": -0.1, "pg_loss": 0.01, "kl": 0.0, "approx_kl": 0.001}
    ppo = {"iteration": 0, "env_steps": 2048, "wall_s": 1.0, "return": 0.8, "cost_hazard": 0.4, "cost_fuel": 11.0,
           "lambda_hazard": 0.3, "lambda_fuel": 0.0, "policy_loss": -0.02, "value_loss": 0.5, "value_loss_cost": 0.1,
           "approx_kl": 0.01, "estimated_cost_hazard": 0.2}
    limits = {"hazard": 0.1, "fuel": 12.0}
    a, b = metric_tags(grpo, limits), metric_tags(ppo, limits)
    shared = {"return", "cost/hazard", "cost/fuel", "limit/hazard", "limit/fuel", "lambda/hazard", "lambda/fuel",
              "kl/approx_kl", "steps_per_s"}
    assert shared <= set(a) and shared <= set(b)
    assert a["steps_per_s"] == 4000.0 and b["steps_per_s"] == 2048.0
    assert {"eff_w/reward", "loss/loss", "loss/pg_loss"} <= set(a)
    assert {"loss/policy_loss", "loss/value_loss", "loss/value_loss_cost"} <= set(b)
    assert not any(k.startswith("cost/estimated") for k in b) and b["limit/fuel"] == 12.0
    # steps/s over the iteration: (4048 - 2048) / (2.0 - 1.0)
    assert metric_tags({**ppo, "env_steps": 4048, "wall_s": 2.0}, limits, ppo)["steps_per_s"] == 2000.0


@pytest.mark.slow
def test_eval_repeats_the_train_verdict_and_render_draws_the_route(tmp_path: Path):
    out = tmp_path / "runs"
    trained = cgrpo("train", TASK, "cgrpo", "--steps", "1500", "--eval-episodes", "13", "--out", str(out), "--quiet")
    assert trained.returncode == 0, trained.stderr
    run = out / TASK / "cgrpo" / "seed_0"
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    again = cgrpo_subprocess("eval", str(run))
    assert again.returncode == 0, again.stderr
    # Same protocol, same reset seeds, same weights: the verdict lines are the train's, word for word.
    verdict = [line for line in trained.stdout.splitlines() if line.startswith("  ")]
    assert len(verdict) == 5 and [line for line in again.stdout.splitlines() if line.startswith("  ")] == verdict
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == before  # the run is left as it was

    gif = tmp_path / "replay.gif"
    drawn = cgrpo_subprocess("render", str(run), "--out", str(gif))
    assert drawn.returncode == 0, drawn.stderr
    from PIL import Image

    summary = json.loads(gif.with_suffix(".json").read_text())
    with Image.open(gif) as image:
        assert image.n_frames == summary["frames"] >= 3  # reset + at least the 2 steps of the shortest route S->H->G
        assert image.size[0] >= 200
    # Every step costs 1 fuel: the fuel total is the number of steps.
    assert summary["costs"]["fuel"] == summary["frames"] - 1
    bad = cgrpo("render", str(run), "--out", str(tmp_path / "replay.mp4"))
    assert bad.returncode == 2 and "ending in .gif" in bad.stderr
    nodir = cgrpo("eval", str(tmp_path))
    assert nodir.returncode == 2 and "is not a run directory" in nodir.stderr
    # One folder above the seeds: the message names the run folder to give.
    above = cgrpo("eval", str(run.parent))
    assert above.returncode == 2 and f"(below it: {run}; e.g. `{run}`)" in above.stderr
    # A --no-save run: the suggested command saves the agent (and redoes the complete run).
    nosave = cgrpo("train", TASK, "cgrpo", "--steps", "1500", "--eval-episodes", "13", "--out", str(out), "--quiet",
                   "--seed", "1", "--no-save")
    assert nosave.returncode == 0, nosave.stderr
    refused = cgrpo("eval", str(out / TASK / "cgrpo" / "seed_1"))
    assert refused.returncode == 2 and "the run was made with --no-save" in refused.stderr
    suggested = refused.stderr.split("rerun it saving the agent: ", 1)[1].strip()
    assert "--no-save" not in suggested and suggested.endswith("--force") and "--seed 1" in suggested

    # A downloaded run whose config.json names code: eval and render refuse it, importing nothing.
    (tmp_path / "payload.py").write_text(
        "from pathlib import Path\nPath(__file__).with_name('EXECUTED').write_text('x')\n"
        "def attack(*a, **k):\n    Path(__file__).with_name('CALLED').write_text('x')\n")
    for field, value, module in (("algo", "payload:attack", "payload"), ("algo", "payload.attack", "payload"),
                                 ("task", "payload:Evil-v0", "payload")):
        crafted = tmp_path / "crafted" / field / "seed_0"
        shutil.rmtree(crafted.parent, ignore_errors=True)
        shutil.copytree(run, crafted)
        config = json.loads((crafted / "config.json").read_text())
        config["run"][field] = value
        (crafted / "config.json").write_text(json.dumps(config))
        for verb in (("eval", str(crafted)), ("render", str(crafted), "--out", str(tmp_path / "x.gif"))):
            r = cgrpo(*verb, cwd=tmp_path)
            assert r.returncode == 2 and f"add --import {module}" in r.stderr, (verb, r.stderr)
            assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not (tmp_path / "EXECUTED").exists() and not (tmp_path / "CALLED").exists()


_PAYLOAD = ("from pathlib import Path\nPath(__file__).with_name('EXECUTED').write_text('x')\n"
            "class Evil:\n    pass\n")


def _crafted_config(config: dict, task: str = TASK) -> dict:
    """A run's config.json as a downloaded run directory may hold it: ppo-lag with ``config``."""
    return {"schema": 1, "run": {"task": task, "algo": "ppo-lag", "seed": 0, "steps": 1000, "eval_episodes": 10,
                                 "config": config, "save_agent": True}}


@pytest.mark.slow
@pytest.mark.parametrize(("task", "env_kwargs", "reason"), [
    # The Safety worker's interpreter and maker: a shell command run by `cgrpo eval` before this check.
    ("Safety/PointGoal1-v0", {"python": sys.executable, "maker": "os:system", "legacy_id": "touch PWNED"},
     r"env_kwargs\.python = .* names code or a program to run .*; if you trust it, remove env_kwargs\.python"),
    # highway-env imports the traffic class that config names.
    ("Highway/Highway-v0", {"config": {"other_vehicles_type": "payload.Evil"}},
     r"env_kwargs\.config\.other_vehicles_type = 'payload\.Evil' names code .*; if you trust it, add --import payload"),
    # 200,000 nested brackets: one line, not a RecursionError traceback.
    (None, None, r"config\.json is not valid JSON \(RecursionError\)"),
])
def test_eval_and_render_refuse_recorded_options_that_run_code(tmp_path: Path, task, env_kwargs, reason: str):
    """A downloaded run's env_kwargs reached the env: a Safety task's recorded interpreter and
    maker ran a shell command, a highway config imported a module; nothing is trained here
    (the run is refused before its agent is built)."""
    (tmp_path / "payload.py").write_text(_PAYLOAD)
    run = tmp_path / "download" / "seed_0"
    (run / "agent").mkdir(parents=True)
    (run / "done.json").write_text("{}")
    if task is None:
        (run / "config.json").write_text("[" * 200_000)
    else:
        (run / "config.json").write_text(json.dumps(_crafted_config({"env_kwargs": env_kwargs}, task)))
    for verb in (("eval", str(run)), ("render", str(run), "--out", str(tmp_path / "x.gif"))):
        r = cgrpo(*verb, cwd=tmp_path)
        assert r.returncode == 2 and re.search(reason, r.stderr), (verb, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not (tmp_path / "EXECUTED").exists() and not (tmp_path / "PWNED").exists()


@pytest.mark.parametrize(("damage", "reason"), [
    (lambda run: (run / "config.json").write_text(json.dumps(_crafted_config({"env_kwargs": {"bogus": 1}}))),
     r"config\.json: its settings do not build ppo-lag on Grid/HazardFuel3x3-v0 \(unknown gridworld option"),
    (lambda run: None, r"agent: the saved agent cannot be read back \(FileNotFoundError"),
    (lambda run: (run / "agent").rmdir(), r"has no saved agent \(agent/\): .*rerun it saving the agent: cgrpo train"),
])
def test_eval_and_render_answer_a_damaged_run_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], damage, reason):
    """An unknown env option, an empty agent/ folder, a run copied outside its results tree:
    TypeError, FileNotFoundError and IndexError tracebacks before."""
    from constrained_grpo.cli import main

    run = tmp_path / "seed_0"
    (run / "agent").mkdir(parents=True)
    (run / "done.json").write_text("{}")
    (run / "config.json").write_text(json.dumps(_crafted_config({})))
    damage(run)
    for verb in (["eval", str(run)], ["render", str(run), "--out", str(tmp_path / "x.gif")]):
        assert main(verb) == 2
        err = capsys.readouterr().err.strip()
        assert re.search(reason, err) and len(err.splitlines()) == 1, err


_FIXED_ANSWER = '''
import json
from pathlib import Path

import numpy as np

from constrained_grpo import EvalResult


class FixedAnswer:
    """Always answers '#### 5'."""

    def __init__(self, env_id, seed=0, **config):
        self.env_id, self.seed = env_id, seed

    def learn(self, total_env_steps, log=None):
        for steps in range(8, total_env_steps + 8, 8):
            log({"env_steps": steps, "wall_s": 0.001 * steps, "ep_return": 0.0, "ep_cost": [0.0] * 3, "multipliers": []})

    def act(self, prompt, deterministic=True):
        return "The sum is 5.\\n#### 5"

    def evaluate(self, n_episodes, deterministic=True, seed=None):
        return EvalResult(np.zeros(n_episodes), np.zeros((n_episodes, 3)), np.ones(n_episodes, dtype=int))

    def save(self, path):
        Path(path).mkdir(parents=True, exist_ok=True)
        (Path(path) / "state.json").write_text(json.dumps({"seed": self.seed}))

    def load(self, path):
        return self
'''


@pytest.mark.slow
def test_render_shows_a_text_task_as_its_completions(tmp_path: Path):
    (tmp_path / "fixed_answer.py").write_text(_FIXED_ANSWER)
    r = cgrpo("train", "Math/ChainSum-v0", "fixed_answer:FixedAnswer", "--steps", "16", "--eval-episodes", "53",
              "--out", str(tmp_path / "runs"), "--quiet", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    gif = tmp_path / "text.gif"
    run = str(tmp_path / "runs/Math/ChainSum-v0/fixed_answer_FixedAnswer/seed_0")
    # The run names its agent by module: rebuilt only when the user names that module.
    refused = cgrpo("render", run, "--out", str(gif), cwd=tmp_path)
    assert refused.returncode == 2 and "add --import fixed_answer" in refused.stderr and not gif.exists()
    drawn = cgrpo("render", run, "--out", str(gif), "--import", "fixed_answer", cwd=tmp_path)
    assert drawn.returncode == 0, drawn.stderr
    summary = json.loads(gif.with_suffix(".json").read_text())
    from PIL import Image

    with Image.open(gif) as image:
        assert image.n_frames == summary["frames"] == 4  # one frame per problem
    assert summary["completions"] == ["The sum is 5.\n#### 5"] * 4
    assert summary["costs"] == {"length": 0.0, "format": 0.0, "banned": 0.0}  # short, well-formed, nothing banned
