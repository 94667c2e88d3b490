"""The legacy-env bridge: wire format, lifecycle, errors. Needs no second environment:
the worker runs a toy legacy env in this interpreter (the worker is interpreter-agnostic);
the cross-version round trip also runs in .venv-safety when it is built."""

import gc
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import constrained_grpo.envs
from constrained_grpo import check_constrained_env, make_env
from constrained_grpo.envs.safety import bridge as bridge_mod
from constrained_grpo.envs.safety.bridge import (
    BridgeError,
    BridgeUnavailable,
    LegacyBridge,
    LegacyEnvError,
    WorkerCrashed,
    find_safety_python,
)
from constrained_grpo.envs.safety.env import LegacyBridgeEnv, LegacyBridgeVectorEnv
from constrained_grpo.envs.safety.worker import decode, encode

TOY = '''
"""A legacy env with Safety-Gymnasium's 6-tuple: obs [t, seed], reward sum(action), cost t % 2."""
import os
import sys

import numpy as np
from gymnasium import spaces


class Toy:
    metadata = {}
    spec = None

    def __init__(self, crash_at=None, length=5, object_info_at=None):
        self.observation_space = spaces.Box(-np.inf, np.inf, (2,), np.float64)
        self.action_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.crash_at, self.length, self.t, self.seed = crash_at, length, 0, 0
        self.object_info_at = object_info_at

    def reset(self, seed=None, options=None):
        if seed is not None:
            self.seed = seed
        self.t = 0
        return np.array([0.0, self.seed]), {"where": 1.0}

    def step(self, action):
        action = np.asarray(action)
        if action[0] == -0.75:
            raise ValueError("toy env: action -0.75 is refused")
        self.t += 1
        if self.crash_at is not None and self.t >= self.crash_at:
            sys.stderr.write("toy env: simulated crash at step %d\\n" % self.t)
            sys.stderr.flush()
            os._exit(3)
        print("stray print on stdout")  # must not corrupt the frames
        obs = np.array([float(self.t), float(self.seed)])
        info = {"t": self.t, "obj": object()} if self.t == self.object_info_at else {"t": self.t}
        return obs, float(action.sum()), float(self.t % 2), False, self.t >= self.length, info

    def close(self):
        pass


def make(env_id, **kwargs):
    assert env_id == "Toy-v0", env_id
    return Toy(**kwargs)
'''


@pytest.fixture
def toy(tmp_path: Path) -> dict:
    """Keywords that bridge the toy env, run by this very interpreter."""
    (tmp_path / "toy_legacy.py").write_text(TOY)
    return {"legacy_id": "Toy-v0", "python": sys.executable, "maker": "toy_legacy:make", "pythonpath": [str(tmp_path)]}


