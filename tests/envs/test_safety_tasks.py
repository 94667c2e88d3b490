"""Safety-Gymnasium through the bridge, for real: needs .venv-safety (`make safety`)."""

import gc
import json
import os
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import constrained_grpo
import constrained_grpo.envs
from constrained_grpo import check_constrained_env, make_env, make_vec_env
from constrained_grpo.envs.safety.bridge import BridgeUnavailable, find_safety_python
from constrained_grpo.envs.safety.env import LegacyBridgeVectorEnv
from constrained_grpo.wrappers import RecordEpisodeCostVector

try:
    SAFETY_PYTHON = find_safety_python()
except BridgeUnavailable as exc:
    pytest.skip(f"needs the Safety-Gymnasium interpreter; run `make safety` ({exc})", allow_module_level=True)

pytestmark = pytest.mark.slow  # MuJoCo tasks stepped in a second interpreter

SAFETY_IDS = ("Safety/PointGoal1-v0", "Safety/CarGoal1-v0", "Safety/PointButton1-v0")
SHORT = {"legacy_kwargs": {"max_episode_steps": 40}}  # episodes end (and autoreset) within the test

# The legacy env run directly in its own interpreter, no bridge: the reference. Env i is
# reset with seeds[i], stepped with actions[t, i], and reset (unseeded) when it finishes.
REFERENCE = r"""
import json, sys
import numpy as np
import safety_gymnasium
env_id, kwargs, seeds, actions_path, out_path = sys.argv[1:]
seeds, actions = json.loads(seeds), np.load(actions_path)
envs = [safety_gymnasium.make(env_id, **json.loads(kwargs)) for _ in seeds]
obs = [env.reset(seed=s)[0] for env, s in zip(envs, seeds)]
rec = {k: [] for k in ("obs", "final_obs", "reward", "cost", "terminated", "truncated")}
rec["obs"].append(np.stack(obs))
for a in actions:
    final = np.zeros_like(rec["obs"][0])
    step = [envs[i].step(a[i]) for i in range(len(envs))]
    for i, (o, r, c, te, tr, _) in enumerate(step):
        if te or tr:
            final[i] = o
            o, _ = envs[i].reset()
        obs[i] = o
    rec["obs"].append(np.stack(obs))
    rec["final_obs"].append(final)
    for j, key in enumerate(("reward", "cost", "terminated", "truncated")):
        rec[key].append([s[j + 1] for s in step])
np.savez(out_path, **{k: np.asarray(v) for k, v in rec.items()})
"""


def _reference(tmp_path: Path, env_id: str, seeds: list[int], actions: np.ndarray) -> dict[str, np.ndarray]:
    np.save(tmp_path / "actions.npy", actions)
    out = tmp_path / "reference.npz"
    args = [SAFETY_PYTHON, "-c", REFERENCE, env_id, json.dumps(SHORT["legacy_kwargs"]), json.dumps(seeds),
            str(tmp_path / "actions.npy"), str(out)]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with np.load(out) as data:
        return dict(data)


def _actions(steps: int, num_envs: int) -> np.ndarray:
    return np.random.default_rng(123).uniform(-1.0, 1.0, size=(steps, num_envs, 2))


# A Safety-Gymnasium reset takes seconds (MuJoCo decodes the skybox PNGs on every world
# rebuild), so the tests below are frugal with resets: one reference run serves both the
# single env and the vector env, and only PointGoal1 gets the full check_constrained_env.
SEEDS, STEPS = [3, 3], 50  # one group of two; each env ends an episode at step 40


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict[str, np.ndarray]:
    return _reference(tmp_path_factory.mktemp("ref"), "SafetyPointGoal1-v0", SEEDS, _actions(STEPS, len(SEEDS)))


def test_single_env_matches_the_legacy_process(reference):
    actions = _actions(STEPS, len(SEEDS))[:, 0]
    env = make_env("Safety/PointGoal1-v0", **SHORT)
    obs, _ = env.reset(seed=SEEDS[0])
    got = {k: [] for k in ("obs", "final_obs", "reward", "cost", "terminated", "truncated")}
    got["obs"].append(obs)
    for a in actions:
        obs, reward, term, trunc, info = env.step(a)
        final = np.zeros_like(obs)
        if term or trunc:
            final, (obs, _) = obs, env.reset()
        for key, value in zip(got, (obs, final, reward, info["cost"], term, trunc)):
            got[key].append(value)
    env.close()
    assert reference["truncated"][:, 0].sum() == 1
    for key, value in got.items():
        np.testing.assert_array_equal(np.asarray(value), reference[key][:, 0], err_msg=key)  # bit for bit


