"""The one record schema (constrained_grpo.schema): flattener, column lists, task metadata,
config.json keys; every writer and reader uses it."""

from __future__ import annotations

import shlex
from pathlib import Path

import numpy as np
import pytest

from cgrpo_toy_agent import TASK, TOY
from constrained_grpo import registry, schema
from constrained_grpo.constraints import Constraint
from constrained_grpo.eval.scoring import loader
from constrained_grpo.eval import runner, storage

NAMES = ["hazard", "fuel"]
RECORD = {"iteration": 7, "env_steps": 64, "wall_s": 1.5, "ep_return": 0.75, "ep_cost": [0.25, 12.0],
          "multipliers": [0.5, 2.0]}


def test_one_flattener_everywhere() -> None:
    # The registry's name, the storage's log and the runner all use the schema's function.
    assert registry.flatten_log_record is schema.flatten_record
    assert storage.flatten_record is schema.flatten_record
    assert not hasattr(storage, "_EFF_W_KEYS") and not hasattr(storage, "_PREFIX")


def test_flatten_record_maps_the_contract_keys_to_columns() -> None:
    flat = schema.flatten_record({**RECORD, "eff_w": np.array([1.0, 0.5, 0.25]), "loss": np.float32(0.125)}, NAMES)
    assert flat == {
        "agent_iteration": 7, "env_steps": 64, "wall_s": 1.5, "return": 0.75,
        "cost_hazard": 0.25, "cost_fuel": 12.0, "lambda_hazard": 0.5, "lambda_fuel": 2.0,
        "eff_w_reward": 1.0, "eff_w_hazard": 0.5, "eff_w_fuel": 0.25, "loss": 0.125,
    }


@pytest.mark.parametrize("alias", ["eff_weights", "effective_weights", "effective_weight", "eff_weight"])
def test_no_aliases_for_the_effective_weights(alias: str) -> None:
    # The issue: eff_w was accepted under five names. Now a key is its column: another
    # name stays another name and never lands in the eff_w_<component> columns.
    flat = schema.flatten_record({**RECORD, alias: [1.0, 0.5, 0.25]}, NAMES)
    assert not any(k.startswith("eff_w_") for k in flat)
    assert [flat[f"{alias}_{c}"] for c in ("reward", "hazard", "fuel")] == [1.0, 0.5, 0.25]


def test_progress_log_writes_the_schema_header(tmp_path: Path) -> None:
    log = storage.ProgressLog(tmp_path / "progress.csv", NAMES, flush_every_s=0.0)
    log({**RECORD, "eff_w_reward": 1.0, "multipliers": [0.5, 2.0]})
    log.close()
    header = (tmp_path / "progress.csv").read_text().splitlines()[0].split(",")
    assert header == ["iteration", "env_steps", "wall_s", "return", "cost_hazard", "cost_fuel",
                      "lambda_hazard", "lambda_fuel", "agent_iteration", "eff_w_reward"]
    assert schema.progress_columns(NAMES, ["x", "return", "iteration"]) == ["iteration", "return", "x"]


def test_eval_and_long_table_columns() -> None:
    assert schema.eval_columns(NAMES) == ["episode", "policy", "reset_seed", "return", "length", "cost_hazard", "cost_fuel"]
    core = schema.CORE_COLUMNS
    assert loader.CORE_COLUMNS is core and set(loader.REQUIRED_COLUMNS) <= set(core)
    assert core.index("kind") < core.index("iteration") < core.index("episode")
    assert runner.EVAL_POLICIES is schema.EVAL_POLICIES == loader.POLICIES


def test_task_meta_round_trips_through_config_json() -> None:
    meta = schema.TaskMeta("Toy/T-v0", "toy", (Constraint("hazard", 0.1), Constraint("fuel", 12.0)),
                           optimum_return=0.5, unconstrained_return=1.0, optimal_multipliers=(0.25, 0.0))
    assert schema.TaskMeta.from_dict(meta.to_dict()) == meta
    bare = schema.TaskMeta("Toy/T-v0", "toy", (Constraint("hazard", 0.1),))
    assert bare.to_dict()["optimum"] is None and schema.TaskMeta.from_dict(bare.to_dict()) == bare
    assert runner.TaskMeta is schema.TaskMeta and loader.TaskMeta is schema.TaskMeta


def test_config_json_has_the_schema_keys(tmp_path: Path) -> None:
    spec = runner.RunSpec(TASK, TOY, 0, 300, 13, {}, False)
    prov = {"invoked_as": shlex.join(["cgrpo", "bench"]), "git": None, "versions": {}}
    config = runner.run_config(spec, tmp_path, runner.task_meta(TASK), prov)
    assert sorted(config) == sorted(schema.CONFIG_KEYS)
    assert config["schema"] == schema.CONFIG_SCHEMA


@pytest.mark.parametrize(("record", "column"), [
    ({"cost_value_loss": 0.5}, "cost_value_loss"),         # PPO-Lagrangian's cost critic, before
    ({"cost_estimate": [0.25, 12.0]}, "cost_estimate_hazard"),
    ({"lambda_mean": 1.0}, "lambda_mean"),
    ({"eff_w_total": 1.0}, "eff_w_total"),
])
def test_reserved_prefixes_hold_only_the_tasks_components(record: dict, column: str) -> None:
    with pytest.raises(ValueError, match=f"log record column '{column}' falls in the reserved"):
        schema.flatten_record({**RECORD, **record}, NAMES)


def test_baseline_runs_load_with_their_own_columns(tmp_path: Path) -> None:
    # Before the rename, ppo-lag's cost_estimate_<k>, cost_value_loss and cost_explained_variance
    # read as constraint columns: load_results(extra_columns=True) raised "name no constraint".
    task = "Grid/HazardFuel3x3-v0"
    spec = runner.RunSpec(task, "ppo-lag", 0, 2048, 13, {"n_envs": 4, "n_steps": 256}, False)
    outcome = runner.execute_run(spec, tmp_path, meta=runner.task_meta(task))
    assert outcome.status == "done", outcome.error
    table = loader.load_results(tmp_path, extra_columns=True).table
    assert {"estimated_cost_hazard", "estimated_cost_fuel", "value_loss_cost", "explained_variance_cost"} <= set(table)
    assert not any(c.startswith("cost_") and c[5:] not in NAMES for c in table.columns)
