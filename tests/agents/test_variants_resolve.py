"""Every GRPO variant is a different configuration from ``cgrpo`` on every task family."""

from __future__ import annotations

import pytest

from constrained_grpo.agents.variants import VARIANTS
from constrained_grpo.registry import resolve_config

TASKS = ("Grid/HazardFuel-v0", "Highway/Highway-v0", "Math/ChainSum-v0")


@pytest.mark.parametrize("task", TASKS)
def test_every_variant_differs_from_cgrpo(task: str) -> None:
    def body(name: str) -> dict:
        resolved = resolve_config(name, task)
        return {k: v for k, v in resolved.items() if k != "algo"}

    base = body("cgrpo")
    same = [name for name in VARIANTS if name != "cgrpo" and body(name) == base]
    assert same == [], f"{same} resolve to cgrpo's configuration on {task}"


def test_cgrpo_pid_adds_the_derivative_term_to_cgrpo() -> None:
    # cgrpo on the grid is a PI controller (kp 1, ki 0.05, kd 0); cgrpo-pid changes kd alone there.
    base = resolve_config("cgrpo", "Grid/HazardFuel-v0")["config"]["multiplier"]
    pid = resolve_config("cgrpo-pid", "Grid/HazardFuel-v0")["config"]["multiplier"]
    assert (base["rule"], base["kp"], base["ki"], base["kd"]) == ("pid", 1.0, 0.05, 0.0)
    assert {k for k in base if base[k] != pid[k]} == {"kd"} and pid["kd"] == 1.0
    # On a math task cgrpo runs dual ascent; cgrpo-pid switches the rule.
    assert resolve_config("cgrpo", "Math/ChainSum-v0")["config"]["multiplier"]["rule"] == "dual_ascent"
    assert resolve_config("cgrpo-pid", "Math/ChainSum-v0")["config"]["multiplier"]["rule"] == "pid"
