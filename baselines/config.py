"""Configs of the SB3 baselines: typed dataclasses, one docstring per field.

``PPOConfig`` holds the PPO knobs (SB3's names and meanings); ``PPOLagConfig`` adds the
cost critic, the cost GAE, the advantage mix and the Lagrange multipliers. The
multipliers' options are :class:`~constrained_grpo.multipliers.MultiplierConfig`'s,
documented there once, and take the shape they take for the GRPO agents: a nested
``multiplier={"rule": "pid", "kp": 0.3}`` that updates the preset's multiplier field by
field (:func:`merge_config_layers`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any, TypeVar

from constrained_grpo.deploy import DeployOptions
from constrained_grpo.multipliers import MultiplierConfig
from constrained_grpo.options import check_options, coerce_fields, merge_options, option_names, with_options

__all__ = [
    "BATCHED_SIZES",
    "COST_ADVANTAGE_NORMS",
    "DUMMY_SIZES",
    "PPOConfig",
    "PPOLagConfig",
    "VEC_ENVS",
    "merge_config_layers",
    "task_defaults",
]

SelfConfig = TypeVar("SelfConfig", bound="PPOConfig")

#: How each constraint's cost advantage is normalised over the batch before the mix.
COST_ADVANTAGE_NORMS: tuple[str, ...] = ("standardize", "center", "none")

_ACTIVATIONS: tuple[str, ...] = ("tanh", "relu")

#: Values of ``PPOConfig.vec_env``.
VEC_ENVS: tuple[str, ...] = ("auto", "batched", "dummy")

#: ``n_envs``, ``n_steps`` and ``batch_size`` where a task runs on its batched twin: 256 x 16
#: = 4096 env steps per rollout, as 8 x 512 on a DummyVecEnv, in minibatches of 1024 (20
#: Adam steps per rollout at 5 epochs, where minibatches of 256 made 80). One policy
#: forward pass then serves 256 envs and a minibatch update of 1024 samples costs about
#: what one of 256 did, so the gridworld's baselines train at about 50k env steps per CPU
#: second instead of 10k (``make bench``: results/bench/training.csv). Episodes longer
#: than a rollout's 16 steps are bootstrapped by the critics at its end.
BATCHED_SIZES: dict[str, int] = {"n_envs": 256, "n_steps": 16, "batch_size": 1024}

#: The same where the env copies are single envs in SB3's ``DummyVecEnv`` (one Python step
#: each, or one worker process each for the Safety bridge): the former defaults.
DUMMY_SIZES: dict[str, int] = {"n_envs": 8, "n_steps": 512, "batch_size": 256}

_SIZE_FIELDS: tuple[str, ...] = ("n_envs", "n_steps", "batch_size")

def task_defaults(env_id: str) -> dict[str, Any]:
    """The options every baseline takes on ``env_id``, over its own row of ``BASELINES`` and
    under the user's options: its family's and its own ``sb3`` rows (``TaskInfo.algo_defaults``;
    the gridworld's ``gamma = 1`` and why: ``constrained_grpo.envs.gridworld.tasks``)."""
    from constrained_grpo.tasks import task_info

    out: dict[str, Any] = {}
    for row in task_info(env_id).algo_defaults("sb3"):
        out.update(row)
    return out


def _refuse_flat_multiplier(layer: Mapping[str, Any]) -> Mapping[str, Any]:
    """``layer``, after refusing a flat ``multiplier_<field>`` key with the nested spelling."""
    flat = sorted(k for k in layer if k.startswith("multiplier_"))
    if flat:
        k = flat[0]
        raise ValueError(
            f"{k}={layer[k]!r}: multiplier options are nested; write multiplier={{{k[len('multiplier_'):]!r}: {layer[k]!r}}}"
        )
    return layer


def merge_config_layers(*layers: Mapping[str, Any]) -> dict[str, Any]:
    """:func:`constrained_grpo.options.merge_options` of the layers (a table row, the task's
    defaults, the user's options; the multiplier merged field by field), with a flat
    ``multiplier_<field>`` key refused."""
    return merge_options(*(_refuse_flat_multiplier(layer) for layer in layers))


@dataclass(frozen=True)
class PPOConfig(DeployOptions):
    """PPO (Schulman et al. 2017) as implemented by stable-baselines3 2.9.2."""

    # --- rollouts -------------------------------------------------------------
    n_envs: int | None = None
    """Env copies stepped together; one rollout is ``n_envs * n_steps`` env steps.
    None: :data:`BATCHED_SIZES` or :data:`DUMMY_SIZES`, by the ``vec_env`` a task gets
    (:meth:`resolved`)."""
    n_steps: int | None = None
    """Steps per env copy and rollout (SB3 ``n_steps``); None: by ``vec_env``, as ``n_envs``."""
    vec_env: str = "auto"
    """How the env copies are stepped: ``batched`` (the task's own vector env from
    ``make_vec_env``, e.g. the gridworld's numpy twin, through
    :class:`~constrained_grpo.baselines.vec_env.GymVectorVecEnv`), ``dummy`` (SB3's
    ``DummyVecEnv`` of single envs, one Python step each) or ``auto`` (``batched`` when the
    task registers a batched twin, else ``dummy``). Both give the same episodes for the
    same seeds and actions."""
    env_kwargs: Mapping[str, Any] = field(default_factory=dict)
    """Task options passed to ``gymnasium.make`` (Contract 1: constructor keywords)."""

    # --- optimisation (SB3 PPO) -------------------------------------------------
    learning_rate: float = 3e-4
    """Adam step size of actor and critics."""
    n_epochs: int = 5
    """Passes over each rollout."""
    batch_size: int | None = None
    """Minibatch size; None: by ``vec_env``, as ``n_envs``."""
    clip_range: float = 0.2
    """PPO's ratio clip epsilon."""
    max_grad_norm: float = 0.5
    """Gradient-norm clip."""
    target_kl: float | None = None
    """Stop a rollout's epochs early when the approximate KL exceeds 1.5x this (SB3)."""
    ent_coef: float = 0.01
    """Entropy bonus weight."""
    vf_coef: float = 0.5
    """Reward value loss weight."""

    # --- advantage ----------------------------------------------------------------
    gamma: float = 0.99
    """Reward discount."""
    gae_lambda: float = 0.95
    """GAE lambda (Schulman et al. 2016)."""
    time_limit_bootstrap: bool = True
    """Bootstrap an episode cut by the task's time limit with the critics' values of its
    last observation, ``r_T += gamma V(s_T)`` (SB3's treatment: the episode would go on).
    False where the time limit is part of the scored task (a finite-horizon task scored by
    ``sum_{t<T} r_t``): the cut is the episode's true end, its last target is its reward.
    With ``gamma = 1`` the bootstrap would make running out of time worth as much as
    reaching the goal (plain PPO then wanders until the limit on Grid/HazardFuel3x3-v0)."""
    normalize_advantage: bool = False
    """Standardize the reward advantage (SB3: per minibatch; PPO-Lagrangian: over the
    rollout, before the mix). Off by default: a constrained optimum mixes routes whose
    (Lagrangian) values are nearly equal, and standardizing those nearly-zero advantages
    blows their noise up to unit scale, which drives the policy to a deterministic route
    it never leaves (seen on Grid/HazardFuel-v0); raw advantages leave the entropy
    bonus in charge there."""

    # --- network and runtime -------------------------------------------------------
    net_arch: tuple[int, ...] = (64, 64)
    """Hidden sizes of the actor and of each critic (separate networks)."""
    activation: str = "tanh"
    """Hidden activation: ``tanh`` (SB3's default) or ``relu``."""
    torch_threads: int = 1
    """``torch.set_num_threads`` at construction (small MLPs gain nothing from more)."""
    device: str = "cpu"
    """Torch device; SB3 recommends the CPU for MLP policies."""

    def __post_init__(self) -> None:
        coerce_fields(self)
        for name in ("n_envs", "n_steps", "n_epochs", "batch_size", "torch_threads"):
            value = getattr(self, name)
            if value is None and name in _SIZE_FIELDS:
                continue
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{type(self).__name__}.{name}={value!r} must be an integer >= 1 (or None: the default)")
        if self.n_envs is not None and self.n_steps is not None and self.n_envs * self.n_steps < 2:
            raise ValueError("n_envs * n_steps must be >= 2 (SB3 normalises advantages over a batch)")
        for name in ("learning_rate", "clip_range", "max_grad_norm", "ent_coef", "vf_coef"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise ValueError(f"{type(self).__name__}.{name}={value!r} must be a finite number >= 0")
        for name in ("gamma", "gae_lambda"):
            value = getattr(self, name)
            if not 0 <= value <= 1:
                raise ValueError(f"{type(self).__name__}.{name}={value!r} must lie in [0, 1]")
        if self.vec_env not in VEC_ENVS:
            raise ValueError(f"vec_env={self.vec_env!r}; choose one of {list(VEC_ENVS)}")
        if self.activation not in _ACTIVATIONS:
            raise ValueError(f"activation={self.activation!r}; choose one of {list(_ACTIVATIONS)}")
        if not all(isinstance(h, int) and h >= 1 for h in self.net_arch):
            raise ValueError(f"net_arch={self.net_arch!r} must be positive layer sizes, e.g. (64, 64)")
        self.check_deploy_options()

    def resolved(self: SelfConfig, batched: bool) -> SelfConfig:
        """This config with ``n_envs``, ``n_steps`` and ``batch_size`` left at None set to
        :data:`BATCHED_SIZES` (``batched``) or :data:`DUMMY_SIZES`."""
        sizes = BATCHED_SIZES if batched else DUMMY_SIZES
        missing = {name: sizes[name] for name in _SIZE_FIELDS if getattr(self, name) is None}
        return replace(self, **missing) if missing else self

    @property
    def rollout_steps(self) -> int:
        """Env steps per rollout (= per iteration): ``n_envs * n_steps`` (of a resolved config)."""
        if self.n_envs is None or self.n_steps is None:
            raise ValueError("rollout_steps of an unresolved config: call config.resolved(batched) first")
        return self.n_envs * self.n_steps

    @classmethod
    def valid_options(cls) -> list[str]:
        """Every key ``from_dict`` accepts."""
        return option_names(cls)

    @classmethod
    def from_dict(cls: type[SelfConfig], data: Mapping[str, Any]) -> SelfConfig:
        """Build from keyword options; an unknown key is an error naming the valid ones.

        Options missing from ``data`` keep their defaults; a partial ``multiplier`` dict
        updates the default multiplier's options.
        """
        check_options(data, cls.valid_options(), hint=f" for {cls.__name__}")
        return with_options(cls(), cls._prepare(dict(data)))

    @classmethod
    def _prepare(cls, data: dict[str, Any]) -> dict[str, Any]:
        """Turn aliases and JSON nulls into field values."""
        if "env_kwargs" in data:
            data["env_kwargs"] = data["env_kwargs"] or {}
        return data

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict that ``from_dict`` turns back into an equal config."""
        out = asdict(self)
        out["net_arch"] = list(self.net_arch)
        out["env_kwargs"] = dict(self.env_kwargs)
        return out


def _default_multiplier() -> MultiplierConfig:
    # Dual ascent on the relative violation (J - d) / d: a step of 0.01 per unit of relative
    # violation suits raw advantages whose rewards are O(1) (tuned on Grid/HazardFuel-v0).
    return MultiplierConfig(rule="dual_ascent", lr=0.01, init=0.0, lambda_max=100.0, normalize=True)


@dataclass(frozen=True)
class PPOLagConfig(PPOConfig):
    """PPO-Lagrangian (Ray, Achiam & Amodei 2019; OmniSafe's ``PPOLag``).

    The actor's advantage is ``(A_r - sum_k lambda_k A_ck) / (1 + sum_k lambda_k)``
    with normalised ``A_r`` and ``A_ck``; one cost critic head per constraint; the
    multipliers step once per rollout on the mean episodic cost.
    """

    # --- cost critic and cost GAE ----------------------------------------------------
    cost_gamma: float | None = None
    """Cost discount for the cost GAE; None: ``gamma``."""
    cost_gae_lambda: float | None = None
    """Cost GAE lambda; None: ``gae_lambda``."""
    cost_vf_coef: float = 0.5
    """Cost value loss weight (mean over the K heads of the squared TD(lambda) error)."""
    cost_net_arch: tuple[int, ...] | None = (64,)
    """Hidden sizes of the cost critic (a separate MLP with K outputs); None: ``net_arch``.

    One hidden layer: a second (64, 64) critic doubles the critic's compute, which on the
    gridworld is most of what the cost machinery adds to a PPO step (``make bench``,
    ``baselines.csv``); with (64,) the cost critic still explains 0.93-0.94 of the
    variance of the cost returns over the last 20% of the acceptance runs, as (64, 64) did."""

    # --- the advantage mix ------------------------------------------------------------
    cost_advantage_norm: str = "center"
    """Per-constraint normalisation of ``A_ck`` over the rollout: ``center`` (OmniSafe:
    mean only, so lambda_k is in reward units per cost unit), ``standardize`` (zero mean,
    unit std, 0 where the std is 0: lambda_k unit-free, as in the Constrained GRPO
    paper's ScAdv; pair it with ``normalize_advantage``) or ``none``."""

    # --- Lagrange multipliers ------------------------------------------------------------
    limits: Mapping[str, float] | tuple[float, ...] | None = None
    """Override the task's limits d_k: ``{name: limit}`` or one per constraint."""
    multiplier: MultiplierConfig = field(default_factory=_default_multiplier)
    """Update rule of the multipliers (see ``MultiplierConfig``): a dict updates the
    default field by field."""
    cost_window: int = 100
    """Episodes kept for the cost estimate when a rollout completes none."""
    policy_optimism: float = 0.0
    """beta of the optimistic policy step on the actor (ReLOAD, arXiv 2302.01275):
    ``theta <- theta + beta (Delta_t - Delta_{t-1})`` after each rollout's update
    (:mod:`constrained_grpo.optimism`); pair it with ``multiplier={"optimistic": True}``.
    PPO-Lagrangian's update only; 0: off."""
    augmented_weights: str = "before-step"
    """When the augmented Lagrangian's weights ``max(0, lambda + rho e)`` are taken against the
    rollout's multiplier step: ``before-step`` (the method's definition: penalty rho) or
    ``after-step`` (``lambda_t + (rho + eta) e``: how ``ppo-lag-al`` ran before it was fixed,
    kept to reproduce those runs). Other rules ignore it."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.augmented_weights not in ("before-step", "after-step"):
            raise ValueError(f"augmented_weights={self.augmented_weights!r}; choose 'before-step' or 'after-step'")
        for name in ("cost_gamma", "cost_gae_lambda"):
            value = getattr(self, name)
            if value is not None and not 0 <= value <= 1:
                raise ValueError(f"{name}={value!r} must lie in [0, 1] (or None to reuse the reward's)")
        if not (math.isfinite(self.cost_vf_coef) and self.cost_vf_coef >= 0):
            raise ValueError(f"cost_vf_coef={self.cost_vf_coef!r} must be a finite number >= 0")
        if self.cost_advantage_norm not in COST_ADVANTAGE_NORMS:
            raise ValueError(
                f"cost_advantage_norm={self.cost_advantage_norm!r}; choose one of {list(COST_ADVANTAGE_NORMS)}"
            )
        if not isinstance(self.multiplier, MultiplierConfig):
            raise TypeError(f"multiplier must be a MultiplierConfig, got {type(self.multiplier).__name__}")
        if not isinstance(self.cost_window, int) or self.cost_window < 1:
            raise ValueError(f"cost_window={self.cost_window!r} must be an integer >= 1")
        if not (math.isfinite(self.policy_optimism) and self.policy_optimism >= 0):
            raise ValueError(f"policy_optimism={self.policy_optimism!r} must be finite and >= 0 (1: optimistic gradient ascent)")

    @classmethod
    def _prepare(cls, data: dict[str, Any]) -> dict[str, Any]:
        # The multiplier dict is merged into the default multiplier by from_dict.
        return merge_config_layers(super()._prepare(data))

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        out["multiplier"] = asdict(self.multiplier)
        out["cost_net_arch"] = None if self.cost_net_arch is None else list(self.cost_net_arch)
        if self.limits is not None:
            out["limits"] = dict(self.limits) if isinstance(self.limits, Mapping) else list(self.limits)
        return out
