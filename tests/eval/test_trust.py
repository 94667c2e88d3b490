"""Issue 54: a leaderboard that checks what it is given.

Every crafted case is refused with one line naming the value and the fix, by
``check_submission_table`` (``--check`` and ``--add``) and by loading alike. The bounds come
from the tasks' definitions: a Highway/Highway-v1 step earns ``(0.1 lane + 0.4 speed) / 0.5``
times ``on_road``, in [0, 1], over at most 30 steps (highway-fast's 30 s at 1 Hz); a math
episode earns 1 for a correct answer, else 0.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from constrained_grpo.envs.registration import EpisodeReturns
from constrained_grpo.eval.scoring.loader import (
    ResultsError,
    check_submission_table,
    declared_returns,
    episode_ranges,
    validate_table,
)
from constrained_grpo.tasks import task_meta


def synthetic(task: str, *, algo: str = "mine", seeds: int = 2, episodes: int = 4, ret: float = 0.5,
              length: float = 30.0, first_seed: int = 1_000_000) -> pd.DataFrame:
    """A long table of ``seeds`` runs of ``task``: two train iterations and ``episodes``
    sampled evaluation episodes each (return ``ret``, costs 0), every seed's rows distinct."""
    meta = task_meta(task, with_optimum=False)
    suite = meta.suite
    names = meta.constraint_names
    rows = []
    for seed in range(seeds):
        for it in range(2):
            rows.append({"suite": suite, "task": task, "algo": algo, "seed": seed, "kind": "train", "iteration": it,
                         "env_steps": 100 * (it + 1), "wall_s": 1.0 + it, "return": 0.1 * (seed + 1) + 0.01 * it,
                         **{f"cost_{n}": 0.0 for n in names}})
        for ep in range(episodes):
            rows.append({"suite": suite, "task": task, "algo": algo, "seed": seed, "kind": "eval", "policy": "sampled",
                         "iteration": 1, "episode": ep, "reset_seed": first_seed + ep, "env_steps": 200,
                         "return": ret + 0.001 * seed * (ep % 2), "length": length, **{f"cost_{n}": 0.0 for n in names}})
    return pd.DataFrame(rows)


def _csv(df: pd.DataFrame, path: Path) -> Path:
    df.to_csv(path, index=False)
    return path


def _one_line(err: pytest.ExceptionInfo) -> str:
    text = str(err.value)
    assert "\n" not in text, text
    return text


# ------------------------------------------------------------- point 1: what one episode can be


def test_episode_returns_bounds_by_length():
    declared = EpisodeReturns((0.0, 1.0), horizon=30, rule="r")
    ok = declared.possible([0.0, 30.0, 30.5, 12.0, 5.0, 50.0], [30, 30, 30, 11, np.nan, np.nan])
    # 30.5 > 30 x 1; 12 in 11 steps > 11; 50 with no length > the horizon's 30.
    assert ok.tolist() == [True, True, False, False, True, False]
    assert declared.possible([1.0, 1.0], [31, 2.5]).tolist() == [False, False]  # beyond the horizon, not whole
    assert declared.return_range() == (0.0, 30.0)
    assert EpisodeReturns((-0.25, 1.0), horizon=11).return_range() == (-2.75, 11.0)
    free = EpisodeReturns.unbounded("why")
    assert free.possible([1e9], [1]).tolist() == [True] and free.return_range() is None
    text = EpisodeReturns(episode=(0.0, 1.0))  # lengths in tokens are not checked
    assert text.possible([1.0, 2.0, 0.0], [412, 3, 0]).tolist() == [True, False, True]


def test_every_family_declares_its_episodes():
    highway = declared_returns("Highway/Highway-v1")
    assert highway.bounded and highway.step == (0.0, 1.0) and highway.horizon == 30
    assert episode_ranges("Highway/Highway-v1").ret == (0.0, 30.0)
    assert declared_returns("Highway/Roundabout-v0").step == (-0.25, 1.0)
    assert not declared_returns("Highway/Merge-v0").bounded  # said so, with the reason
    assert "unclipped" in declared_returns("Highway/Merge-v0").rule
    assert declared_returns("Math/ChainSum-v0").return_range() == (0.0, 1.0)
    safety = declared_returns("Safety/PointGoal1-v0")
    assert not safety.bounded and "no bound" in safety.rule
    assert declared_returns("Grid/HazardFuel-v0") is None  # the gridworld env checks its own episodes


def test_honest_highway_episodes_are_possible():
    from constrained_grpo.tasks import make_env

    env = make_env("Highway/Highway-v1")
    rng = np.random.default_rng(0)
    returns, lengths = [], []
    try:
        for s in range(2):
            env.reset(seed=1_000_000 + s)
            total, steps, done = 0.0, 0, False
            while not done:
                _, r, term, trunc, _ = env.step(int(rng.integers(env.action_space.n)))
                total, steps, done = total + r, steps + 1, term or trunc
            returns.append(total)
            lengths.append(steps)
    finally:
        env.close()
    assert max(lengths) <= 30 and declared_returns("Highway/Highway-v1").possible(returns, lengths).all()


