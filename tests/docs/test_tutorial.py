"""Every command of docs/tutorial.md runs, in order, and writes the files the text names.

The tutorial's fenced blocks are run as written, in one temporary working folder:

* ```bash``` blocks with ``bash -euo pipefail``, the venv's ``bin`` first on ``PATH`` (so
  ``cgrpo`` and ``python`` are this interpreter's);
* ```python``` blocks with this interpreter (``python -c``, so the folder is importable);
* ```python file=NAME``` blocks are saved as NAME in the folder, not run;
* ```python excerpt``` blocks (parts of repository files) and every other fence are shown only.

Every run block is followed by a ```text output``` block: what it prints on stdout. The run
checks it: each non-blank line of the block must occur among the printed lines, in the same
order (other printed lines may come between), where ``...`` inside a line stands for any
text (timings, absolute paths).

Select with ``pytest -m tutorial`` or by file; it is part of ``make test``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

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
    "runs/bench/results.csv",
    "runs/bench/plots/Grid_HazardFuel3x3-v0_curves.png",
    "course_env.py",
    "course_agent.py",
    "runs/custom/Grid/HazardFuel3x3-v0/course_agent_LagrangianBandit/seed_0/done.json",
    "runs/custom/leaderboard.md",
)

_FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)


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
        return self.info.split() == ["text", "output"]


def parse_blocks(markdown: str) -> list[Block]:
    """The fenced blocks of ``markdown``, in order."""
    return [
        Block(m.group(1).strip(), m.group(2), markdown.count("\n", 0, m.start()) + 1)
        for m in _FENCE.finditer(markdown)
    ]


def output_mismatch(expected: str, printed: str) -> str | None:
    """The first line of ``expected`` not found in ``printed`` (in order, ``...`` matching any
    text), or None when every non-blank expected line is found."""
    lines = [line.rstrip() for line in printed.splitlines()]
    i = 0
    for want in (line.rstrip() for line in expected.splitlines()):
        if not want.strip():
            continue
        pattern = re.compile(".*".join(re.escape(part) for part in want.split("...")) + r"\Z")
        while i < len(lines) and not pattern.match(lines[i]):
            i += 1
        if i == len(lines):
            return want
        i += 1
    return None


def expected_outputs(blocks: list[Block]) -> dict[int, Block]:
    """Index of each run block -> the ```text output``` block right after it."""
    return {i: blocks[i + 1] for i, b in enumerate(blocks[:-1]) if b.runs and blocks[i + 1].is_output}


def tutorial_env() -> dict[str, str]:
    """The environment of the tutorial's commands: this venv first on PATH, one thread, no display."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["OMP_NUM_THREADS"] = "1"
    env["MPLBACKEND"] = "Agg"
    env["PYTHONUNBUFFERED"] = "1"
    env.pop("PYTHONPATH", None)  # the tutorial sets it where it needs it
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
    assert files == ["course_env.py", "course_agent.py"]
    commands = "\n".join(b.text for b in run if b.lang == "bash")
    for cmd in ("cgrpo envs --family gridworld", "cgrpo check Grid/HazardFuel3x3-v0", "cgrpo train ",
                "python -m constrained_grpo.eval.coupling demo --out", "cgrpo bench --preset coupling",
                "python -m constrained_grpo.eval.coupling analyze", "cgrpo bench --preset demo",
                "cgrpo leaderboard ", "--explain", "cgrpo plot "):
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
        "`python -m constrained_grpo.eval.coupling ... --out results/coupling` and must be committed"
    )


@pytest.mark.timeout(1800)
def test_tutorial_commands_run(tmp_path: Path) -> None:
    env = tutorial_env()
    log = []
    blocks = _blocks()
    outputs = expected_outputs(blocks)
    for index, block in enumerate(blocks):
        if not (block.runs or block.file):
            continue
        start = time.perf_counter()
        proc = run_block(block, tmp_path, env)
        log.append(f"line {block.line} ({block.info}): rc {proc.returncode}, {time.perf_counter() - start:.1f} s")
        assert proc.returncode == 0, (
            f"docs/tutorial.md line {block.line} ({block.info}) exited with {proc.returncode}:\n{block.text}\n"
            f"--- stdout ---\n{proc.stdout[-4000:]}\n--- stderr ---\n{proc.stderr[-4000:]}"
        )
        if index in outputs:
            wrong = output_mismatch(outputs[index].text, proc.stdout)
            assert wrong is None, (
                f"docs/tutorial.md line {block.line}: its shown output (line {outputs[index].line}) says\n{wrong}\n"
                f"which it did not print:\n--- stdout ---\n{proc.stdout[-4000:]}"
            )
    missing = [rel for rel in EXPECTED_FILES if not (tmp_path / rel).exists()]
    assert not missing, f"the tutorial's commands did not write {missing}\n" + "\n".join(log)
    print("\n".join(log))
