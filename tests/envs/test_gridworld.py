"""The gridworld family: semantics, batched twin, exact optimum, errors."""

import math

import gymnasium as gym
import numpy as np
import pytest

import constrained_grpo.envs
from constrained_grpo import ConstraintError, make_env, make_vec_env
from constrained_grpo.envs.gridworld import BatchedGridWorld, GridWorldEnv, default_layout, solve_optimum
from constrained_grpo.envs.gridworld.model import GridModel, GridOptions, splitmix64, uniform_draw
from constrained_grpo.envs.gridworld.policies import route_actions, route_policy
from constrained_grpo.tasks import rollout_episodes

UP, DOWN, LEFT, RIGHT = range(4)


def test_registration_is_idempotent_and_listed():
    ids = constrained_grpo.envs.list_tasks("gridworld")
    assert "Grid/HazardFuel-v0" in ids and len(ids) == len(set(ids)) >= 6
    constrained_grpo.envs.register_tasks()  # second call: no error, no duplicates
    assert constrained_grpo.envs.list_tasks("gridworld") == ids
    k = {len(make_env(i).unwrapped.constraints) for i in ids}
    assert k == {1, 2, 3}


def test_default_layout_3x3():
    assert default_layout(3) == (".$.", ".M.", "SHG")
    with pytest.raises(ValueError, match="size must be an integer >= 3"):
        default_layout(2)


def test_step_semantics_by_hand():
    env = make_env("Grid/HazardFuel3x3-v0")
    obs, _ = env.reset(seed=0)
    assert obs.shape == (9 + 4,) and obs[6] == 1.0  # start cell (2, 0) = index 6
    obs, r, term, trunc, info = env.step(RIGHT)  # onto the hazard
    assert (r, term, trunc) == (0.0, False, False)
    np.testing.assert_array_equal(info["costs"], [1.0, 1.0])
    assert info["cost"] == 2.0 and obs[9 + 1] == 1.0  # hazard flag set
    obs, r, term, trunc, info = env.step(LEFT)  # back to start
    obs, r, term, trunc, info = env.step(RIGHT)  # hazard again: indicator fires once only
    np.testing.assert_array_equal(info["costs"], [0.0, 1.0])
    obs, r, term, trunc, info = env.step(RIGHT)  # goal
    assert r == 1.0 and term and not trunc
    assert obs[8] == 1.0 and math.isclose(obs[-1], 4 / 12, rel_tol=1e-6)


def test_gem_reward_once_and_walls_and_truncation():
    env = GridWorldEnv(layout=("S.$", "##G"), constraints=("fuel",), max_steps=5, gem_reward=0.5)
    env.reset(seed=0)
    _, r, *_ = env.step(DOWN)  # wall: stays
    assert r == 0.0
    env.step(RIGHT)
    _, r, *_ = env.step(RIGHT)  # gem
    assert r == 0.5
    env.step(LEFT)
    _, r, *_ = env.step(RIGHT)  # gem again: no reward
    assert r == 0.0
    *_, term, trunc, _ = env.step(UP)  # 6th step... the 5th: truncated
    assert trunc and not term


def test_cumulative_hazard_counts_every_event():
    env = make_env("Grid/HazardFuelCumulative-v0")
    env.reset(seed=0)
    total = np.zeros(2)
    for _ in range(7):
        *_, info = env.step(RIGHT)
        total += info["costs"]
    np.testing.assert_array_equal(total, [6.0, 7.0])  # six hazard cells, seven steps


def test_counter_rng_matches_between_python_and_numpy():
    keys = [0, 1, 2**63 + 5, 2**64 - 1]
    arr = np.array(keys, dtype=np.uint64)
    np.testing.assert_array_equal(splitmix64(arr), np.array([splitmix64(k) for k in keys], dtype=np.uint64))
    t = np.array([0, 3, 7, 100])
    np.testing.assert_array_equal(
        uniform_draw(arr, t, 2), [uniform_draw(k, int(tt), 2) for k, tt in zip(keys, t)]
    )
    # SplitMix64's published first output for seed 0 (state advanced once by the golden gamma).
    assert splitmix64(0) == 0xE220A8397B1DCDAF