@pytest.mark.parametrize("task,ret,length,value", [
    ("Highway/Highway-v1", 50.0, 30.0, "return 50 in 30 steps"),
    ("Highway/Highway-v1", 50.0, 60.0, "return 50 in 60 steps"),  # a longer episode than the horizon
    ("Math/ChainSum-v0", 2.0, 12.0, "return 2"),
])
def test_impossible_returns_are_refused_by_check_add_and_load(task, ret, length, value, tmp_path):
    bad = synthetic(task, ret=ret, length=length)
    with pytest.raises(ResultsError, match=r"which no episode of .* can have .*; give the episodes cgrpo evaluated") as err:
        check_submission_table(_csv(bad, tmp_path / "bad.csv"))
    assert value in _one_line(err)
    with pytest.raises(ResultsError, match="which no episode"):
        validate_table(bad)
    # The same table with possible returns passes.
    check_submission_table(_csv(synthetic(task, ret=0.5, length=length if length <= 30 else 30.0), tmp_path / "ok.csv"))


# ------------------------------------------------------------------ point 5: Markdown cells


def test_markdown_cells_escape_links_images_code_and_autolinks():
    from constrained_grpo.eval.scoring.leaderboard import _md_cell
    from constrained_grpo.eval.scoring.loader import escape_markdown

    assert _md_cell("![p](https://evil.example/x.png)") == "\\![p\\](https\\://evil.example/x.png)"
    assert _md_cell("[home][1] `code` www.evil.com WWW.X") == "[home\\][1] \\`code\\` www\\.evil.com WWW\\.X"
    assert _md_cell("ftp://a") == "ftp\\://a"
    # Intervals and plain parentheses stay as they are: the committed board's bytes do not change.
    assert _md_cell("0.5 [0.1, 0.9] (n=10)!") == "0.5 [0.1, 0.9] (n=10)!"
    assert escape_markdown("www.x http://y") == "www\\.x http\\://y"


def test_a_www_name_does_not_autolink_in_leaderboard_md(toy_results: Path):
    from constrained_grpo.eval.scoring.leaderboard import build_leaderboard, render_markdown
    from constrained_grpo.eval.scoring.loader import load_results

    results = load_results(toy_results)
    table = results.table.assign(algo=results.table["algo"].str.replace("cgrpo_toy_agent:", "www.evil.com-", regex=False))
    md = render_markdown(build_leaderboard(table, results.tasks))
    assert "www\\.evil.com-ToyAgent" in md and "www.evil.com" not in md


# ------------------------------------------------------------------ point 3: the protocol


from cgrpo_toy_agent import TASK, TOY  # noqa: E402

from constrained_grpo.cli import main as cgrpo  # noqa: E402
from constrained_grpo.eval.scoring.loader import load_results  # noqa: E402
from constrained_grpo.eval.scoring.submission import check_submission  # noqa: E402


@pytest.fixture(scope="module")
def fresh(toy_results: Path, tmp_path_factory: pytest.TempPathFactory) -> pd.DataFrame:
    """Two new runs of the toy agent (seeds 2 and 3, relabelled 0 and 1) under a new name:
    a genuine submission to the toy board (2 seeds, 13 evaluation episodes per policy)."""
    from constrained_grpo.eval.runner import RunSpec, execute_run, task_meta

    out = tmp_path_factory.mktemp("fresh")
    for seed in (2, 3):
        run = execute_run(RunSpec(TASK, TOY, seed, 300, 13, {}, False), out, meta=task_meta(TASK))
        assert run.status == "done", run.error
    table = load_results(out).table
    return table.assign(algo="mine-toy", seed=table["seed"] - 2)


def _cli(capsys, *argv: str) -> tuple[int, str]:
    code = cgrpo(list(argv))
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def _refused_everywhere(board: Path, sub: pd.DataFrame, tmp_path: Path, capsys, pattern: str) -> str:
    """``sub`` refused by check_submission, ``--check`` and ``--add`` with one line matching
    ``pattern``; the --add leaves the output folder's earlier board as it was."""
    path = _csv(sub, tmp_path / "sub.csv")
    existing = load_results(board).table
    with pytest.raises(ResultsError, match=pattern) as err:
        check_submission(path, None, existing)
    line = _one_line(err)
    code, text = _cli(capsys, "leaderboard", str(board), "--check", str(path))
    assert code == 1 and re.search(pattern, text) and text.startswith("REJECTED"), text
    out = tmp_path / "lb"
    assert _cli(capsys, "leaderboard", str(board), "--out", str(out), "--quiet")[0] == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    code, text = _cli(capsys, "leaderboard", str(board), "--add", str(path), "--out", str(out), "--quiet")
    assert code == 2 and re.search(pattern, text), text
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # nothing on disk lost or changed
    return line


import re  # noqa: E402


