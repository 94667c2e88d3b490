"""Refusals a submitter reads: one line each, naming the value and the fix."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from constrained_grpo.eval.scoring.loader import load_results


def _submission(toy_results: Path, path: Path, edit=lambda t: t) -> Path:
    table = load_results(toy_results).table
    edit(table.assign(algo=table["algo"].str.replace("cgrpo_toy_agent:", "mine-", regex=False))).to_csv(path, index=False)
    return path


def _check(board: Path, sub: Path, capsys) -> tuple[int, str]:
    from constrained_grpo.cli import main

    capsys.readouterr()
    code = main(["leaderboard", str(board), "--check", str(sub)])
    return code, capsys.readouterr().out.strip()


def test_the_budget_refusal_gives_both_budgets_the_rule_and_the_steps_to_rerun_with(toy_results: Path, tmp_path: Path,
                                                                                     capsys):
    board = load_results(toy_results).table
    final = board[board["kind"] == "train"].groupby(["algo", "seed"])["env_steps"].max()
    sub = _submission(toy_results, tmp_path / "short.csv", lambda t: t.assign(env_steps=t["env_steps"] // 5))
    code, said = _check(toy_results, sub, capsys)
    assert code == 1 and len(said.splitlines()) == 1, said
    lo, hi = int(final.min()), int(final.max())
    theirs = f"{lo:,}" if lo == hi else f"{lo:,} to {hi:,}"
    assert f"this task's: {theirs} (up to x1.25 apart): rerun with --steps {lo}" in said, said
    assert f"your runs: {int(final.min()) // 5:,}" in said and len(said) < 400, said


def test_an_empty_reset_seed_says_what_to_fill(toy_results: Path, tmp_path: Path, capsys):
    sub = _submission(toy_results, tmp_path / "no_seeds.csv",
                      lambda t: t.assign(reset_seed=np.where(t["kind"] == "eval", np.nan, t["reset_seed"])))
    code, said = _check(toy_results, sub, capsys)
    assert code == 1 and len(said.splitlines()) == 1, said
    assert "reset_seed is empty in" in said and "fill it with each episode's reset seed, first_seed + episode" in said
    assert "not a selection" not in said


def test_check_on_a_results_folder_names_the_table_to_write(toy_results: Path, capsys):
    from constrained_grpo.cli import main

    with pytest.raises(SystemExit) as stop:
        main(["leaderboard", str(toy_results), "--check", str(toy_results)])
    err = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 2
    assert err[-1].endswith(f"--check {toy_results} is a folder; give the submission's CSV file (a results folder's is "
                            f"written by `cgrpo leaderboard {toy_results} --table`: {toy_results / 'results.csv'})"), err


def test_a_sweep_far_larger_than_its_preset_asks_for_yes_and_names_the_seed_syntax(tmp_path: Path, capsys):
    from constrained_grpo.cli import main

    out = tmp_path / "out"
    assert main(["bench", "--preset", "quick", "--seeds", "400", "--out", str(out)]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("cgrpo bench: error:")]
    assert len(err) == 1 and "far more than the quick preset's" in err[0], err
    assert err[0].endswith("pass --yes to start it. --seeds 400 means 400 seeds (0-399); for seed 400 alone write "
                           "--seeds 400-400"), err
    assert not out.exists()
    # --yes starts it; a sweep no larger than the preset's own, or than 200 runs, needs none.
    from argparse import Namespace

    from constrained_grpo.cli import _large_sweep

    assert _large_sweep(Namespace(yes=True, seeds=400, preset="quick"), 1200, 9, 1) is None
    assert _large_sweep(Namespace(yes=False, seeds=None, preset="standard"), 1590, 1590, 1) is None
    assert _large_sweep(Namespace(yes=False, seeds=(400,), preset="quick"), 200, 9, 1) is None
    assert _large_sweep(Namespace(yes=False, seeds=(1, 2), preset="quick"), 201, 9, 1) is not None


def test_import_finds_a_module_in_the_current_folder(tmp_path: Path, monkeypatch, capsys):
    import os
    import sys

    from constrained_grpo.cli import main
    from constrained_grpo.tasks import IMPORT_ENV

    (tmp_path / "people_course_mod.py").write_text("REGISTERED = True\n")
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", os.getcwd(), str(tmp_path))])
    monkeypatch.delenv("PYTHONPATH", raising=False)
    monkeypatch.setenv(IMPORT_ENV, "")  # main() sets it: the test's value is put back after
    monkeypatch.chdir(tmp_path)
    assert main(["algos", "--import", "people_course_mod"]) == 0
    assert sys.modules["people_course_mod"].REGISTERED
    assert sys.path[-1] == str(tmp_path) and os.environ["PYTHONPATH"] == str(tmp_path)  # workers find it too
    del sys.modules["people_course_mod"]
