"""What a board's own runs of one task say of whether its limits bind.

The task declares its sides (:class:`~constrained_grpo.envs.registration.Binding`): the
unconstrained stand-ins, which should break a limit, and the keepers, one of which should keep
every limit. Judged from the board's per-run verdicts (the leaderboard's ``feasibility``:
exact Clopper-Pearson bounds for indicator costs, Student's t otherwise, each wrong call at
most 5%), the limits bind when every stand-in that ran breaks a limit on at least
:data:`MIN_SHARE` of its seeds and some keeper that ran is within every limit on all of them.
:mod:`constrained_grpo.eval.studies.binding` measures the same from the cheapest source
(the LP, a record, scripted stand-ins); this is the pure function the board's header uses.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["MIN_SHARE", "board_binding", "loose_stand_ins"]

#: The share of an unconstrained stand-in's seeds that must break a limit (9 of 10).
MIN_SHARE = 0.9


def _counts(runs: Any, names: tuple[str, ...], verdict: str) -> list[tuple[str, int, int]]:
    """``(name, seeds with verdict, seeds)`` for each of ``names`` that has runs."""
    out = []
    for name in names:
        rows = runs[runs["algo"] == name]
        if len(rows):
            out.append((name, int((rows["feasibility"] == verdict).sum()), len(rows)))
    return out


def loose_stand_ins(runs: Any, binding: Any, min_share: float = MIN_SHARE) -> list[tuple[str, int, int]]:
    """``(name, breaking seeds, seeds)`` of the unconstrained stand-ins of ``binding`` that ran
    and break a limit on fewer than ``min_share`` of their seeds (the board's verdicts, as
    :func:`board_binding`): where one is, the reward maximiser keeps the limits on this board,
    and a ranking there tests no constraint (the leaderboard shows the task as an unranked
    control)."""
    return [(name, k, n) for name, k, n in _counts(runs, binding.unconstrained, "violates") if k < min_share * n]


def board_binding(runs: Any, binding: Any, min_share: float = MIN_SHARE) -> tuple[bool | None, str]:
    """What a board's own runs of one task say of its :class:`Binding`: ``(binds, sentence)``.

    ``runs``: the board's per-run rows of the task (``algo`` and the leaderboard's
    ``feasibility``: ``violates`` / ``feasible`` / ``undetermined``, the verdict rule of the
    module docstring). The limits bind on the board when every unconstrained stand-in that
    has runs breaks a limit on at least ``min_share`` of its seeds and some keeper with runs
    is within every limit on all of them; ``binds`` is None where neither side has runs. The
    sentence counts each side's seeds, e.g. "unconstrained ppo breaks a limit on 8/10 seeds,
    grpo on 10/10; ref-safe-driver keeps every limit on 10/10: the limits do not bind for ppo"."""
    unc = _counts(runs, binding.unconstrained, "violates")
    keep = _counts(runs, binding.keepers, "feasible")
    if not unc and not keep:
        return None, ""
    loose = [name for name, k, n in unc if k < min_share * n]  # loose_stand_ins, from these counts
    kept = any(k == n for _, k, n in keep)
    parts = []
    for group, what, seeds in ((unc, "breaks a limit", " seeds"), (keep, "keeps every limit", "")):
        if group:
            first = f"{group[0][0]} {what} on {group[0][1]}/{group[0][2]}{seeds}"
            parts.append(("unconstrained " if group is unc else "") + ", ".join(
                [first] + [f"{name} on {k}/{n}" for name, k, n in group[1:]]))
    binds = bool(unc) and not loose and (kept or not keep)
    if loose:
        verdict = f"the limits do not bind for {', '.join(loose)} (they need breaking on {math.ceil(min_share * 10)}/10 seeds)"
    elif keep and not kept:
        verdict = "no keeper keeps every limit on every seed"
    elif unc:
        verdict = "the limits bind"
    else:
        verdict = "no unconstrained learner ran here"
    return binds, "; ".join(parts) + ": " + verdict
