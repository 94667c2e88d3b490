"""The compact record (eval/scoring/record.py): the same leaderboard, tables and figures as
the run folders it was packed from, the same bytes when packed twice, and every damaged
file refused in one line naming it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from constrained_grpo.eval.scoring import record
from constrained_grpo.eval.scoring.leaderboard import build_leaderboard, write_leaderboard
from constrained_grpo.eval.scoring.loader import ResultsError, algo_properties, load_results, run_configs
from constrained_grpo.eval.scoring.plots import make_plots


@pytest.fixture(scope="module")
def packed(toy_results: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("record") / "standard"
    record.pack([toy_results], out)
    return out


def _outputs(root: Path, out: Path) -> dict[str, bytes]:
    res = load_results(root)
    props = algo_properties(root)
    units = {a: p["lambda_in_reward_units"] for a, p in props.items()}
    lb = build_leaderboard(res.table, res.tasks, lambda_in_reward_units=units, evals=res.summaries)
    paths = write_leaderboard(lb, out, table=res.table[res.table["kind"] == "train"], evals=res.evals)
    paths += make_plots(res.table, res.tasks, out / "plots", lambda_in_reward_units=units, evals=res.summaries)
    return {str(p.relative_to(out)): p.read_bytes() for p in paths}


@pytest.mark.slow
def test_a_record_and_its_runs_give_identical_tables_leaderboard_and_figures(toy_results: Path, packed: Path, tmp_path: Path) -> None:
    original, compact = load_results(toy_results), load_results(packed)
    # The record keeps the train rows and, of the evaluation, the summaries the metrics read.
    assert compact.summaries is not None and original.summaries is None
    assert set(compact.table["kind"]) == {"train"} and (original.table["kind"] == "eval").sum() > 0
    train = original.table[original.table["kind"] == "train"].reset_index(drop=True)
    pd.testing.assert_frame_equal(compact.table, train, check_exact=True)
    pd.testing.assert_frame_equal(compact.evals, original.evals, check_exact=True)
    assert len(compact.evals) == 2 * 4  # two policies of each of the 4 runs
    assert compact.tasks == original.tasks
    assert algo_properties(packed) == algo_properties(toy_results)
    assert run_configs(packed) == run_configs(toy_results) and len(run_configs(packed)) == 4
    a, b = _outputs(toy_results, tmp_path / "a"), _outputs(packed, tmp_path / "b")
    assert sorted(a) == sorted(b) and {"leaderboard.md", "runs.csv", "pairs.csv", "train.csv", "evals.csv"} <= set(a)
    assert any(name.endswith(".png") for name in a)
    assert [n for n in a if a[n] != b[n]] == []


@pytest.mark.slow
def test_packing_the_same_runs_twice_writes_the_same_bytes(toy_results: Path, packed: Path, tmp_path: Path) -> None:
    again = tmp_path / "again"
    record.pack([toy_results], again)
    assert sorted(p.name for p in again.iterdir()) == sorted(p.name for p in packed.iterdir())
    assert all((again / p.name).read_bytes() == p.read_bytes() for p in packed.iterdir())
    # A record is also a source: merged with nothing new, it packs to itself.
    record.pack([packed], tmp_path / "repacked")
    assert all((tmp_path / "repacked" / p.name).read_bytes() == p.read_bytes() for p in packed.iterdir())


@pytest.mark.slow
def test_records_merge_and_refuse_a_run_packed_twice(toy_results: Path, packed: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"Grid/HazardFuel3x3-v0/.*/seed_0 is in both .* pack each run once"):
        record.pack([packed, toy_results], tmp_path / "twice")
    # Half the runs in a record, the other half as run folders: the merge is the whole.
    half = tmp_path / "half"
    shutil.copytree(toy_results, half)
    algo_dirs = sorted(p for p in (half / "Grid" / "HazardFuel3x3-v0").iterdir())
    rest = tmp_path / "rest" / "Grid" / "HazardFuel3x3-v0"
    rest.mkdir(parents=True)
    shutil.move(str(algo_dirs[0]), rest / algo_dirs[0].name)
    record.pack([half], tmp_path / "first")
    record.pack([tmp_path / "first", tmp_path / "rest"], tmp_path / "merged")
    pd.testing.assert_frame_equal(load_results(tmp_path / "merged").table, load_results(packed).table, check_exact=True)


@pytest.mark.slow
def test_a_re_run_replaces_its_recorded_run_under_replace(toy_results: Path, packed: Path, tmp_path: Path) -> None:
    """One run re-run (its first training return changed): refused without ``replace``; with
    it, the merge holds the re-run's rows in place of the recorded run's, and the others as recorded."""
    run = sorted((toy_results / "Grid" / "HazardFuel3x3-v0").glob("*/seed_0"))[0]
    algo = json.loads((run / "config.json").read_text())["run"]["algo"]
    rerun = tmp_path / "rerun" / "Grid" / "HazardFuel3x3-v0" / run.parent.name / "seed_0"
    shutil.copytree(run, rerun)
    progress = pd.read_csv(rerun / "progress.csv")
    new_return = 0.5 if progress.loc[0, "return"] != 0.5 else 0.25
    progress.loc[0, "return"] = new_return
    progress.to_csv(rerun / "progress.csv", index=False)
    with pytest.raises(ValueError, match=r"pack each run once \(or --replace"):
        record.pack([packed, tmp_path / "rerun"], tmp_path / "refused")
    record.pack([packed, tmp_path / "rerun"], tmp_path / "replaced", replace=True)
    before, after = load_results(packed).table, load_results(tmp_path / "replaced").table
    key = ["task", "algo", "seed", "kind", "policy", "iteration", "episode"]
    assert len(after) == len(before)
    mine = (after["algo"] == algo) & (after["seed"] == 0) & (after["kind"] == "train")
    assert after.loc[mine].sort_values("iteration")["return"].iloc[0] == new_return
    others = lambda t: t[~((t["algo"] == algo) & (t["seed"] == 0))].sort_values(key).reset_index(drop=True)  # noqa: E731
    pd.testing.assert_frame_equal(others(after), others(before), check_exact=True)


def _copy(packed: Path, tmp_path: Path) -> tuple[Path, Path]:
    dest = tmp_path / "rec"
    shutil.copytree(packed, dest)
    return dest, next(dest.glob("*.npz"))


@pytest.mark.parametrize("damage", ["truncated", "altered", "missing", "rows", "evals", "manifest", "nested"])
def test_a_damaged_record_is_refused_in_one_line_naming_the_file(packed: Path, tmp_path: Path, damage: str) -> None:
    dest, task_file = _copy(packed, tmp_path)
    manifest = dest / record.MANIFEST
    if damage == "truncated":
        task_file.write_bytes(task_file.read_bytes()[:-100])
        expected = rf"{task_file.name} has \d+ bytes \(\d+ recorded\): it was truncated or changed"
    elif damage == "altered":
        data = bytearray(task_file.read_bytes())
        data[len(data) // 2] ^= 0xFF
        task_file.write_bytes(bytes(data))
        expected = rf"{task_file.name}: its SHA-256 differs"
    elif damage == "missing":
        task_file.unlink()
        expected = rf"{task_file.name} is missing or not a regular file"
    elif damage == "rows":
        doc = json.loads(manifest.read_text())
        doc["files"][0]["rows"] += 1
        manifest.write_text(json.dumps(doc))
        expected = r"has \d+ values for \d+ rows|is damaged"
    elif damage == "evals":  # a summary row more than the file holds
        doc = json.loads(manifest.read_text())
        doc["files"][0]["evals"] += 1
        manifest.write_text(json.dumps(doc))
        expected = r"column 'e\.[a-z_]+' has \d+ values for \d+ rows|is damaged"
    elif damage == "manifest":
        manifest.write_text("{not json")
        expected = r"record.json is not a record manifest \(JSONDecodeError\)"
    else:
        manifest.write_text("[" * 200_000)
        expected = r"record.json is not a record manifest \(RecursionError\)"
    with pytest.raises(ResultsError, match=expected) as info:
        load_results(dest)
    assert "\n" not in str(info.value)


def test_a_folder_of_records_names_the_one_to_rank(toy_results: Path, packed: Path, tmp_path: Path) -> None:
    shutil.copytree(packed, tmp_path / "results" / "standard")
    shutil.copytree(packed, tmp_path / "results" / "coupling" / "runs")
    with pytest.raises(ResultsError, match=r"holds the compact record\(s\) of 2 experiment\(s\) .*rank one folder, "
                                           r"e.g. `cgrpo leaderboard .*results/standard`"):
        load_results(tmp_path / "results")
    # A record with run folders beside it is refused, naming the command that packs them in.
    shutil.copytree(packed, tmp_path / "both")
    shutil.copytree(toy_results / "Grid", tmp_path / "both" / "Grid")
    with pytest.raises(ResultsError, match=r"holds a compact record \(record.json\) and run directories: pack the runs"):
        load_results(tmp_path / "both")


def test_a_sweep_in_parts_skips_the_runs_a_record_holds_as_asked(packed: Path, tmp_path: Path) -> None:
    from cgrpo_toy_agent import TASK, TOY, TOY_UNCONSTRAINED

    from constrained_grpo.eval.sweep import expand_grid, without_recorded

    # The toy results are 2 algorithms x seeds 0-1 at 300 steps and 13 episodes.
    same = expand_grid([TASK], [TOY, TOY_UNCONSTRAINED], [0, 1, 2], 300, eval_episodes=13, save_agent=False)
    todo, skipped = without_recorded(same, [packed])
    assert sorted(skipped) == sorted(s.key for s in same if s.seed < 2) and [s.seed for s in todo] == [2, 2]
    longer = expand_grid([TASK], [TOY], [0], 600, eval_episodes=13, save_agent=False)
    assert without_recorded(longer, [packed]) == (longer, [])  # another budget: not the recorded run
    from constrained_grpo.cli import main

    with pytest.raises(SystemExit):
        main(["bench", "--preset", "quick", "--skip-recorded", str(tmp_path), "--out", str(tmp_path / "o")])
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
def test_a_task_file_that_would_unpack_to_gigabytes_is_refused_unread(packed: Path, tmp_path: Path) -> None:
    import hashlib
    import zipfile

    dest, task_file = _copy(packed, tmp_path)
    with zipfile.ZipFile(task_file, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        with zf.open("task.values.npy", "w", force_zip64=True) as fh:  # 1.1 GB of zeros, a few MB packed
            block = b"\0" * (1 << 24)
            for _ in range(70):
                fh.write(block)
    doc = json.loads((dest / record.MANIFEST).read_text())
    entry = next(f for f in doc["files"] if f["file"] == task_file.name)
    blob = task_file.read_bytes()
    entry.update(bytes=len(blob), sha256=hashlib.sha256(blob).hexdigest())
    (dest / record.MANIFEST).write_text(json.dumps(doc))
    with pytest.raises(ResultsError, match=rf"{task_file.name} unpacks to [\d,]+ bytes, over"):
        load_results(dest)


def test_a_run_config_nested_past_the_recursion_limit_is_one_line(packed: Path, tmp_path: Path) -> None:
    """A record whose run config is 200,000 nested brackets (its checksum made to match) gave
    a RecursionError traceback from --skip-recorded and run_configs."""
    import hashlib
    import io

    import numpy as np

    dest, task_file = _copy(packed, tmp_path)
    with np.load(io.BytesIO(task_file.read_bytes()), allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files}
    arrays["configs"] = np.array(["[" * 200_000, *arrays["configs"][1:].tolist()])
    blob = record._zip_bytes(arrays)
    task_file.write_bytes(blob)
    doc = json.loads((dest / record.MANIFEST).read_text())
    entry = next(f for f in doc["files"] if f["file"] == task_file.name)
    entry.update(bytes=len(blob), sha256=hashlib.sha256(blob).hexdigest())
    (dest / record.MANIFEST).write_text(json.dumps(doc))
    with pytest.raises(ResultsError, match=rf"{task_file.name}: run '.*' has no readable config \(RecursionError\)") as info:
        run_configs(dest)
    assert "\n" not in str(info.value)


def test_every_number_survives_its_encoding_bit_for_bit() -> None:
    """The decimal encoding (m * 10^e, exact where |m| < 2^53 and |e| <= 22) on values it
    cannot hold (signed zero, NaN, infinities, subnormals, 17-digit and tiny values) keeps
    them as exceptions; a column of 4-digit values is stored as its digits."""
    import numpy as np

    rng = np.random.default_rng(3)
    rounded = [float(format(v, ".4g")) for v in rng.normal(0, 50, 3000)]
    awkward = [-0.0, 0.0, float("nan"), float("inf"), -float("inf"), 5e-324, 1.7976931348623157e308,
               0.1 + 0.2, 1e-30, 123456789012345680.0, -2.5e22, 1e23]
    col = pd.Series(rounded + awkward, dtype="float64")
    arrays, kind = record._encode_column("x", col)
    assert kind == "float64" and "x.m" in arrays and len(arrays["x.xb"]) >= 8  # the awkward ones are exceptions
    decoded = record._decode_column("x", kind, arrays, len(col), "test")
    assert decoded.view(np.int64).tolist() == col.to_numpy().view(np.int64).tolist()
    # Full-precision noise has no short digits: kept raw; integers by their differences.
    noise = pd.Series(rng.normal(size=500))
    arrays, kind = record._encode_column("y", noise)
    assert list(arrays) == ["y.raw"]
    steps = pd.Series(np.cumsum(rng.integers(4000, 4200, 800)).astype(np.int64) * -1 + 2**40)
    arrays, kind = record._encode_column("z", steps)
    # int16 steps, the first (2^40 - 4,1xx) an exception
    assert arrays["z.delta"].dtype == np.int16 and arrays["z.delta.i"].tolist() == [0]
    assert record._decode_column("z", kind, arrays, len(steps), "test").tolist() == steps.tolist()
    # A wall clock at 10 ms: one exponent for the column, its steps in one byte.
    clock = pd.Series(np.round(np.cumsum(rng.uniform(0.0, 0.5, 900)), 2))
    arrays, kind = record._encode_column("w", clock)
    assert arrays["w.E"].tolist() == [-2] and arrays["w.dM"].dtype == np.int8
    assert record._decode_column("w", kind, arrays, len(clock), "test").view(np.int64).tolist() == \
        clock.to_numpy().view(np.int64).tolist()


def test_the_summaries_are_the_same_bits_in_any_episode_order(toy_results: Path) -> None:
    """What a record keeps of the evaluation does not depend on the order of the episodes
    (exact sums), and gives the verdict's bounds of the episodes themselves."""
    import numpy as np

    from constrained_grpo.eval.scoring.metrics import eval_summaries
    from constrained_grpo.eval.scoring.verdict import cost_bounds, cost_stats

    res = load_results(toy_results)
    shuffled = res.table.sample(frac=1.0, random_state=7).reset_index(drop=True)
    a, b = eval_summaries(res.table, res.tasks), eval_summaries(shuffled, res.tasks)
    pd.testing.assert_frame_equal(a, b, check_exact=True)
    x = np.array([0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    y = np.array([3.0, 4.5, 4.0, 5.0, 3.5, 4.0, 4.0, 6.0, 2.0, 4.0])
    for costs, limit, indicator in ((x, 0.2, True), (y, 4.4, False)):
        st = cost_stats(costs[::-1])
        assert st.n == 10 and st.mean == costs.mean()
        assert cost_bounds(st, limit, indicator, alpha_lower=0.025, alpha_upper=0.05) == \
            cost_bounds(costs, limit, indicator, alpha_lower=0.025, alpha_upper=0.05)
    # By hand: 2 events of 10, Clopper-Pearson's one-sided 95% upper bound Beta^-1(0.95; 3, 8) = 0.5069.
    assert cost_bounds(cost_stats(x), 0.2, True, alpha_lower=0.05, alpha_upper=0.05)[1] == pytest.approx(0.5069, abs=1e-4)
    assert cost_stats(y).ss == pytest.approx(float(((y - y.mean()) ** 2).sum()))
