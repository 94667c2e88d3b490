"""Run directories, the long-table loader and its validation (Contract 3)."""

from __future__ import annotations

import shutil

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from cgrpo_toy_agent import TASK, TOY, TOY_UNCONSTRAINED
from constrained_grpo.eval import storage
from constrained_grpo.eval.scoring.loader import CORE_COLUMNS, ResultsError, find_runs, load_results, validate_table
from constrained_grpo.eval.runner import EVAL_SEED, RunSpec, execute_run
from constrained_grpo.schema import eval_columns, flatten_record

NAMES = ["hazard", "fuel"]


def run_path(root: Path, algo: str = TOY, seed: int = 0) -> Path:
    return storage.run_dir(root, TASK, algo, seed)


# ------------------------------------------------------------------------------ storage


def test_flatten_record_names_vectors_by_constraint():
    flat = flatten_record(
        {"env_steps": np.int64(8), "wall_s": 0.5, "ep_return": np.float32(1.0), "ep_cost": np.array([0.0, 3.0]),
         "multipliers": [0.1, 0.2], "eff_w": [0.5, 0.3, 0.2], "stats": {"a": True}, "other": [1, 2, 3, 4]},
        NAMES,
    )
    assert flat == {
        "env_steps": 8, "wall_s": 0.5, "return": 1.0, "cost_hazard": 0.0, "cost_fuel": 3.0,
        "lambda_hazard": 0.1, "lambda_fuel": 0.2, "eff_w_reward": 0.5, "eff_w_hazard": 0.3, "eff_w_fuel": 0.2,
        "stats_a": 1, "other_0": 1, "other_1": 2, "other_2": 3, "other_3": 4,
    }
    assert isinstance(flat["env_steps"], int)


def test_progress_log_numbers_rows_and_rewrites_atomically(tmp_path: Path):
    path = tmp_path / "progress.csv"
    log = storage.ProgressLog(path, NAMES, flush_every_s=0.0)
    for i in range(3):
        log({"iteration": 1 + i, "env_steps": 10 * (i + 1), "wall_s": 0.1 * i, "ep_return": 1.0,
             "ep_cost": [0.0, 1.0], "multipliers": [], **({"late_key": 5} if i == 2 else {})})
        assert len(pd.read_csv(path)) == i + 1  # a whole table after every record
    log.close()
    df = pd.read_csv(path)
    assert df["iteration"].tolist() == [0, 1, 2] and df["agent_iteration"].tolist() == [1, 2, 3]
    assert list(df.columns[:6]) == ["iteration", "env_steps", "wall_s", "return", "cost_hazard", "cost_fuel"]
    assert df["late_key"].isna().tolist() == [True, True, False]
    assert [p.name for p in tmp_path.iterdir()] == ["progress.csv"]  # no temporary file left
    with pytest.raises(ValueError, match="misses"):
        log({"env_steps": 1})


def test_run_directory_layout_and_config(toy_results: Path):
    path = run_path(toy_results)
    assert sorted(p.name for p in path.iterdir() if not p.name.startswith(".")) == [
        "config.json", "done.json", "eval.csv", "progress.csv"
    ]
    config = json.loads((path / "config.json").read_text())
    assert config["run"] == {"task": TASK, "algo": TOY, "seed": 0, "steps": 300, "eval_episodes": 13,
                             "config": {}, "save_agent": False}
    assert config["task"]["optimum"]["constrained_return"] == pytest.approx(1.2)
    assert {"python", "numpy", "torch", "gymnasium", "stable_baselines3", "constrained_grpo"} <= set(config["versions"])
    assert config["command"].startswith(f"cgrpo train {TASK} {TOY} --seed 0 --steps 300")
    done = json.loads((path / "done.json").read_text())
    assert done["progress_rows"] == len(pd.read_csv(path / "progress.csv"))
    assert done["eval_rows"] == 26  # 13 episodes for each of the sampled and the deterministic policy
    # The toy agent has act() only, sampling from a generator of its own that the harness seeds
    # per episode through seed_evaluation(seed): such an agent cannot be replayed row by row on
    # the batched twin, so it is played one episode at a time (eval/act_rows.py).
    assert done["eval"] == {"episodes": 13, "first_seed": EVAL_SEED, "policies": ["sampled", "deterministic"],
                            "owner": "harness", "sampler": "episode-generator", "batched": False, "rule": {"rule": "fixed"}}
    ev = pd.read_csv(path / "eval.csv")
    assert list(ev.columns) == eval_columns(NAMES) == ["episode", "policy", "reset_seed", "return", "length",
                                                          "cost_hazard", "cost_fuel"]
    assert list(ev["policy"]) == ["sampled"] * 13 + ["deterministic"] * 13
    assert list(ev["reset_seed"]) == [EVAL_SEED + i for i in range(13)] * 2


