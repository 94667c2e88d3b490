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


def _before_deploy_sb3(cfg: dict) -> None:
    for key in ("deploy", "deploy_snapshots", "deploy_alpha", "augmented_weights"):
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
    assert inner == {"num_groups": 8, "closed_form": True, "deploy": "last", "deploy_snapshots": 10, "deploy_alpha": 0.05}
    assert upgrade_recorded({"kind": "reference", "config": {"policy": "random"}}) == {
        "kind": "reference", "config": {"policy": "random"}}