def test_a_genuine_submission_joins_and_is_marked(toy_results: Path, fresh: pd.DataFrame, tmp_path: Path, capsys):
    path = _csv(fresh, tmp_path / "sub.csv")
    code, text = _cli(capsys, "leaderboard", str(toy_results), "--check", str(path))
    assert code == 0 and text.startswith("OK"), text
    out = tmp_path / "lb"
    code, text = _cli(capsys, "leaderboard", str(toy_results), "--add", str(path), "--out", str(out), "--quiet")
    assert code == 0, text
    runs = pd.read_csv(out / "runs.csv")
    assert runs.loc[runs["algo"] == "mine-toy", "submitted"].all() and not runs.loc[runs["algo"] != "mine-toy", "submitted"].any()
    assert set(runs.loc[runs["algo"] == "mine-toy", "evaluated_by"]) == {"self-reported"}
    md = (out / "leaderboard.md").read_text()
    assert "Submitted, self-reported (evaluated by their submitters, not re-run by the board): mine-toy." in md
    assert "self-reported" in (out / "leaderboard.html").read_text()


def test_fewer_seeds_than_the_board_are_refused(toy_results, fresh, tmp_path, capsys):
    line = _refused_everywhere(toy_results, fresh[fresh["seed"] == 0], tmp_path, capsys,
                               r"mine-toy: 1 seed\(s\), but the board runs 2 per algorithm; submit 2 seeds")
    assert TASK in line


def test_fewer_episodes_than_the_plan_are_refused(toy_results, fresh, tmp_path, capsys):
    short = fresh[(fresh["kind"] == "train") | (fresh["episode"] < 5)]
    _refused_everywhere(toy_results, short, tmp_path, capsys,
                        r"seed 0: 5 evaluation episodes of the \w+ policy, but the board's plan is 13 per policy; "
                        r"evaluate on the task's plan")


def test_identical_evaluation_rows_across_seeds_are_refused(toy_results, fresh, tmp_path, capsys):
    # Seed 1 keeps its own training rows but carries seed 0's evaluation.
    ev0 = fresh[(fresh["seed"] == 0) & (fresh["kind"] == "eval")].assign(seed=1)
    ev0 = ev0.assign(iteration=int(fresh.loc[(fresh["seed"] == 1) & (fresh["kind"] == "eval"), "iteration"].iloc[0]),
                     env_steps=int(fresh.loc[(fresh["seed"] == 1) & (fresh["kind"] == "eval"), "env_steps"].iloc[0]))
    copied = pd.concat([fresh[fresh["seed"] == 0], fresh[(fresh["seed"] == 1) & (fresh["kind"] == "train")], ev0])
    # The toy draws both policies' actions from one stream: its greedy episodes are its sampled ones,
    # as a policy that became deterministic plays them, and the refusal says so.
    line = _refused_everywhere(toy_results, copied, tmp_path, capsys,
                               r"mine-toy: seeds 0 and 1 hold identical evaluation rows, and each one's sampled episodes "
                               r"are its greedy ones: both final policies are deterministic and act alike; one evaluation "
                               r"counted twice is not two independent seeds")
    assert "re-evaluating their saved agents" in line and "docs/benchmark.md section 7" in line
    # Greedy episodes of their own (the sampled ones in reverse order), the same in both seeds:
    # still one evaluation twice, with no claim about the policies.
    greedy = (copied["kind"] == "eval") & (copied["policy"] == "deterministic")
    measured = ["return", "length", "cost_hazard", "cost_fuel"]
    for seed in (0, 1):
        rows = greedy & (copied["seed"] == seed)
        copied.loc[rows, measured] = copied.loc[rows, measured].to_numpy()[::-1]
    (tmp_path / "reversed").mkdir()
    line = _refused_everywhere(toy_results, copied, tmp_path / "reversed", capsys,
                               r"mine-toy: seeds 0 and 1 hold identical evaluation rows; one evaluation counted twice")
    assert "deterministic" not in line


def test_a_board_run_under_another_name_is_refused(toy_results, fresh, tmp_path, capsys):
    board = load_results(toy_results).table
    # The board's seed 0 under a new name, beside a genuine seed 1.
    copy = pd.concat([board[(board["algo"] == TOY) & (board["seed"] == 0)], fresh[fresh["seed"] == 1]]).assign(algo="mine-copy")
    # The toy's greedy episodes are its sampled ones (one stream for both), as a deterministic policy's.
    line = _refused_everywhere(toy_results, copy, tmp_path, capsys,
                               r"mine-copy seed 0 has the same evaluation episodes as cgrpo_toy_agent:ToyAgent seed 0 on "
                               r"the board, and both play their sampled episodes as their greedy ones: deterministic "
                               r"policies that act alike; a run under a second name is not a new algorithm")
    assert "re-evaluating its saved agent" in line


