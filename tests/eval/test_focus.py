"""One's own algorithm singled out: --algos/--tasks/--highlight on the leaderboard and the
plots, and plot --add drawing a submission beside the results without packing."""

from __future__ import annotations

from pathlib import Path

import matplotlib
import pandas as pd
import pytest

from cgrpo_toy_agent import TASK, TOY, TOY_UNCONSTRAINED
from constrained_grpo.eval.scoring.loader import load_results

matplotlib.use("Agg")


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    from constrained_grpo.cli import main

    capsys.readouterr()
    try:
        code = main(list(argv))
    except SystemExit as stop:  # argparse's usage errors
        code = int(stop.code)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _submission(toy_results: Path, path: Path) -> Path:
    table = load_results(toy_results).table
    mine = table[table["algo"] == TOY].assign(algo="mine").reset_index(drop=True)
    # Not a copy of a board algorithm's runs (refused under a second name): the second half of
    # each run's evaluation episodes is the unconstrained toy's, episode for episode.
    other = table[(table["algo"] == TOY_UNCONSTRAINED) & (table["kind"] == "eval")].set_index(["seed", "policy", "episode"])
    outcome = ["return", "length", *[c for c in mine.columns if c.startswith("cost_")]]
    late = (mine["kind"] == "eval") & (mine["episode"] >= mine["episode"].max() / 2)
    keys = pd.MultiIndex.from_frame(mine.loc[late, ["seed", "policy", "episode"]])
    mine.loc[late, outcome] = other.loc[keys, outcome].to_numpy()
    mine.to_csv(path, index=False)
    return path


def test_leaderboard_prints_the_chosen_algorithms_with_the_highlight_marked(toy_results: Path, tmp_path: Path, capsys):
    out = tmp_path / "lb"
    code, printed, err = _run(capsys, "leaderboard", str(toy_results), "--out", str(out), "--algos", TOY_UNCONSTRAINED,
                              "--highlight", TOY, "--explain")
    assert code == 0, err
    task_table = printed.split(f"## Task {TASK}")[1].split("\n## ")[0]
    rows = [line for line in task_table.splitlines() if line.startswith("| ") and "rank" not in line]
    assert len(rows) == 2 and sum("◀" in r for r in rows) == 1, rows
    assert "Showing 2 of 2 algorithm(s)" in printed and f"Highlighted: {TOY}" in printed
    words = printed.split("In words:")[1].splitlines()
    assert [line for line in words if line.startswith("> ")][0].startswith(f"> {TOY}: ")
    # Only the printed view is filtered: the files hold the whole board.
    written = (out / "leaderboard.md").read_text()
    assert TOY in written and TOY_UNCONSTRAINED in written and "◀" not in written


def test_leaderboard_filters_leave_the_ranks_of_the_whole_board(toy_results: Path, tmp_path: Path, capsys):
    whole = _run(capsys, "leaderboard", str(toy_results), "--out", str(tmp_path / "a"))[1]
    code, one, err = _run(capsys, "leaderboard", str(toy_results), "--out", str(tmp_path / "b"), "--algos", TOY,
                          "--explain")
    assert code == 0, err

    def row(text: str) -> str:
        return next(line for line in text.splitlines() if line.startswith("| ") and line.split(" | ")[2] == TOY)  # rank | group | algo

    assert row(one) == row(whole)
    algo_cells = [cells[2] for line in one.split("In words:")[0].splitlines()
                  if line.startswith("| ") and len(cells := line.split(" | ")) > 2]
    assert TOY in algo_cells and TOY_UNCONSTRAINED not in algo_cells  # (its name may stay in TOY's "not separated from")
    sentences = [line for line in one.split("In words:")[1].splitlines() if line.startswith(("  cgrpo", "> "))]
    assert sentences and all(TOY_UNCONSTRAINED not in line.split(":")[0] for line in sentences)


def test_a_name_not_on_the_board_is_one_line_naming_the_choices(toy_results: Path, tmp_path: Path, capsys):
    code, _, err = _run(capsys, "leaderboard", str(toy_results), "--out", str(tmp_path), "--highlight", "mine")
    line = [x for x in err.splitlines() if "error" in x]
    assert code == 2 and len(line) == 1, err
    assert line[0].endswith(f"--highlight mine: not on this board; choose from {TOY}, {TOY_UNCONSTRAINED}"), line
    assert not (tmp_path / "leaderboard.md").exists()


