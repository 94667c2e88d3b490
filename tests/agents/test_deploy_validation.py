"""best-feasible's held-out validation: the screen's shortlist played on fresh episodes, each
cost bounded exactly and simultaneously, so that the deployed policy's recorded bound is honest."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from scipy import stats

from constrained_grpo.agents.agent import GRPOAgent, load_agent
from constrained_grpo.deploy import (
    MAX_VALIDATION_EPISODES,
    VALIDATION_SEED,
    FinalPolicyKeeper,
    validation_bounds,
    validation_seeds,
    validation_size,
)
from constrained_grpo.eval.evaluation import EVAL_SEED, evaluate_agent
from constrained_grpo.tasks import known_task_ids, task_info

TASK = "Grid/HazardFuel3x3-v0"
LIMITS = np.array([0.1, 12.0])  # an indicator (a violation rate) and a step count
INDICATORS = [True, False]
V = 400


def _p(v: float) -> list[torch.Tensor]:
    return [torch.tensor([v])]


def _episodes(events: int, fuel: np.ndarray, ret: float) -> tuple[np.ndarray, np.ndarray]:
    """V validation episodes: ``events`` of them with a hazard event, fuel ``fuel`` (tiled)."""
    hazard = np.zeros(V)
    hazard[:events] = 1.0
    return np.full(V, ret), np.column_stack([hazard, np.resize(fuel, V)])


def _keeper(outcomes: dict[float, tuple[np.ndarray, np.ndarray]], seen: list) -> tuple[FinalPolicyKeeper, callable]:
    keeper = FinalPolicyKeeper("best-feasible", LIMITS, shortlist=3, validation_episodes=V, indicators=INDICATORS)

    def play(params, seeds):
        seen.append((None if params is None else float(params[0][0]), np.asarray(seeds).copy()))
        return outcomes[None if params is None else float(params[0][0])]

    return keeper, play


def _observe_three(keeper: FinalPolicyKeeper) -> None:
    """Three batches pass the screen; A's 16 starts all saw no hazard (a zero-variance bound of 0)
    and it has the top batch return; a fourth, over the fuel limit, fails the screen."""
    calm = np.tile([0.0, 10.0], (16, 1))
    keeper.observe(_p(1.0), 0, 10, batch_return=0.7, group_costs=calm + [0.05, 0.0], iteration=1)  # B
    keeper.observe(_p(2.0), 10, 20, batch_return=0.5, group_costs=calm + [0.05, 1.0], iteration=2)  # C
    keeper.observe(_p(3.0), 20, 30, batch_return=0.9, group_costs=calm, iteration=3)  # A: lucky batch
    keeper.observe(_p(4.0), 30, 40, batch_return=2.0, group_costs=calm + [0.0, 3.0], iteration=4)  # fuel 13 > 12


def test_validation_rejects_the_lucky_top_candidate_for_a_truly_feasible_one():
    """A's batch saw no hazard (screen bound 0) but A's true rate is 0.15: 60 events in 400
    validation episodes. B (12 events, fuel 9/12) and C (4 events, fuel 11.5) are feasible.
    Level 0.05 / ((3 + 1) 2) = 0.00625 (three candidates and the last iterate, two costs):
    A's hazard bound Beta^{-1}(0.99375; 61, 340) = 0.1998 > 0.1 (rejected); B's
    Beta^{-1}(0.99375; 13, 388) = 0.058446 and 10.5 + t_{399, 0.99375} 1.501879 / 20 = 10.68842
    (t = 2.509082); C's 0.030381 and 11.5 + 2.509082 * max(0, 12 / 20) / 20 = 11.57527 (no
    spread: the sd floored at d / sqrt(V)). B has the higher validation return and is deployed."""
    outcomes = {3.0: _episodes(60, np.array([9.0]), 1.5), 1.0: _episodes(12, np.array([9.0, 12.0]), 1.0),
                2.0: _episodes(4, np.array([11.5]), 0.8)}
    seen: list = []
    keeper, play = _keeper(outcomes, seen)
    _observe_three(keeper)
    assert keeper.best_iteration == 3  # the screen alone deploys the lucky batch
    assert [r["iteration"] for _, r in keeper.shortlist] == [3, 1, 2]
    keeper.finish(play)
    assert [float(p[0]) for p in keeper.deployed()] == [1.0] and keeper.best_iteration == 1
    v = keeper.state()["validation"]
    assert v["deployed"] == 1 and v["level"] == pytest.approx(0.00625)
    assert v["episodes"] == V and v["first_seed"] == VALIDATION_SEED and v["last_seed"] == VALIDATION_SEED + V - 1
    a, b, c = v["candidates"]
    assert a["iteration"] == 3 and not a["within"] and a["cost_bound"][0] == pytest.approx(0.199781, abs=1e-6)
    assert b["cost_bound"] == pytest.approx([0.058446, 10.688417], abs=1e-6) and b["within"]
    assert c["cost_bound"] == pytest.approx([0.030381, 11.575272], abs=1e-6) and c["within"]
    assert v["cost_bound"] == b["cost_bound"] and v["cost_mean"] == [0.03, 10.5] and v["return_mean"] == 1.0
    # Every candidate played the same held-out episodes; the last iterate was not needed.
    assert [s for s, _ in seen] == [3.0, 1.0, 2.0]
    assert all(np.array_equal(seeds, validation_seeds(V)) for _, seeds in seen)


def test_the_highest_validation_return_is_deployed_not_the_highest_batch_return():
    outcomes = {3.0: _episodes(60, np.array([9.0]), 1.5), 1.0: _episodes(12, np.array([10.0, 11.0]), 0.6),
                2.0: _episodes(4, np.array([11.5]), 0.8)}
    keeper, play = _keeper(outcomes, [])
    _observe_three(keeper)
    keeper.finish(play)
    assert keeper.state()["validation"]["deployed"] == 2 and [float(p[0]) for p in keeper.deployed()] == [2.0]
    assert keeper.state()["best_iteration"] == 2 and keeper.state()["cost_bound"] == [0.05, 11.0]  # its screen's numbers


def test_where_no_candidate_is_shown_feasible_the_last_iterate_is_deployed_and_validated():
    over = _episodes(60, np.array([9.0]), 1.5)
    outcomes = {3.0: over, 1.0: over, 2.0: over, None: _episodes(0, np.array([11.0]), 0.2)}
    seen: list = []
    keeper, play = _keeper(outcomes, seen)
    _observe_three(keeper)
    keeper.finish(play)
    state = keeper.state()
    assert keeper.deployed() == [] and state["kept"] == 0 and state["best_iteration"] is None
    v = state["validation"]
    assert v["deployed"] == "last" and seen[-1][0] is None
    # No event in 400 at 0.00625: 1 - 0.00625^(1/400) = 0.012619 (Clopper-Pearson at x = 0).
    assert v["cost_bound"][0] == pytest.approx(1 - 0.00625 ** (1 / V), abs=1e-6) and v["last"]["cost_mean"] == [0.0, 11.0]


def test_the_indicator_bound_is_clopper_pearson_at_the_bonferroni_level():
    """12 events of 400 at level a = 0.05 / (5 * 2) (a shortlist of 4 and the last iterate, two
    costs): U solves P(Binomial(400, U) <= 12) = a, the exact binomial tail."""
    a = 0.05 / (5 * 2)
    costs = np.column_stack([np.r_[np.ones(12), np.zeros(V - 12)], np.full(V, 3.0)])
    u = validation_bounds(costs, LIMITS, INDICATORS, a)
    assert u[0] == pytest.approx(stats.beta.ppf(1 - a, 13, 388), abs=1e-12)
    assert stats.binom.cdf(12, V, u[0]) == pytest.approx(a, rel=1e-6)
    assert u[1] == pytest.approx(3.0 + stats.t.ppf(1 - a, V - 1) * 12.0 / np.sqrt(V) / np.sqrt(V))
    # The same 0/1 costs on a cost that is not an indicator get Student's t instead.
    t = validation_bounds(costs, LIMITS, [False, False], a)[0]
    assert t == pytest.approx(0.03 + stats.t.ppf(1 - a, V - 1) * costs[:, 0].std(ddof=1) / np.sqrt(V))


def test_validation_seeds_are_disjoint_from_every_evaluation_and_from_training():
    """The harness plays episode i from EVAL_SEED + i (public) or a private first seed p + i
    with p < 2^63 - 10^6 (eval.maintainer), i below the plan's cap; GRPO's group seeds are
    below 2^31. The validation's seeds lie above all of them and below 2^63."""
    caps = {t: task_info(t).family.eval.cap for t in known_task_ids()}
    assert max(caps.values()) <= 20_000
    top = validation_seeds(MAX_VALIDATION_EPISODES)
    assert top[0] == VALIDATION_SEED and int(top[-1]) < 2**63 - 1
    for task, cap in caps.items():
        public_last = EVAL_SEED + cap - 1
        private_last = (2**63 - 10**6 - 1) + cap - 1
        assert public_last < VALIDATION_SEED and private_last < VALIDATION_SEED, task
    assert 2**31 < VALIDATION_SEED


