"""Ranking as pure functions (eval/scoring/ranking.py): the Welch-t permutation test against a
brute-force count, Holm, positions, rank intervals and letters by hand, erratic against steady
algorithms, and the family-wise error rate and power at 25 algorithms x 10 seeds by simulation."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats as sps

from constrained_grpo.eval.scoring import ranking


def _brute_force_p(x: np.ndarray, y: np.ndarray) -> float:
    """Every relabelling of the pooled runs, Welch's t from scipy."""
    z, n = np.concatenate([x, y]), len(x)
    t = abs(sps.ttest_ind(x, y, equal_var=False).statistic)
    count = total = 0
    for pick in itertools.combinations(range(len(z)), n):
        mask = np.zeros(len(z), bool)
        mask[list(pick)] = True
        total += 1
        count += abs(sps.ttest_ind(z[mask], z[~mask], equal_var=False).statistic) >= t * (1 - 1e-9)
    return count / total


@pytest.mark.parametrize("n, m", [(4, 4), (5, 3), (6, 6)])
def test_welch_permutation_p_matches_a_brute_force_count(n: int, m: int) -> None:
    rng = np.random.default_rng(n * 10 + m)
    for _ in range(3):
        x, y = rng.normal(0.0, 1.0, n) + 0.8, rng.normal(0.0, 3.0, m)
        assert ranking.welch_p_values([(x, y)])[0] == pytest.approx(_brute_force_p(x, y), abs=1e-12)


def test_welch_p_by_hand() -> None:
    # Constant samples apart: t = inf, reached only by the split itself and its mirror.
    assert ranking.welch_p_values([(np.ones(5), np.zeros(5))])[0] == 2 / 252
    assert ranking.welch_p_values([(np.ones(10), np.zeros(10))])[0] == 2 / 184_756
    # Identical samples: every relabelling ties t = 0.
    assert ranking.welch_p_values([(np.full(5, 0.3), np.full(5, 0.3))])[0] == 1.0


def test_p_does_not_depend_on_summation_order_or_shift() -> None:
    rng = np.random.default_rng(1)
    x, y = rng.normal(0.3, 0.2, 10), rng.normal(0.1, 0.05, 10)
    p = ranking.welch_p_values([(x, y)])[0]
    assert ranking.welch_p_values([(x[::-1], y[::-1])])[0] == p
    assert ranking.welch_p_values([(y, x)])[0] == p


def test_holm_by_hand() -> None:
    # Sorted 0.01, 0.03, 0.04 with multipliers 3, 2, 1: 0.03, max(0.03, 0.06), max(0.06, 0.04).
    assert ranking.holm([0.01, 0.04, 0.03]).tolist() == pytest.approx([0.03, 0.06, 0.06])


def test_positions_intervals_and_letters_by_hand() -> None:
    # Means 0.9 > 0.5 = 0.5 > 0.1; a separated above c and d, b above d.
    assert ranking.positions([0.9, 0.5, 0.5, 0.1]).tolist() == [1, 2, 2, 4]
    s = np.zeros((4, 4), bool)
    s[0, 2] = s[0, 3] = s[1, 3] = True
    lo, hi = ranking.rank_intervals(s)
    assert lo.tolist() == [1, 1, 2, 3] and hi.tolist() == [2, 3, 4, 4]
    assert ranking.compact_letters(s) == ["a", "ab", "bc", "c"]


def _check_letters(letters: list[str], separated: np.ndarray) -> None:
    split = [set(x.split(",")) if "," in x else set(x) for x in letters]
    for i, j in itertools.combinations(range(len(letters)), 2):
        apart = bool(separated[i, j] or separated[j, i])
        assert bool(split[i] & split[j]) == (not apart), (i, j, letters)


def test_letters_encode_exactly_the_separated_pairs_on_random_patterns() -> None:
    rng = np.random.default_rng(5)
    for k in (3, 6, 12, 25):
        for _ in range(20):
            # Separations consistent with an order (i above j only for i < j), as the tests give.
            s = np.triu(rng.random((k, k)) < rng.random(), 1)
            _check_letters(ranking.compact_letters(s), s)


