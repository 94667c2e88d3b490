"""What a task family declares, where it registers: its table entries and its facts.

A task's training and evaluation settings come from its :class:`Family` (and the few
fields its own :class:`TaskInfo` row sets), never from the text of its id: the same env
registered as ``Grid/MyGrid-v0`` or ``Foo/MyGrid-v0`` gets the same settings. A user's
task declares its facts with :func:`register_task` in its ``--import`` module; an id
registered with gymnasium alone gets :data:`USER_FAMILY`'s.

Light at import (gymnasium and the standard library only): the read side may use it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Mapping

import gymnasium as gym
import numpy as np

__all__ = ["ALGO_FAMILIES", "Binding", "EpisodeReturns", "EvalPlan", "Family", "TaskInfo", "USER_FAMILY", "register_table", "register_task", "user_tasks"]

#: The algorithm families a task family gives default settings to: the GRPO agents on control
#: tasks (:mod:`constrained_grpo.agents`), the stable-baselines3 baselines, and the GRPO agents
#: on text tasks (``text``: the text agent's options, its language model's ``lm`` among them).
ALGO_FAMILIES: tuple[str, ...] = ("grpo", "sb3", "text")


@dataclass(frozen=True)
class EvalPlan:
    """How many final-evaluation episodes a family's runs get (docs/benchmark.md, section 3).

    The count is planned from the task's limits: for every indicator constraint, the fewest
    episodes with which a policy sitting exactly at its limit is certified *within* with
    probability ``power`` (an exact binomial computation); for every other cost, the normal
    approximation with the standard deviation measured on the first ``pilot`` episodes;
    the largest of these, at most ``cap``. A family whose episodes are expensive keeps a
    smaller ``cap``, and its docs say what the plan would need.

    Attributes:
        power: the probability to certify a policy at its limit.
        cap: the most episodes per policy.
        pilot: episodes evaluated first when a cost is not an indicator (its spread sets the plan).
    """

    power: float = 0.95
    cap: int = 20_000
    pilot: int = 1_000

    def __post_init__(self) -> None:
        if not 0.0 < self.power < 1.0:
            raise ValueError(f"EvalPlan power must be in (0, 1), got {self.power}")
        if self.cap < 2 or self.pilot < 2:
            raise ValueError(f"EvalPlan cap and pilot must be >= 2, got cap={self.cap}, pilot={self.pilot}")

    def to_dict(self) -> dict[str, Any]:
        return {"power": self.power, "cap": self.cap, "pilot": self.pilot}


@dataclass(frozen=True)
class Binding:
    """What shows that a task's limits bind: the policies that stand for the reward maximiser
    (each must break a limit) and those known to keep every limit (one must), checked by
    :mod:`constrained_grpo.eval.studies.binding`.

    Attributes:
        unconstrained: algorithm or reference names whose final policies stand for the
            reward maximiser (``ppo``, ``grpo``, ``ref-unconstrained``), read from recorded runs.
        keepers: reference or algorithm names known to keep every limit (``ref-optimal``,
            ``ref-safe-driver``, a constrained learner).
        exact: the task's env solves its exact optimum (``optimum()``, a linear program): the
            unconstrained optimum's costs and the constrained optimum's decide, with no episodes.
        recorded_as: runs of this task id stand for this one (the same env, episodes and
            costs; other limits): their evaluations are re-scored against this task's limits.
        scripted: a function ``module:attr`` ``(env_id, problems) -> (unconstrained, keepers)``,
            two ``{policy: EvalResult}`` of scripted stand-ins of the two sides (for a task whose
            runs are not recorded yet); the names it plays are among ``unconstrained`` / ``keepers``.
    """

    unconstrained: tuple[str, ...] = ()
    keepers: tuple[str, ...] = ()
    exact: bool = False
    recorded_as: str | None = None
    scripted: str | None = None


@dataclass(frozen=True)
class EpisodeReturns:
    """What one episode's return can be, declared without building the env.

    An episode of ``T`` steps (``1 <= T <= horizon``) returns ``R`` with
    ``step[0] T + episode[0] <= R <= step[1] T + episode[1]``: a per-step reward in ``step``
    plus a once-per-episode term in ``episode``. Without a horizon the recorded length is not
    checked (a text task records tokens), so only ``step = (0, 0)`` bounds ``R`` then.
    ``bounded=False``: the family declares no range, and ``rule`` says why.

    Attributes:
        step: (low, high) of one step's reward.
        episode: (low, high) of what an episode earns once, besides its steps.
        horizon: the most steps of an episode (None: not declared).
        rule: the rule in words, with the task's numbers.
        bounded: False where no range is declared.
    """

    step: tuple[float, float] = (0.0, 0.0)
    episode: tuple[float, float] = (0.0, 0.0)
    horizon: int | None = None
    rule: str = ""
    bounded: bool = True

    @classmethod
    def unbounded(cls, why: str) -> "EpisodeReturns":
        """No declared range, and why."""
        return cls(rule=why, bounded=False)

    def return_range(self) -> tuple[float, float] | None:
        """(low, high) over every possible length (None: unbounded or no horizon): a bound on
        any mean of episodes, e.g. a training iteration's."""
        if not self.bounded:
            return None
        if self.step == (0.0, 0.0):
            return self.episode
        if self.horizon is None:
            return None
        ends = [self.step[i] * t + self.episode[i] for i in (0, 1) for t in (1, self.horizon)]
        return min(ends[:2]), max(ends[2:])

    def possible(self, returns: Any, lengths: Any) -> np.ndarray:
        """Per episode, whether its return and length (NaN: unknown, taken at its worst) can happen."""
        r = np.asarray(returns, dtype=float)
        if not self.bounded:
            return np.ones(r.shape, dtype=bool)
        t = np.asarray(lengths, dtype=float) if lengths is not None else np.full(r.shape, np.nan)
        if self.horizon is None:  # lengths in other units: only a length-free range applies
            t = np.full(r.shape, np.nan)
        known = ~np.isnan(t)
        ok = ~known | ((t == np.round(t)) & (t >= 1) & (t <= (self.horizon or 0)))
        # An unknown length: the widest range over 1..horizon (unbounded without a horizon).
        span = self.return_range()
        lo_unknown, hi_unknown = span if span is not None else (-math.inf, math.inf)
        tt = np.where(known, t, 1.0)
        lo = np.where(known, self.step[0] * tt + self.episode[0], lo_unknown)
        hi = np.where(known, self.step[1] * tt + self.episode[1], hi_unknown)
        tol = 1e-9 * np.maximum(1.0, np.maximum(np.abs(lo), np.abs(hi)))
        return ok & (r >= lo - tol) & (r <= hi + tol)


