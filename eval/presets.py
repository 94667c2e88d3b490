"""Named benchmark grids (``cgrpo bench --preset NAME``): Python values, not YAML.

A preset lists tasks, algorithms, seeds, a step budget and the evaluation episodes, and
``scopes``: what differs for one task family or one task (which algorithms can act on
it, its seeds, its budget, config defaults). Algorithms that are not registered when
the preset is used are skipped with a warning, so a preset works with whatever is
registered and picks up new ones.

>>> [(r.task, r.algo, r.seed, r.steps) for r in get_preset("quick").runs()][:2]
[('Grid/HazardFuel-v0', 'cgrpo', 0, 20000), ('Grid/HazardFuel-v0', 'cgrpo', 1, 20000)]
"""

from __future__ import annotations

import fnmatch
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from constrained_grpo.registry import DEPLOY_ALIAS_SUFFIXES
from constrained_grpo.options import merge_options

if TYPE_CHECKING:  # the runner and the sweep import torch's and scipy's users: not needed to list presets
    from constrained_grpo.eval.runner import RunSpec

__all__ = ["DEFAULT_ALGOS", "DEPLOYMENT_TASKS", "PRESETS", "Preset", "STANDARD_ALGOS", "STANDARD_DEPLOYMENTS", "Scope",
           "get_preset", "resolve"]

#: The suite's algorithms, in the order the leaderboard lists ties.
DEFAULT_ALGOS: tuple[str, ...] = ("cgrpo", "grpo-screw", "grpo", "ppo-lag", "pid-lag", "ppo")

_GRPO_NAMES: tuple[str, ...] = ("cgrpo", "grpo-screw", "grpo")

#: The standard preset's algorithms: every constrained baseline the suite ships, the GRPO
#: agents, the last-iterate rules and remedies, and the unconstrained ppo and grpo.
STANDARD_ALGOS: tuple[str, ...] = (
    *DEFAULT_ALGOS, "cgrpo-pid",
    "trpo-lag", "cpo", "pcpo", "focops", "cup", "p3o", "rcpo", "saute-ppo",
    "cgrpo-ogda", "cgrpo-reg", "cgrpo-oreg", "cgrpo-al", "cgrpo-crpo", "cgrpo-best", "cgrpo-mix",
    "ppo-lag-ogda", "ppo-lag-al", "crpo",
    "cgrpo-corr", "cgrpo-is", "cgrpo-mdp",
)
#: The tasks where every learner of ``standard`` is also deployed by each rule: the deployment
#: tables (docs/benchmark.md section 5). One training serves a learner's three runs of a seed
#: (eval.runner.deployment_of), so these cost their evaluations, not trainings.
DEPLOYMENT_TASKS: tuple[str, ...] = ("Grid/HazardFuel-v0", "Grid/HazardFuel3x3-v0", "Highway/Highway-v2")
#: ``<learner>-best`` and ``<learner>-mix`` of every standard learner but cgrpo (whose two are
#: in ``STANDARD_ALGOS``, run on every control task).
STANDARD_DEPLOYMENTS: tuple[str, ...] = tuple(
    f"{a}-{suffix}" for a in STANDARD_ALGOS if a not in ("cgrpo", "cgrpo-best", "cgrpo-mix") for suffix in DEPLOY_ALIAS_SUFFIXES
)
#: Its GRPO agents (their small per-iteration preset on highway), aliases included: an alias
#: trains as its learner does.
_STANDARD_GRPO = tuple(a for a in STANDARD_ALGOS + STANDARD_DEPLOYMENTS if a.startswith(("cgrpo", "grpo")))


def _is_dotted_path(algo: str) -> bool:
    return ":" in algo


