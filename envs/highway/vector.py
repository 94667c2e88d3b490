"""Many highway tasks stepped across worker processes: the vector twin of ``HighwayTaskEnv``.

highway-env is pure Python, so the only way to use several cores is several processes.
``HighwayVectorEnv`` splits its ``num_envs`` copies into ``num_workers`` contiguous
chunks, one process each; a worker steps its chunk in turn and sends back batched
arrays, so a GRPO group of 64 episodes costs ``num_workers`` processes, not 64
(gymnasium's ``AsyncVectorEnv`` would start one per copy).

Same-step autoreset (pinned): when copy ``i`` ends an episode, the returned observation
is the first of its next episode, ``info["final_obs"][i]`` holds the last one and
``info["_final_obs"][i]`` is True. ``info["costs"][i]`` is always the cost of the step
just taken, also for a copy that ended (the collision cost arrives on that step), as in
the gridworld's ``BatchedGridWorld``. Copy ``i`` reset with seed ``s_i`` follows exactly
the trajectory of ``HighwayTaskEnv`` reset with ``s_i`` (tested). ``info`` of a step::

    {"costs": float64 (B, K), "cost": float64 (B,), "speed": float64 (B,),
     "crashed": bool (B,), "final_obs": float32 (B, D), "_final_obs": bool (B,)}
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import sys
import traceback
from collections.abc import Iterator
from multiprocessing.connection import Connection
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from constrained_grpo.constraints import Constraint
from constrained_grpo.envs.highway.env import HighwayTaskEnv
from constrained_grpo.envs.highway.options import HighwayOptions

__all__ = ["HighwayVectorEnv"]


def _default_start_method() -> str:
    """``forkserver`` where available: forking the caller (often multi-threaded, with torch
    loaded) can deadlock a child; ``spawn`` elsewhere."""
    return "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"


@contextlib.contextmanager
def _unreadable_main_hidden() -> Iterator[None]:
    """Hide ``__main__.__file__`` while workers start, when it names no file.

    A ``spawn`` or ``forkserver`` child re-runs the parent's main script from the path in
    ``__main__.__file__`` (``multiprocessing.spawn.get_preparation_data``). A program fed
    on stdin (``python - <<EOF``) has ``__file__ == "<stdin>"``, which the child cannot
    open: it dies and the parent reads EOF. The workers need nothing from ``__main__``
    (their target is :func:`_worker` of this module, their arguments plain data), so
    such a path is left out of what the child is told to import; a real file is kept.
    """
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    spec_name = getattr(getattr(main, "__spec__", None), "name", None)
    if main is None or spec_name is not None or not isinstance(path, str):
        yield
        return
    full = path if os.path.isabs(path) else os.path.join(mp.process.ORIGINAL_DIR or os.getcwd(), path)
    if os.path.isfile(full):
        yield
        return
    del main.__file__
    try:
        yield
    finally:
        main.__file__ = path


def _usable_cpus() -> int:
    """CPUs this process may run on (its affinity, e.g. under ``taskset``), else the count."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


class _Chunk:
    """A few ``HighwayTaskEnv`` copies stepped in turn (runs inside a worker, or in-process)."""

    def __init__(self, n: int, env_kwargs: dict[str, Any]):
        self.envs = [HighwayTaskEnv(**env_kwargs) for _ in range(n)]

    def spaces(self) -> tuple[gym.Space, gym.Space]:
        return self.envs[0].observation_space, self.envs[0].action_space

    def reset(self, seeds: list[int | None]) -> np.ndarray:
        return np.stack([env.reset(seed=s)[0] for env, s in zip(self.envs, seeds)])

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, ...]:
        m = len(self.envs)
        obs = np.empty((m, *self.envs[0].observation_space.shape), dtype=np.float32)
        final = np.zeros_like(obs)
        rewards = np.empty(m)
        terminated = np.empty(m, dtype=bool)
        truncated = np.empty(m, dtype=bool)
        costs = np.empty((m, len(self.envs[0].constraints)))
        speed = np.empty(m)
        crashed = np.empty(m, dtype=bool)
        for i, (env, action) in enumerate(zip(self.envs, actions)):
            o, rewards[i], terminated[i], truncated[i], info = env.step(action)
            costs[i], speed[i], crashed[i] = info["costs"], info["speed"], info["crashed"]
            if terminated[i] or truncated[i]:
                final[i] = o
                o, _ = env.reset()
            obs[i] = o
        return obs, rewards, terminated, truncated, costs, speed, crashed, final

    def get_attr(self, name: str) -> list[Any]:
        return [getattr(env, name) for env in self.envs]

    def close(self) -> None:
        for env in self.envs:
            env.close()


