"""The bridge worker: runs legacy-gymnasium envs in their own interpreter, behind a pipe.

This file is both a module and a script, and it imports nothing from constrained_grpo:

* our process imports it (``constrained_grpo.envs.safety.worker``) for the wire format,
  :func:`write_frame` / :func:`read_frame`;
* the legacy interpreter (e.g. ``.venv-safety``: Python 3.10, gymnasium 0.28, numpy 1.23)
  runs it as ``python worker.py`` and serves requests on stdin/stdout until EOF.

So it must run unmodified on Python >= 3.8 with numpy 1.x or 2.x, and with or without
gymnasium installed (the module-level imports are the standard library and numpy only).

Wire format. A frame is ``<u64 payload length><payload>``; a payload is
``<u32 header length><header: UTF-8 JSON><padding><blob><padding><blob>...``. The header
holds the message as a JSON tree in which arrays are ``{"__nd__": i}`` (described by
``header["blobs"][i] = [dtype.str, shape]``: raw C-order bytes, 16-byte aligned) and tuples
are ``{"__tuple__": [...]}``. Arrays never go through pickle: a numpy-2 pickle does not
load under numpy 1.23, and raw bytes plus dtype and shape load under both, without a copy.

Requests (``{"cmd": ...}``) and replies (``{"ok": ...}`` or ``{"error": traceback}``):

* ``make``: ``maker`` ("module:function"), ``env_id``, ``kwargs``, ``num_envs``,
  ``autoreset``, ``pythonpath`` -> the spaces, versions and legacy spec facts;
* ``reset``: ``seeds`` (one int or None per env), ``options`` -> ``obs`` (batched), ``infos``;
* ``step``: ``actions`` (batched) -> ``obs``, ``reward`` (B,), ``cost`` (B, K),
  ``terminated``, ``truncated``, ``infos`` and, when ``autoreset`` and an env finished,
  ``final_obs`` / ``final_infos`` (same-step autoreset: ``obs`` already starts the next episode);
* ``close``: closes the envs, replies, exits;
* ``echo``: replies with ``msg`` as received (a transport check).
"""

from __future__ import annotations

import importlib
import json
import os
import platform
import select
import signal
import struct
import sys
import threading
import time
import traceback
from typing import Any, Callable, Dict, List, Optional

import numpy as np

__all__ = ["ProtocolError", "decode", "encode", "read_frame", "write_frame"]

_FRAME = struct.Struct("<Q")
_HEADER = struct.Struct("<I")
_ALIGN = 16
_ND, _TUPLE = "__nd__", "__tuple__"
#: Array kinds that cross as raw bytes: bool, signed and unsigned int, float, complex.
_KINDS = "biufc"


class ProtocolError(RuntimeError):
    """A frame or message that does not follow the wire format."""


def _pad(n: int) -> int:
    return -n % _ALIGN


_PLAIN = frozenset([float, int, str, bool, type(None)])
_JSON_OUT = json.JSONEncoder(separators=(",", ":"))  # built once: json.dumps(separators=...) builds one per call
_JSON_IN = json.JSONDecoder()
_DTYPES: Dict[str, np.dtype] = {}


def _pack(obj: Any, blobs: List[np.ndarray]) -> Any:
    """The JSON tree of ``obj``, with its arrays moved to ``blobs``."""
    kind = type(obj)  # exact-type checks first: this runs for every value of every step
    if kind in _PLAIN:
        return obj
    if kind is np.ndarray:
        if obj.dtype.kind not in _KINDS:
            raise TypeError(
                f"cannot send an array of dtype {obj.dtype} across the bridge; only bool, "
                "integer, float and complex arrays cross (as raw bytes)"
            )
        blobs.append(obj)  # tobytes() below writes C order whatever the strides
        return {_ND: len(blobs) - 1}
    if isinstance(obj, dict):
        out = {}
        for key, value in obj.items():
            if type(key) is not str or key in (_ND, _TUPLE):
                raise TypeError(f"cannot send dict key {key!r} across the bridge; keys must be strings")
            out[key] = _pack(value, blobs)
        return out
    if isinstance(obj, list):
        return [_pack(v, blobs) for v in obj]
    if isinstance(obj, tuple):
        return {_TUPLE: [_pack(v, blobs) for v in obj]}
    if isinstance(obj, np.generic) and obj.dtype.kind in _KINDS:  # numpy scalars: JSON numbers (repr is exact)
        return obj.item()
    if isinstance(obj, (bool, int, float, str)):  # subclasses, e.g. enum.IntEnum
        return obj
    if isinstance(obj, np.ndarray):
        return _pack(np.asarray(obj), blobs)
    raise TypeError(
        f"cannot send a {type(obj).__name__} across the bridge; messages hold None, bool, int, "
        "float, str, lists, tuples, str-keyed dicts and numeric numpy arrays"
    )


