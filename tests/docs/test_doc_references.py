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