@dataclass(frozen=True)
class Family:
    """The facts every task of a family shares.

    Attributes:
        name: ``gridworld``, ``highway``, ``math``, ``safety``, or a user family's name.
        eval: how its final evaluations are sized (:class:`EvalPlan`).
        references: the reference policies (unranked rows) a preset runs on its tasks.
        text: its tasks take and give text (only ``acts_on_text`` algorithms run there).
        extra: the pip extra that installs what its envs need (None: nothing beyond the core).
        defaults: per algorithm family (:data:`ALGO_FAMILIES`), the options its algorithms
            take on these tasks, over their preset and under the user's options.
        return_bounds: its envs offer ``return_bounds() -> (low, high)``, bounds every episode's
            return satisfies (beside ``optimum()``); the loader checks submitted returns with them.
        episode_check: its envs offer ``possible_episodes(returns, lengths, costs) -> bool
            array``, whether each episode's return, length and costs are an outcome of the task
            (and ``episode_rule() -> str``, the rule in words); the loader refuses a submitted
            evaluation episode that is not.
        code_options: constructor keywords (``key.sub`` for a key inside a dict keyword) whose
            values name code to import or a program to start; ``cgrpo eval``/``render`` refuse
            a run directory that sets them otherwise than the task registers them.
        binding: what shows that its tasks' limits bind (:class:`Binding`; None: not declared).
        episode_returns: ``f(task kwargs) -> EpisodeReturns``, what one episode's return can
            be given its length, declared without building the env (the families without
            ``return_bounds``); the loader refuses a loaded or submitted episode outside it.
        optima: per registered task id, its exact optimum as ``TaskMeta.to_dict()["optimum"]``
            holds it, solved once and kept: the loader compares a record's with it without
            solving the task's LP again (a task not listed is solved when needed).
    """

    name: str
    eval: EvalPlan = field(default_factory=EvalPlan)
    references: tuple[str, ...] = ()
    text: bool = False
    extra: str | None = None
    defaults: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    return_bounds: bool = False
    episode_check: bool = False
    code_options: tuple[str, ...] = ()
    binding: Binding | None = None
    episode_returns: Callable[[Mapping[str, Any]], EpisodeReturns] | None = None
    optima: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        unknown = sorted(set(self.defaults) - set(ALGO_FAMILIES))
        if unknown:
            raise ValueError(f"family {self.name!r}: defaults for {unknown}; the algorithm families are {list(ALGO_FAMILIES)}")


