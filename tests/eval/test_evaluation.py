"""The harness's final evaluation: batched and serial paths play the same episodes, the
episode count is planned from the limits, and a count too small to decide is refused."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sps

from constrained_grpo.constraints import Constraint
from constrained_grpo.eval.evaluation import evaluate_agent
from constrained_grpo.eval.scoring.loader import load_run
from constrained_grpo.eval.scoring.metrics import run_metrics
from constrained_grpo.eval.runner import RunSpec, execute_run, task_meta
from constrained_grpo.eval.scoring.verdict import (
    EvalSizeError,
    certifiable_minimum,
    check_eval_size,
    cost_bounds,
    plan_episodes,
)
from constrained_grpo.registry import make_agent
from constrained_grpo.sampling import categorical_from_uniform, episode_uniforms, gaussian_from_uniform


def _same(a, b) -> bool:
    return all(np.array_equal(getattr(a, f), getattr(b, f)) for f in ("returns", "costs", "lengths"))


@pytest.mark.slow
@pytest.mark.parametrize(("algo", "task", "n"), [
    ("cgrpo", "Grid/HazardFuel-v0", 120),        # linear policy on one-hot cells
    ("cgrpo", "Grid/HazardFuelCoords-v0", 100),  # an MLP
    ("ppo-lag", "Grid/HazardFuelSlip-v0", 100),  # SB3's distribution, slippery transitions
    ("saute-ppo", "Grid/HazardFuel-v0", 100),    # acts on the budgets too: both paths wrap the env
    ("ref-optimal", "Grid/HazardFuel3x3-v0", 200),
    ("ref-random", "Grid/HazardFuelMud-v0", 100),
])
def test_batched_and_serial_evaluations_play_the_same_episodes(algo: str, task: str, n: int):
    agent = make_agent(algo, task, seed=3)
    batched, pb = evaluate_agent(agent, task, n, batched=True)
    serial, ps = evaluate_agent(agent, task, n, batched=False)
    assert pb.batched and not ps.batched and pb.sampler == ps.sampler == "episode-uniforms"
    for policy in ("sampled", "deterministic"):
        assert _same(batched[policy], serial[policy]), (algo, task, policy)
    # The sampled policy does sample: a random policy's episodes are not all alike.
    assert len(np.unique(batched["sampled"].lengths)) > 1 or algo != "ref-random"


@pytest.mark.slow
def test_highway_batched_twin_plays_highway_envs_episodes():
    """The two paths themselves (the verdict's minimum count is not the point here)."""
    pytest.importorskip("highway_env")
    from constrained_grpo.eval.evaluation import EVAL_SEED, play_batched, play_serial
    from constrained_grpo.tasks import make_env, make_vec_env

    task = "Highway/Highway-v1"
    agent = make_agent("cgrpo", task, seed=0)
    seeds = list(range(EVAL_SEED, EVAL_SEED + 10))
    env = make_env(task)  # highway-env itself
    try:
        for det in (False, True):
            batched = play_batched(lambda b: make_vec_env(task, b), agent.act_batch, det, seeds, 4)
            assert _same(batched, play_serial(env, agent.act_batch, det, seeds, 4)), det
    finally:
        env.close()
    # Saute's policy reads the remaining budgets: both paths track them from the step costs.
    saute = make_agent("saute-ppo", task, seed=0)
    env = saute.wrap_eval_env(make_env(task))
    try:
        for det in (False, True):
            batched = play_batched(lambda b: saute.wrap_eval_vec_env(make_vec_env(task, b)), saute.act_batch, det,
                                   seeds, 4)
            assert _same(batched, play_serial(env, saute.act_batch, det, seeds, 4)), det
    finally:
        env.close()


def test_episode_uniforms_depend_on_the_episode_alone():
    u = episode_uniforms(np.arange(1000, 1010), 7, 3)
    assert u.shape == (10, 3)
    assert np.array_equal(u[4], episode_uniforms(1004, 7, 3)[0])  # not on the batch
    assert not np.array_equal(u[4], episode_uniforms(1004, 8, 3)[0])  # but on the step
    many = episode_uniforms(np.arange(20_000), 0, 1).ravel()
    assert 0.0 < many.min() and many.max() < 1.0
    assert sps.kstest(many, "uniform").pvalue > 1e-3


def test_inverse_transform_sampling_by_hand():
    probs = np.tile([0.2, 0.3, 0.5], (5, 1))
    # F = (0.2, 0.5, 1.0): u < 0.2 -> 0, 0.2 <= u < 0.5 -> 1, else 2.
    assert categorical_from_uniform(probs, np.array([0.1, 0.2, 0.49, 0.5, 0.999])).tolist() == [0, 1, 1, 2, 2]
    u = episode_uniforms(np.arange(30_000), 0, 1)
    freq = np.bincount(categorical_from_uniform(np.tile([0.2, 0.3, 0.5], (30_000, 1)), u), minlength=3) / 30_000
    np.testing.assert_allclose(freq, [0.2, 0.3, 0.5], atol=0.01)
    # Phi^-1(0.5) = 0, Phi^-1(0.975) = 1.95996
    np.testing.assert_allclose(gaussian_from_uniform([1.0, 1.0], [2.0, 2.0], [0.5, 0.975]), [1.0, 1.0 + 2 * 1.959964], atol=1e-5)


def test_certifiable_minimum_and_refusal():
    # 0 events in n: the exact upper bound 1 - 0.05^(1/n) is <= 0.11 first at n = 26 (0.89^25 = 0.054).
    assert certifiable_minimum(0.1) == 26 and 0.89**25 > 0.05 >= 0.89**26
    assert certifiable_minimum(0.05) == 53 and certifiable_minimum(0.2) == 13
    hazard = Constraint("hazard", 0.1, "", True)
    with pytest.raises(EvalSizeError, match="use at least 26"):
        check_eval_size(25, [hazard, Constraint("fuel", 12.0, "")], "--eval-episodes")
    check_eval_size(26, [hazard], "--eval-episodes")
    check_eval_size(2, [Constraint("fuel", 12.0, "")], "--eval-episodes")  # a t bound needs no minimum
    assert cost_bounds(np.zeros(26), 0.1, True, alpha_lower=0.05, alpha_upper=0.05)[1] <= 0.11


def test_plan_for_a_non_indicator_cost_reaches_its_power_by_simulation():
    """n = ((z_0.95 + z_power) s / (tol d))^2 certifies a cost at its limit with about the planned power."""
    fuel = Constraint("fuel", 12.0, "")
    rng = np.random.default_rng(0)
    pilot = rng.normal(12.0, 6.0, 1000)
    n = plan_episodes([fuel], power=0.95, cap=20_000, pilot_costs=[pilot])
    s = float(np.std(pilot, ddof=1))
    assert n == math.ceil(((sps.norm.ppf(0.95) * 2) * s / 1.2) ** 2)
    within = 0
    for _ in range(2000):
        x = rng.normal(12.0, 6.0, n)
        within += cost_bounds(x, 12.0, False, alpha_lower=0.05, alpha_upper=0.05)[1] <= 13.2
    assert abs(within / 2000 - 0.95) < 0.02
    # Indicator limits: the exact binomial plan; a cap short of it is the count.
    assert plan_episodes([Constraint("h", 0.1, "", True)], power=0.95, cap=20_000) == 10_175
    assert plan_episodes([Constraint("h", 0.1, "", True)], power=0.95, cap=2_000) == 2_000
    with pytest.raises(EvalSizeError, match="evaluation cap"):
        plan_episodes([Constraint("h", 0.1, "", True)], power=0.95, cap=20)


GRID_TASKS = ["Grid/Fuel-v0", "Grid/HazardFuel-v0", "Grid/HazardFuelMud-v0", "Grid/HazardFuelSlip-v0",
              "Grid/HazardFuelCumulative-v0", "Grid/HazardFuel3x3-v0", "Grid/HazardFuelCoords-v0"]


@pytest.mark.slow
@pytest.mark.parametrize("task", GRID_TASKS)
def test_the_exact_optimum_is_within_and_scores_one_at_the_planned_evaluation(tmp_path: Path, task: str):
    """Acceptance: ``ref-optimal`` through the harness at the family's plan is within its limits
    and scores 0.99-1.01 normalised (every seed evaluates the same episodes: one run says it)."""
    meta = task_meta(task)
    outcome = execute_run(RunSpec(task, "ref-optimal", 0, 1, None, {}, False), tmp_path, meta=meta)
    assert outcome.status == "done", outcome.error
    table, meta = load_run(next(tmp_path.rglob("done.json")).parent, known_algos=None)
    row = run_metrics(table, {meta.task: meta}).iloc[0]
    assert row["feasibility"] == "feasible", row.filter(like="verdict").to_dict()
    assert 0.99 <= row["score"] <= 1.01, row["score"]
    # 99% power: 6,534 episodes certify an indicator limit of 0.2 (14,790 one of 0.1); a grid with
    # fuel alone needs no more than its 1,000 pilot episodes.
    assert row["eval_episodes"] >= (6_534 if any(c.indicator for c in meta.constraints) else 1_000)


@pytest.mark.slow
def test_a_saute_run_at_the_planned_evaluation_is_batched_and_reevaluated_alike(tmp_path: Path):
    """Saute's policy acts on its remaining budgets, and the harness still plays its planned
    evaluation on the batched twin (its wrapper tracks each row's budgets); ``cgrpo eval`` of
    such a run (no --eval-episodes: the task plans the count from the run's limits) plays the
    same plan again and repeats the run's metrics."""
    from constrained_grpo.eval.replay import reevaluate

    task = "Grid/HazardFuel3x3-v0"
    small = {"n_envs": 2, "n_steps": 64, "batch_size": 64, "n_epochs": 1}
    outcome = execute_run(RunSpec(task, "saute-ppo", 0, 256, None, small, True), tmp_path, meta=task_meta(task))
    assert outcome.status == "done", outcome.error
    run = next(tmp_path.rglob("done.json")).parent
    assert json.loads((run / "done.json").read_text())["eval"]["batched"] is True
    table, meta = load_run(run, known_algos=None)
    recorded = run_metrics(table, {meta.task: meta}).iloc[0]
    again, _ = reevaluate(run)
    assert recorded["eval_episodes"] >= 6_534  # the plan for the 3x3's indicator limit (above)
    for column in ("eval_episodes", "eval_return", "greedy_return", "score", "feasibility"):
        assert again[column] == recorded[column], column


@pytest.mark.slow
@pytest.mark.parametrize("task", ["Grid/HazardFuelSlip-v0", "Grid/HazardFuelCoords-v0"])
def test_the_optimal_policys_lookup_table_equals_its_per_state_probabilities(task: str):
    from constrained_grpo.tasks import make_vec_env

    agent = make_agent("ref-optimal", task, seed=0)
    policy = agent._act
    vec = make_vec_env(task, 64)
    obs, _ = vec.reset(seed=list(range(64)))
    seen = []
    for t in range(30):  # observations along sampled episodes: every cell, flag and time the policy meets
        seen.append(obs)
        obs, *_ = vec.step(agent.act_batch(obs, False, episode_uniforms(np.arange(64), t, 1)))
    rows = np.concatenate(seen).astype(np.float64)
    # Independently, state by state: the LP's pi*(. | t, 8 cell + flags) of each observation.
    model, optimum, pos = agent.env.unwrapped.model, agent.env.unwrapped.optimum(), agent.env.unwrapped.model.pos_dim
    want = []
    for o in rows:
        if model.options.obs_mode == "onehot":
            cell = int(np.argmax(o[:pos]))
        else:
            cell = round(o[0] * (model.n_rows - 1)) * model.n_cols + round(o[1] * (model.n_cols - 1))
        flags = int(o[pos] > 0.5) | int(o[pos + 1] > 0.5) << 1 | int(o[pos + 2] > 0.5) << 2
        want.append(optimum.action_probs(round(o[pos + 3] * model.max_steps), 8 * cell + flags, True))
    np.testing.assert_array_equal(policy.probs_batch(rows), np.stack(want))
    np.testing.assert_array_equal(policy.probs(rows[5]), want[5])


def test_runs_with_different_planned_counts_are_paired_on_their_common_prefix():
    import pandas as pd

    from constrained_grpo.eval.scoring.leaderboard import comparability

    runs = pd.DataFrame({
        "task": ["T"] * 4, "algo": ["a", "a", "b", "b"], "eval_policies": ["sampled+deterministic"] * 4,
        "eval_episodes": [14_790, 17_802, 14_790, 20_000], "eval_first_seed": [1e6] * 4, "env_steps": [1000] * 4,
    })
    assert comparability(runs) == {}
    runs.loc[3, "eval_first_seed"] = 2e6
    assert "evaluation reset seeds differ" in comparability(runs)["T"][0]


# --- Sampled evaluation drawn from the seeded generators -------------------------------------


class _OwnStream:
    """Uniformly random actions from a generator of its own, seeded once at construction and
    never by the harness: its sampled evaluation depends on how often it was called before."""

    def __init__(self) -> None:
        self.rng = np.random.default_rng(0)
        self.calls = 0

    def act(self, obs: np.ndarray, deterministic: bool = True) -> int:
        self.calls += 1
        return 3 if deterministic else int(self.rng.integers(4))


class _SeededStream(_OwnStream):
    """The same policy, its generator restarted by the harness before each episode."""

    def __init__(self) -> None:
        super().__init__()
        self.seeds: list[int] = []

    def seed_evaluation(self, seed: int) -> None:
        self.seeds.append(seed)
        self.rng = np.random.default_rng(seed)


class _GlobalStream(_OwnStream):
    """Draws from numpy's global generator, which the harness seeds per episode."""

    def act(self, obs: np.ndarray, deterministic: bool = True) -> int:
        self.calls += 1
        return 3 if deterministic else int(np.random.randint(4))


class _BatchOwnStream:
    """``act_batch`` that ignores the episodes' draws and samples from its own generator."""

    def __init__(self) -> None:
        self.rng = np.random.default_rng(0)

    def act_batch(self, obs: np.ndarray, deterministic: bool, uniforms: np.ndarray) -> np.ndarray:
        return np.full(len(obs), 3) if deterministic else self.rng.integers(4, size=len(obs))


class _BatchFromDraws(_BatchOwnStream):
    """``act_batch`` that picks each action from its row of draws (inverse transform)."""

    def act_batch(self, obs: np.ndarray, deterministic: bool, uniforms: np.ndarray) -> np.ndarray:
        return np.full(len(obs), 3) if deterministic else categorical_from_uniform(np.full((len(obs), 4), 0.25), uniforms)


def _evaluate_recording(agent, n: int = 20, first_seed: int | None = None):
    import warnings

    from constrained_grpo.eval.evaluation import EVAL_SEED, UnseededEvaluationWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        results, protocol = evaluate_agent(agent, "Grid/HazardFuel3x3-v0", n,
                                           first_seed=EVAL_SEED if first_seed is None else first_seed, batched=False)
    unseeded = [w for w in caught if issubclass(w.category, UnseededEvaluationWarning)]
    return results, protocol, unseeded


@pytest.mark.parametrize(("agent", "warns", "sampler"), [
    (_OwnStream, True, "unseeded"),
    (_SeededStream, False, "episode-generator"),
    (_GlobalStream, False, "episode-generator"),
    (_BatchOwnStream, True, "unseeded"),
    (_BatchFromDraws, False, "episode-uniforms"),
])
def test_an_agent_that_ignores_the_seeded_generator_is_warned_about_once(agent, warns: bool, sampler: str):
    results, protocol, unseeded = _evaluate_recording(agent())
    assert len(unseeded) == int(warns), [str(w.message) for w in unseeded]
    assert protocol.sampler == sampler
    if warns:
        message = str(unseeded[0].message)
        assert message.startswith(agent.__name__)
        if agent is _OwnStream:
            assert "has no seed_evaluation(seed)" in message
            assert "Implement seed_evaluation(seed)" in message and "draw the sampled actions from the generator it seeds" in message
        else:
            assert "uniforms" in message
    assert len(results["sampled"].lengths) == 20


def test_seed_evaluation_is_called_per_episode_so_episodes_do_not_depend_on_their_neighbours():
    """Episode i is a function of its reset seed ``first_seed + i``: seed_evaluation gets
    ``episode_seed(first_seed + i)`` at its start, the episodes of an evaluation started five
    seeds later are the first one's from its sixth on, and a replay gives the same bytes; the
    check costs ``2 * REPLAY_STEPS`` calls of ``act`` beside them."""
    from constrained_grpo.eval.evaluation import EVAL_SEED, REPLAY_STEPS
    from constrained_grpo.sampling import episode_seed

    agent = _SeededStream()
    first, _, _ = _evaluate_recording(agent, 20)
    assert agent.calls == 2 * REPLAY_STEPS + sum(int(r.lengths.sum()) for r in first.values())
    per_episode = [episode_seed(EVAL_SEED + i) for i in range(20)]
    assert agent.seeds[-40:] == per_episode * 2  # sampled, then greedy, after the check's replays
    # A hash of the reset seed, not the seed: gymnasium seeds an env's np_random as
    # default_rng(reset_seed) does, and an agent's generator must not replay the env's draws.
    assert all(s != EVAL_SEED + i for i, s in enumerate(per_episode)) and len(set(per_episode)) == 20
    later, _, _ = _evaluate_recording(_SeededStream(), 15, first_seed=EVAL_SEED + 5)
    again, _, _ = _evaluate_recording(_SeededStream(), 20)
    sampled = first["sampled"]
    assert len(np.unique(sampled.lengths)) > 1  # it does sample
    assert np.array_equal(later["sampled"].lengths, sampled.lengths[5:])
    assert np.array_equal(later["sampled"].returns, sampled.returns[5:])
    assert _same(again["sampled"], sampled)