def test_the_default_validation_size_is_a_share_of_the_training():
    """ceil(E / 200) for E episodes trained, within [200, 5000]."""
    assert [validation_size(e) for e in (0, 40_000, 40_001, 180_000, 10**6, 10**7)] == [200, 200, 201, 900, 5000, 5000]
    keeper = FinalPolicyKeeper("best-feasible", LIMITS, shortlist=3, validation_episodes=None, indicators=INDICATORS)
    seen: list = []
    for it in range(300):  # 300 batches of 16 starts x 64 episodes: 307,200 episodes, 1536 per candidate
        keeper.observe(_p(float(it)), 0, 1, 0.0, np.zeros((16, 2)), it + 1, episodes=1024)
    keeper.finish(lambda params, seeds: seen.append(len(seeds)) or (np.zeros(len(seeds)), np.zeros((len(seeds), 2))))
    assert keeper.episodes_seen == 307_200 and seen == [1536] * 3 and keeper.state()["validation"]["episodes"] == 1536


def test_bad_options_are_refused_in_one_line():
    with pytest.raises(ValueError, match=r"deploy_shortlist=0 must be an integer >= 1"):
        GRPOAgent(TASK, preset="quick", deploy="best-feasible", deploy_shortlist=0)
    with pytest.raises(ValueError, match=r"deploy_validation_episodes=1 must be null \(sized by the training\), 0 \(no validation\) or an integer"):
        GRPOAgent(TASK, preset="quick", deploy="best-feasible", deploy_validation_episodes=1)
    with pytest.raises(ValueError, match=r"deploy_validation_episodes=200000"):
        GRPOAgent(TASK, preset="quick", deploy_validation_episodes=200_000)


