"""Progress of a final evaluation, for a console: episodes done of the plan and the ETA.

The evaluation (:mod:`constrained_grpo.eval.evaluation`) reports what it does through two
calls that cost nothing when nobody listens: :func:`planned` (the episodes it will play,
both policies together, once the plan is known) and :func:`episodes_done` (after each
episode, or each step of a batched wave with the episodes that ended in it). Inside
``with reporting(line):`` they become one ``line(text)`` call at most every ``every_s``
seconds, e.g. ``evaluation 4,096/13,068 episodes (31%), 2 min 5 s elapsed, ETA 4 min 33 s``
(ETA = elapsed x (planned - done) / done, the pace so far). The evaluation's own warnings
(:data:`FORWARDED`: a slow path, an unseeded sampler) go to ``line`` too, as they are raised,
prefixed ``warning:``, so that a sweep's driver prints them beside the run's name.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["EVERY_S", "EvalProgress", "episodes_done", "format_duration", "format_eval_progress", "planned", "reporting"]

#: The warnings :func:`reporting` sends to its ``line`` (by class name: no import of the evaluation).
FORWARDED = ("SlowEvaluationWarning", "UnseededEvaluationWarning")

#: Seconds between two progress lines (a console must hear from a run at least every 30 s).
EVERY_S = 10.0


def format_duration(seconds: float) -> str:
    """``42 s``, ``3 min 5 s``, ``2 h 4 min``."""
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    return f"{s // 3600} h {s % 3600 // 60} min"


def format_eval_progress(done: int, total: int | None, elapsed: float) -> str:
    """The line for ``done`` episodes of ``total`` (None: still sizing the plan) after ``elapsed`` s.

    >>> format_eval_progress(1024, 4096, 30.0)
    'evaluation 1,024/4,096 episodes (25%), 30 s elapsed, ETA 1 min 30 s'
    >>> format_eval_progress(500, None, 12.0)
    'evaluation 500 episodes (pilot, sizing the plan), 12 s elapsed'
    """
    if total is None:
        return f"evaluation {done:,} episodes (pilot, sizing the plan), {format_duration(elapsed)} elapsed"
    line = f"evaluation {done:,}/{total:,} episodes ({min(done / total, 1.0) if total else 1.0:.0%}), {format_duration(elapsed)} elapsed"
    if 0 < done < total:
        line += f", ETA {format_duration(elapsed * (total - done) / done)}"
    return line


class EvalProgress:
    """Counts episodes and emits :func:`format_eval_progress` lines, at most one per ``every_s``."""

    def __init__(self, line: Callable[[str], None], every_s: float = EVERY_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.line, self.every_s, self.clock = line, every_s, clock
        self.done, self.total = 0, None
        self.start = self._last = clock()

    def planned(self, total: int) -> None:
        self.total = int(total)

    def add(self, n: int) -> None:
        self.done += int(n)
        now = self.clock()
        if now - self._last >= self.every_s:
            self._last = now
            try:
                self.line(format_eval_progress(self.done, self.total, now - self.start))
            except Exception:  # a broken console channel must never fail the evaluation
                pass


_CURRENT: EvalProgress | None = None


def planned(total: int) -> None:
    """The evaluation will play ``total`` episodes in all (both policies)."""
    if _CURRENT is not None:
        _CURRENT.planned(total)


def episodes_done(n: int) -> None:
    """``n`` more episodes ended (0: a step with none, which may still be time for a line)."""
    if _CURRENT is not None:
        _CURRENT.add(n)


@contextmanager
def reporting(line: Callable[[str], None] | None, every_s: float = EVERY_S) -> Iterator[EvalProgress | None]:
    """Within the block, the evaluation's progress and its :data:`FORWARDED` warnings go to
    ``line`` (None: nowhere, and warnings are shown as usual)."""
    global _CURRENT
    previous, shown = _CURRENT, warnings.showwarning
    _CURRENT = EvalProgress(line, every_s) if line is not None else None

    def forward(message: Warning | str, category: type[Warning], *args: object, **kwargs: object) -> None:
        if line is not None and category.__name__ in FORWARDED:
            line(f"warning: {message}")
        else:
            shown(message, category, *args, **kwargs)  # type: ignore[arg-type]

    warnings.showwarning = forward
    try:
        yield _CURRENT
    finally:
        _CURRENT = previous
        if warnings.showwarning is forward:
            warnings.showwarning = shown
