"""``saute-ppo``: the Contract-2 agent of Saute RL (:mod:`constrained_grpo.baselines.saute`), built
through ``SauteConfig.agent_class`` by its ``BASELINES`` row."""

from __future__ import annotations

from typing import Any

import numpy as np
from stable_baselines3 import PPO

from constrained_grpo.baselines.agent import BaselineAgent, sb3_ppo_kwargs
from constrained_grpo.baselines.config import PPOConfig
from constrained_grpo.baselines.saute import (
    SauteConfig,
    SauteObservation,
    SauteVecEnv,
    SauteVectorObservation,
    _check_limits,
)
from constrained_grpo.constraints import override_limits

__all__ = ["SauteAgent"]


class SauteAgent(BaselineAgent):
    """A Contract-2 agent: SB3's PPO on the Saute-augmented task (module docstring).

    Its policy needs the remaining budgets, which the task's observation does not hold:
    :meth:`wrap_eval_env` (one env) and :meth:`wrap_eval_vec_env` (the task's batched twin)
    give the harness wrappers that track them from the step costs and append them to the
    observation, leaving the task's reward and costs as they are, so that ``act`` sees what
    the policy was trained on and the evaluation is the harness's own.
    """

    def wrap_eval_env(self, env: Any) -> SauteObservation:
        """``env`` with the budget-augmented observation (the task's own reward and costs)."""
        cfg: SauteConfig = self.config  # type: ignore[assignment]
        return SauteObservation(env, self.limits, cfg.saute_gamma)

    def wrap_eval_vec_env(self, vec: Any) -> SauteVectorObservation:
        """``vec`` (same-step autoreset) with the budget-augmented observation, row by row."""
        cfg: SauteConfig = self.config  # type: ignore[assignment]
        return SauteVectorObservation(vec, self.limits, cfg.saute_gamma)

    def __init__(self, env_id: str, seed: int = 0, config: PPOConfig | None = None, name: str = "saute-ppo"):
        config = config if config is not None else SauteConfig()
        if not isinstance(config, SauteConfig):
            raise TypeError(f"SauteAgent needs a SauteConfig, got {type(config).__name__}")
        super().__init__(env_id, seed, config, name)
        cfg: SauteConfig = self.config  # type: ignore[assignment]
        self.constraints = override_limits(self.constraints, cfg.limits)
        self.limits = _check_limits(np.array([c.limit for c in self.constraints]))
        self.env = SauteVecEnv(self.env, self.limits, cfg.saute_gamma, cfg.saute_unsafe_reward)
        self.model = PPO("MlpPolicy", self.env, **sb3_ppo_kwargs(cfg, self.seed))

    @property
    def multipliers(self) -> np.ndarray:
        return np.zeros(0)