def test_a_copy_is_called_deterministic_only_when_its_sampled_and_greedy_summaries_agree():
    from constrained_grpo.eval.scoring.submission import _greedy_alike

    greedy = ("deterministic", 6534, 1_000_000, 1.5, 0.0, 6.0)
    assert _greedy_alike((greedy, ("sampled", *greedy[1:])))
    assert not _greedy_alike((greedy, ("sampled", 6534, 1_000_000, 1.2, 0.2, 4.4)))
    assert not _greedy_alike((greedy,))  # a policy that evaluated itself, greedily: nothing to compare


def test_two_names_for_one_run_in_a_submission_are_refused(fresh, tmp_path):
    twice = pd.concat([fresh, fresh.assign(algo="mine-again")])
    with pytest.raises(ResultsError, match=r"mine-toy seed 0 has the same evaluation episodes as mine-again seed 0 "
                                           r"in the submission"):
        check_submission(_csv(twice, tmp_path / "twice.csv"))


# --------------------------------------------------- point 2: records validated like submissions


from constrained_grpo.eval.scoring import record  # noqa: E402
from constrained_grpo.schema import TaskMeta  # noqa: E402


@pytest.fixture(scope="module")
def toy_record(toy_results: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("toy_record")
    record.pack([toy_results], out)
    return out


def reseal(src: Path, dst: Path, *, tasks=None, evals=None, table=None, algos=None, configs=None) -> Path:
    """``src``'s record edited and sealed again (new checksums), as a forger would."""
    rec = record.load_record(src, configs=True)
    record.write_record(dst, rec.table if table is None else table, rec.evals if evals is None else evals,
                        rec.tasks if tasks is None else tasks, rec.algos if algos is None else algos,
                        rec.configs if configs is None else configs)
    return dst


def _meta(meta: TaskMeta, edit) -> dict[str, TaskMeta]:
    d = meta.to_dict()
    edit(d)
    return {meta.task: TaskMeta.from_dict(d)}


def _refused_on_load(path: Path, pattern: str, capsys, tmp_path: Path) -> str:
    with pytest.raises(ResultsError, match=pattern) as err:
        load_results(path)
    line = _one_line(err)
    out = tmp_path / "board"
    code, text = _cli(capsys, "leaderboard", str(path), "--out", str(out), "--quiet")
    assert code == 2 and re.search(pattern, text) and not out.exists(), text  # refused before any folder
    return line


def test_the_toy_record_and_runs_load(toy_record, toy_results):
    assert load_results(toy_record).modified == {} and load_results(toy_results).modified == {}


def test_a_resealed_record_with_an_impossible_row_is_refused(toy_record, tmp_path, capsys):
    rec = record.load_record(toy_record)
    evals = rec.evals.copy()
    row = (evals["algo"] == TOY) & (evals["seed"] == 0) & (evals["policy"] == "sampled")
    # Return 1.5 (the unconstrained optimum, above R* = 1.2) at zero cost on 14,790 episodes.
    evals.loc[row, ["episodes", "return_mean"]] = [14790, 1.5]
    for name in ("hazard", "fuel"):
        evals.loc[row, [f"mean_{name}", f"ss_{name}", f"events_{name}", f"within_{name}"]] = [0.0, 0.0, 0, 14790]
    bad = reseal(toy_record, tmp_path / "rec", evals=evals)
    line = _refused_on_load(bad, r"mean return 1\.5 over 14790 episodes \(lower bound 1\.477\) is above [\d.]+, the most "
                                 r"any policy of Grid/HazardFuel3x3-v0 earns", capsys, tmp_path)
    assert "pack the runs cgrpo evaluated" in line


@pytest.mark.parametrize("edit,pattern", [
    (lambda d: d["optimum"].update(constrained_return=1.0), r"R\* \(exact optimum\): recorded 1\.0, registered 1\.2"),
    (lambda d: [c.update(limit=min(1.0, c["limit"] * 100) if c["indicator"] else c["limit"] * 100) for c in d["constraints"]],
     r"limit of hazard: recorded 1, registered 0\.2 \(and 1 more\)"),
    (lambda d: d["optimum"].update(multipliers=[0.0, 0.0]), r"optimal multipliers: recorded \[0\.0, 0\.0\]"),
])
def test_a_resealed_record_with_other_task_metadata_is_refused(toy_record, tmp_path, capsys, edit, pattern):
    rec = record.load_record(toy_record)
    bad = reseal(toy_record, tmp_path / "rec", tasks=_meta(rec.tasks[TASK], edit))
    line = _refused_on_load(bad, pattern, capsys, tmp_path)
    assert "--allow-modified-tasks" in line
    # Ranked as it is only on request, and the page says so.
    assert load_results(bad, allow_modified_tasks=True).modified[TASK]
    out = tmp_path / "board"
    code, text = _cli(capsys, "leaderboard", str(bad), "--out", str(out), "--quiet", "--allow-modified-tasks")
    assert code == 0, text
    assert f"{TASK} is ranked on settings other than the registered task's (--allow-modified-tasks)" in \
        (out / "leaderboard.md").read_text()


def test_markdown_in_a_recorded_name_is_refused(toy_record, tmp_path, capsys):
    rec = record.load_record(toy_record, configs=True)
    name = "![p](https://evil.example/x.png)"
    rename = lambda a: name if a == TOY else a  # noqa: E731
    table = rec.table.assign(algo=rec.table["algo"].map(rename))
    evals = rec.evals.assign(algo=rec.evals["algo"].map(rename))
    configs = {(t, rename(a), s): v for (t, a, s), v in rec.configs.items()}
    algos = {rename(a): v for a, v in rec.algos.items()}
    bad = reseal(toy_record, tmp_path / "rec", table=table, evals=evals, configs=configs, algos=algos)
    _refused_on_load(bad, r"column 'algo' row \d+ has '!\[p\]\(https://evil\.example/x\.png\)' \(it must match", capsys, tmp_path)


def _edit_configs(root: Path, edit) -> None:
    import json

    for cfg in root.rglob("config.json"):
        if (cfg.parent / "done.json").exists():
            data = json.loads(cfg.read_text())
            edit(data)
            cfg.write_text(json.dumps(data))


@pytest.mark.parametrize("edit,pattern", [
    (lambda c: [k.update(limit=k["limit"] * 100) for k in c["task"]["constraints"] if not k["indicator"]],
     r"limit of fuel: recorded 440, registered 4\.4"),
    (lambda c: c["task"]["optimum"].update(constrained_return=1.4), r"R\* \(exact optimum\): recorded 1\.4, registered 1\.2"),
    (lambda c: c["eval"].update(plan={"power": 0.5, "cap": 10, "pilot": 10}), r"evaluation plan: recorded \{'power': 0\.5"),
])
def test_run_folders_claiming_other_settings_are_refused(results_copy, tmp_path, capsys, edit, pattern):
    _edit_configs(results_copy, edit)
    _refused_on_load(results_copy, pattern, capsys, tmp_path)
    assert load_results(results_copy, allow_modified_tasks=True).modified


@pytest.mark.parametrize("task", ["Grid/HazardFuel3x3-v0", "Grid/HazardFuelCumulative-v0"])
def test_the_table_of_registered_optima_is_the_lp_solution(task):
    from constrained_grpo.envs.gridworld.optima import REGISTERED_OPTIMA
    from constrained_grpo.envs.gridworld.tasks import GRIDWORLD
    from constrained_grpo.eval.scoring.loader import meta_differences

    assert GRIDWORLD.optima is REGISTERED_OPTIMA
    solved = task_meta(task)
    table = TaskMeta.from_dict({**solved.to_dict(), "optimum": REGISTERED_OPTIMA[task]})
    assert meta_differences(table, solved) == []
    assert math.isclose(REGISTERED_OPTIMA["Grid/HazardFuel3x3-v0"]["constrained_return"], 1.2)


# ------------------------------------------------------------------ point 6: the small ones


def _usage_error(capsys, argv: list[str]) -> str:
    """The one-line error of a refused command line (argparse's usage line aside)."""
    with pytest.raises(SystemExit) as exit_:
        cgrpo(argv)
    assert exit_.value.code == 2
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip() and not ln.startswith(("usage:", " "))]
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.parametrize("argv,pattern", [
    (["train", TASK, "ppo", "--seed", "18446744073709551616"], r"--seed 18446744073709551616 is beyond the largest seed, 2\^63 - 1"),
    (["train", TASK, "ppo", "--seed", "9223372036854775808"], r"--seed 9223372036854775808 is beyond the largest seed"),
    (["bench", "--seeds", "1-99999999999"], r"--seeds 1-99999999999: 99,999,999,999 seeds, at most 100,000 in one sweep"),
    (["bench", "--seeds", "9223372036854775807-9223372036854775808"], r"seed 9223372036854775808 is beyond the largest"),
    (["bench", "--seeds", "99999999999"], r"--seeds 99999999999 is beyond the most seeds of one sweep, 100,000"),
    (["bench", "--backend", "ray", "--ray-address", "nowhere:1"], r"--ray-address nowhere:1: nothing answers at nowhere:1"),
    (["bench", "--backend", "ray", "--ray-address", "127.0.0.1:1"], r"nothing answers at 127\.0\.0\.1:1 \(Connection refused\)"),
    (["bench", "--backend", "ray", "--ray-address", "nowhere"], r"--ray-address nowhere: give the cluster's HOST:PORT"),
])
def test_out_of_range_seeds_and_unreachable_ray_are_one_line_before_any_folder(argv, pattern, tmp_path, capsys):
    out = tmp_path / "out"
    line = _usage_error(capsys, [*argv, "--out", str(out)])
    assert re.search(pattern, line), line
    assert not out.exists()


