"""One GRPO trainer loop for every task family.

A family supplies a :class:`RolloutAdapter`: it samples ``P x G`` episodes (or
completions) with the current policy and can re-evaluate their log-probabilities. The
trainer knows nothing else about the task. One iteration:

1. rollout:    batch = adapter.collect(policy, P, G); x = batch.components  [P, G, 1+K]
2. advantages: A = aggregate(x, lambda)  [P, G]; effective weights w  [1+K]
3. update:     ``epochs`` passes of ``minibatches`` steps on
               pg_loss_clipped(A) + kl_coef KL(pi || pi_ref) - entropy_coef H
4. multipliers: lambda <- rule(lambda, Jhat),  Jhat_k = mean_i C_ik   (batch estimate)
5. log(record)
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch
from torch import nn

from constrained_grpo.agents.advantages import compute_advantages, effective_weights
from constrained_grpo.agents.config import GRPOConfig
from constrained_grpo.agents.losses import policy_loss
from constrained_grpo.multipliers import Multiplier, make_multiplier

__all__ = [
    "GRPOTrainer",
    "NonFiniteError",
    "NonFiniteObservationError",
    "NonFiniteRolloutError",
    "NonFiniteUpdateError",
    "RolloutAdapter",
    "RolloutBatch",
    "check_finite_components",
    "check_finite_observations",
    "check_finite_parameters",
]

LogFn = Callable[[dict[str, Any]], None]


class NonFiniteError(FloatingPointError):
    """A NaN or infinite value reached training: the run stops instead of going on corrupted."""


class NonFiniteRolloutError(NonFiniteError):
    """A reward or cost of a rollout is NaN or infinite."""


class NonFiniteObservationError(NonFiniteRolloutError):
    """An observation the task returned is NaN or infinite."""


class NonFiniteUpdateError(NonFiniteError):
    """A loss, gradient or parameter of the policy update is NaN or infinite."""


def check_finite_observations(obs: np.ndarray, where: str) -> None:
    """Raise :class:`NonFiniteObservationError` if ``obs`` (a batch, one row per env) holds a NaN/inf.

    A NaN observation makes NaN logits, whose argmax is always action 0, and NaN gradients
    that turn every weight NaN while reward and cost stay finite: caught here, at the source.
    """
    finite = np.isfinite(obs)
    if finite.all():
        return
    rows = np.flatnonzero(~finite.reshape(len(obs), -1).all(axis=1))
    raise NonFiniteObservationError(
        f"{where}: non-finite observation from env(s) {rows[:8].tolist()} "
        f"({int((~finite).sum())} NaN/inf value(s)); training stopped "
        "(every earlier iteration was logged). Check the task's observation for NaN or inf."
    )


def check_finite_parameters(module: nn.Module, where: str) -> None:
    """Raise :class:`NonFiniteUpdateError` naming the first parameter of ``module`` holding a NaN/inf."""
    for name, param in module.named_parameters():
        if not bool(torch.isfinite(param).all()):
            raise NonFiniteUpdateError(
                f"{where}: parameter {name!r} became NaN or infinite; training stopped "
                "(every earlier iteration was logged). Lower the learning rate or check the task's values."
            )


@dataclass
class RolloutBatch:
    """What an adapter returns for ``P x G`` samples (sample ``n = p * G + i``).

    Attributes:
        components: ``[P, G, 1+K]`` float64: return and episodic costs per sample.
        logp_old: ``[N, T]`` log-probabilities of the sampled steps under the sampling policy.
        mask: ``[N, T]`` bool, True on the steps that belong to the sample.
        env_steps: environment steps (or generated tokens) this batch consumed.
        lengths: ``(N,)`` steps per sample.
        data: adapter-specific payload (observations and actions; token ids), opaque to
            the trainer and handed back to ``adapter.log_probs``.
    """

    components: np.ndarray
    logp_old: torch.Tensor
    mask: torch.Tensor
    env_steps: int
    lengths: np.ndarray
    data: Any = None
    info: dict[str, float] = field(default_factory=dict)


@runtime_checkable
class RolloutAdapter(Protocol):
    """A task family's side of the trainer."""

    constraint_names: tuple[str, ...]
    limits: np.ndarray

    def collect(self, policy: nn.Module, num_groups: int, group_size: int) -> RolloutBatch:
        """Sample ``group_size`` episodes from each of ``num_groups`` fresh starts."""

    def log_probs(
        self, policy: nn.Module, batch: RolloutBatch, index: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(logp, entropy)``, each ``[n, T]``, of samples ``index`` of ``batch`` under ``policy``."""


def check_finite_components(components: np.ndarray, iteration: int, names: Sequence[str]) -> None:
    """Raise :class:`NonFiniteRolloutError` naming the iteration and component of a NaN/inf."""
    bad = ~np.isfinite(components)
    if not bad.any():
        return
    per_component = bad.reshape(-1, components.shape[-1]).sum(axis=0)
    labels = ["reward", *names]
    which = [f"{labels[j]} ({int(n)} of {bad[..., j].size} samples)" for j, n in enumerate(per_component) if n]
    raise NonFiniteRolloutError(
        f"iteration {iteration}: non-finite episodic {', '.join(which)}; training stopped "
        "(every earlier iteration was logged). Check the task's reward/cost for NaN or inf."
    )


class GRPOTrainer:
    """The GRPO loop over a :class:`RolloutAdapter`; holds policy, optimiser and multipliers."""

    def __init__(
        self,
        config: GRPOConfig,
        adapter: RolloutAdapter,
        policy: nn.Module,
        generator: torch.Generator | None = None,
    ):
        self.config = config
        # Minibatch shuffling draws from its own stream, so a seed fixes the whole run.
        self.generator = generator if generator is not None else torch.Generator().manual_seed(0)
        self.adapter = adapter
        self.policy = policy
        self.optimizer = torch.optim.Adam(policy.parameters(), lr=config.lr)
        self.names: tuple[str, ...] = tuple(adapter.constraint_names)
        self.multiplier: Multiplier | None = (
            make_multiplier(adapter.limits, config.multiplier) if config.constrained else None
        )
        self.reference: nn.Module | None = self._frozen_copy() if config.kl_coef > 0 else None
        self.iteration = 0
        self.env_steps = 0
        self.wall_s = 0.0  # training time accumulated over every learn() call

    def _frozen_copy(self) -> nn.Module:
        ref = copy.deepcopy(self.policy)
        ref.requires_grad_(False)
        return ref

    @property
    def lambdas(self) -> np.ndarray:
        """Current multipliers ``(K,)`` (zeros for an unconstrained agent)."""
        if self.multiplier is None:
            return np.zeros(len(self.names))
        return self.multiplier.values.copy()

    # --- one iteration --------------------------------------------------------------
    def step(self) -> dict[str, Any]:
        """Run one iteration (rollout, advantages, update, multipliers); return its record."""
        cfg = self.config
        self.iteration += 1
        t0 = time.perf_counter()

        with torch.no_grad():
            try:
                batch = self.adapter.collect(self.policy, cfg.num_groups, cfg.group_size)
            except NonFiniteObservationError as err:
                raise NonFiniteObservationError(f"iteration {self.iteration}: {err}") from None
        t_rollout = time.perf_counter()
        x = batch.components
        check_finite_components(x, self.iteration, self.names)

        lambdas_used = self.lambdas
        adv = compute_advantages(x, lambdas_used, cfg.advantage_spec)  # [P, G]
        eff_w = effective_weights(x, lambdas_used, cfg.advantage_spec)  # [1+K]
        t_adv = time.perf_counter()

        losses = self._update(batch, torch.as_tensor(adv.reshape(-1), dtype=torch.float32))
        check_finite_parameters(self.policy, f"iteration {self.iteration}")
        t_update = time.perf_counter()

        mean_costs = x[..., 1:].reshape(-1, len(self.names)).mean(axis=0)
        if self.multiplier is not None:
            self.multiplier.update(mean_costs)
        if self.reference is not None and cfg.ref_update_every and self.iteration % cfg.ref_update_every == 0:
            self.reference = self._frozen_copy()
        t_end = time.perf_counter()

        self.env_steps += int(batch.env_steps)
        self.wall_s += t_end - t0
        record: dict[str, Any] = {
            "iteration": self.iteration,
            "env_steps": self.env_steps,
            "wall_s": self.wall_s,
            "ep_return": float(x[..., 0].mean()),
            "ep_cost": [float(c) for c in mean_costs],
            "multipliers": [] if self.multiplier is None else [float(v) for v in self.multiplier.values],
            "multipliers_used": [] if self.multiplier is None else [float(v) for v in lambdas_used],
            "ep_length": float(np.mean(batch.lengths)),
            "adv_abs_mean": float(np.abs(adv).mean()),
            "eff_w_reward": float(eff_w[0]),
            **{f"eff_w_{name}": float(w) for name, w in zip(self.names, eff_w[1:])},
            **losses,
            "rollout_s": t_rollout - t0,
            "advantage_s": t_adv - t_rollout,
            "backward_s": t_update - t_adv,
            "iteration_s": t_end - t0,
            **batch.info,
        }
        return record

    def _update(self, batch: RolloutBatch, adv: torch.Tensor) -> dict[str, float]:
        """``epochs`` passes of ``minibatches`` Adam steps on the policy loss; mean diagnostics."""
        cfg = self.config
        n = adv.shape[0]
        sums: dict[str, float] = {}
        count = 0
        grad_norms: list[float] = []
        for _ in range(cfg.epochs):
            perm = torch.randperm(n, generator=self.generator)
            for index in torch.chunk(perm, cfg.minibatches):
                logp, entropy = self.adapter.log_probs(self.policy, batch, index)
                logp_ref = None
                if self.reference is not None:
                    with torch.no_grad():
                        logp_ref, _ = self.adapter.log_probs(self.reference, batch, index)
                terms = policy_loss(
                    logp,
                    batch.logp_old.index_select(0, index),
                    adv.index_select(0, index),
                    batch.mask.index_select(0, index),
                    entropy,
                    logp_ref,
                    eps_low=cfg.clip_eps_low,
                    eps_high=cfg.clip_eps_high,
                    ratio_level=cfg.ratio_level,
                    agg=cfg.loss_agg,
                    veto=cfg.neg_adv_veto,
                    kl_coef=cfg.kl_coef,
                    entropy_coef=cfg.entropy_coef,
                )
                if not bool(torch.isfinite(terms.loss)):
                    raise NonFiniteUpdateError(
                        f"iteration {self.iteration}: non-finite loss {float(terms.loss.detach())} (policy-gradient "
                        f"{float(terms.pg_loss.detach())}, KL {float(terms.kl.detach())}, entropy "
                        f"{float(terms.entropy.detach())}); training "
                        "stopped before the step (every earlier iteration was logged)"
                    )
                self.optimizer.zero_grad(set_to_none=True)
                terms.loss.backward()
                grad_norm = nn.utils.clip_grad_norm_(
                    self.policy.parameters(), cfg.max_grad_norm if cfg.max_grad_norm > 0 else math.inf
                )
                if not math.isfinite(float(grad_norm)):
                    raise NonFiniteUpdateError(
                        f"iteration {self.iteration}: non-finite gradient norm {float(grad_norm)}; training "
                        "stopped before the step (every earlier iteration was logged)"
                    )
                self.optimizer.step()
                grad_norms.append(float(grad_norm))
                for key in ("loss", "pg_loss", "kl", "entropy", "clip_frac", "approx_kl", "veto_frac"):
                    sums[key] = sums.get(key, 0.0) + float(getattr(terms, key).detach())
                count += 1
        out = {key: value / count for key, value in sums.items()}
        out["grad_norm"] = float(np.mean(grad_norms))
        return out

    # --- the loop ---------------------------------------------------------------------
    def train(self, total_env_steps: int, log: LogFn | None = None) -> list[dict[str, Any]]:
        """Iterate until ``total_env_steps`` more env steps were used; ``log`` every record.

        A non-finite observation, reward or cost raises :class:`NonFiniteRolloutError` (an
        observation: its subclass :class:`NonFiniteObservationError`), a non-finite loss,
        gradient or parameter :class:`NonFiniteUpdateError`, after every earlier iteration
        has been passed to ``log``.
        """
        if total_env_steps < 1:
            raise ValueError(f"total_env_steps={total_env_steps!r} must be >= 1")
        target = self.env_steps + int(total_env_steps)
        records: list[dict[str, Any]] = []
        while self.env_steps < target:
            record = self.step()
            records.append(record)
            if log is not None:
                log(record)
        return records

    # --- persistence ------------------------------------------------------------------
    def optimizer_tensors(self) -> dict[str, torch.Tensor]:
        """Adam's moment tensors, flat-keyed for safetensors (``optim.<param>.<name>``)."""
        tensors: dict[str, torch.Tensor] = {}
        for idx, state in self.optimizer.state_dict()["state"].items():
            for key, value in state.items():
                if torch.is_tensor(value):
                    tensors[f"optim.{idx}.{key}"] = value.detach().clone().reshape(value.shape or (1,))
        return tensors

    def load_optimizer_tensors(self, tensors: dict[str, torch.Tensor]) -> None:
        """Inverse of :meth:`optimizer_tensors` (missing state: Adam starts fresh)."""
        state_dict = self.optimizer.state_dict()
        state: dict[int, dict[str, torch.Tensor]] = {}
        for name, value in tensors.items():
            if not name.startswith("optim."):
                continue
            _, idx, key = name.split(".", 2)
            state.setdefault(int(idx), {})[key] = value.reshape(()) if key == "step" else value
        if state:
            state_dict["state"] = state
            self.optimizer.load_state_dict(state_dict)

    def state(self) -> dict[str, Any]:
        """JSON-safe trainer state: counters and multipliers."""
        return {
            "iteration": self.iteration,
            "env_steps": self.env_steps,
            "wall_s": self.wall_s,
            "multiplier": None if self.multiplier is None else self.multiplier.state_dict(),
        }

    def load_state(self, state: dict[str, Any]) -> None:
        """Inverse of :meth:`state`."""
        self.iteration = int(state["iteration"])
        self.env_steps = int(state["env_steps"])
        self.wall_s = float(state.get("wall_s", 0.0))
        if self.multiplier is not None and state.get("multiplier") is not None:
            self.multiplier.load_state_dict(state["multiplier"])