@dataclass(frozen=True)
class Scope:
    """What a preset sets for the tasks of one family or for one task (a row of ``Preset.scopes``).

    Every field left at None keeps the preset-wide value.
    """

    algos: tuple[str, ...] | None = None
    """Only the preset's algorithms matching one of these ``fnmatch`` patterns run on the
    scope's tasks, in the preset's order; an explicit ``--algos`` list is filtered the same
    way. A dotted path (``package.module:factory``) is user code the preset cannot judge
    and always passes."""
    exclude: tuple[str, ...] | None = None
    """The preset's algorithms matching one of these ``fnmatch`` patterns do not run on the
    scope's tasks (an explicit ``--algos`` list is filtered the same way; a name the patterns
    do not match, a user's algorithm included, passes)."""
    text: bool | None = None
    """The scope's tasks take and give text: only algorithms registered with
    ``acts_on_text=True`` (:class:`~constrained_grpo.registry.AgentSpec`) run on them. A
    dotted path or a name that is not registered passes (it is judged when it runs)."""
    seeds: tuple[int, ...] | None = None
    """Seeds of the scope's runs, instead of the preset's."""
    steps: int | None = None
    """Env-step budget of each of the scope's runs (completions, for a text task)."""
    eval_episodes: int | None = None
    """Final evaluation episodes (problems, for a text task)."""
    config: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Per-algorithm config defaults for the scope's runs (``{algo: {field: value}}``). The
    preset-wide ``config``, where ``cgrpo bench --config`` lands, wins over them."""

    def allows(self, algo: str) -> bool:
        """Whether ``algo`` may run on the scope's tasks."""
        if _is_dotted_path(algo):
            return True
        if self.text and not _acts_on_text(algo):
            return False
        if self.exclude and any(fnmatch.fnmatchcase(algo, pattern) for pattern in self.exclude):
            return False
        return self.algos is None or any(fnmatch.fnmatchcase(algo, pattern) for pattern in self.algos)


def _acts_on_text(algo: str) -> bool:
    """The registry's ``acts_on_text`` capability of ``algo``; True for a name not registered."""
    from constrained_grpo.registry import agent_spec

    try:
        return agent_spec(algo).acts_on_text
    except KeyError:
        return True


#: A reference that starts where an algorithm starts takes that algorithm's config (the
#: warm start is the GRPO learners' starting point, so it gets their text preset).
_REFERENCE_CONFIG: dict[str, str] = {"ref-warmstart": "grpo"}