def test_execute_run_reports_failure_with_traceback(tmp_path: Path):
    spec = RunSpec(TASK, TOY, 0, 200, 13, {"crash": "always"}, False)
    outcome = execute_run(spec, tmp_path)
    assert outcome.status == "failed" and "toy agent crash" in outcome.error
    path = spec.run_dir(tmp_path)
    assert "toy agent crash" in (path / "error.txt").read_text()
    assert not storage.is_complete(path)
    assert not (path / storage.RUNNING_FILE).exists()  # no process runs it: its pid file goes
    with pytest.raises(ResultsError, match="not complete"):
        load_results(tmp_path)


# ------------------------------------------------------------------------------- loader


def test_load_results_builds_the_long_table(toy_results: Path):
    res = load_results(toy_results)
    t = res.table
    assert list(t.columns[: len(CORE_COLUMNS)]) == list(CORE_COLUMNS)
    assert {"cost_hazard", "cost_fuel", "lambda_hazard", "lambda_fuel", "eff_w_reward"} <= set(t.columns)
    assert sorted(t.groupby(["algo", "seed"]).groups) == [(TOY, 0), (TOY, 1), (TOY_UNCONSTRAINED, 0), (TOY_UNCONSTRAINED, 1)]
    assert set(t["kind"]) == {"train", "eval"} and (t["suite"] == "gridworld").all()
    assert t["seed"].dtype == np.int64 and t["env_steps"].dtype == np.int64
    un = t[t["algo"] == TOY_UNCONSTRAINED]
    assert un["lambda_hazard"].isna().all()
    con = t[(t["algo"] == TOY) & (t["seed"] == 0)]
    assert (con[con["kind"] == "eval"]["lambda_hazard"] == con[con["kind"] == "train"]["lambda_hazard"].iloc[-1]).all()
    assert len(con[con["kind"] == "eval"]) == 26
    assert list(con.loc[con["kind"] == "eval", "policy"]) == ["sampled"] * 13 + ["deterministic"] * 13
    assert con["policy"][con["kind"] == "train"].isna().all()
    # Train rows are keyed by iteration, eval rows by (policy, episode); an eval row's
    # iteration is the last train iteration (the evaluated policy's), never an episode number.
    train_con, eval_con = con[con["kind"] == "train"], con[con["kind"] == "eval"]
    assert train_con["episode"].isna().all()
    assert (eval_con["iteration"] == len(train_con) - 1).all()
    assert eval_con["episode"].tolist() == list(range(13)) * 2
    assert res.tasks[TASK].optimum_return == pytest.approx(1.2)
    assert [p.name for p in find_runs(toy_results)] == ["seed_0", "seed_1", "seed_0", "seed_1"]


