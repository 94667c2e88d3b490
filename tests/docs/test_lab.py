"""The lab notebooks' shape (running them is ``make lab``, outside ``make test``): one per
tutorial section 1-5, percent-format cells, an exercise and a self-checking solution each."""

from __future__ import annotations

import ast
import re
from pathlib import Path

LAB = Path(__file__).resolve().parents[2] / "docs" / "lab"


def _cells(path: Path) -> list[tuple[str, str]]:
    """``(kind, text)`` of each ``# %%`` cell: ``markdown`` or ``code``."""
    cells: list[tuple[str, str]] = []
    for chunk in re.split(r"^# %%", path.read_text(), flags=re.M)[1:]:
        head, _, body = chunk.partition("\n")
        cells.append(("markdown" if "[markdown]" in head else "code", body))
    return cells


def test_five_notebooks_each_with_an_exercise_and_a_checked_solution():
    notebooks = sorted(LAB.glob("lab[0-9]_*.py"))
    assert [p.name[:4] for p in notebooks] == ["lab1", "lab2", "lab3", "lab4", "lab5"]
    for path in notebooks:
        ast.parse(path.read_text())  # a plain script too
        cells = _cells(path)
        titles = [text for kind, text in cells if kind == "markdown"]
        assert re.search(r"\(tutorial, sections? [1-5]", titles[0]), path.name
        exercise = next(i for i, (k, t) in enumerate(cells) if k == "markdown" and "## Exercise" in t)
        solution = next(i for i, (k, t) in enumerate(cells) if k == "markdown" and "## Solution" in t)
        assert exercise < solution and cells[solution + 1][0] == "code", path.name
        assert "assert " in cells[solution + 1][1], path.name  # the solution checks itself
    readme = (LAB / "README.md").read_text()
    assert all(p.name in readme for p in notebooks)