@dataclass(frozen=True)
class Preset:
    """A benchmark grid: ``tasks x algos x seeds``, each run trained for ``steps``, with
    per-family and per-task changes in ``scopes``.

    Attributes:
        name: ``quick``, ``standard`` or ``paper``.
        description: one line for ``--help`` and the leaderboard, with the expected wall time.
        tasks: task ids.
        families: task families whose every registered task is added to ``tasks``
            (so that a family's new tasks join the preset without an edit).
        algos: algorithm names; unregistered ones are skipped with a warning.
        seeds: run seeds.
        steps: env-step budget of every run.
        eval_episodes: episodes of the final evaluation per policy; None (every preset of the
            suite) lets each task family's plan size it from the limits (docs/benchmark.md section 3).
        config: per-algorithm config overrides (``{algo: {field: value}}``), for every task.
        scopes: :class:`Scope` rows keyed by a task family (``"math"``) or a task id
            (``"Math/ChainSum-v0"``). A task takes its family's row, then its own row's
            fields that are set (its ``config`` merges per algorithm).
        references: also run each task's reference policies (``TaskInfo.task_references``),
            with the task's seeds and budget; the leaderboard shows them unranked.
        controls: tasks that run as unranked controls where they run: their limits do not bind
            (the binding check, docs/benchmark.md section 2), so their rows are shown, labelled,
            and enter no ranking.
    """

    name: str
    description: str
    tasks: tuple[str, ...] = ()
    families: tuple[str, ...] = ()
    algos: tuple[str, ...] = DEFAULT_ALGOS
    seeds: tuple[int, ...] = (0, 1, 2)
    steps: int = 20_000
    eval_episodes: int | None = None
    config: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    scopes: Mapping[str, Scope] = field(default_factory=dict)
    references: bool = False
    controls: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        from constrained_grpo.envs import TASKS, families

        known = {t.env_id for t in TASKS} | set(families())
        unknown = sorted(set(self.scopes) - known)
        if unknown:
            raise ValueError(
                f"preset {self.name!r}: scopes {unknown} name no task family or task id; use one of the "
                f"families {sorted(families())} or a task id (see `cgrpo envs`)"
            )

    def resolved_tasks(self) -> tuple[str, ...]:
        """``tasks``, then every task of ``families`` not listed yet, in registry order."""
        from constrained_grpo.envs import list_tasks

        tasks = list(self.tasks)
        for family in self.families:
            tasks += [t for t in list_tasks(family) if t not in tasks]
        return tuple(tasks)

    def scope(self, task: str) -> Scope:
        """The :class:`Scope` that applies to ``task``: what its family can run at all (a text
        family's tasks only the algorithms registered with ``acts_on_text``: even ``cgrpo bench
        --preset quick --tasks Math/ChainSum-v0 --algos cgrpo ppo`` runs ``cgrpo`` alone there),
        the preset's row for its family, then its own."""
        from constrained_grpo.tasks import task_info

        family = task_info(task).family
        rows = [Scope(text=True)] if family.text else []
        rows += [self.scopes[k] for k in (family.name, task) if k in self.scopes]
        merged = Scope()
        for row in rows:
            config = {a: merge_options(merged.config.get(a, {}), c) for a, c in row.config.items()}
            merged = replace(
                merged,
                **{f: getattr(row, f) for f in ("algos", "exclude", "text", "seeds", "steps", "eval_episodes")
                   if getattr(row, f) is not None},
                config={**merged.config, **config},
            )
        return merged

    def task_references(self, task: str) -> tuple[str, ...]:
        """The reference policies run on ``task`` (``TaskInfo.task_references``: its family's, or
        its own; none unless ``references``, and none the preset lists among its algorithms already)."""
        from constrained_grpo.tasks import task_info

        if not self.references:
            return ()
        return tuple(r for r in task_info(task).task_references() if r not in self.algos)

    def task_algos(self, task: str) -> tuple[str, ...]:
        """The preset's algorithms that run on ``task``, in the preset's order."""
        scope = self.scope(task)
        return tuple(a for a in self.algos if scope.allows(a))

    def budgets(self) -> dict[str, int]:
        """Env-step budget per task."""
        return {t: int(self.scope(t).steps or self.steps) for t in self.resolved_tasks()}

    def runs(self, *, save_agent: bool = True) -> list[RunSpec]:
        """The preset's runs, task by task: ``(task_algos + task_references)(task) x seeds``, in that order
        (its algorithms must be registered: see :func:`resolve`)."""
        from constrained_grpo.eval.sweep import expand_grid

        specs: list[RunSpec] = []
        for task in self.resolved_tasks():
            scope = self.scope(task)
            algos = self.task_algos(task) + self.task_references(task)
            config = {a: merge_options(scope.config.get(a, {}), self.config.get(a, {})) for a in algos}
            config.update({r: merge_options(scope.config.get(a, {}), self.config.get(a, {}))
                           for r, a in _REFERENCE_CONFIG.items() if r in algos})
            specs += expand_grid(
                [task], algos, scope.seeds if scope.seeds is not None else self.seeds,
                int(scope.steps or self.steps),
                eval_episodes=scope.eval_episodes if scope.eval_episodes is not None else self.eval_episodes,
                config=config, save_agent=save_agent,
            )
        return specs

    def summary(self) -> str:
        """One line per task: its algorithms, seeds and budget."""
        lines = []
        for task in self.resolved_tasks():
            scope = self.scope(task)
            seeds = scope.seeds if scope.seeds is not None else self.seeds
            lines.append(
                f"{task}{' (unranked control)' if task in self.controls else ''}: "
                f"{len(self.task_algos(task))} algorithm(s) {list(self.task_algos(task))} x "
                f"{len(seeds)} seed(s), {int(scope.steps or self.steps)} steps"
                + (f", references {list(self.task_references(task))}" if self.task_references(task) else "")
            )
        return "\n".join(lines)


# --- the presets -------------------------------------------------------------------------
#: The gridworld tasks of ``standard``: the acceptance task, a small map whose optimum solves
#: in a second, stochastic transitions, and three constraints (K = 3).
STANDARD_GRID_TASKS: tuple[str, ...] = (
    "Grid/HazardFuel-v0", "Grid/HazardFuel3x3-v0", "Grid/HazardFuelSlip-v0", "Grid/HazardFuelMud-v0",
)
#: Highway-v1's budget in the standard preset (the PPO family's learning curve on Highway-v0,
#: the same traffic and costs, docs/benchmark.md).
HIGHWAY_STANDARD_STEPS = 300_000
#: Highway-v2's budget: cgrpo's learning curve under v2's limits reaches them by about 1.8M env
#: steps and holds there to 3M, while the PPO family's is flat from 200k (docs/benchmark.md
#: section 2, "Learning curves on v2").
HIGHWAY_V2_STEPS = 3_000_000

#: The last-iterate study's GRPO configurations: cgrpo's PI rule, every multiplier rule, the remedies.
_LAST_ITERATE_GRPO = ("cgrpo", "cgrpo-pid", "cgrpo-ogda", "cgrpo-reg", "cgrpo-oreg", "cgrpo-al", "cgrpo-crpo",
                      "cgrpo-best", "cgrpo-mix")

