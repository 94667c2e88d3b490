"""Our side of the bridge: the legacy interpreter, the worker process and its spaces.

A :class:`LegacyBridge` owns one worker process (``worker.py`` run by the legacy
interpreter) that holds ``num_envs`` legacy envs; every ``reset``/``step`` of the batch is
one request and one reply on the worker's stdin/stdout. The worker starts on first use,
stops on :meth:`LegacyBridge.close` (or when the bridge is garbage-collected, or when this
process exits or dies), and a worker that dies mid-run raises :class:`WorkerCrashed` with
its exit status and the tail of its stderr.

Actions are checked against the action space before they cross (real numbers of the
space's shape, finite, within the bounds; integers in range for discrete spaces), and
every reply has a deadline: a worker that stops answering (stopped, or stuck in the
simulator) is killed and :class:`WorkerTimeout` raised.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from constrained_grpo.envs.safety.worker import ProtocolError, read_frame, write_frame

__all__ = [
    "SAFETY_PYTHON_ENV",
    "BridgeError",
    "BridgeUnavailable",
    "LegacyBridge",
    "LegacyEnvError",
    "WorkerCrashed",
    "WorkerTimeout",
    "find_safety_python",
    "record_paths",
    "space_from_desc",
]

#: Environment variable naming the Safety-Gymnasium interpreter; overrides the record.
SAFETY_PYTHON_ENV = "CGRPO_SAFETY_PYTHON"
#: Written by ``make safety`` after its check passed: ``{"python": ..., "versions": ...}``.
RECORD = Path(".venv-safety") / "cgrpo-safety.json"
WORKER_SCRIPT = Path(__file__).with_name("worker.py")
SAFETY_FIX = (
    "run `make safety` in the repository root (it builds .venv-safety: Python 3.10, "
    "gymnasium 0.28.1, numpy 1.23.5, mujoco 2.3.3, safety-gymnasium 1.0.0), or set "
    f"{SAFETY_PYTHON_ENV}=/path/to/python of an environment with safety-gymnasium 1.0.0"
)
_STDERR_TAIL = 4000
#: Default deadline of one reset or step reply, in seconds (a Safety-Gymnasium step takes
#: milliseconds, a batched reset well under a second).
STEP_TIMEOUT = 120.0


def _check_value(value: Any, space: gym.Space, batch: int, where: str) -> None:
    """Raise ``ValueError`` unless ``value`` is a batch of ``batch`` valid actions of ``space``."""
    if isinstance(space, spaces.Dict):
        if not isinstance(value, Mapping) or set(value) != set(space.spaces):
            raise ValueError(f"{where}: expected a dict with keys {sorted(space.spaces)}, got {type(value).__name__}")
        for key, sub in space.spaces.items():
            _check_value(value[key], sub, batch, f"{where}[{key!r}]")
        return
    if isinstance(space, spaces.Tuple):
        if not isinstance(value, (tuple, list)) or len(value) != len(space.spaces):
            raise ValueError(f"{where}: expected a tuple of {len(space.spaces)} parts, got {type(value).__name__}")
        for i, sub in enumerate(space.spaces):
            _check_value(value[i], sub, batch, f"{where}[{i}]")
        return
    arr = np.asarray(value)
    shape = (batch, *(space.shape or ()))
    if arr.shape != shape:
        raise ValueError(f"{where}: expected shape {shape} ({batch} env(s) x {space}), got {arr.shape}")
    kind = arr.dtype.kind
    if isinstance(space, spaces.Box):
        if kind not in "iuf":
            raise ValueError(f"{where}: actions of {space} must be real numbers, got dtype {arr.dtype}")
        values = arr.astype(np.float64)
        if not np.isfinite(values).all():
            raise ValueError(f"{where}: actions must be finite, got {arr.ravel()[~np.isfinite(values).ravel()][:3]}")
        low, high = np.broadcast_to(space.low, shape), np.broadcast_to(space.high, shape)
        slack = 1e-6 * np.maximum(1.0, np.abs(np.where(np.isfinite(high), high, 0.0)))
        out = (values < low - slack) | (values > high + slack)
        if out.any():
            raise ValueError(f"{where}: actions outside the bounds of {space}: {values[out][:3]}; clip them first")
        return
    if kind not in "iu" and not (kind == "b" and isinstance(space, spaces.MultiBinary)):
        raise ValueError(f"{where}: actions of {space} must be integers, got dtype {arr.dtype}")
    if isinstance(space, spaces.Discrete):
        low, high = int(space.start), int(space.start) + int(space.n) - 1
    elif isinstance(space, spaces.MultiDiscrete):
        low, high = np.broadcast_to(space.start, shape), np.broadcast_to(space.start + space.nvec - 1, shape)
    else:  # MultiBinary
        low, high = 0, 1
    if ((arr < low) | (arr > high)).any():
        raise ValueError(f"{where}: actions outside {space}: {arr[(arr < low) | (arr > high)][:3]}")


class BridgeError(RuntimeError):
    """Something went wrong on the far side of the bridge."""


class BridgeUnavailable(BridgeError):
    """The legacy interpreter is missing or cannot make the env; the message gives the fix."""


class WorkerCrashed(BridgeError):
    """The worker process died; the message carries its exit status and stderr."""


class WorkerTimeout(BridgeError):
    """The worker did not answer within the deadline; it has been killed."""


class LegacyEnvError(BridgeError):
    """The legacy env raised inside the worker; the message carries the remote traceback."""


def repo_root() -> Path:
    """The source tree this package is installed from (editable installs: the repository)."""
    return Path(__file__).resolve().parents[2]


def record_paths() -> list[Path]:
    """Where ``make safety``'s record is looked for: the repository's own ``.venv-safety`` only.

    Never the working directory: a record planted there would name any executable, which
    ``cgrpo envs`` would then run. Elsewhere, set ``CGRPO_SAFETY_PYTHON``.
    """
    return [(repo_root() / RECORD).absolute()]


def find_safety_python() -> str:
    """The Safety-Gymnasium interpreter: ``$CGRPO_SAFETY_PYTHON``, else ``make safety``'s record."""
    override = os.environ.get(SAFETY_PYTHON_ENV)
    if override:
        if not (os.path.isfile(override) and os.access(override, os.X_OK)):
            raise BridgeUnavailable(
                f"{SAFETY_PYTHON_ENV}={override!r} is not an executable file; point it at the python "
                "of an environment with safety-gymnasium 1.0.0, or unset it and run `make safety` "
                "in the repository root"
            )
        return override
    searched = record_paths()
    for path in searched:
        try:
            python = json.loads(path.read_text())["python"]
        except (OSError, ValueError, KeyError, TypeError):
            continue  # absent or unreadable: `make safety` rewrites it
        if os.path.isfile(python) and os.access(python, os.X_OK):
            return python
    raise BridgeUnavailable(
        "Safety-Gymnasium tasks run in a second Python environment, which is not built here "
        f"(no {SAFETY_PYTHON_ENV}, no usable record at {[str(p) for p in searched]}). To fix: {SAFETY_FIX}."
    )


