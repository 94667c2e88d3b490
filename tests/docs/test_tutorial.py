"""Every command of docs/tutorial.md runs, in order, and writes the files the text names.

The tutorial's fenced blocks are run as written, in one temporary working folder:

* ```bash``` blocks with ``bash -euo pipefail``, the venv's ``bin`` first on ``PATH`` (so
  ``cgrpo`` and ``python`` are this interpreter's);
* ```python``` blocks with this interpreter (``python -c``, so the folder is importable);
* ```python file=NAME``` blocks are saved as NAME in the folder, not run;
* ```python excerpt``` blocks (parts of repository files) and every other fence are shown only.

``$BOARD`` names the repository's committed board, ``results/standard``, which the last
section ranks a submission with (the text has the reader set it in their clone).

Every run block is followed by a ```text output``` block: what it prints on stdout. The run
checks it: each non-blank line of the block must occur among the printed lines, in the same
order (other printed lines may come between), where ``...`` inside a line stands for any
text (timings, absolute paths).

Numbers that come from training depend on the machine's floating-point kernels (BLAS
blocking, FMA, thread count), so a literal match holds only where they were written. Such a
number is written ``~x`` ("about x") and the output block states its tolerance in the info
string, ```text output atol=A rtol=R```: a printed value ``y`` matches when
``|y - x| <= max(A, R |x|)``; a percentage ``~x%`` is compared as the fraction ``x / 100``
(a share of episodes moves by whole percents where a mean moves by hundredths). Every other number must be printed exactly as shown (task
facts, LP optima, counts, pure arithmetic). docs/tutorial.md says how the tolerance was
measured.

The whole tutorial runs once (``test_tutorial_commands_run``) under 1 BLAS thread, and its
blocks outside the sweeps once more, one after the other in a fresh folder, under 2
(``test_tutorial_outputs_do_not_depend_on_blas_threads``: ``OMP_NUM_THREADS``, which also
sizes torch's intra-op pool when torch is imported, ``OPENBLAS_NUM_THREADS`` for numpy's and
scipy's OpenBLAS, ``MKL_NUM_THREADS`` for torch's MKL). Both must print the shown output,
``~x`` within its tolerance and every other number exactly: a printed number may not depend
on the order in which a threaded kernel sums. (Training pins torch to one intra-op thread
itself, the harness's runner and the GRPO agents' ``num_threads``; what the variables still
reach is numpy's and scipy's BLAS and any torch code outside an agent.) The two-thread run
keeps every kind of output (a command's text, Python's prints, a training run's ~numbers,
the files written) and leaves out the sweeps, which hold most of the CPU time; the two runs
go one after the other, not side by side, so that a machine whose other core is busy
passes them too.

Select with ``pytest -m tutorial`` or by file; it is part of ``make test``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from constrained_grpo.eval.sweep import THREAD_VARIABLES  # OpenMP's (torch's intra-op pool), MKL's, OpenBLAS's

pytestmark = pytest.mark.tutorial

REPO = Path(__file__).resolve().parents[2]
TUTORIAL = REPO / "docs" / "tutorial.md"

#: Files the tutorial says its commands write (relative to the working folder), checked after the run.
EXPECTED_FILES: tuple[str, ...] = (
    "runs/Grid/HazardFuel3x3-v0/cgrpo/seed_0/config.json",
    "runs/Grid/HazardFuel3x3-v0/cgrpo/seed_0/progress.csv",
    "runs/Grid/HazardFuel3x3-v0/cgrpo/seed_0/eval.csv",
    "runs/Grid/HazardFuel3x3-v0/cgrpo/seed_0/done.json",
    "runs/Grid/HazardFuel3x3-v0/cgrpo/seed_0/agent",
    "coupling/controlled.png",
    "coupling/controlled.csv",
    "coupling/multipliers.png",
    "coupling/effective_weights.png",
    "coupling/coupling.md",
    "runs/bench/leaderboard.md",
    "runs/bench/leaderboard.html",
    "runs/bench/runs.csv",
    "runs/bench/pairs.csv",
    "runs/bench/deployments.csv",
    "runs/bench/results.csv",
    "runs/bench/plots/Grid_HazardFuel3x3-v0_curves.png",
    "course_env.py",
    "course_agent.py",
    "runs/custom/Grid/HazardFuel3x3-v0/course_agent_LagrangianBandit/seed_0/done.json",
    "runs/custom/leaderboard.md",
    "my_algos.py",
    "runs/Grid/HazardFuel3x3-v0/cell-bandit/seed_0/done.json",
    "runs/mine/Grid/HazardFuel3x3-v0/cell-bandit/seed_9/done.json",
    "runs/mine/results.csv",
    "runs/board/plots/Grid_HazardFuel3x3-v0_curves.png",
    "runs/board/leaderboard.html",
    "runs/board/runs.csv",
)

#: The committed board that the tutorial's last section ranks a submission with, as ``$BOARD``
#: (the text has the reader set it to ``results/standard`` in their clone).
BOARD = REPO / "results" / "standard"

_FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
#: ``~x`` in an output block: a number from training, matched within the block's tolerance.
_ABOUT = re.compile(r"~(-?\d+(?:\.\d+)?%?)")
#: A printed number that an ``~x`` may match.
_PRINTED_NUMBER = r"(-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)"


def _value(number: str) -> float:
    """A ``~x`` or printed number as compared: ``x%`` is the fraction ``x / 100``."""
    return float(number[:-1]) / 100 if number.endswith("%") else float(number)


@dataclass(frozen=True)
class Tolerance:
    """How far a printed number may be from an ``~x`` of an output block: ``max(atol, rtol |x|)``."""

    atol: float
    rtol: float

    def bound(self, shown: float) -> float:
        return max(self.atol, self.rtol * abs(shown))

    def allows(self, shown: str, printed: str) -> bool:
        x, y = _value(shown), _value(printed) / (100 if shown.endswith("%") else 1)
        # A hair over the bound for the decimal rounding of x and y themselves.
        return abs(y - x) <= self.bound(x) * (1 + 1e-9) + 1e-12


@dataclass(frozen=True)
class Block:
    """One fenced block: its info string, its text, and the line where it starts."""

    info: str
    text: str
    line: int

    @property
    def lang(self) -> str:
        return self.info.split()[0] if self.info.split() else ""

    @property
    def file(self) -> str | None:
        """NAME of ```python file=NAME```, else None."""
        for word in self.info.split()[1:]:
            if word.startswith("file="):
                return word[len("file="):]
        return None

    @property
    def runs(self) -> bool:
        return self.lang == "bash" or (self.lang == "python" and len(self.info.split()) == 1)

    @property
    def is_output(self) -> bool:
        """A ```text output``` block: the expected stdout of the run block before it."""
        return self.info.split()[:2] == ["text", "output"]

    @property
    def tolerance(self) -> Tolerance | None:
        """The ``atol=A rtol=R`` of an output block's info string (both required), else None."""
        fields = dict(word.split("=", 1) for word in self.info.split()[2:] if "=" in word)
        if not fields:
            return None
        unknown = set(fields) - {"atol", "rtol"}
        if unknown or len(fields) != 2:
            raise ValueError(f"line {self.line}: output tolerance takes atol=A rtol=R, got {self.info!r}")
        return Tolerance(float(fields["atol"]), float(fields["rtol"]))