def test_find_runs_skips_other_tools_folders(toy_results: Path, tmp_path: Path) -> None:
    root = tmp_path / "results"
    shutil.copytree(toy_results, root)
    # An acceptance-experiment folder: a config.json without the harness schema.
    other = root / "acceptance" / "cgrpo" / "seed0"
    other.mkdir(parents=True)
    (other / "config.json").write_text(json.dumps({"algo": "cgrpo", "seed": 0}))
    (other / "progress.csv").write_text("iteration\n1\n")
    # A harness folder whose config does not parse still counts, so the loader reports it.
    broken = root / "broken" / "seed_9"
    broken.mkdir(parents=True)
    (broken / "config.json").write_text("{not json")
    found = find_runs(root)
    assert other not in found and broken in found
    assert len(found) == len(find_runs(toy_results)) + 1


def _rewrite_csv(path: Path, edit) -> None:
    df = pd.read_csv(path)
    df = edit(df)
    df.to_csv(path, index=False)


def test_missing_column_is_named(results_copy: Path):
    path = run_path(results_copy) / "progress.csv"
    _rewrite_csv(path, lambda df: df.drop(columns=["cost_hazard"]))
    with pytest.raises(ResultsError, match=r"progress\.csv: missing column\(s\) \['cost_hazard'\]"):
        load_results(results_copy)


def test_nan_in_eval_is_an_error(results_copy: Path):
    path = run_path(results_copy) / "eval.csv"
    _rewrite_csv(path, lambda df: df.assign(**{"return": [np.nan] + df["return"].tolist()[1:]}))
    with pytest.raises(ResultsError, match=r"eval\.csv: column 'return' has empty or NaN cells at row\(s\) \[0\]"):
        load_results(results_copy)


def test_wrong_type_is_an_error(results_copy: Path):
    path = run_path(results_copy) / "progress.csv"
    _rewrite_csv(path, lambda df: df.assign(env_steps=["abc"] + df["env_steps"].astype(str).tolist()[1:]))
    with pytest.raises(ResultsError, match=r"column 'env_steps' must hold numbers; row 0 has 'abc'"):
        load_results(results_copy)


def test_an_algorithm_is_the_name_its_run_records(results_copy: Path):
    """The read side takes names from the runs (no registry): an unregistered name loads, a
    malformed one is refused, and a caller may still restrict the names it accepts."""
    cfg_path = run_path(results_copy) / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["run"]["algo"] = "no-such-algo"
    cfg_path.write_text(json.dumps(cfg))
    assert "no-such-algo" in set(load_results(results_copy).table["algo"])
    with pytest.raises(ResultsError, match=r"unknown algorithm 'no-such-algo'; registered:"):
        load_results(results_copy, known_algos=[TOY, TOY_UNCONSTRAINED])
    cfg["run"]["algo"] = "bad name"
    cfg_path.write_text(json.dumps(cfg))
    with pytest.raises(ResultsError, match=r"algorithm name 'bad name' must match"):
        load_results(results_copy)


def test_half_written_file_is_detected(results_copy: Path):
    path = run_path(results_copy) / "progress.csv"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:-2]))  # as if a plain (non-atomic) writer had been killed
    with pytest.raises(ResultsError, match=r"has \d+ rows but .*done\.json records"):
        load_results(results_copy)


def test_incomplete_runs_are_listed_not_dropped(results_copy: Path):
    (run_path(results_copy, TOY, 1) / "done.json").unlink()
    with pytest.raises(ResultsError, match="1 run\\(s\\) .* are not complete"):
        load_results(results_copy)
    res = load_results(results_copy, allow_incomplete=True)
    assert res.incomplete == (run_path(results_copy, TOY, 1),)
    assert not ((res.table["algo"] == TOY) & (res.table["seed"] == 1)).any()


# --------------------------------------------------------------------------- validation


@pytest.fixture(scope="module")
def good_table(toy_results: Path) -> tuple[pd.DataFrame, dict]:
    res = load_results(toy_results)
    return res.table, res.tasks