def test_vector_env_matches_the_legacy_process_with_one_worker(reference):
    vec = make_vec_env("Safety/PointGoal1-v0", len(SEEDS), **SHORT)
    assert isinstance(vec.unwrapped, LegacyBridgeVectorEnv)
    vec = RecordEpisodeCostVector(vec)
    obs, _ = vec.reset(seed=SEEDS)
    np.testing.assert_array_equal(obs, reference["obs"][0])
    np.testing.assert_array_equal(obs[0], obs[1])  # same seed, same start: a GRPO group
    pid = vec.unwrapped.bridge.pid
    episode_cost = np.zeros(len(SEEDS))
    for t, a in enumerate(_actions(STEPS, len(SEEDS))):
        obs, reward, term, trunc, info = vec.step(a)
        np.testing.assert_array_equal(obs, reference["obs"][t + 1])
        np.testing.assert_array_equal(reward, reference["reward"][t])
        np.testing.assert_array_equal(info["costs"][:, 0], reference["cost"][t])
        np.testing.assert_array_equal(trunc, reference["truncated"][t])
        episode_cost += info["cost"]
        if trunc.any():
            np.testing.assert_array_equal(info["final_obs"][trunc], reference["final_obs"][t][trunc])
            np.testing.assert_array_equal(info["episode"]["c"][:, 0], episode_cost)
            assert info["episode"]["l"].tolist() == [40, 40]
            episode_cost[:] = 0.0
    assert reference["truncated"].sum() == 2 and vec.unwrapped.bridge.pid == pid
    vec.close()


def test_check_constrained_env():
    env = make_env("Safety/PointGoal1-v0", **SHORT)
    try:
        report = check_constrained_env(env, num_steps=30)
    finally:
        env.close()
    assert report == {"constraints": ["cost"], "limits": [25.0], "steps": 30, "episodes": 0}


@pytest.mark.parametrize("env_id, obs_dim", [("Safety/CarGoal1-v0", 72), ("Safety/PointButton1-v0", 76)])
def test_other_ids_follow_the_contract(env_id, obs_dim):
    env = make_env(env_id, limits=[5.0])
    assert env.unwrapped.constraints[0].limit == 5.0
    obs, _ = env.reset(seed=0)
    assert obs.shape == (obs_dim,) and env.observation_space.contains(obs)
    for _ in range(5):
        obs, reward, term, trunc, info = env.step(env.action_space.sample())
        assert isinstance(reward, float) and env.observation_space.contains(obs)
        assert info["costs"].dtype == np.float64 and info["costs"].shape == (1,)
        assert info["cost"] == info["costs"].sum() == info["cost_sum"]
    env.close()


def _bridge_workers() -> set[int]:
    """Pids of this process's children that run the bridge worker."""
    pids = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmd = (entry / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == os.getpid() and b"worker.py" in cmd:
            pids.add(int(entry.name))
    return pids


def test_eight_envs_one_worker_and_no_orphans():
    before = _bridge_workers()
    vec = make_vec_env("Safety/CarGoal1-v0", 8)
    assert _bridge_workers() == before  # lazy: nothing runs yet
    assert vec.observation_space.shape == (8, 72)  # the spaces come from the worker
    assert len(_bridge_workers() - before) == 1
    vec.close()
    assert _bridge_workers() == before


def test_table_ids_exist_in_safety_gymnasium():
    legacy = [gym.spec(i).kwargs["legacy_id"] for i in constrained_grpo.envs.list_tasks("safety")]
    code = ("import json, sys, safety_gymnasium.utils.registration as r; "
            "print(json.dumps(sorted(set(json.loads(sys.argv[1])) - set(r.safe_registry))))")
    proc = subprocess.run([SAFETY_PYTHON, "-c", code, json.dumps(legacy)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == []


@pytest.mark.parametrize(
    "algo, config",
    [
        ("ppo-lag", {"n_envs": 1, "n_steps": 40, "batch_size": 40, "n_epochs": 1}),
        ("cgrpo", {"num_groups": 1, "group_size": 2, "minibatches": 1, "max_episode_steps": 40}),
    ],
)
def test_agents_train_on_point_goal(algo, config):
    if algo not in constrained_grpo.list_agents():
        pytest.skip(f"agent {algo!r} is not registered")
    before = _bridge_workers()
    agent = constrained_grpo.make_agent(algo, "Safety/PointGoal1-v0", seed=0, env_kwargs=SHORT, **config)
    records: list[dict] = []
    agent.learn(80, records.append)
    assert records and records[-1]["env_steps"] >= 80
    assert np.all(np.isfinite(records[-1]["ep_cost"])) and len(records[-1]["multipliers"]) == 1
    del agent
    gc.collect()  # the agent's envs go, and their workers with them
    assert _bridge_workers() == before