def parse_blocks(markdown: str) -> list[Block]:
    """The fenced blocks of ``markdown``, in order."""
    return [
        Block(m.group(1).strip(), m.group(2), markdown.count("\n", 0, m.start()) + 1)
        for m in _FENCE.finditer(markdown)
    ]


def _line_pattern(want: str) -> tuple[re.Pattern[str], list[str]]:
    """The regex of one expected line (``...`` any text, ``~x`` a number) and its ``x`` values."""
    about: list[str] = []
    parts = []
    for wild in want.split("..."):
        pieces = _ABOUT.split(wild)  # literal, number, literal, number, ...
        about += pieces[1::2]
        parts.append("".join(re.escape(p) if k % 2 == 0 else _PRINTED_NUMBER + "%" * p.endswith("%")
                             for k, p in enumerate(pieces)))
    return re.compile(".*".join(parts) + r"\Z"), about


def output_mismatch(expected: str, printed: str, tolerance: Tolerance | None = None) -> str | None:
    """The first line of ``expected`` not found in ``printed`` (in order, ``...`` matching any
    text, ``~x`` any number within ``tolerance`` of x), or None when every non-blank expected
    line is found."""
    lines = [line.rstrip() for line in printed.splitlines()]
    i = 0
    for want in (line.rstrip() for line in expected.splitlines()):
        if not want.strip():
            continue
        pattern, about = _line_pattern(want)
        if about and tolerance is None:
            raise ValueError(f"expected line {want!r} has ~numbers but its block states no atol=/rtol=")

        def matches(line: str) -> bool:
            m = pattern.match(line)
            return m is not None and all(tolerance.allows(x, y) for x, y in zip(about, m.groups()))

        while i < len(lines) and not matches(lines[i]):
            i += 1
        if i == len(lines):
            return want
        i += 1
    return None


