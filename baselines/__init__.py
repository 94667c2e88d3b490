"""Baselines on stable-baselines3: ``ppo``, ``ppo-lag``, ``pid-lag``, ``trpo-lag``, ``cpo``,
``pcpo``, ``focops``, ``cup``, ``p3o``, ``rcpo`` and ``saute-ppo``. Importing registers them.

* :mod:`.buffers`: ``CostRolloutBuffer`` (cost vectors, cost values, cost GAE) and ``gae``.
* :mod:`.policies`: ``CostActorCriticPolicy`` (SB3's actor-critic plus a K-head cost critic).
* :mod:`.ppo_lagrangian`: ``PPOLagrangian`` (SB3's PPO plus the cost machinery) and the
  advantage mix ``lagrangian_advantage``.
* :mod:`.config`: ``PPOConfig`` and ``PPOLagConfig``.
* :mod:`.trust_region`: ``trpo-lag``, ``cpo``, ``pcpo``; :mod:`.first_order`: ``focops``,
  ``cup``, ``p3o``, ``rcpo`` (both on :mod:`.constrained_base`); :mod:`.saute` and
  :mod:`.saute_agent`: ``saute-ppo``.
* :mod:`.omnisafe`: ``ppo-lag-omnisafe``, ``pid-lag-omnisafe``, ``trpo-lag-omnisafe``
  (OmniSafe 0.5.0's defaults; docs/parity.md).
* :mod:`.agent`: ``BaselineAgent`` (Contract 2) and the table :data:`BASELINES`, whose rows
  are the registered baselines: :func:`register_baselines` registers each under its key with
  the entry point ``BaselineFactory(name)`` (``make_baseline(name, ...)`` and its
  ``resolve_config``), so that a new baseline is one ``BaselineSpec`` row.
"""

from __future__ import annotations

from constrained_grpo.baselines.agent import (
    BASELINES,
    BaselineAgent,
    BaselineFactory,
    BaselineSpec,
    load_agent,
    make_baseline,
    register_baselines,
)
from constrained_grpo.baselines.config import PPOConfig, PPOLagConfig

__all__ = [
    "BASELINES",
    "BaselineAgent",
    "BaselineFactory",
    "BaselineSpec",
    "PPOConfig",
    "PPOLagConfig",
    "load_agent",
    "make_baseline",
    "register_baselines",
]

register_baselines()
