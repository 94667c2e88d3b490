"""The committed leaderboard (results/leaderboard.md, runs.csv, pairs.csv, deployments.csv) read
as a careful reader would: on every task and suite aggregate the rows are in the order of the
mean score, every rank cell is "position [L, U]" with L and U following from the separated pairs,
the group letters encode exactly those pairs, no "feasible? yes" row holds a seed that breaks a
limit, and no pair test is between two deployments of one training."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pandas as pd
import pytest

from constrained_grpo.eval.scoring.deployment import check_independent
from constrained_grpo.eval.scoring.loader import run_configs, run_deployment

RESULTS = Path(__file__).resolve().parents[2] / "results"
RANK_CELL = re.compile(r"^(\d+)(=?) \[(\d+), (\d+)\]$")


def _tables(md: str) -> dict[str, list[dict[str, str]]]:
    """Per section title ("Task X", "Suite S: aggregate" or a part's, "Deployments on X"), its
    table's rows as header -> cell."""
    out: dict[str, list[dict[str, str]]] = {}
    title, header = None, None
    for line in md.splitlines():
        if line.startswith(("## ", "### ")):
            title, header = line.split(" ", 1)[1], None
        elif line.startswith("| ") and title is not None:
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
            if header is None:
                header = cells
                out[title] = []
            else:
                out[title].append(dict(zip(header, cells)))
    return out


@pytest.fixture(scope="module")
def board() -> tuple[dict[str, list[dict[str, str]]], pd.DataFrame, pd.DataFrame]:
    if not (RESULTS / "leaderboard.md").is_file() or not (RESULTS / "pairs.csv").is_file():
        pytest.skip("no committed leaderboard")
    runs = pd.read_csv(RESULTS / "runs.csv", low_memory=False)
    return _tables((RESULTS / "leaderboard.md").read_text()), runs, pd.read_csv(RESULTS / "pairs.csv")


def _letters(cell: str) -> set[str]:
    return set(cell.split(",")) if "," in cell else set(cell)


def _check_ranked_rows(rows: list[dict[str, str]], means: dict[str, float], pairs: pd.DataFrame, scope: str) -> None:
    algos = [r["algo"] for r in rows]
    # Monotone in the mean score (rounding to runs.csv's 10 significant digits aside).
    m = [means[a] for a in algos]
    assert all(x >= y - 1e-8 for x, y in zip(m, m[1:])), (scope, list(zip(algos, m)))
    sep = {frozenset((r.a, r.b)) for r in pairs.itertuples() if r.scope == scope and r.separated}
    k = len(rows)
    for i, r in enumerate(rows):
        got = RANK_CELL.match(r["rank [L, U]"])
        assert got, (scope, r["rank [L, U]"])
        pos, tie, lo, hi = int(got[1]), got[2] == "=", int(got[3]), int(got[4])
        higher = [b for b in algos if means[b] > means[r["algo"]] + 1e-8]
        assert pos == 1 + len(higher) or (tie and abs(means[algos[pos - 1]] - means[r["algo"]]) < 1e-8), (scope, r["algo"])
        above = sum(frozenset((r["algo"], b)) in sep for b in algos[:i])
        below = sum(frozenset((r["algo"], b)) in sep for b in algos[i + 1:])
        # Separated pairs are never between rows of equal mean: above means above in the order.
        assert lo == 1 + above and hi == k - below, (scope, r["algo"], lo, hi, above, below)
        assert lo <= pos <= hi
    for a, b in itertools.combinations(rows, 2):
        shares = bool(_letters(a["group"]) & _letters(b["group"]))
        assert shares == (frozenset((a["algo"], b["algo"])) not in sep), (scope, a["algo"], b["algo"])


def test_every_committed_task_reads_in_the_order_of_its_estimate(board) -> None:
    tables, runs, pairs = board
    tasks = [t for t in tables if t.startswith("Task ")]
    assert tasks
    for title in tasks:
        task = title.removeprefix("Task ")
        rows = [r for r in tables[title] if r["rank [L, U]"] not in ("ref", "—")]
        if not rows:
            continue
        learners = runs[(runs["task"] == task) & ~runs["reference"].astype(bool)]
        means = learners.groupby("algo")["score"].mean().to_dict()
        _check_ranked_rows(rows, means, pairs, task)
        # "feasible? yes" only where no seed's own verdict breaks a limit.
        breaking = learners[learners["feasibility"] == "violates"].groupby("algo").size().to_dict()
        for r in rows:
            if r["feasible?"] == "yes":
                assert breaking.get(r["algo"], 0) == 0, (task, r["algo"], breaking[r["algo"]])


def test_every_committed_suite_aggregate_reads_in_the_order_of_its_estimate(board) -> None:
    tables, _, pairs = board
    suites = [t for t in tables if t.endswith(": aggregate") and tables[t]]
    assert suites
    for title in suites:
        rows = [r for r in tables[title] if r["rank [L, U]"] != "—"]
        means = {r["algo"]: float(r["score mean [95% CI]"].split(" ")[0]) for r in rows}
        scope = "suite:" + title.removeprefix("Suite ").removesuffix(": aggregate")
        # The printed means are rounded to 3 decimals: check the order on them, the rest exactly.
        m = [means[r["algo"]] for r in rows]
        assert all(x >= y for x, y in zip(m, m[1:])), (scope, m)
        sep = {frozenset((r.a, r.b)) for r in pairs.itertuples() if r.scope == scope and r.separated}
        for i, r in enumerate(rows):
            got = RANK_CELL.match(r["rank [L, U]"])
            assert got, r["rank [L, U]"]
            above = sum(frozenset((r["algo"], o["algo"])) in sep for o in rows[:i])
            below = sum(frozenset((r["algo"], o["algo"])) in sep for o in rows[i + 1:])
            assert (int(got[3]), int(got[4])) == (1 + above, len(rows) - below), (scope, r["algo"])
        for a, b in itertools.combinations(rows, 2):
            assert bool(_letters(a["group"]) & _letters(b["group"])) == (frozenset((a["algo"], b["algo"])) not in sep)


def test_every_ranked_committed_task_binds_and_the_others_are_controls(board) -> None:
    """On every task the board ranks, each unconstrained stand-in the task declares breaks a
    limit on at least 9 of 10 seeds and a keeper (a reference or a learner) keeps every limit
    on all of its seeds; a task where a stand-in keeps the limits is shown as a control,
    without ranks (Highway-v1's ppo and ChainSum-v0's grpo on the committed board)."""
    from constrained_grpo.eval.scoring.binding import MIN_SHARE, loose_stand_ins
    from constrained_grpo.tasks import task_info

    tables, runs, _ = board
    md = (RESULTS / "leaderboard.md").read_text()
    controls = []
    for title in (t for t in tables if t.startswith("Task ")):
        task = title.removeprefix("Task ")
        mine = runs[runs["task"] == task]
        binding = task_info(task).task_binding()
        ranked = any(r["rank [L, U]"] not in ("ref", "—") for r in tables[title])
        if loose_stand_ins(mine, binding):
            controls.append(task)
            assert not ranked, task
            continue
        assert ranked, task
        for name in binding.unconstrained:
            seeds = mine[mine["algo"] == name]
            if len(seeds):
                assert (seeds["feasibility"] == "violates").sum() >= MIN_SHARE * len(seeds), (task, name)
        kept = [k for k in binding.keepers if len(g := mine[mine["algo"] == k]) and (g["feasibility"] == "feasible").all()]
        kept += [a for a, g in mine[~mine["reference"].astype(bool)].groupby("algo") if (g["feasibility"] == "feasible").all()]
        assert kept, task
    assert controls == ["Highway/Highway-v1", "Math/ChainSum-v0"]
    assert md.count("NOT RANKED, a control: its limits do not bind on this board's runs") == 2


def test_hazard_fuel_lists_cpo_above_cgrpo_opg(board) -> None:
    tables, _, _ = board
    order = [r["algo"] for r in tables["Task Grid/HazardFuel-v0"]]
    assert order.index("cpo") < order.index("cgrpo-opg")


def test_no_committed_pair_tests_two_deployments_of_one_training(board) -> None:
    """cgrpo-best, cgrpo-mix and the SB3 learners' aliases deploy their learners' trainings (the
    record's configs say so, and runs.csv with them): they are compared with their learner's
    last iterate in deployments.csv, paired by seed, and take part in no pair test."""
    tables, runs, pairs = board
    record = RESULTS / "standard"
    if not record.is_dir():
        pytest.skip("no committed record")
    expected = {key: run_deployment(cfg) for key, cfg in run_configs(record).items()}
    written = {(str(t), str(a), int(s)): (str(learner), str(rule))
               for t, a, s, learner, rule in runs[["task", "algo", "seed", "learner", "deploy"]].itertuples(index=False)}
    assert written == expected
    other = runs[runs["deploy"] != "last"]
    # cgrpo's trainings deployed by both rules on every board task it runs; five SB3 learners'
    # on the 3x3 map, each alias named <learner>-best / <learner>-mix.
    assert {"cgrpo-best", "cgrpo-mix", "ppo-lag-best", "cpo-best"} <= set(other["algo"])
    assert all(a == f"{learner}-{'best' if rule == 'best-feasible' else 'mix'}"
               for a, learner, rule in other[["algo", "learner", "deploy"]].drop_duplicates().itertuples(index=False))
    assert not set(other["algo"]) & (set(pairs["a"]) | set(pairs["b"]))
    for r in pairs.itertuples():
        check_independent(runs, r.a, r.b, None if r.scope.startswith("suite:") else r.scope)
    # One row per task, learner and rule that has another deployment (a control's included), and
    # per suite for the learners with one on every task of it.
    dep = pd.read_csv(RESULTS / "deployments.csv")
    expected = {(t, learner, rule) for t, learner, rule in other[["task", "learner", "deploy"]].drop_duplicates().itertuples(index=False)}
    grid = sorted(runs.loc[runs["suite"] == "gridworld", "task"].unique())
    expected |= {("suite:gridworld", learner, rule) for learner, rule in {(x[1], x[2]) for x in expected}
                 if all((t, learner, rule) in expected for t in grid)}
    assert set(zip(dep["scope"], dep["learner"], dep["deploy"])) == expected and len(dep) == len(expected)
    assert {"Highway/Highway-v1", "suite:gridworld"} <= set(dep["scope"])
    for scope, g in dep.groupby("scope"):
        title = f"Deployments over suite {scope.removeprefix('suite:')}" if scope.startswith("suite:") else f"Deployments on {scope}"
        assert [r["rule (runs)"] for r in tables[title]] == [f"{d} ({a})" for d, a in zip(g["deploy"], g["algo"])]


def test_every_committed_deployment_deploys_its_learners_own_training() -> None:
    """A deployment row is paired with its learner's last iterate of the same seed because both
    are one training: their training logs (every logged column but the clock) are the same,
    iteration for iteration. A deployment trained apart on another machine would diverge."""
    from constrained_grpo.eval.scoring.loader import load_results

    record = RESULTS / "standard"
    if not record.is_dir():
        pytest.skip("no committed record")
    res = load_results(record)
    train = res.table[res.table["kind"] == "train"]
    configs = run_configs(record)
    rules = {key: run_deployment(cfg) for key, cfg in configs.items()}
    logged = [c for c in train.columns if c not in ("algo", "wall_s", "episode", "policy", "reset_seed", "length")
              and train[c].notna().any()]
    by_run = {key: g[logged].reset_index(drop=True) for key, g in train.groupby(["task", "algo", "seed"])}
    checked = 0
    for (task, algo, seed), (learner, rule) in rules.items():
        if rule == "last":
            continue
        ours, theirs = by_run[(task, algo, seed)], by_run[(task, learner, seed)]
        pd.testing.assert_frame_equal(ours, theirs, check_dtype=False, obj=f"{algo} vs {learner} on {task}, seed {seed}")
        checked += 1
    assert checked == sum(rule != "last" for _, rule in rules.values()) >= 200