def expected_outputs(blocks: list[Block]) -> dict[int, Block]:
    """Index of each run block -> the ```text output``` block right after it."""
    return {i: blocks[i + 1] for i, b in enumerate(blocks[:-1]) if b.runs and blocks[i + 1].is_output}


#: The BLAS thread counts the tutorial's commands run under (see the module docstring).
THREAD_COUNTS: tuple[int, ...] = (1, 2)


def tutorial_env(threads: int = 1) -> dict[str, str]:
    """The environment of the tutorial's commands: this venv first on PATH, ``threads`` BLAS
    threads, no display, ``BOARD`` the repository's committed board."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    for var in THREAD_VARIABLES:
        env[var] = str(threads)
    env["MPLBACKEND"] = "Agg"
    env["PYTHONUNBUFFERED"] = "1"
    env.pop("PYTHONPATH", None)  # the tutorial sets it where it needs it
    env["BOARD"] = str(BOARD)
    env.pop("CGRPO_PROGRESS_FLUSH_S", None)
    return env


def run_block(block: Block, cwd: Path, env: dict[str, str], timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """Save or run one block in ``cwd``; return the finished process (a saved file gives rc 0)."""
    if block.file is not None:
        (cwd / block.file).write_text(block.text, encoding="utf-8")
        return subprocess.CompletedProcess([block.file], 0, "", "")
    if block.lang == "bash":
        args = ["bash", "-euo", "pipefail", "-c", block.text]
    else:
        args = [sys.executable, "-c", block.text]
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def _blocks() -> list[Block]:
    return parse_blocks(TUTORIAL.read_text(encoding="utf-8"))


def test_tutorial_blocks_are_parsed() -> None:
    blocks = _blocks()
    run = [b for b in blocks if b.runs]
    files = [b.file for b in blocks if b.file]
    assert len(run) >= 10, [b.info for b in blocks]
    assert files == ["course_env.py", "course_agent.py", "my_algos.py"]
    commands = "\n".join(b.text for b in run if b.lang == "bash")
    for cmd in ("cgrpo envs --family gridworld", "cgrpo check Grid/HazardFuel3x3-v0", "cgrpo train ",
                "python -m constrained_grpo.eval.studies.coupling demo --out", "cgrpo bench --preset coupling",
                "python -m constrained_grpo.eval.studies.coupling analyze", "cgrpo bench --preset demo",
                "cgrpo leaderboard ", "--explain", "cgrpo plot ", "cgrpo bench --preset standard",
                "--add runs/mine/results.csv", "--highlight cell-bandit"):
        assert cmd in commands, f"docs/tutorial.md no longer runs {cmd!r}"
    # Every block is either run, saved, or explicitly marked as shown only.
    for b in blocks:
        if b.lang in ("bash", "python"):
            assert b.runs or b.file or b.info.split()[1:] == ["excerpt"], f"line {b.line}: unknown fence {b.info!r}"


def test_every_run_block_shows_its_output() -> None:
    blocks = _blocks()
    outputs = expected_outputs(blocks)
    missing = [b.line for i, b in enumerate(blocks) if b.runs and i not in outputs]
    assert not missing, f"docs/tutorial.md: the blocks at lines {missing} show no ```text output``` after them"


def test_output_matching() -> None:
    printed = "header\n  return 1.1900 (optimum R* 1.2000)\ndone in 2.6 s -> runs/x\nfooter\n"
    assert output_mismatch("  return 1.1900 (optimum R* 1.2000)\ndone in ... s -> runs/x\n", printed) is None
    assert output_mismatch("done in ... s -> runs/x\n  return 1.1900 (optimum R* 1.2000)", printed) == (
        "  return 1.1900 (optimum R* 1.2000)")  # out of order
    assert output_mismatch("  return 1.2000 (optimum R* 1.2000)", printed) == "  return 1.2000 (optimum R* 1.2000)"
    assert output_mismatch("done in 2.6 s", printed) == "done in 2.6 s"  # a whole line, not a part


def test_about_numbers_match_within_their_tolerance() -> None:
    tol = Tolerance(atol=0.01, rtol=0.02)
    printed = "  tail return 1.108 [1.096, 1.120]  gap to R* 0.092\n  fuel: 4.600 (200511 steps)\n"
    # 1.112 -> 1.108 and 1.104 -> 1.096 are inside max(0.01, 2%): 0.0222 at 1.112.
    assert output_mismatch("  tail return ~1.112 [~1.104, ~1.120]  gap to R* ~0.088", printed, tol) is None
    assert output_mismatch("  tail return ~1.112 [~1.104, ~1.120]  gap to R* ~0.060", printed, tol) == (
        "  tail return ~1.112 [~1.104, ~1.120]  gap to R* ~0.060")  # 0.032 > 0.01 (2% of 0.06 is less)
    assert output_mismatch("  fuel: ~4.65 (~200511 steps)", printed, tol) is None  # 0.05 <= 2% of 4.65 = 0.093
    assert output_mismatch("  fuel: ~4.65 (~200511 steps)", printed, Tolerance(0.01, 0.01)) == "  fuel: ~4.65 (~200511 steps)"
    assert output_mismatch("  fuel: ~4.600 (~210000 steps)", printed, tol) == "  fuel: ~4.600 (~210000 steps)"
    # Numbers without ~ stay exact, and ~ needs a stated tolerance.
    assert output_mismatch("  tail return 1.112 [~1.104, ~1.120]", printed, tol) == "  tail return 1.112 [~1.104, ~1.120]"
    with pytest.raises(ValueError, match="atol"):
        output_mismatch("  tail return ~1.112 ...", printed)


def test_about_blocks_state_their_tolerance() -> None:
    """Every output block with ~numbers states atol= and rtol=, no looser than the measured
    cross-kernel variation times a margin (docs/tutorial.md, "How to follow it")."""
    marked = 0
    for block in _blocks():
        if block.is_output and _ABOUT.search(block.text):
            marked += 1
            assert block.tolerance is not None, f"docs/tutorial.md line {block.line}: ~numbers need atol= rtol= in {block.info!r}"
            assert block.tolerance.atol <= 0.05 and block.tolerance.rtol <= 0.05, (block.line, block.tolerance)
        elif block.is_output:
            assert block.tolerance is None, f"line {block.line}: a tolerance without any ~number"
    assert marked >= 5


def _moved(text: str, target: int, factor: float, tol: Tolerance) -> str:
    """``text`` with every ``~x`` written as x, the ``target``-th one moved by ``factor`` times its bound."""
    count = -1

    def repl(m: re.Match[str]) -> str:
        nonlocal count
        count += 1
        if count != target:
            return m.group(1)
        shown = m.group(1)
        x = _value(shown)
        if shown.endswith("%"):
            return f"{100 * (x + factor * tol.bound(x)):.6f}%"
        return f"{x + factor * tol.bound(x):.6f}"

    return _ABOUT.sub(repl, text)


def test_every_documented_about_number_is_checked() -> None:
    """A test of the test: for each ~number of the tutorial, printing it moved by half its
    tolerance still matches, and moved by one and a half times its tolerance does not."""
    checked = 0
    for block in _blocks():
        if not (block.is_output and _ABOUT.search(block.text)):
            continue
        tol = block.tolerance
        assert tol is not None
        # The block's own lines (with ... lines and wildcards filled in by any text) as printed.
        def printed(target: int, factor: float) -> str:
            return _moved(block.text, target, factor, tol).replace("...", "filler")

        assert output_mismatch(block.text, printed(-1, 0.0), tol) is None, block.line
        for target in range(len(_ABOUT.findall(block.text))):
            for sign in (1.0, -1.0):
                assert output_mismatch(block.text, printed(target, 0.5 * sign), tol) is None, (block.line, target)
                assert output_mismatch(block.text, printed(target, 1.5 * sign), tol) is not None, (block.line, target)
            checked += 1
    assert checked >= 20


def test_tutorial_mentions_the_files_it_checks() -> None:
    text = TUTORIAL.read_text(encoding="utf-8")
    for rel in EXPECTED_FILES:
        parts = rel.split("/")
        # The directory and the file name appear in the text (perhaps apart: "DIR/x" and "runs/bench").
        assert parts[-1] in text, f"docs/tutorial.md does not mention {parts[-1]} ({rel})"


def test_tutorial_links_resolve() -> None:
    """Relative links and images (``](path)``) point at files of the repository."""
    text = TUTORIAL.read_text(encoding="utf-8")
    missing = []
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
        if "://" in target:
            continue
        if not (TUTORIAL.parent / target).exists():
            missing.append(target)
    assert not missing, (
        f"docs/tutorial.md links to missing files {missing}; the coupling figures are written by "
        "`python -m constrained_grpo.eval.studies.coupling ... --out results/coupling` and must be committed"
    )


#: Commands of the tutorial's sweeps and of the steps that read their runs: the
#: thread-independence check leaves them out (their outputs are of the kinds the other
#: blocks check too, and they hold most of the tutorial's CPU time). A block any of whose
#: lines starts with one of these is left out.
SWEEP_COMMANDS: tuple[str, ...] = (
    "cgrpo bench", "python -m constrained_grpo.eval.studies.coupling analyze", "cgrpo leaderboard runs/bench",
    "cgrpo plot runs/bench",
    # The last section's submission: its table and the board it joins read the bench's runs.
    "cgrpo leaderboard runs/mine", "cgrpo plot $BOARD", "cgrpo leaderboard $BOARD",
    # The 200,000-step run and the files it writes: the 20,000-step runs of the multiplier
    # section print a training run's ~numbers too, at a tenth of the CPU.
    "cgrpo train Grid/HazardFuel3x3-v0 cgrpo --steps 200000", "cut -d, -f1-8 runs/Grid/", "head -4 runs/Grid/",
)


def outside_sweeps(block: Block) -> bool:
    """Whether ``block`` neither runs a sweep nor reads one's runs (:data:`SWEEP_COMMANDS`)."""
    return not any(line.strip().startswith(SWEEP_COMMANDS) for line in block.text.splitlines())


