"""The PPO baselines refuse a text task with a message that points to the GRPO agents."""

from __future__ import annotations

import pytest

from constrained_grpo import make_agent


@pytest.mark.parametrize("algo", ["ppo-lag", "pid-lag", "ppo"])
def test_baselines_refuse_math_tasks(algo: str):
    with pytest.raises(ValueError, match=r"'Math/ChainSum-v0' is a 'math' task: it takes and gives text.*make_agent\('cgrpo'"):
        make_agent(algo, "Math/ChainSum-v0", seed=0)
