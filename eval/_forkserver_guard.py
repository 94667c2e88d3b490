"""Imported first by the sweep's fork server (``sweep._PRELOAD``): on Linux, have the kernel
SIGKILL the fork server when the driver that started it dies.

Without it, a driver killed while the fork server imports torch and the agents leaves the
server (and the resource tracker, which waits for the server's copy of its pipe) running
until those imports end, about 18 s. The setting is not inherited by the runs the server
forks (they watch the driver themselves, ``sweep._watch_driver``). It acts only in the fork
server's own process, so importing this module anywhere else changes nothing.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

_PR_SET_PDEATHSIG = 1


def _in_fork_server() -> bool:
    main = sys.modules.get("__main__")
    return sys.argv[:1] == ["-c"] and "multiprocessing.forkserver" in sys.modules and getattr(main, "__file__", None) is None


def die_with_parent() -> None:
    """Have the kernel SIGKILL this process when its parent dies (Linux; elsewhere nothing);
    exit now if the parent died already."""
    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the driver died before the call took effect
        os._exit(1)


if _in_fork_server():
    die_with_parent()