def test_validate_accepts_the_loaded_table(good_table):
    table, tasks = good_table
    out, _ = validate_table(table, tasks)
    pd.testing.assert_frame_equal(out, table)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda t: t.drop(columns=["env_steps"]), r"missing column\(s\) \['env_steps'\]"),
        (lambda t: t.assign(extra=1.0), r"unknown column\(s\) \['extra'\]"),
        (lambda t: t.assign(kind=t["kind"].replace("eval", "test")), r"'kind' must be 'train' or 'eval'"),
        (lambda t: t.assign(seed=0.5), r"'seed' must hold integers"),
        (lambda t: t.drop(columns=["cost_fuel"]), r"missing column\(s\) \['cost_fuel'\]"),
        (lambda t: t.assign(cost_mud=1.0), r"\['cost_mud'\] name no constraint"),
        (lambda t: t[t["kind"] == "train"], r"has only \['train'\] rows"),
        (lambda t: t.assign(task="Grid/Nope-v0"), r"unknown task 'Grid/Nope-v0'"),
        (lambda t: t.assign(lambda_hazard=np.where(np.arange(len(t)) == 0, np.nan, 1.0)), r"must be all filled"),
        (lambda t: pd.concat([t, t.iloc[[0]]]), r"train iteration 0 appears twice"),
        (lambda t: pd.concat([t, t[t["kind"] == "eval"].iloc[[0]]]), r"eval episode 0 of the sampled policy appears twice"),
        (lambda t: t.assign(iteration=np.where(t["kind"] == "eval", 0, t["iteration"])),
         r"eval rows must carry the last train iteration"),
        (lambda t: t.assign(episode=0.0), r"'episode' must be an integer >= 0 on eval rows and empty on train rows"),
        (lambda t: t.drop(columns=["episode"]), r"missing column\(s\) \['episode'\]"),
    ],
)
def test_validate_rejects_malformed_tables(good_table, edit, message):
    table, tasks = good_table
    with pytest.raises(ResultsError, match=message):
        validate_table(edit(table.copy()), {} if "Nope" in message else tasks)


def test_train_rows_may_lack_an_estimate_but_not_everywhere(good_table):
    table, tasks = good_table
    t = table.copy()
    first_train = t.index[t["kind"] == "train"][0]
    t.loc[first_train, "return"] = np.nan  # an iteration that finished no episode
    validate_table(t, tasks)
    t.loc[t["kind"] == "train", "return"] = np.nan
    with pytest.raises(ResultsError, match="empty in every train row"):
        validate_table(t, tasks)
    assert math.isnan(float(t.loc[first_train, "return"]))


def test_eval_csv_without_policy_columns_is_rejected(results_copy: Path):
    # The pre-protocol layout (episode, return, length, cost_*): the reader has no fallback.
    path = run_path(results_copy) / "eval.csv"
    _rewrite_csv(path, lambda df: df.drop(columns=["policy", "reset_seed"]))
    with pytest.raises(ResultsError, match=r"eval\.csv: missing column\(s\) \['policy', 'reset_seed'\]"):
        load_results(results_copy)


def test_load_results_keeps_an_agents_extra_columns(toy_results: Path) -> None:
    table = load_results(toy_results, extra_columns=True).table
    assert "loss" in table.columns and table.loc[table["kind"] == "train", "loss"].notna().any()
    assert "loss" not in load_results(toy_results).table.columns


def test_a_folder_of_several_experiments_names_the_one_to_rank(toy_results: Path, tmp_path: Path) -> None:
    # results/ holds the standard runs and the coupling runs with the same task/algo/seed keys.
    shutil.copytree(toy_results, tmp_path / "standard")
    shutil.copytree(toy_results / "Grid", tmp_path / "coupling" / "runs" / "Grid")
    with pytest.raises(ResultsError, match=r"holds Grid/HazardFuel3x3-v0/.*twice .*experiments "
                       r"\(.*coupling, .*standard\); rank one folder, e.g. `cgrpo leaderboard .*(standard|coupling/runs)`"):
        load_results(tmp_path)
    assert len(load_results(tmp_path / "standard").table)  # one experiment loads as before


