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

Where the math runs: step 3 is :func:`~constrained_grpo.agents.losses.policy_loss`,
``loss.backward()`` and ``torch.optim.Adam`` (:meth:`GRPOTrainer._update`), except on a
linear softmax policy (``hidden_sizes=()``, the gridworlds' standard) with per-step ratios
and no veto, where :meth:`GRPOTrainer._update_linear` takes the same minibatches with the
gradient of that loss in closed form (:func:`~constrained_grpo.agents.losses.linear_categorical_grads`)
and its own Adam step: equal to the autograd path to float32 round-off
(``tests/agents/test_agent.py::test_linear_policy_fast_path_matches_the_autograd_path``), about
an order of magnitude faster. ``GRPOConfig.closed_form=False`` runs the readable path instead.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch
from torch import nn

from constrained_grpo.agents.advantages import compute_advantages, effective_weights
from constrained_grpo.agents.config import GRPOConfig
from constrained_grpo.agents.final_policy import FinalPolicyKeeper
from constrained_grpo.deploy import PlayFn
from constrained_grpo.agents.losses import linear_categorical_grads, linear_log_softmax, policy_loss
from constrained_grpo.multipliers import Multiplier, make_multiplier
from constrained_grpo.nonfinite import (  # the trainer's errors, importable from here too
    NonFiniteError,
    NonFiniteObservationError,
    NonFiniteRolloutError,
    NonFiniteUpdateError,
    check_finite_observations,
    check_finite_parameters,
    logged_note,
)
from constrained_grpo.optimism import OptimisticStep

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


def adam_step(
    param: np.ndarray,
    grad: np.ndarray,
    state: tuple[np.ndarray, np.ndarray, np.ndarray],
    lr: float,
    betas: tuple[float, float],
    eps: float,
) -> None:
    """One Adam step in place, as ``torch.optim.Adam`` (no weight decay, no amsgrad) takes it:
    ``m <- b1 m + (1 - b1) g``, ``v <- b2 v + (1 - b2) g^2``,
    ``p <- p - lr / (1 - b1^t) m / (sqrt(v) / sqrt(1 - b2^t) + eps)``."""
    step, exp_avg, exp_avg_sq = state
    step += 1
    t = float(step)
    beta1, beta2 = betas
    exp_avg += (grad - exp_avg) * (1.0 - beta1)
    exp_avg_sq *= beta2
    exp_avg_sq += (1.0 - beta2) * grad * grad
    denom = np.sqrt(exp_avg_sq) / math.sqrt(1.0 - beta2**t) + eps
    param -= (lr / (1.0 - beta1**t)) * exp_avg / denom


def check_finite_components(components: np.ndarray, iteration: int, names: Sequence[str]) -> None:
    """Raise :class:`NonFiniteRolloutError` naming the iteration and component of a NaN/inf."""
    bad = ~np.isfinite(components)
    if not bad.any():
        return
    per_component = bad.reshape(-1, components.shape[-1]).sum(axis=0)
    labels = ["reward", *names]
    which = [f"{labels[j]} ({int(n)} of {bad[..., j].size} samples)" for j, n in enumerate(per_component) if n]
    raise NonFiniteRolloutError(
        f"iteration {iteration}: non-finite episodic {', '.join(which)}; training stopped"
        f"{logged_note(iteration - 1)}. Check the task's reward/cost for NaN or inf."
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
        self.reference: nn.Module | None = self._frozen_copy() if config.kl_coef > 0 or config.kl_coef_neg else None
        self.optimism = OptimisticStep(config.policy_optimism)
        constraints = getattr(adapter, "constraints", None)
        self.final = FinalPolicyKeeper(
            config.deploy, np.asarray(adapter.limits, dtype=np.float64), config.deploy_snapshots, config.deploy_alpha,
            config.deploy_shortlist, config.deploy_validation_episodes,
            None if constraints is None else [bool(getattr(c, "indicator", False)) for c in constraints])
        #: How ``best-feasible``'s validation plays a snapshot (:data:`constrained_grpo.deploy.PlayFn`):
        #: set by the agent that can play its task's episodes; None skips the validation.
        self.validation_play: PlayFn | None = None
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
                raise NonFiniteObservationError(f"iteration {self.iteration}: {err}{logged_note(self.iteration - 1)}") from None
        t_rollout = time.perf_counter()
        x = batch.components
        check_finite_components(x, self.iteration, self.names)

        mean_costs = x[..., 1:].reshape(-1, len(self.names)).mean(axis=0)
        spec = cfg.advantage_spec
        if self.multiplier is None:
            lambdas_used = self.lambdas
        else:
            # The rule's weights on this batch: (1, lambda) for the Lagrangian rules, the
            # augmented Lagrangian's max(0, lambda + rho e) or CRPO's switch.
            reward_weight, lambdas_used = self.multiplier.weights(mean_costs)
            if reward_weight != 1.0:
                spec = replace(spec, reward_weight=spec.reward_weight * reward_weight)
        adv = compute_advantages(x, lambdas_used, spec)  # [P, G]
        eff_w = effective_weights(x, lambdas_used, spec)  # [1+K]
        t_adv = time.perf_counter()

        collected = [p.detach().clone() for p in self.policy.parameters()] if self.final.active else None
        self.optimism.before(list(self.policy.parameters()))
        losses = self._update(batch, torch.as_tensor(adv.reshape(-1), dtype=torch.float32))
        self.optimism.after(list(self.policy.parameters()))
        check_finite_parameters(self.policy, f"iteration {self.iteration}", self.iteration - 1)
        t_update = time.perf_counter()

        if self.multiplier is not None:
            self.multiplier.update(mean_costs)
        if self.reference is not None and cfg.ref_update_every and self.iteration % cfg.ref_update_every == 0:
            self.reference = self._frozen_copy()
        t_end = time.perf_counter()

        steps_before = self.env_steps
        self.env_steps += int(batch.env_steps)
        # The starts are the independent samples: each group's mean cost ``(P, K)``.
        self.final.observe(collected, steps_before, self.env_steps, float(x[..., 0].mean()), x[..., 1:].mean(axis=1),
                           self.iteration, episodes=x.shape[0] * x.shape[1])
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
        layer = getattr(self.policy, "linear_layer", None)
        if (layer is not None and cfg.ratio_level == "step" and not cfg.neg_adv_veto and cfg.kl_coef_neg is None
                and hasattr(self.adapter, "flat_steps")):
            flat = self.adapter.flat_steps(batch)
            if flat is not None:
                return self._update_linear(batch, adv, layer, flat)
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
                    kl_coef_neg=cfg.kl_coef_neg,
                )
                if not bool(torch.isfinite(terms.loss)):
                    raise NonFiniteUpdateError(
                        f"iteration {self.iteration}: non-finite loss {float(terms.loss.detach())} (policy-gradient "
                        f"{float(terms.pg_loss.detach())}, KL {float(terms.kl.detach())}, entropy "
                        f"{float(terms.entropy.detach())}); training "
                        f"stopped before the step{logged_note(self.iteration - 1)}"
                    )
                self.optimizer.zero_grad(set_to_none=True)
                terms.loss.backward()
                grad_norm = nn.utils.clip_grad_norm_(
                    self.policy.parameters(), cfg.max_grad_norm if cfg.max_grad_norm > 0 else math.inf
                )
                if not math.isfinite(float(grad_norm)):
                    raise NonFiniteUpdateError(
                        f"iteration {self.iteration}: non-finite gradient norm {float(grad_norm)}; training "
                        f"stopped before the step{logged_note(self.iteration - 1)}"
                    )
                self.optimizer.step()
                grad_norms.append(float(grad_norm))
                for key in ("loss", "pg_loss", "kl", "entropy", "clip_frac", "approx_kl", "veto_frac"):
                    sums[key] = sums.get(key, 0.0) + float(getattr(terms, key).detach())
                count += 1
        out = {key: value / count for key, value in sums.items()}
        out["grad_norm"] = float(np.mean(grad_norms))
        return out

    def _update_linear(
        self,
        batch: RolloutBatch,
        adv: torch.Tensor,
        layer: nn.Linear,
        flat: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    ) -> dict[str, float]:
        """:meth:`_update` for a linear softmax policy, in numpy on the valid steps only: the
        same minibatches (one ``randperm`` per epoch, split as ``torch.chunk`` splits it),
        the gradient in closed form (:func:`linear_categorical_grads`), ``clip_grad_norm_``'s
        clip and the Adam step (:func:`adam_step`), written back to the parameters and to
        the optimiser's state tensors at the end (so saving and loading see every step)."""
        cfg = self.config
        x, actions, logp_old, sample = flat
        n, width = batch.mask.shape
        step_lengths = np.bincount(sample, minlength=n).astype(np.float32).take(sample)
        adv_step = adv.numpy()[sample]
        logp_ref = None
        if self.reference is not None:
            ref: nn.Linear = self.reference.linear_layer  # type: ignore[union-attr]
            ref_all, _ = linear_log_softmax(x, ref.weight.detach().numpy(), ref.bias.detach().numpy())
            logp_ref = ref_all[actions, np.arange(len(actions))]
        chunk = -(-n // cfg.minibatches)  # torch.chunk's chunk size
        num_chunks = -(-n // chunk)
        rank_chunk = np.arange(n) // chunk
        sample_chunk = np.empty(n, dtype=np.int64)
        # Weight and bias as one flat vector (and so the Adam moments): one Adam step and
        # one norm per minibatch; written back to the parameters and state tensors at the end.
        views = [(p.detach().numpy(), self._adam_state(p)) for p in (layer.weight, layer.bias)]
        flat_param = np.concatenate([v.reshape(-1) for v, _ in views])
        state = (
            views[0][1][0].copy(),
            np.concatenate([st[1].reshape(-1) for _, st in views]),
            np.concatenate([st[2].reshape(-1) for _, st in views]),
        )
        size_w = views[0][0].size
        weight_view, bias_view = flat_param[:size_w].reshape(views[0][0].shape), flat_param[size_w:]
        flat_grad = np.empty_like(flat_param)
        group = self.optimizer.param_groups[0]
        max_norm = cfg.max_grad_norm if cfg.max_grad_norm > 0 else math.inf
        totals = np.zeros(6)
        grad_norm_sum = 0.0
        count = 0
        for _ in range(cfg.epochs):
            sample_chunk[torch.randperm(n, generator=self.generator).numpy()] = rank_chunk
            step_chunk = sample_chunk.take(sample)
            samples_in = np.bincount(sample_chunk, minlength=num_chunks).astype(np.float32)
            for c in range(num_chunks):
                idx = (step_chunk == c).nonzero()[0]
                if cfg.loss_agg == "token":
                    weight = np.full(len(idx), 1.0 / np.float32(len(idx)), dtype=np.float32)
                elif cfg.loss_agg == "sequence":
                    weight = 1.0 / (samples_in[c] * step_lengths.take(idx))
                else:
                    weight = np.full(len(idx), 1.0 / (samples_in[c] * np.float32(width)), dtype=np.float32)
                grad_w, grad_b, stats = linear_categorical_grads(
                    x.take(idx, axis=0), actions.take(idx), logp_old.take(idx), adv_step.take(idx), weight,
                    weight_view, bias_view, None if logp_ref is None else logp_ref.take(idx),
                    eps_low=cfg.clip_eps_low, eps_high=cfg.clip_eps_high,
                    kl_coef=cfg.kl_coef, entropy_coef=cfg.entropy_coef,
                )
                if not math.isfinite(stats[0]):
                    raise NonFiniteUpdateError(
                        f"iteration {self.iteration}: non-finite loss {stats[0]} (policy-gradient "
                        f"{stats[1]}, KL {stats[2]}, entropy {stats[3]}); training "
                        f"stopped before the step{logged_note(self.iteration - 1)}"
                    )
                flat_grad[:size_w] = grad_w.reshape(-1)
                flat_grad[size_w:] = grad_b
                grad_norm = math.sqrt(float(flat_grad @ flat_grad))
                if not math.isfinite(grad_norm):
                    raise NonFiniteUpdateError(
                        f"iteration {self.iteration}: non-finite gradient norm {grad_norm}; training "
                        f"stopped before the step{logged_note(self.iteration - 1)}"
                    )
                # clip_grad_norm_'s rule: scale by max_norm / (norm + 1e-6) when that is below 1.
                scale = min(max_norm / (grad_norm + 1e-6), 1.0)
                if scale < 1.0:
                    flat_grad *= np.float32(scale)
                adam_step(flat_param, flat_grad, state, group["lr"], group["betas"], group["eps"])
                totals += stats
                grad_norm_sum += grad_norm
                count += 1
        for (param, (step, exp_avg, exp_avg_sq)), part in zip(views, (slice(0, size_w), slice(size_w, None))):
            param[...] = flat_param[part].reshape(param.shape)
            step[...] = state[0]
            exp_avg[...] = state[1][part].reshape(param.shape)
            exp_avg_sq[...] = state[2][part].reshape(param.shape)
        means = (totals / count).tolist()
        out = dict(zip(("loss", "pg_loss", "kl", "entropy", "clip_frac", "approx_kl"), means))
        out["veto_frac"] = 0.0
        out["grad_norm"] = grad_norm_sum / count
        return out

    def _adam_state(self, param: nn.Parameter) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Numpy views ``(step, exp_avg, exp_avg_sq)`` of the optimiser's state of ``param``,
        created as ``torch.optim.Adam`` creates it on its first step."""
        state = self.optimizer.state[param]
        if not state:
            state["step"] = torch.tensor(0.0)
            state["exp_avg"] = torch.zeros_like(param, memory_format=torch.preserve_format)
            state["exp_avg_sq"] = torch.zeros_like(param, memory_format=torch.preserve_format)
        return state["step"].numpy(), state["exp_avg"].numpy(), state["exp_avg_sq"].numpy()

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
        self.final.begin(self.env_steps, target)
        records: list[dict[str, Any]] = []
        while self.env_steps < target:
            record = self.step()
            records.append(record)
            if log is not None:
                log(record)
        self.final.finish(self.validation_play)  # best-feasible's validation: after training, timed with it
        return records

    # --- persistence ------------------------------------------------------------------
    def optimizer_tensors(self) -> dict[str, torch.Tensor]:
        """Adam's moment tensors, flat-keyed for safetensors (``optim.<param>.<name>``), and
        the optimistic policy step's last update (``optimism.<param>``)."""
        tensors: dict[str, torch.Tensor] = {}
        for idx, state in self.optimizer.state_dict()["state"].items():
            for key, value in state.items():
                if torch.is_tensor(value):
                    tensors[f"optim.{idx}.{key}"] = value.detach().clone().reshape(value.shape or (1,))
        tensors.update(self.optimism.tensors())
        tensors.update(self.final.tensors())
        return tensors

    def load_optimizer_tensors(self, tensors: dict[str, torch.Tensor]) -> None:
        """Inverse of :meth:`optimizer_tensors` (missing state: Adam starts fresh)."""
        state_dict = self.optimizer.state_dict()
        state: dict[int, dict[str, torch.Tensor]] = {}
        self.optimism.load_tensors(tensors)
        self.final.load_tensors(tensors)
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
        state = {
            "iteration": self.iteration,
            "env_steps": self.env_steps,
            "wall_s": self.wall_s,
            "multiplier": None if self.multiplier is None else self.multiplier.state_dict(),
        }
        if self.final.active:
            state["deploy"] = self.final.state()
        return state

    def load_state(self, state: dict[str, Any]) -> None:
        """Inverse of :meth:`state`."""
        self.iteration = int(state["iteration"])
        self.env_steps = int(state["env_steps"])
        self.wall_s = float(state.get("wall_s", 0.0))
        if self.multiplier is not None and state.get("multiplier") is not None:
            self.multiplier.load_state_dict(state["multiplier"])
        self.final.load_state(state.get("deploy", state.get("final_policy")))
