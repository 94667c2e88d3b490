"""Presets: Python values resolved against the registries."""

from __future__ import annotations

import pytest

from cgrpo_toy_agent import TASK, TOY
from constrained_grpo.envs import list_tasks
from constrained_grpo.eval.presets import (DEFAULT_ALGOS, DEPLOYMENT_TASKS, PRESETS, STANDARD_ALGOS, STANDARD_DEPLOYMENTS,
                                          get_preset, resolve)
from constrained_grpo.eval.runner import deployment_of
from constrained_grpo.registry import agent_spec, list_agents


def test_presets_name_registered_tasks():
    for preset in PRESETS.values():
        tasks = preset.resolved_tasks()
        assert tasks and set(tasks) <= set(list_tasks())
        assert preset.steps > 0 and preset.seeds
        # The experiments (coupling, demo, last-iterate) name their own algorithms; the benchmark presets run the
        # suite's (paper adds the OmniSafe-matched baselines, for its Safety tasks).
        assert preset.algos[: len(DEFAULT_ALGOS)] == DEFAULT_ALGOS or preset.name in ("coupling", "demo", "curves", "last-iterate")
    assert PRESETS["quick"].resolved_tasks() == ("Grid/HazardFuel-v0",)
    families = {t.split("/")[0] for t in PRESETS["standard"].resolved_tasks()}
    assert families == {"Grid", "Highway", "Math"}
    assert set(list_tasks("gridworld")) <= set(PRESETS["paper"].resolved_tasks())


def test_unregistered_preset_algorithms_are_skipped_with_a_warning():
    with pytest.warns(UserWarning, match=r"skipping algorithm\(s\) \['grpo', 'ppo'\]"):
        preset = resolve("quick", registered=["cgrpo", "grpo-screw", "ppo-lag", "pid-lag"])
    assert preset.algos == ("cgrpo", "grpo-screw", "ppo-lag", "pid-lag")
    assert len(preset.runs()) == 4 * 3
    with pytest.raises(ValueError, match="none of which is registered"), pytest.warns(UserWarning):
        resolve("quick", registered=[])


def test_overrides():
    preset = resolve("standard", tasks=[TASK], algos=[TOY], seeds=2, steps=500, eval_episodes=13, registered=[])
    assert preset.resolved_tasks() == (TASK,) and preset.algos == (TOY,)
    assert [(r.seed, r.steps, r.eval_episodes) for r in preset.runs()] == [(0, 500, 13), (1, 500, 13)]
    with pytest.raises(ValueError, match=r"unknown algorithm\(s\) \['nope'\]"):
        resolve("quick", algos=["nope"], registered=["cgrpo"])
    with pytest.raises(ValueError, match=r"unknown task\(s\) \['Grid/Nope-v0'\]"):
        resolve("quick", tasks=["Grid/Nope-v0"])
    with pytest.raises(ValueError, match="unknown preset 'huge'"):
        get_preset("huge")


# --- the presets' run lists -----------------------------------------------------------------

GRPO = ("cgrpo", "grpo-screw", "grpo")


#: The standard preset's algorithms on the math tasks: its GRPO agents that act on text.
STANDARD_TEXT = ("cgrpo", "grpo-screw", "grpo", "cgrpo-pid", "cgrpo-ogda", "cgrpo-reg", "cgrpo-oreg", "cgrpo-al", "cgrpo-crpo",
                 "cgrpo-corr", "cgrpo-is", "cgrpo-mdp")


def _grid(preset) -> dict[str, tuple[tuple[str, ...], tuple[int, ...], int, int]]:
    """``{task: (algos, seeds, steps, eval_episodes)}`` of a preset's learner runs (its reference
    policies: tests/eval/test_references.py), checking they form a grid per task."""
    out: dict[str, tuple] = {}
    runs = [r for r in preset.runs() if r.algo not in preset.task_references(r.task)]
    for task in dict.fromkeys(r.task for r in runs):
        rows = [r for r in runs if r.task == task]
        algos = tuple(dict.fromkeys(r.algo for r in rows))
        seeds = tuple(dict.fromkeys(r.seed for r in rows))
        assert [(r.algo, r.seed) for r in rows] == [(a, s) for a in algos for s in seeds]
        assert len({(r.steps, r.eval_episodes) for r in rows}) == 1
        out[task] = (algos, seeds, rows[0].steps, rows[0].eval_episodes)
    assert len({r.key for r in runs}) == len(runs)
    return out