@pytest.mark.slow
def test_plot_add_draws_a_submission_beside_the_board_highlighted_on_top(toy_results: Path, tmp_path: Path, capsys):
    from constrained_grpo.eval.scoring.colors import HIGHLIGHT, PALETTE, algo_colors, muted

    sub = _submission(toy_results, tmp_path / "mine.csv")
    out = tmp_path / "plots"
    code, printed, err = _run(capsys, "plot", str(toy_results), "--add", str(sub), "--algos", TOY, "--highlight", "mine",
                              "--out", str(out))
    assert code == 0, err
    assert (out / "Grid_HazardFuel3x3-v0_curves.png").is_file()

    # The same figures, open: the highlight is the last line drawn, thicker, in the reserved colour.
    from constrained_grpo.eval.scoring.plots import build_figures

    table = load_results(toy_results).table
    mine = pd.read_csv(sub, dtype={"suite": str, "task": str, "algo": str, "kind": str})
    from constrained_grpo.eval.scoring.loader import validate_table

    joined, tasks = validate_table(pd.concat([table, mine], ignore_index=True), load_results(toy_results).tasks)
    figures = build_figures(joined, tasks, highlight="mine")
    try:
        ax = figures["Grid_HazardFuel3x3-v0_curves.png"].axes[0]
        lines = [line for line in ax.get_lines() if not line.get_label().startswith(("_", "optimum"))]
        assert lines[-1].get_label() == "mine" and lines[-1].get_color() == HIGHLIGHT and lines[-1].get_linewidth() > 2
        others = {line.get_label(): line.get_color() for line in lines[:-1]}
        assert set(others) == {TOY, TOY_UNCONSTRAINED}
        own = algo_colors([TOY, TOY_UNCONSTRAINED, "mine"])
        assert all(others[a] == muted(own[a]) and others[a] not in PALETTE for a in others)
    finally:
        import matplotlib.pyplot as plt

        for fig in figures.values():
            plt.close(fig)


def test_plot_filters_name_what_the_results_hold(toy_results: Path, tmp_path: Path, capsys):
    code, _, err = _run(capsys, "plot", str(toy_results), "--tasks", "Grid/Nope-v0", "--out", str(tmp_path / "p"))
    assert code == 2 and "--tasks Grid/Nope-v0: not on this board; choose from" in err
    assert not (tmp_path / "p").exists()


@pytest.fixture(autouse=True)
def _no_display(monkeypatch):
    monkeypatch.setenv("MPLBACKEND", "Agg")


def test_the_page_draws_the_highlight_in_its_reserved_colour(toy_results: Path):
    import re
    from dataclasses import replace

    from constrained_grpo.eval.scoring.colors import HIGHLIGHT, algo_colors, muted
    from constrained_grpo.eval.scoring.leaderboard import build_leaderboard, render_html

    res = load_results(toy_results)
    lb = build_leaderboard(res.table, res.tasks)
    plain, lit = render_html(lb), render_html(replace(lb, highlight=TOY))
    dots = dict((a, c) for c, a in re.findall(r'<span class="sw" style="background:(#[0-9a-f]{6})"></span>([^<]+)<', lit))
    own = algo_colors([TOY, TOY_UNCONSTRAINED])
    assert dots == {TOY: HIGHLIGHT, TOY_UNCONSTRAINED: muted(own[TOY_UNCONSTRAINED])}
    assert HIGHLIGHT not in plain and lit.count(f'fill="{HIGHLIGHT}"') >= 1


def test_the_page_marks_the_highlighted_algorithms_rows_and_no_other(toy_results: Path):
    """Every table row of the highlighted algorithm (compact and full, every task and suite)
    carries the ``highlight`` class, and no other row does; without --highlight none does."""
    import re
    from dataclasses import replace
    from html import unescape

    from constrained_grpo.eval.scoring.leaderboard import build_leaderboard, render_html

    res = load_results(toy_results)
    lb = build_leaderboard(res.table, res.tasks)
    plain, lit = render_html(lb), render_html(replace(lb, highlight=TOY))
    assert 'class="highlight"' not in plain and " highlight" not in plain.split("<body")[1].split("<script")[0]
    rows = re.findall(r'<tr( class="[^"]*")?>(.*?)</tr>', lit.split("<body", 1)[1])
    marked = [body for cls, body in rows if "highlight" in cls]
    assert len(marked) >= 2  # the task's compact row and its full row at least


    def cells(body: str) -> list[str]:  # a row's cell texts, tags stripped
        return [unescape(re.sub(r"<[^>]+>", "", c)) for c in re.findall(r"<td[^>]*>(.*?)</td>", body)]

    # The algorithm's own rows: its name as the algo cell (third after rank and group, or the
    # first of a table keyed by algorithm), never a name in another row's "not separated from".
    def own(body: str) -> bool:
        texts = cells(body)
        return bool(texts) and (texts[0] == TOY or (len(texts) > 2 and texts[2] == TOY))

    assert all(own(body) for body in marked)
    assert not [body for cls, body in rows if "highlight" not in cls and own(body)]
