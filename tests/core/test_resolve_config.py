"""Every registered algorithm resolves its whole configuration without being built, and
refuses a misspelled option there (what `cgrpo train` / `bench` check before any work)."""

from __future__ import annotations

import pytest

from constrained_grpo.registry import list_agents, resolve_config


@pytest.mark.parametrize("name", list_agents())
def test_every_algorithm_resolves_and_validates_before_it_is_built(name: str) -> None:
    resolved = resolve_config(name, "Grid/HazardFuel3x3-v0")
    assert isinstance(resolved["config"], dict) and resolved["kind"] in ("control", "baseline", "reference")
    with pytest.raises((ValueError, TypeError), match="learning_ratee|unknown"):
        resolve_config(name, "Grid/HazardFuel3x3-v0", learning_ratee=1)
