"""The highway task family: registration, the env checkers, seeded resets, costs on
scripted scenarios, bad input, and the vector twin."""

from __future__ import annotations

import subprocess
import sys
import warnings

import numpy as np
import pytest

pytest.importorskip("highway_env", reason='highway-env is not installed (pip install -e ".[highway]")')

import gymnasium as gym  # noqa: E402
from highway_env.vehicle.kinematics import Vehicle  # noqa: E402

from constrained_grpo import check_constrained_env, make_env  # noqa: E402
from constrained_grpo.constraints import ConstraintError  # noqa: E402
from constrained_grpo.envs import list_tasks  # noqa: E402
from constrained_grpo.envs.highway.env import HighwayTaskEnv  # noqa: E402
from constrained_grpo.envs.highway.vector import HighwayVectorEnv  # noqa: E402

HIGHWAY_IDS = list_tasks("highway")
IDLE, LANE_LEFT, FASTER, SLOWER = 1, 0, 3, 4  # highway-env's meta-action indexes


def test_table_lists_every_scenario_in_both_action_modes():
    assert len(HIGHWAY_IDS) == 10
    for scenario in ("Highway", "Merge", "Roundabout", "Intersection"):
        assert f"Highway/{scenario}-v0" in HIGHWAY_IDS
        assert f"Highway/{scenario}Continuous-v0" in HIGHWAY_IDS
    assert "Highway/Highway-v1" in HIGHWAY_IDS and "Highway/Highway-v2" in HIGHWAY_IDS


def test_highway_v2_is_v0_with_collision_0_05_and_headway_0_13_on_both_envs():
    v0, v2 = (make_env(f"Highway/Highway-v{v}").unwrapped for v in (0, 2))
    assert {c.name: c.limit for c in v2.constraints} == {"collision": 0.05, "speeding": 0.1, "headway": 0.13, "lane_change": 3.0}
    obs0, _ = v0.reset(seed=3)
    obs2, _ = v2.reset(seed=3)
    for _ in range(4):  # the same scene, dynamics and costs
        (obs0, r0, *_, i0), (obs2, r2, *_, i2) = v0.step(FASTER), v2.step(FASTER)
        assert np.array_equal(obs0, obs2) and r0 == r2 and np.array_equal(i0["costs"], i2["costs"])
    from constrained_grpo.tasks import make_vec_env

    vec = make_vec_env("Highway/Highway-v2", 2)
    assert [c.limit for c in vec.constraints] == [0.05, 0.1, 0.13, 3.0]
    with pytest.raises(ValueError, match="collision_limit"):
        make_env("Highway/Highway-v2", collision_limit=-1)


def test_highway_v1_is_v0_with_the_headway_limit_at_0_2():
    v0, v1 = (make_env(f"Highway/Highway-v{v}").unwrapped for v in (0, 1))
    assert {c.name: c.limit for c in v1.constraints} == {"collision": 0.1, "speeding": 0.1, "headway": 0.2, "lane_change": 3.0}
    assert [c.description for c in v1.constraints] == [c.description for c in v0.constraints]
    obs0, _ = v0.reset(seed=3)
    obs1, _ = v1.reset(seed=3)
    for _ in range(4):  # the same scene, dynamics and costs
        (obs0, r0, *_, i0), (obs1, r1, *_, i1) = v0.step(FASTER), v1.step(FASTER)
        assert np.array_equal(obs0, obs1) and r0 == r1 and np.array_equal(i0["costs"], i1["costs"])
    # Other limits override it and keep the declared headway limit; `limits` overrides it too.
    assert make_env("Highway/Highway-v1", limits={"collision": 0.05}).unwrapped.constraints[2].limit == 0.2
    assert make_env("Highway/Highway-v1", limits={"headway": 0.15}).unwrapped.constraints[2].limit == 0.15
    from constrained_grpo.tasks import make_vec_env

    vec = make_vec_env("Highway/Highway-v1", 2)
    assert [c.limit for c in vec.constraints] == [0.1, 0.1, 0.2, 3.0]


def test_an_earlier_version_is_made_without_gymnasiums_advice_to_upgrade():
    """v0, v1 and v2 are three tasks (other limits, each ranked on its own), not one task's
    releases: gymnasium's "out of date, consider upgrading" would mislead on every board that
    ranks Highway-v1."""
    from constrained_grpo.tasks import make_vec_env

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        make_env("Highway/Highway-v1").close()
        make_vec_env("Highway/Highway-v0", 2).close()
        gym.make("Highway/Highway-v1").close()  # gymnasium's own make still says it
    advice = [str(w.message) for w in caught if "out of date" in str(w.message)]
    assert len(advice) == 1 and "Highway/Highway-v1 is out of date" in advice[0], advice
    with warnings.catch_warnings(record=True) as caught:  # the filter does not outlive the call
        warnings.simplefilter("always")
        make_env("Highway/Highway-v1").close()
        warnings.warn("a later warning", DeprecationWarning)
    assert [str(w.message) for w in caught if "out of date" in str(w.message) or "later" in str(w.message)] == [
        "a later warning"]


