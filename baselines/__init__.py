"""Baselines on stable-baselines3: ``ppo``, ``ppo-lag``, ``pid-lag``, ``trpo-lag``, ``cpo``,
``pcpo``, ``focops``, ``cup``, ``p3o``, ``rcpo`` and ``saute-ppo``. Importing registers them.

* :mod:`.buffers`: ``CostRolloutBuffer`` (cost vectors, cost values, cost GAE) and ``gae``.
* :mod:`.policies`: ``CostActorCriticPolicy`` (SB3's actor-critic plus a K-head cost critic).
* :mod:`.ppo_lagrangian`: ``PPOLagrangian`` (SB3's PPO plus the cost machinery) and the
  advantage mix ``lagrangian_advantage``.
* :mod:`.config`: ``PPOConfig`` and ``PPOLagConfig``.
* :mod:`.trust_region`: ``trpo-lag``, ``cpo``, ``pcpo``; :mod:`.first_order`: ``focops``,
  ``cup``, ``p3o``, ``rcpo`` (both on :mod:`.constrained_base`); :mod:`.saute` and
  :mod:`.saute_agent`: ``saute-ppo``; :mod:`.entry_points`: their registry entry points.
* :mod:`.omnisafe`: ``ppo-lag-omnisafe``, ``pid-lag-omnisafe``, ``trpo-lag-omnisafe``
  (OmniSafe 0.5.0's defaults; docs/parity.md).
* :mod:`.agent`: ``BaselineAgent`` (Contract 2) and the table :data:`BASELINES`.
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
    "trpo-lag": "constrained_grpo.baselines.entry_points:make_trpo_lag",
    "cpo": "constrained_grpo.baselines.entry_points:make_cpo",
    "pcpo": "constrained_grpo.baselines.entry_points:make_pcpo",
    "focops": "constrained_grpo.baselines.entry_points:make_focops",
    "cup": "constrained_grpo.baselines.entry_points:make_cup",
    "p3o": "constrained_grpo.baselines.entry_points:make_p3o",
    "rcpo": "constrained_grpo.baselines.entry_points:make_rcpo",
    "saute-ppo": "constrained_grpo.baselines.saute_agent:make_saute_ppo",
    "ppo-lag-omnisafe": "constrained_grpo.baselines.entry_points:make_ppo_lag_omnisafe",
    "pid-lag-omnisafe": "constrained_grpo.baselines.entry_points:make_pid_lag_omnisafe",
    "trpo-lag-omnisafe": "constrained_grpo.baselines.entry_points:make_trpo_lag_omnisafe",
}

for _name, _spec in BASELINES.items():
    register_agent(
        _name,
        _ENTRY_POINTS[_name],
        defaults=_spec.preset,
        description=_spec.description,
        constrained=_spec.constrained,
        # PPO-Lagrangian mixes (A_r - sum lambda A_c) / (1 + sum lambda): lambda in reward units;
        # a table row says otherwise where its multipliers weigh something else (CPO's nu, CUP's
        # nu against a KL, P3O's fixed penalty) or there are none (Saute).
        lambda_in_reward_units=_spec.constrained if _spec.lambda_in_reward_units is None else _spec.lambda_in_reward_units,
    )
