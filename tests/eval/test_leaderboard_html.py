"""The HTML leaderboard reads at 1,280 px: measured in headless Chromium (skipped without it)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from constrained_grpo.eval.scoring.leaderboard import build_leaderboard, render_html
from constrained_grpo.eval.scoring.loader import load_results

CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)

#: Appended to a copy of the page (the page itself has no script): the widths after layout.
_PROBE = ("<script>window.addEventListener('load',()=>{const d=document.createElement('pre');d.id='cgrpo-width';"
          "d.textContent=JSON.stringify({page:document.documentElement.scrollWidth,view:window.innerWidth,"
          "boxes:[...document.querySelectorAll('.wrap')].map(b=>b.getBoundingClientRect().right)});"
          "document.body.appendChild(d);});</script>")


def _page(toy_results: Path, figures: list[str]) -> str:
    res = load_results(toy_results)
    return render_html(build_leaderboard(res.table, res.tasks), figures)


def test_page_has_glossary_figures_and_sticky_columns(toy_results: Path):
    page = _page(toy_results, ["plots/Grid_HazardFuel3x3-v0_curves.png"])
    assert "<script" not in page  # static: no scripts
    assert '<dl class="glossary">' in page and "<dt>P(feasible)</dt>" in page and "<dt>J …</dt>" in page
    assert '<img src="plots/Grid_HazardFuel3x3-v0_curves.png"' in page
    assert "position:sticky" in page and page.count('<div class="wrap"><table>') >= 2
    # An interval (or its "(n=2: no CI)") never breaks inside its brackets: 2 seeds here.
    cells = re.findall(r"<td>([^<]*\([^<]*)</td>", page)
    assert cells and all(" " not in c[c.index("("):] and "\u00a0" in c for c in cells)


@pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium is not installed (apt-get install chromium)")
def test_page_fits_1280_px_in_chromium(toy_results: Path, tmp_path: Path):
    probe = tmp_path / "probe.html"
    probe.write_text(_page(toy_results, []).replace("</body>", _PROBE + "</body>"))
    shot = tmp_path / "shot.png"
    base = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--window-size=1280,900"]
    dom = subprocess.run([*base, "--virtual-time-budget=2000", "--dump-dom", probe.as_uri()],
                         capture_output=True, text=True, timeout=60)
    found = re.search(r'<pre id="cgrpo-width">([^<]*)</pre>', dom.stdout)
    assert found, dom.stderr[-2000:]
    width = json.loads(found.group(1).replace("&quot;", '"'))
    assert width["view"] == 1280 and width["page"] <= 1280, width  # no horizontal scroll of the page
    assert all(right <= 1280 for right in width["boxes"]), width  # every table's box inside the window
    subprocess.run([*base, f"--screenshot={shot}", probe.as_uri()], capture_output=True, timeout=60)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