def test_ids_list_without_highway_env_and_making_one_says_how_to_install():
    code = (
        "import sys; sys.modules['highway_env'] = None\n"  # makes `import highway_env` fail
        "import constrained_grpo.envs as e\n"
        "print(len(e.list_tasks('highway')))\n"
        "from constrained_grpo import make_env\n"
        "try:\n    make_env('Highway/Highway-v0')\n"
        "except Exception as exc:\n    print(type(exc).__name__, exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert lines[0] == "10"
    assert 'pip install -e ".[highway]"' in lines[1]


@pytest.mark.slow
@pytest.mark.parametrize("env_id", HIGHWAY_IDS)
def test_every_id_passes_the_constrained_and_sb3_checkers(env_id):
    from stable_baselines3.common.env_checker import check_env as sb3_check_env

    env = make_env(env_id)
    report = check_constrained_env(env, num_steps=12)
    assert report["constraints"][:3] == ["collision", "speeding", "headway"]
    assert env.observation_space.dtype == np.float32 and env.observation_space.shape[0] % 5 == 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sb3_check_env(env.unwrapped, warn=False)
    env.close()


def test_reset_seed_fixes_the_traffic():
    a, b = HighwayTaskEnv(), HighwayTaskEnv()  # two processes' worth of copies: separate envs

    def scene(env: HighwayTaskEnv, seed: int) -> np.ndarray:
        env.reset(seed=seed)
        return np.array([[*v.position, v.heading, v.speed] for v in env.sim.road.vehicles])

    first = scene(a, 7)
    scene(a, 8)
    assert np.array_equal(first, scene(a, 7))  # same seed, same traffic, whatever came before
    assert np.array_equal(first, scene(b, 7))  # and in another env
    assert not np.array_equal(first, scene(b, 8))
    actions = [IDLE, FASTER, LANE_LEFT, IDLE, SLOWER, IDLE]
    runs = []
    for env in (a, b):
        env.reset(seed=7)
        runs.append([env.step(x) for x in actions])
    for (o1, r1, t1, u1, i1), (o2, r2, t2, u2, i2) in zip(*runs):
        assert np.array_equal(o1, o2) and r1 == r2 and (t1, u1) == (t2, u2)
        assert np.array_equal(i1["costs"], i2["costs"])


# -- scripted scenarios ------------------------------------------------------------------

def _empty_highway(speed: float = 25.0, **kwargs) -> HighwayTaskEnv:
    """The highway task, ego in the middle lane at ``speed`` on an otherwise empty road."""
    env = HighwayTaskEnv(config={"initial_lane_id": 1}, **kwargs)
    env.reset(seed=0)
    ego = env.vehicle
    env.sim.road.vehicles = [ego]
    ego.speed = speed
    return env


def _add_vehicle(env: HighwayTaskEnv, ahead: float, speed: float) -> Vehicle:
    """A plain vehicle (constant speed, no steering) ``ahead`` m in front of the ego, same lane."""
    ego, road = env.vehicle, env.sim.road
    lane = road.network.get_lane(ego.lane_index)
    s = lane.local_coordinates(ego.position)[0]
    other = Vehicle.make_on_lane(road, ego.lane_index, s + ahead, speed=speed)
    road.vehicles.append(other)
    return other


def test_forced_collision_costs_once():
    env = _empty_highway(speed=25.0)
    _add_vehicle(env, ahead=15.0, speed=0.0)  # a stopped car 10 m ahead, bumper to bumper
    collision_costs, terminated = [], False
    for _ in range(4):
        _, _, terminated, _, info = env.step(IDLE)
        collision_costs.append(info["costs"][0])
        if terminated:
            break
    assert terminated and info["crashed"]
    assert collision_costs[-1] == 1.0 and sum(collision_costs) == 1.0
    for _ in range(2):  # highway-env keeps simulating after the crash: no second cost
        _, _, _, _, info = env.step(IDLE)
        assert info["costs"][0] == 0.0


def test_collision_is_not_in_the_reward():
    env = _empty_highway(speed=25.0)
    _add_vehicle(env, ahead=15.0, speed=0.0)
    for _ in range(4):
        _, reward, terminated, _, info = env.step(IDLE)
        if terminated:
            break
    # highway-env's terms with collision_reward = 0: speed and lane terms only, mapped to [0, 1].
    rewards = env.sim._rewards(IDLE)
    hs, rl = env.sim.config["high_speed_reward"], env.sim.config["right_lane_reward"]
    expected = (hs * rewards["high_speed_reward"] + rl * rewards["right_lane_reward"]) / (hs + rl)
    assert reward == pytest.approx(expected * rewards["on_road_reward"])
    assert reward >= 0.0


def test_driving_above_the_speed_limit_costs_the_time_spent_above_it():
    env = _empty_highway(speed=25.0)
    limit = env.options.speed_limit
    assert limit == 27.5
    _, _, _, _, info = env.step(IDLE)  # 25 m/s: under the limit
    assert info["costs"][1] == 0.0
    costs = [env.step(FASTER)[4]["costs"][1] for _ in range(3)]  # target 30 m/s
    assert costs[0] > 0.0
    # Above the limit at every frame: the cost of a step is 1 / T (T = 30 steps of 1 s).
    assert env.vehicle.speed > limit and costs[-1] == pytest.approx(1 / 30)
    # A higher threshold: no cost at the same speed.
    env2 = _empty_highway(speed=30.0, speed_limit=31.0)
    assert env2.step(IDLE)[4]["costs"][1] == 0.0


def test_closing_on_the_car_ahead_costs_headway():
    env = _empty_highway(speed=25.0)
    _add_vehicle(env, ahead=60.0, speed=20.0)  # 55 m gap, closing at 5 m/s
    costs, headways = [], []
    for _ in range(8):
        _, _, terminated, _, info = env.step(IDLE)
        costs.append(info["costs"][2])
        headways.append(info["time_headway"])
        assert not terminated
    assert costs[0] == 0.0 and headways[0] > 1.0  # 2 s ahead at first
    assert costs[-1] == pytest.approx(1 / 30) and headways[-1] < 1.0  # then under 1 s all step long
    assert all(np.diff(headways) < 0)


def test_following_at_a_safe_distance_costs_no_headway():
    env = _empty_highway(speed=25.0)
    _add_vehicle(env, ahead=45.0, speed=25.0)  # 40 m gap at 25 m/s: 1.6 s
    for _ in range(3):
        assert env.step(IDLE)[4]["costs"][2] == 0.0


def test_lane_changes_are_counted():
    env = _empty_highway(speed=25.0)
    names = [c.name for c in env.constraints]
    k = names.index("lane_change")
    assert env.step(LANE_LEFT)[4]["costs"][k] == 1.0  # lane 1 -> 0
    assert env.step(IDLE)[4]["costs"][k] == 0.0
    assert env.step(LANE_LEFT)[4]["costs"][k] == 0.0  # already leftmost: no change


def test_steering_off_the_road_costs_offroad():
    env = _empty_highway(speed=25.0, action_mode="continuous")
    k = [c.name for c in env.constraints].index("offroad")
    assert env.step(np.array([0.0, 0.0]))[4]["costs"][k] == 0.0
    total = sum(env.step(np.array([0.0, -1.0]))[4]["costs"][k] for _ in range(4))
    assert total > 0.0


def test_hard_braking_costs_in_the_intersection():
    env = HighwayTaskEnv(scenario="intersection")
    env.reset(seed=1)
    k = [c.name for c in env.constraints].index("hard_brake")
    assert env.constraints[k].name == "hard_brake"
    _, _, _, _, info = env.step(0)  # SLOWER from 9 m/s: -7.5 m/s^2 at first
    assert info["costs"][k] > 0.0


def test_limits_are_documented_and_overridable():
    env = HighwayTaskEnv(limits={"collision": 0.05, "lane_change": 1})
    limits = {c.name: c.limit for c in env.constraints}
    assert limits == {"collision": 0.05, "speeding": 0.1, "headway": 0.1, "lane_change": 1.0}
    assert all(c.description for c in env.constraints)
    assert env.constraints[0].indicator
    assert make_env("Highway/Merge-v0", limits=[0.2, 0.2, 0.2, 0.0]).unwrapped.constraints[3].limit == 0.0


# -- bad input ---------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"scenario": "hiway"}, "did you mean 'highway'"),
        ({"action_mode": "discret"}, "unknown action_mode"),
        ({"config": {"vehicle_count": 10}}, "vehicles_count"),
        ({"config": {"lanes_cont": 4}}, "silently"),
        ({"config": {"observation": {"vehicle_count": 7}}}, "vehicles_count"),
        ({"config": {"action": {"target_speed": [20, 30]}}}, "target_speeds"),
        ({"config": {"observation": {"features": ["presence", "speed"]}}}, "unknown kinematics feature"),
        ({"config": {"collision_reward": -1}}, "collision"),
        ({"config": {"observation": {"type": "OccupancyGrid"}}}, "Kinematics"),
        ({"speed_limit": -1.0}, "speed_limit must be a finite number >= 0"),
        ({"headway_time": -0.5}, "headway_time must be a finite number >= 0"),
        ({"headway_limit": "high"}, "headway_limit must be a finite number >= 0"),
        ({"hard_brake_decel": float("nan")}, "hard_brake_decel"),
        ({"action_mode": "continuous", "comfort": "lane_change"}, "lane_change"),
        ({"comfort": "jerk"}, "unknown comfort"),
    ],
)
def test_bad_input_is_a_clear_error(kwargs, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace("[", r"\[")):
        HighwayTaskEnv(**kwargs)