PRESETS: dict[str, Preset] = {
    p.name: p
    for p in (
        Preset(
            "quick",
            "smoke benchmark, minutes on 2 cores: HazardFuel (K=2, indicator hazard), 3 seeds",
            tasks=("Grid/HazardFuel-v0",),
            seeds=(0, 1, 2),
            steps=20_000,
            # The GRPO agents' own small preset (8 groups of 8): about 17 iterations in
            # 20k steps instead of 3, enough for a multiplier trajectory to score.
            config={algo: {"preset": "quick"} for algo in _GRPO_NAMES},
        ),
        # Budgets from learning curves (docs/benchmark.md section "Budgets"): per task, the budget
        # at which the best learner's curve has plateaued, the same for every algorithm of the task.
        # Grid/HazardFuel-v0 at 3M steps with cgrpo and grpo-screw is also the coupling setting.
        # Per-run costs, the plan and the wall time on 2 cores in docs/tuning.md.
        Preset(
            "standard",
            "every algorithm the suite ships (26 learners, and cgrpo-best and cgrpo-mix) on every family at budgets "
            "where learners converge, and every learner under each deployment rule (<learner>-best, -mix, trained once "
            "with <learner>) on HazardFuel, HazardFuel3x3 and Highway-v2: 4 gridworld "
            "tasks (K = 2 and the K = 3 Mud) x 10 seeds at 1-3M steps, Highway-v2 x 10 seeds at 3M steps and Highway-v1 "
            "at 300k (a control on the committed board), Math/ChainSumLong-v0 (the GRPO agents that act on text) x 10 "
            "seeds, Math/ChainSum-v0 as an unranked control (its limits do not bind); reference policies unranked; "
            "3,600 runs: run it in parts with --skip-recorded",
            # Math/ChainSumHard-v1 joins when its warm start answers its problems: with the text
            # agent's 1,500 supervised steps every learner's return is at the floor (0.008-0.016),
            # so its order would be one of feasibility alone (docs/benchmark.md section 2).
            tasks=STANDARD_GRID_TASKS + ("Highway/Highway-v1", "Highway/Highway-v2", "Math/ChainSum-v0",
                                         "Math/ChainSumLong-v0"),
            controls=("Math/ChainSum-v0",),
            algos=STANDARD_ALGOS + STANDARD_DEPLOYMENTS,
            seeds=tuple(range(10)),
            steps=1_000_000,
            references=True,
            scopes={
                # Every learner under each deployment rule on DEPLOYMENT_TASKS; elsewhere cgrpo's.
                "gridworld": Scope(exclude=STANDARD_DEPLOYMENTS),
                "highway": Scope(
                    exclude=STANDARD_DEPLOYMENTS,
                    steps=HIGHWAY_STANDARD_STEPS,
                    # 8 groups of 8 episodes (up to 30 steps) per GRPO iteration: more iterations
                    # per env step where crashes end episodes early.
                    config={algo: {"preset": "quick"} for algo in _STANDARD_GRPO},
                ),
                "Grid/HazardFuel-v0": Scope(steps=3_000_000, exclude=()),
                "Grid/HazardFuel3x3-v0": Scope(steps=1_000_000, exclude=()),
                "Grid/HazardFuelSlip-v0": Scope(steps=2_000_000),
                "Grid/HazardFuelMud-v0": Scope(steps=3_000_000),
                "Highway/Highway-v2": Scope(steps=HIGHWAY_V2_STEPS, exclude=()),
                # The text agent's standard preset (8 prompts x 8 completions, a 2 x 128
                # transformer warm-started by 1500 supervised steps): 150 iterations.
                "math": Scope(steps=9_600),
            },
        ),
        # The learning curves behind the standard preset's budgets (docs/benchmark.md, "Budgets"):
        # the best gridworld learners (time to criterion, results/bench/training.csv) well past
        # their plateau, and on highway the PPO family, whose crash rate sets that budget.
        Preset(
            "curves",
            "learning curves that set the standard budgets, about 10 min on 2 cores (--workers 2): cgrpo and "
            "grpo-screw on the 4 standard gridworld tasks x 4M steps, cgrpo, ppo-lag and ppo on Highway-v0 x 500k, 3 seeds",
            tasks=STANDARD_GRID_TASKS + ("Highway/Highway-v0",),
            algos=("cgrpo", "grpo-screw", "ppo-lag", "ppo"),
            seeds=(0, 1, 2),
            steps=4_000_000,
            scopes={
                "gridworld": Scope(algos=("cgrpo", "grpo-screw")),
                "highway": Scope(
                    algos=("cgrpo", "ppo-lag", "ppo"), steps=500_000,
                    config={algo: {"preset": "quick"} for algo in _GRPO_NAMES},
                ),
            },
        ),
        Preset(
            "paper",
            "every gridworld and highway task, 10 seeds, 1M steps; Safety PointGoal1/CarGoal1 with OmniSafe's "
            "protocol (limit 25, 5 seeds, 1e7 steps; needs `make safety`); Math/ChainSum-v0 with the GRPO agents",
            tasks=("Safety/PointGoal1-v0", "Safety/CarGoal1-v0", "Math/ChainSum-v0"),
            families=("gridworld", "highway"),
            # The OmniSafe-matched baselines run on the Safety tasks in place of ppo-lag and
            # pid-lag, whose defaults were tuned on the gridworld (docs/parity.md).
            algos=(*DEFAULT_ALGOS, "ppo-lag-omnisafe", "pid-lag-omnisafe", "trpo-lag-omnisafe"),
            seeds=tuple(range(10)),
            steps=1_000_000,
            references=True,
            scopes={
                "gridworld": Scope(algos=DEFAULT_ALGOS),
                "highway": Scope(algos=DEFAULT_ALGOS),
                # OmniSafe's benchmark protocol (github.com/PKU-Alignment/omnisafe, on-policy
                # benchmark): cost limit 25 (the tasks' default, DEFAULT_LIMIT of
                # constrained_grpo.envs.safety.env; no override here), 5 seeds, 1e7 steps.
                # Its published PPOLag at 1e7 steps, for comparison:
                #   SafetyPointGoal1-v0: reward 12.96 +- 6.95, cost 25.80 +- 34.99.
                "safety": Scope(algos=(*_GRPO_NAMES, "*-omnisafe", "ppo"), seeds=tuple(range(5)), steps=10_000_000),
                # 400 iterations of the text agent's standard preset (64 completions each).
                "math": Scope(steps=25_600),
            },
        ),
        # The coupling experiment (results/coupling, `python -m constrained_grpo.eval.studies.coupling
        # analyze`): the two GRPO aggregators, identical configurations otherwise, long enough
        # (about 1000 iterations of 16 x 16 episodes) for the multipliers to settle.
        Preset(
            "coupling",
            "ScAdv (cgrpo) vs ScRew (grpo-screw) on Grid/HazardFuel-v0, 10 seeds x 3M steps, "
            "about 1 min on 2 cores (--workers 2)",
            tasks=("Grid/HazardFuel-v0",),
            algos=("cgrpo", "grpo-screw"),
            seeds=tuple(range(10)),
            steps=3_000_000,
            # The committed experiment's protocol (results/coupling), kept so that the preset
            # reruns what is committed; every other preset leaves the count to the family's plan.
            eval_episodes=100,
        ),
        # `make demo`: the 3x3 map, whose optimum (1.2, mixing three routes) is solved by hand in
        # docs/tutorial.md. At 300k steps the constrained GRPO learners keep both limits near R*
        # while ppo and grpo take the gem route over the fuel limit. 7 seeds: the exact rank test's
        # smallest p is then 2/C(14, 7) = 5.8e-4, 0.0058 after Holm's 10 pairs, so a pair whose
        # seeds do not overlap is separated (at 5 seeds, 2/252 x 10 = 0.079, nothing could be).
        # The gridworld plan (4,491 episodes for the hazard rate at 0.2) sizes the evaluation.
        # Timings in docs/tuning.md.
        Preset(
            "demo",
            "the teaching demo (`make demo`), about 3 min on 2 cores (--workers 2): Grid/HazardFuel3x3-v0, "
            "constrained vs unconstrained learners and the reference policies, 7 seeds x 300k steps",
            tasks=("Grid/HazardFuel3x3-v0",),
            algos=("cgrpo", "grpo-screw", "ppo-lag", "ppo", "grpo"),
            seeds=tuple(range(7)),
            steps=300_000,
            references=True,
        ),
        # The last-iterate study (results/last_iterate, `python -m
        # constrained_grpo.eval.studies.last_iterate analyze`): every multiplier rule on cgrpo, and
        # ppo-lag with dual ascent and the rules, at the coupling budget; evaluation by the plan.
        Preset(
            "last-iterate",
            "final policy vs average iterate for each multiplier rule and remedy: cgrpo with 9 rules and remedies and "
            "ppo-lag on 3 gridworlds, ppo-lag's last-iterate rules on HazardFuel, 10 seeds x 3M steps (330 runs), about 1 h "
            "on 2 cores (--workers 2)",
            tasks=("Grid/HazardFuel-v0", "Grid/HazardFuel3x3-v0", "Grid/HazardFuelMud-v0"),
            algos=_LAST_ITERATE_GRPO + ("ppo-lag", "ppo-lag-ogda", "ppo-lag-al", "crpo"),
            seeds=tuple(range(10)),
            steps=3_000_000,
            # A PPO-Lagrangian run costs 15 times a cgrpo run: its rules on the goal task only.
            scopes={t: Scope(algos=(*_LAST_ITERATE_GRPO, "ppo-lag")) for t in ("Grid/HazardFuel3x3-v0", "Grid/HazardFuelMud-v0")},
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

    ``tasks``, ``seeds``, ``steps`` and ``eval_episodes`` apply to every run: they replace
    the scopes' values too. The scopes' algorithm restrictions stay: an explicit ``algos``
    list runs on each task only where the task's scope allows it (``--algos cgrpo ppo-lag``
    runs only ``cgrpo`` on a math task), a task left with no algorithm is dropped with a
    warning, and a grid left with no run at all is an error.
    """
    from constrained_grpo.envs import list_tasks
    from constrained_grpo.registry import list_agents

    preset = get_preset(name)
    known = list(registered) if registered is not None else list_agents()
    changes: dict[str, Any] = {}
    if tasks:
        from constrained_grpo.options import did_you_mean
        from constrained_grpo.tasks import known_task_ids

        ids = known_task_ids()  # the suite's and those that --import modules registered
        unknown = [t for t in tasks if t not in ids]
        if unknown:
            raise ValueError(f"unknown task(s) {unknown}{did_you_mean(unknown, ids)}; registered tasks: {ids} "
                             "(see `cgrpo envs`; a task of your own: --import MODULE)")
        changes["tasks"] = tuple(tasks)
        changes["families"] = ()
    if algos:
        unknown = [a for a in algos if a not in known and ":" not in a]
        if unknown:
            from constrained_grpo.options import did_you_mean

            raise ValueError(
                f"unknown algorithm(s) {unknown}{did_you_mean(unknown, known)}; registered: {known} (see `cgrpo algos`), "
                "or give a dotted path 'package.module:factory'"
            )
        changes["algos"] = tuple(algos)
        changes["references"] = False  # an explicit list runs what it names (ref-* names included)
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
    cleared: dict[str, None] = {}
    if seeds is not None:
        cleared["seeds"] = None
    if steps is not None:
        if steps < 1:
            raise ValueError(f"--steps must be >= 1, got {steps}")
        changes["steps"] = int(steps)
        cleared["steps"] = None
    if eval_episodes is not None:
        changes["eval_episodes"] = int(eval_episodes)
        cleared["eval_episodes"] = None
    if cleared:
        changes["scopes"] = {key: replace(scope, **cleared) for key, scope in preset.scopes.items()}
    resolved = replace(preset, **changes)
    _check_task_algos(resolved)
    return resolved


def _check_task_algos(preset: Preset) -> None:
    """Warn about tasks whose scope admits none of the preset's algorithms; raise if no task is left."""
    empty = [t for t in preset.resolved_tasks() if not preset.task_algos(t)]
    if not empty:
        return
    scopes = {t: _allowed(preset.scope(t)) for t in empty}
    if len(empty) == len(preset.resolved_tasks()):
        raise ValueError(
            f"preset {preset.name!r}: no algorithm of {list(preset.algos)} may run on {empty} "
            f"(allowed there: {scopes}); pass --algos with a matching name, e.g. cgrpo for a math task"
        )
    warnings.warn(
        f"preset {preset.name!r}: skipping task(s) {empty}: none of the algorithms {list(preset.algos)} "
        f"may run there (allowed: {scopes})",
        stacklevel=3,
    )


def _allowed(scope: Scope) -> str:
    """What ``scope`` admits, in words, for an error message."""
    parts = ([f"names matching {list(scope.algos)}"] if scope.algos is not None else []) + (
        ["algorithms that act on text (the GRPO family)"] if scope.text else [])
    return " and ".join(parts) or "any algorithm"
