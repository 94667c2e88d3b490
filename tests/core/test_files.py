"""The atomic writers of ``constrained_grpo.files``."""

from __future__ import annotations

from pathlib import Path

from constrained_grpo.files import atomic_write_csv, atomic_write_text, csv_columns


def test_csv_columns_are_the_union_of_keys_in_first_seen_order():
    assert csv_columns([{"b": 1, "a": 2}, {"c": 3, "b": 4}, {}]) == ["b", "a", "c"]


def test_atomic_write_csv_fills_missing_cells_and_leaves_no_temporary(tmp_path: Path):
    path = tmp_path / "sub" / "progress.csv"
    atomic_write_csv(path, [{"iteration": 0, "loss": 0.5}, {"iteration": 1, "cost_fuel": 3}], fsync=False)
    assert path.read_bytes() == b"iteration,loss,cost_fuel\r\n0,0.5,\r\n1,,3\r\n"
    atomic_write_csv(path, [{"iteration": 0}])  # rewritten whole
    assert path.read_bytes() == b"iteration\r\n0\r\n"
    assert [p.name for p in path.parent.iterdir()] == ["progress.csv"]


def test_atomic_write_text_replaces_the_file(tmp_path: Path):
    path = tmp_path / "config.json"
    atomic_write_text(path, "old")
    atomic_write_text(path, "new \u00e9")
    assert path.read_text(encoding="utf-8") == "new \u00e9"
    assert [p.name for p in tmp_path.iterdir()] == ["config.json"]
