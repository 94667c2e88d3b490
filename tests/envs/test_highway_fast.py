"""The fast paths return what highway-env returns, on seeded rollouts of every scenario:
lane coordinates, closest lanes, neighbour search, close objects and the kinematics
observation; and the wrapped task follows raw highway-env's trajectories exactly."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("highway_env", reason='highway-env is not installed (pip install -e ".[highway]")')

import gymnasium as gym  # noqa: E402
from highway_env.envs.common.observation import KinematicObservation  # noqa: E402
from highway_env.road.lane import StraightLane  # noqa: E402
from highway_env.road.regulation import RegulatedRoad  # noqa: E402
from highway_env.road.road import Road, RoadNetwork  # noqa: E402
from highway_env.vehicle.behavior import IDMVehicle  # noqa: E402

from constrained_grpo.envs.highway.env import HighwayTaskEnv  # noqa: E402
from constrained_grpo.envs.highway.fast import (  # noqa: E402
    FastKinematicObservation,
    FastRoadNetwork,
    FastStraightLane,
    close_objects,
    lane_coordinates,
)
from constrained_grpo.envs.highway.options import SCENARIOS  # noqa: E402

SCENARIO_NAMES = list(SCENARIOS)


def _rollout_states(env: HighwayTaskEnv, seed: int, steps: int):
    """Yield the env after ``reset(seed)`` and after each of ``steps`` seeded random steps."""
    env.reset(seed=seed)
    yield env
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        _, _, terminated, truncated, _ = env.step(_action(env, rng))
        yield env
        if terminated or truncated:
            return


def _action(env: HighwayTaskEnv, rng: np.random.Generator):
    if isinstance(env.action_space, gym.spaces.Discrete):
        return int(rng.integers(env.action_space.n))
    return rng.uniform(-0.3, 0.3, size=2)


@pytest.mark.parametrize("scenario", SCENARIO_NAMES)
def test_fast_geometry_and_neighbours_equal_highway_env(scenario):
    env = HighwayTaskEnv(scenario=scenario)
    road = env.sim.road
    assert isinstance(road, (Road, RegulatedRoad)) and type(road).__name__.startswith("Fast")
    checked = 0
    for env in _rollout_states(env, seed=3, steps=4):
        road, net = env.sim.road, env.sim.road.network
        vehicles = road.vehicles
        pos = np.array([v.position for v in vehicles])
        # 1. Vectorised lane coordinates, on every lane of the network, against highway-env's
        # scalar method (bit-for-bit where np.dot is unfused, as on x86-64 OpenBLAS).
        for lane in net.lanes_list():
            s, r = lane_coordinates(lane, pos[:, 0], pos[:, 1])
            own = StraightLane.local_coordinates if isinstance(lane, FastStraightLane) else type(lane).local_coordinates
            ref = np.array([own(lane, p) for p in pos], dtype=np.float64)
            np.testing.assert_allclose(s, ref[:, 0], rtol=0, atol=1e-9)
            np.testing.assert_allclose(r, ref[:, 1], rtol=0, atol=1e-9)
        for v in vehicles:
            # 2. The closest lane, as highway-env's loop finds it.
            assert net.get_closest_lane_index(v.position, v.heading) == RoadNetwork.get_closest_lane_index(
                net, v.position, v.heading
            )
            # 3. Neighbours on the own, target and side lanes: the same vehicles.
            lanes = {v.lane_index, getattr(v, "target_lane_index", v.lane_index), *net.side_lanes(v.lane_index)}
            for lane_index in lanes:
                assert road.neighbour_vehicles(v, lane_index) == Road.neighbour_vehicles(road, v, lane_index)
                checked += 1
        # 4. Close objects, as the observation sees them.
        ego = env.vehicle
        for see_behind in (True, False):
            assert close_objects(road, ego, 200.0, 4, see_behind) == Road.close_objects_to(road, ego, 200.0, 4, see_behind)
    assert checked > 20


@pytest.mark.parametrize("scenario", SCENARIO_NAMES)
def test_fast_observation_equals_highway_env(scenario):
    env = HighwayTaskEnv(scenario=scenario)
    obs_type = env.sim.observation_type
    assert isinstance(obs_type, FastKinematicObservation)
    for env in _rollout_states(env, seed=5, steps=4):
        obs_type = env.sim.observation_type
        fast = obs_type.observe()
        slow = KinematicObservation.observe(obs_type)
        assert fast.dtype == slow.dtype == np.float32
        np.testing.assert_allclose(fast, slow, rtol=0, atol=1e-7, equal_nan=True)


def test_fast_observation_with_every_feature_and_absolute_coordinates():
    features = ["presence", "x", "y", "vx", "vy", "heading", "cos_h", "sin_h", "cos_d", "sin_d", "long_off", "lat_off", "ang_off"]
    for absolute, intentions in ((False, True), (True, False)):
        env = HighwayTaskEnv(
            scenario="merge",  # has a road object (the ramp's end) to observe
            config={"observation": {"features": features, "absolute": absolute, "observe_intentions": intentions,
                                    "vehicles_count": 8, "see_behind": True}},
        )
        for env in _rollout_states(env, seed=2, steps=3):
            obs_type = env.sim.observation_type
            np.testing.assert_allclose(
                obs_type.observe(), KinematicObservation.observe(obs_type), rtol=0, atol=1e-7, equal_nan=True
            )


def test_fast_network_matches_on_random_positions():
    env = HighwayTaskEnv(scenario="roundabout")
    net = env.sim.road.network
    assert isinstance(net, FastRoadNetwork)
    rng = np.random.default_rng(0)
    for _ in range(300):
        p = rng.uniform(-120, 120, size=2)
        h = float(rng.uniform(-np.pi, np.pi))
        for heading in (h, None):
            assert net.get_closest_lane_index(p, heading) == RoadNetwork.get_closest_lane_index(net, p, heading)


@pytest.mark.slow
@pytest.mark.parametrize("scenario", SCENARIO_NAMES)
def test_fast_and_slow_paths_give_identical_episodes(scenario):
    runs = []
    for fast in (True, False):
        env = HighwayTaskEnv(scenario=scenario, fast=fast)
        env.reset(seed=11)
        rng = np.random.default_rng(11)
        steps = []
        for _ in range(5):
            obs, reward, terminated, truncated, info = env.step(_action(env, rng))
            state = np.array([[*v.position, v.heading, v.speed] for v in env.sim.road.vehicles])
            steps.append((obs, reward, info["costs"], state))
            if terminated or truncated:
                break
        runs.append(steps)
    assert len(runs[0]) == len(runs[1])
    for (o1, r1, c1, s1), (o2, r2, c2, s2) in zip(*runs):
        assert np.array_equal(o1, o2) and r1 == r2 and np.array_equal(c1, c2) and np.array_equal(s1, s2)


@pytest.fixture
def pristine_idm():
    """highway-env's IntersectionEnv writes IDM constants on the class it is given; undo that."""
    saved = {k: IDMVehicle.__dict__[k] for k in ("DISTANCE_WANTED", "COMFORT_ACC_MAX", "COMFORT_ACC_MIN")}
    yield
    for k, v in saved.items():
        setattr(IDMVehicle, k, v)


