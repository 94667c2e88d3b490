"""Issue 17 (reliability and security): reading results runs no code, impossible or
injected submissions are refused, logs survive a failing run, settings never mix.

The numbers come from the tasks' definitions: on Grid/HazardFuel3x3-v0 an episode earns
goal_reward 1 plus gem_reward 0.5 at most, with no step penalty, so every episodic return
lies in [0, 1.5]; the hazard cost is an indicator (0 or 1 per episode) and fuel costs 1 per
step over at most 4 x 3 = 12 steps.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from cgrpo_toy_agent import TASK, TOY, subprocess_env
from inprocess import run_cgrpo
from constrained_grpo.eval import storage
from constrained_grpo.eval.scoring.leaderboard import check_submission
from constrained_grpo.eval.scoring.loader import (
    ResultsError,
    check_submission_table,
    episode_ranges,
    escape_csv_formulas,
    escape_markdown,
    load_results,
    validate_table,
)
from constrained_grpo.eval.runner import RunSpec, execute_run, task_meta
from constrained_grpo.eval.sweep import expand_grid, run_sweep

QUIET = {"progress": False, "echo": lambda line: None}


# ----------------------------------------------------------------- point 2: no code from data


PAYLOAD = "import pathlib\npathlib.Path({marker!r}).write_text('ran')\n\ndef factory(*a, **k):\n    raise SystemExit\n"


@pytest.mark.slow
def test_reading_results_never_imports_the_algorithm_a_run_names(results_copy: Path, tmp_path: Path):
    marker = tmp_path / "payload_ran"
    (results_copy / "sub").mkdir()
    (results_copy / "sub" / "__init__.py").write_text("")
    (results_copy / "sub" / "payload.py").write_text(PAYLOAD.format(marker=str(marker)))
    run = next(p.parent for p in results_copy.rglob(storage.CONFIG_FILE) if "seed_0" in str(p))
    config = json.loads((run / storage.CONFIG_FILE).read_text())
    config["run"]["algo"] = "sub.payload:factory"
    (run / storage.CONFIG_FILE).write_text(json.dumps(config))
    # In-process, with the folder on the import path ...
    sys.path.insert(0, str(results_copy))
    try:
        table = load_results(results_copy).table
    finally:
        sys.path.remove(str(results_copy))
    assert "sub.payload:factory" in set(table["algo"]) and not marker.exists()
    # ... and as the issue ran it: `python -m constrained_grpo.cli leaderboard sub` from the folder's parent.
    env = subprocess_env()
    proc = subprocess.run([sys.executable, "-m", "constrained_grpo.cli", "leaderboard", results_copy.name, "--quiet",
                           "--out", str(tmp_path / "lb")], cwd=results_copy.parent, env=env,
                          capture_output=True, text=True, timeout=300)
    assert not marker.exists(), proc.stderr
    assert "sub.payload:factory" in (tmp_path / "lb" / "leaderboard.md").read_text()
    # ... and `cgrpo plot`, the other verb that reads a results folder.
    proc = subprocess.run([sys.executable, "-m", "constrained_grpo.cli", "plot", results_copy.name, "--out", str(tmp_path / "plots")],
                          cwd=results_copy.parent, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and not marker.exists(), proc.stderr


# ---------------------------------------------------- points 4 and 9: impossible and injected


@pytest.fixture(scope="module")
def good(toy_results: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sub") / "good.csv"
    table = load_results(toy_results).table
    table.assign(algo=table["algo"].str.replace("cgrpo_toy_agent:", "mine-", regex=False)).to_csv(path, index=False)
    return path


def _edited(good: Path, tmp_path: Path, edit) -> Path:
    bad = tmp_path / "bad.csv"
    edit(pd.read_csv(good, dtype={"suite": str, "task": str, "algo": str, "kind": str})).to_csv(bad, index=False)
    return bad


def test_episode_ranges_of_the_gridworld():
    meta = task_meta(TASK, with_optimum=False)
    ranges = episode_ranges(TASK, tuple(meta.constraints))
    assert ranges.ret == (0.0, 1.5)
    assert ranges.costs == {"hazard": (0.0, 1.0), "fuel": (0.0, 12.0)}
    big = episode_ranges("Grid/HazardFuel-v0", tuple(task_meta("Grid/HazardFuel-v0", with_optimum=False).constraints))
    assert big.ret == (0.0, 1.5) and big.costs["fuel"] == (0.0, 32.0)  # 8x8: 4 x 8 steps at most


def _eval_first(df: pd.DataFrame, col: str, value) -> pd.DataFrame:
    df = df.copy()
    df[col] = df[col].astype(object)
    df.loc[(df["kind"] == "eval").to_numpy().nonzero()[0][0], col] = value
    return df


def _eval_rows(df: pd.DataFrame) -> pd.Series:
    return df["kind"] == "eval"


#: Crafted submissions refused by the pairing, copy and possible-episode rules, with the reason.
UNPAIRED_COPIED_OR_IMPOSSIBLE = [
    # Every episode from one start, or cherry-picked starts 1000000 + 7i: not the paired protocol.
    (lambda df: df.assign(reset_seed=np.where(_eval_rows(df), 1_000_000, df["reset_seed"])),
     r"reset_seed must be first_seed \+ episode for every episode"),
    (lambda df: df.assign(reset_seed=np.where(_eval_rows(df), 1_000_000 + 7 * df["episode"], df["reset_seed"])),
     r"reset_seed must be first_seed \+ episode"),
    # One run copied to another seed counts once.
    (lambda df: pd.concat([df, df[df["seed"] == 0].assign(seed=5)], ignore_index=True),
     r"seeds 0 and 5 hold identical training and evaluation rows"),
    # The unconstrained optimum's return (1.5 > R* = 1.2) with both costs 0: no episode of the task does that
    # (the goal and the gem take at least 6 steps, and each step spends one fuel).
    (lambda df: df.assign(**{"return": np.where(_eval_rows(df), 1.5, df["return"]),
                             "cost_hazard": np.where(_eval_rows(df), 0.0, df["cost_hazard"]),
                             "cost_fuel": np.where(_eval_rows(df), 0.0, df["cost_fuel"])}),
     r"sampled episode 0 has return 1.5 in \d+ steps with hazard 0, fuel 0, which no episode of "
     r"Grid/HazardFuel3x3-v0 can have \(an episode ends on the goal after at least 2 steps"),
    # The pair, return 1.4 with fuel 0 (and no length): 1.4 is no sum of the goal's 1 and the gem's 0.5.
    (lambda df: _eval_first(_eval_first(_eval_first(df, "return", 1.4), "cost_fuel", 0.0), "length", np.nan),
     r"has return 1.4 in length unknown with hazard [01], fuel 0, which no episode"),
    # The goal in 2 steps is the route through the hazard: with hazard 0 it takes at least 4.
    (lambda df: _eval_first(_eval_first(_eval_first(_eval_first(df, "return", 1.0), "cost_fuel", 2.0), "length", 2.0),
                            "cost_hazard", 0.0),
     r"has return 1 in 2 steps with hazard 0, fuel 2, which no episode"),
]


@pytest.mark.parametrize(("edit", "reason"), UNPAIRED_COPIED_OR_IMPOSSIBLE)
def test_unpaired_copied_or_impossible_submissions_are_refused(good: Path, tmp_path: Path, edit, reason: str):
    bad = _edited(good, tmp_path, edit)
    with pytest.raises(ResultsError, match=reason):
        check_submission_table(bad)


def test_a_return_above_the_optimum_is_possible_where_a_limit_is_broken(good: Path, tmp_path: Path):
    # Return 1.5 in 8 steps with fuel 8, over its limit: an unconstrained policy, a violator but a possible one.
    check_submission_table(_edited(good, tmp_path, lambda df: df.assign(
        **{"return": np.where(_eval_rows(df), 1.5, df["return"]),
           "cost_fuel": np.where(_eval_rows(df), 8.0, df["cost_fuel"]),
           "length": np.where(_eval_rows(df), 8.0, df["length"])})))


def test_a_mean_return_above_what_any_policy_earns_at_its_costs_is_refused(good: Path, tmp_path: Path, monkeypatch):
    """The rule on the mean, for tasks whose episodes are not checked one by one: with the
    per-episode check off, return 1.5 at costs 0 is above R*(d) + lambda* (U - d) (R* = 1.2)."""
    from constrained_grpo.eval.scoring import loader

    monkeypatch.setattr(loader, "_check_possible_episodes", lambda *args: None)
    bad = _edited(good, tmp_path, lambda df: df.assign(**{"return": np.where(_eval_rows(df), 1.5, df["return"]),
                                                          "cost_hazard": np.where(_eval_rows(df), 0.0, df["cost_hazard"]),
                                                          "cost_fuel": np.where(_eval_rows(df), 0.0, df["cost_fuel"])}))
    with pytest.raises(ResultsError, match=r"mean return 1.5 \(lower bound 1.5\) is above [\d.]+, the most any policy of "
                                           r"this task earns at its costs' upper bounds \(exact optimum R\* = 1.2 at the limits\)"):
        check_submission_table(bad)


def test_the_largest_int64_seed_is_accepted(good: Path, tmp_path: Path):
    # 2^63 - 1 used to be compared as the float 2^63 and refused as out of range.
    table, _ = check_submission_table(_edited(good, tmp_path, lambda df: df.assign(seed=df["seed"] + (2**63 - 2))))
    assert sorted(table["seed"].unique().tolist()) == [2**63 - 2, 2**63 - 1]


#: Crafted submissions refused by the schema, string forms, suites, ranges and integer bounds.
IMPOSSIBLE_OR_INJECTED = [
    # The submission: return 50 (R* = 1.133, unconstrained optimum 1.5), costs -100 and -1.
    (lambda df: df.assign(**{"return": np.where(df["kind"] == "eval", 50.0, df["return"])}),
     r"'return' row \d+ has 50.0, outside \[0, 1.5\]"),
    (lambda df: _eval_first(df, "cost_hazard", -100.0), r"'cost_hazard' row \d+ has -100.0, outside \[0, 1\] \(costs are >= 0"),
    (lambda df: _eval_first(df, "cost_fuel", -1.0), r"'cost_fuel' row \d+ has -1.0, outside \[0, 12\]"),
    (lambda df: _eval_first(df, "cost_hazard", 2.0), r"indicator cost is at most 1 per episode"),
    (lambda df: _eval_first(df, "cost_fuel", 13.0), r"outside \[0, 12\]"),
    (lambda df: df.assign(lambda_hazard=np.where(df["lambda_hazard"].notna(), -0.5, np.nan)),
     r"'lambda_hazard'.*multipliers .* >= 0"),
    (lambda df: df.assign(suite="highway"), r"belongs to suite 'gridworld', but the table says 'highway'"),
    (lambda df: df.assign(suite='<img src=x onerror=alert(1)>'), r"column 'suite' row 0 has '<img"),
    (lambda df: df.assign(suite="gridworld\n# Fake heading"), r"control or line-break characters"),
    (lambda df: df.assign(suite="=HYPERLINK(\"http://x\")"), r"column 'suite'"),
    (lambda df: df.assign(algo="good\n"), r"column 'algo' row 0 has 'good\\n' \(control"),
    (lambda df: df.assign(algo="a|b"), r"column 'algo' row 0 has 'a\|b'"),
    (lambda df: df.assign(task="Grid/HazardFuel3x3-v0\u2028"), r"column 'task'"),
    (lambda df: df.assign(env_steps=df["env_steps"].astype(object).where(df.index > 0, str(2**63))),
     r"'env_steps' must hold integers in \[0, 2\^63\); row 0 has"),
    (lambda df: df.assign(seed=str(2**64 + 5)), r"'seed' must hold integers in \[0, 2\^63\)"),

    # Multipliers of 1e308 overflowed the stability metric's sum (a traceback from --check and --add).
    (lambda df: df.assign(lambda_hazard=np.where(df["lambda_hazard"].notna(), 1e308, np.nan)),
     r"column 'lambda_hazard' row \d+ has 1e\+308, beyond \+-1e\+15"),
    # A task id naming a module: validating it imported the module (and ran it).
    (lambda df: df.assign(task="payload:" + df["task"]), r"task 'payload:Grid/HazardFuel3x3-v0' names a module to import"),
]


@pytest.mark.parametrize(("edit", "reason"), IMPOSSIBLE_OR_INJECTED)
def test_impossible_or_injected_submissions_are_refused(good: Path, tmp_path: Path, edit, reason):
    bad = _edited(good, tmp_path, edit)
    with pytest.raises(ResultsError, match=reason):
        check_submission_table(bad)


def test_the_good_submission_passes_and_keeps_its_numbers(good: Path):
    table, tasks = check_submission_table(good)
    assert set(table["algo"]) == {"mine-ToyAgent", "mine-unconstrained"}
    assert table["return"].between(0.0, 1.5).all() and TASK in tasks


@pytest.mark.slow
def test_check_and_add_apply_the_same_clash_rule(toy_results: Path, tmp_path: Path):
    """--check used to accept a submission whose runs --add rejects as already present."""
    existing = load_results(toy_results).table
    clashing = tmp_path / "clash.csv"
    existing.to_csv(clashing, index=False)
    with pytest.raises(ResultsError, match=r"are in the results already"):
        check_submission_table(clashing, existing=existing)
    run = lambda *a: run_cgrpo("leaderboard", str(toy_results), *a)  # in-process (tests/inprocess.py)
    checked = run("--check", str(clashing))
    assert checked.returncode == 1 and "REJECTED" in checked.stdout and "in the results already" in checked.stdout
    added = run("--add", str(clashing), "--out", str(tmp_path / "lb"), "--quiet")
    assert added.returncode == 2 and "in the results already" in added.stderr


def test_a_submission_cannot_add_seeds_to_an_algorithm_on_the_board(toy_results: Path, tmp_path: Path):
    """Seeds the results lack, under an algorithm name they rank, used to merge into its row."""
    existing = load_results(toy_results).table
    algo = sorted(existing["algo"].unique())[0]
    extra = existing[existing["algo"] == algo].assign(seed=lambda t: t["seed"] + 100)
    path = tmp_path / "more_seeds.csv"
    extra.to_csv(path, index=False)
    with pytest.raises(ResultsError, match=rf"algorithm {re.escape(algo)}: name\(s\) are on the board already; rename"):
        check_submission_table(path, existing=existing)
    check_submission_table(path)  # alone (no board to join) it is a valid table
    renamed = tmp_path / "renamed.csv"
    extra.assign(algo="mine-" + algo.replace(":", "-")).to_csv(renamed, index=False)
    assert len(check_submission_table(renamed, existing=existing)[0]) == len(extra)


@pytest.mark.slow
@pytest.mark.parametrize(("change", "reason"), [
    (lambda t: t.assign(env_steps=t["env_steps"] * 3), r"budgets differ"),
    (lambda t: t.assign(reset_seed=t["reset_seed"] + 7), r"evaluation reset seeds differ"),
    (lambda t: t[(t["kind"] == "train") | (t["policy"] == "sampled")], r"evaluated policies differ"),
])
def test_check_refuses_what_add_refuses_for_the_protocol(toy_results: Path, tmp_path: Path, change, reason: str):
    """--check used to say OK to budgets x3, other reset seeds and sampled-only evaluations."""
    existing = load_results(toy_results).table
    algo = sorted(existing["algo"].unique())[0]
    sub = change(existing[existing["algo"] == algo].assign(algo="mine-x"))
    path = tmp_path / "sub.csv"
    sub.to_csv(path, index=False)
    with pytest.raises(ResultsError, match=rf"cannot be ranked with the results: .*{reason}"):
        check_submission(path, None, existing)
    run = lambda *a: run_cgrpo("leaderboard", str(toy_results), *a)  # in-process (tests/inprocess.py)
    checked = run("--check", str(path))
    added = run("--add", str(path), "--out", str(tmp_path / "lb"), "--quiet")
    assert checked.returncode == 1 and re.search(reason, checked.stdout), checked.stdout
    assert added.returncode == 2 and re.search(reason, added.stderr), added.stderr


def _verdicts(board: Path, sub: Path, out: Path, capsys: pytest.CaptureFixture[str]) -> tuple[str | None, str | None]:
    """``(--check's reason, --add's reason)`` for refusing ``sub`` against ``board``, None where
    a verb accepts it; each message names the path exactly once."""
    from constrained_grpo.cli import main

    capsys.readouterr()
    checked = main(["leaderboard", str(board), "--check", str(sub)])
    said = capsys.readouterr().out.strip()
    added = main(["leaderboard", str(board), "--add", str(sub), "--out", str(out), "--quiet"])
    err = capsys.readouterr().err.strip()
    assert checked in (0, 1) and added in (0, 2), (checked, said, added, err)
    assert checked == 0 or said.count(str(sub)) == 1 and len(said.splitlines()) == 1, said
    assert added == 0 or err.count(str(sub)) == 1 and len(err.splitlines()) == 1, err
    return (None if checked == 0 else said.removeprefix(f"REJECTED {sub}: "),
            None if added == 0 else err.removeprefix(f"cgrpo leaderboard: error: {sub}: "))


@pytest.mark.slow
def test_check_and_add_give_the_same_verdict_on_every_crafted_submission(
        toy_results: Path, good: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch):
    """Every crafted submission of these tests through both verbs of the CLI: the same verdict
    and the same one-line reason (--check used to say OK to what --add refused), and the
    module a crafted task id names is never imported."""
    from constrained_grpo.eval.scoring import loader

    (tmp_path / "payload.py").write_text(f"import pathlib\npathlib.Path({str(tmp_path / 'EXECUTED')!r}).write_text('ran')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    board = load_results(toy_results).table
    algo = sorted(board["algo"].unique())[0]
    crafted = [(edit, reason) for edit, reason in UNPAIRED_COPIED_OR_IMPOSSIBLE + IMPOSSIBLE_OR_INJECTED] + [
        # The board's runs renamed: a run under a second name (issue 54); alone it is a valid table.
        (lambda df: df, r"same evaluation episodes as cgrpo_toy_agent:\w+ seed 0 on the board"),
        (lambda df: board, r"are in the results already"),  # the board's own runs
        (lambda df: board[board["algo"] == algo].assign(seed=lambda t: t["seed"] + 100), r"name\(s\) are on the board already"),
        (lambda df: df.assign(env_steps=df["env_steps"] * 3), r"budgets differ"),
        (lambda df: df.assign(reset_seed=df["reset_seed"] + 7), r"evaluation reset seeds differ"),
        (lambda df: df[(df["kind"] == "train") | (df["policy"] == "sampled")], r"evaluated policies differ"),
    ]
    for i, (edit, reason) in enumerate(crafted):
        sub = _edited(good, tmp_path, edit).rename(tmp_path / f"crafted_{i}.csv")
        check, add = _verdicts(toy_results, sub, tmp_path / "lb", capsys)
        assert check == add, (i, check, add)
        assert (check is None) if reason is None else re.search(reason, check or ""), (i, reason, check)
    # The board as a long table's CSV: --check used to ignore it (and so accept the board's own runs).
    board.to_csv(tmp_path / "board.csv", index=False)
    for i, (edit, reason) in enumerate(crafted[-6:-3]):
        sub = _edited(good, tmp_path, edit).rename(tmp_path / f"against_csv_{i}.csv")
        check, add = _verdicts(tmp_path / "board.csv", sub, tmp_path / "lb", capsys)
        assert check == add and ((check is None) if reason is None else re.search(reason, check or "")), (i, check, add)
    # The mean-return rule alone (the per-episode check off): return 1.5 at costs 0 is above R*'s bound.
    monkeypatch.setattr(loader, "_check_possible_episodes", lambda *args: None)
    sub = _edited(good, tmp_path, lambda df: df.assign(**{
        "return": np.where(_eval_rows(df), 1.5, df["return"]), "cost_hazard": np.where(_eval_rows(df), 0.0, df["cost_hazard"]),
        "cost_fuel": np.where(_eval_rows(df), 0.0, df["cost_fuel"])}))
    check, add = _verdicts(toy_results, sub, tmp_path / "lb", capsys)
    assert check == add and re.search(r"mean return 1.5 .*\(exact optimum R\* = 1.2 at the limits\)", check or ""), (check, add)
    assert not (tmp_path / "EXECUTED").exists()


def test_escapes_for_csv_formulas_and_markdown():
    df = pd.DataFrame({"s": ["=HYPERLINK(\"x\")", "+1", "-cmd", "@SUM(A1)", "plain", "\tx"], "v": [-1.5, 2.0, 3.0, 4.0, 5.0, 6.0]})
    out = escape_csv_formulas(df)
    assert out["s"].tolist() == ["'=HYPERLINK(\"x\")", "'+1", "'-cmd", "'@SUM(A1)", "plain", "'\tx"]
    assert out["v"].tolist() == [-1.5, 2.0, 3.0, 4.0, 5.0, 6.0] and df["s"][0].startswith("=")
    assert escape_markdown("a|b <img onerror=x>\n[x](y) `c` &lt;") == "a\\|b \\<img onerror=x\\> \\[x\\](y) \\`c\\` \\&lt;"
    # x._y_. would render y in italics (an underscore between punctuation and a letter opens emphasis).
    assert escape_markdown("ppo-lag_1.0") == "ppo-lag\\_1.0" and escape_markdown("x._y_.*z*") == "x.\\_y\\_.\\*z\\*"


def test_an_underscore_in_an_algorithm_name_is_escaped_in_leaderboard_md(toy_results: Path):
    """Issue 35, leftover: ``x._y_.`` (a valid name) renders y in italics on GitHub."""
    from constrained_grpo.eval.scoring.leaderboard import build_leaderboard, render_markdown

    results = load_results(toy_results)
    table = results.table.assign(algo=results.table["algo"].str.replace("cgrpo_toy_agent:", "x._y_.", regex=False))
    md = render_markdown(build_leaderboard(table, results.tasks))
    assert "x.\\_y\\_.ToyAgent" in md and "x._y_.ToyAgent" not in md
    from constrained_grpo.eval.scoring.leaderboard import _md_cell

    assert _md_cell("J lane_change (d=3) x._y_. _z") == "J lane_change (d=3) x.\\_y\\_. \\_z"  # inside a word it stays


# ----------------------------------------------------------------- point 5: logs kept on failure


def test_progress_is_written_when_learn_raises(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("CGRPO_PROGRESS_FLUSH_S", "1000")  # no periodic flush: only the final one can write it
    spec = RunSpec(TASK, TOY, 0, 500, 13, {"crash": "always"}, False)
    outcome = execute_run(spec, tmp_path)
    assert outcome.status == "failed" and "toy agent crash (always)" in outcome.error
    progress = pd.read_csv(spec.run_dir(tmp_path) / storage.PROGRESS_FILE)
    assert len(progress) == 1 and progress["iteration"].tolist() == [0]  # the one iteration logged before the crash


# ------------------------------------------------------------------ point 8: settings never mix


def test_a_run_completed_meanwhile_with_other_settings_is_not_success(tmp_path: Path):
    """A concurrent sweep completes the run with 300 steps; ours asked for 200."""
    assert execute_run(RunSpec(TASK, TOY, 0, 300, 13, {}, False), tmp_path).status == "done"
    outcome = execute_run(RunSpec(TASK, TOY, 0, 200, 13, {}, False), tmp_path)
    assert outcome.status == "failed" and "holds a completed run with settings" in outcome.error
    assert execute_run(RunSpec(TASK, TOY, 0, 300, 13, {}, False), tmp_path).status == "done"


@pytest.mark.slow
def test_two_identical_sweeps_on_one_folder_both_succeed_and_do_each_run_once(tmp_path: Path):
    specs = expand_grid([TASK], [TOY], [0, 1, 2], 200, eval_episodes=13,
                        config={TOY: {"sleep_s": 0.05}}, save_agent=False)
    reports = [None, None]

    def sweep(i: int) -> None:
        reports[i] = run_sweep(specs, tmp_path, workers=2, **QUIET)

    threads = [threading.Thread(target=sweep, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    a, b = reports
    assert a is not None and b is not None and a.ok and b.ok, (a and a.failed, b and b.failed)
    keys = sorted(s.key for s in specs)
    assert sorted(a.done + a.skipped) == keys and sorted(b.done + b.skipped) == keys
    # Trained once: each run's done.json is from its first attempt, and no run was trained by both.
    assert not set(a.done) & set(b.done)
    assert len(list(tmp_path.rglob(storage.DONE_FILE))) == 3


# -------------------------------------------- points 6 and 7: no manager, no single helper to lose


@pytest.mark.slow
def test_no_manager_and_a_killed_fork_server_fails_no_run(tmp_path: Path):
    """The old sweep's Manager was a single point of failure (killing it failed 14 of 20 runs).
    Now there is none, and killing the fork server (the one helper left) mid-sweep fails no
    run: workers in flight keep their own pipes, and the next run starts a new fork server."""
    import multiprocessing
    import signal
    import time

    from multiprocessing import forkserver

    specs = expand_grid([TASK], [TOY], [0, 1, 2, 3], 400, eval_episodes=13, config={TOY: {"sleep_s": 0.05}},
                        save_agent=False)
    seen: dict[str, object] = {"children": set(), "killed": None}

    def saboteur() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and seen["killed"] is None:
            seen["children"] |= {p.name for p in multiprocessing.active_children()}  # type: ignore[operator]
            pid = getattr(forkserver._forkserver, "_forkserver_pid", None)
            if pid and list(tmp_path.rglob("running.json")):
                os.kill(pid, signal.SIGKILL)
                seen["killed"] = pid
            time.sleep(0.05)

    thread = threading.Thread(target=saboteur)
    thread.start()
    report = run_sweep(specs, tmp_path, workers=2, **QUIET)
    thread.join()
    assert seen["killed"] is not None, "the fork server was never seen"
    assert not any(str(name).startswith(("SyncManager", "Manager")) for name in seen["children"]), seen["children"]
    # A run in flight may be retried (its pool loses the fork server's exit-status pipe and
    # ends the worker), but none fails.
    assert report.ok and sorted(report.done + report.skipped) == sorted(s.key for s in specs), report.failed
    assert len(list(tmp_path.rglob(storage.DONE_FILE))) == len(specs)


@pytest.mark.slow
def test_a_fork_server_dying_at_a_run_s_start_is_retried(tmp_path: Path, monkeypatch):
    """A fork server killed between its liveness check and a start either refuses the
    connection (OSError) or closes it before sending the new pid (EOFError, seen under load);
    both starts are retried and the run is done once."""
    import concurrent.futures as cf

    real_submit = cf.ProcessPoolExecutor.submit
    failures = [EOFError("unexpected EOF"), ConnectionRefusedError(111, "Connection refused")]

    def flaky_submit(self, *args, **kwargs):
        if failures:
            raise failures.pop(0)
        return real_submit(self, *args, **kwargs)

    monkeypatch.setattr(cf.ProcessPoolExecutor, "submit", flaky_submit)
    specs = expand_grid([TASK], [TOY], [0], 100, eval_episodes=13, save_agent=False)
    report = run_sweep(specs, tmp_path, workers=1, **QUIET)
    assert not failures and report.ok and report.done == [specs[0].key], report.failed
    assert len(list(tmp_path.rglob(storage.DONE_FILE))) == 1


def test_bench_force_redoes_runs_recorded_with_other_settings(tmp_path: Path):
    first = expand_grid([TASK], [TOY], [0, 1], 100, eval_episodes=13, save_agent=False)
    assert run_sweep(first, tmp_path, workers=1, **QUIET).ok
    second = expand_grid([TASK], [TOY], [0, 1], 200, eval_episodes=13, save_agent=False)
    report = run_sweep(second, tmp_path, workers=1, force=True, **QUIET)
    assert report.ok and sorted(report.done) == sorted(s.key for s in second)
    for spec in second:
        assert json.loads((spec.run_dir(tmp_path) / storage.CONFIG_FILE).read_text())["run"]["steps"] == 200
