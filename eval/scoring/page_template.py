"""The leaderboard page's Jinja2 template (``page.render_page`` fills it).

Kept as a string in a module, not a data file, so that it ships with the package as code does.
Autoescaping is on: every value reaching the page is escaped unless it is wrapped in
``markupsafe.Markup`` by the page module, which does so only for the inline SVG figure, built
from numbers and escaped names (``page.task_figure``), the CSS and the sort script.
"""

from __future__ import annotations

import functools

import jinja2

__all__ = ["PAGE", "environment"]

PAGE = """\
{% macro full_table(s) -%}
<div class="wrap"><table class="full sortable"><thead><tr>
{%- for h in s.header %}<th title="{{ s.tips[h] }}">{{ h }}</th>{% endfor -%}
</tr></thead><tbody>
{%- for r in s.rows %}<tr{% if r.cls %} class="{{ r.cls }}"{% endif %}>{% for c in r.cells %}<td>{{ c }}</td>{% endfor %}</tr>{% endfor -%}
</tbody></table></div>
{% endmacro -%}
{% macro deployment_tables(parts) -%}
{% for p in parts %}<p class="deploy"><b>{{ p.title }}</b>. {{ p.notes|join(' ') }}</p>
<div class="wrap"><table class="deploy sortable"><thead><tr>
{%- for h in p.header %}<th title="{{ p.tips[h] }}">{{ h }}</th>{% endfor -%}
</tr></thead><tbody>
{%- for r in p.rows %}<tr{% if r.cls %} class="{{ r.cls }}"{% endif %}>{% for c in r.cells %}<td>{{ c }}</td>{% endfor %}</tr>{% endfor -%}
</tbody></table></div>
{% endfor -%}
{% endmacro -%}
<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>constrained-grpo leaderboard</title>
<style>{{ css }}</style></head><body>
<h1>constrained-grpo leaderboard</h1>
<p class="lead">{{ lead }} Per task, the highest-placed algorithm whose every seed keeps the limits, with its rank \
and the range of ranks the seeds allow. Hover a column for its meaning, click it to sort.</p>
<ul class="glance">{% for t in tasks %}<li><a href="#{{ t.slug }}">{{ t.task }}</a>: {{ t.verdict }}</li>{% endfor %}</ul>
{% for t in tasks -%}
<h2 id="{{ t.slug }}">{{ t.title }}</h2>
{% if t.meta -%}
<p class="verdict">{{ t.verdict }}</p>
<p class="limits">Limits {{ t.limits }} (within when J ≤ d(1 + {{ tol }})){{ t.optimum }}. Rows by mean score; \
[L, U] is the range of places the data allow, and rows sharing a group letter are not told apart by the test.</p>
<div class="task"><div class="wrap"><table class="compact sortable"><thead><tr>
{%- for h, tip in t.compact_head %}<th title="{{ tip }}">{{ h }}</th>{% endfor -%}
</tr></thead><tbody>
{%- for r in t.compact_rows %}<tr{% if r.cls %} class="{{ r.cls }}"{% endif %}>
{%- for c in r.cells %}<td{% if c.v is not none %} data-v="{{ c.v }}"{% endif %}>
{%- if c.swatch is not none %}<span class="sw{% if c.swatch == 'ref' %} ref"{% else %}" style="background:{{ c.swatch }}"{% endif %}></span>{% endif %}{{ c.text }}</td>
{%- endfor %}</tr>{% endfor -%}
</tbody></table></div>{{ t.figure }}</div>
{% endif -%}
{{ deployment_tables(t.parts) }}
<details><summary>Notes and all {{ t.header|length }} columns</summary>
{% for n in t.notes %}<p>{{ n }}</p>
{% endfor -%}
{% if t.header %}<p>{{ feasibility_views|join(' ') }}</p>
{{ full_table(t) }}
{% endif -%}
</details>
{% endfor -%}
{% for s in others -%}
<details><summary>{{ s.title }}</summary>
{% for n in s.notes %}<p>{{ n }}</p>
{% endfor -%}
{% if s.header %}{{ full_table(s) }}
{% endif -%}
{{ deployment_tables(s.parts) }}</details>
{% endfor -%}
<details><summary>How runs are scored, ranked and judged within the limits</summary>
{% for p in rules %}<p>{{ p }}</p>
{% endfor -%}
</details>
<details><summary>Columns</summary><dl class="glossary">
{% for k, v in glossary %}<dt>{{ k }}</dt><dd>{{ v }}</dd>
{% endfor -%}
</dl></details>
{% if figures -%}
<h2>Figures</h2>
{% for f in figures %}<figure><a href="{{ f }}"><img src="{{ f }}" alt="{{ f }}" loading="lazy"></a><figcaption>{{ f }}</figcaption></figure>
{% endfor -%}
{% endif -%}
<script>{{ script }}</script></body></html>

"""


@functools.lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    """The page's environment: autoescaping on, undefined names an error, no file access."""
    return jinja2.Environment(loader=jinja2.DictLoader({"page.html": PAGE}), autoescape=True,
                              undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