def test_quick_runs():
    runs = PRESETS["quick"].runs()
    assert _grid(PRESETS["quick"]) == {"Grid/HazardFuel-v0": (DEFAULT_ALGOS, (0, 1, 2), 20_000, None)}
    assert {r.algo: r.config for r in runs} == {
        "cgrpo": {"preset": "quick"}, "grpo-screw": {"preset": "quick"}, "grpo": {"preset": "quick"},
        "ppo-lag": {}, "pid-lag": {}, "ppo": {},
    }


def test_standard_runs():
    preset = PRESETS["standard"]
    ten = tuple(range(10))
    # Every constrained baseline the suite ships, the GRPO agents, the last-iterate rules and
    # remedies, and the unconstrained ppo and grpo; the GRPO family on the math tasks.
    shipped = {a for a in list_agents(aliases=False) if not a.endswith("-omnisafe") and not agent_spec(a).reference
               and not a.startswith(("cgrpo-batchstd", "cgrpo-dara", "cgrpo-drgrpo", "cgrpo-gdpo", "cgrpo-gspo",
                                     "cgrpo-maxrl", "cgrpo-mu", "cgrpo-norm", "cgrpo-softmax"))}
    # cgrpo's two other deployments run on every control task (aliases); 26 learners in all.
    assert set(STANDARD_ALGOS) == shipped | {"cgrpo-best", "cgrpo-mix"} and len(STANDARD_ALGOS) == 28
    # Every other learner's two, on the three deployment tasks: 25 x 2 aliases, each of its learner.
    learners = [a for a in STANDARD_ALGOS if agent_spec(a).alias_of is None]
    assert len(learners) == 26 and len(STANDARD_DEPLOYMENTS) == 50
    assert {agent_spec(a).alias_of for a in STANDARD_DEPLOYMENTS} == set(learners) - {"cgrpo"}
    assert {a: agent_spec(a).defaults["deploy"] for a in STANDARD_DEPLOYMENTS if a.startswith("ppo-lag-")} == {
        "ppo-lag-best": "best-feasible", "ppo-lag-mix": "tail-mixture", "ppo-lag-ogda-best": "best-feasible",
        "ppo-lag-ogda-mix": "tail-mixture", "ppo-lag-al-best": "best-feasible", "ppo-lag-al-mix": "tail-mixture"}
    both = STANDARD_ALGOS + STANDARD_DEPLOYMENTS
    assert DEPLOYMENT_TASKS == ("Grid/HazardFuel-v0", "Grid/HazardFuel3x3-v0", "Highway/Highway-v2")
    # On math the GRPO agents that can act on text (the deployed-policy remedies cannot).
    text = STANDARD_TEXT
    assert text == tuple(a for a in STANDARD_ALGOS if agent_spec(a).acts_on_text)
    assert _grid(preset) == {
        "Grid/HazardFuel-v0": (both, ten, 3_000_000, None),
        "Grid/HazardFuel3x3-v0": (both, ten, 1_000_000, None),
        "Grid/HazardFuelSlip-v0": (STANDARD_ALGOS, ten, 2_000_000, None),
        "Grid/HazardFuelMud-v0": (STANDARD_ALGOS, ten, 3_000_000, None),
        "Highway/Highway-v1": (STANDARD_ALGOS, ten, 300_000, None),
        "Highway/Highway-v2": (both, ten, 3_000_000, None),
        "Math/ChainSum-v0": (text, ten, 9_600, None),
        "Math/ChainSumLong-v0": (text, ten, 9_600, None),
    }
    # ChainSum-v0 runs as an unranked control: its limits do not bind (eval/studies/binding.py).
    assert preset.controls == ("Math/ChainSum-v0",) and "(unranked control)" in preset.summary()
    # Learners, then references: 3 per gridworld task, random + safe driver on highway, the warm start on math.
    assert len(preset.runs()) == (2 * (78 + 3) + 2 * (28 + 3)) * 10 + ((28 + 2) + (78 + 2)) * 10 + 2 * (12 + 1) * 10 == 3_600
    # The runs of one learner and seed share one training: three rules, one training digest.
    digests = {}
    for run in preset.runs():
        if run.task in DEPLOYMENT_TASKS and not agent_spec(run.algo).reference:
            digest, rule = deployment_of(run)
            digests.setdefault(digest, []).append(rule)
    assert len(digests) == 3 * 26 * 10 and all(sorted(r) == ["best-feasible", "last", "tail-mixture"] for r in digests.values())
    # The coupling experiment's setting is the standard preset's Grid/HazardFuel-v0 (same algos' configs, budget, seeds).
    coupling = PRESETS["coupling"]
    assert coupling.budgets() == {"Grid/HazardFuel-v0": preset.budgets()["Grid/HazardFuel-v0"]}
    assert set(coupling.seeds) <= set(preset.scope("Grid/HazardFuel-v0").seeds or preset.seeds)
    assert set(coupling.algos) <= set(preset.task_algos("Grid/HazardFuel-v0"))
    configs = {(r.task.split("/")[0], r.algo): r.config for r in preset.runs()}
    assert configs[("Highway", "cgrpo")] == {"preset": "quick"} and configs[("Highway", "ppo-lag")] == {}
    assert configs[("Highway", "cgrpo-best")] == {"preset": "quick"} and configs[("Highway", "cpo")] == {}
    assert configs[("Grid", "cgrpo")] == {} and configs[("Math", "grpo")] == {}
    assert not any(t.startswith("Safety/") for t in preset.resolved_tasks())


