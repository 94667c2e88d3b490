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

from constrained_grpo.agents.losses import log_softmax_columns
from constrained_grpo.agents.trainer import RolloutBatch
from constrained_grpo.nonfinite import check_finite_observations
from constrained_grpo.constraints import Constraint, override_limits
from constrained_grpo.sampling import categorical_from_uniform, gaussian_from_uniform
from constrained_grpo.tasks import make_vec_env, task_constraints

__all__ = ["CategoricalMLPPolicy", "ControlAdapter", "ControlData", "GaussianMLPPolicy", "make_control_policy", "mlp"]

_ACTIVATIONS: dict[str, type[nn.Module]] = {"tanh": nn.Tanh, "relu": nn.ReLU}

#: Rollout steps whose uniform draws a linear policy's rollout takes in one call.
GUMBEL_BLOCK = 8


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
        #: Whether a linear policy takes the closed-form fast path (``GRPOConfig.closed_form``).
        self.closed_form = True

    @property
    def linear_layer(self) -> nn.Linear | None:
        """The policy's only layer when it is linear (``hidden_sizes=()``) and the closed form is
        on, else None: the adapter then samples in numpy and the trainer updates it with
        :func:`~constrained_grpo.agents.losses.linear_categorical_grads` and its own Adam step."""
        linear = len(self.net) == 1 and isinstance(self.net[0], nn.Linear)
        return self.net[0] if linear and self.closed_form else None

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

    def from_uniform(self, obs: torch.Tensor, u: np.ndarray) -> torch.Tensor:
        """The action inverse transform sampling picks for draws ``u`` ``(B, 1)``
        (:func:`constrained_grpo.sampling.categorical_from_uniform` on pi(. | s))."""
        probs = torch.softmax(self.net(obs).double(), dim=-1).numpy()
        return torch.as_tensor(categorical_from_uniform(probs, u))

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

    def from_uniform(self, obs: torch.Tensor, u: np.ndarray) -> torch.Tensor:
        """``mu(s) + sigma Phi^{-1}(u)`` for draws ``u`` ``(B, action_dim)``."""
        mean = self.net(obs).double().numpy()
        std = self.log_std.detach().double().exp().numpy()
        return torch.as_tensor(gaussian_from_uniform(mean, std, u))

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
    """The control payload of a :class:`RolloutBatch`: ``obs`` ``[N, T, D]``, ``actions`` ``[N, T(, A)]``.

    A linear policy's rollout keeps only the valid steps, flat and time-major in ``steps``
    (``obs [S, D]``, ``actions [S]``, ``logp_old [S]``, ``index [S]`` = ``t N + i``);
    ``obs`` is then None until :meth:`padded_obs` builds it (zeros on the masked steps).
    """

    obs: torch.Tensor | None
    actions: torch.Tensor
    steps: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None

    def padded_obs(self) -> torch.Tensor:
        """``obs`` ``[N, T, D]``, built from ``steps`` on first use."""
        if self.obs is None:
            assert self.steps is not None
            x, index = self.steps[0], self.steps[3]
            n, t = self.actions.shape[:2]
            padded = np.zeros((t * n, x.shape[1]), dtype=x.dtype)
            padded[index] = x
            self.obs = torch.from_numpy(padded.reshape(t, n, -1)).transpose(0, 1)
        return self.obs


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
        layer = getattr(policy, "linear_layer", None)
        if layer is not None:
            # The parameters in numpy: a step's sampling is a few numpy calls.
            weight_t = np.ascontiguousarray(layer.weight.detach().numpy().T)
            bias = layer.bias.detach().numpy()
        obs_steps: list[Any] = []
        act_steps: list[Any] = []
        logp_steps: list[Any] = []  # log-probabilities, or logits for a linear policy
        mask_steps: list[np.ndarray] = []
        reward_steps: list[np.ndarray] = []
        cost_steps: list[np.ndarray] = []
        for t in range(self.max_episode_steps):
            obs_np = np.asarray(obs, dtype=np.float32).reshape(n, -1)
            if layer is not None:
                # Only the live envs' steps are kept and sampled (a finished env's action only
                # moves its next, unused episode). Gumbel-max on the logits (log_softmax only
                # shifts a row), from the same uniform draws as ``CategoricalMLPPolicy.sample``.
                if t % GUMBEL_BLOCK == 0:
                    # The draws of GUMBEL_BLOCK steps in one call: the generator's stream is
                    # the same as step by step; the unused rest is given back below.
                    block_state = self.generator.get_state()
                    gumbel = torch.rand((GUMBEL_BLOCK, n, bias.shape[0]), generator=self.generator).numpy()
                    np.maximum(gumbel, 1e-20, out=gumbel)  # torch.rand is < 1: the clamp's upper end never binds
                    np.log(gumbel, out=gumbel)
                    np.negative(gumbel, out=gumbel)
                    np.log(gumbel, out=gumbel)  # log(-log u): argmax(logits - it) is Gumbel-max
                live = alive.nonzero()[0]
                obs_live = obs_np.take(live, axis=0)
                logits = obs_live @ weight_t + bias
                action_live = np.argmax(logits - gumbel[t % GUMBEL_BLOCK].take(live, axis=0), axis=1)
                env_action = np.zeros(n, dtype=np.int64)
                env_action[live] = action_live
                logp_steps.append(logits)
                obs_steps.append(obs_live)
                act_steps.append(action_live)
            else:
                check_finite_observations(obs_np, f"rollout step {t}")
                obs_t = torch.as_tensor(obs_np)
                action, logp = policy.sample(obs_t, self.generator)
                obs_steps.append(obs_t)
                act_steps.append(action)
                logp_steps.append(logp)
                env_action = self.env_action(action)
            mask_steps.append(alive)
            obs, reward, terminated, truncated, info = self.env.step(env_action)
            reward_steps.append(np.asarray(reward, dtype=np.float64))
            cost_steps.append(np.asarray(info["costs"], dtype=np.float64).reshape(n, k))
            alive = alive > (np.asarray(terminated) | np.asarray(truncated))  # alive and not done
            if not alive.any():
                break
        # Sums over the steps in step order: the same float sums as adding step by step.
        mask_np = np.stack(mask_steps)  # [T, N]
        returns = np.where(mask_np, np.stack(reward_steps), 0.0).sum(axis=0)
        costs = np.where(mask_np[..., None], np.stack(cost_steps), 0.0).sum(axis=0)
        lengths = mask_np.sum(axis=0)
        components = np.concatenate([returns[:, None], costs], axis=1).reshape(num_groups, group_size, 1 + k)
        # Stacked time-major ([T, N, ...]: whole blocks copied); the batch holds [N, T, ...] views.
        if layer is not None:
            used = len(mask_steps) % GUMBEL_BLOCK
            if used:  # rewind the generator to just after the draws of the steps taken
                self.generator.set_state(block_state)
                torch.rand((used, n, bias.shape[0]), generator=self.generator)
            x = np.concatenate(obs_steps)
            if not np.isfinite(x).all():
                for t, rows in enumerate(obs_steps):
                    full = np.zeros((n, rows.shape[1]), dtype=rows.dtype)
                    full[mask_np[t]] = rows
                    check_finite_observations(full, f"rollout step {t}")
            actions = np.concatenate(act_steps)
            index = np.flatnonzero(mask_np)  # t N + i of the live steps, in the order kept
            logp_all, _ = log_softmax_columns(np.ascontiguousarray(np.concatenate(logp_steps).T))
            logp = logp_all[actions, np.arange(actions.size)]
            width = len(mask_steps)
            actions_pad = np.zeros(width * n, dtype=np.int64)
            actions_pad[index] = actions
            logp_pad = np.zeros(width * n, dtype=np.float32)
            logp_pad[index] = logp
            data = ControlData(
                obs=None, actions=torch.from_numpy(actions_pad.reshape(width, n)).t(), steps=(x, actions, logp, index)
            )
            logp_old = torch.from_numpy(logp_pad.reshape(width, n)).t()
        else:
            data = ControlData(obs=torch.stack(obs_steps).transpose(0, 1), actions=torch.stack(act_steps).transpose(0, 1))
            logp_old = torch.stack(logp_steps).t()
        return RolloutBatch(
            components=components,
            logp_old=logp_old,
            mask=torch.from_numpy(mask_np).t(),
            env_steps=int(lengths.sum()),
            lengths=lengths,
            data=data,
            info={"unfinished_frac": float(alive.mean())},
        )

    def log_probs(self, policy: nn.Module, batch: RolloutBatch, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        data: ControlData = batch.data
        # index_select: the rows of x[index], without advanced indexing's overhead.
        return policy.log_prob_entropy(data.padded_obs().index_select(0, index), data.actions.index_select(0, index))

    def flat_steps(self, batch: RolloutBatch) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
        """The valid steps of ``batch`` flat, time-major, as numpy arrays: ``(obs [S, D],
        actions [S], logp_old [S], sample [S])``; None for a continuous action space."""
        if not self._discrete:
            return None
        data: ControlData = batch.data
        n, t = batch.mask.shape
        if data.steps is not None:
            x, actions, logp_old, index = data.steps
            return x, actions, logp_old, index % n
        index = np.flatnonzero(batch.mask.t().contiguous().numpy())
        obs = data.padded_obs().transpose(0, 1).contiguous().numpy().reshape(t * n, -1).take(index, axis=0)
        actions = data.actions.t().contiguous().numpy().reshape(-1).take(index)
        logp_old = batch.logp_old.t().contiguous().numpy().reshape(-1).take(index)
        return obs, actions, logp_old, index % n

    def close(self) -> None:
        self.env.close()
