"""A task family owns its facts (``TaskInfo`` / ``Family``, envs/registration.py): settings
never depend on the text of a task id, and the resolved configuration of every registered
algorithm on every registered task is what it was when the rules lived in per-id tables."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import gymnasium as gym
import pytest

from constrained_grpo.envs import TASKS, list_tasks
from constrained_grpo.envs.gridworld.tasks import GRIDWORLD
from constrained_grpo.envs.registration import USER_FAMILY, EvalPlan, Family, register_task
from constrained_grpo.registry import list_agents, resolve_config
from constrained_grpo.tasks import task_info

DIGESTS = Path(__file__).parent / "data" / "resolved_configs.json"
GRID_ENTRY = "constrained_grpo.envs.gridworld.env:GridWorldEnv"


#: Options added after the digests were taken, at the defaults that leave every earlier
#: algorithm's behaviour as it was (the last-iterate rules); removed before digesting.
ADDED_SINCE = {"policy_optimism": 0.0, "final_policy": "last", "final_snapshots": 10, "closed_form": True,
               # MDP-GRPO's knobs (inert unless aggregator="mdp", kl_coef_neg or lm.sample_temperatures is set)
               "mdp_alpha": None, "prospect_beta": None, "prospect_lambda_pos": None, "prospect_lambda_neg": None,
               "kl_coef_neg": None, "sample_temperatures": None,
               "deploy": "last", "deploy_snapshots": 10, "deploy_alpha": 0.05, "augmented_weights": "before-step",
               # best-feasible's held-out validation (inert under the other rules)
               "deploy_shortlist": 5, "deploy_validation_episodes": None}
ADDED_TO_MULTIPLIER_SINCE = {"optimistic": False, "reg_tau": 0.01, "rho": 1.0, "crpo_tol": 0.0}


#: Defaults changed on purpose since, per algorithm: ``{algo: {field: (recorded, now)}}``;
#: a field at its new value is put back to the recorded one (``ABSENT``: the field is new)
#: before digesting, so every other setting is still checked against the record.
ABSENT = object()
CHANGED_SINCE = {
    # The audit's fidelity fixes: the authors' and OmniSafe's KL early stops.
    "focops": {"target_kl": (None, 0.02)},
    "cup": {"target_kl": (None, 0.01)},
    # The trust region's Fisher on every 8th state (OmniSafe's TRPOLag keeps every state).
    **{algo: {"fisher_subsample": (ABSENT, 8)} for algo in ("trpo-lag", "cpo", "pcpo")},
    "trpo-lag-omnisafe": {"fisher_subsample": (ABSENT, 1)},
}


def _as_recorded(algo: str, resolved: dict) -> dict:
    config = dict(resolved["config"])
    for field, (recorded, now) in CHANGED_SINCE.get(algo, {}).items():
        assert config.get(field, ABSENT) == now, (algo, field, config.get(field, ABSENT))
        if recorded is ABSENT:
            del config[field]
        else:
            config[field] = recorded
    return {**resolved, "config": config}


def _without_added(value):
    if isinstance(value, dict):
        out = {k: _without_added(v) for k, v in value.items() if not (k in ADDED_SINCE and v == ADDED_SINCE[k])}
        mult = out.get("multiplier")
        if isinstance(mult, dict):
            out["multiplier"] = {k: v for k, v in mult.items()
                                 if not (k in ADDED_TO_MULTIPLIER_SINCE and v == ADDED_TO_MULTIPLIER_SINCE[k])}
        return out
    return value


def _digest(config: dict) -> str:
    config = _without_added(config)
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:16]


@pytest.mark.slow
def test_every_algorithm_on_every_task_resolves_as_recorded():
    """The digests were taken from ``resolve_config`` (what ``cgrpo algos NAME --task ID``
    prints) for all 1,584 pairs before the per-id tables were folded into the families."""
    recorded = json.loads(DIGESTS.read_text())
    recorded_algos = {p.split("|")[0] for p in recorded}  # algorithms registered since have no record
    pairs = [f"{a}|{t}" for a in list_agents() if a in recorded_algos for t in list_tasks()]
    base = [p for p in pairs if not p.split("|")[1].startswith("Math/RG")]  # reasoning-gym ids need its extra
    assert set(base) <= set(recorded), sorted(set(base) - set(recorded))[:5]
    changed = [p for p in pairs if p in recorded
               and _digest(_before_text_rows(p, _as_recorded(p.split("|")[0], resolve_config(*p.split("|"))))) != recorded[p]]
    assert not changed, changed[:10]


#: Tasks whose ``text`` option row was added since the digests were taken, and what it changed:
#: ChainSumHard-v1's warm start, 6,000 supervised steps instead of the text preset's 1,500.
TEXT_ROWS_SINCE = {"Math/ChainSumHard-v1": ("sft_steps", 6000, 1500)}


def _before_text_rows(pair: str, config: dict) -> dict:
    """``config`` as it resolved before its task's ``text`` row: that row's one change undone,
    after checking that it is there (a text agent's ``lm``, or the warm-start reference's)."""
    task = pair.split("|")[1]
    text = config if config.get("kind") == "text" else config.get("config", {})
    if task not in TEXT_ROWS_SINCE or text.get("kind") != "text":
        return config
    key, now, then = TEXT_ROWS_SINCE[task]
    lm = text["lm"]
    assert lm[key] == now, (pair, lm)
    lm[key] = then
    return config


def test_an_ids_text_never_changes_its_settings():
    for env_id in ("Grid/FactsGrid-v0", "Foo/FactsGrid-v0"):
        if env_id not in gym.registry:
            gym.register(env_id, entry_point=GRID_ENTRY, kwargs={"size": 3})
    a = {algo: resolve_config(algo, "Grid/FactsGrid-v0") for algo in ("cgrpo", "ppo-lag")}
    b = {algo: resolve_config(algo, "Foo/FactsGrid-v0") for algo in ("cgrpo", "ppo-lag")}
    assert a == b
    assert task_info("Grid/FactsGrid-v0").family is USER_FAMILY
    # The user family changes nothing: the control agent's MLP and SB3's discount.
    assert a["cgrpo"]["config"]["hidden_sizes"] == [64, 64] and a["ppo-lag"]["config"]["gamma"] == 0.99


def test_a_user_task_declared_with_a_family_gets_its_facts():
    register_task("Course/FactsGrid-v0", GRID_ENTRY, family=GRIDWORLD, kwargs={"size": 3})
    info = task_info("Course/FactsGrid-v0")
    assert info.family is GRIDWORLD and info.task_references() == ("ref-random", "ref-optimal", "ref-unconstrained")
    cgrpo = resolve_config("cgrpo", "Course/FactsGrid-v0")["config"]
    assert cgrpo["hidden_sizes"] == [] and cgrpo["lr"] == 0.01
    assert resolve_config("ppo-lag", "Course/FactsGrid-v0")["config"]["gamma"] == 1.0
    with pytest.raises(ValueError, match="registered already with other facts"):
        register_task("Course/FactsGrid-v0", GRID_ENTRY, family=USER_FAMILY, kwargs={"size": 3})


def test_families_declare_their_facts_once():
    names = {t.family.name: t.family for t in TASKS}
    assert set(names) == {"gridworld", "highway", "safety", "math"}
    assert {n: (f.eval.cap, f.text, f.extra) for n, f in names.items() if n != "math"} == {
        "gridworld": (20_000, False, None), "highway": (20_000, False, "highway"), "safety": (20, False, None)}
    assert names["math"].text and names["math"].eval.cap == 200
    # One Family object per family (the math built-ins differ only in needing no extra).
    for t in TASKS:
        assert t.family.eval == names[t.family.name].eval
    assert task_info("Highway/Highway-v1").task_references() == ("ref-random", "ref-safe-driver")
    assert task_info("Highway/Merge-v0").task_references() == ("ref-random",)
    assert task_info("Grid/HazardFuelCoords-v0").algo_defaults("grpo")[-1] == {"hidden_sizes": (64, 64), "lr": 3e-3}
    with pytest.raises(ValueError, match="algorithm families"):
        Family("bad", EvalPlan(), defaults={"ppo": {}})
    with pytest.raises(ValueError, match="power must be in"):
        EvalPlan(power=1.0)
