"""Every ``docs/NAME.md`` that the code or the docs cite exists."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CITED = re.compile(r"\bdocs/([A-Za-z0-9_\-]+\.md)\b")


def test_cited_docs_exist() -> None:
    sources = [p for d in ("constrained_grpo", "eval", "baselines", "docs") for p in (REPO / d).rglob("*")
               if p.suffix in {".py", ".md"}]
    cited = {(m.group(1), p.relative_to(REPO).as_posix()) for p in sources for m in CITED.finditer(p.read_text())}
    assert ("papers.md", "constrained_grpo/agents/advantages.py") in cited  # the probe finds citations
    missing = sorted((name, where) for name, where in cited if not (REPO / "docs" / name).is_file())
    assert missing == []


RESULTS_PATH = re.compile(r"`(results/[A-Za-z0-9_\-./*]+?)/?`")


def test_results_readme_names_every_folder() -> None:
    """results/README.md gives the command behind every entry of results/ (one line per folder)."""
    text = (REPO / "results" / "README.md").read_text(encoding="utf-8")
    named = {m.group(1) for m in RESULTS_PATH.finditer(text)}
    entries = sorted(p.name for p in (REPO / "results").iterdir()
                     if p.name != "README.md" and not p.name.startswith(".") and p.name not in {"runs", "tmp"})
    assert entries, "results/ is empty"
    unlisted = [e for e in entries if not any(n == f"results/{e}" or n.startswith(f"results/{e}/") for n in named)
                and f"`{e}`" not in text]  # the leaderboard's files share a row: `results/leaderboard.md`, `runs.csv`
    assert unlisted == [], f"results/README.md does not say how to regenerate {unlisted}"


def test_readme_results_exist() -> None:
    """Every results path that README.md cites exists (no table row for a removed folder)."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    cited = sorted({m.group(1) for m in RESULTS_PATH.finditer(text)})
    assert "results/coupling/coupling.md" in cited  # the probe finds the citations
    missing = [c for c in cited if not list(REPO.glob(c))]
    assert missing == []
