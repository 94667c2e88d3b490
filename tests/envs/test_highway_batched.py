"""The batched highway simulator against highway-env itself (and the task built on it)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("highway_env")

from highway_env import utils  # noqa: E402
from highway_env.envs.highway_env import HighwayEnvFast  # noqa: E402

from constrained_grpo.envs.highway.batched import (  # noqa: E402
    DT,
    BatchedHighway,
    HighwayBatchedVectorEnv,
    draw_scene,
    polygons,
    polygons_intersecting,
)
from constrained_grpo.envs.highway.env import HighwayTaskEnv  # noqa: E402
from constrained_grpo.envs.highway.fidelity import compare_rollout, vehicle_states  # noqa: E402
from constrained_grpo.envs.highway.options import HighwayOptions  # noqa: E402
from constrained_grpo.envs.highway.vector import HighwayVectorEnv  # noqa: E402
from constrained_grpo.tasks import make_vec_env  # noqa: E402


def test_initial_scenes_are_highway_envs():
    """A seed gives highway-env's own scene: every vehicle's x, y, speed, heading, and the
    traffic's IDM exponent and MOBIL timer."""
    raw = HighwayEnvFast(config={"collision_reward": 0})
    sim = BatchedHighway(1)
    for seed in range(25):
        raw.reset(seed=seed)
        sim.reset_envs([0], [seed])
        assert np.array_equal(vehicle_states(raw), sim.states(0))
        others = raw.road.vehicles[1:]
        assert np.array_equal([v.DELTA for v in others], sim.delta[0, 1:])
        assert np.array_equal([v.timer for v in others], sim.timer[0, 1:])
        assert [v.lane_index[2] for v in raw.road.vehicles] == sim.lane[0].tolist()


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["idle", "random"])
def test_trajectories_equal_highway_env_for_ten_steps(policy):
    """Positions, speeds and headings of all 21 vehicles equal highway-env's to 1e-6 for
    the first 10 policy steps on >= 95% of seeded rollouts (here: all 20)."""
    equal = [compare_rollout(seed, policy, steps=10, tol=1e-6) for seed in range(20)]
    assert sum(e >= 10 for e in equal) >= 19, equal


@pytest.mark.slow
@pytest.mark.parametrize(
    "action_mode, comfort", [("discrete", None), ("continuous", None), ("discrete", "hard_brake")]
)
def test_observation_reward_costs_equal_the_task(action_mode, comfort):
    """Whole episodes: observation, reward, termination, truncation, the four costs and
    the ego's speed equal ``HighwayTaskEnv``'s step by step (with non-default thresholds;
    continuous actions over their whole range, so the ego also leaves the road)."""
    steps = comfort_steps = 0
    kwargs = {"action_mode": action_mode, "comfort": comfort, "speed_limit": 26.0, "headway_time": 1.5}
    for seed in (1, 2, 3):
        env = HighwayTaskEnv(**kwargs)
        obs, _ = env.reset(seed=seed)
        sim = BatchedHighway(1, HighwayOptions(**kwargs))
        sim.reset_envs([0], [seed])
        assert np.array_equal(sim.observe()[0], obs)
        rng = np.random.default_rng(seed)
        while True:
            if action_mode == "discrete":
                a: object = int(rng.integers(5))
            else:
                a = rng.uniform(-1, 1, 2).astype(np.float32)
            obs, r, term, trunc, info = env.step(a)
            o2, r2, term2, trunc2, c2 = sim.step(np.array([a]))
            steps += 1
            comfort_steps += info["costs"][3] > 0
            assert np.array_equal(o2[0], obs)
            assert r2[0] == pytest.approx(r, abs=1e-12)
            assert (term2[0], trunc2[0]) == (term, trunc)
            assert np.array_equal(c2[0], info["costs"])
            assert sim.speed[0, 0] == pytest.approx(info["speed"], abs=1e-9)
            if term or trunc:
                break
    assert steps > 30  # more than one short episode was compared
    assert comfort_steps > 0  # the comfort cost (lane change, off-road, hard braking) was exercised


def test_separating_axis_test_equals_highway_envs():
    """``polygons_intersecting`` gives highway-env's answers (intersecting, will intersect,
    translation) on pairs of cars near each other, overlapping ones included."""
    rng = np.random.default_rng(0)
    m = 400
    a = (rng.uniform(0, 1, m), rng.uniform(0, 1, m), rng.uniform(-0.3, 0.3, m), rng.uniform(15, 35, m))
    b = (a[0] + rng.uniform(-9, 9, m), a[1] + rng.uniform(-4, 4, m), rng.uniform(-0.3, 0.3, m), rng.uniform(15, 35, m))
    inter, will, trans = polygons_intersecting(a, b)
    pa, pb = polygons(a[0], a[1], a[2]), polygons(b[0], b[1], b[2])
    for i in range(m):
        da = a[3][i] * np.array([np.cos(a[2][i]), np.sin(a[2][i])]) * DT
        db = b[3][i] * np.array([np.cos(b[2][i]), np.sin(b[2][i])]) * DT
        i_ref, w_ref, t_ref = utils.are_polygons_intersecting(pa[i], pb[i], da, db)
        assert (inter[i], will[i]) == (i_ref, w_ref)
        if w_ref:
            np.testing.assert_allclose(trans[i], t_ref, rtol=0, atol=1e-12)
    assert 20 < inter.sum() < m - 20 and (will & ~inter).sum() > 5  # all three cases occur