def test_bad_limits_and_actions():
    with pytest.raises(ConstraintError, match="unknown constraint"):
        HighwayTaskEnv(limits={"speed": 0.1})
    with pytest.raises(ConstraintError, match=">= 0"):
        make_env("Highway/Highway-v0", limits={"headway": -1})
    env = HighwayTaskEnv()
    with pytest.raises(gym.error.ResetNeeded):
        env.step(IDLE)
    env.reset(seed=0)
    for bad in (5, -1, 1.5, "left"):
        with pytest.raises(ValueError, match="is not one of"):
            env.step(bad)
    cont = HighwayTaskEnv(action_mode="continuous")
    cont.reset(seed=0)
    with pytest.raises(ValueError, match="shape"):
        cont.step(np.zeros(3))


# -- the vector twin ---------------------------------------------------------------------

@pytest.mark.slow
def test_make_vec_env_uses_the_process_vector_env_and_matches_single_envs():
    # Highway/Highway-v0's make_vec_env is the batched simulator (test_highway_batched.py);
    # the process vector env is built directly here.
    vec = HighwayVectorEnv(num_envs=4)
    try:
        assert isinstance(vec, HighwayVectorEnv) and vec.metadata["autoreset_mode"] == gym.vector.AutoresetMode.SAME_STEP
        seeds = [3, 3, 5, 5]  # two GRPO groups of two
        obs, _ = vec.reset(seed=seeds)
        envs = [HighwayTaskEnv() for _ in seeds]
        single = np.stack([env.reset(seed=s)[0] for env, s in zip(envs, seeds)])
        assert np.array_equal(obs, single) and np.array_equal(obs[0], obs[1])
        rng = np.random.default_rng(0)
        finished = 0
        for _ in range(20):
            actions = rng.integers(0, 5, size=4)
            obs, rewards, terminated, truncated, info = vec.step(actions)
            assert info["costs"].shape == (4, 4) and np.allclose(info["cost"], info["costs"].sum(axis=1))
            for i, env in enumerate(envs):
                o, r, te, tr, inf = env.step(int(actions[i]))
                assert r == rewards[i] and np.array_equal(inf["costs"], info["costs"][i])
                if te or tr:
                    finished += 1
                    assert info["_final_obs"][i] and np.array_equal(info["final_obs"][i], o)
                    o, _ = env.reset()
                assert np.array_equal(obs[i], o)
        assert finished > 0
    finally:
        vec.close()