def thread_check_lines(blocks: list[Block]) -> set[int]:
    """The lines of the blocks the two-thread run plays: every saved file, and outside the
    sweeps every block whose shown output has ~numbers (where a summation order would show)
    plus the first bash and the first Python block shown exactly (a command's text, a print)."""
    outputs = expected_outputs(blocks)
    kept: set[int] = set()
    exact: set[str] = set()
    for index, block in enumerate(blocks):
        if block.file:
            kept.add(block.line)
        elif block.runs and outside_sweeps(block) and index in outputs:
            if outputs[index].tolerance is not None:
                kept.add(block.line)
            elif block.lang not in exact:
                exact.add(block.lang)
                kept.add(block.line)
    return kept


def run_tutorial(folder: Path, threads: int, only: Callable[[Block], bool] | None = None) -> tuple[str | None, list[str]]:
    """The tutorial's blocks (those ``only`` keeps; every one by default) in ``folder`` under
    ``threads`` BLAS threads: the first failure (None when every block ran and printed its
    output, and, for the whole tutorial, the files exist) and the log."""
    env = tutorial_env(threads)
    log: list[str] = []
    blocks = _blocks()
    outputs = expected_outputs(blocks)
    for index, block in enumerate(blocks):
        if not (block.runs or block.file) or (only is not None and block.runs and not only(block)):
            continue
        start = time.perf_counter()
        proc = run_block(block, folder, env)
        log.append(f"{threads} thread(s), line {block.line} ({block.info}): rc {proc.returncode}, "
                   f"{time.perf_counter() - start:.1f} s")
        if proc.returncode != 0:
            return (f"{threads} BLAS thread(s): docs/tutorial.md line {block.line} ({block.info}) exited with "
                    f"{proc.returncode}:\n{block.text}\n--- stdout ---\n{proc.stdout[-4000:]}\n--- stderr ---\n"
                    f"{proc.stderr[-4000:]}"), log
        if index in outputs:
            wrong = output_mismatch(outputs[index].text, proc.stdout, outputs[index].tolerance)
            if wrong is not None:
                return (f"{threads} BLAS thread(s): docs/tutorial.md line {block.line}: its shown output (line "
                        f"{outputs[index].line}) says\n{wrong}\nwhich it did not print (~numbers within "
                        f"{outputs[index].tolerance}):\n--- stdout ---\n{proc.stdout[-4000:]}"), log
    missing = [rel for rel in EXPECTED_FILES if not (folder / rel).exists()] if only is None else []
    return (f"{threads} BLAS thread(s): the tutorial's commands did not write {missing}" if missing else None), log


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_tutorial_commands_run(tmp_path: Path) -> None:
    """Every block of the tutorial, in order, with one BLAS thread: each prints what the text shows."""
    failure, log = run_tutorial(tmp_path, THREAD_COUNTS[0])
    print("\n".join(log))
    assert failure is None, failure


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_tutorial_outputs_do_not_depend_on_blas_threads(tmp_path: Path) -> None:
    """The blocks of :func:`thread_check_lines` (every kind of output: a command's text,
    Python's prints, the ~numbers of training runs and of the multiplier rules, the files
    written) with two BLAS threads print what the text shows too: its numbers do not hang on
    the summation order."""
    lines = thread_check_lines(_blocks())
    failure, log = run_tutorial(tmp_path, THREAD_COUNTS[1], only=lambda block: block.line in lines)
    print("\n".join(log))
    assert failure is None, failure


def test_the_thread_check_covers_every_kind_of_output() -> None:
    """The blocks the two-thread run keeps show plain text, ~numbers and files, in both languages."""
    blocks = _blocks()
    outputs = expected_outputs(blocks)
    lines = thread_check_lines(blocks)
    kept = [i for i, b in enumerate(blocks) if b.runs and b.line in lines]
    assert {blocks[i].lang for i in kept} == {"bash", "python"}
    assert any(outputs[i].tolerance is not None for i in kept if i in outputs)  # ~numbers
    assert any(outputs[i].tolerance is None for i in kept if i in outputs)  # exact text
    assert any("cgrpo train" in blocks[i].text for i in kept)  # a training run's ~numbers
    assert len(kept) < len([b for b in blocks if b.runs])  # the sweeps are left out