def test_a_config_typo_of_a_module_class_algorithm_is_one_line_before_any_folder(tmp_path, capsys):
    out = tmp_path / "out"
    code = cgrpo(["train", TASK, TOY, "--config.episodes_per_itr", "4", "--steps", "100", "--out", str(out)])
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("[cgrpo")]
    assert code == 2 and len(lines) == 1, err
    assert "got an unexpected keyword argument 'episodes_per_itr'; it takes ['episodes_per_iter'," in lines[0]
    assert not out.exists()
    # The options it takes still pass (validated against the same signature the run calls).
    from constrained_grpo.registry import resolve_config

    assert resolve_config(TOY, TASK, episodes_per_iter=4) == {"kind": "custom", "config": {"episodes_per_iter": 4}}


# ---------------------------------------------------------------- point 4: atomic records


class Crash(Exception):
    """A kill at one step of a write (the process gone: nothing after it runs)."""


def _crash_at(monkeypatch, step: int) -> list[str]:
    """Make the ``step``-th rename or deletion (from 0) raise :class:`Crash` before it happens."""
    import os

    done: list[str] = []
    real_replace, real_unlink = os.replace, Path.unlink

    def counted(what: str, call):
        def wrapper(*args, **kwargs):
            if len(done) == step:
                raise Crash(what)
            done.append(f"{what} {args[-1] if what == 'rename' else args[0]}")
            return call(*args, **kwargs)
        return wrapper

    monkeypatch.setattr(os, "replace", counted("rename", real_replace))
    monkeypatch.setattr(Path, "unlink", counted("unlink", real_unlink))
    return done