def test_rank_orders_by_mean_and_ties_share_a_position() -> None:
    r = ranking.rank({"b": np.full(6, 0.5), "a": np.full(6, 0.5), "c": np.full(6, 0.9), "d": np.zeros(6)})
    assert r.algos == ("c", "a", "b", "d")
    assert r.position.tolist() == [1, 2, 2, 4]
    # Constant samples apart are separated (p = 2/924 each; Holm over 6 pairs); a and b tie.
    assert not r.separated[1, 2] and not r.separated[2, 1]
    assert r.lower.tolist() == [1, 2, 2, 4] and r.upper.tolist() == [1, 3, 3, 4]
    assert r.letters == ("a", "b", "b", "c")


def test_runs_by_algorithms_array_and_missing_runs() -> None:
    s = np.array([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0], [1.0, 0.0], [1.0, 0.0], [1.0, np.nan]])
    r = ranking.rank(s, ["x", "y"])
    # Six ones against five zeros: of the C(11, 6) = 462 splits only the observed one keeps
    # both samples constant (its mirror would give x five runs).
    assert r.algos == ("x", "y") and r.p[0, 1] == pytest.approx(1 / 462)
    with pytest.raises(ValueError, match="one name per column"):
        ranking.rank(s, ["x"])


def test_pairs_closer_than_the_evaluation_resolution_are_never_separated() -> None:
    # Every seed of a at 0.1000, of b at 0.1003: exact test p = 2/184,756, but a run's
    # evaluation resolves 0.001 at best, so they are not called different.
    a, b = np.full(10, 0.1000), np.full(10, 0.1003)
    assert ranking.rank({"a": a, "b": b}).separated.any()
    r = ranking.rank({"a": a, "b": b}, resolution=0.001)
    assert not r.separated.any() and r.letters == ("a", "a") and r.lower.tolist() == [1, 1]
    assert r.upper.tolist() == [2, 2]


def test_too_few_seeds_are_not_tested() -> None:
    r = ranking.rank({"a": np.ones(4), "b": np.zeros(4)})
    assert np.isnan(r.p[0, 1]) and not r.separated.any() and r.pairs() == []


@pytest.mark.slow
def test_an_erratic_algorithm_with_lower_mean_is_never_ranked_above_a_steady_one() -> None:
    """Erratic: each seed -0.5 or 1.0 with probability 1/2 (mean 0.25); steady: N(0.5, 0.02).
    In 300 draws of 10 seeds each the erratic one is never separated above the steady one
    (at 5% a valid test does so in at most 2.5% of draws, though its sample mean is the higher
    in 19% of them), and where its sample mean is higher its rank interval spans both places."""
    rng = np.random.default_rng(11)
    draws = 300
    erratic = np.where(rng.random((draws, 10)) < 0.5, -0.5, 1.0)
    steady = rng.normal(0.5, 0.02, (draws, 10))
    p = ranking.welch_p_values(list(zip(erratic, steady)))
    above = (p <= 0.05) & (erratic.mean(axis=1) > steady.mean(axis=1))
    assert above.mean() <= 0.025, above.mean()
    # The other way round the test has the power of a t-test for a third of a standard
    # deviation at 10 seeds each (about 0.2): not vacuous.
    below = (p <= 0.05) & (erratic.mean(axis=1) < steady.mean(axis=1))
    assert below.mean() >= 0.1, below.mean()
    i = int(np.argmax(erratic.mean(axis=1)))
    r = ranking.rank({"erratic": erratic[i], "steady": steady[i]})
    assert r.algos[0] == "erratic" and r.lower.tolist() == [1, 1] and r.upper.tolist() == [2, 2]


def test_an_erratic_algorithm_gets_a_wide_interval_among_steady_ones() -> None:
    rng = np.random.default_rng(2)
    samples = {f"s{i}": rng.normal(0.5 + 0.1 * i, 0.01, 10) for i in range(5)}
    samples["erratic"] = rng.normal(0.6, 1.0, 10)
    r = ranking.rank(samples)
    j = r.algos.index("erratic")
    assert r.lower[j] == 1 and r.upper[j] == 6
    # The steady ones are separated from each other: their intervals are points.
    steady = [i for i, a in enumerate(r.algos) if a != "erratic"]
    assert all(r.upper[i] - r.lower[i] <= 1 for i in steady)
    _check_letters(list(r.letters), r.separated)


