"""Run the lab notebooks in order in one fresh folder, as Jupyter notebooks; fail on the first error.

``python docs/lab/run_all.py [--budget-s 600] [--as-scripts]``: each percent-format file is
read as a notebook (jupytext) and executed cell by cell in a Python kernel (nbclient), as
JupyterLab would run it; its solution cells check themselves, and lab 5 reads lab 4's runs.
The whole lab must finish within the budget (10 minutes on 2 cores). ``--as-scripts`` runs
each file with the interpreter instead (no Jupyter packages needed). The packages are the
``lab`` extra: ``pip install 'constrained-grpo[lab]'``.
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


def run_notebook(path: Path, folder: str, timeout_s: float) -> str | None:
    """Execute ``path`` as a notebook in ``folder``; the failing cell's error, or None."""
    import jupytext
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, CellTimeoutError

    notebook = jupytext.read(path)
    client = NotebookClient(notebook, timeout=max(int(timeout_s), 1), kernel_name="python3",
                            resources={"metadata": {"path": folder}})
    try:
        client.execute()
    except (CellExecutionError, CellTimeoutError) as err:
        return str(err)[-4000:]
    return None


def run_script(path: Path, folder: str, timeout_s: float) -> str | None:
    """Run ``path`` with this interpreter in ``folder``; its output on failure, or None."""
    try:
        done = subprocess.run([sys.executable, str(path)], cwd=folder, capture_output=True, text=True,
                              timeout=max(timeout_s, 1.0))
    except subprocess.TimeoutExpired:
        return "over the budget"
    return None if done.returncode == 0 else f"{done.stdout[-2000:]}{done.stderr[-4000:]}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget-s", type=float, default=600.0, help="wall-clock budget of the whole lab")
    parser.add_argument("--as-scripts", action="store_true", help="run each file as a script, without Jupyter")
    args = parser.parse_args(argv)
    run = run_script if args.as_scripts else run_notebook
    if not args.as_scripts:
        try:
            import jupytext  # noqa: F401
            import nbclient  # noqa: F401
        except ImportError as err:
            print(f"lab: {err}; pip install 'constrained-grpo[lab]' (or run with --as-scripts)", file=sys.stderr)
            return 2
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="cgrpo-lab-") as folder:
        for notebook in NOTEBOOKS:
            left = args.budget_s - (time.perf_counter() - start)
            began = time.perf_counter()
            failure = run(notebook, folder, left)
            if failure is not None:
                print(f"{notebook.name}: FAILED\n{failure}", file=sys.stderr)
                return 1
            print(f"{notebook.name}: ok in {time.perf_counter() - began:.1f} s")
    print(f"lab: {len(NOTEBOOKS)} notebooks in {time.perf_counter() - start:.1f} s (budget {args.budget_s:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
