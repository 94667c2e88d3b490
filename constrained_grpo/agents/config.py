"""The Constrained GRPO config: one typed dataclass, one docstring per field, named presets.

A config is built once and never mutated: ``make_config("standard", lr=1e-3)`` starts
from a preset and applies overrides; a misspelled option is an error that names the
valid options. Derived values are properties.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from constrained_grpo.agents.advantages import AGGREGATORS, ESTIMATORS, MDP_DEFAULTS, AdvantageSpec
from constrained_grpo.agents.final_policy import LEGACY_DEPLOY_KEYS
from constrained_grpo.deploy import DeployOptions
from constrained_grpo.agents.losses import LOSS_AGGREGATIONS
from constrained_grpo.constraints import validate_limit
from constrained_grpo.multipliers import MultiplierConfig
from constrained_grpo.options import coerce_fields, option_names, with_options

__all__ = ["ACTIVATIONS", "GRPOConfig", "PRESETS", "make_config"]

ACTIVATIONS: tuple[str, ...] = ("tanh", "relu")


@dataclass(frozen=True)
class GRPOConfig(DeployOptions):
    """Everything a Constrained GRPO run needs besides the task id and the seed."""

    # --- rollout: groups ------------------------------------------------------------
    num_groups: int = 16
    """P, starts per iteration: reset seeds for control, prompts for text (DeepSeekMath 2024)."""
    group_size: int = 16
    """G, samples per start; the group statistics need G >= 2 (DeepSeekMath 2024)."""
    max_episode_steps: int = 1000
    """Cap on the steps of one rollout episode, for tasks without a time limit of their own."""

    # --- advantages -----------------------------------------------------------------
    aggregator: str = "scadv"
    """How reward and costs become one advantage: ``scadv`` (Constrained GRPO, arXiv
    2602.05863), ``screw`` (reward scalarization, the standard practice), ``gdpo`` (arXiv
    2601.05242), ``dara`` (DARA density weights), ``corr`` (CorrGRPO's correlation
    denominator, arXiv 2609.36820), ``mdp`` (MDP-GRPO's dual-anchor prospect advantage, arXiv
    2606.06058) or ``reward`` (unconstrained GRPO)."""
    estimator: str = "zscore"
    """Group estimator: ``zscore`` (GRPO, DeepSeekMath), ``mean`` (Dr. GRPO), ``batch_std``
    (TRL ``scale_rewards="batch"``), ``softmax`` (SoftmaxGRPO, arXiv 2608.09271), ``maxrl``
    (MaxRL, arXiv 2602.02710; a component that goes below 0 in a batch is first shifted by
    its batch minimum, see :func:`~constrained_grpo.agents.advantages.maxrl`), ``is``
    (IS-GRPO: the expected update of z-scores on starts drawn in proportion to their group
    std, ``(x - mean) / mean_p std_p``; :func:`~constrained_grpo.agents.advantages.is_grpo`).
    GDPO, DARA, CorrGRPO and MDP-GRPO have their own normalization and ignore it."""
    scadv_normalize: bool = False
    """ScAdv only: divide the advantage by ``1 + sum_k lambda_k`` (as PPO-Lagrangian, Ray et
    al. 2019), which keeps its scale bounded as multipliers grow (arXiv 2602.05863)."""
    reward_weight: float = 1.0
    """lambda_R, the weight of the reward component (arXiv 2602.05863)."""
    adv_eps: float = 0.0
    """Added to every std that divides an advantage (TRL uses 1e-4): the group std of
    ``zscore``, the batch std of ``batch_std``, and for GDPO and DARA both the
    per-component group std and the final batch-normalization std (MaxRL adds it to its
    group mean; ``mean`` and ``softmax`` ignore it). Zero-std groups give 0 regardless."""
    softmax_tau: float = 1.0
    """Temperature tau of SoftmaxGRPO's ``G softmax(x / tau) - 1`` (arXiv 2608.09271)."""
    dara_symmetric: bool = True
    """DARA: symmetric ``sum w_j u_j`` (True) or asymmetric ``sum w_j u_j+ + u_j-`` (False)."""
    dara_max_weight: float = 5.0
    """DARA: cap on the density weight ``sqrt(max pi / pi_j)``."""
    # MDP-GRPO's knobs are null by default, standing for the release's values
    # (advantages.MDP_DEFAULTS): a run recorded before they existed resolves as it was.
    mdp_alpha: float | None = None
    """MDP-GRPO: weight alpha of the goal anchor in ``(1 - alpha) PT(z) + alpha PT(delta)``
    (arXiv 2606.06058); None: 0.2, the release's ``full_pipeline.sh``."""
    prospect_beta: float | None = None
    """MDP-GRPO: slope beta of the prospect shaping ``lambda tanh(beta v)``; None: 0.8 (``train.py``)."""
    prospect_lambda_pos: float | None = None
    """MDP-GRPO: bound lambda_+ of the shaped gain; None: 1.25 (the release's ``train.py``)."""
    prospect_lambda_neg: float | None = None
    """MDP-GRPO: bound lambda_- of the shaped loss, above lambda_+ for loss aversion; None: 1.8 (``train.py``)."""

    # --- constraints ----------------------------------------------------------------
    limits: tuple[float, ...] | Mapping[str, float] | None = None
    """Override of the task's limits d_k: one per constraint in order, or ``{name: limit}``
    (Contract 1). None keeps the task's limits."""
    multiplier: MultiplierConfig = field(default_factory=MultiplierConfig)
    """Lagrange multiplier rule and step (``constrained_grpo.multipliers``): projected dual
    ascent (MASA, FSRL), log-SGD (safe-rlhf), Adam (OmniSafe) or PID (Stooke et al. 2020)."""

    # --- policy loss ----------------------------------------------------------------
    clip_eps_low: float = 0.2
    """Lower clip ``1 - eps_low`` of the ratio (PPO, Schulman et al. 2017)."""
    clip_eps_high: float = 0.2
    """Upper clip ``1 + eps_high``; larger than ``eps_low`` is DAPO's clip-higher."""
    ratio_level: str = "step"
    """``step``: per-step (per-token) ratios (PPO/GRPO); ``sequence``: one length-normalized
    ratio per sample (GSPO)."""
    loss_agg: str = "token"
    """Averaging of per-step terms: ``token`` (DAPO), ``sequence`` (GRPO), ``sum`` (Dr. GRPO)."""
    closed_form: bool = True
    """A linear softmax policy (``hidden_sizes=()``, the gridworld standard) rolls out in numpy
    and takes its policy step in closed form: the gradient of :func:`~constrained_grpo.agents.
    losses.policy_loss` written out (:func:`~constrained_grpo.agents.losses.linear_categorical_grads`)
    with its own Adam step, equal to the autograd path to float32 round-off (tested). ``False``
    runs the readable path (``policy_loss``, ``loss.backward()``, ``torch.optim.Adam``) on any policy."""
    neg_adv_veto: bool = False
    """Mu-GRPO's negative-advantage veto (arXiv 2605.17570): for A < 0, drop the steps after
    the first step whose ratio leaves the trust region."""
    kl_coef: float = 0.0
    """beta of the k3 KL penalty to a frozen reference policy (DeepSeekMath 2024); 0 = off."""
    kl_coef_neg: float | None = None
    """MDP-GRPO's asymmetric KL (arXiv 2606.06058): the KL coefficient on samples whose advantage
    is negative, ``kl_coef`` staying on the others (the release: 0.025 against 0.01). None: one
    coefficient. A language model's reference policy is where it matters; control tasks accept it."""
    ref_update_every: int = 0
    """Copy the policy into the reference every this many iterations; 0 keeps the initial
    policy as the reference for the whole run (DeepSeekMath's iterative GRPO refreshes it)."""
    entropy_coef: float = 0.0
    """Coefficient of the entropy bonus (PPO, Schulman et al. 2017)."""

    # --- optimisation (stale data) --------------------------------------------------
    lr: float = 3e-3
    """Adam learning rate of the policy."""
    epochs: int = 2
    """Optimisation passes over each batch (PPO); > 1 reuses stale data. Mu-GRPO uses a few
    large generation stages with many passes each (arXiv 2605.17570)."""
    minibatches: int = 4
    """Minibatches per pass; samples (whole episodes/completions) are split among them."""
    max_grad_norm: float = 0.5
    """Gradient-norm clip of the policy update (PPO)."""
    policy_optimism: float = 0.0
    """beta of the optimistic policy step: after the iteration's update ``Delta_t`` of the
    parameters, ``theta <- theta + beta (Delta_t - Delta_{t-1})``; ``beta = 1`` is
    optimistic gradient ascent (ReLOAD, arXiv 2302.01275), to pair with an optimistic
    multiplier (``multiplier={"optimistic": True}``). 0: off."""

    # --- policy network -------------------------------------------------------------
    hidden_sizes: tuple[int, ...] = (64, 64)
    """Hidden layer widths of the MLP policy (control tasks; CleanRL's PPO); ``()`` gives a
    linear policy, which on a one-hot observation is a tabular one."""
    activation: str = "tanh"
    """Hidden activation of the MLP policy: ``tanh`` or ``relu``."""
    init_log_std: float = -0.5
    """Initial log standard deviation of the Gaussian policy (continuous actions)."""

    # --- system ---------------------------------------------------------------------
    num_threads: int = 1
    """torch intra-op threads; small MLPs are fastest single-threaded. 0 leaves torch's default."""
    eval_seed: int = 1_000_000
    """First reset seed of ``evaluate``, far from the training seeds."""
    env_kwargs: Mapping[str, Any] = field(default_factory=dict)
    """Keywords passed to ``gymnasium.make`` for the task (Contract 1: task options)."""

    def __post_init__(self) -> None:
        coerce_fields(self)
        self._validate()

    def _validate(self) -> None:
        for name in ("num_groups", "epochs", "minibatches", "max_episode_steps"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}={value!r} must be an integer >= 1")
        if not isinstance(self.group_size, int) or self.group_size < 2:
            raise ValueError(
                f"group_size={self.group_size!r}: GRPO needs at least 2 samples per group to "
                "estimate a group mean and std; set group_size >= 2 (8-16 is typical)"
            )
        if self.aggregator not in AGGREGATORS:
            raise ValueError(f"unknown aggregator {self.aggregator!r}; choose one of {list(AGGREGATORS)}")
        if self.estimator not in ESTIMATORS:
            raise ValueError(f"unknown estimator {self.estimator!r}; choose one of {sorted(ESTIMATORS)}")
        if self.loss_agg not in LOSS_AGGREGATIONS:
            raise ValueError(f"unknown loss_agg {self.loss_agg!r}; choose one of {list(LOSS_AGGREGATIONS)}")
        if self.ratio_level not in ("step", "sequence"):
            raise ValueError(f"unknown ratio_level {self.ratio_level!r}; choose 'step' or 'sequence'")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation {self.activation!r}; choose one of {list(ACTIVATIONS)}")
        if self.minibatches > self.num_samples:
            raise ValueError(
                f"minibatches={self.minibatches} exceeds the {self.num_samples} samples of a batch "
                f"(num_groups x group_size); lower minibatches"
            )
        for name in ("clip_eps_low", "clip_eps_high"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name}={value!r} must be > 0")
        if self.clip_eps_low >= 1:
            raise ValueError(f"clip_eps_low={self.clip_eps_low!r} must be < 1 (the ratio is positive)")
        if self.mdp_alpha is not None and not (math.isfinite(self.mdp_alpha) and 0 <= self.mdp_alpha <= 1):
            raise ValueError(f"mdp_alpha={self.mdp_alpha!r} must be in [0, 1] (the goal anchor's share), or null")
        for name in ("prospect_beta", "prospect_lambda_pos", "prospect_lambda_neg"):
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name}={value!r} must be finite and > 0, or null (the release's value)")
        for name in ("lr", "softmax_tau", "dara_max_weight"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name}={value!r} must be finite and > 0")
        for name in ("kl_coef", "entropy_coef", "adv_eps", "max_grad_norm", "reward_weight", "policy_optimism"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name}={value!r} must be finite and >= 0")
        if self.kl_coef_neg is not None and not (math.isfinite(self.kl_coef_neg) and self.kl_coef_neg >= 0):
            raise ValueError(
                f"kl_coef_neg={self.kl_coef_neg!r} must be finite and >= 0 (or null: kl_coef for every sample)"
            )
        self.check_deploy_options()
        if self.ref_update_every < 0 or self.num_threads < 0:
            raise ValueError("ref_update_every and num_threads must be >= 0")
        if any(not isinstance(h, int) or h < 1 for h in self.hidden_sizes):
            raise ValueError(f"hidden_sizes={self.hidden_sizes!r} must be positive integers (empty: a linear policy)")
        if self.limits is not None:
            items = self.limits.items() if isinstance(self.limits, Mapping) else enumerate(self.limits)
            for key, value in items:
                validate_limit(str(key), value)

    # --- derived values -------------------------------------------------------------
    @property
    def constrained(self) -> bool:
        """Whether the agent uses the costs (any aggregator but ``reward``)."""
        return self.aggregator != "reward"

    @property
    def num_samples(self) -> int:
        """Samples per iteration, ``P * G``."""
        return self.num_groups * self.group_size

    @property
    def advantage_spec(self) -> AdvantageSpec:
        """The advantage knobs for :func:`constrained_grpo.agents.advantages.compute_advantages`."""
        return AdvantageSpec(
            aggregator=self.aggregator,
            estimator=self.estimator,
            normalize=self.scadv_normalize,
            reward_weight=self.reward_weight,
            eps=self.adv_eps,
            tau=self.softmax_tau,
            dara_symmetric=self.dara_symmetric,
            dara_max_weight=self.dara_max_weight,
            **{
                name: MDP_DEFAULTS[name] if getattr(self, name) is None else getattr(self, name)
                for name in MDP_DEFAULTS
            },
        )

    # --- (de)serialisation ----------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict (tuples become lists)."""
        data = asdict(self)
        data["limits"] = dict(self.limits) if isinstance(self.limits, Mapping) else (
            list(self.limits) if self.limits is not None else None
        )
        data["hidden_sizes"] = list(self.hidden_sizes)
        return data

    @classmethod
    def valid_options(cls) -> list[str]:
        return option_names(cls)

    def updated(self, overrides: Mapping[str, Any]) -> "GRPOConfig":
        """A copy with ``overrides`` applied; ``multiplier`` given as a dict is merged into
        the current multiplier config. Unknown options are an error naming the valid ones."""
        # Runs recorded before the option was named ``deploy`` say ``final_policy``.
        overrides = {LEGACY_DEPLOY_KEYS.get(k, k): v for k, v in overrides.items()}
        return with_options(self, overrides, "GRPO", hint=" (multiplier options go in multiplier={...})")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "GRPOConfig":
        """Build from a full or partial dict (e.g. a saved ``config.json``)."""
        return cls().updated(data)


#: Named presets (Python values; the CLI exposes them by name).
PRESETS: dict[str, GRPOConfig] = {
    # Seconds: unit tests and smoke runs.
    "quick": GRPOConfig(num_groups=8, group_size=8, epochs=2, minibatches=2, hidden_sizes=(32, 32)),
    # The tuned default: the HazardFuel acceptance runs use it.
    "standard": GRPOConfig(),
    # Larger groups and batches, slower but less noisy multiplier estimates.
    "paper": GRPOConfig(num_groups=32, group_size=16, epochs=2, minibatches=8),
}


def make_config(preset: str = "standard", **overrides: Any) -> GRPOConfig:
    """The preset ``preset`` with ``overrides`` applied (unknown names are errors)."""
    try:
        base = PRESETS[preset]
    except KeyError:
        raise ValueError(f"unknown preset {preset!r}; choose one of {sorted(PRESETS)}") from None
    return base.updated(overrides)
