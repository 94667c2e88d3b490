"""The leaderboard as one static HTML page that answers "who wins, within the limits, on
what" on its first screen.

Layout: a line per task with its verdict (:func:`task_verdict`), then per task the verdict,
a small figure (:func:`task_figure`: normalised return against worst violation, each
algorithm's mean over seeds with its 95% bootstrap interval on both axes, the tolerance and
R* drawn, references marked) beside a compact table (rank with its interval, group letters,
algorithm, the per-seed verdict counts, score, normalised return and worst violation with
intervals) and, where runs deploy a ranked learner's trainings by another rule, the task's
deployment table (not ranked: each rule against the learner's last iterate, paired by seed),
then, one click away in ``<details>``, the task's notes and full table; the formulas and the
glossary close the page. One notion of feasibility in the main view: the per-seed verdict of
``constrained_grpo.eval.scoring.verdict`` (within / undecided / breaks); the others are in
the details, each with one sentence on how it differs. Every header has a tooltip (its
glossary entry); a click on a header sorts the table (the page's one script; without it the
page reads the same). The figure is inline SVG, so the page needs no other file.

Numbers on the page are the leaderboard's own, formatted at fixed decimals: the page is a
pure function of the :class:`~constrained_grpo.eval.scoring.leaderboard.Leaderboard`, rendered
from the Jinja2 template of :mod:`~constrained_grpo.eval.scoring.page_template` with
autoescaping (this module prepares the data; only the inline SVG is built here, from numbers
and escaped names).
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence

import pandas as pd

from constrained_grpo.eval.scoring.colors import algo_colors, highlighted_colors
from constrained_grpo.eval.scoring.leaderboard import Leaderboard, glossary, unbroken_groups as _unbroken_groups
from constrained_grpo.schema import TaskMeta

__all__ = ["ordinal", "rank_label", "rank_text", "render_page", "task_figure", "task_verdict"]


def ordinal(n: int) -> str:
    """``1st``, ``2nd``, ``3rd``, ``4th``, ``11th``, ``21st``.

    >>> [ordinal(n) for n in (1, 2, 3, 4, 11, 12, 13, 21, 102)]
    ['1st', '2nd', '3rd', '4th', '11th', '12th', '13th', '21st', '102nd']
    """
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def rank_label(rank: float, others: Sequence[str], *, listed: int = 2) -> str:
    """A rank a reader cannot misread: ``1st``, ``shared 1st with A, B``, or ``shared 4th
    with 5 others`` when more than ``listed`` algorithms share it.

    >>> rank_label(1, []), rank_label(2, ["ppo"]), rank_label(4, list("abcde"))
    ('1st', 'shared 2nd with ppo', 'shared 4th with 5 others')
    """
    if not math.isfinite(rank):
        return "—"
    place = ordinal(int(rank))
    if not others:
        return place
    names = ", ".join(others) if len(others) <= listed else (f"{len(others)} others" if len(others) > 1 else "1 other")
    return f"shared {place} with {names}"


def _f(x: float, digits: int = 3) -> str:
    if not (isinstance(x, (int, float)) and math.isfinite(x)):
        return "—"
    text = f"{x:.{digits}f}"
    return "0." + "0" * digits if text == "-0." + "0" * digits else text


def _ci(point: float, lo: float, hi: float, n: int, min_n: int = 5) -> str:
    if not math.isfinite(point):
        return "—"
    if n < min_n or not (math.isfinite(lo) and math.isfinite(hi)):
        return _f(point)
    return f"{_f(point)} [{_f(lo)},\u00a0{_f(hi)}]"


def _limits_word(k: int) -> str:
    return "the limit" if k == 1 else ("both limits" if k == 2 else f"all {k} limits")


def _normalised(meta: TaskMeta, x: float) -> float:
    """1 - (R* - x)/|R*|: increasing and affine in x, so an IQM or a percentile interval of
    the return maps onto that of the normalised return exactly."""
    r = meta.optimum_return
    return math.nan if r is None or r == 0 else 1.0 - (r - x) / abs(r)


def _rows(df: pd.DataFrame | None) -> list[dict]:
    return [] if df is None else df.to_dict("records")


def _names(names: Sequence[str], listed: int = 3) -> str:
    """``a, b, c`` or ``a, b, c and 4 more``."""
    head = ", ".join(names[:listed])
    return head if len(names) <= listed else f"{head} and {len(names) - listed} more"


def rank_text(r: Mapping) -> str:
    """``rank 2 [1, 5]``: the position by mean score ('=' an exact tie) and its simultaneous
    95% interval (what ranks the data allow)."""
    pos, lo, hi = float(r["rank"]), float(r.get("rank_lo", math.nan)), float(r.get("rank_hi", math.nan))
    if not math.isfinite(pos):
        return "unranked"
    text = f"rank {pos:g}" + ("=" if r.get("shared") else "")
    return text + (f" [{lo:g}, {hi:g}]" if math.isfinite(lo) and math.isfinite(hi) else "")


def task_verdict(ranked: pd.DataFrame | None, meta: TaskMeta, not_ranked: Sequence[str] = (),
                 tol: float | None = None) -> str:
    """The task's answer in one line, read from the order of the mean score: the highest-placed
    algorithm(s) whose every seed keeps the limits (up to the tolerance ``tol``) by the verdict,
    with rank and interval and who the test does not separate from it; then, if another leads,
    the leader."""
    if not_ranked:
        return "Not ranked: " + "; ".join(not_ranked) + "."
    rows = _rows(ranked)
    if not rows:
        return "No ranked runs."
    limits = _limits_word(len(meta.constraints)) + (f" (J ≤ d(1 + {tol:g}))" if tol is not None else "")
    top = [r for r in rows if r["rank"] == rows[0]["rank"]]
    first = "highest mean score: " + ", ".join(f"{r['algo']}, {rank_text(r)}" for r in top)
    safe = [r for r in rows if int(r["feasible_seeds"]) == int(r["seeds"])]
    if safe:
        best = [r for r in safe if r["rank"] == safe[0]["rank"]]
        names = {str(r["algo"]) for r in best}
        head = f"Best within {limits} on every seed: " + ", ".join(f"{r['algo']}, {rank_text(r)}" for r in best)
        if "not_separated" in best[0]:
            others = [a for a in str(best[0]["not_separated"] or "").split(", ") if a and a not in names]
            head += f"; not separated from {_names(others)}" if others else "; separated from every other algorithm"
        return head + ("." if best[0]["rank"] == rows[0]["rank"] else f"; {first}.")
    most = max(int(r["feasible_seeds"]) for r in rows)
    lead = [str(r["algo"]) for r in rows if int(r["feasible_seeds"]) == most]
    most_text = f"the most seeds within: {_names(lead)} ({most}/{int(rows[0]['seeds'])})" if most else "none keeps them on any seed"
    return f"No algorithm is within {limits} on every seed ({most_text}); {first}."


# ---------------------------------------------------------------------------- figure


def _ticks(lo: float, hi: float, n: int = 4) -> list[float]:
    """About ``n`` round tick values covering [lo, hi] (steps of 1, 2 or 5 times 10^k)."""
    span = hi - lo if hi > lo else 1.0
    raw = span / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step - 1e-9) * step
    return [round(first + i * step, 10) for i in range(int((hi - first) / step + 1e-9) + 1)]


def _tick_text(x: float, step: float) -> str:
    digits = max(0, -math.floor(math.log10(step))) if step > 0 else 0
    return _f(x, digits)


def task_figure(ranked: pd.DataFrame | None, refs: pd.DataFrame | None, meta: TaskMeta, tol: float,
                colors: Mapping[str, str], *, width: int = 380, height: int = 270) -> str:
    """Inline SVG: per algorithm (filled dot, its colour) and reference (hollow square,
    named), the mean worst violation over seeds (x) and the IQM normalised return (y; the
    return where the task has no R*), each with its 95% bootstrap interval as a bar; the
    tolerance x = tol (dotted red) and, with R*, y = 1 (the optimum, dashed). The x axis is
    ``log(1 + x/tol)``: linear near 0, so the tolerance stays readable beside violations of
    10. The y range is the algorithms' (and 1); a reference outside it is drawn on the edge
    with its value. ``colors``: the page's colour per algorithm."""
    norm = meta.optimum_return not in (None, 0)
    pts = []
    for r, ref in [(r, False) for r in _rows(ranked)] + [(r, True) for r in _rows(refs)]:
        ys = (r["return"], r["return_lo"], r["return_hi"])
        y, ylo, yhi = (_normalised(meta, v) for v in ys) if norm else ys
        pts.append((str(r["algo"]), ref, float(r["worst"]), float(r["worst_lo"]), float(r["worst_hi"]), y, ylo, yhi))
    pts = [p for p in pts if all(math.isfinite(v) for v in p[2:])]
    if not pts:
        return ""
    scale = tol if tol > 0 else 0.1

    def fx(x: float) -> float:
        return math.log1p(max(x, 0.0) / scale)

    x_hi = max([fx(3 * scale)] + [fx(p[4]) for p in pts]) * 1.04
    learners = [p for p in pts if not p[1]] or pts
    ys = [v for p in learners for v in p[5:]] + ([1.0] if norm else [])
    y_lo, y_hi = min(ys), max(ys)
    pad = 0.08 * (y_hi - y_lo if y_hi > y_lo else 1.0)
    y_lo, y_hi = y_lo - pad, y_hi + pad
    left, right, top, bottom = 46, 12, 10, 40
    pw, ph = width - left - right, height - top - bottom

    def sx(x: float) -> float:
        return left + pw * fx(x) / x_hi

    def sy(y: float) -> float:
        return top + ph * (1 - (min(max(y, y_lo), y_hi) - y_lo) / (y_hi - y_lo))

    out = [f'<svg class="fig" viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" '
           f'aria-label="{html.escape(meta.task)}: normalised return against worst violation">',
           f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="#fff" stroke="#bbb"/>']
    xt = [0.0, scale] + [10.0 ** k for k in range(-3, 6) if 10.0 ** k > 2.5 * scale and fx(10.0 ** k) <= x_hi]
    for x in xt:
        out.append(f'<line x1="{sx(x):.1f}" y1="{top + ph}" x2="{sx(x):.1f}" y2="{top + ph + 4}" stroke="#888"/>'
                   f'<text x="{sx(x):.1f}" y="{top + ph + 15}" class="tick" text-anchor="middle">{x:g}</text>')
    yt = _ticks(y_lo, y_hi)
    for y in yt:
        out.append(f'<line x1="{left - 4}" y1="{sy(y):.1f}" x2="{left}" y2="{sy(y):.1f}" stroke="#888"/>'
                   f'<text x="{left - 6}" y="{sy(y) + 4:.1f}" class="tick" text-anchor="end">'
                   f'{_tick_text(y, yt[1] - yt[0] if len(yt) > 1 else 1)}</text>')
    out.append(f'<line x1="{sx(scale):.1f}" y1="{top}" x2="{sx(scale):.1f}" y2="{top + ph}" stroke="#d62728" '
               f'stroke-dasharray="2,3"><title>tolerance: worst violation {tol:g}</title></line>')
    if norm:
        out.append(f'<line x1="{left}" y1="{sy(1.0):.1f}" x2="{left + pw}" y2="{sy(1.0):.1f}" stroke="#000" '
                   f'stroke-dasharray="6,3"><title>exact optimum R* = {meta.optimum_return:.4g}</title></line>')
    ylabel = "normalised return" if norm else "return"
    out.append(f'<text x="{left + pw / 2:.1f}" y="{height - 6}" class="axis" text-anchor="middle">worst violation '
               f'(scale log(1 + x/{scale:g}))</text>'
               f'<text transform="translate(11 {top + ph / 2:.1f}) rotate(-90)" class="axis" text-anchor="middle">'
               f'{ylabel}</text>')
    for name, ref, x, xlo, xhi, y, ylo, yhi in sorted(pts, key=lambda p: p[1]):  # references drawn last, on top
        c = "#444" if ref else colors[name]
        tip = (f"{name}{' (reference)' if ref else ''}: worst violation {_f(x)} [{_f(xlo)}, {_f(xhi)}], "
               f"{ylabel} {_f(y)} [{_f(ylo)}, {_f(yhi)}]")
        out.append(f'<g><title>{html.escape(tip)}</title>'
                   f'<line x1="{sx(xlo):.1f}" y1="{sy(y):.1f}" x2="{sx(xhi):.1f}" y2="{sy(y):.1f}" stroke="{c}" stroke-opacity="0.6"/>'
                   f'<line x1="{sx(x):.1f}" y1="{sy(ylo):.1f}" x2="{sx(x):.1f}" y2="{sy(yhi):.1f}" stroke="{c}" stroke-opacity="0.6"/>')
        if ref:
            off = "" if y_lo <= y <= y_hi else f" ({ylabel} {_f(y)})"
            below = sy(y) > top + ph - 12
            anchor = "end" if sx(x) > left + pw - 90 else "start"
            tx = sx(x) - 6 if anchor == "end" else sx(x) + 6
            out.append(f'<rect x="{sx(x) - 4:.1f}" y="{sy(y) - 4:.1f}" width="8" height="8" fill="#fff" stroke="{c}" '
                       f'stroke-width="1.5"/><text x="{tx:.1f}" y="{sy(y) + (-6 if below else -5):.1f}" '
                       f'text-anchor="{anchor}" class="ref">{html.escape(name)}{html.escape(off)}</text></g>')
        else:
            out.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="4" fill="{c}" stroke="#fff" stroke-width="0.8"/></g>')
    out.append("</svg>")
    return "".join(out)


# ---------------------------------------------------------------------------- tables

#: The compact table's columns and their tooltips.
COMPACT: tuple[tuple[str, str], ...] = (
    ("rank [L, U]", "place by mean score; [L, U]: the places the data allow, for all rows at once with 95% confidence"),
    ("group", "two rows share a letter exactly when the test cannot tell their mean scores apart"),
    ("algorithm", "the algorithm (cgrpo algos lists them); its colour is its dot in the figure"),
    ("seeds within", "seeds whose final policy keeps every limit up to the tolerance: each cost's 95% upper bound "
     "at most d(1 + tol); [exact 95% interval for the share of seeds]"),
    ("undecided", "seeds whose evaluation episodes cannot tell: some cost's 95% bounds straddle d(1 + tol)"),
    ("breaks", "seeds that break a limit: some cost's lower bound (at 5%/K) is above d(1 + tol)"),
    ("score [95% CI]", "what ranks are made of: max(normalised return, 0) within the tolerance, else minus the worst "
     "violation (weighted by what the episodes cannot tell); mean over seeds [95% bootstrap interval]"),
    ("norm. return [95% CI]", "1 - (R* - R)/|R*| (1 = the exact optimum); IQM over seeds [95% bootstrap interval]; "
     "the plain return where the task has no exact optimum"),
    ("worst violation [95% CI]", "max_k max(0, J_k - d_k)/d_k of the evaluated costs, mean over seeds "
     "[95% bootstrap interval]; at most the tolerance is within it"),
)


def _compact(ranked: pd.DataFrame | None, refs: pd.DataFrame | None, meta: TaskMeta,
             colors: Mapping[str, str], highlight: str | None = None) -> tuple[list[tuple[str, str]], list[dict]]:
    """The compact table as data for the template: its (header, tooltip) pairs and, per row,
    its class (``highlight`` for the ``--highlight`` algorithm's) and cells (text, sort value
    ``v`` or None, colour swatch or None)."""
    norm = meta.optimum_return not in (None, 0)
    head = [(h, t) for h, t in COMPACT]
    if not norm:
        head[7] = ("return [95% CI]", "evaluated return, IQM over seeds [95% bootstrap interval]")
    rows = _rows(ranked)
    out = []
    for i, r in enumerate(rows + _rows(refs)):
        ref = i >= len(rows)
        n, f, u = int(r["seeds"]), int(r["feasible_seeds"]), int(r["undetermined_seeds"])
        ys = (r["return"], r["return_lo"], r["return_hi"])
        y = tuple(_normalised(meta, v) for v in ys) if norm else ys
        if ref:
            rank, key, swatch, group = "reference", 1e9 + i, "ref", "—"
        else:
            rank = rank_text(r).removeprefix("rank ").replace(" ", "\u00a0")
            key = float(r["rank"]) + i * 1e-6
            swatch, group = colors[str(r["algo"])], str(r.get("letters") or "—")
        within = f"{f}/{n}"
        if math.isfinite(float(r.get("feasible_lo", math.nan))):
            within += f" [{_f(r['feasible_lo'], 2)},\u00a0{_f(r['feasible_hi'], 2)}]"
        cells = [(rank, key, None), (group, None, None), (str(r["algo"]), None, swatch), (within, f, None),
                 (f"{u}/{n}", u, None), (f"{n - f - u}/{n}", n - f - u, None),
                 (_ci(r["score"], r["score_lo"], r["score_hi"], n), r["score"], None), (_ci(*y, n), y[0], None),
                 (_ci(r["worst"], r["worst_lo"], r["worst_hi"], n), r["worst"], None)]
        cls = "ref" if ref else ("infeasible" if f == 0 and u == 0 else "")
        if highlight is not None and str(r["algo"]) == highlight:
            cls = f"{cls} highlight".strip()
        out.append({"cls": cls,
                    "cells": [{"text": text, "swatch": sw,
                               "v": f"{v:.10g}" if isinstance(v, (int, float)) and math.isfinite(v) else None}
                              for text, v, sw in cells]})
    return head, out


def _table(title: str, header: Sequence[str], rows: Sequence[Sequence[str]], tips: Mapping[str, str],
           notes: Sequence[str] = (), highlight: str | None = None) -> dict:
    """A full table as data for the template: header, tooltips, rows (class and cells; the
    ``--highlight`` algorithm's rows also ``highlight``)."""
    cols = [i for i, h in enumerate(header) if h.startswith("seeds within d(") or h == "undetermined seeds"]
    # A deployment table's rows belong to their learner.
    algo_col = next((list(header).index(h) for h in ("algo", "learner") if h in header), None)
    out = []
    for row in rows:
        # Grey only where every seed breaks a limit: none feasible and none undetermined.
        cls = "infeasible" if len(cols) == 2 and all(row[i].startswith("0/") for i in cols) else ""
        cls = "ref" if row and row[0] == "ref" else cls
        if highlight is not None and algo_col is not None and len(row) > algo_col and row[algo_col] == highlight:
            cls = f"{cls} highlight".strip()
        out.append({"cls": cls, "cells": [_unbroken_groups(c) for c in row]})
    return {"title": title, "header": list(header), "tips": dict(tips), "rows": out, "notes": list(notes)}


#: One sentence per notion of feasibility besides the verdict, shown with the full table.
FEASIBILITY_VIEWS: tuple[str, ...] = (
    "The main view counts seeds by the verdict (within / undecided / breaks): per seed, from that seed's evaluation "
    "episodes, each wrong call at most 5% likely.",
    "P(feasible) and 'feasible?' are about the algorithm, not a seed: the share of bootstrap replicates (seeds "
    "resampled, each cost moved by its evaluation noise) whose mean worst violation is within the tolerance, and "
    "that share read at 0.95 / 0.05; many undecided seeds just under the limit can give a high P(feasible) with "
    "few seeds within.",
    "'within <cost>' is a share of episodes, not of seeds: the fraction of evaluation episodes whose own cost is "
    "within the limit (a policy can keep the mean cost within d while many episodes exceed it).",
    "'avg-iterate feasible' judges the training tail (the last 20% of iterations), not the deployed final policy: "
    "where it is within the limits and the final policy is not, the run has not converged at its budget.",
)


def _slug(text: str) -> str:
    return "".join(ch if ch.isalnum() else "-" for ch in text).strip("-").lower()


_CSS = (
    "body{font-family:system-ui,sans-serif;margin:1em 1.5em;font-size:15px;line-height:1.35;color:#222}"
    "h1{font-size:1.45em;margin:0.2em 0 0.3em}h2{font-size:1.15em;margin:1.2em 0 0.3em}"
    "p,dl,ul{max-width:66em}p.lead{margin:0.2em 0 0.5em;color:#444}"
    "ul.glance{margin:0.3em 0 0.8em;padding-left:1.2em}ul.glance li{margin:0.1em 0}"
    "ul.glance a{font-weight:600;white-space:nowrap}"
    "p.verdict{font-weight:600;margin:0.2em 0 0.2em}p.limits{margin:0.1em 0 0.3em;font-size:14px;color:#444}"
    ".task{display:flex;flex-wrap:wrap;gap:0 1.5em;align-items:flex-start}.task>.wrap{margin-top:0}"
    "svg.fig{flex:none;font-size:10px}@media (min-width:1500px){svg.fig{flex:1 1 auto;max-width:52em;height:auto}"
    "p,dl,ul{max-width:90em}}svg .tick{fill:#555}svg .axis{fill:#333;font-size:11px}svg .ref{fill:#444;font-size:9.5px}"
    ".wrap{overflow-x:auto;max-width:100%;margin:0.5em 0 1em}"
    "table{border-collapse:separate;border-spacing:0;font-size:13px}"
    "th,td{border:1px solid #ccc;border-width:0 1px 1px 0;padding:0.12em 0.4em;text-align:right}"
    "tr>:first-child{border-left-width:1px}thead th{border-top-width:1px}"
    "th{background:#f3f3f3;white-space:normal;vertical-align:bottom;font-weight:600;cursor:pointer;"
    "overflow-wrap:normal;hyphens:none}"
    "th[data-dir=asc]::after{content:' ▲'}th[data-dir=desc]::after{content:' ▼'}"
    "td:nth-child(2),td:nth-child(3){text-align:left;white-space:nowrap}"
    "table.compact td:first-child{text-align:left;white-space:nowrap}"
    "table.full th{min-width:3.5em;max-width:8.5em}table.full td{min-width:3em}table.full td:last-child{min-width:9em}"
    "table.full th:nth-child(1),table.full td:nth-child(1){position:sticky;left:0;z-index:1;min-width:5.6em;max-width:5.6em}"
    "table.full th:nth-child(3),table.full td:nth-child(3){position:sticky;left:6.4em;z-index:1;box-shadow:2px 0 2px -1px #bbb}"
    "table.full td:nth-child(1),table.full td:nth-child(3){background:#fff}"
    "table.full thead th:nth-child(1),table.full thead th:nth-child(3){background:#f3f3f3;z-index:2}"
    "tr.infeasible td{color:#777}tr.ref td{color:#555;font-style:italic;background:#fafafa}"
    "tr.highlight td{font-weight:bold;background:#fbe3f2}"
    "p.deploy{margin:0.2em 0 0.1em;font-size:14px;color:#444}table.deploy td:first-child{text-align:left}"
    "table.deploy td:nth-child(3){text-align:right}"
    ".sw{display:inline-block;width:0.7em;height:0.7em;border-radius:50%;margin-right:0.35em;vertical-align:baseline}"
    ".sw.ref{border-radius:0;border:1.5px solid #444;background:#fff;width:0.55em;height:0.55em}"
    "details{margin:0.3em 0 0.8em}summary{cursor:pointer;color:#1a4f8a}"
    "dl.glossary{display:grid;grid-template-columns:max-content 1fr;gap:0.2em 1em;font-size:14px}"
    "dl.glossary dt{font-weight:600}dl.glossary dd{margin:0}"
    "figure{margin:0.5em 0 1.5em}figure img{max-width:100%;height:auto;border:1px solid #ddd}"
    "figcaption{font-size:13px;color:#555}"
)

#: Sorts a table by the clicked column (numbers by ``data-v`` or their leading value,
#: else text); reference rows stay last. The page reads the same without it.
_SCRIPT = (
    "document.querySelectorAll('table.sortable').forEach(t=>{const hs=[...t.tHead.rows[0].cells];"
    "hs.forEach((th,i)=>th.addEventListener('click',()=>{const tb=t.tBodies[0],all=[...tb.rows],"
    "refs=all.filter(r=>r.classList.contains('ref')),rows=all.filter(r=>!r.classList.contains('ref')),"
    "dir=th.dataset.dir==='asc'?'desc':'asc';hs.forEach(h=>delete h.dataset.dir);th.dataset.dir=dir;"
    "const key=r=>{const c=r.cells[i],v=c.dataset.v!==undefined?c.dataset.v:c.textContent,x=parseFloat(v);"
    "return isNaN(x)?v:x};rows.sort((a,b)=>{const x=key(a),y=key(b),"
    "c=(typeof x==='number'&&typeof y==='number')?x-y:String(x).localeCompare(String(y));return dir==='asc'?c:-c});"
    "rows.concat(refs).forEach(r=>tb.appendChild(r))}))});"
)


def render_page(lb: Leaderboard, figures: Sequence[str] = ()) -> str:
    """The page (see the module docstring), rendered from the Jinja2 template of
    :mod:`~constrained_grpo.eval.scoring.page_template` with autoescaping; ``figures``: image
    paths relative to the page, linked at its end."""
    from markupsafe import Markup

    from constrained_grpo.eval.scoring.page_template import environment

    def tip(h: str) -> str:
        found = glossary([h])
        return found[0][1] if found else ""

    tasks: Mapping[str, TaskMeta] = lb.tasks
    task_sections = [s for s in lb.sections if s.title.startswith("Task ")]
    other = [s for s in lb.sections if not s.title.startswith("Task ")]
    # One colour per algorithm on the whole page, as in `cgrpo plot`'s figures.
    colors = algo_colors([str(a) for df in lb.per_task.values() if df is not None for a in df["algo"]])
    if lb.highlight is not None:  # --highlight: its reserved colour, the others muted
        colors = highlighted_colors(colors, lb.highlight)
    headers: list[str] = []
    task_views = []
    for s in task_sections:
        task = s.title.removeprefix("Task ")
        meta = tasks.get(task)
        view = _table(s.title, s.header, s.rows, {h: tip(h) for h in s.header}, s.notes, lb.highlight)
        view.update(task=task, slug=_slug(task), meta=meta is not None, verdict="",
                    parts=[_table(p.title, p.header, p.rows, {h: tip(h) for h in p.header}, p.notes, lb.highlight)
                           for p in s.parts])
        headers += [h for p in s.parts for h in p.header if h not in headers]
        if meta is not None:
            view["verdict"] = task_verdict(lb.per_task.get(task), meta, lb.not_ranked.get(task, ()), lb.tol)
            view["limits"] = ", ".join(f"{c.name} ≤ {c.limit:g}" for c in meta.constraints)
            view["optimum"] = f"; exact optimum R* = {meta.optimum_return:.4f}" if meta.optimum_return is not None else ""
            ranked, refs = lb.per_task.get(task), lb.references.get(task)
            view["compact_head"], view["compact_rows"] = _compact(ranked, refs, meta, colors, lb.highlight)
            # The one fragment built outside the template: inline SVG from numbers and escaped names.
            view["figure"] = Markup(task_figure(ranked, refs, meta, lb.tol, colors))
        headers += [h for h in s.header if h not in headers]
        task_views.append(view)
    others = []
    for s in other:
        if s.title.endswith("probability of improvement"):  # its columns are algorithms
            tips = {h: f"P(row > {h}): the chance that a run of the row's algorithm scores above a run of {h}, "
                    "averaged over tasks" for h in s.header[1:]} | ({s.header[0]: tip(s.header[0])} if s.header else {})
        else:
            headers += [h for h in s.header if h not in headers]
            tips = {h: tip(h) for h in s.header}
        view = _table(s.title, s.header, s.rows, tips, s.notes, lb.highlight)
        view["parts"] = [_table(p.title, p.header, p.rows, {h: tip(h) for h in p.header}, p.notes, lb.highlight)
                         for p in s.parts]
        headers += [h for p in s.parts for h in p.header if h not in headers]
        others.append(view)
    return environment().get_template("page.html").render(
        css=Markup(_CSS), script=Markup(_SCRIPT), lead=lb.preamble[0] if lb.preamble else "",
        tasks=[v for v in task_views if v["meta"] or True], tol=f"{lb.tol:g}",
        feasibility_views=FEASIBILITY_VIEWS, others=others, rules=list(lb.preamble[1:]),
        glossary=list(COMPACT) + glossary(headers), figures=[str(f) for f in figures],
    )
