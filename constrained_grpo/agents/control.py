"""The control rollout adapter and MLP policies (discrete categorical, continuous Gaussian).

A GRPO group for a control task is G episodes from the same reset seed (Contract 1:
``reset(seed=s)`` fixes the initial state). The adapter resets a vector env of ``P x G``
copies with seeds ``[s_1] * G + [s_2] * G + ...``, steps all of them until each copy has
finished its first episode, and masks the steps after that (the vector env autoresets
in the same step, so later steps belong to episodes we do not use).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from constrained_grpo.agents.trainer import RolloutBatch, check_finite_observations
from constrained_grpo.constraints import Constraint, override_limits
from constrained_grpo.tasks import make_vec_env, task_constraints

__all__ = ["CategoricalMLPPolicy", "ControlAdapter", "ControlData", "GaussianMLPPolicy", "make_control_policy", "mlp"]

_ACTIVATIONS: dict[str, type[nn.Module]] = {"tanh": nn.Tanh, "relu": nn.ReLU}


def mlp(in_dim: int, hidden_sizes: Sequence[int], out_dim: int, activation: str = "tanh", out_gain: float = 0.01) -> nn.Sequential:
    """An MLP with orthogonal init (CleanRL's PPO): hidden gain sqrt(2), output ``out_gain``.

    The small output gain starts the policy near uniform (or near a zero mean), so the
    first groups explore.
    """
    layers: list[nn.Module] = []
    last = in_dim
    for width in hidden_sizes:
        linear = nn.Linear(last, width)
        nn.init.orthogonal_(linear.weight, math.sqrt(2))
        nn.init.zeros_(linear.bias)
        layers += [linear, _ACTIVATIONS[activation]()]
        last = width
    head = nn.Linear(last, out_dim)
    nn.init.orthogonal_(head.weight, out_gain)
    nn.init.zeros_(head.bias)
    layers.append(head)
    return nn.Sequential(*layers)


class CategoricalMLPPolicy(nn.Module):
    """pi(a | s) = softmax(f(s))_a for a discrete action space."""

    def __init__(self, obs_dim: int, num_actions: int, hidden_sizes: Sequence[int] = (64, 64), activation: str = "tanh"):
        super().__init__()
        self.net = mlp(obs_dim, hidden_sizes, num_actions, activation)

    def log_probs_all(self, obs: torch.Tensor) -> torch.Tensor:
        """``log pi(. | s)`` over the actions, ``[..., A]``."""
        return torch.log_softmax(self.net(obs), dim=-1)

    def sample(self, obs: torch.Tensor, generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``(a, log pi(a|s))`` with ``a`` drawn by the Gumbel-max trick from ``generator``."""
        logp_all = self.log_probs_all(obs)
        u = torch.rand(logp_all.shape, generator=generator).clamp_(1e-20, 1.0)
        action = torch.argmax(logp_all - torch.log(-torch.log(u)), dim=-1)
        return action, logp_all.gather(-1, action.unsqueeze(-1)).squeeze(-1)

    def mode(self, obs: torch.Tensor) -> torch.Tensor:
        """The most probable action."""
        return torch.argmax(self.net(obs), dim=-1)

    def log_prob_entropy(self, obs: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(log pi(a|s), H[pi(.|s)])``, both shaped like ``actions``."""
        logp_all = self.log_probs_all(obs)
        logp = logp_all.gather(-1, actions.unsqueeze(-1)).squeeze(-1)
        entropy = -(logp_all.exp() * logp_all).sum(dim=-1)
        return logp, entropy


class GaussianMLPPolicy(nn.Module):
    """pi(a | s) = N(mu(s), diag(exp(2 log_std))) with a state-independent log_std.

    The log-probability is that of the raw sample; the env receives it clipped to the
    action bounds (CleanRL's PPO), which keeps the ratio exact.
    """

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        hidden_sizes: Sequence[int] = (64, 64),
        activation: str = "tanh",
        init_log_std: float = -0.5,
    ):
        super().__init__()
        self.net = mlp(obs_dim, hidden_sizes, action_dim, activation)
        self.log_std = nn.Parameter(torch.full((action_dim,), float(init_log_std)))

    def _log_prob(self, mean: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        z = (actions - mean) / self.log_std.exp()
        return (-0.5 * z**2 - self.log_std - 0.5 * math.log(2 * math.pi)).sum(dim=-1)

    def sample(self, obs: torch.Tensor, generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        mean = self.net(obs)
        noise = torch.randn(mean.shape, generator=generator)
        action = mean + noise * self.log_std.exp()
        return action, self._log_prob(mean, action)

    def mode(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(obs)

    def log_prob_entropy(self, obs: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean = self.net(obs)
        logp = self._log_prob(mean, actions)
        entropy = (0.5 + 0.5 * math.log(2 * math.pi) + self.log_std).sum().expand(logp.shape)
        return logp, entropy


def make_control_policy(
    observation_space: gym.Space,
    action_space: gym.Space,
    hidden_sizes: Sequence[int] = (64, 64),
    activation: str = "tanh",
    init_log_std: float = -0.5,
) -> CategoricalMLPPolicy | GaussianMLPPolicy:
    """The MLP policy for these (single-env) spaces."""
    if not isinstance(observation_space, spaces.Box):
        raise TypeError(f"the MLP policies need a Box observation space, got {observation_space}")
    obs_dim = int(np.prod(observation_space.shape))
    if isinstance(action_space, spaces.Discrete):
        return CategoricalMLPPolicy(obs_dim, int(action_space.n), hidden_sizes, activation)
    if isinstance(action_space, spaces.Box) and len(action_space.shape) == 1:
        return GaussianMLPPolicy(obs_dim, int(action_space.shape[0]), hidden_sizes, activation, init_log_std)
    raise TypeError(
        f"no MLP policy for action space {action_space}; supported: Discrete and 1-d Box"
    )


@dataclass
class ControlData:
    """The control payload of a :class:`RolloutBatch`: ``obs`` ``[N, T, D]``, ``actions`` ``[N, T(, A)]``."""

    obs: torch.Tensor
    actions: torch.Tensor


class ControlAdapter:
    """Rollouts of ``P x G`` episodes of a Gymnasium task through one vector env.

    Uses the task's batched implementation where it has one (the gridworld's
    ``BatchedGridWorld``), a ``SyncVectorEnv`` with same-step autoreset otherwise.
    """

    def __init__(
        self,
        env_id: str,
        num_envs: int,
        env_kwargs: Mapping[str, Any] | None = None,
        limits: Sequence[float] | Mapping[str, float] | None = None,
        seed: int = 0,
        max_episode_steps: int = 1000,
    ):
        self.env_id = env_id
        self.env_kwargs = dict(env_kwargs or {})
        self.constraints: tuple[Constraint, ...] = override_limits(task_constraints(env_id, **self.env_kwargs), limits)
        self.constraint_names = tuple(c.name for c in self.constraints)
        self.limits = np.array([c.limit for c in self.constraints], dtype=np.float64)
        self.num_envs = int(num_envs)
        self.max_episode_steps = int(max_episode_steps)
        self.env: gym.vector.VectorEnv = make_vec_env(env_id, self.num_envs, **self.env_kwargs)
        self.observation_space = self.env.single_observation_space
        self.action_space = self.env.single_action_space
        self._discrete = isinstance(self.action_space, spaces.Discrete)
        # Two streams: reset seeds of the groups, and action sampling.
        self.rng = np.random.default_rng(seed)
        self.generator = torch.Generator().manual_seed(int(seed))

    def make_policy(self, hidden_sizes: Sequence[int], activation: str, init_log_std: float) -> nn.Module:
        return make_control_policy(self.observation_space, self.action_space, hidden_sizes, activation, init_log_std)

    def env_action(self, action: torch.Tensor) -> np.ndarray:
        """The action as the env takes it: int64 for Discrete, clipped to the bounds for Box."""
        a = action.numpy()
        if self._discrete:
            return a.astype(np.int64)
        return np.clip(a, self.action_space.low, self.action_space.high).astype(self.action_space.dtype)

    def collect(self, policy: nn.Module, num_groups: int, group_size: int) -> RolloutBatch:
        """``num_groups`` reset seeds x ``group_size`` episodes each, masked after their end."""
        n = num_groups * group_size
        if n != self.num_envs:
            raise ValueError(f"adapter was built for {self.num_envs} envs, asked for {num_groups} x {group_size}")
        k = len(self.constraints)
        group_seeds = self.rng.integers(0, 2**31 - 1, size=num_groups)
        obs, _ = self.env.reset(seed=[int(s) for s in np.repeat(group_seeds, group_size)])
        alive = np.ones(n, dtype=bool)
        returns = np.zeros(n)
        costs = np.zeros((n, k))
        lengths = np.zeros(n, dtype=np.int64)
        obs_steps: list[torch.Tensor] = []
        act_steps: list[torch.Tensor] = []
        logp_steps: list[torch.Tensor] = []
        mask_steps: list[np.ndarray] = []
        for t in range(self.max_episode_steps):
            obs_np = np.asarray(obs, dtype=np.float32).reshape(n, -1)
            check_finite_observations(obs_np, f"rollout step {t}")
            obs_t = torch.as_tensor(obs_np)
            action, logp = policy.sample(obs_t, self.generator)
            obs_steps.append(obs_t)
            act_steps.append(action)
            logp_steps.append(logp)
            mask_steps.append(alive.copy())
            obs, reward, terminated, truncated, info = self.env.step(self.env_action(action))
            step_costs = np.asarray(info["costs"], dtype=np.float64).reshape(n, k)
            returns += np.where(alive, reward, 0.0)
            costs += np.where(alive[:, None], step_costs, 0.0)
            lengths += alive
            alive &= ~(np.asarray(terminated) | np.asarray(truncated))
            if not alive.any():
                break
        components = np.concatenate([returns[:, None], costs], axis=1).reshape(num_groups, group_size, 1 + k)
        data = ControlData(obs=torch.stack(obs_steps, dim=1), actions=torch.stack(act_steps, dim=1))
        return RolloutBatch(
            components=components,
            logp_old=torch.stack(logp_steps, dim=1),
            mask=torch.as_tensor(np.stack(mask_steps, axis=1)),
            env_steps=int(lengths.sum()),
            lengths=lengths,
            data=data,
            info={"unfinished_frac": float(alive.mean())},
        )

    def log_probs(self, policy: nn.Module, batch: RolloutBatch, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        data: ControlData = batch.data
        # index_select: the rows of x[index], without advanced indexing's overhead.
        return policy.log_prob_entropy(data.obs.index_select(0, index), data.actions.index_select(0, index))

    def close(self) -> None:
        self.env.close()