@pytest.mark.slow
def test_family_wise_error_and_power_at_25_algorithms_and_10_seeds() -> None:
    """25 algorithms x 10 seeds (eval/studies/rank_rule.py; results/rank_rule/rank_rule.csv has
    the larger run). Null: equal means, normal scores with spreads from 0.1 to 2.0 (the
    conservative t-test's model) and one skewed distribution for all (the permutation test's):
    no false separation on 3 boards of each, where the permutation test alone separates the
    planted pair below. Power: means 0.5 sd apart (sd 1): pairs 1 sd apart are seldom
    separated, 2.5 sd apart about two times in three (0.65 in the larger run), 4 sd apart
    always; the intervals cover the true ranks."""
    from constrained_grpo.eval.studies.rank_rule import null_board, power_board

    rng = np.random.default_rng(2024)
    names = [f"a{i:02d}" for i in range(25)]
    for kind in ("normal", "same-skewed"):
        for b in range(3):
            r = ranking.rank(null_board(kind, rng), names)
            assert not r.separated.any(), (kind, b)
            assert r.lower.tolist() == [1] * 25 and r.upper.tolist() == [25] * 25
    gaps: dict[int, list[bool]] = {}
    for b in range(2):
        r = ranking.rank(power_board(rng), names)
        true_rank = {a: 25 - i for i, a in enumerate(names)}
        assert all(lo <= true_rank[a] <= hi for a, lo, hi in zip(r.algos, r.lower, r.upper))
        for i, j in itertools.combinations(range(25), 2):
            gap = abs(names.index(r.algos[i]) - names.index(r.algos[j]))
            gaps.setdefault(gap, []).append(bool(r.separated[i, j] or r.separated[j, i]))
    assert np.mean(gaps[2]) <= 0.1, np.mean(gaps[2])
    assert 0.4 <= np.mean(gaps[5]) <= 0.85, np.mean(gaps[5])
    assert np.mean(gaps[8]) >= 0.97, np.mean(gaps[8])


def test_a_steady_algorithm_is_not_separated_from_a_wide_one_by_one_sided_runs() -> None:
    """Equal means 0, a steady algorithm (sd 0.1) and a normal one 20 times wider whose ten
    runs all fell above 0 (probability 2^-10): the permutation p is 2/C(20, 10), below Holm's
    first threshold for 300 pairs, but the conservative t-test's is not, so the pair is not
    separated, as its equal means require."""
    steady = np.array([0.05, -0.12, 0.08, 0.01, -0.03, 0.15, -0.07, 0.02, -0.1, 0.04])
    wide = np.array([0.4, 2.1, 1.3, 0.2, 3.0, 0.9, 1.7, 0.6, 2.5, 1.1])
    r = ranking.rank({"steady": steady, "wide": wide})
    i, j = r.algos.index("wide"), r.algos.index("steady")
    assert r.p_permutation[i, j] == pytest.approx(2 / math.comb(20, 10)) and r.p_permutation[i, j] < 0.05 / 300
    # t = 1.377 / sqrt(0.930²/10 + 0.086²/10) = 4.67 on 9 df: p = 1.2e-3.
    t = (wide.mean() - steady.mean()) / math.sqrt(wide.var(ddof=1) / 10 + steady.var(ddof=1) / 10)
    assert r.p_t[i, j] == pytest.approx(2 * sps.t.sf(t, 9)) and 1e-4 < r.p_t[i, j] < 1e-2
    assert r.p[i, j] == r.p_t[i, j]
    # Alone (Holm over one pair at 0.05) it is separated; among 300 pairs (1.7e-4 first) it is not.
    assert r.separated[i, j]
    assert r.p[i, j] * 300 > 0.05


def test_more_seeds_than_can_be_enumerated_are_drawn_with_stable_decisions() -> None:
    # 12 seeds each: C(24, 12) = 2,704,156 relabellings, more than EXACT_LIMIT: Monte Carlo.
    rng = np.random.default_rng(9)
    samples = {"a": rng.normal(1.0, 0.3, 12), "b": rng.normal(0.0, 0.3, 12), "c": rng.normal(0.05, 0.3, 12)}
    r = ranking.rank(samples)
    assert r.algos[0] == "a" and r.lower.tolist()[0] == 1 and r.upper.tolist()[0] == 1
    assert r.p[0, 1] < 1e-3 and not r.separated[1, 2] and not r.separated[2, 1]
    # The stratified test on one stratum is the same test: a different generator seed moves p
    # by Monte Carlo error only, and no decision.
    pairs = [([samples["a"]], [samples["b"]]), ([samples["b"]], [samples["c"]])]
    p0 = ranking.stratified_welch_p_values(pairs, seed=0)
    p1 = ranking.stratified_welch_p_values(pairs, seed=1)
    assert ((ranking.holm(p0) <= 0.05) == (ranking.holm(p1) <= 0.05)).all()
    assert abs(p0[1] - p1[1]) < 0.02


