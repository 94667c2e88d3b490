"""Reference policies: the LP's optimal policy, run through the harness, lands on R* and the
limits (an end-to-end check of evaluation, task and optimum); references are never ranked."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from constrained_grpo.eval.scoring.leaderboard import build_leaderboard, render_markdown
from constrained_grpo.eval.scoring.loader import algo_properties, load_results
from constrained_grpo.eval.runner import EVAL_SEED, RunSpec, execute_run, task_meta
from constrained_grpo.registry import agent_spec, make_agent

TASK = "Grid/HazardFuel-v0"


@pytest.mark.parametrize("task", ["Grid/HazardFuel-v0", "Grid/HazardFuel3x3-v0"])
def test_the_optimal_policy_through_the_harness_lands_on_the_optimum(tmp_path: Path, task: str):
    meta = task_meta(task)
    n = 3000
    outcome = execute_run(RunSpec(task, "ref-optimal", 0, 1, n, {}, False), tmp_path, meta=meta)
    assert outcome.status == "done", outcome.error
    ev = pd.read_csv(next(tmp_path.rglob("eval.csv")))
    sampled = ev[ev["policy"] == "sampled"]
    assert list(sampled["reset_seed"]) == [EVAL_SEED + i for i in range(n)]
    ret = sampled["return"].to_numpy()
    half = 2.58 * ret.std() / math.sqrt(n)  # 99%: the test must not fail by chance
    assert abs(ret.mean() - meta.optimum_return) <= half, (ret.mean(), meta.optimum_return, half)
    for c in meta.constraints:
        cost = sampled[f"cost_{c.name}"].to_numpy()
        assert abs(cost.mean() - c.limit) <= 2.58 * cost.std() / math.sqrt(n) + 1e-9, (c.name, cost.mean(), c.limit)


def test_reference_policies_are_registered_with_their_capability():
    for name in ("ref-random", "ref-optimal", "ref-unconstrained"):
        spec = agent_spec(name)
        assert spec.reference and not spec.constrained
    with pytest.raises(ValueError, match="offers no 'optimal' reference policy"):
        make_agent("ref-optimal", "Highway/Highway-v0")


def test_references_are_shown_but_never_ranked(tmp_path: Path):
    meta = task_meta("Grid/HazardFuel3x3-v0")
    for algo, steps in (("ref-optimal", 1), ("ref-random", 1), ("cgrpo_toy_agent:ToyAgent", 300)):
        outcome = execute_run(RunSpec(meta.task, algo, 0, steps, 50, {}, False), tmp_path, meta=meta)
        assert outcome.status == "done", outcome.error
    res = load_results(tmp_path)
    props = algo_properties(tmp_path)
    refs = [a for a, p in props.items() if p["reference"]]
    assert sorted(refs) == ["ref-optimal", "ref-random"]
    lb = build_leaderboard(res.table, res.tasks, reps=100, references=refs)
    # The references' budgets differ from the toy's by far; that refuses nothing, since they are not compared.
    assert lb.not_ranked == {}
    assert list(lb.per_task[meta.task]["algo"]) == ["cgrpo_toy_agent:ToyAgent"]
    md = render_markdown(lb)
    assert "| ref | — | ref-optimal |" in md and "| ref | — | ref-random |" in md  # no group letter either
    # the runs' count (3), and the algorithms counted apart from the references
    assert "3 runs, 1 task(s), 1 ranked algorithm(s) and 2 reference policies." in md
    assert list(lb.overall["gridworld"]["algo"]) == ["cgrpo_toy_agent:ToyAgent"]
    assert bool(lb.runs.set_index("algo").loc["ref-optimal", "reference"])
    assert np.isfinite(lb.runs.set_index("algo").loc["ref-optimal", "score"])


# --- highway: the scripted safe driver --------------------------------------------------


@pytest.mark.slow
def test_safe_driver_crashes_far_less_than_random_on_highway():
    # Measured on reset seeds 1_000_000..1_000_019: the safe driver 0 crashes in 20 (headway
    # cost 0.078 < limit 0.1, no lane change, no speeding), random actions 20 in 20.
    n = 20
    crashes = {}
    for name in ("ref-safe-driver", "ref-random"):
        agent = make_agent(name, "Highway/Highway-v0", 0)
        res = agent.evaluate(n, deterministic=True)
        crashes[name] = int(res.costs[:, 0].sum())
        if name == "ref-safe-driver":
            assert res.costs[:, 1].max() == 0.0 and res.costs[:, 3].max() == 0.0  # never speeds, never changes lane
            assert res.costs[:, 2].mean() < 0.1 and (res.lengths == 30).all()
    assert crashes["ref-safe-driver"] <= 1 and crashes["ref-random"] >= 15, crashes


def test_safe_driver_runs_on_the_batched_highway_env():
    from constrained_grpo.envs.highway.policies import HIGHWAY_ACTIONS, make_safe_driver
    from constrained_grpo.tasks import make_vec_env

    b = 32
    env = make_vec_env("Highway/Highway-v0", b)
    try:
        driver = make_safe_driver(env)
        obs, _ = env.reset(seed=list(range(1_000_000, 1_000_000 + b)))
        crashed = np.zeros(b, dtype=bool)
        for _ in range(30):
            actions = driver(obs)
            assert actions.shape == (b,) and set(actions.tolist()) <= {HIGHWAY_ACTIONS[k] for k in ("IDLE", "FASTER", "SLOWER")}
            obs, _, term, trunc, info = env.step(actions)
            crashed |= info["costs"][:, 0] > 0
            if (term | trunc).all():
                break
        assert crashed.sum() <= 2, crashed.sum()
    finally:
        env.close()


def test_safe_driver_rule_on_hand_made_observations():
    from constrained_grpo.envs.highway.policies import HIGHWAY_ACTIONS, SafeDriver

    driver = SafeDriver()

    def obs(v: float, leader: tuple[float, float, float] | None) -> np.ndarray:
        o = np.zeros((5, 5))
        o[0] = [1, 0.5, 1 / 3, v / 80, 0]
        if leader is not None:  # (dx m, dy m, dvx m/s), relative to the ego
            o[1] = [1, leader[0] / 200, leader[1] / 12, leader[2] / 80, 0]
        return o.ravel()

    # 20 m behind at 25 m/s: gap 15 m, 0.6 s -> brake.
    assert driver(obs(25, (20, 0, 0))) == HIGHWAY_ACTIONS["SLOWER"]
    # The same car one lane over does not count; nobody ahead, slow -> accelerate to cruise.
    assert driver(obs(20, (20, 4, 0))) == HIGHWAY_ACTIONS["FASTER"]
    # 80 m ahead at 25 m/s (3 s), not closing -> keep going; closing at 2.5 s -> brake.
    assert driver(obs(25, (80, 0, 0))) == HIGHWAY_ACTIONS["IDLE"]
    assert driver(obs(25, (67.5, 0, -3))) == HIGHWAY_ACTIONS["SLOWER"]
    # Above cruise speed with a free road -> slow down (never speed).
    assert driver(obs(30, None)) == HIGHWAY_ACTIONS["SLOWER"]
    with pytest.raises(ValueError, match="reads \\(B, 25\\)"):
        driver.actions(np.zeros((2, 24)))


def test_safe_driver_refuses_tasks_it_cannot_read():
    with pytest.raises(ValueError, match="cannot run the 'safe-driver' reference.*meta-actions"):
        make_agent("ref-safe-driver", "Highway/HighwayContinuous-v0")


# --- math: the warm start ----------------------------------------------------------------


@pytest.mark.slow
def test_warm_start_reference_evaluates_with_the_harness_as_an_unupdated_grpo_agent(tmp_path: Path):
    from constrained_grpo.agents.text_agent import make_text_grpo_agent

    task, n = "Math/ChainSumLong-v0", 53
    meta = task_meta(task)
    outcome = execute_run(RunSpec(task, "ref-warmstart", 0, 1, n, {"preset": "quick"}, False), tmp_path, meta=meta)
    assert outcome.status == "done", outcome.error
    ev = pd.read_csv(next(tmp_path.rglob("eval.csv")))
    assert sorted(set(ev["policy"])) == ["deterministic", "sampled"]
    greedy = ev[ev["policy"] == "deterministic"]
    assert list(greedy["reset_seed"]) == [EVAL_SEED + i for i in range(n)]
    # Independently: a GRPO agent built with the same preset and seed, never trained.
    res = make_text_grpo_agent(task, 0, algo="grpo", preset="quick").evaluate(n, deterministic=True, seed=EVAL_SEED)
    assert np.array_equal(greedy["return"].to_numpy(), res.returns)
    assert np.array_equal(greedy["cost_length"].to_numpy(), res.costs[:, 0])
    assert algo_properties(tmp_path)["ref-warmstart"]["reference"]
    assert agent_spec("ref-warmstart").acts_on_text


def test_presets_run_each_familys_references_unranked():
    from constrained_grpo.eval.presets import PRESETS, resolve

    standard = PRESETS["standard"]
    assert standard.task_references("Grid/HazardFuel-v0") == ("ref-random", "ref-optimal", "ref-unconstrained")
    assert standard.task_references("Highway/Highway-v1") == ("ref-random", "ref-safe-driver")
    assert PRESETS["paper"].task_references("Highway/Merge-v0") == ("ref-random",)
    assert standard.task_references("Math/ChainSum-v0") == ("ref-warmstart",)
    runs = [r for r in standard.runs() if r.algo.startswith("ref-")]
    assert {(r.task, r.algo) for r in runs if r.seed == 0} == {
        *((t, a) for t in ("Grid/HazardFuel-v0", "Grid/HazardFuel3x3-v0", "Grid/HazardFuelSlip-v0", "Grid/HazardFuelMud-v0")
          for a in ("ref-random", "ref-optimal", "ref-unconstrained")),
        *((t, a) for t in ("Highway/Highway-v1", "Highway/Highway-v2") for a in ("ref-random", "ref-safe-driver")),
        ("Math/ChainSum-v0", "ref-warmstart"), ("Math/ChainSumLong-v0", "ref-warmstart"),
    }
    assert all(agent_spec(r.algo).reference for r in runs)
    # The warm start starts where the GRPO learners start: the same config as `grpo` there.
    quick_math = __import__("dataclasses").replace(standard, config={"grpo": {"preset": "quick"}})
    configs = {(r.task, r.algo): r.config for r in quick_math.runs()}
    assert configs[("Math/ChainSum-v0", "ref-warmstart")] == configs[("Math/ChainSum-v0", "grpo")] == {"preset": "quick"}
    # The quick preset runs none; an explicit --algos list runs only what it names.
    assert not any(r.algo.startswith("ref-") for r in PRESETS["quick"].runs())
    assert {r.algo for r in resolve("standard", algos=["cgrpo"]).runs()} == {"cgrpo"}
