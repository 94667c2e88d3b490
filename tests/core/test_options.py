"""Configs from dicts: ``constrained_grpo.options``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from constrained_grpo.options import check_options, coerce_fields, option_names, with_options


@dataclass(frozen=True)
class Inner:
    rule: str = "a"
    lr: float = 0.1


@dataclass(frozen=True)
class Outer:
    sizes: tuple[int, ...] = (4,)
    limits: tuple[float, ...] | Mapping[str, float] | None = None
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    inner: Inner = field(default_factory=lambda: Inner(rule="b"))

    def __post_init__(self) -> None:
        coerce_fields(self)


def test_check_options_names_the_bad_key_and_the_valid_ones():
    with pytest.raises(ValueError, match=r"unknown inner option\(s\) \['lrr'\] \(did you mean 'lr'\?\); valid options: \['lr', 'rule'\]$"):
        check_options({"lrr": 1}, option_names(Inner), "inner")
    with pytest.raises(TypeError, match=r"^unknown option\(s\) \['x'\]; valid options: \['lr', 'rule'\] for Inner$"):
        check_options({"x": 1}, option_names(Inner), hint=" for Inner", error=TypeError)
    check_options({"lr": 1}, option_names(Inner))


def test_coerce_fields_turns_json_values_into_the_field_types():
    kwargs = {"k": 1}
    cfg = Outer(sizes=[8, 8], limits=[1, 2], kwargs=kwargs, inner={"lr": 0.5})
    assert cfg.sizes == (8, 8) and cfg.limits == (1, 2)
    assert cfg.kwargs == kwargs and cfg.kwargs is not kwargs
    assert cfg.inner == Inner(rule="b", lr=0.5)  # the field's default, updated
    assert Outer(limits={"fuel": 3}).limits == {"fuel": 3}
    hash(cfg.sizes)


def test_with_options_merges_nested_configs_and_rejects_unknown_keys():
    cfg = with_options(Outer(), {"inner": {"rule": "c"}})
    cfg = with_options(cfg, {"inner": {"lr": 0.3}, "sizes": [2]})
    assert cfg.inner == Inner(rule="c", lr=0.3) and cfg.sizes == (2,)
    with pytest.raises(ValueError, match=r"unknown outer option\(s\) \['size'\].*use sizes"):
        with_options(cfg, {"size": [2]}, "outer", hint=" (use sizes)")
    with pytest.raises(ValueError, match=r"unknown inner option\(s\) \['lrr'\]"):
        with_options(cfg, {"inner": {"lrr": 1}})