def _unpack(obj: Any, arrays: List[np.ndarray]) -> Any:
    kind = type(obj)
    if kind is dict:
        if _ND in obj:
            return arrays[obj[_ND]]
        if _TUPLE in obj:
            return tuple(_unpack(v, arrays) for v in obj[_TUPLE])
        return {k: _unpack(v, arrays) for k, v in obj.items()}
    if kind is list:
        return [_unpack(v, arrays) for v in obj]
    return obj


def encode(msg: Any) -> List[bytes]:
    """The payload of ``msg`` as a list of byte chunks (header, blobs, padding)."""
    blobs: List[np.ndarray] = []
    tree = _pack(msg, blobs)
    header = _JSON_OUT.encode({"msg": tree, "blobs": [[b.dtype.str, b.shape] for b in blobs]}).encode()
    chunks = [_HEADER.pack(len(header)), header, bytes(_pad(_HEADER.size + len(header)))]
    for b in blobs:
        raw = b.tobytes()  # one copy: the pipe write needs bytes anyway
        chunks += [raw, bytes(_pad(len(raw)))]
    return chunks


def decode(payload: bytearray) -> Any:
    """The message in ``payload``. Arrays are writable views of ``payload`` (no copy)."""
    (hlen,) = _HEADER.unpack_from(payload, 0)
    start = _HEADER.size
    try:
        header = _JSON_IN.decode(payload[start:start + hlen].decode())
    except ValueError as exc:
        raise ProtocolError(f"bad frame header: {exc}") from None
    offset = start + hlen
    offset += _pad(offset)
    arrays = []
    for dtype_str, shape in header["blobs"]:
        dtype = _DTYPES.get(dtype_str)
        if dtype is None:
            dtype = _DTYPES[dtype_str] = np.dtype(dtype_str)
        count = 1
        for n in shape:
            count *= n
        arrays.append(np.frombuffer(payload, dtype=dtype, count=count, offset=offset).reshape(shape))
        nbytes = count * dtype.itemsize
        offset += nbytes + _pad(nbytes)
    return _unpack(header["msg"], arrays)


def write_frame(fd: int, msg: Any) -> None:
    """Write ``msg`` as one frame to the file descriptor ``fd``."""
    chunks = encode(msg)
    data = b"".join([_FRAME.pack(sum(len(c) for c in chunks))] + chunks)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _read_exact(fd: int, n: int, deadline: Optional[float]) -> Optional[bytearray]:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                raise TimeoutError(f"no complete reply within the time limit ({got} of {n} bytes)")
        k = os.readv(fd, [view[got:]])
        if k == 0:
            if got == 0:
                return None
            raise ProtocolError(f"pipe closed inside a frame ({got} of {n} bytes)")
        got += k
    return buf


def read_frame(fd: int, timeout: Optional[float] = None) -> Any:
    """Read one message from ``fd``; ``EOFError`` if the pipe is closed between frames."""
    deadline = None if timeout is None else time.monotonic() + timeout
    head = _read_exact(fd, _FRAME.size, deadline)
    if head is None:
        raise EOFError("pipe closed")
    (n,) = _FRAME.unpack(head)
    payload = _read_exact(fd, n, deadline)
    if payload is None:
        raise ProtocolError("pipe closed after a frame length")
    return decode(payload)


# --------------------------------------------------------------------------- worker side


def _space_desc(space: Any) -> Dict[str, Any]:
    """A legacy gymnasium space as a plain tree that our side rebuilds (``bridge.space_from_desc``)."""
    kind = type(space).__name__
    if kind == "Box":
        return {"type": "Box", "low": space.low, "high": space.high, "dtype": np.dtype(space.dtype).str}
    if kind == "Discrete":
        return {"type": "Discrete", "n": int(space.n), "start": int(getattr(space, "start", 0))}
    if kind == "MultiDiscrete":
        return {"type": "MultiDiscrete", "nvec": np.asarray(space.nvec), "dtype": np.dtype(space.dtype).str}
    if kind == "MultiBinary":
        return {"type": "MultiBinary", "n": np.asarray(space.n).tolist()}
    if kind == "Dict":
        return {"type": "Dict", "spaces": [[k, _space_desc(s)] for k, s in space.spaces.items()]}
    if kind == "Tuple":
        return {"type": "Tuple", "spaces": [_space_desc(s) for s in space.spaces]}
    raise TypeError(f"the bridge cannot carry a {kind} space; supported: Box, Discrete, "
                    "MultiDiscrete, MultiBinary, Dict, Tuple")


