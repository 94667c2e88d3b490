"""The HTML leaderboard answers "who is best within the limits" on its first screen: its
verdict lines and compact tables, checked as text and, in headless Chromium (skipped
without it), laid out at 1280x800 and 1920x1080 with screenshots."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from constrained_grpo.constraints import Constraint
from constrained_grpo.eval.scoring.colors import algo_colors
from constrained_grpo.eval.scoring.leaderboard import Leaderboard, build_leaderboard, render_html
from constrained_grpo.eval.scoring.loader import load_results
from constrained_grpo.eval.scoring.page import rank_label, task_verdict
from constrained_grpo.schema import TaskMeta

CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)

#: 25 algorithms with names as long as the suite's, on a task with an exact optimum.
ALGOS = ("cgrpo", "cgrpo-pid", "cgrpo-ogda", "cgrpo-reg", "cgrpo-opg", "cgrpo-al", "cgrpo-crpo", "cgrpo-best",
         "cgrpo-mix", "grpo-screw", "grpo", "ppo-lag", "pid-lag", "trpo-lag", "cpo", "pcpo", "focops", "cup", "p3o",
         "rcpo", "saute-ppo", "ppo-lag-ogda", "ppo-lag-al", "crpo", "ppo")
META = TaskMeta("Toy/Wide-v0", "toy", (Constraint("hazard", 0.2, "", indicator=True), Constraint("fuel", 4.0, "")),
                optimum_return=2.0, unconstrained_return=3.0, optimal_multipliers=(0.5, 0.1))


def _wide_board(subset_task: TaskMeta | None = None, subset: tuple[str, ...] = ()) -> Leaderboard:
    """25 algorithms x 10 seeds, 40 evaluation episodes each: returns spread from 1.0 to 2.4,
    hazard rates from 0 to 0.5, so that ranks are separated, shared and broken limits mixed;
    two reference policies. ``subset_task``: a second task where only ``subset`` ran."""
    rows = _wide_rows(META, ALGOS)
    if subset_task is not None:
        rows += _wide_rows(subset_task, subset)
    tasks = {m.task: m for m in (META, subset_task) if m is not None}
    return build_leaderboard(pd.DataFrame(rows), tasks, reps=200, references=("ref-random", "ref-optimal"))


def _wide_rows(meta: TaskMeta, algos: tuple[str, ...]) -> list[dict]:
    rng = np.random.default_rng(11)
    rows = []
    for i, algo in enumerate((*algos, "ref-random", "ref-optimal")):
        ret, hazard = (1.0 + 0.055 * i, 0.02 * (i % 13)) if i < len(algos) else ((0.1, 0.6) if algo == "ref-random" else (2.0, 0.2))
        for seed in range(10):
            r = ret + 0.03 * rng.standard_normal()
            for t in range(5):
                rows.append({"suite": "toy", "task": meta.task, "algo": algo, "seed": seed, "kind": "train", "iteration": t,
                             "env_steps": 100 * (t + 1), "wall_s": 0.1 * t, "return": r, "length": np.nan,
                             "cost_hazard": hazard, "cost_fuel": 3.0, "lambda_hazard": np.nan, "lambda_fuel": np.nan})
            for e in range(40):
                rows.append({"suite": "toy", "task": meta.task, "algo": algo, "seed": seed, "kind": "eval",
                             "policy": "sampled", "iteration": 4, "episode": e, "reset_seed": 1_000_000 + e,
                             "env_steps": 500, "wall_s": np.nan, "return": r, "length": 5.0,
                             "cost_hazard": float(rng.random() < hazard), "cost_fuel": 3.0 + 0.1 * rng.standard_normal(),
                             "lambda_hazard": np.nan, "lambda_fuel": np.nan})
    return rows


@pytest.fixture(scope="module")
def wide_page() -> str:
    return render_html(_wide_board())


def test_rank_labels_and_verdict_lines() -> None:
    assert rank_label(1, []) == "1st" and rank_label(3, ["a", "b"]) == "shared 3rd with a, b"
    ranked = pd.DataFrame([
        {"algo": "a", "rank": 1, "rank_lo": 1, "rank_hi": 2, "shared": False, "seeds": 10, "feasible_seeds": 7,
         "not_separated": "b"},
        {"algo": "b", "rank": 2, "rank_lo": 1, "rank_hi": 3, "shared": False, "seeds": 10, "feasible_seeds": 10,
         "not_separated": "a, c"},
        {"algo": "c", "rank": 3, "rank_lo": 2, "rank_hi": 3, "shared": False, "seeds": 10, "feasible_seeds": 10,
         "not_separated": "b"},
    ])
    # The highest-placed algorithm whose every seed is within (the tolerance named), its rank
    # and interval, who the test does not separate from it, and the leader by mean.
    assert task_verdict(ranked, META, tol=0.1) == (
        "Best within both limits (J ≤ d(1 + 0.1)) on every seed: b, rank 2 [1, 3]; not separated from a, c; "
        "highest mean score: a, rank 1 [1, 2].")
    ranked["feasible_seeds"] = [10, 9, 10]
    ranked["not_separated"] = ["", "c", "b"]
    assert task_verdict(ranked, META) == ("Best within both limits on every seed: a, rank 1 [1, 2]; "
                                          "separated from every other algorithm.")
    ranked["feasible_seeds"] = [7, 9, 0]
    assert task_verdict(ranked, META) == ("No algorithm is within both limits on every seed (the most seeds within: "
                                          "b (9/10)); highest mean score: a, rank 1 [1, 2].")
    # Exact ties share a position, and the sentence names each.
    ranked["rank"], ranked["shared"] = [1, 1, 3], [True, True, False]
    assert task_verdict(ranked, META).endswith("highest mean score: a, rank 1= [1, 2], b, rank 1= [1, 3].")


@pytest.mark.slow
def test_page_leads_with_verdicts_then_compact_tables_with_tooltips(wide_page: str) -> None:
    page = wide_page
    glance = page.index('<ul class="glance">')
    assert glance < page.index('<table class="compact') < page.index("<details>")
    assert "Toy/Wide-v0</a>: Best within both limits (J ≤ d(1 + 0.1)) on every seed:" in page
    # One notion of feasibility in the main view: seeds within / undecided / breaks, no P(feasible).
    compact = page[page.index('<table class="compact'):page.index("</table>")]
    assert "P(feasible)" not in compact and ">seeds within<" in compact and ">breaks<" in compact
    # Every header of every table has a tooltip.
    headers = re.findall(r"<th( title=\"[^\"]*\")?>", page)
    assert headers and all(h.strip() not in ("", 'title=""') for h in headers), [h for h in headers if not h.strip() or h == ' title=""']
    # Full tables, the formulas and the glossary are one click away; references are named rows.
    assert page.count("<summary>") >= 3 and '<dl class="glossary">' in page
    assert '<tr class="ref"><td data-v="' in page and ">ref-random<" in page
    # The figure is inline: limits, R* and every algorithm drawn, no other file needed.
    svg = page[page.index("<svg"):page.index("</svg>")]
    assert svg.count("<circle") == len(ALGOS) and "tolerance" in svg and "exact optimum R*" in svg
    # Ranks are spelled out: the position by mean score and its interval, then the group letters.
    assert re.search(r"<td data-v=\"1(\.0+)?\">1\u00a0\[1,\u00a0\d+\]</td><td>[a-z]+</td>", page)


@pytest.mark.slow
def test_an_algorithm_has_one_colour_on_the_whole_page() -> None:
    # A task where 4 of the 25 ran: alone, 3 of them would take other colours than on the
    # full task (the first free entry from their hashed one), and the page would show crpo in
    # two colours.
    subset = ("cgrpo", "cgrpo-crpo", "crpo", "ppo-lag-al")
    assert sum(algo_colors(subset)[a] != algo_colors(ALGOS)[a] for a in subset) == 3
    small = TaskMeta("Toy/Small-v0", "toy", META.constraints, optimum_return=2.0)
    page = render_html(_wide_board(small, subset))
    seen: dict[str, set[str]] = {}
    for colour, algo in re.findall(r'<span class="sw" style="background:(#[0-9a-f]{6})"></span>([a-z0-9-]+)<', page):
        seen.setdefault(algo, set()).add(colour)
    assert set(seen) == set(ALGOS)
    assert all(len(c) == 1 for c in seen.values()), {a: c for a, c in seen.items() if len(c) > 1}
    assert len({c for cs in seen.values() for c in cs}) == len(ALGOS)
    # The figures' dots take the same colours.
    for algo in subset:
        (colour,) = seen[algo]
        assert page.count(f'fill="{colour}"') >= 2, algo


def test_page_from_runs_has_glossary_and_figures(toy_results: Path) -> None:
    res = load_results(toy_results)
    page = render_html(build_leaderboard(res.table, res.tasks), ["plots/Grid_HazardFuel3x3-v0_curves.png"])
    assert page.count("<script>") == 1  # the sorter; the page reads the same without it
    assert '<dl class="glossary">' in page and "<dt>P(feasible)</dt>" in page and "<dt>J …</dt>" in page
    assert '<img src="plots/Grid_HazardFuel3x3-v0_curves.png"' in page
    assert "position:sticky" in page and page.count('<div class="wrap"><table') >= 2
    # An interval (or its "(n=2: no CI)") never breaks inside its brackets: 2 seeds here.
    cells = re.findall(r"<td>([^<]*\([^<]*)</td>", page)
    assert cells and all(" " not in c[c.index("("):] and "\u00a0" in c for c in cells)


#: Appended to a copy of the page: what is on the first screen, widths after layout, and
#: the algorithm column after two clicks on the "score" header (descending).
_PROBE = ("<script>window.addEventListener('load',()=>{const vh=window.innerHeight,"
          "vis=e=>{const r=e.getBoundingClientRect();return r.bottom<=vh&&r.top>=0};"
          "const t=document.querySelector('table.compact'),rows=[...t.tBodies[0].rows],"
          "glance=[...document.querySelectorAll('ul.glance li')];"
          "const out={page:document.documentElement.scrollWidth,view:window.innerWidth,"
          "glance:glance.every(vis),verdict:vis(document.querySelector('p.verdict')),"
          "header:vis(t.tHead),rows_seen:rows.filter(vis).length,rows:rows.length,"
          "boxes:[...document.querySelectorAll('table.compact')].map(b=>b.getBoundingClientRect().right)};"
          "const th=[...t.tHead.rows[0].cells].find(c=>c.textContent.startsWith('score'));th.click();th.click();"
          "out.sorted=[...t.tBodies[0].rows].map(r=>parseFloat(r.cells[6].dataset.v));"
          "out.refs_last=[...t.tBodies[0].rows].slice(-2).every(r=>r.classList.contains('ref'));"
          "const d=document.createElement('pre');d.id='cgrpo-probe';d.textContent=JSON.stringify(out);"
          "document.body.appendChild(d);});</script>")


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium is not installed (apt-get install chromium)")
@pytest.mark.parametrize("size", [(1280, 800), (1920, 1080)])
def test_first_screen_in_chromium(wide_page: str, tmp_path: Path, size: tuple[int, int]) -> None:
    w, h = size
    probe = tmp_path / "probe.html"
    probe.write_text(wide_page.replace("</body>", _PROBE + "</body>"))
    base = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", f"--window-size={w},{h}"]
    dom = subprocess.run([*base, "--virtual-time-budget=3000", "--dump-dom", probe.as_uri()],
                         capture_output=True, text=True, timeout=90)
    found = re.search(r'<pre id="cgrpo-probe">([^<]*)</pre>', dom.stdout)
    assert found, dom.stderr[-2000:]
    seen = json.loads(found.group(1).replace("&quot;", '"'))
    assert seen["view"] == w and seen["page"] <= w, seen  # no horizontal scroll of the page
    assert all(right <= w for right in seen["boxes"]), seen  # every compact table inside the window
    # The first screen answers the question: every task's verdict, the first task's verdict,
    # and its compact table's header with its leading rows (all of them at 1920x1080).
    assert seen["glance"] and seen["verdict"] and seen["header"], seen
    assert seen["rows_seen"] >= (seen["rows"] if w >= 1920 else 10), seen
    # Sorting by score, descending, keeps the reference rows last.
    learners = seen["sorted"][:-2]
    assert learners == sorted(learners, reverse=True) and seen["refs_last"], seen
    shot = tmp_path / f"first_screen_{w}x{h}.png"
    subprocess.run([*base, f"--screenshot={shot}", wide_page and probe.as_uri()], capture_output=True, timeout=90)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_template_escapes_every_string_it_is_given() -> None:
    """Titles, notes, headers, cells and the preamble reach the page through the template's
    autoescaping: markup in any of them is shown, never run; the sorter is the one script."""
    from constrained_grpo.eval.scoring.leaderboard import Leaderboard, Section

    evil = '<script>alert("x")</script><img src=x onerror=alert(1)>'
    lb = Leaderboard(
        runs=pd.DataFrame(),
        sections=(Section(f"Task T{evil}", (f"note {evil}",), (f"h {evil}", "seeds within d(1 + 0.1)"),
                          ((f"cell {evil}", "0/1"),)),
                  Section(f"Suite s{evil}: aggregate", (evil,), ("rank", "algo"), ((evil, evil),))),
        preamble=(f"lead {evil}", f"rule {evil}"),
    )
    page = render_html(lb, figures=[f'plots/a"{evil}.png'])
    assert page.count("<script>") == 1 and "<img src=x" not in page and 'onerror=alert(1)>' not in page
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;" in page
    assert 'href="plots/a&#34;&lt;script&gt;' in page  # an attribute cannot be closed from a path
