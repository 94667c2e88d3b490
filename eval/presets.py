"""Named benchmark grids (``cgrpo bench --preset NAME``): Python values, not YAML.

A preset lists tasks, algorithms, seeds, a step budget and the evaluation episodes.
Algorithms that are not registered when the preset is used are skipped with a
warning, so a preset works with whatever is registered and picks up new ones.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from constrained_grpo.eval.runner import RunSpec
from constrained_grpo.eval.sweep import expand_grid

__all__ = ["DEFAULT_ALGOS", "PRESETS", "Preset", "get_preset", "resolve"]

#: The suite's algorithms, in the order the leaderboard lists ties.
DEFAULT_ALGOS: tuple[str, ...] = ("cgrpo", "grpo-screw", "grpo", "ppo-lag", "pid-lag", "ppo")


@dataclass(frozen=True)
class Preset:
    """A benchmark grid: ``tasks x algos x seeds``, each run trained for ``steps``.

    Attributes:
        name: ``quick``, ``standard`` or ``paper``.
        description: one line for ``--help`` and the leaderboard.
        tasks: task ids.
        families: task families whose every registered task is added to ``tasks``
            (so that a family's new tasks join the preset without an edit).
        algos: algorithm names; unregistered ones are skipped with a warning.
        seeds: run seeds.
        steps: env-step budget of every run.
        eval_episodes: episodes of the final deterministic evaluation.
        task_steps: per-task budgets that replace ``steps``.
        config: per-algorithm config overrides (``{algo: {field: value}}``).
    """

    name: str
    description: str
    tasks: tuple[str, ...] = ()
    families: tuple[str, ...] = ()
    algos: tuple[str, ...] = DEFAULT_ALGOS
    seeds: tuple[int, ...] = (0, 1, 2)
    steps: int = 20_000
    eval_episodes: int = 20
    task_steps: Mapping[str, int] = field(default_factory=dict)
    config: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def resolved_tasks(self) -> tuple[str, ...]:
        """``tasks``, then every task of ``families`` not listed yet, in registry order."""
        from constrained_grpo.envs import list_tasks

        tasks = list(self.tasks)
        for family in self.families:
            tasks += [t for t in list_tasks(family) if t not in tasks]
        return tuple(tasks)

    def budgets(self) -> dict[str, int]:
        """Env-step budget per task."""
        return {t: int(self.task_steps.get(t, self.steps)) for t in self.resolved_tasks()}

    def runs(self, *, save_agent: bool = True) -> list[RunSpec]:
        """The preset's runs (its algorithms must be registered: see :func:`resolve`)."""
        return expand_grid(
            self.resolved_tasks(), self.algos, self.seeds, self.budgets(),
            eval_episodes=self.eval_episodes, config=self.config, save_agent=save_agent,
        )


PRESETS: dict[str, Preset] = {
    p.name: p
    for p in (
        Preset(
            "quick",
            "smoke benchmark, minutes on 2 cores: HazardFuel (K=2, indicator hazard), 3 seeds",
            tasks=("Grid/HazardFuel-v0",),
            seeds=(0, 1, 2),
            steps=20_000,
            eval_episodes=20,
            # The GRPO agents' own small preset (8 groups of 8): about 17 iterations in
            # 20k steps instead of 3, enough for a multiplier trajectory to score.
            config={algo: {"preset": "quick"} for algo in ("cgrpo", "grpo-screw", "grpo")},
        ),
        Preset(
            "standard",
            "every gridworld task, 5 seeds, 200k steps",
            families=("gridworld",),
            seeds=tuple(range(5)),
            steps=200_000,
            eval_episodes=50,
        ),
        Preset(
            "paper",
            "every gridworld and highway task, 10 seeds, 1M steps (safety and math tasks: add them with --tasks)",
            families=("gridworld", "highway"),
            seeds=tuple(range(10)),
            steps=1_000_000,
            eval_episodes=100,
        ),
    )
}


def get_preset(name: str) -> Preset:
    """The preset called ``name``."""
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown preset {name!r}; choose one of {sorted(PRESETS)}") from None


def resolve(
    name: str,
    *,
    tasks: Sequence[str] | None = None,
    algos: Sequence[str] | None = None,
    seeds: int | Sequence[int] | None = None,
    steps: int | None = None,
    eval_episodes: int | None = None,
    registered: Sequence[str] | None = None,
) -> Preset:
    """A preset with command-line overrides, restricted to registered algorithms.

    Algorithms listed by the preset but not registered are dropped with a warning;
    algorithms asked for explicitly (``algos``) must be registered (or dotted paths),
    and unknown tasks are an error. ``seeds=N`` means seeds ``0..N-1``.
    """
    from constrained_grpo.envs import list_tasks
    from constrained_grpo.registry import list_agents

    preset = get_preset(name)
    known = list(registered) if registered is not None else list_agents()
    changes: dict[str, Any] = {}
    if tasks:
        unknown = [t for t in tasks if t not in list_tasks()]
        if unknown:
            raise ValueError(f"unknown task(s) {unknown}; registered tasks: {list_tasks()} (see `cgrpo envs`)")
        changes["tasks"] = tuple(tasks)
        changes["families"] = ()
    if algos:
        unknown = [a for a in algos if a not in known and ":" not in a]
        if unknown:
            raise ValueError(
                f"unknown algorithm(s) {unknown}; registered: {known} (see `cgrpo algos`), "
                "or give a dotted path 'package.module:factory'"
            )
        changes["algos"] = tuple(algos)
    else:
        skipped = [a for a in preset.algos if a not in known]
        kept = tuple(a for a in preset.algos if a in known)
        if skipped:
            warnings.warn(
                f"preset {name!r}: skipping algorithm(s) {skipped}, which are not registered "
                f"(registered: {known})",
                stacklevel=2,
            )
        if not kept:
            raise ValueError(
                f"preset {name!r} lists {list(preset.algos)}, none of which is registered (registered: {known}); "
                "pass --algos NAME ... with a registered name or a dotted path"
            )
        changes["algos"] = kept
    if seeds is not None:
        if isinstance(seeds, int):
            if seeds < 1:
                raise ValueError(f"--seeds must be >= 1, got {seeds}")
            changes["seeds"] = tuple(range(seeds))
        else:
            changes["seeds"] = tuple(int(s) for s in seeds)
    if steps is not None:
        if steps < 1:
            raise ValueError(f"--steps must be >= 1, got {steps}")
        changes["steps"] = int(steps)
        changes["task_steps"] = {}
    if eval_episodes is not None:
        changes["eval_episodes"] = int(eval_episodes)
    return replace(preset, **changes)
