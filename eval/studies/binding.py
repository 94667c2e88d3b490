"""Whether a task's limits bind: the reward maximiser breaks one, a known policy keeps them all.

A task tests its constraints when (i) the policies that stand for the reward maximiser break
at least one limit by a margin the evaluation certifies, (ii) a policy known to keep every
limit is certified within all of them, and (iii) the return gap between the two is what
keeping the limits costs. Each task declares the policies of both sides on its ``TaskInfo``
(:class:`~constrained_grpo.envs.registration.Binding`); :func:`check_binding` measures them
from the cheapest source that decides:

* ``exact`` (the gridworlds): the env's linear program. The unconstrained optimum (the
  cheapest among the reward-maximising policies) breaks when some expected cost exceeds the
  tolerated level ``t_k = d_k + tol c(d_k)`` of the verdict rule; the constrained optimum
  keeps every limit (``J_k <= d_k``). Gap: ``R_unc - R*``. No episode is played.
* ``record`` (highway, math): the final policies of recorded runs (``results/standard`` by
  default), the primary (sampled) policy of each seed, judged by the leaderboard's verdict
  rule (:func:`~constrained_grpo.eval.scoring.verdict.run_verdict`: Clopper-Pearson exact
  bounds for indicator costs, Student's t otherwise; *breaks* when a lower bound at
  ``alpha / K`` is over ``t_k``, type I error at most 0.05; *within* when every upper bound
  at ``alpha`` is within). ``Binding.recorded_as`` re-scores another task's runs (the same
  env and episodes, other limits). Gap: the mean return of the best-returning unconstrained
  policy minus that of the best keeper that kept every limit on every seed.
* ``scripted``: a function that plays scripted stand-ins of both sides (a new task without
  runs), judged by the same rule.

The task binds when every unconstrained policy breaks a limit on at least ``min_share``
(0.9: 9 of 10) of its seeds, and passes when it binds and some keeper is within every limit
on all of its seeds.

``python -m constrained_grpo.eval.studies.binding [TASK ...] [--record DIR] [--json]``
prints one block per task (default: the standard preset's tasks and controls).
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from constrained_grpo.eval.scoring.binding import MIN_SHARE, board_binding

__all__ = ["BindingReport", "MIN_SHARE", "RECORD", "Side", "board_binding", "check_binding", "main", "side_from_episodes"]

#: The committed board's record.
RECORD = Path("results/standard")
#: The share of an unconstrained policy's seeds that must break a limit (9 of 10).
#: The policy whose verdict the leaderboard uses.
PRIMARY_POLICY = "sampled"


@dataclass(frozen=True)
class Side:
    """One policy of a side, over its seeds.

    Attributes:
        name: the algorithm or reference (``exact:unconstrained``, ``exact:constrained`` for the LP).
        source: ``exact``, ``record`` (with the task whose runs were read) or ``scripted``.
        seeds: the seeds (runs) judged; 0 when none is recorded.
        breaking: seeds certified over at least one limit.
        within: seeds certified within every limit.
        mean_return: mean over the seeds of the evaluated return (NaN without seeds).
        costs: mean over the seeds of each constraint's mean episodic cost.
    """

    name: str
    source: str
    seeds: int
    breaking: int
    within: int
    mean_return: float
    costs: dict[str, float] = field(default_factory=dict)

    def line(self) -> str:
        costs = ", ".join(f"{k} {v:.4g}" for k, v in self.costs.items())
        return (f"{self.name} ({self.source}): breaks on {self.breaking}/{self.seeds}, within on "
                f"{self.within}/{self.seeds}, return {self.mean_return:.4g}; costs {costs}")


@dataclass(frozen=True)
class BindingReport:
    """The binding check of one task (module docstring).

    Attributes:
        task: the task id.
        limits: its limits, by constraint name.
        unconstrained: the reward maximiser's stand-ins.
        keepers: the policies known to keep every limit.
        binds: every unconstrained policy with seeds breaks on at least ``MIN_SHARE`` of them.
        kept: some keeper is within every limit on all of its seeds (at least one).
        gap: best unconstrained mean return minus the best kept keeper's, over exact and
            recorded sides (NaN when undecided, or when only scripted stand-ins were played).
        passed: ``binds and kept``.
        note: why a side could not be judged, if one could not.
    """

    task: str
    limits: dict[str, float]
    unconstrained: tuple[Side, ...]
    keepers: tuple[Side, ...]
    binds: bool
    kept: bool
    gap: float
    passed: bool
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON values (NaN as None)."""
        def clean(x: Any) -> Any:
            if isinstance(x, float) and math.isnan(x):
                return None
            if isinstance(x, dict):
                return {k: clean(v) for k, v in x.items()}
            if isinstance(x, (list, tuple)):
                return [clean(v) for v in x]
            return x

        return clean(asdict(self))

    def lines(self) -> list[str]:
        verdict = "binds" if self.binds else "does NOT bind"
        keep = "a keeper keeps every limit" if self.kept else "NO keeper keeps every limit"
        gap = "n/a" if math.isnan(self.gap) else f"{self.gap:.4g}"
        out = [f"{self.task}: {verdict}; {keep}; return gap {gap}  [{'pass' if self.passed else 'FAIL'}]"]
        out += [f"  unconstrained  {s.line()}" for s in self.unconstrained]
        out += [f"  keeper         {s.line()}" for s in self.keepers]
        return out + ([f"  note: {self.note}"] if self.note else [])