def test_vector_env_in_process_and_bad_arguments():
    vec = HighwayVectorEnv(num_envs=2, num_workers=0, scenario="merge")
    obs, _ = vec.reset(seed=0)
    assert obs.shape == (2, 25) and [c.name for c in vec.constraints][-1] == "lane_change"
    vec.close()
    with pytest.raises(ValueError, match="num_envs"):
        HighwayVectorEnv(num_envs=0)
    with pytest.raises(ValueError, match="unknown scenario"):
        HighwayVectorEnv(num_envs=1, num_workers=0, scenario="parking")


@pytest.mark.slow
def test_make_vec_env_works_in_a_program_read_from_stdin(tmp_path):
    # Issue 16: `python - <<EOF` has __main__.__file__ == "<stdin>"; the spawned workers
    # tried to re-run that path (FileNotFoundError in the child, a bare EOFError here).
    program = (
        "import __main__\n"
        "from constrained_grpo import make_vec_env\n"
        "vec = make_vec_env('Highway/Merge-v0', 2, num_workers=2)\n"
        "obs, _ = vec.reset(seed=0)\n"
        "vec.step([1, 1])\n"
        "vec.close()\n"
        "print('shape', obs.shape, 'main', __main__.__file__)\n"
    )
    done = subprocess.run([sys.executable, "-"], input=program, capture_output=True, text=True,
                          cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    # two worker processes served the copies, and __main__ is left as it was
    assert "shape (2, 25) main <stdin>" in done.stdout


def test_a_worker_that_dies_is_a_clear_error():
    import multiprocessing as mp

    vec = HighwayVectorEnv(num_envs=1, num_workers=0, scenario="merge")
    ours, theirs = mp.Pipe()
    theirs.close()  # the worker side is gone: recv() hits EOF
    vec._conns = [ours]
    with pytest.raises(RuntimeError, match="exited without answering.*num_workers=0"):
        vec._gather()
    assert vec.closed
