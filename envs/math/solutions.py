"""Worked solutions in several styles: the demonstrations of the supervised warm start.

The warm start imitates a *mixture* of styles on purpose, so that the warm-started policy
violates the constraints at a known rate and Constrained GRPO has something to fix:

=========  ==========================================================  ===================
style      example (``What is 5 + 3 + 2?``)                            breaks
=========  ==========================================================  ===================
concise    ``5 + 3 = 8\\n8 + 2 = 10\\n#### 10``                           nothing
verbose    ``Let's solve it step by step.\\nFirst, 5 + 3 = 8.\\n...``      length (long)
direct     ``#### 10``                                                 nothing (but harder)
phrase     ``5 + 3 = 8\\n8 + 2 = 10\\nThe answer is 10.``                 format
tool       ``eval(5 + 3 + 2) = 10\\n#### 10``                            banned
=========  ==========================================================  ===================

With :data:`DEFAULT_MIXTURE` the warm-started policy writes about 30% over-long answers,
20% without the required form and 5% with a banned pattern, against the default limits
0.1 / 0.1 / 0.05 of the math tasks.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from constrained_grpo.envs.math.extract import format_answer
from constrained_grpo.envs.math.problems import Problem

__all__ = ["DEFAULT_MIXTURE", "STYLES", "sample_styles", "worked_solution"]

#: The solution styles.
STYLES: tuple[str, ...] = ("concise", "verbose", "direct", "phrase", "tool")
#: Share of each style in the warm-start data.
DEFAULT_MIXTURE: dict[str, float] = {"concise": 0.35, "verbose": 0.30, "direct": 0.10, "phrase": 0.20, "tool": 0.05}

_OPENERS = ("Let's solve it step by step.", "We work it out one step at a time.", "Let me think about this carefully.")
_FIRST = ("First", "To start")
_THEN = ("Then", "Next", "After that")
_CLOSERS = ("So the answer is {a}.", "That gives a final result of {a}.", "Therefore the answer is {a}.")


def _choice(rng: np.random.Generator, options: tuple[str, ...]) -> str:
    return options[int(rng.integers(0, len(options)))]


def _work_lines(problem: Problem) -> list[str]:
    """The worked lines of a problem: its steps, else its reference solution's lines."""
    if problem.steps:
        return [str(s) for s in problem.steps]
    if problem.solution:
        return [ln for ln in problem.solution.splitlines() if ln.strip() and not ln.lstrip().startswith("####")]
    return []


def worked_solution(problem: Problem, style: str, rng: np.random.Generator) -> str:
    """A solution of ``problem`` in ``style`` (one of :data:`STYLES`)."""
    a = format_answer(problem.answer)
    final = f"#### {a}"
    lines = _work_lines(problem)
    if style == "concise":
        return "\n".join([*lines, final])
    if style == "direct":
        return final
    if style == "phrase":
        return "\n".join([*lines, f"The answer is {a}."])
    if style == "verbose":
        out = [_choice(rng, _OPENERS)]
        for i, line in enumerate(lines):
            lead = _choice(rng, _FIRST) if i == 0 else _choice(rng, _THEN)
            out.append(f"{lead}, {line.rstrip('.')}.")
        out += [_choice(rng, _CLOSERS).format(a=a), final]
        return "\n".join(out)
    if style == "tool":
        call = f"eval({problem.expression})" if problem.expression else f'exec("answer = {a}")'
        return f"{call} = {a}\n{final}"
    raise ValueError(f"unknown solution style {style!r}; choose one of {list(STYLES)}")


def sample_styles(n: int, rng: np.random.Generator, mixture: Mapping[str, float] | None = None) -> list[str]:
    """``n`` styles drawn from ``mixture`` (default :data:`DEFAULT_MIXTURE`; weights are normalised)."""
    mix = dict(DEFAULT_MIXTURE if mixture is None else mixture)
    unknown = sorted(set(mix) - set(STYLES))
    if unknown:
        raise ValueError(f"unknown solution style(s) {unknown}; choose from {list(STYLES)}")
    names = list(mix)
    weights = np.asarray([float(mix[k]) for k in names])
    if np.any(weights < 0) or not np.isfinite(weights).all() or weights.sum() <= 0:
        raise ValueError(f"mixture weights must be finite, >= 0 and not all zero, got {mix}")
    idx = rng.choice(len(names), size=int(n), p=weights / weights.sum())
    return [names[i] for i in idx]