def _constraints(task: str) -> tuple[Any, ...]:
    from constrained_grpo.tasks import task_constraints

    return task_constraints(task)


def _tolerated(limit: float) -> float:
    from constrained_grpo.eval.scoring.stability import limit_scale
    from constrained_grpo.eval.scoring.verdict import TOL

    return limit + TOL * limit_scale(limit)


def _exact_sides(task: str) -> tuple[Side, Side]:
    from constrained_grpo.tasks import make_env

    env = make_env(task)
    try:
        opt = env.unwrapped.optimum()
    finally:
        env.close()
    names, limits = list(opt.cost_names), [float(d) for d in opt.limits]
    unc = [float(c) for c in opt.unconstrained_costs]
    con = [float(c) for c in opt.constrained_costs]
    over = any(c > _tolerated(d) for c, d in zip(unc, limits))
    kept = all(c <= d + 1e-9 for c, d in zip(con, limits))
    return (Side("exact:unconstrained", "exact", 1, int(over), int(not over), float(opt.unconstrained_return),
                 dict(zip(names, unc))),
            Side("exact:constrained", "exact", 1, int(not kept), int(kept), float(opt.constrained_return),
                 dict(zip(names, con))))


@functools.lru_cache(maxsize=4)
def _record_evals(record: str) -> Any:
    from constrained_grpo.eval.scoring.record import load_record

    return load_record(record).evals


def _judge(name: str, source: str, stats: Sequence[Sequence[Any]], returns: Sequence[float],
           constraints: Sequence[Any]) -> Side:
    """A :class:`Side` from per-seed cost statistics (``stats[seed][k]``: CostStats)."""
    from constrained_grpo.eval.scoring.verdict import TOL, run_verdict

    limits = [c.limit for c in constraints]
    indicators = [c.indicator for c in constraints]
    breaking = within = 0
    for per_seed in stats:
        _, verdicts = run_verdict(per_seed, limits, indicators, TOL)
        breaking += any(v == "over" for v in verdicts)
        within += all(v == "within" for v in verdicts)
    costs = {c.name: float(np.mean([s[k].mean for s in stats])) if stats else math.nan
             for k, c in enumerate(constraints)}
    return Side(name, source, len(stats), breaking, within, float(np.mean(returns)) if len(returns) else math.nan, costs)


def _recorded_side(name: str, task: str, recorded: str, record: str, constraints: Sequence[Any]) -> Side:
    from constrained_grpo.eval.scoring.verdict import CostStats

    evals = _record_evals(record)
    rows = evals[(evals["task"] == recorded) & (evals["algo"] == name) & (evals["policy"] == PRIMARY_POLICY)]
    rows = rows.sort_values("seed")
    stats = [[CostStats(int(r["episodes"]), float(r[f"mean_{c.name}"]), float(r[f"ss_{c.name}"]),
                        bool(r[f"binary_{c.name}"]), int(r[f"events_{c.name}"]), bool(r[f"finite_{c.name}"]))
              for c in constraints] for _, r in rows.iterrows()]
    source = "record" if recorded == task else f"record of {recorded}"
    return _judge(name, source, stats, rows["return_mean"].tolist(), constraints)