@pytest.mark.slow
def test_a_pack_into_its_own_folder_killed_at_any_step_leaves_the_old_or_the_new_record(toy_results, tmp_path, monkeypatch):
    import shutil

    half = tmp_path / "half"
    shutil.copytree(toy_results, half)
    algo_dirs = sorted((half / TASK).iterdir())
    rest = tmp_path / "rest" / TASK
    rest.mkdir(parents=True)
    shutil.move(str(algo_dirs[0]), rest / algo_dirs[0].name)
    first = tmp_path / "first"
    record.pack([half], first)
    old = load_results(first)
    whole = tmp_path / "whole"
    record.pack([first, tmp_path / "rest"], whole)
    new = load_results(whole)
    assert len(new.summaries) > len(old.summaries)

    def same(a, b) -> bool:
        return a.table.equals(b.table) and a.summaries.equals(b.summaries)

    steps = 0
    while True:
        root = tmp_path / f"root_{steps}"
        shutil.copytree(first, root)
        done = _crash_at(monkeypatch, steps)
        try:
            record.pack([root, tmp_path / "rest"], root)  # the form the loader's own message recommends
            finished = True
        except Crash:
            finished = False
        monkeypatch.undo()
        now = load_results(root)
        assert same(now, new if finished else old) or (not finished and same(now, new)), (steps, done)
        record.pack([root], tmp_path / f"again_{steps}")  # it packs again, too
        if finished:
            assert same(now, new) and sorted(p.name for p in root.iterdir()) == sorted(p.name for p in whole.iterdir())
            break
        steps += 1
    # The new task file, the manifest (the switch) and the old file's removal: each a step.
    assert steps >= 3, done


def test_the_board_folder_is_written_together_and_loses_its_stale_tables(toy_results, tmp_path, capsys, monkeypatch):
    import os

    out = tmp_path / "lb"
    assert _cli(capsys, "leaderboard", str(toy_results), "--out", str(out), "--quiet", "--table")[0] == 0
    assert (out / "results.csv").is_file()
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    # A build without --table removes the earlier long table (it would describe other runs) ...
    assert _cli(capsys, "leaderboard", str(toy_results), "--out", str(out), "--quiet")[0] == 0
    assert not (out / "results.csv").exists() and (out / "leaderboard.md").read_bytes() == before["leaderboard.md"]
    # ... but never a user's file in a folder that held no board, nor the input itself.
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "results.csv").write_text("kept")
    assert _cli(capsys, "leaderboard", str(toy_results), "--out", str(mine), "--quiet")[0] == 0
    assert (mine / "results.csv").read_text() == "kept"
    # A failure while the files are written leaves every old file as it was (nothing renamed yet).
    real = os.fsync
    calls = []

    def failing(fd):
        calls.append(fd)
        if len(calls) == 3:
            raise OSError(28, "No space left on device")
        return real(fd)

    monkeypatch.setattr(os, "fsync", failing)
    state = {p.name: p.read_bytes() for p in out.iterdir()}
    with pytest.raises(OSError, match="No space left"):
        cgrpo(["leaderboard", str(toy_results), "--out", str(out), "--quiet", "--tol", "0.2"])
    monkeypatch.undo()
    assert {p.name: p.read_bytes() for p in out.iterdir()} == state  # no temporary left either


# ------------------------------------------- point 7: policy submissions re-evaluated by the maintainer


PRIVATE = 7_777_777_777