@pytest.mark.timeout(120)  # reading /dev/zero or a huge file whole would hang: the marker fails it
@pytest.mark.parametrize("damage", ["dev_zero", "nested", "outside_link", "huge"])
def test_results_files_are_read_from_regular_files_of_bounded_size(results_copy: Path, tmp_path: Path, damage: str):
    """A link to /dev/zero used to hang the leaderboard (1.9 GB and growing); 200,000 nested
    brackets gave a 34-line RecursionError traceback; a link out of the folder was followed."""
    import time

    from constrained_grpo.eval.scoring import loader

    run = run_path(results_copy)
    if damage == "dev_zero":
        (run / "config.json").unlink()
        (run / "config.json").symlink_to("/dev/zero")
        expected = r"config\.json is not a regular file"
    elif damage == "nested":
        (run / "config.json").write_text("[" * 200_000)
        expected = r"config\.json is not valid JSON \(RecursionError\)"
    elif damage == "outside_link":
        outside = tmp_path / "elsewhere.csv"
        outside.write_bytes((run / "eval.csv").read_bytes())
        (run / "eval.csv").unlink()
        (run / "eval.csv").symlink_to(outside)
        expected = r"eval\.csv is not a regular file"
    else:
        with open(run / "progress.csv", "ab") as fh:
            fh.truncate(loader.MAX_CSV_BYTES + 1)
        expected = r"progress\.csv has [\d,]+ bytes, over the [\d,]+ a results file may have"
    with pytest.raises(ResultsError, match=expected) as info:
        load_results(results_copy)
    assert "\n" not in str(info.value)


def _set(file: Path, keys: tuple[str, ...], value) -> None:
    data = json.loads(file.read_text())
    node = data
    for key in keys[:-1]:
        node = node[key]
    node[keys[-1]] = value
    file.write_text(json.dumps(data))


@pytest.mark.parametrize(("damage", "expected"), [
    (lambda run: (run / "done.json").write_text("[]"), r"done\.json: holds \[\], not the JSON object cgrpo writes"),
    (lambda run: (run / "done.json").write_text("null"), r"done\.json: holds null"),
    (lambda run: _set(run / "config.json", ("task",), "Grid/HazardFuel3x3-v0"), r"config\.json: malformed \(AttributeError"),
    (lambda run: _set(run / "config.json", ("task", "task"), 5), r"config\.json: malformed \(ValueError: task and suite must be strings"),
    (lambda run: _set(run / "config.json", ("task", "optimum", "constrained_return"), "1.2"),
     r"config\.json: malformed \(ValueError: the optimum holds '1\.2', not a finite number"),
    (lambda run: _set(run / "config.json", ("run", "seed"), 10**400), r"config\.json: seed 1{1}0+ is outside \[0, 2\^63\)"),
    (lambda run: _set(run / "config.json", ("run", "seed"), -3), r"config\.json: seed -3 is outside \[0, 2\^63\)"),
    (lambda run: (run / "config.json").write_text((run / "config.json").read_text().replace('"seed": 0', '"seed": Infinity')),
     r"config\.json: malformed \(OverflowError"),
])
def test_any_json_content_is_a_one_line_error(results_copy: Path, damage, expected: str):
    """done.json holding a list or null, a task section that is a string, a seed of 400
    digits or Infinity gave AttributeError or OverflowError tracebacks."""
    from constrained_grpo.eval.scoring.loader import algo_properties, run_configs

    damage(run_path(results_copy))
    with pytest.raises(ResultsError, match=expected) as info:
        load_results(results_copy)
    assert "\n" not in str(info.value)
    algo_properties(results_copy)  # skips what it cannot read
    try:
        run_configs(results_copy)
    except ResultsError as err:
        assert "\n" not in str(err)
