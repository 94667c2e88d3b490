"""``cgrpo`` run in the test's own process: the answer of :func:`constrained_grpo.cli.main` as a
``subprocess.CompletedProcess``, without a new interpreter (and its torch import) per call.

What a command changes in the process is put back afterwards: environment variables, the
working folder, ``sys.path``, the modules and algorithms a user module brought in, gymnasium's
registry, signal handlers and torch's thread count. Output is captured at the file descriptors,
so that what sweep workers print is read too. The subprocess smoke tests (one per verb) keep
the installed entry point honest.
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path


@contextlib.contextmanager
def _captured() -> Iterator[tuple[io.StringIO, io.StringIO]]:
    """sys.stdout/sys.stderr and file descriptors 1 and 2 into two buffers, filled on exit."""
    out_buf, err_buf = io.StringIO(), io.StringIO()
    files = [tempfile.TemporaryFile(mode="w+b"), tempfile.TemporaryFile(mode="w+b")]
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    py = (sys.stdout, sys.stderr)
    try:
        os.dup2(files[0].fileno(), 1)
        os.dup2(files[1].fileno(), 2)
        sys.stdout = io.TextIOWrapper(os.fdopen(os.dup(1), "wb"), encoding="utf-8", line_buffering=True)
        sys.stderr = io.TextIOWrapper(os.fdopen(os.dup(2), "wb"), encoding="utf-8", line_buffering=True)
        yield out_buf, err_buf
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
                stream.close()
        sys.stdout, sys.stderr = py
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in saved:
            os.close(fd)
        for buf, fh in zip((out_buf, err_buf), files):
            fh.seek(0)
            buf.write(fh.read().decode("utf-8", errors="replace"))
            fh.close()


def run_cgrpo(*args: str, cwd: Path | None = None, env: Mapping[str, str] | None = None,
              pythonpath: Sequence[str | Path] = ()) -> subprocess.CompletedProcess[str]:
    """``cgrpo ARGS`` in this process, in folder ``cwd``, with ``env`` over the environment and
    ``pythonpath`` (and ``env['PYTHONPATH']``) before ``sys.path``, as a child would see them."""
    import gymnasium as gym
    import torch

    from constrained_grpo import registry
    from constrained_grpo.cli import main

    # The built-in tasks and algorithms register on first use: in before the snapshot, so that
    # putting the registries back removes only what a user module added.
    import constrained_grpo.envs  # noqa: F401

    registry._load_builtins()
    env = dict(env or {})
    extra = [str(Path(p).resolve()) for p in pythonpath]
    extra += [str(Path(cwd or ".", p).resolve()) for p in env.pop("PYTHONPATH", "").split(os.pathsep) if p]
    saved_env, saved_cwd, saved_path = dict(os.environ), os.getcwd(), list(sys.path)
    saved_modules, saved_agents = set(sys.modules), dict(registry._REGISTRY)
    saved_envs = dict(gym.registry)
    saved_signals = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    threads = torch.get_num_threads()
    code: int = 0
    try:
        os.environ.update(env)
        # Workers started by a sweep import the same user modules: they read PYTHONPATH.
        os.environ["PYTHONPATH"] = os.pathsep.join([*extra, *filter(None, [saved_env.get("PYTHONPATH")])])
        sys.path[:0] = extra
        if cwd is not None:
            os.chdir(cwd)
        with _captured() as (out, err):
            try:
                code = int(main(list(args)) or 0)
            except SystemExit as stop:
                code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
        sys.path[:] = saved_path
        for name in set(sys.modules) - saved_modules:
            file = getattr(sys.modules[name], "__file__", None) or ""
            # A user module (the next test may write another of the same name); never the package.
            if (name.partition(".")[0] != "constrained_grpo" and not file.startswith(sys.prefix + os.sep)
                    and any(file.startswith(p + os.sep) for p in extra)):
                del sys.modules[name]
        registry._REGISTRY.clear()
        registry._REGISTRY.update(saved_agents)
        for key in set(gym.registry) - set(saved_envs):
            del gym.registry[key]
        for sig, handler in saved_signals.items():
            signal.signal(sig, handler)
        torch.set_num_threads(threads)
    return subprocess.CompletedProcess(["cgrpo", *args], code, out.getvalue(), err.getvalue())