def side_from_episodes(name: str, returns: np.ndarray, costs: np.ndarray, constraints: Sequence[Any],
                       source: str = "scripted") -> Side:
    """A :class:`Side` of one evaluation (``costs``: episodes x K), judged by the verdict rule."""
    from constrained_grpo.eval.scoring.verdict import cost_stats

    stats = [[cost_stats(np.asarray(costs)[:, k]) for k in range(len(constraints))]]
    return _judge(name, source, stats, [float(np.mean(returns))], constraints)


def _load(path: str) -> Any:
    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(module), attr)


def check_binding(task: str, record: str | Path | None = RECORD, *, problems: int = 2000,
                  min_share: float = MIN_SHARE) -> BindingReport:
    """The binding check of ``task`` from its declared :class:`Binding` (module docstring).

    ``record``: the folder of recorded runs (a compact record) for the ``record`` sides;
    ``problems``: episodes a ``scripted`` declaration plays per policy. Raises ``ValueError``
    with the fix for a task that declares no binding.
    """
    from constrained_grpo.tasks import task_info

    binding = task_info(task).task_binding()
    if binding is None:
        raise ValueError(f"task {task!r} declares no binding (TaskInfo.binding); declare the policies that stand "
                         "for the reward maximiser and one known to keep every limit")
    constraints = _constraints(task)
    limits = {c.name: float(c.limit) for c in constraints}
    unc: list[Side] = []
    keep: list[Side] = []
    notes: list[str] = []
    if binding.exact:
        u, k = _exact_sides(task)
        unc.append(u)
        keep.append(k)
    scripted: tuple[Mapping[str, Any], Mapping[str, Any]] = ({}, {})
    if binding.scripted:
        scripted = _load(binding.scripted)(task, problems)
        for played, out in zip(scripted, (unc, keep)):
            out += [side_from_episodes(n, r.returns, r.costs, constraints) for n, r in played.items()]
    recorded_names = [[n for n in names if n not in played] for names, played in
                      zip((binding.unconstrained, binding.keepers), scripted)]
    if record is not None and any(recorded_names):
        if not Path(record, "record.json").is_file():
            notes.append(f"no record at {record}: the recorded sides are not judged")
        else:
            recorded = binding.recorded_as or task
            for names, out in zip(recorded_names, (unc, keep)):
                out += [_recorded_side(n, task, recorded, str(record), constraints) for n in names]
    missing = [s.name for s in unc + keep if not s.seeds]
    unc, keep = [s for s in unc if s.seeds], [s for s in keep if s.seeds]
    judged = unc
    if missing:
        notes.append(f"no recorded runs of {missing}")
    binds = bool(judged) and all(s.breaking >= min_share * s.seeds for s in judged)
    kept_sides = [s for s in keep if s.seeds and s.within == s.seeds]
    # Scripted stand-ins know the answers: their returns say nothing of what keeping costs.
    gap_unc = [s for s in judged if s.source != "scripted"]
    gap_keep = [s for s in kept_sides if s.source != "scripted"]
    gap = max(s.mean_return for s in gap_unc) - max(s.mean_return for s in gap_keep) if gap_unc and gap_keep else math.nan
    if math.isnan(gap) and judged and kept_sides:
        notes.append("the return gap needs recorded runs (scripted stand-ins know the answers)")
    return BindingReport(task, limits, tuple(unc), tuple(keep), binds, bool(kept_sides), float(gap),
                         binds and bool(kept_sides), "; ".join(notes))


def _standard_tasks() -> list[str]:
    from constrained_grpo.eval.presets import get_preset

    preset = get_preset("standard")
    return list(preset.resolved_tasks()) + [t for t in getattr(preset, "controls", ()) if t not in preset.resolved_tasks()]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m constrained_grpo.eval.studies.binding", description=__doc__.split("\n")[0])
    parser.add_argument("tasks", nargs="*", help="task ids (default: the standard preset's)")
    parser.add_argument("--record", type=Path, default=RECORD, help="recorded runs (a compact record folder)")
    parser.add_argument("--problems", type=int, default=2000, help="episodes per scripted policy")
    parser.add_argument("--json", action="store_true", help="one JSON object per task instead of text")
    args = parser.parse_args(argv)
    failed = 0
    for task in args.tasks or _standard_tasks():
        report = check_binding(task, args.record, problems=args.problems)
        failed += not report.passed
        print(json.dumps(report.to_dict(), sort_keys=True) if args.json else "\n".join(report.lines()), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