def test_slip_and_hazard_probabilities():
    env = GridWorldEnv(constraints=("hazard", "fuel"), slip=0.3, hazard_prob=0.5, size=5)
    slips, hazards, visits = 0, 0, 0
    for ep in range(400):
        env.reset(seed=ep)
        *_, info = env.step(RIGHT)
        slips += info["slipped"]
        if info["cell"] == 21:  # the first hazard cell (4, 1)
            visits += 1
            hazards += info["costs"][0]
    assert abs(slips / 400 - 0.3) < 0.06
    assert abs(hazards / visits - 0.5) < 0.1


VARIANTS = [
    dict(constraints=("hazard", "fuel", "mud"), slip=0.2, hazard_prob=0.5),
    dict(constraints=("hazard", "fuel", "mud"), indicator=False, obs_mode="coords", slip=0.1),
    dict(constraints=("fuel",), size=5),
    dict(constraints=("hazard", "fuel")),
]


@pytest.mark.parametrize("kwargs", VARIANTS)
def test_batched_equals_single(kwargs):
    n = 12
    vec = BatchedGridWorld(n, **kwargs)
    singles = [GridWorldEnv(**kwargs) for _ in range(n)]
    seeds = [100 + i // 3 for i in range(n)]  # groups of 3 share a seed
    obs, _ = vec.reset(seed=seeds)
    np.testing.assert_array_equal(obs, np.stack([e.reset(seed=s)[0] for e, s in zip(singles, seeds)]))
    rng = np.random.default_rng(0)
    episodes = 0
    for _ in range(300):
        actions = rng.integers(0, 4, n)
        obs, rew, term, trunc, info = vec.step(actions)
        for i, env in enumerate(singles):
            o, r, te, tr, inf = env.step(actions[i])
            assert r == rew[i] and te == term[i] and tr == trunc[i]
            np.testing.assert_array_equal(inf["costs"], info["costs"][i])
            assert inf["cost"] == info["cost"][i]
            if te or tr:
                episodes += 1
                assert info["_final_obs"][i]
                np.testing.assert_array_equal(info["final_obs"][i], o)
                o, _ = env.reset()
            np.testing.assert_array_equal(o, obs[i])
    assert episodes > 20  # autoreset was exercised


def test_make_vec_env_uses_batched_twin_with_int_seed():
    vec = make_vec_env("Grid/HazardFuel-v0", 4)
    assert isinstance(vec.unwrapped, BatchedGridWorld)
    assert vec.metadata["autoreset_mode"] == gym.vector.AutoresetMode.SAME_STEP
    obs, _ = vec.reset(seed=7)
    assert obs.shape == (4, 68) and obs.dtype == np.float32


def test_exact_optimum_3x3_by_hand():
    # Routes from S: hazard (2 steps, R=1, hazard 1), mud (4 steps, R=1), gem (6 steps, R=1.5).
    # With limits hazard <= 0.2, fuel <= 4.4: maximise 1 + 0.5 pA subject to pC <= 0.2 and
    # 6 pA + 4 pB + 2 pC <= 4.4  =>  pA <= 0.2 + pC <= 0.4, so R* = 1.2 with both limits binding.
    # The multipliers (0.5, 0.25) make all three routes worth 0: 1.5-0.25*6 = 1-0.25*4 = 1-0.5-0.25*2.
    opt = make_env("Grid/HazardFuel3x3-v0").unwrapped.optimum()
    assert opt.constrained_return == pytest.approx(1.2, abs=1e-9)
    assert opt.unconstrained_return == pytest.approx(1.5, abs=1e-9)
    assert opt.constrained_costs == pytest.approx((0.2, 4.4), abs=1e-9)
    assert opt.multipliers == pytest.approx((0.5, 0.25), abs=1e-9)
    assert opt.binding == (True, True)
    # The unconstrained optimum (the gem route) breaks the fuel limit: the constraints bind.
    assert opt.unconstrained_costs == pytest.approx((0.0, 6.0), abs=1e-6)
    assert opt.gap(1.08) == pytest.approx(0.1)


def test_exact_optimum_single_constraint_and_loose_limits():
    # Fuel only, limit 4.4: maximise 1 + 0.5 pA s.t. 6 pA + 2 (1 - pA) <= 4.4 -> pA = 0.6, R* = 1.3.
    opt = solve_optimum(GridOptions(size=3, constraints=("fuel",), limits={"fuel": 4.4}))
    assert opt.constrained_return == pytest.approx(1.3, abs=1e-9)
    # A limit above the gem route's fuel does not bind.
    loose = solve_optimum(GridOptions(size=3, constraints=("fuel",), limits={"fuel": 7.0}))
    assert loose.constrained_return == pytest.approx(1.5) and loose.binding == (False,)


@pytest.mark.slow
def test_optimum_matches_route_policies_8x8():
    env = make_env("Grid/HazardFuel-v0")
    model = env.unwrapped.model
    assert len(route_actions(model, "short")) == 7 and len(route_actions(model, "gem")) == 21
    opt = env.unwrapped.optimum()
    gem = rollout_episodes(env, route_policy(model, "gem"), 3, seed=0)
    assert gem.returns.mean() == pytest.approx(opt.unconstrained_return)
    # 0.1 hazard route (fuel 7) + pA gem route (21) + rest mud route (9) at fuel 12: pA = 4/15.
    assert opt.constrained_return == pytest.approx(1 + 0.5 * 3.2 / 12, abs=1e-9)


def test_optimum_with_slip_is_below_deterministic():
    limits = {"hazard": 0.2, "fuel": 8.0}
    det = solve_optimum(GridOptions(size=4, constraints=("hazard", "fuel"), limits=limits))
    slip = solve_optimum(
        GridOptions(size=4, constraints=("hazard", "fuel"), slip=0.1, hazard_prob=0.5, limits=limits)
    )
    assert slip.constrained_return < det.constrained_return


# --- bad input ---------------------------------------------------------------


def test_unknown_env_id_lists_tasks():
    with pytest.raises(gym.error.UnregisteredEnv, match=r"unknown task id 'Grid/Nope-v0'.*Grid/HazardFuel-v0"):
        make_env("Grid/Nope-v0")


@pytest.mark.parametrize("limit", [-1.0, float("nan"), float("inf")])
def test_bad_limits(limit):
    with pytest.raises(ConstraintError, match="hazard"):
        make_env("Grid/HazardFuel-v0", limits={"hazard": limit})


def test_limit_for_missing_constraint_and_typo_option():
    with pytest.raises(ConstraintError, match=r"unknown constraint.*'mud'.*\['hazard', 'fuel'\]"):
        make_env("Grid/HazardFuel-v0", limits={"mud": 0.1})
    with pytest.raises(TypeError, match=r"unknown gridworld option\(s\) \['slipp'\] \(did you mean 'slip'\?\); valid options"):
        make_env("Grid/HazardFuel-v0", slipp=0.1)
    with pytest.raises(ConstraintError, match="distinct names from"):
        GridWorldEnv(constraints=("hazard", "speed"))


def test_impossible_grid():
    with pytest.raises(ValueError, match=r"impossible grid: no goal 'G' is reachable.*'S#G'"):
        GridWorldEnv(layout=("S#G",), constraints=("fuel",))
    with pytest.raises(ValueError, match="exactly one start"):
        GridWorldEnv(layout=("..G",), constraints=("fuel",))
    with pytest.raises(ValueError, match="unknown character"):
        GridWorldEnv(layout=("SxG",), constraints=("fuel",))


def test_infeasible_limits_are_explained():
    env = make_env("Grid/HazardFuel3x3-v0", limits={"fuel": 1.0})
    with pytest.raises(ConstraintError, match=r"no policy satisfies.*least achievable.*'fuel': 2.0"):
        env.unwrapped.optimum()


def test_bad_probabilities_and_actions():
    with pytest.raises(ValueError, match="slip=1.5"):
        GridWorldEnv(slip=1.5)
    env = GridWorldEnv()
    env.reset(seed=0)
    with pytest.raises(ValueError, match="not one of 0..3"):
        env.step(4)
    vec = BatchedGridWorld(2)
    vec.reset(seed=0)
    with pytest.raises(ValueError, match="0..3"):
        vec.step(np.array([0, 7]))
    with pytest.raises(ValueError, match="0..3"):
        vec.step(np.array([-1, 0]))


def test_model_tables_shape():
    m = GridModel(GridOptions(size=3))
    assert m.tables.next_state.shape == (9 * 8 * 4 * 2,) and m.tables.obs.shape == (72, 13)


def test_integer_draw_comparison_matches_float_draws():
    from constrained_grpo.envs.gridworld.model import draws_below, uniform_draw

    rng = np.random.default_rng(3)
    keys = rng.integers(0, 2**63, size=500, dtype=np.uint64)
    t = rng.integers(0, 60, size=500)
    u = np.array([uniform_draw(int(k), int(s), 2) for k, s in zip(keys, t)])
    # Thresholds at the draws themselves and one ulp either side are the edge cases.
    for p in (0.0, 0.1, 0.5, 0.999, float(u[0]), float(np.nextafter(u[1], 0.0)), float(np.nextafter(u[2], 1.0))):
        np.testing.assert_array_equal(draws_below(keys, t, 2, p), u < p)
    with pytest.raises(ValueError, match="p < 1"):
        draws_below(keys, t, 2, 1.0)


def test_possible_episodes_of_the_3x3_map_by_hand():
    """The 3x3 map (top row . $ ., middle . M ., bottom S H G; horizon 12, goal 1, gem 0.5,
    no step penalty): the goal is 2 steps away through the hazard, 4 around it through the
    mud, 6 avoiding both (over the gem, 3 + 3 steps); an episode that misses the goal runs
    to the horizon."""
    env = make_env("Grid/HazardFuel3x3-v0").unwrapped
    cases = [  # (return, length, hazard, fuel, possible)
        (1.0, 2, 1, 2, True),    # the short route, through the hazard
        (1.0, 2, 0, 2, False),   # ... which cannot avoid it
        (1.0, 4, 0, 4, True),    # around the hazard, through the mud
        (1.5, 6, 0, 6, True),    # over the gem
        (1.5, 5, 0, 5, False),   # the gem and the goal take 6 steps
        (0.0, 12, 0, 12, True),  # lost until the horizon
        (0.0, 10, 0, 10, False), # no goal, yet ended before the horizon
        (0.5, 12, 1, 12, True),  # the gem, then lost
        (1.4, 6, 0, 6, False),   # no sum of 1 and 0.5
        (1.5, 0, 0, 0, False),   # the issue's: the best return with no fuel
        (1.0, 4, 2, 4, False),   # an indicator is 0 or 1
        (1.0, 4, 0, 5, False),   # fuel is the length
    ]
    r, t, h, f, want = (np.array(col) for col in zip(*cases))
    got = env.possible_episodes(r.astype(float), t.astype(float), {"hazard": h.astype(float), "fuel": f.astype(float)})
    assert got.tolist() == want.tolist()
    # Without lengths the fuel gives them; without either only the costs are checked.
    assert env.possible_episodes(np.array([1.5]), None, {"fuel": np.array([6.0])}).tolist() == [True]
    assert env.possible_episodes(np.array([1.5]), np.array([np.nan]), {"hazard": np.array([0.0])}).tolist() == [True]
    assert "at least 2 steps" in env.episode_rule() and "horizon of 12" in env.episode_rule()
