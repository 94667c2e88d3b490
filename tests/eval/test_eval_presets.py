"""Presets: Python values resolved against the registries."""

from __future__ import annotations

import pytest

from cgrpo_toy_agent import TASK, TOY
from constrained_grpo.envs import list_tasks
from constrained_grpo.eval.presets import DEFAULT_ALGOS, PRESETS, get_preset, resolve


def test_presets_name_registered_tasks():
    for preset in PRESETS.values():
        tasks = preset.resolved_tasks()
        assert tasks and set(tasks) <= set(list_tasks())
        assert preset.algos == DEFAULT_ALGOS and preset.steps > 0 and preset.seeds
    assert PRESETS["quick"].resolved_tasks() == ("Grid/HazardFuel-v0",)
    assert set(list_tasks("gridworld")) <= set(PRESETS["standard"].resolved_tasks())


def test_unregistered_preset_algorithms_are_skipped_with_a_warning():
    with pytest.warns(UserWarning, match=r"skipping algorithm\(s\) \['grpo', 'ppo'\]"):
        preset = resolve("quick", registered=["cgrpo", "grpo-screw", "ppo-lag", "pid-lag"])
    assert preset.algos == ("cgrpo", "grpo-screw", "ppo-lag", "pid-lag")
    assert len(preset.runs()) == 4 * 3
    with pytest.raises(ValueError, match="none of which is registered"), pytest.warns(UserWarning):
        resolve("quick", registered=[])


def test_overrides():
    preset = resolve("standard", tasks=[TASK], algos=[TOY], seeds=2, steps=500, eval_episodes=4, registered=[])
    assert preset.resolved_tasks() == (TASK,) and preset.algos == (TOY,)
    assert [(r.seed, r.steps, r.eval_episodes) for r in preset.runs()] == [(0, 500, 4), (1, 500, 4)]
    with pytest.raises(ValueError, match=r"unknown algorithm\(s\) \['nope'\]"):
        resolve("quick", algos=["nope"], registered=["cgrpo"])
    with pytest.raises(ValueError, match=r"unknown task\(s\) \['Grid/Nope-v0'\]"):
        resolve("quick", tasks=["Grid/Nope-v0"])
    with pytest.raises(ValueError, match="unknown preset 'huge'"):
        get_preset("huge")