def test_paper_runs():
    grid = _grid(PRESETS["paper"])
    ten = tuple(range(10))
    for task in list_tasks("gridworld") + list_tasks("highway"):
        assert grid.pop(task) == (DEFAULT_ALGOS, ten, 1_000_000, None)
    # On the Safety tasks the OmniSafe-matched baselines replace ppo-lag and pid-lag (docs/parity.md).
    safety = (*GRPO, "ppo", "ppo-lag-omnisafe", "pid-lag-omnisafe", "trpo-lag-omnisafe")
    assert grid == {
        "Safety/PointGoal1-v0": (safety, (0, 1, 2, 3, 4), 10_000_000, None),
        "Safety/CarGoal1-v0": (safety, (0, 1, 2, 3, 4), 10_000_000, None),
        "Math/ChainSum-v0": (GRPO, ten, 25_600, None),
    }


def test_paper_safety_runs_use_the_omnisafe_cost_limit_25():
    from constrained_grpo.envs.safety.env import DEFAULT_LIMIT, declare_constraints

    assert DEFAULT_LIMIT == 25.0
    assert [c.limit for c in declare_constraints(("cost",), ("contacts",), None)] == [25.0]
    safety = [r for r in PRESETS["paper"].runs() if r.task.startswith("Safety/")]
    assert len(safety) == 2 * 7 * 5
    # Nothing overrides the tasks' default limit.
    assert all("limits" not in r.config and "env_kwargs" not in r.config for r in safety)


def test_math_runs_only_grpo_agents():
    for preset in PRESETS.values():
        algos = {r.algo for r in preset.runs() if r.task.startswith("Math/")}
        assert all(agent_spec(a).acts_on_text for a in algos - {"ref-warmstart"})
    scope = PRESETS["standard"].scope("Math/ChainSum-v0")
    assert all(scope.allows(a) for a in ("cgrpo", "grpo-screw", "grpo", "cgrpo-gdpo", TOY))
    assert not any(scope.allows(a) for a in ("ppo-lag", "pid-lag", "ppo", "cgrpo-best", "cgrpo-mix"))
    # The restriction belongs to the family: every math task gets it.
    assert PRESETS["standard"].task_algos("Math/Arithmetic-v0") == STANDARD_TEXT


def test_the_deployment_aliases_run_only_on_the_deployment_tasks_and_user_algorithms_everywhere():
    """``standard`` keeps the learners' -best/-mix aliases to DEPLOYMENT_TASKS by excluding them
    elsewhere, not by an allow-list: a user's algorithm passes on every control task."""
    preset = PRESETS["standard"]
    for task in ("Grid/HazardFuelSlip-v0", "Highway/Highway-v1", "Grid/HazardFuel3x3-v0", "Highway/Highway-v2"):
        scope = preset.scope(task)
        assert scope.allows(TOY) and scope.allows("cell-bandit") and scope.allows("cgrpo-best")
        assert scope.allows("ppo-lag-best") == (task in DEPLOYMENT_TASKS)
    grid = _grid(resolve("standard", tasks=["Grid/HazardFuelSlip-v0"], algos=["cgrpo", "ppo-lag-mix"]))
    assert grid["Grid/HazardFuelSlip-v0"][0] == ("cgrpo",)


def test_algos_override_intersects_with_the_family_restriction():
    preset = resolve("standard", algos=["cgrpo", "ppo-lag"])
    grid = _grid(preset)
    assert grid["Math/ChainSum-v0"][0] == ("cgrpo",)
    assert grid["Highway/Highway-v1"][0] == ("cgrpo", "ppo-lag")
    assert len(preset.runs()) == 4 * 2 * 10 + 2 * 2 * 10 + 2 * 1 * 10
    # A GRPO variant outside the preset's list, asked for by name, runs on math too.
    assert _grid(resolve("standard", tasks=["Math/ChainSum-v0"], algos=["cgrpo-gdpo"]))["Math/ChainSum-v0"][0] == ("cgrpo-gdpo",)
    # A dotted path is not judged.
    assert _grid(resolve("standard", tasks=["Math/ChainSum-v0"], algos=[TOY], registered=[]))["Math/ChainSum-v0"][0] == (TOY,)