def test_polygon_corners():
    """The corners of a car at (10, 4) heading 90 degrees: x +- 1 (its width), y +- 2.5."""
    p = polygons(np.array([10.0]), np.array([4.0]), np.array([np.pi / 2]))[0]
    np.testing.assert_allclose(p, [[11, 1.5], [9, 1.5], [9, 6.5], [11, 6.5], [11, 1.5]], atol=1e-12)


def test_scene_draw_matches_rng_choice():
    """``draw_scene`` draws lanes with ``integers(0, 3)`` where highway-env calls
    ``choice(["0"])``, ``choice(["1"])``, ``choice(3)``: the same stream."""
    from gymnasium.utils import seeding

    for seed in range(200):
        g, h = seeding.np_random(seed)[0], seeding.np_random(seed)[0]
        for _ in range(21):
            g.choice(["0"]), g.choice(["1"])
            assert g.choice(3) == h.integers(0, 3)
            assert g.uniform(21, 24) == h.uniform(21, 24)
    assert draw_scene(seeding.np_random(3)[0])["x"].shape == (21,)


@pytest.mark.slow
def test_vector_env_autoreset_follows_the_task_and_groups():
    """Copy i seeded s_i follows ``HighwayTaskEnv`` reset with s_i across episode ends
    (same-step autoreset, ``final_obs``, the ending step's costs); copies 0 and 1 share a
    seed (a GRPO group): equal while their actions are equal, apart after."""
    seeds = [4, 4, 9]
    venv = HighwayBatchedVectorEnv(num_envs=3)
    obs, _ = venv.reset(seed=seeds)
    assert np.array_equal(obs[0], obs[1]) and not np.array_equal(obs[0], obs[2])
    refs = [HighwayTaskEnv() for _ in seeds]
    ref_obs = [env.reset(seed=s)[0] for env, s in zip(refs, seeds)]
    ends = 0
    for t in range(45):
        actions = np.array([3, 3 if t < 2 else 4, 1])
        obs, r, term, trunc, info = venv.step(actions)
        for i, env in enumerate(refs):
            o, ri, te, tr, inf = env.step(int(actions[i]))
            assert (term[i], trunc[i]) == (te, tr)
            assert np.array_equal(info["costs"][i], inf["costs"])
            assert r[i] == pytest.approx(ri, abs=1e-12)
            if te or tr:
                ends += 1
                assert info["_final_obs"][i] and np.array_equal(info["final_obs"][i], o)
                o, _ = env.reset()
            ref_obs[i] = o
            assert np.array_equal(obs[i], o)
        if t == 1:
            assert np.array_equal(obs[0], obs[1])
        if t == 4 and not (term[:2] | trunc[:2]).any():
            assert not np.array_equal(obs[0], obs[1])
    assert ends >= 3


def test_make_vec_env_dispatch():
    """Highway/Highway-v0 and its continuous twin are batched; config overrides and the
    other scenarios keep the worker-process vector env."""
    for env_id in ("Highway/Highway-v0", "Highway/HighwayContinuous-v0"):
        venv = make_vec_env(env_id, 4)
        assert isinstance(venv, HighwayBatchedVectorEnv) and venv.num_envs == 4
        obs, _ = venv.reset(seed=0)
        assert obs.shape == (4, 25) and venv.single_observation_space.contains(obs[0])
        venv.close()
    other = make_vec_env("Highway/Highway-v0", 2, num_workers=0, config={"lanes_count": 4})
    assert isinstance(other, HighwayVectorEnv)
    other.close()
    merge = make_vec_env("Highway/Merge-v0", 2, num_workers=0)
    assert isinstance(merge, HighwayVectorEnv)
    merge.close()


def test_bad_input_is_rejected():
    venv = HighwayBatchedVectorEnv(num_envs=2)
    with pytest.raises(ValueError, match="num_envs"):
        HighwayBatchedVectorEnv(num_envs=0)
    with pytest.raises(ValueError, match="seeds"):
        venv.reset(seed=[1, 2, 3])
    venv.reset(seed=0)
    with pytest.raises(ValueError, match="0..4"):
        venv.step(np.array([1, 5]))
    with pytest.raises(ValueError, match="2 integers"):
        venv.step(np.array([1, 1, 1]))
    cont = HighwayBatchedVectorEnv(num_envs=2, action_mode="continuous")
    cont.reset(seed=0)
    with pytest.raises(ValueError, match="finite"):
        cont.step(np.array([[0.0, np.nan], [0.0, 0.0]]))
    with pytest.raises(ValueError, match="scenario"):
        BatchedHighway(1, HighwayOptions(scenario="merge"))
