"""The distribution installs one top-level package, with the folders mapped into it."""

import os
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = {"constrained_grpo": "constrained_grpo", "envs": "constrained_grpo.envs",
           "baselines": "constrained_grpo.baselines", "eval": "constrained_grpo.eval"}


def _code_packages() -> set[str]:
    """Every folder with an ``__init__.py`` under the code folders, as the installed package name."""
    found = set()
    for folder, package in FOLDERS.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder)
            found.add(".".join([package, *rel.parts]) if rel.parts else package)
    return found


def test_pyproject_lists_no_packages_by_hand():
    # setup.py finds them (a new task family, study or benchmark folder needs no packaging line).
    assert "packages" not in tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


@pytest.mark.slow
def test_installed_mapping_from_another_directory(tmp_path):
    code = (
        "import importlib.util, constrained_grpo.envs, constrained_grpo.eval, constrained_grpo.baselines;"
        "print(constrained_grpo.envs.__file__);"
        "print(importlib.util.find_spec('envs'))"
    )
    # The installed mapping alone: an in-process CLI test may have put a folder on PYTHONPATH.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True, env=env)
    envs_file, top_level_envs = out.stdout.split()
    assert Path(envs_file) == ROOT / "envs" / "__init__.py"
    assert top_level_envs == "None"  # no `import envs` at top level


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_wheel_has_only_constrained_grpo(tmp_path):
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path), str(ROOT)],
        check=True, capture_output=True, cwd=tmp_path,
    )
    (wheel,) = tmp_path.glob("constrained_grpo-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert top == {"constrained_grpo"}
    for expected in ("constrained_grpo/envs/gridworld/env.py", "constrained_grpo/eval/bench/__init__.py",
                     "constrained_grpo/baselines/__init__.py", "constrained_grpo/registry.py"):
        assert expected in names
    packaged = {n[: -len("/__init__.py")].replace("/", ".") for n in names if n.endswith("/__init__.py")}
    assert packaged == _code_packages(), sorted(packaged ^ _code_packages())
    entry_points = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert "cgrpo = constrained_grpo.cli:main" in entry_points
