"""Run the lab notebooks (percent-format scripts) in order in one fresh folder; fail on the first error.

``python docs/lab/run_all.py [--budget-s 600]``: each notebook runs as a script (its solution
cells check themselves), lab 5 reading lab 4's runs; the whole lab must finish within the
budget (10 minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
NOTEBOOKS = sorted(HERE.glob("lab[0-9]_*.py"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget-s", type=float, default=600.0, help="wall-clock budget of the whole lab")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="cgrpo-lab-") as folder:
        for notebook in NOTEBOOKS:
            left = args.budget_s - (time.perf_counter() - start)
            began = time.perf_counter()
            try:
                done = subprocess.run([sys.executable, str(notebook)], cwd=folder, capture_output=True, text=True,
                                      timeout=max(left, 1.0))
            except subprocess.TimeoutExpired:
                print(f"{notebook.name}: over the lab's budget of {args.budget_s:.0f} s", file=sys.stderr)
                return 1
            if done.returncode != 0:
                print(f"{notebook.name}: FAILED\n{done.stdout[-2000:]}{done.stderr[-4000:]}", file=sys.stderr)
                return 1
            print(f"{notebook.name}: ok in {time.perf_counter() - began:.1f} s")
    print(f"lab: {len(NOTEBOOKS)} notebooks in {time.perf_counter() - start:.1f} s (budget {args.budget_s:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