def test_validation_does_not_perturb_training():
    """The last iterate, the multipliers and the log are the same with and without validation,
    over two learn calls (validation runs at the end of each): it draws from no training stream."""
    runs = {}
    for name, options in {"last": {}, "screen": {"deploy": "best-feasible", "deploy_validation_episodes": 0},
                          "validated": {"deploy": "best-feasible"}}.items():
        agent = GRPOAgent(TASK, seed=5, preset="quick", **options)
        log: list = []
        agent.learn(60_000, log.append).learn(60_000, log.append)
        runs[name] = (agent, log)
    base, base_log = runs["last"]
    for name in ("screen", "validated"):
        agent, log = runs[name]
        assert [(r["ep_return"], r["ep_cost"]) for r in log] == [(r["ep_return"], r["ep_cost"]) for r in base_log], name
        for p, q in zip(base.policy.parameters(), agent.policy.parameters(), strict=True):
            assert torch.equal(p, q), name
        assert np.array_equal(base.multipliers, agent.multipliers)
    assert runs["screen"][0].deployment.get("validation") is None and "validation" in runs["validated"][0].deployment


@pytest.fixture(scope="module")
def trained() -> GRPOAgent:
    return GRPOAgent(TASK, seed=5, preset="quick", deploy="best-feasible").learn(300_000)


def test_a_trained_agent_records_its_validation_and_it_is_the_harness_sampled_evaluation(trained: GRPOAgent, tmp_path):
    """The recorded validation of the deployed policy is what the harness's sampled evaluation
    measures on the validation seeds, episode for episode."""
    dep = trained.deployment
    v = dep["validation"]
    print(json.dumps({k: v[k] for k in v if k != "candidates"}))
    # One validation episode per 200 trained: 1043 iterations of 8 x 8 episodes give 334.
    assert dep["episodes_seen"] == trained.trainer.iteration * trained.config.num_samples == 66_752
    assert v["episodes"] == validation_size(66_752) == 334 and len(v["candidates"]) == len(dep["shortlist"]) <= 5
    assert v["level"] == pytest.approx(0.05 / ((len(v["candidates"]) + 1) * 2))
    chosen = v if v["deployed"] == "last" else next(c for c in v["candidates"] if c["iteration"] == v["deployed"])
    assert v["cost_bound"] == chosen["cost_bound"]
    if v["deployed"] != "last":
        assert all(u <= d for u, d in zip(v["cost_bound"], trained.trainer.final.limits))
    results, _ = evaluate_agent(trained, TASK, episodes=v["episodes"], first_seed=VALIDATION_SEED)
    sampled = results["sampled"]
    assert v["cost_mean"] == pytest.approx(sampled.costs.mean(axis=0).tolist(), abs=1e-6)
    assert v["return_mean"] == pytest.approx(float(sampled.returns.mean()), abs=1e-6)
    # Saved and loaded: the deployment, the shortlist and its snapshots come back.
    again = load_agent(trained.save(tmp_path / "agent"))
    assert again.deployment == dep
    for (p, _), (q, _) in zip(trained.trainer.final.shortlist, again.trainer.final.shortlist, strict=True):
        assert all(torch.equal(a, b) for a, b in zip(p, q, strict=True))
