"""The package list, from the folders: each top-level code folder is one subpackage of
``constrained_grpo`` (``package-dir`` in pyproject.toml, which holds everything else), and
every folder under it with an ``__init__.py`` is installed, so a new task family, study or
benchmark folder needs no packaging line."""

from pathlib import Path

from setuptools import setup

ROOT = Path(__file__).resolve().parent
#: Installed package -> folder (the same mapping as pyproject.toml's ``package-dir``).
FOLDERS = {
    "constrained_grpo": "constrained_grpo",
    "constrained_grpo.envs": "envs",
    "constrained_grpo.baselines": "baselines",
    "constrained_grpo.eval": "eval",
}


def packages() -> list[str]:
    found = set()
    for package, folder in FOLDERS.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder).parts
            if not any(part.startswith(".") or part == "__pycache__" for part in rel):
                found.add(".".join((package, *rel)))
    return sorted(found)


setup(packages=packages())
