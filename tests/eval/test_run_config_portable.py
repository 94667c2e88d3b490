"""config.json names no path of the machine that ran it: its ``command`` reruns the run from
the results root (``--out .``) and ``invoked_as`` has its absolute paths made relative."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cgrpo_toy_agent import TASK, TOY
from constrained_grpo.eval import storage
from constrained_grpo.eval.runner import RunSpec, execute_run, portable_command, run_config, task_meta

HERE = Path(__file__).resolve().parent


def test_portable_command_rewrites_absolute_paths_only(tmp_path: Path) -> None:
    root = tmp_path / "results" / "coupling"
    given = shlex.join(["cgrpo", "bench", "--out", str(root), "--import", str(tmp_path / "lib" / "mod.py"),
                        f"--plots={root / 'plots'}", "--config.lr", "0.1", "rel/dir"])
    assert portable_command(given, root) == "cgrpo bench --out . --import mod.py --plots=plots --config.lr 0.1 rel/dir"
    assert portable_command("cgrpo train --out runs/x", root) == "cgrpo train --out runs/x"


def test_config_json_records_no_absolute_path(tmp_path: Path) -> None:
    root = tmp_path / "res"
    spec = RunSpec(TASK, TOY, 0, 300, 13, {"episodes_per_iter": 4}, False)
    prov = {"invoked_as": shlex.join(["cgrpo", "bench", "--out", str(root)]), "git": None, "versions": {}}
    config = run_config(spec, root, task_meta(TASK), prov)
    text = json.dumps(config)
    assert str(tmp_path) not in text
    assert config["invoked_as"] == "cgrpo bench --out ."
    argv = shlex.split(config["command"])
    assert argv[argv.index("--out") + 1] == "."


@pytest.mark.slow
def test_recorded_command_reruns_the_run_in_a_moved_root(tmp_path: Path) -> None:
    root = tmp_path / "res"
    spec = RunSpec(TASK, TOY, 0, 300, 13, {}, False)
    assert execute_run(spec, root).status == "done"
    moved = tmp_path / "elsewhere" / "copy"
    shutil.copytree(root, moved)
    recorded = json.loads((spec.run_dir(moved) / storage.CONFIG_FILE).read_text())
    shutil.rmtree(spec.run_dir(moved))
    argv = shlex.split(recorded["command"])
    assert argv[:2] == ["cgrpo", "train"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    subprocess.run([sys.executable, "-m", "constrained_grpo.cli", *argv[1:]], cwd=moved, env=env, check=True,
                   capture_output=True, timeout=300)
    again = json.loads((spec.run_dir(moved) / storage.CONFIG_FILE).read_text())
    assert again["run"] == recorded["run"] and again["command"] == recorded["command"]
