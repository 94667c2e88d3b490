"""Speed benchmarks (``make bench``), one module per measured piece.

Each ``constrained_grpo.eval.bench.<name>`` exposes ``run(out_dir: Path) -> list[Path]`` and
writes ``<out_dir>/<name>.csv``, measuring ours and its reference side by side in one run. A
benchmark measures named internals, so it may import any layer (agents, baselines, task
families, the harness); nothing outside ``bench`` imports a benchmark.

Run all: ``python -m constrained_grpo.eval.bench [--out results/bench] [--only NAME ...]``.
Every CSV row carries the versions and the machine, so figures can be compared later.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import os
import pkgutil
import platform
import subprocess
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from constrained_grpo.files import atomic_write_csv

__all__ = ["environment_columns", "list_benchmarks", "main", "write_rows"]


@functools.lru_cache(maxsize=1)
def code_version() -> str:
    """``git describe --always --dirty`` of the checkout this code runs from (the commit a
    benchmark row measured; ``-dirty``: with uncommitted changes), or "unknown" outside one."""
    root = Path(__file__).resolve().parents[2]
    try:
        proc = subprocess.run(["git", "-C", str(root), "describe", "--always", "--dirty", "--abbrev=12"],
                              capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return proc.stdout.strip() if proc.returncode == 0 and proc.stdout.strip() else "unknown"


def environment_columns() -> dict[str, Any]:
    """Versions and machine facts recorded with every benchmark row."""
    import gymnasium
    import numpy

    cols: dict[str, Any] = {
        "python": platform.python_version(),
        "numpy": numpy.__version__,
        "gymnasium": gymnasium.__version__,
        "cpu_count": os.cpu_count(),
        "machine": platform.machine(),
        "date": time.strftime("%Y-%m-%d"),
        "commit": code_version(),
    }
    try:
        import torch

        cols["torch"] = torch.__version__
        cols["torch_threads"] = torch.get_num_threads()
    except ImportError:  # the env benchmarks need no torch
        pass
    return cols


def write_rows(path: Path, rows: Iterable[Mapping[str, Any]]) -> Path:
    """Write ``rows`` (plus the environment columns) as a CSV, atomically."""
    rows = [{**r, **environment_columns()} for r in rows]
    atomic_write_csv(path, rows)
    return path


def list_benchmarks() -> list[str]:
    """Names ``X`` of the modules ``constrained_grpo.eval.bench.X``."""
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m constrained_grpo.eval.bench", description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("results/bench"))
    parser.add_argument("--only", nargs="*", default=None, help=f"subset of {list_benchmarks()}")
    args = parser.parse_args(argv)
    names = list_benchmarks()
    code_version()  # the commit as the run starts (cached): what every row measured
    unknown = sorted(set(args.only or []) - set(names))
    if unknown:
        parser.error(f"unknown benchmark(s) {unknown}; available: {names}")
    for name in args.only or names:
        module = importlib.import_module(f"{__name__}.{name}")
        start = time.perf_counter()
        paths = module.run(args.out)
        print(f"[bench] {name}: {[str(p) for p in paths]} ({time.perf_counter() - start:.1f} s)", flush=True)
    return 0
