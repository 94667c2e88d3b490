"""Issue 17, point 12: a damaged or forged saved agent is an error that names the file and
what is wrong, never a raw library message (JSONDecodeError, "got set()", KeyError 'lm')."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from constrained_grpo import make_agent
from constrained_grpo.agents import load_agent as load_grpo
from constrained_grpo.baselines import load_agent as load_baseline
from constrained_grpo.options import CheckpointError

TASK = "Grid/HazardFuel3x3-v0"


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("saved")
    grpo = make_agent("cgrpo", TASK, seed=0, num_groups=2, group_size=2)
    grpo.save(root / "grpo")
    ppo = make_agent("ppo", TASK, seed=0)
    ppo.save(root / "ppo")
    return {"grpo": root / "grpo", "ppo": root / "ppo"}


def _copy(src: Path, tmp_path: Path) -> Path:
    dest = tmp_path / src.name
    shutil.copytree(src, dest)
    return dest


def test_the_saved_agents_load(saved):
    assert load_grpo(saved["grpo"]).env_id == TASK
    assert load_baseline(saved["ppo"]).env_id == TASK


def test_truncated_config_names_the_file(saved, tmp_path: Path):
    path = _copy(saved["grpo"], tmp_path)
    text = (path / "config.json").read_text()
    (path / "config.json").write_text(text[: len(text) // 2])
    with pytest.raises(CheckpointError, match=r"config\.json is not valid JSON .*line \d+, column \d+.*truncated") as err:
        load_grpo(path)
    assert str(path / "config.json") in str(err.value)


def test_forged_text_kind_names_the_missing_key(saved, tmp_path: Path):
    path = _copy(saved["grpo"], tmp_path)
    meta = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**meta, "kind": "text"}))
    with pytest.raises(CheckpointError, match=r"config\.json lacks \['lm'\]"):
        load_grpo(path)


def test_truncated_weights_name_the_file(saved, tmp_path: Path):
    path = _copy(saved["grpo"], tmp_path)
    data = (path / "model.safetensors").read_bytes()
    (path / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=r"model\.safetensors: cannot restore the policy weights"):
        load_grpo(path)
    (path / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match=r"model\.safetensors is missing"):
        load_grpo(path)


def test_wrong_config_type_in_a_checkpoint_names_file_and_field(saved, tmp_path: Path):
    path = _copy(saved["grpo"], tmp_path)
    meta = json.loads((path / "config.json").read_text())
    meta["config"]["lr"] = "fast"
    (path / "config.json").write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match=r"config\.json: cannot restore the agent recorded in it .*'lr' takes a number"):
        load_grpo(path)


def test_truncated_sb3_zip_names_the_file(saved, tmp_path: Path):
    path = _copy(saved["ppo"], tmp_path)
    data = (path / "model.zip").read_bytes()
    (path / "model.zip").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=r"model\.zip is not a (readable zip|whole SB3 model) archive .*truncated") as err:
        load_baseline(path)
    assert "set()" not in str(err.value)


def test_baseline_state_that_is_not_json_names_the_file(saved, tmp_path: Path):
    path = _copy(saved["ppo"], tmp_path)
    (path / "agent.json").write_text("{not json")
    with pytest.raises(CheckpointError, match=r"agent\.json is not valid JSON"):
        load_baseline(path)
