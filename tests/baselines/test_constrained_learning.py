"""A short training run of each constrained baseline beyond PPO-Lagrangian shows learning
on Grid/HazardFuel3x3-v0 (limits: hazard 0.2, fuel 4.4; optimum 1.2, unconstrained 1.5).

With these PPO settings plain PPO keeps breaking the fuel limit (fuel about 9 over the
last quarter of 28,672 steps, tests/baselines/test_baselines_learning.py); every method
here starts near fuel 7.3-9.2 and, after 16,384 steps (32 iterations of 512), ends its
last quarter within 1.2x the fuel limit with a return of at least 0.9 (the cheapest
route to the goal earns 1.0).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from constrained_grpo.registry import make_agent, validate_log_record

TASK = "Grid/HazardFuel3x3-v0"
FUEL_LIMIT = 4.4
PPO_SETTINGS = {"n_envs": 4, "n_steps": 128, "batch_size": 256, "n_epochs": 5, "learning_rate": 1e-3,
                "ent_coef": 0.02, "normalize_advantage": False}
LAG_SETTINGS = {"cost_advantage_norm": "center", "multiplier": {"rule": "dual_ascent", "lr": 0.1,
                "normalize": True, "init": 0.0}}
STEPS = 16_384


@pytest.mark.slow
@pytest.mark.parametrize("name", ["trpo-lag", "cpo", "pcpo", "focops", "cup", "p3o", "rcpo", "saute-ppo"])
def test_constrained_baseline_learns_to_keep_the_fuel_limit(name: str) -> None:
    extra = {} if name == "saute-ppo" else LAG_SETTINGS
    agent = make_agent(name, TASK, seed=0, **PPO_SETTINGS, **extra)
    records: list[dict[str, Any]] = []
    agent.learn(STEPS, records.append)
    for record in records:
        validate_log_record(record, 2)
    first = float(np.mean([r["ep_cost"][1] for r in records[:3]]))
    tail = records[-len(records) // 4:]
    fuel = float(np.mean([r["ep_cost"][1] for r in tail]))
    ret = float(np.mean([r["ep_return"] for r in tail]))
    assert first > 1.5 * FUEL_LIMIT, f"{name}: the untrained policy should break the fuel limit, fuel {first:.2f}"
    assert fuel <= 1.2 * FUEL_LIMIT, f"{name}: fuel {fuel:.2f} over the last quarter, limit {FUEL_LIMIT}"
    assert fuel < first - 3.0, f"{name}: fuel {first:.2f} -> {fuel:.2f}"
    assert ret >= 0.9, f"{name}: return {ret:.2f} over the last quarter"
