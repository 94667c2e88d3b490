"""Baselines on stable-baselines3: ``ppo``, ``ppo-lag`` and ``pid-lag``. Importing registers them.

* :mod:`.buffers`: ``CostRolloutBuffer`` (cost vectors, cost values, cost GAE) and ``gae``.
* :mod:`.policies`: ``CostActorCriticPolicy`` (SB3's actor-critic plus a K-head cost critic).
* :mod:`.ppo_lagrangian`: ``PPOLagrangian`` (SB3's PPO plus the cost machinery) and the
  advantage mix ``lagrangian_advantage``.
* :mod:`.config`: ``PPOConfig`` and ``PPOLagConfig``.
* :mod:`.agent`: ``BaselineAgent`` (Contract 2) and the table :data:`BASELINES`.
* :mod:`.experiment`: ``python -m constrained_grpo.baselines.experiment``, the multi-seed
  acceptance run.
"""

from __future__ import annotations

from constrained_grpo.baselines.agent import BASELINES, BaselineAgent, load_agent, make_baseline
from constrained_grpo.baselines.config import PPOConfig, PPOLagConfig
from constrained_grpo.registry import register_agent

__all__ = ["BASELINES", "BaselineAgent", "PPOConfig", "PPOLagConfig", "load_agent", "make_baseline"]

_ENTRY_POINTS: dict[str, str] = {
    "ppo": "constrained_grpo.baselines.agent:make_ppo",
    "ppo-lag": "constrained_grpo.baselines.agent:make_ppo_lag",
    "pid-lag": "constrained_grpo.baselines.agent:make_pid_lag",
}

for _name, _spec in BASELINES.items():
    register_agent(
        _name,
        _ENTRY_POINTS[_name],
        defaults=_spec.preset,
        description=_spec.description,
        constrained=_spec.constrained,
        # PPO-Lagrangian mixes (A_r - sum lambda A_c) / (1 + sum lambda): lambda in reward units.
        lambda_in_reward_units=_spec.constrained,
    )
