"""Short training runs of the learners from the GRPO literature (CorrGRPO, IS-GRPO, MDP-GRPO):
learning happens on the 3x3 gridworld from the uniform policy."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import constrained_grpo

TINY = "Grid/HazardFuel3x3-v0"  # optimum 1.2; hazard limit 0.2, fuel 4.4


@pytest.mark.parametrize("algo", ["cgrpo-corr", "cgrpo-is", "cgrpo-mdp"])
def test_literature_learner_learns_on_the_3x3_grid(algo: str) -> None:
    """From a uniform policy (return ~0.73, hazard ~0.79) towards the gem: the return rises by
    more than 0.2 and the hazard rate falls by more than 0.25 in 40k steps, the hazard's
    multiplier having priced it (cgrpo-corr is within the hazard limit by then)."""
    agent = constrained_grpo.make_agent(algo, TINY, seed=0, preset="quick")
    records: list[dict[str, Any]] = []
    agent.learn(40_000, records.append)
    first, last = records[:5], records[-len(records) // 5:]
    ret0, ret1 = (np.mean([r["ep_return"] for r in rs]) for rs in (first, last))
    hazard0, hazard1 = (np.mean([r["ep_cost"][0] for r in rs]) for rs in (first, last))
    assert hazard0 > 0.5
    assert ret1 > ret0 + 0.2, f"{algo}: return did not rise: {ret0:.3f} -> {ret1:.3f}"
    assert hazard1 < hazard0 - 0.25, f"{algo}: hazard rate did not fall: {hazard0:.3f} -> {hazard1:.3f}"
    assert agent.multipliers[1] > 0  # fuel is violated on the way to the gem: priced
    assert np.all(np.isfinite([r["adv_abs_mean"] for r in records]))