def _gone(pid: int, timeout: float = 10.0) -> bool:
    """True once ``pid`` has exited (a zombie counts: it runs no more)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                if fh.read().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False


# ----------------------------------------------------------------------------- wire format

def _sample_message() -> dict:
    rng = np.random.default_rng(0)
    return {
        "bool": rng.random((3, 2)) < 0.5,
        "int8": np.arange(-4, 4, dtype=np.int8),
        "uint16": np.arange(7, dtype=np.uint16).reshape(7, 1),
        "int64": np.array([-(2**62), 2**62]),
        "float16": np.array([0.5, -1.25], dtype=np.float16),
        "float32": rng.standard_normal((2, 3, 4)).astype(np.float32),
        "float64": np.array([np.pi, np.inf, -np.inf, 1e-310]),
        "complex128": np.array([1 + 2j]),
        "big_endian": np.arange(3, dtype=">f8"),
        "scalar0d": np.array(3.5),
        "empty": np.zeros((0, 5)),
        "strided": np.arange(20.0).reshape(4, 5)[:, ::2],
        "np_scalars": (np.float64(0.1), np.int32(7), np.bool_(True)),
        "nested": {"a": [1, 2.5, None, "x"], "b": (np.ones(2), {"c": np.zeros(1, dtype=np.uint8)})},
    }


def _assert_same(sent, got) -> None:
    if isinstance(sent, np.ndarray):
        assert isinstance(got, np.ndarray) and got.dtype == sent.dtype and got.shape == sent.shape
        np.testing.assert_array_equal(got, sent)
    elif isinstance(sent, dict):
        assert isinstance(got, dict) and list(got) == list(sent)
        for k in sent:
            _assert_same(sent[k], got[k])
    elif isinstance(sent, (tuple, list)):
        assert type(got) is type(sent) and len(got) == len(sent)
        for a, b in zip(sent, got):
            _assert_same(a, b)
    elif isinstance(sent, np.generic):
        assert got == sent.item() and type(got) is type(sent.item())
    else:
        assert got == sent and type(got) is type(sent)


def test_codec_round_trip_in_process():
    msg = _sample_message()
    got = decode(bytearray(b"".join(encode(msg))))
    _assert_same(msg, got)
    got["float32"][0, 0, 0] = 1.0  # decoded arrays are writable views, aligned for their dtype
    assert all(a.flags.aligned for a in (got["float64"], got["int64"], got["complex128"]))


@pytest.mark.parametrize("bad", [np.array(["a"]), np.array([object()]), {1: 2}, {1, 2}, b"raw"])
def test_codec_refuses_what_needs_pickle(bad):
    with pytest.raises(TypeError, match="cannot send"):
        encode({"x": bad})


def _safety_python_or_skip() -> str:
    try:
        return find_safety_python()
    except BridgeUnavailable as exc:
        pytest.skip(f"needs the Safety-Gymnasium interpreter (run `make safety`): {exc}")


@pytest.mark.parametrize("which", ["this interpreter", "safety interpreter (numpy 1.23)"])
def test_codec_round_trip_through_worker(toy, which):
    python = sys.executable if which == "this interpreter" else _safety_python_or_skip()
    bridge = LegacyBridge("Toy-v0", python=python, maker="toy_legacy:make", pythonpath=toy["pythonpath"])
    try:
        bridge.start()
        msg = _sample_message()
        _assert_same(msg, bridge.request({"cmd": "echo", "msg": msg}))
    finally:
        bridge.close()


# ----------------------------------------------------------------------------- the envs

def test_toy_env_follows_the_contract_and_starts_lazily(toy):
    env = LegacyBridgeEnv(**toy, limits={"cost": 2.0})
    assert env.bridge.pid is None  # nothing runs until the spaces or reset are needed
    assert env.constraints[0].name == "cost" and env.constraints[0].limit == 2.0
    obs, info = env.reset(seed=4)
    np.testing.assert_array_equal(obs, [0.0, 4.0])
    assert info == {"where": 1.0}
    obs, reward, term, trunc, info = env.step(np.array([0.25, 0.5], dtype=np.float32))
    np.testing.assert_array_equal(obs, [1.0, 4.0])
    assert (reward, term, trunc) == (0.75, False, False)
    assert info["t"] == 1 and info["cost"] == 1.0 and info["costs"].dtype == np.float64
    np.testing.assert_array_equal(info["costs"], [1.0])
    assert check_constrained_env(env, num_steps=20)["constraints"] == ["cost"]
    env.close()


def test_default_limit_is_25_and_overridable_without_a_worker(toy):
    assert LegacyBridgeEnv(**toy).constraints[0].limit == 25.0
    assert LegacyBridgeEnv(**toy, limits=[10.0]).constraints[0].limit == 10.0
    with pytest.raises(ValueError, match="unknown constraint"):
        LegacyBridgeEnv(**toy, limits={"hazard": 1.0})
    with pytest.raises(TypeError, match="unexpected keyword"):
        LegacyBridgeEnv(**toy, limit=3.0)


def test_vector_env_one_worker_same_step_autoreset(toy):
    vec = LegacyBridgeVectorEnv(3, **toy, legacy_kwargs={"length": 2})
    assert vec.metadata["autoreset_mode"] == gym.vector.AutoresetMode.SAME_STEP
    obs, info = vec.reset(seed=10)
    np.testing.assert_array_equal(obs, [[0, 10], [0, 11], [0, 12]])
    assert vec.observation_space.shape == (3, 2) and vec.action_space.shape == (3, 2)
    obs, reward, term, trunc, info = vec.step(np.full((3, 2), 0.5, dtype=np.float32))
    np.testing.assert_array_equal(info["costs"], [[1.0]] * 3)
    assert "final_obs" not in info and info["t"].tolist() == [1, 1, 1]
    obs, reward, term, trunc, info = vec.step(np.zeros((3, 2), dtype=np.float32))
    assert trunc.all() and not term.any()
    np.testing.assert_array_equal(obs, [[0, 10], [0, 11], [0, 12]])  # next episode already began
    np.testing.assert_array_equal(info["final_obs"], [[2, 10], [2, 11], [2, 12]])
    assert info["_final_obs"].all() and info["final_info"]["t"].tolist() == [2, 2, 2]
    np.testing.assert_array_equal(info["costs"], [[0.0]] * 3)  # the last step's costs, every row
    np.testing.assert_array_equal(info["final_info"]["costs"], [[0.0]] * 3)
    assert info["where"].tolist() == [1.0] * 3  # the reset info of the finished rows
    vec.close()
    assert vec.bridge.pid is None


def test_remote_exception_is_raised_and_the_worker_survives(toy):
    env = LegacyBridgeEnv(**toy)
    env.reset(seed=0)
    with pytest.raises(LegacyEnvError, match="action -0.75 is refused") as err:
        env.step(np.array([-0.75, 0.0]))
    assert "Traceback" in str(err.value) and "Toy-v0" in str(err.value)
    env.step(np.zeros(2))
    env.close()


def test_info_without_a_wire_form_is_an_error_not_a_crash(toy):
    env = LegacyBridgeEnv(**toy, legacy_kwargs={"object_info_at": 1})
    env.reset(seed=0)
    with pytest.raises(LegacyEnvError, match="cannot send a object"):
        env.step(np.zeros(2))
    assert env.step(np.zeros(2))[-1]["t"] == 2
    env.close()


# ----------------------------------------------------------------------------- lifecycle

def test_close_ends_the_worker(toy):
    env = LegacyBridgeEnv(**toy)
    env.reset(seed=0)
    pid = env.bridge.pid
    assert pid is not None and not _gone(pid, timeout=0.1)
    env.close()
    assert _gone(pid) and env.bridge.pid is None
    env.close()  # twice is fine
    with pytest.raises(BridgeError, match="closed"):
        env.reset()


def test_garbage_collection_ends_the_worker(toy):
    env = LegacyBridgeEnv(**toy)
    env.reset(seed=0)
    pid = env.bridge.pid
    del env
    gc.collect()
    assert _gone(pid)


def test_crash_raises_with_the_task_and_the_worker_stderr(toy):
    env = LegacyBridgeEnv(**toy, legacy_kwargs={"crash_at": 3})
    env.reset(seed=0)
    env.step(np.zeros(2))
    env.step(np.zeros(2))
    pid = env.bridge.pid
    with pytest.raises(WorkerCrashed) as err:
        env.step(np.zeros(2))
    msg = str(err.value)
    assert "Toy-v0" in msg and "exit code 3" in msg and "simulated crash at step 3" in msg
    assert "stray print on stdout" in msg  # the legacy code's prints went to stderr
    assert _gone(pid)
    with pytest.raises(BridgeError, match="died earlier"):
        env.step(np.zeros(2))


def test_killed_worker_raises_with_the_signal(toy):
    env = LegacyBridgeEnv(**toy)
    env.reset(seed=0)
    os.kill(env.bridge.pid, signal.SIGKILL)
    with pytest.raises(WorkerCrashed, match="SIGKILL"):
        env.step(np.zeros(2))


PARENT = """
import os, sys, time
import numpy as np
from constrained_grpo.envs.safety.env import LegacyBridgeEnv
env = LegacyBridgeEnv("Toy-v0", python=sys.executable, maker="toy_legacy:make", pythonpath=[{path!r}])
env.reset(seed=0)
env.step(np.zeros(2))
child = os.fork() if {fork} else 0
if {fork} and child == 0:  # a forked child keeps the worker's stdin open: no EOF for it
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1), os.dup2(devnull, 2)  # but not our stdout, which the test reads to EOF
    time.sleep(30)
    os._exit(0)