def test_suite_decisions_do_not_depend_on_the_generator_seed() -> None:
    """Four tasks of 10 seeds: labels permuted within each task by Monte Carlo. Pairs near a
    Holm threshold get more draws until their decision is settled, so two generator seeds
    decide every pair alike; a constant difference on every task is separated, a null pair not."""
    rng = np.random.default_rng(12)
    algos = {a: [rng.normal(m, 0.3, 10) for _ in range(4)] for a, m in (("a", 0.0), ("b", 0.0), ("c", 0.6), ("d", 2.0))}
    names = sorted(algos)
    pairs = [(x, y) for i, x in enumerate(names) for y in names[i + 1:]]
    data = [(algos[x], algos[y]) for x, y in pairs]
    decided = [ranking.holm(ranking.stratified_welch_p_values(data, seed=s)) <= 0.05 for s in (0, 1)]
    assert (decided[0] == decided[1]).all()
    got = dict(zip(pairs, decided[0]))
    assert not got[("a", "b")] and got[("a", "d")] and got[("b", "d")] and got[("c", "d")]


def test_the_rank_rule_study_writes_one_row_per_scenario_and_distance(tmp_path, capsys) -> None:
    """The study behind docs/benchmark.md's error and power table: one null row per scenario
    (count of boards with a false separation, with its exact interval), a coverage row, and one
    power row per distance; bad input refused in one line before any work."""
    from constrained_grpo.eval.studies import rank_rule

    df = rank_rule.simulate(1, scenarios=("normal",))
    assert list(df["kind"]) == ["null", "coverage"] + ["power"] * 24
    assert df.loc[0, "of"] == 1 and df.loc[0, "count"] in (0, 1)
    assert list(df.loc[df["kind"] == "power", "distance_sd"]) == [0.5 * g for g in range(1, 25)]
    assert (df["lo"] <= df["share"]).all() and (df["share"] <= df["hi"]).all()
    with pytest.raises(SystemExit):
        rank_rule.main(["--boards", "0", "--out", str(tmp_path / "x")])
    assert "--boards 0: give at least 1 board" in capsys.readouterr().err and not (tmp_path / "x").exists()
    with pytest.raises(ValueError, match="scenario 'cauchy'"):
        rank_rule.null_board("cauchy", np.random.default_rng(0))


def test_stratified_t_p_by_hand() -> None:
    """The suite's conservative t: the pooled mean difference over its standard error, on
    Student's t with the smallest min(n_t, m_t) - 1 over the strata (here 4 - 1 = 3)."""
    xs = [np.array([1.0, 2.0, 4.0, 3.5, 2.5]), np.array([0.5, 0.9, 1.4, 1.1])]
    ys = [np.array([0.2, 0.4, 0.1, 0.9, 0.3]), np.array([0.0, 0.3, -0.2, 0.1, 0.4])]
    nx, ny = 9, 10
    diff = sum(x.sum() for x in xs) / nx - sum(y.sum() for y in ys) / ny
    var = sum(len(x) * x.var(ddof=1) for x in xs) / nx**2 + sum(len(y) * y.var(ddof=1) for y in ys) / ny**2
    expected = 2 * sps.t.sf(abs(diff) / math.sqrt(var), 3)
    # The sums are taken on the integer grid (about 2^-22 of the largest value): p to 1e-6.
    assert ranking.stratified_t_p_values([(xs, ys)])[0] == pytest.approx(expected, rel=1e-6)
    # One stratum is Welch's t on min(n, m) - 1 degrees of freedom.
    assert ranking.stratified_t_p_values([([xs[0]], [ys[1]])])[0] == pytest.approx(
        ranking.welch_t_p_values([(xs[0], ys[1])])[0], rel=1e-12)