def space_from_desc(desc: Mapping[str, Any]) -> gym.Space:
    """Rebuild a space described by the worker (``worker._space_desc``) as a gymnasium 1.x space."""
    kind = desc["type"]
    if kind == "Box":
        return spaces.Box(np.asarray(desc["low"]), np.asarray(desc["high"]), dtype=np.dtype(desc["dtype"]))
    if kind == "Discrete":
        return spaces.Discrete(desc["n"], start=desc["start"])
    if kind == "MultiDiscrete":
        return spaces.MultiDiscrete(np.asarray(desc["nvec"]), dtype=np.dtype(desc["dtype"]))
    if kind == "MultiBinary":
        return spaces.MultiBinary(desc["n"])
    if kind == "Dict":
        return spaces.Dict({k: space_from_desc(d) for k, d in desc["spaces"]})
    if kind == "Tuple":
        return spaces.Tuple([space_from_desc(d) for d in desc["spaces"]])
    raise BridgeError(f"the worker described an unknown space type {kind!r}")


def _stop(proc: subprocess.Popen, owner: int, grace: float) -> None:
    """End ``proc`` if this process started it: EOF first (the worker exits on it), then SIGKILL."""
    if os.getpid() != owner:  # a forked copy of the bridge must not stop its parent's worker
        return
    if proc.stdin is not None and not proc.stdin.closed:
        proc.stdin.close()
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()