print(env.bridge.pid, child, flush=True)
os.kill(os.getpid(), 9)  # die without closing anything
"""


@pytest.mark.parametrize("fork", [False, True], ids=["plain", "pipe-held-by-forked-child"])
def test_worker_dies_with_its_parent(toy, fork):
    script = PARENT.format(path=toy["pythonpath"][0], fork=fork)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    worker, child = map(int, proc.stdout.split())
    try:
        assert _gone(worker, timeout=10.0), f"worker {worker} outlived its parent"
    finally:
        if child:
            os.kill(child, signal.SIGKILL)


# ----------------------------------------------------------------------------- no second environment

SAFETY_IDS = ("Safety/PointGoal1-v0", "Safety/CarGoal1-v0", "Safety/PointButton1-v0")


def test_safety_ids_list_without_the_second_environment():
    ids = constrained_grpo.envs.list_tasks("safety")
    assert set(SAFETY_IDS) <= set(ids) and len(ids) == len(set(ids))
    for env_id in ids:
        spec = gym.spec(env_id)
        assert spec.vector_entry_point.endswith("LegacyBridgeVectorEnv")
        assert spec.kwargs["maker"] == "safety_gymnasium:make"


def test_missing_interpreter_error_gives_the_fix(monkeypatch, tmp_path):
    monkeypatch.delenv(bridge_mod.SAFETY_PYTHON_ENV, raising=False)
    monkeypatch.setattr(bridge_mod, "record_paths", lambda: [tmp_path / "none.json"])
    with pytest.raises(BridgeUnavailable, match="make safety"):
        make_env("Safety/PointGoal1-v0")
    monkeypatch.setenv(bridge_mod.SAFETY_PYTHON_ENV, str(tmp_path / "no-python"))
    with pytest.raises(BridgeUnavailable, match="CGRPO_SAFETY_PYTHON.*make safety"):
        make_env("Safety/PointGoal1-v0")


def test_interpreter_without_safety_gymnasium_error_gives_the_fix(monkeypatch):
    monkeypatch.setenv(bridge_mod.SAFETY_PYTHON_ENV, sys.executable)  # has no safety_gymnasium
    with pytest.raises(BridgeUnavailable) as err:
        make_env("Safety/PointGoal1-v0")
    msg = str(err.value)
    assert "Safety/PointGoal1-v0" in msg and "No module named 'safety_gymnasium'" in msg and "make safety" in msg


# ------------------------------------------------------------------- reliability (issue 17)


@pytest.mark.parametrize(
    "action, match",
    [
        (np.array([np.nan, 0.0]), "finite"),
        (np.array([np.inf, 0.0]), "finite"),
        (np.array([1j, 0.0]), "real numbers"),
        (np.array([True, False]), "real numbers"),
        (np.array(["a", "b"]), "real numbers"),
        (np.array([0.0, 0.0, 0.0]), "shape"),
        (np.array([1.5, 0.0]), "bounds"),
    ],
)
def test_invalid_actions_never_reach_the_worker(toy, action, match):
    env = LegacyBridgeEnv(**toy)
    env.reset(seed=0)
    with pytest.raises(ValueError, match=match):
        env.step(action)
    # Nothing was sent: the next valid step is the episode's first.
    assert env.step(np.array([0.25, 0.25], dtype=np.float32))[-1]["t"] == 1
    env.close()


def test_vector_actions_are_checked_per_row(toy):
    vec = LegacyBridgeVectorEnv(2, **toy)
    vec.reset(seed=0)
    with pytest.raises(ValueError, match="finite"):
        vec.step(np.array([[0.0, 0.0], [0.0, np.nan]]))
    with pytest.raises(ValueError, match=r"shape \(2, 2\)"):
        vec.step(np.zeros(2))
    vec.close()


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_stopped_worker_times_out_with_a_clear_error(toy):
    env = LegacyBridgeEnv(**toy, step_timeout=1.0)
    env.reset(seed=0)
    pid = env.bridge.pid
    os.kill(pid, signal.SIGSTOP)
    try:
        # A hang instead of the 1 s step timeout is failed by the test's timeout marker.
        with pytest.raises(bridge_mod.WorkerTimeout, match=r"did not answer 'step' within 1 s.*killed"):
            env.step(np.zeros(2))
        assert _gone(pid)
    finally:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
    env.close()


def test_a_record_planted_in_the_working_directory_is_ignored(monkeypatch, tmp_path):
    """Only the repository's own record (or CGRPO_SAFETY_PYTHON) names the interpreter."""
    planted = tmp_path / "attacker"
    marker = tmp_path / "ran"
    payload = planted / "payload.sh"
    (planted / ".venv-safety").mkdir(parents=True)
    payload.write_text(f"#!/bin/sh\ntouch {marker}\n")
    payload.chmod(0o755)
    (planted / ".venv-safety" / "cgrpo-safety.json").write_text(f'{{"python": "{payload}"}}')
    monkeypatch.delenv(bridge_mod.SAFETY_PYTHON_ENV, raising=False)
    monkeypatch.setattr(bridge_mod, "repo_root", lambda: tmp_path / "repo-without-record")
    monkeypatch.chdir(planted)
    assert bridge_mod.record_paths() == [tmp_path / "repo-without-record" / ".venv-safety" / "cgrpo-safety.json"]
    with pytest.raises(BridgeUnavailable, match="make safety"):
        find_safety_python()
    with pytest.raises(BridgeUnavailable):
        make_env("Safety/PointGoal1-v0").reset(seed=0)
    assert not marker.exists()
