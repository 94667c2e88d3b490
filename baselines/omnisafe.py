"""OmniSafe-matched baselines: ``ppo-lag-omnisafe``, ``pid-lag-omnisafe``, ``trpo-lag-omnisafe``.

They reproduce the defaults of OmniSafe 0.5.0's ``PPOLag``, ``CPPOPID`` and ``TRPOLag``
(omnisafe/configs/on-policy/*.yaml and the algorithm files; docs/parity.md lists every
setting with its OmniSafe file and key) on top of :class:`PPOLagrangian`'s rollout, cost
critic and cost GAE. What :class:`OmniSafeMixin` changes, per rollout ("epoch"):

- every env copy is reset at the start of the rollout (episodes never cross an epoch);
- observations are normalised by a running mean and std (:class:`RunningObsNorm`, as
  OmniSafe's ``Normalizer``, clip 5), updated with every observation as it arrives, so
  the rollout buffer stores the normalised observations the policy acted on;
- ``Jhat`` is the mean episodic cost of the last ``cost_window`` (50) finished episodes;
- the actor, the reward critic and the cost critic have one Adam each; each critic's
  loss is ``mean (V - R)^2 + critic_l2 * sum_params p^2``; every network's gradient is
  clipped to ``max_grad_norm`` apart;
- PPO: ``n_epochs`` passes of minibatches (reward critic step, cost critic step, actor
  step on each), stopping after a pass whose full-batch ``KL(pi_old || pi)`` exceeds
  ``target_kl``; the actor's lr decays linearly, ``lr_i = lr (1 - i / E)`` in epoch i
  of E (torch ``LinearLR`` stepped once per epoch).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.utils import explained_variance
from stable_baselines3.common.vec_env import VecEnv, VecEnvWrapper
from torch.nn import functional as F

from constrained_grpo.nonfinite import NonFiniteUpdateError
from constrained_grpo.baselines.config import PPOLagConfig
from constrained_grpo.baselines.constrained_base import actor_parameters, kl_per_state, lag_model_kwargs
from constrained_grpo.baselines.ppo_lagrangian import PPOLagrangian
from constrained_grpo.baselines.trust_region import TRPOLagConfig, TRPOLagrangian
from constrained_grpo.constraints import Constraint
from constrained_grpo.multipliers import Multiplier

__all__ = [
    "OMNISAFE_LAMBDA_MAX",
    "OMNISAFE_PRESETS",
    "OmniSafePPOLag",
    "OmniSafePPOLagConfig",
    "OmniSafeTRPOLag",
    "OmniSafeTRPOLagConfig",
    "RunningObsNorm",
    "linear_decay_lr",
]

#: OmniSafe's Lagrange multiplier has no upper bound; MultiplierConfig wants a finite one.
OMNISAFE_LAMBDA_MAX = 1e12


class RunningObsNorm(th.nn.Module):
    """OmniSafe 0.5.0's ``Normalizer`` (omnisafe/common/normalizer.py) on observations.

    ``push(x)`` folds a batch into the running count n, mean m and sum of squares S
    (Chan et al.'s parallel update); ``std = max(sqrt(S / (n - 1)), 1e-2)``.
    ``normalize(x)`` pushes x, then returns ``clip((x - m) / std, -clip, clip)``, or x
    itself while n <= 1. Buffers (float64) travel with the policy's state dict.
    """

    def __init__(self, shape: tuple[int, ...], clip: float = 5.0):
        super().__init__()
        self.clip = float(clip)
        self.register_buffer("mean", th.zeros(shape, dtype=th.float64))
        self.register_buffer("sumsq", th.zeros(shape, dtype=th.float64))
        self.register_buffer("count", th.zeros((), dtype=th.int64))

    @property
    def std(self) -> np.ndarray:
        n = int(self.count)
        var = self.sumsq.numpy() / max(n - 1, 1)
        return np.maximum(np.sqrt(var), 1e-2)

    def push(self, batch: np.ndarray) -> None:
        x = np.asarray(batch, dtype=np.float64).reshape(-1, *self.mean.shape)
        k, n = x.shape[0], int(self.count)
        mean_b = x.mean(axis=0)
        sumsq_b = ((x - mean_b) ** 2).sum(axis=0)
        if n == 0:
            mean, sumsq = mean_b, sumsq_b
        else:
            total = n + k
            delta = mean_b - self.mean.numpy()
            mean = self.mean.numpy() + delta * k / total
            sumsq = self.sumsq.numpy() + sumsq_b + delta**2 * n * k / total
        self.mean.copy_(th.as_tensor(mean))
        self.sumsq.copy_(th.as_tensor(sumsq))
        self.count.fill_(n + k)

    def apply(self, obs: np.ndarray) -> np.ndarray:
        """``obs`` normalised with the current statistics, without updating them."""
        obs = np.asarray(obs)
        if int(self.count) <= 1:
            return obs
        out = np.clip((obs - self.mean.numpy()) / self.std, -self.clip, self.clip)
        return out.astype(obs.dtype if np.issubdtype(obs.dtype, np.floating) else np.float32)

    def normalize(self, obs: np.ndarray) -> np.ndarray:
        """Push ``obs`` (a batch), then normalise it (OmniSafe's order)."""
        self.push(obs)
        return self.apply(obs)


class ObsNormVecEnv(VecEnvWrapper):
    """Normalises every observation a VecEnv returns (reset, step, and ``terminal_observation``
    of a finished episode) with a :class:`RunningObsNorm`, updating it first (OmniSafe's
    ``ObsNormalize`` wrapper)."""

    def __init__(self, venv: VecEnv, norm: RunningObsNorm):
        super().__init__(venv)
        self.norm = norm

    def reset(self) -> np.ndarray:
        return self.norm.normalize(self.venv.reset())

    def step_wait(self) -> Any:
        obs, rewards, dones, infos = self.venv.step_wait()
        obs = self.norm.normalize(obs)
        for info in infos:
            if info.get("terminal_observation") is not None:
                info["terminal_observation"] = self.norm.normalize(info["terminal_observation"][None])[0]
        return obs, rewards, dones, infos


def linear_decay_lr(lr: float, epoch: int, epochs: int) -> float:
    """torch ``LinearLR(start_factor=1, end_factor=0, total_iters=E)`` after ``epoch`` steps:
    ``lr * max(0, 1 - epoch / E)``."""
    return lr * max(0.0, 1.0 - epoch / max(epochs, 1))


def _l2(params: Sequence[th.nn.Parameter]) -> th.Tensor:
    return th.stack([p.pow(2).sum() for p in params]).sum()


class OmniSafeMixin:
    """The OmniSafe rollout and critic conventions (module docstring) for a PPOLagrangian."""

    def __init__(
        self,
        env: VecEnv,
        *args: Any,
        obs_normalize: bool = True,
        obs_clip: float = 5.0,
        critic_lr: float = 3e-4,
        critic_l2: float = 1e-3,
        linear_lr_decay: bool = True,
        reset_each_rollout: bool = True,
        **kwargs: Any,
    ):
        self.obs_norm = RunningObsNorm(env.observation_space.shape, obs_clip) if obs_normalize else None
        if self.obs_norm is not None:
            env = ObsNormVecEnv(env, self.obs_norm)
        self.critic_lr = critic_lr
        self.critic_l2 = critic_l2
        self.linear_lr_decay = linear_lr_decay
        self.reset_each_rollout = reset_each_rollout
        super().__init__(env, *args, **kwargs)  # type: ignore[call-arg]
        policy = self.policy  # type: ignore[attr-defined]
        if self.obs_norm is not None:
            policy.add_module("obs_normalizer", self.obs_norm)  # saved and loaded with the policy
        self.actor_params = actor_parameters(policy)
        self.reward_critic_params = [*policy.mlp_extractor.value_net.parameters(), *policy.value_net.parameters()]
        self.cost_critic_params = list(policy.cost_value_net.parameters())
        self.actor_optimizer = th.optim.Adam(self.actor_params, lr=self.learning_rate)  # type: ignore[attr-defined]
        self.reward_critic_optimizer = th.optim.Adam(self.reward_critic_params, lr=critic_lr)
        self.cost_critic_optimizer = th.optim.Adam(self.cost_critic_params, lr=critic_lr)
        self._rollouts = 0

    def _excluded_save_params(self) -> list[str]:
        return [
            *super()._excluded_save_params(),  # type: ignore[misc]
            "obs_norm", "actor_params", "reward_critic_params", "cost_critic_params",
            "actor_optimizer", "reward_critic_optimizer", "cost_critic_optimizer",
        ]

    def predict(self, observation: Any, *args: Any, **kwargs: Any) -> Any:
        """SB3's ``predict`` on raw observations, normalised with the frozen statistics."""
        if self.obs_norm is not None:
            observation = self.obs_norm.apply(observation)
        return super().predict(observation, *args, **kwargs)  # type: ignore[misc]

    def collect_rollouts(self, env: VecEnv, *args: Any, **kwargs: Any) -> bool:
        if self.reset_each_rollout and self._rollouts > 0:
            # OmniSafe's OnPolicyAdapter.rollout resets every env at the start of an epoch;
            # the unfinished episodes were bootstrapped at the end of the last rollout.
            self._last_obs = env.reset()
            self._last_episode_starts = np.ones((env.num_envs,), dtype=bool)
            self._episode_costs[:] = 0.0  # type: ignore[attr-defined]
        self._rollouts += 1
        return super().collect_rollouts(env, *args, **kwargs)  # type: ignore[misc]

    def _estimate_costs(self, finished: list[np.ndarray]) -> np.ndarray | None:
        """``Jhat``: mean episodic cost of the last ``cost_window`` finished episodes (OmniSafe's
        ``Metrics/EpCost`` over window of 50 episodes)."""
        self.cost_window.extend(finished)  # type: ignore[attr-defined]
        if not self.cost_window:  # type: ignore[attr-defined]
            return None
        self.cost_estimate = np.mean(self.cost_window, axis=0)
        return self.cost_estimate

    def _network_step(self, loss: th.Tensor, optimizer: th.optim.Optimizer, params: list[th.nn.Parameter], what: str) -> None:
        if not th.isfinite(loss):
            raise NonFiniteUpdateError(
                f"{type(self).__name__} update {self._n_updates + 1}: non-finite {what} {loss.item()}; "  # type: ignore[attr-defined]
                "training stopped before the step"
            )
        optimizer.zero_grad()
        loss.backward()
        th.nn.utils.clip_grad_norm_(params, self.max_grad_norm)  # type: ignore[attr-defined]
        optimizer.step()

    def critic_steps(self, data: Any) -> tuple[float, float]:
        """One reward-critic and one cost-critic Adam step on a minibatch (L2 on each critic)."""
        policy = self.policy  # type: ignore[attr-defined]
        value_loss = F.mse_loss(policy.predict_values(data.observations).flatten(), data.returns)
        self._network_step(value_loss + self.critic_l2 * _l2(self.reward_critic_params),
                           self.reward_critic_optimizer, self.reward_critic_params, "value loss")
        cost_loss = F.mse_loss(policy.predict_cost_values(data.observations), data.cost_returns)
        self._network_step(cost_loss + self.critic_l2 * _l2(self.cost_critic_params),
                           self.cost_critic_optimizer, self.cost_critic_params, "cost value loss")
        return value_loss.item(), cost_loss.item()

    def _log_explained_variance(self) -> None:
        buf = self.rollout_buffer  # type: ignore[attr-defined]
        self.logger.record("train/explained_variance", explained_variance(buf.values.flatten(), buf.returns.flatten()))  # type: ignore[attr-defined]
        self.logger.record(  # type: ignore[attr-defined]
            "train/cost_explained_variance", explained_variance(buf.cost_values.reshape(-1), buf.cost_returns.reshape(-1))
        )


class OmniSafePPOLag(OmniSafeMixin, PPOLagrangian):
    """OmniSafe 0.5.0's ``PPOLag`` / ``CPPOPID`` update (module docstring)."""

    def full_batch(self) -> Any:
        return next(self.rollout_buffer.get(None))

    def epoch_index(self) -> tuple[int, int]:
        """(index i of the current epoch, number E of epochs of this ``learn`` call)."""
        steps = self.n_steps * self.n_envs
        return self._rollouts - 1, max(1, math.ceil(self._total_timesteps / steps))

    def train(self) -> None:
        self.policy.set_training_mode(True)
        lr = self.learning_rate if not self.linear_lr_decay else linear_decay_lr(self.learning_rate, *self.epoch_index())
        for group in self.actor_optimizer.param_groups:
            group["lr"] = lr
        full = self.full_batch()
        with th.no_grad():
            # SB3 reuses one distribution object per policy: keep this one's tensors apart.
            old = copy.copy(self.policy.get_distribution(full.observations))
        clip = self.clip_range(self._current_progress_remaining)  # type: ignore[operator]
        pg, vl, cl, ents = [], [], [], []
        kl, passes = 0.0, 0
        for _ in range(self.n_epochs):
            for data in self.rollout_buffer.get(self.batch_size):
                v, c = self.critic_steps(data)
                vl.append(v)
                cl.append(c)
                dist = self.policy.get_distribution(data.observations)
                actions = data.actions.long().flatten() if isinstance(self.action_space, spaces.Discrete) else data.actions
                log_prob = dist.log_prob(actions)
                ratio = th.exp(log_prob - data.old_log_prob)
                adv = data.advantages
                loss = -th.min(ratio * adv, th.clamp(ratio, 1 - clip, 1 + clip) * adv).mean()
                pg.append(loss.item())
                entropy = dist.entropy()
                if entropy is not None:
                    ents.append(-entropy.mean().item())
                    loss = loss - self.ent_coef * entropy.mean()
                self._network_step(loss, self.actor_optimizer, self.actor_params, "policy loss")
            passes += 1
            self._n_updates += 1
            with th.no_grad():
                kl = kl_per_state(old, self.policy.get_distribution(full.observations)).mean().item()
            if self.target_kl is not None and kl > self.target_kl:
                break
        for key, value in (("policy_gradient_loss", np.mean(pg)), ("value_loss", np.mean(vl)),
                           ("cost_value_loss", np.mean(cl)), ("approx_kl", kl), ("actor_lr", lr),
                           ("update_passes", passes)):
            self.logger.record(f"train/{key}", float(value))
        if ents:
            self.logger.record("train/entropy_loss", float(np.mean(ents)))
        self.logger.record("train/n_updates", self._n_updates, exclude="tensorboard")
        self._log_explained_variance()


class OmniSafeTRPOLag(OmniSafeMixin, TRPOLagrangian):
    """OmniSafe 0.5.0's ``TRPOLag``: the trust-region actor step of ``trpo-lag``, then
    ``n_epochs`` passes of per-critic Adam minibatch steps with L2 (NaturalPG._update).
    Its KL, in the Fisher-vector product and the line search, averages a Gaussian policy's
    per-dimension KLs (``kl_divergence(p, q).mean()`` over states and dimensions, natural_pg.py
    ``_fvp``, trpo.py ``_search_step_size``) where ``trpo-lag`` sums them."""

    kl_over_actions = "mean"

    def fit_critics(self) -> tuple[float, float]:
        vl, cl = [], []
        for _ in range(self.n_epochs):
            for data in self.rollout_buffer.get(self.batch_size):
                v, c = self.critic_steps(data)
                vl.append(v)
                cl.append(c)
        return float(np.mean(vl)), float(np.mean(cl))


def _sb3_kwargs(sb3_kwargs: dict[str, Any]) -> dict[str, Any]:
    # OmniSafe's kaiming_uniform(a=sqrt(5)) with torch's default bias is nn.Linear's own
    # initialisation, which SB3 keeps when ortho_init is off.
    return {**sb3_kwargs, "policy_kwargs": {**sb3_kwargs.get("policy_kwargs", {}), "ortho_init": False}}


@dataclass(frozen=True)
class _OmniSafeOptions:
    """The options both OmniSafe configs add to their SB3 config (listed first in the bases,
    so that their fields follow the SB3 config's and ``__post_init__`` runs its checks too)."""

    obs_normalize: bool = True
    """Running mean/std normalisation of observations (OmniSafe ``algo_cfgs.obs_normalize``)."""
    obs_clip: float = 5.0
    """Clip of the normalised observations (``ObsNormalize``: ``Normalizer(clip=5)``)."""
    critic_lr: float = 3e-4
    """Adam lr of each critic (``model_cfgs.critic.lr``); ``learning_rate`` is the actor's."""
    critic_l2: float = 1e-3
    """``critic_norm_coef``: each critic's loss adds this times its squared weights."""
    linear_lr_decay: bool = True
    """Actor lr decays linearly to 0 over the run (``model_cfgs.linear_lr_decay``)."""
    reset_each_rollout: bool = True
    """Reset every env at the start of each rollout (OmniSafe's epochs)."""

    def __post_init__(self) -> None:
        super().__post_init__()  # type: ignore[misc]  # the SB3 config's checks
        for name in ("obs_clip", "critic_lr", "critic_l2"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise ValueError(f"{type(self).__name__}.{name}={value!r} must be a finite number >= 0")

    def omnisafe_kwargs(self) -> dict[str, Any]:
        """These options as the keywords of :class:`OmniSafePPOLag` / :class:`OmniSafeTRPOLag`."""
        return dict(
            obs_normalize=self.obs_normalize, obs_clip=self.obs_clip, critic_lr=self.critic_lr,
            critic_l2=self.critic_l2, linear_lr_decay=self.linear_lr_decay, reset_each_rollout=self.reset_each_rollout,
        )


@dataclass(frozen=True)
class OmniSafePPOLagConfig(_OmniSafeOptions, PPOLagConfig):
    """PPO-Lagrangian with OmniSafe 0.5.0's conventions (module docstring)."""

    def build_model(self, env: VecEnv, constraints: Sequence[Constraint], multiplier: Multiplier,
                    sb3_kwargs: dict[str, Any]) -> OmniSafePPOLag:
        return OmniSafePPOLag(env, constraints, multiplier, **self.omnisafe_kwargs(), **lag_model_kwargs(self),
                              **_sb3_kwargs(sb3_kwargs))


@dataclass(frozen=True)
class OmniSafeTRPOLagConfig(_OmniSafeOptions, TRPOLagConfig):
    """TRPO-Lagrangian with OmniSafe 0.5.0's conventions (module docstring)."""

    critic_lr: float = 1e-3
    """Adam lr of each critic (TRPOLag.yaml ``model_cfgs.critic.lr``)."""
    linear_lr_decay: bool = False
    """Unused by the trust-region actor step (TRPOLag.yaml: False)."""

    def build_model(self, env: VecEnv, constraints: Sequence[Constraint], multiplier: Multiplier,
                    sb3_kwargs: dict[str, Any]) -> OmniSafeTRPOLag:
        return OmniSafeTRPOLag(
            env, constraints, multiplier, **self.omnisafe_kwargs(), **self.trust_region_kwargs(),
            **lag_model_kwargs(self), **_sb3_kwargs(sb3_kwargs),
        )


#: The rows of the three variants (baselines/agent.py BASELINES): OmniSafe 0.5.0's
#: PPOLag.yaml / CPPOPID.yaml / TRPOLag.yaml defaults (docs/parity.md, key by key).
_COMMON: dict[str, Any] = {
    "vec_env": "dummy", "n_envs": 1, "n_steps": 20_000,           # vector_env_nums 1, steps_per_epoch
    # cost_gamma / cost_gae_lambda stay None: they follow gamma and gae_lambda (0.99, 0.95).
    "gamma": 0.99, "gae_lambda": 0.95,
    "normalize_advantage": True, "cost_advantage_norm": "center",  # standardized_rew_adv / _cost_adv
    "max_grad_norm": 40.0, "ent_coef": 0.0,
    "net_arch": (64, 64), "cost_net_arch": (64, 64), "activation": "tanh",
    # Jhat: OmniSafe's Metrics/EpCost, registered with window_length=50 in policy_gradient.py
    # (_init_log); logger_cfgs.window_lens (100) is only validated, never used, in 0.5.0.
    "cost_window": 50,
}
_ADAM_LAGRANGE: dict[str, Any] = {
    "rule": "adam", "lr": 0.035, "init": 0.001, "lambda_max": OMNISAFE_LAMBDA_MAX, "normalize": False,
}
OMNISAFE_PRESETS: dict[str, dict[str, Any]] = {
    "ppo-lag-omnisafe": {
        **_COMMON, "learning_rate": 3e-4, "critic_lr": 3e-4, "n_epochs": 40, "batch_size": 64,
        "target_kl": 0.02, "clip_range": 0.2, "linear_lr_decay": True, "multiplier": dict(_ADAM_LAGRANGE),
    },
    "pid-lag-omnisafe": {
        **_COMMON, "learning_rate": 3e-4, "critic_lr": 3e-4, "n_epochs": 40, "batch_size": 64,
        "target_kl": 0.02, "clip_range": 0.2, "linear_lr_decay": True,
        "multiplier": {"rule": "pid", "kp": 0.1, "ki": 0.01, "kd": 0.01, "d_delay": 10, "ema_p": 0.95,
                       "ema_d": 0.95, "init": 0.001, "lambda_max": OMNISAFE_LAMBDA_MAX,
                       "integral_max": OMNISAFE_LAMBDA_MAX, "normalize": False},
    },
    "trpo-lag-omnisafe": {
        **_COMMON, "critic_lr": 1e-3, "n_epochs": 10, "batch_size": 128, "trust_region_kl": 0.01,
        "cg_iters": 15, "cg_damping": 0.1, "fisher_subsample": 1, "linear_lr_decay": False, "multiplier": dict(_ADAM_LAGRANGE),
    },
}