def test_algos_override_that_leaves_a_task_empty():
    with pytest.warns(UserWarning, match=r"skipping task\(s\) \['Math/ChainSum-v0', 'Math/ChainSumLong-v0'\]"):
        preset = resolve("standard", algos=["ppo-lag"])
    assert "Math/ChainSum-v0" not in {r.task for r in preset.runs()}
    with pytest.raises(ValueError, match=r"no algorithm of \['ppo-lag', 'ppo'\] may run on \['Math/ChainSum-v0'\].*--algos"):
        resolve("paper", tasks=["Math/ChainSum-v0"], algos=["ppo-lag", "ppo"])


def test_seed_steps_and_eval_overrides_replace_the_scopes():
    preset = resolve("standard", seeds=2, steps=1_000, eval_episodes=13)
    grid = _grid(preset)
    assert {v[1:] for v in grid.values()} == {((0, 1), 1_000, 13)}
    assert grid["Math/ChainSum-v0"][0] == STANDARD_TEXT
    # Scope config stays; the preset-wide config (where `--config` lands) wins over it.
    from dataclasses import replace

    merged = replace(preset, config={"cgrpo": {"preset": "paper"}})
    configs = {(r.task, r.algo): r.config for r in merged.runs()}
    assert configs[("Highway/Highway-v1", "cgrpo")] == {"preset": "paper"}
    assert configs[("Highway/Highway-v1", "grpo")] == {"preset": "quick"}


def test_scopes_must_name_a_family_or_task():
    from constrained_grpo.eval.presets import Preset, Scope

    with pytest.raises(ValueError, match=r"scopes \['maths'\] name no task family or task id"):
        Preset("x", "x", tasks=("Grid/HazardFuel-v0",), scopes={"maths": Scope(algos=("cgrpo",))})
    task_row = Preset(
        "x", "x", tasks=("Math/ChainSum-v0", "Math/Arithmetic-v0"),
        scopes={"math": Scope(algos=("cgrpo",), steps=100), "Math/ChainSum-v0": Scope(seeds=(7,))},
    )
    assert _grid(task_row) == {
        "Math/ChainSum-v0": (("cgrpo",), (7,), 100, None),
        "Math/Arithmetic-v0": (("cgrpo",), (0, 1, 2), 100, None),
    }


def test_every_preset_keeps_baselines_off_text_tasks() -> None:
    # quick has no scope of its own for math: the suite's family row still applies.
    preset = resolve("quick", tasks=["Math/ChainSum-v0", "Grid/HazardFuel3x3-v0"], algos=["cgrpo", "ppo"],
                     registered=list(DEFAULT_ALGOS))
    pairs = sorted({(r.task, r.algo) for r in preset.runs(save_agent=False)})
    assert pairs == [("Grid/HazardFuel3x3-v0", "cgrpo"), ("Grid/HazardFuel3x3-v0", "ppo"), ("Math/ChainSum-v0", "cgrpo")]


def test_text_scopes_follow_the_registry_capability_not_the_name() -> None:
    from constrained_grpo.eval.presets import Preset
    from constrained_grpo.registry import agent_spec, list_agents, register_agent

    flags = {name: agent_spec(name).acts_on_text for name in list_agents()}
    assert flags["cgrpo-gdpo"] and flags["grpo-screw"] and not flags["ppo-lag"] and not flags["saute-ppo"]
    # A text-capable algorithm whose name matches no GRPO pattern runs on math; a GRPO-like
    # name registered without the capability does not.
    from constrained_grpo import registry

    register_agent("textbot", TOY, acts_on_text=True)
    register_agent("cgrpo-notext", TOY)
    try:
        preset = Preset("x", "x", tasks=("Math/ChainSum-v0",),
                        algos=("textbot", "cgrpo-notext", "cgrpo", "ppo", "pkg.mod:factory"))
        assert preset.task_algos("Math/ChainSum-v0") == ("textbot", "cgrpo", "pkg.mod:factory")
        grid = Preset("y", "y", tasks=("Grid/HazardFuel-v0",), algos=("cgrpo-notext", "ppo"))
        assert grid.task_algos("Grid/HazardFuel-v0") == ("cgrpo-notext", "ppo")
    finally:
        registry._REGISTRY.pop("textbot", None)
        registry._REGISTRY.pop("cgrpo-notext", None)