def _worker(conn: Connection, n: int, env_kwargs: dict[str, Any]) -> None:
    """A worker process: builds its chunk, then serves ``(command, payload)`` requests."""
    chunk = None
    try:
        chunk = _Chunk(n, env_kwargs)
        conn.send(("ok", chunk.spaces()))
        while True:
            command, payload = conn.recv()
            if command == "close":
                break
            result = getattr(chunk, command)(*payload)
            conn.send(("ok", result))
    except (EOFError, KeyboardInterrupt):
        pass
    except Exception:  # report to the parent, which raises it
        try:
            conn.send(("error", traceback.format_exc()))
        except (BrokenPipeError, OSError):
            pass
    finally:
        if chunk is not None:
            chunk.close()
        conn.close()


class HighwayVectorEnv(gym.vector.VectorEnv):
    """``num_envs`` copies of ``HighwayTaskEnv(**env_kwargs)`` in ``num_workers`` processes.

    Args:
        num_envs: number of copies ``B``.
        num_workers: worker processes (default: ``B`` or the CPUs this process may use,
            whichever is fewer); ``0`` or ``1``
            steps every copy in this process.
        context: multiprocessing start method (default: ``forkserver`` where available,
            else ``spawn``; not ``fork``, which is unsafe in a multi-threaded parent).
        **env_kwargs: the task keywords of ``HighwayTaskEnv``.

    ``reset(seed=s)`` with an int seeds copy ``i`` with ``s + i`` (gymnasium's vector
    convention); a list gives one seed per copy, so ``[s] * G`` makes a GRPO group.
    """

    metadata = {"autoreset_mode": AutoresetMode.SAME_STEP, "render_modes": []}

    def __init__(
        self, num_envs: int = 1, num_workers: int | None = None, context: str | None = None, **env_kwargs: Any
    ):
        if not isinstance(num_envs, (int, np.integer)) or num_envs < 1:
            raise ValueError(f"num_envs must be a positive integer, got {num_envs!r}")
        if num_workers is None:
            num_workers = min(int(num_envs), _usable_cpus())
        if not isinstance(num_workers, (int, np.integer)) or num_workers < 0:
            raise ValueError(f"num_workers must be an integer >= 0 (0 or 1: in-process), got {num_workers!r}")
        env_kwargs.pop("max_episode_steps", None)  # gymnasium's make_vec may add it; the task has its own limit
        self.num_envs = int(num_envs)
        self.env_kwargs = dict(env_kwargs)
        self.render_mode = None
        workers = max(1, min(int(num_workers), self.num_envs))
        sizes = [len(part) for part in np.array_split(np.arange(self.num_envs), workers)]
        self._bounds = np.cumsum([0, *sizes])
        self._local: _Chunk | None = None
        self._conns: list[Connection] = []
        self._procs: list[mp.process.BaseProcess] = []
        self.closed = False
        if num_workers <= 1:
            self._local = _Chunk(self.num_envs, self.env_kwargs)
            obs_space, act_space = self._local.spaces()
        else:
            ctx = mp.get_context(context or _default_start_method())
            if ctx.get_start_method() == "forkserver":
                # The server imports highway-env once; each worker then forks from it quickly.
                ctx.set_forkserver_preload([__name__])
            with _unreadable_main_hidden():
                for size in sizes:
                    parent, child = ctx.Pipe()
                    proc = ctx.Process(target=_worker, args=(child, size, self.env_kwargs), daemon=True)
                    proc.start()
                    child.close()
                    self._conns.append(parent)
                    self._procs.append(proc)
            obs_space, act_space = self._gather()[0]
        self.single_observation_space = obs_space
        self.single_action_space = act_space
        self.observation_space = batch_space(obs_space, self.num_envs)
        self.action_space = batch_space(act_space, self.num_envs)
        task_kwargs = {k: v for k, v in self.env_kwargs.items() if k != "render_mode"}
        self.constraints: tuple[Constraint, ...] = HighwayOptions(**task_kwargs).constraints

    # -- plumbing -------------------------------------------------------------------------
    def _gather(self) -> list[Any]:
        results = []
        for conn in self._conns:
            try:
                status, payload = conn.recv()
            except EOFError:
                self.close()
                raise RuntimeError(
                    "a HighwayVectorEnv worker process exited without answering (its traceback, if "
                    "any, is printed above); pass num_workers=0 to step every copy in this process"
                ) from None
            if status == "error":
                self.close()
                raise RuntimeError(f"a HighwayVectorEnv worker failed:\n{payload}")
            results.append(payload)
        return results

    def _call(self, command: str, per_chunk: list[tuple[Any, ...]]) -> list[Any]:
        if self._local is not None:
            return [getattr(self._local, command)(*per_chunk[0])]
        for conn, payload in zip(self._conns, per_chunk):
            conn.send((command, payload))
        return self._gather()

    def _split(self, values: Any) -> list[Any]:
        if self._local is not None:
            return [values]
        return [values[a:b] for a, b in zip(self._bounds[:-1], self._bounds[1:])]

    # -- the vector API -------------------------------------------------------------------
    def reset(self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None):
        if options:
            raise ValueError(f"reset options {sorted(options)} are not supported by the highway tasks")
        if seed is None:
            seeds: list[int | None] = [None] * self.num_envs
        elif isinstance(seed, (int, np.integer)):
            seeds = [int(seed) + i for i in range(self.num_envs)]
        else:
            seeds = [None if s is None else int(s) for s in seed]
            if len(seeds) != self.num_envs:
                raise ValueError(f"got {len(seeds)} seeds for num_envs={self.num_envs}; give one per copy")
        parts = self._call("reset", [(chunk,) for chunk in self._split(seeds)])
        return np.concatenate(parts), {}

    def step(self, actions: Any):
        actions = np.asarray(actions)
        if actions.shape[:1] != (self.num_envs,):
            raise ValueError(f"actions must have a leading dimension num_envs={self.num_envs}, got shape {actions.shape}")
        parts = self._call("step", [(chunk,) for chunk in self._split(actions)])
        obs, rewards, terminated, truncated, costs, speed, crashed, final = (np.concatenate(x) for x in zip(*parts))
        info: dict[str, Any] = {"costs": costs, "cost": costs.sum(axis=1), "speed": speed, "crashed": crashed}
        done = terminated | truncated
        if done.any():
            info["final_obs"] = final
            info["_final_obs"] = done
        return obs, rewards, terminated, truncated, info

    def get_attr(self, name: str) -> tuple[Any, ...]:
        """``getattr(env, name)`` of every copy (pickled across processes)."""
        parts = self._call("get_attr", [(name,)] * max(1, len(self._conns)))
        return tuple(x for part in parts for x in part)

    def close_extras(self, **kwargs: Any) -> None:
        if self._local is not None:
            self._local.close()
            self._local = None
        for conn in self._conns:
            try:
                conn.send(("close", ()))
            except (BrokenPipeError, OSError):
                pass
        for proc in self._procs:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.terminate()
        for conn in self._conns:
            conn.close()
        self._conns, self._procs = [], []