def _stack(items: List[Any]) -> Any:
    """Batch per-env values (arrays, numbers, dicts, tuples) along a new first axis."""
    first = items[0]
    if isinstance(first, dict):
        return {k: _stack([it[k] for it in items]) for k in first}
    if isinstance(first, tuple):
        return tuple(_stack([it[j] for it in items]) for j in range(len(first)))
    return np.stack([np.asarray(it) for it in items])


def _index(batch: Any, i: int) -> Any:
    if isinstance(batch, dict):
        return {k: _index(v, i) for k, v in batch.items()}
    if isinstance(batch, tuple):
        return tuple(_index(v, i) for v in batch)
    return batch[i]


def _zeros_like(batch: Any) -> Any:
    if isinstance(batch, dict):
        return {k: _zeros_like(v) for k, v in batch.items()}
    if isinstance(batch, tuple):
        return tuple(_zeros_like(v) for v in batch)
    return np.zeros_like(batch)


def _set_row(batch: Any, i: int, value: Any) -> None:
    if isinstance(batch, dict):
        for k in batch:
            _set_row(batch[k], i, value[k])
    elif isinstance(batch, tuple):
        for b, v in zip(batch, value):
            _set_row(b, i, v)
    else:
        batch[i] = value


def _load(path: str) -> Callable[..., Any]:
    module, _, name = path.partition(":")
    if not name:
        raise ValueError(f"maker must be 'module:function', got {path!r}")
    obj: Any = importlib.import_module(module)
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


class LegacyBatch:
    """``num_envs`` legacy envs made by one maker, stepped in a loop, one message per step."""

    def __init__(self, maker: str, env_id: str, kwargs: Dict[str, Any], num_envs: int, autoreset: bool):
        make = _load(maker)
        self.env_id = env_id
        self.envs = [make(env_id, **kwargs) for _ in range(num_envs)]
        self.autoreset = autoreset
        self.num_costs: Optional[int] = None

    def describe(self) -> Dict[str, Any]:
        env = self.envs[0]
        spec = getattr(env, "spec", None)
        versions = {"python": platform.python_version(), "numpy": np.__version__, "pid": os.getpid()}
        for name in ("gymnasium", "safety_gymnasium", "mujoco"):
            mod = sys.modules.get(name)
            if mod is not None:
                versions[name] = getattr(mod, "__version__", "?")
        return {
            "observation_space": _space_desc(env.observation_space),
            "action_space": _space_desc(env.action_space),
            "max_episode_steps": getattr(spec, "max_episode_steps", None),
            "render_fps": (getattr(env, "metadata", None) or {}).get("render_fps"),
            "versions": versions,
        }

    def reset(self, seeds: List[Optional[int]], options: Optional[Dict[str, Any]]) -> Dict[str, Any]:
        results = [env.reset(seed=s, options=options) for env, s in zip(self.envs, seeds)]
        return {"obs": _stack([r[0] for r in results]), "infos": [r[1] for r in results]}

    def _cost(self, out: tuple) -> np.ndarray:
        """The step's cost vector from a 6-tuple, or from ``info`` of a 5-tuple."""
        if len(out) == 6:
            cost = out[2]
        elif len(out) == 5 and ("costs" in out[4] or "cost" in out[4]):
            cost = out[4]["costs"] if "costs" in out[4] else out[4]["cost"]
        else:
            raise ValueError(
                f"{self.env_id}: step() returned a {len(out)}-tuple without a cost; the bridge reads "
                "Safety-Gymnasium's 6-tuple (obs, reward, cost, terminated, truncated, info) or a "
                "5-tuple with info['costs'] or info['cost']"
            )
        return np.atleast_1d(np.asarray(cost, dtype=np.float64))

    def step(self, actions: Any) -> Dict[str, Any]:
        n = len(self.envs)
        obs: List[Any] = [None] * n
        reward = np.zeros(n)
        terminated = np.zeros(n, dtype=bool)
        truncated = np.zeros(n, dtype=bool)
        costs: List[np.ndarray] = []
        infos: List[Dict[str, Any]] = [{}] * n
        finals: Dict[int, Any] = {}
        for i, env in enumerate(self.envs):
            out = env.step(_index(actions, i))
            costs.append(self._cost(out))
            obs[i], reward[i] = out[0], out[1]
            terminated[i], truncated[i], infos[i] = out[-3], out[-2], out[-1]
            if self.autoreset and (terminated[i] or truncated[i]):
                finals[i] = (obs[i], infos[i])
                obs[i], infos[i] = env.reset()
        cost = np.stack(costs)
        if self.num_costs is None:
            self.num_costs = cost.shape[1]
        elif cost.shape[1] != self.num_costs:
            raise ValueError(f"{self.env_id}: the cost vector changed length from {self.num_costs} to {cost.shape[1]}")
        reply = {"obs": _stack(obs), "reward": reward, "cost": cost, "terminated": terminated,
                 "truncated": truncated, "infos": infos}
        if finals:
            final_obs = _zeros_like(reply["obs"])
            final_infos: List[Optional[Dict[str, Any]]] = [None] * n
            for i, (o, info) in finals.items():
                _set_row(final_obs, i, o)
                final_infos[i] = info
            reply["final_obs"], reply["final_infos"] = final_obs, final_infos
        return reply

    def close(self) -> None:
        for env in self.envs:
            env.close()


