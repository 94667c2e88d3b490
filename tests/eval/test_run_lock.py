"""The run directory's lock: exclusive while held, and gone once the run is finished."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from constrained_grpo.eval import storage


def test_a_finished_run_keeps_no_lock_file(toy_results: Path):
    runs = [p.parent for p in toy_results.rglob(storage.DONE_FILE)]
    assert runs and not [p for p in runs if (p / storage.LOCK_FILE).exists()]


def test_the_lock_is_exclusive_while_held_and_removed_after(tmp_path: Path):
    run = tmp_path / "run"
    with storage.run_lock(run):
        assert (run / storage.LOCK_FILE).exists()
        # Another process cannot take it, and sees it held.
        code = ("import sys; from pathlib import Path; from constrained_grpo.eval import storage\n"
                f"assert storage.is_locked(Path({str(run)!r}))\n"
                "try:\n"
                f"    with storage.run_lock(Path({str(run)!r})): sys.exit(3)\n"
                "except storage.RunBusyError: sys.exit(0)\n")
        assert subprocess.run([sys.executable, "-c", code], env=os.environ.copy()).returncode == 0
        with pytest.raises(storage.RunBusyError):  # a second holder in this process too (flock per open file)
            with storage.run_lock(run):
                pass
    assert not (run / storage.LOCK_FILE).exists() and not storage.is_locked(run)
    with storage.run_lock(run):  # and it can be taken again
        assert storage.is_locked(run)
    assert not (run / storage.LOCK_FILE).exists()