class LegacyBridge:
    """``num_envs`` legacy envs in one worker process, made by ``maker(legacy_id, **legacy_kwargs)``.

    Args:
        legacy_id: the env id in the legacy suite, e.g. ``"SafetyPointGoal1-v0"``.
        python: the legacy interpreter; None means the Safety-Gymnasium one (:func:`find_safety_python`).
        maker: ``"module:function"`` that the worker calls to make each env.
        legacy_kwargs: keywords for ``maker`` (JSON values and numeric arrays only).
        pythonpath: folders put in front of the worker's ``sys.path`` (a suite outside site-packages).
        num_envs: envs in the batch; each request steps all of them.
        autoreset: same-step autoreset inside the worker (vector envs).
        startup_timeout: seconds allowed for the worker to import the suite and make the envs.
        step_timeout: seconds allowed for one reset or step reply (:class:`WorkerTimeout`).
    """

    def __init__(
        self,
        legacy_id: str,
        *,
        python: str | None = None,
        maker: str = "gymnasium:make",
        legacy_kwargs: Mapping[str, Any] | None = None,
        pythonpath: Sequence[str] = (),
        num_envs: int = 1,
        autoreset: bool = False,
        startup_timeout: float = 300.0,
        step_timeout: float = STEP_TIMEOUT,
    ):
        if not (step_timeout > 0 and np.isfinite(step_timeout)):
            raise ValueError(f"step_timeout={step_timeout!r} must be a finite number of seconds > 0")
        self.step_timeout = float(step_timeout)
        self.legacy_id = legacy_id
        self.python = python
        self.maker = maker
        self.legacy_kwargs = dict(legacy_kwargs or {})
        self.pythonpath = [str(p) for p in pythonpath]
        self.num_envs = int(num_envs)
        self.autoreset = bool(autoreset)
        self.startup_timeout = float(startup_timeout)
        #: How errors name the task; the env sets it to its registered id once it has one.
        self.label = legacy_id
        self.description: dict[str, Any] | None = None
        self._spaces: tuple[gym.Space, gym.Space] | None = None
        self._owner = os.getpid()
        self._proc: subprocess.Popen | None = None
        self._stderr: Any = None
        self._finalizer: weakref.finalize | None = None
        self._closed: str | None = None  # why no worker may start any more

    # ------------------------------------------------------------------ lifecycle
    @property
    def pid(self) -> int | None:
        """The worker's process id, or None while it is not running."""
        return None if self._proc is None else self._proc.pid

    def _fix(self) -> str:
        if self.python is None:
            return SAFETY_FIX
        module = self.maker.partition(":")[0]
        return f"check that {self.python} can `import {module}` and make {self.legacy_id!r}"

    def start(self) -> dict[str, Any]:
        """Start the worker and make the envs (idempotent); returns the worker's description."""
        if self.description is not None:
            return self.description
        if self._closed:
            raise BridgeError(f"{self.label}: {self._closed}; make a new env")
        python = self.python or find_safety_python()
        env = dict(os.environ)
        for var in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP"):
            # Ours point at this interpreter's packages (numpy 2), which the legacy one must not see.
            env.pop(var, None)
        self._stderr = tempfile.TemporaryFile(prefix="cgrpo-bridge-", suffix=".stderr")
        try:
            # -s: no user site-packages, whose wheels may break the legacy pins.
            self._proc = subprocess.Popen(
                [python, "-s", str(WORKER_SCRIPT)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self._stderr,
                bufsize=0,
                env=env,
            )
        except OSError as exc:
            self._stderr.close()
            raise BridgeUnavailable(f"{self.label}: cannot start {python!r} ({exc}). To fix: {self._fix()}.") from None
        self._owner = os.getpid()
        self._finalizer = weakref.finalize(self, _stop, self._proc, self._owner, 2.0)
        request = {
            "cmd": "make",
            "maker": self.maker,
            "env_id": self.legacy_id,
            "kwargs": self.legacy_kwargs,
            "num_envs": self.num_envs,
            "autoreset": self.autoreset,
            "pythonpath": self.pythonpath,
        }
        try:
            description = self.request(request, timeout=self.startup_timeout)
            self._spaces = (
                space_from_desc(description["observation_space"]),
                space_from_desc(description["action_space"]),
            )
            self.description = description
        except (LegacyEnvError, WorkerCrashed) as exc:
            self.close()
            raise BridgeUnavailable(f"{exc}\nTo fix: {self._fix()}.") from None
        except TimeoutError:
            tail = self._stderr_tail()
            self.close()
            raise BridgeUnavailable(
                f"{self.label}: the worker ({python}) did not make the env within {self.startup_timeout:.0f} s; "
                f"its stderr ends with:\n{tail}"
            ) from None
        except BaseException:
            self.close()
            raise
        return self.description

    def close(self, timeout: float = 5.0) -> None:
        """Ask the worker to close its envs and exit; kill it if it does not within ``timeout``."""
        self._closed = self._closed or "the env is closed"
        proc, self._proc = self._proc, None
        if proc is None or os.getpid() != self._owner:
            return  # nothing running, or a forked copy: the worker belongs to the parent
        if proc.poll() is None:
            try:
                write_frame(proc.stdin.fileno(), {"cmd": "close"})
                read_frame(proc.stdout.fileno(), timeout=timeout)
            except (OSError, EOFError, ProtocolError, TimeoutError):
                pass  # it is going away anyway; _stop makes sure
        if self._finalizer is not None:
            self._finalizer.detach()
        _stop(proc, os.getpid(), timeout)
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    # ------------------------------------------------------------------ requests
    def _stderr_tail(self) -> str:
        if self._stderr is None:
            return "(no stderr captured)"
        self._stderr.flush()
        self._stderr.seek(0, os.SEEK_END)
        size = self._stderr.tell()
        self._stderr.seek(max(0, size - _STDERR_TAIL))
        text = self._stderr.read().decode(errors="replace").strip()
        return text or "(empty)"

    def _crashed(self, cause: BaseException) -> WorkerCrashed:
        proc = self._proc
        code = None
        if proc is not None:
            try:
                code = proc.wait(5.0)
            except subprocess.TimeoutExpired:  # alive but talking nonsense: end it
                proc.kill()
                code = proc.wait()
        how = "?" if code is None else (
            f"signal {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
        )
        tail = self._stderr_tail()
        python = self.python or "the Safety-Gymnasium interpreter"
        err = WorkerCrashed(
            f"the bridge worker for {self.label} ({python}, pid {None if proc is None else proc.pid}) "
            f"died ({how}; {type(cause).__name__}: {cause}). Its stderr ends with:\n{tail}"
        )
        self._proc = None
        if self._finalizer is not None:
            self._finalizer.detach()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None
        self.description = None
        self._closed = "its bridge worker died earlier (the first error says why)"
        return err

    def request(self, msg: Mapping[str, Any], timeout: float | None = None) -> Any:
        """Send one request and return the worker's answer; raise on a crash or a remote error."""
        proc = self._proc
        if proc is None:
            raise BridgeError(f"{self.label}: the bridge worker is not running (closed, or crashed before)")
        try:
            write_frame(proc.stdin.fileno(), msg)
            reply = read_frame(proc.stdout.fileno(), timeout=timeout)
        except (BrokenPipeError, EOFError, ProtocolError, ConnectionResetError) as exc:
            raise self._crashed(exc) from None
        if "error" in reply:
            raise LegacyEnvError(
                f"{self.label}: {msg.get('cmd')!r} failed inside the bridge worker "
                f"({self.maker} {self.legacy_id!r}); the worker's traceback:\n{reply['error']}"
            )
        return reply["ok"]

    # ------------------------------------------------------------------ env calls
    @property
    def spaces(self) -> tuple[gym.Space, gym.Space]:
        """One env's observation and action space (starts the worker: only it knows them)."""
        if self._spaces is None:
            self.start()
        assert self._spaces is not None
        return self._spaces

    def reset(self, seeds: Sequence[int | None], options: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Reset env ``i`` with ``seeds[i]``; returns ``obs`` (batched) and ``infos`` (one per env)."""
        self.start()
        return self._timed({"cmd": "reset", "seeds": [None if s is None else int(s) for s in seeds],
                            "options": None if options is None else dict(options)})

    def step(self, actions: Any) -> dict[str, Any]:
        """Step every env with its row of ``actions``; see ``worker.LegacyBatch.step`` for the reply.

        Raises ``ValueError`` (nothing is sent) unless ``actions`` is a batch of
        ``num_envs`` valid actions of the action space.
        """
        self.start()
        _check_value(actions, self.spaces[1], self.num_envs, f"{self.label}: step")
        return self._timed({"cmd": "step", "actions": actions})

    def _timed(self, msg: Mapping[str, Any]) -> Any:
        """:meth:`request` with the step deadline; a late worker is killed (its replies are out of step)."""
        try:
            return self.request(msg, timeout=self.step_timeout)
        except TimeoutError:
            proc = self._proc
            pid = None if proc is None else proc.pid
            if proc is not None and os.getpid() == self._owner:
                proc.kill()
            err = self._crashed(TimeoutError(f"no reply within {self.step_timeout:g} s"))
            raise WorkerTimeout(
                f"{self.label}: the bridge worker (pid {pid}) did not answer {msg.get('cmd')!r} within "
                f"{self.step_timeout:g} s (stopped, or stuck in the simulator), so it was killed; make a "
                f"new env, or raise step_timeout.\n{err}"
            ) from None
