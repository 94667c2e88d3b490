"""The dependency direction of docs/architecture.md, checked on every import statement (any
nesting level, so a lazy import counts too):

    core <- envs, agents (GRPO, TRL), baselines <- eval (scoring <- harness) <- cli

agents never import a task family, task families never import an agent, the baselines
import no GRPO module, and the harness (eval/*.py) and the read side (eval/scoring/) reach
algorithms and task families through the registries (``constrained_grpo.envs`` itself is
the task registry). The read side imports of the harness only the records' format
(``eval.storage``). The studies (eval/studies/) and speed benchmarks (eval/bench/) measure
named internals and may import them; nothing else imports a study or a benchmark.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PKG = "constrained_grpo"

#: The harness modules (eval/*.py) the read side may not import (all but ``storage``).
HARNESS = tuple(f"{PKG}.eval.{p.stem}" for p in sorted((REPO / "eval").glob("*.py"))
                if p.stem not in ("__init__", "storage"))
#: What measures named internals; no other layer imports it.
STUDIES = (f"{PKG}.eval.studies", f"{PKG}.eval.bench")

#: Layer -> module prefixes it must not import.
FORBIDDEN: dict[str, tuple[str, ...]] = {
    "core": (f"{PKG}.agents", f"{PKG}.trl", f"{PKG}.baselines", f"{PKG}.envs", f"{PKG}.eval", f"{PKG}.cli"),
    "envs": (f"{PKG}.agents", f"{PKG}.trl", f"{PKG}.baselines", f"{PKG}.eval", f"{PKG}.cli"),
    "agents": (f"{PKG}.envs", f"{PKG}.baselines", f"{PKG}.eval", f"{PKG}.cli"),
    "baselines": (f"{PKG}.agents", f"{PKG}.trl", f"{PKG}.envs", f"{PKG}.eval", f"{PKG}.cli"),
    "scoring": (f"{PKG}.agents", f"{PKG}.trl", f"{PKG}.baselines", f"{PKG}.envs.", f"{PKG}.cli", *HARNESS, *STUDIES),
    "harness": (f"{PKG}.agents", f"{PKG}.trl", f"{PKG}.baselines", f"{PKG}.envs.", f"{PKG}.cli", *STUDIES),
    "studies": (f"{PKG}.cli",),
}


def _layer(path: Path) -> str | None:
    rel = path.relative_to(REPO).parts
    if rel[0] == "envs":
        return "envs"
    if rel[0] == "baselines":
        return "baselines"
    if rel[0] == "eval":
        if len(rel) > 2:
            return "scoring" if rel[1] == "scoring" else "studies"
        return "harness"
    if rel[0] == PKG:
        # The reference policies are registered algorithms (the warm start wraps a text agent).
        if len(rel) > 2 and rel[1] in ("agents", "trl") or path.name == "references.py":
            return "agents"
        return None if path.name == "cli.py" else "core"
    return None


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
    return found


def _forbidden(layer: str, module: str) -> bool:
    """Whether ``layer`` may not import ``module`` (a prefix ending in "." forbids the package's
    submodules only, so ``constrained_grpo.envs``, the task registry, stays allowed)."""
    return any(module.startswith(p) if p.endswith(".") else module == p or module.startswith(p + ".")
               for p in FORBIDDEN[layer])


def _violations() -> list[str]:
    out = []
    for folder in ("constrained_grpo", "envs", "baselines", "eval"):
        for path in sorted((REPO / folder).rglob("*.py")):
            layer = _layer(path)
            if layer is None:
                continue
            for line, name in _imports(path):
                if _forbidden(layer, name):
                    out.append(f"{path.relative_to(REPO)}:{line} ({layer}) imports {name}")
    return out


def test_every_import_follows_the_dependency_direction():
    assert _violations() == []


@pytest.mark.parametrize(("layer", "module", "bad"), [
    ("agents", "constrained_grpo.envs.math.problems", True),
    ("baselines", "constrained_grpo.agents.trainer", True),
    ("harness", "constrained_grpo.envs", False),  # the task registry
    ("harness", "constrained_grpo.envs.gridworld.policies", True),
    ("core", "constrained_grpo.registry", False),
    ("scoring", "constrained_grpo.eval.storage", False),  # the records' format
    ("scoring", "constrained_grpo.eval.runner", True),
    ("harness", "constrained_grpo.eval.scoring.verdict", False),
    ("harness", "constrained_grpo.eval.studies.coupling", True),
    ("baselines", "constrained_grpo.eval.bench", True),
])
def test_the_rule_itself(layer: str, module: str, bad: bool):
    """The check would catch the imports it exists for (and allows the registries)."""
    assert _forbidden(layer, module) is bad