@pytest.fixture(scope="module")
def agents(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two saved cgrpo agents on the 3x3 grid (run folders as `cgrpo train` writes them),
    evaluated on the public seeds by the harness."""
    from constrained_grpo.eval.runner import RunSpec, execute_run, task_meta

    out = tmp_path_factory.mktemp("agents")
    for seed in (0, 1):
        spec = RunSpec(TASK, "cgrpo", seed, 600, None, {"num_groups": 2, "group_size": 4}, True)
        assert execute_run(spec, out, meta=task_meta(TASK)).status == "done"
    return out


@pytest.fixture(scope="module")
def toy_board(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The toy agent's runs at the same budget (600 steps), evaluated on the public seeds."""
    from constrained_grpo.eval.runner import RunSpec, execute_run, task_meta

    out = tmp_path_factory.mktemp("toy_board")
    for seed in (0, 1):
        assert execute_run(RunSpec(TASK, TOY, seed, 600, 13, {}, False), out, meta=task_meta(TASK)).status == "done"
    return out


@pytest.mark.slow
def test_submitted_agents_are_re_evaluated_on_the_private_seed_and_ranked(agents, toy_board, tmp_path, capsys):
    import json

    out = tmp_path / "board"
    code, text = _cli(capsys, "leaderboard", str(toy_board), "--reevaluate", str(agents), "--private-seed", str(PRIVATE),
                      "--out", str(out), "--quiet")
    assert code == 0, text
    runs = pd.read_csv(out / "runs.csv")
    mine = runs[runs["algo"] == "cgrpo"]
    assert len(mine) == 2 and set(mine["evaluated_by"]) == {"maintainer-evaluated"} and mine["submitted"].all()
    assert set(mine["eval_first_seed"]) == {PRIVATE} and set(mine["eval_episodes"]) == {6534}  # the task's plan
    md = (out / "leaderboard.md").read_text()
    assert "Submitted, maintainer-evaluated (re-evaluated by the maintainer on private reset seeds): cgrpo." in md
    assert "NOT RANKED" not in md  # ranked with the board's runs (the rank test is unpaired)
    # Provenance with every re-evaluated run; its episodes start at the private seed.
    for seed in (0, 1):
        run = out / "reevaluated" / TASK / "cgrpo" / f"seed_{seed}"
        done = json.loads((run / "done.json").read_text())
        assert done["submission"]["evaluated_by"] == "maintainer" and done["submission"]["versions"]["python"]
        assert "git" in done["submission"] and done["eval"]["first_seed"] == PRIVATE
        private = pd.read_csv(run / "eval.csv")
        public = pd.read_csv(agents / TASK / "cgrpo" / f"seed_{seed}" / "eval.csv")
        assert private["reset_seed"].min() == PRIVATE and public["reset_seed"].min() == 1_000_000
        # Other episodes, the same policy: the private mean return lies within the 99.9% interval
        # of the public one (two independent means: |difference| <= 3.29 x its standard error).
        a = private.loc[private["policy"] == "sampled", "return"].to_numpy()
        b = public.loc[public["policy"] == "sampled", "return"].to_numpy()
        se = math.sqrt(a.var(ddof=1) / len(a) + b.var(ddof=1) / len(b))
        assert abs(a.mean() - b.mean()) <= 3.29 * se + 1e-12, (a.mean(), b.mean(), se)


@pytest.mark.slow
def test_the_boards_own_runs_re_evaluated_rank_beside_them_under_another_name(agents, tmp_path, capsys):
    """The board holds cgrpo's public-seed runs; the same agents, re-evaluated on the private
    seed, are refused under their own name (with the fix) and ranked as ``--reevaluate-as``'s."""
    import json

    code, text = _cli(capsys, "leaderboard", str(agents), "--reevaluate", str(agents), "--private-seed", str(PRIVATE),
                      "--out", str(tmp_path / "same"), "--quiet")
    assert code == 2 and "algorithm cgrpo is on the board already; rank it under another name with --reevaluate-as NAME" in text
    out = tmp_path / "board"
    code, text = _cli(capsys, "leaderboard", str(agents), "--reevaluate", str(agents), "--reevaluate-as", "cgrpo-private",
                      "--private-seed", str(PRIVATE), "--out", str(out), "--quiet")
    assert code == 0, text
    runs = pd.read_csv(out / "runs.csv")
    mine, public = runs[runs["algo"] == "cgrpo-private"], runs[runs["algo"] == "cgrpo"]
    assert len(mine) == len(public) == 2
    assert set(mine["evaluated_by"]) == {"maintainer-evaluated"} and set(mine["eval_first_seed"]) == {PRIVATE}
    assert set(public["eval_first_seed"]) == {1_000_000}
    # The same trainings: identical training records, other evaluation episodes.
    assert list(mine["final_return"]) == list(public["final_return"])
    config = json.loads((out / "reevaluated" / TASK / "cgrpo-private" / "seed_0" / "config.json").read_text())
    assert config["algo"]["name"] == config["run"]["algo"] == "cgrpo-private" and config["algo"]["submitted_as"] == "cgrpo"


@pytest.mark.parametrize("argv,pattern", [
    ([], r"no private first seed: pass --private-seed N or set \$CGRPO_PRIVATE_SEED"),
    (["--private-seed", "1000000"], r"private first seed 1000000 is within 1,000,000 of the public first seed 1,000,000"),
    (["--private-seed", "5"], r"private first seed 5 is within 1,000,000 of the public first seed"),
    (["--private-seed", "x1"], r"private first seed 'x1' is not a whole number"),
])
def test_the_private_seed_is_required_and_private(agents, toy_board, tmp_path, capsys, monkeypatch, argv, pattern):
    monkeypatch.delenv("CGRPO_PRIVATE_SEED", raising=False)
    out = tmp_path / "board"
    line = _usage_error(capsys, ["leaderboard", str(toy_board), "--reevaluate", str(agents), "--out", str(out), *argv])
    assert re.search(pattern, line), line
    assert not out.exists()
    # --out must not be the board's own folder (the re-evaluated runs would join its runs).
    line = _usage_error(capsys, ["leaderboard", str(toy_board), "--reevaluate", str(agents), "--private-seed", str(PRIVATE)])
    assert "give --out OUT, another folder than DIR" in line


def test_a_run_without_a_saved_agent_is_refused(toy_results, toy_board, tmp_path, capsys):
    out = tmp_path / "board"
    code, text = _cli(capsys, "leaderboard", str(toy_board), "--reevaluate", str(toy_results), "--private-seed", str(PRIVATE),
                      "--out", str(out), "--quiet")
    assert code == 2 and "--reevaluate" in text and ("no saved agent" in text or "not registered" in text
                                                     or "--import" in text), text
    assert not (out / "reevaluated").exists()


def test_the_issues_impossible_row_on_hazardfuel_is_refused_and_the_optimum_passes():
    """Grid/HazardFuel-v0 (R* = 1.133 at hazard <= 0.1, fuel <= 12; unconstrained 1.5), 14,790
    episodes: return 1.5 at zero cost is refused; the optimum's own numbers pass."""
    from constrained_grpo.eval.scoring.loader import _check_summaries, registered_meta

    meta = registered_meta("Grid/HazardFuel-v0")
    assert math.isclose(meta.optimum_return, 1.1333333333333337)

    def row(ret: float, hazard_events: int, fuel: float, fuel_ss: float) -> dict:
        n = 14790
        return {"task": meta.task, "algo": "x", "seed": 0, "policy": "sampled", "episodes": n, "return_mean": ret,
                "mean_hazard": hazard_events / n, "ss_hazard": hazard_events * (1 - hazard_events / n),
                "binary_hazard": True, "events_hazard": hazard_events, "finite_hazard": True,
                "mean_fuel": fuel, "ss_fuel": fuel_ss, "binary_fuel": False, "events_fuel": 0, "finite_fuel": True}

    # At zero fuel the most any policy earns is R* + lambda*_fuel (0 - 12) + ... = 0.625.
    with pytest.raises(ResultsError, match=r"mean return 1\.5 over 14790 episodes \(lower bound 1\.477\) is above "
                                           r"0\.6252, the most any policy"):
        _check_summaries(pd.DataFrame([row(1.5, 0, 0.0, 0.0)]), {meta.task: meta}, "record.json")
    # The optimum mixes the 9-step safe route and the 21-step gem route: fuel 12 on average.
    _check_summaries(pd.DataFrame([row(1.133, 1479, 12.0, 14790 * 36.0)]), {meta.task: meta}, "record.json")


def test_a_resealed_record_with_impossible_train_rows_or_a_ranked_algorithm_made_a_reference_is_refused(
        toy_record, tmp_path, capsys):
    rec = record.load_record(toy_record)
    table = rec.table.copy()
    table.loc[table.index[0], "return"] = 100.0  # a 3x3 episode earns at most 1.5
    bad = reseal(toy_record, tmp_path / "rows", table=table)
    _refused_on_load(bad, r"column 'return' row 0 has 100\.0, outside \[0, 1\.5\]", capsys, tmp_path / "a")
    algos = {a: {**p, "reference": a == TOY} for a, p in rec.algos.items()}
    bad = reseal(toy_record, tmp_path / "algos", algos=algos)
    _refused_on_load(bad, rf"algorithm {re.escape(TOY)}: the manifest records reference=True, its runs' config\.json "
                          r"reference=False", capsys, tmp_path / "b")
    algos = {a: {**p, "lambda_max": 1.0} for a, p in rec.algos.items()}  # the "at bound" class read against 1
    bad = reseal(toy_record, tmp_path / "bound", algos=algos)
    _refused_on_load(bad, r"the manifest records lambda_max=1\.0, its runs' done\.json None", capsys, tmp_path / "c")


def test_a_selection_of_episodes_with_their_own_indices_is_refused(fresh, tmp_path):
    # Every other evaluation episode (0, 2, 4, ...): paired seeds, but a selection.
    picked = fresh[(fresh["kind"] == "train") | (fresh["episode"] % 2 == 0)]
    with pytest.raises(ResultsError, match=r"episodes must be 0, 1, \.\.\., 6 \(every episode evaluated, in order\); "
                                           r"episode 1 is missing") as err:
        check_submission(_csv(picked, tmp_path / "picked.csv"))
    _one_line(err)
