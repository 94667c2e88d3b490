"""Runs recorded before the deployment options (and ppo-lag-al's fix) compare with runs made
now on what they did: renamed options read as the new ones, absent ones at the values those
runs had, and a changed rule is seen."""

from __future__ import annotations

from constrained_grpo.deploy import upgrade_recorded
from constrained_grpo.eval.runner import RunSpec, _as_recorded
from constrained_grpo.registry import resolve_config

TASK = "Grid/HazardFuel3x3-v0"


def _recorded(algo: str, edit) -> dict:
    """A config.json as a run of ``algo`` recorded it before the change: today's resolved
    configuration edited by ``edit(config)``."""
    resolved = _as_recorded(resolve_config(algo, TASK))
    edit(resolved["config"])
    spec = RunSpec(TASK, algo, 0, 1000)
    return {"run": spec.to_dict(), "algo": {"name": algo, "resolved": resolved}}


def _legacy_grpo(cfg: dict) -> None:
    cfg["final_policy"], cfg["final_snapshots"] = cfg.pop("deploy"), cfg.pop("deploy_snapshots")
    cfg.pop("deploy_alpha")
    _before_validation(cfg)


def _before_validation(cfg: dict) -> None:
    cfg.pop("deploy_shortlist")
    cfg.pop("deploy_validation_episodes")


def _before_deploy_sb3(cfg: dict) -> None:
    for key in ("deploy", "deploy_snapshots", "deploy_alpha", "deploy_shortlist", "deploy_validation_episodes",
                "augmented_weights"):
        cfg.pop(key, None)


def test_runs_recorded_before_are_the_same_runs_unless_their_rule_changed():
    spec = RunSpec(TASK, "cgrpo", 0, 1000)
    assert spec.difference(_recorded("cgrpo", _legacy_grpo)) is None
    assert RunSpec(TASK, "cgrpo-mix", 0, 1000).difference(_recorded("cgrpo-mix", _legacy_grpo)) is None
    for algo in ("ppo", "ppo-lag", "cpo", "saute-ppo"):
        assert RunSpec(TASK, algo, 0, 1000).difference(_recorded(algo, _before_deploy_sb3)) is None, algo
    # best-feasible selected on the batch mean then; ppo-lag-al took its weights after the step.
    best = RunSpec(TASK, "cgrpo-best", 0, 1000).difference(_recorded("cgrpo-best", _legacy_grpo))
    assert best is not None and "deploy_alpha" in best
    al = RunSpec(TASK, "ppo-lag-al", 0, 1000).difference(_recorded("ppo-lag-al", _before_deploy_sb3))
    assert al is not None and "augmented_weights: 'after-step' -> 'before-step'" in al


def test_nested_learner_configs_are_upgraded_too():
    nested = {"kind": "reference", "config": {"algo": "grpo", "config": {"num_groups": 8, "final_policy": "last"}}}
    inner = upgrade_recorded(nested)["config"]["config"]
    assert inner == {"num_groups": 8, "closed_form": True, "deploy": "last", "deploy_snapshots": 10, "deploy_alpha": 0.05,
                     "deploy_shortlist": 5, "deploy_validation_episodes": None}
    assert upgrade_recorded({"kind": "reference", "config": {"policy": "random"}}) == {
        "kind": "reference", "config": {"policy": "random"}}


def test_best_feasible_runs_recorded_before_the_validation_read_as_unvalidated():
    """A cgrpo-best run recorded with the screen alone (``deploy_alpha`` but no validation
    options) reads as ``deploy_shortlist`` 1 and ``deploy_validation_episodes`` 0: it is the same
    run as one made now with validation off, and differs from one made with the new default;
    runs of the other rules, for which the options change nothing, are the same runs."""
    recorded = _recorded("cgrpo-best", _before_validation)
    assert upgrade_recorded(recorded["algo"]["resolved"])["config"]["deploy_validation_episodes"] == 0
    assert upgrade_recorded(recorded["algo"]["resolved"])["config"]["deploy_shortlist"] == 1
    changed = RunSpec(TASK, "cgrpo-best", 0, 1000).difference(recorded)
    assert changed is not None and "deploy_validation_episodes: 0 -> None" in changed and "deploy_shortlist: 1 -> 5" in changed
    off = _as_recorded(resolve_config("cgrpo-best", TASK, deploy_validation_episodes=0, deploy_shortlist=1))
    assert upgrade_recorded(recorded["algo"]["resolved"]) == off
    for algo in ("cgrpo", "cgrpo-mix"):
        assert RunSpec(TASK, algo, 0, 1000).difference(_recorded(algo, _before_validation)) is None, algo
    for algo in ("ppo-lag", "cpo"):
        sb3 = _recorded(algo, lambda cfg: (cfg.pop("deploy_shortlist"), cfg.pop("deploy_validation_episodes")))
        assert RunSpec(TASK, algo, 0, 1000).difference(sb3) is None, algo