def _watch_parent(ppid: int, period: float = 0.5) -> None:
    """Exit as soon as the parent dies.

    The usual signal is EOF on stdin, but a child that the parent forked keeps the pipe's
    write end open; the parent pid changing (reparenting) catches that case too. prctl's
    PR_SET_PDEATHSIG is not used: it fires when the *thread* that started us exits, which
    would kill a worker made from a short-lived thread (a thread pool, say).
    """
    while True:
        time.sleep(period)
        if os.getppid() != ppid:
            os._exit(0)


def serve(fd_in: int, fd_out: int) -> None:
    """Answer requests on ``fd_in`` with replies on ``fd_out`` until ``close`` or EOF."""
    batch: Optional[LegacyBatch] = None
    while True:
        try:
            req = read_frame(fd_in)
        except EOFError:  # the parent closed the pipe or died
            break
        cmd = req.get("cmd")
        try:
            if cmd == "echo":  # the transport round trip, e.g. across numpy versions (tests)
                reply = {"ok": req.get("msg")}
            elif cmd == "make":
                for path in reversed(req.get("pythonpath") or []):
                    sys.path.insert(0, path)
                batch = LegacyBatch(req["maker"], req["env_id"], req.get("kwargs") or {},
                                    int(req["num_envs"]), bool(req["autoreset"]))
                reply: Dict[str, Any] = {"ok": batch.describe()}
            elif batch is None:
                raise RuntimeError(f"request {cmd!r} before 'make'")
            elif cmd == "step":
                reply = {"ok": batch.step(req["actions"])}
            elif cmd == "reset":
                reply = {"ok": batch.reset(req["seeds"], req.get("options"))}
            elif cmd == "close":
                batch.close()
                write_frame(fd_out, {"ok": None})
                return
            else:
                raise ValueError(f"unknown request {cmd!r}")
        except Exception:  # the env's own error goes back to the caller, who raises it
            reply = {"error": traceback.format_exc()}
        try:
            write_frame(fd_out, reply)
        except TypeError:  # an info value with no wire form: encoding fails before any byte is sent
            write_frame(fd_out, {"error": traceback.format_exc()})


def _check(maker: str, env_id: str, record: str) -> None:
    """Make ``env_id``, reset and step it once, then write the interpreter record (``make safety``)."""
    batch = LegacyBatch(maker, env_id, {}, 1, True)
    desc = batch.describe()
    batch.reset([0], None)
    batch.step(_stack([batch.envs[0].action_space.sample()]))
    batch.close()
    info = {"python": os.path.abspath(sys.executable), "checked": f"{maker} {env_id}",
            "versions": desc["versions"], "created": time.strftime("%Y-%m-%dT%H:%M:%S")}
    info["versions"].pop("pid")
    tmp = record + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(info, fh, indent=2)
    os.replace(tmp, record)
    print(f"bridge check passed: {env_id} made and stepped with {info['python']} {info['versions']}")


def main(argv: List[str]) -> int:
    if argv[:1] == ["--check"]:
        if len(argv) != 4:
            print("usage: worker.py --check MAKER ENV_ID RECORD_JSON", file=sys.stderr)
            return 2
        _check(argv[1], argv[2], argv[3])
        return 0
    # The frames own the real stdout; anything the legacy code prints (Python or C) goes
    # to stderr instead, where it cannot corrupt the stream.
    # Likewise the frames own the real stdin, and a stray read gets /dev/null's EOF.
    fd_in, fd_out = os.dup(0), os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    # Ctrl-C reaches the whole process group; the parent handles it and closes us.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_watch_parent, args=(os.getppid(),), daemon=True).start()
    serve(fd_in, fd_out)
    return 0


if __name__ == "__main__":
    # Drop this file's folder from sys.path: its sibling modules are for the other interpreter.
    if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
        del sys.path[0]
    sys.exit(main(sys.argv[1:]))