@pytest.mark.parametrize("scenario", SCENARIO_NAMES)
def test_same_trajectories_as_raw_highway_env(scenario, pristine_idm):
    raw = gym.make(SCENARIOS[scenario].base_env).unwrapped
    ours = HighwayTaskEnv(scenario=scenario)
    rng = np.random.default_rng(4)
    o_raw, _ = raw.reset(seed=4)
    o_ours, _ = ours.reset(seed=4)
    assert np.array_equal(np.nan_to_num(o_raw.reshape(-1)), o_ours)
    for _ in range(6):
        a = int(rng.integers(raw.action_space.n))
        o_raw, _, te, tr, _ = raw.step(a)
        o_ours, _, te2, tr2, _ = ours.step(a)
        assert np.array_equal(np.nan_to_num(o_raw.reshape(-1)), o_ours) and (te, tr) == (te2, tr2)
        a_state = np.array([[*v.position, v.heading, v.speed] for v in raw.road.vehicles])
        b_state = np.array([[*v.position, v.heading, v.speed] for v in ours.sim.road.vehicles])
        assert np.array_equal(a_state, b_state)
        if te or tr:
            break
    raw.close()


def test_straight_lane_coordinates_equal_highway_env():
    rng = np.random.default_rng(0)
    for _ in range(50):
        start, end = rng.uniform(-100, 100, size=(2, 2))
        lane = StraightLane(start, end)
        fast = FastStraightLane(start, end)
        for p in rng.uniform(-200, 200, size=(20, 2)):
            assert fast.local_coordinates(p) == pytest.approx(lane.local_coordinates(p), abs=1e-9, rel=0)


def test_intersection_does_not_change_the_highway_traffic(pristine_idm):
    """highway-env's IntersectionEnv writes IDM constants on IDMVehicle; our traffic pins them."""

    def states() -> list[np.ndarray]:
        env = HighwayTaskEnv()
        env.reset(seed=9)
        out = []
        for a in (1, 3, 1):
            env.step(a)
            out.append(np.array([[*v.position, v.speed] for v in env.sim.road.vehicles]))
        return out

    before = states()
    gym.make("intersection-v2").unwrapped.reset(seed=0)  # mutates IDMVehicle.DISTANCE_WANTED etc.
    assert IDMVehicle.DISTANCE_WANTED == 7
    after = states()
    assert all(np.array_equal(a, b) for a, b in zip(before, after))