#: The family of a task registered with gymnasium only (or with :func:`register_task` and no
#: family of its own): no option changed, evaluation planned from its limits up to 2,000
#: episodes (an env without a batched twin is evaluated one episode at a time).
USER_FAMILY = Family("user", EvalPlan(cap=2_000))


@dataclass(frozen=True)
class TaskInfo:
    """One registered task: its id, family, constructor keywords, a one-line summary, and
    what it changes from its family's facts.

    Attributes:
        env_id: the task id.
        family: its :class:`Family`.
        entry_point: ``module:callable`` that makes the env.
        kwargs: constructor keywords.
        description: one line for ``cgrpo envs``.
        vector_entry_point: the batched twin, where there is one.
        references: the task's reference policies, replacing its family's (None: the family's).
        defaults: per algorithm family, options applied after the family's (a narrower row).
        batched_eval: its vector env steps a whole batch in one process (a batched twin
            whose episodes equal the env's on the same reset seeds), so the harness's final
            evaluation runs on it.
        binding: what shows that its limits bind, replacing its family's (None: the family's).
        return_anchors: ``(low, high)`` reference policies whose mean returns on the task
            anchor its normalised return ``(R - R_low) / (R_high - R_low)`` (0: the low
            reference, 1: the high one), for a task without an exact optimum; None: ``R / R*``
            where there is an optimum, else none.
    """

    env_id: str
    family: Family
    entry_point: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    description: str = ""
    vector_entry_point: str | None = None
    references: tuple[str, ...] | None = None
    defaults: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    batched_eval: bool = False
    binding: Binding | None = None
    return_anchors: tuple[str, str] | None = None

    def task_binding(self) -> Binding | None:
        """What shows that this task's limits bind (:class:`Binding`), or None where undeclared."""
        return self.family.binding if self.binding is None else self.binding

    def task_references(self) -> tuple[str, ...]:
        """The reference policies run on this task."""
        return self.family.references if self.references is None else self.references

    def algo_defaults(self, algo_family: str) -> list[Mapping[str, Any]]:
        """The option rows an ``algo_family`` algorithm takes here: the family's, then the task's."""
        if algo_family not in ALGO_FAMILIES:
            raise ValueError(f"unknown algorithm family {algo_family!r}; use one of {list(ALGO_FAMILIES)}")
        return [row[algo_family] for row in (self.family.defaults, self.defaults) if algo_family in row]


#: Tasks declared by user modules through :func:`register_task`, by id.
_USER_TASKS: dict[str, TaskInfo] = {}


def register_table(tasks: tuple[TaskInfo, ...]) -> None:
    """Register every task of a family's table with gymnasium (idempotent)."""
    for task in tasks:
        if task.env_id in gym.registry:
            continue
        gym.register(
            id=task.env_id,
            entry_point=task.entry_point,
            vector_entry_point=task.vector_entry_point,
            kwargs=dict(task.kwargs),
        )


def register_task(
    env_id: str,
    entry_point: str,
    *,
    family: Family = USER_FAMILY,
    kwargs: Mapping[str, Any] | None = None,
    description: str = "",
    vector_entry_point: str | None = None,
    references: tuple[str, ...] | None = None,
    defaults: Mapping[str, Mapping[str, Any]] | None = None,
    batched_eval: bool = False,
) -> TaskInfo:
    """Register a user's task with gymnasium and with its facts (call it in an ``--import``
    module): ``train``, ``bench`` and the leaderboard then use its family's evaluation plan,
    references and defaults. Registering the same id twice with other facts is refused."""
    info = TaskInfo(env_id, family, entry_point, dict(kwargs or {}), description, vector_entry_point, references,
                    dict(defaults or {}), batched_eval)
    known = _USER_TASKS.get(env_id)
    if known is not None and known != info:
        raise ValueError(f"task {env_id!r} is registered already with other facts; give the new task another id")
    _USER_TASKS[env_id] = info
    register_table((info,))
    return info


def user_tasks() -> dict[str, TaskInfo]:
    """The tasks :func:`register_task` declared in this process."""
    return dict(_USER_TASKS)

