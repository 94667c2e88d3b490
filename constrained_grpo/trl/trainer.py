"""``ConstrainedGRPOTrainer``: TRL's ``GRPOTrainer`` with cost functions, limits and multipliers.

TRL scores every completion with each function of ``reward_funcs + cost_funcs`` (the
matrix ``rewards_per_func``, ``[N, n_R + K]``, gathered over processes, groups of
``num_generations`` consecutive rows). This subclass keeps that matrix, builds the
components of our aggregators,

    x[p, g] = [R, C_1, ..., C_K],   R = sum_i w_i r_i   (w = ``reward_weights``, default 1),

and replaces the advantages TRL hands to its loss with

    A = constrained_grpo.agents.advantages.compute_advantages(x, lambda, spec)

(ScAdv by default: ``A = Z(R) - sum_k lambda_k Z(C_k)``; ScRew, GDPO, DARA and the
unconstrained ``reward`` per ``spec``), where ``lambda`` are the multipliers *before* this
batch's update. After each generation batch of the training loop the multipliers take
one step of their rule (:mod:`constrained_grpo.multipliers`) from the batch's mean costs,
so all processes, which see the same gathered matrix, hold the same ``lambda``.

Deliberate differences from TRL's own advantages (documented in docs/trl.md):

- the std of a group is the population one and ``spec.eps`` (default 0) is added, where
  TRL divides by the unbiased std plus 1e-4; a group of equal values gets advantage 0;
- ``args.scale_rewards`` and ``args.multi_objective_aggregation`` are not used: the
  estimator and aggregator of ``spec`` decide (``estimator="batch_std"`` is
  ``scale_rewards="batch"``, ``"mean"`` is ``"none"``; ``aggregator="gdpo"`` is
  ``normalize_then_sum``);
- ``args.reward_weights`` must stay unset: the costs' weights are the multipliers. TRL's
  logged ``reward`` is then the Lagrangian ``R - sum_k lambda_k C_k`` of the batch.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch

from constrained_grpo.agents.advantages import AdvantageSpec, compute_advantages, effective_weights
from constrained_grpo.files import atomic_write_text
from constrained_grpo.multipliers import Multiplier, MultiplierConfig, make_multiplier

try:
    from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
    from trl import GRPOTrainer
except ImportError as err:  # pragma: no cover - the extra is missing
    raise ImportError("constrained_grpo.trl needs TRL; pip install 'constrained-grpo[trl]'") from err

__all__ = ["STATE_FILE", "ConstrainedGRPOTrainer", "advantage_spec"]

#: The multipliers' file in each checkpoint folder (restored by ``train(resume_from_checkpoint=...)``).
STATE_FILE = "constrained_grpo_state.json"


def advantage_spec(spec: AdvantageSpec | Mapping[str, Any] | None) -> AdvantageSpec:
    """An :class:`AdvantageSpec` from itself, a dict of its fields, or None (ScAdv, z-scores)."""
    if spec is None:
        return AdvantageSpec()
    if isinstance(spec, AdvantageSpec):
        return spec
    fields = set(AdvantageSpec.__dataclass_fields__)
    unknown = sorted(set(spec) - fields)
    if unknown:
        raise ValueError(f"unknown advantage option(s) {unknown}; choose among {sorted(fields)}")
    return AdvantageSpec(**dict(spec))


def _name(func: Any) -> str:
    return getattr(func, "__name__", None) or type(func).__name__


class ConstrainedGRPOTrainer(GRPOTrainer):
    """GRPO with K cost functions held under their limits by Lagrange multipliers.

    Args:
        model: as for ``GRPOTrainer`` (a model id, a local directory or a model object).
        reward_funcs: the reward functions (TRL's signature); summed with ``reward_weights``
            into the one reward component R.
        cost_funcs: K cost functions (TRL's signature); the constraint is ``E[C_k] <= limit_k``.
        limits: the K limits ``d_k``.
        args: a ``trl.GRPOConfig`` (its ``reward_weights`` must be None).
        constraint_names: K names for the logs (default: the cost functions' names).
        advantage: an :class:`AdvantageSpec` or a dict of its fields (default ScAdv, z-scores).
        multiplier: a :class:`MultiplierConfig` or a dict of its fields (default dual ascent).
        reward_weights: weights of the reward functions in R (default 1 each).
        on_batch: called with :attr:`last_batch` after each training generation batch.
        **kwargs: the other ``GRPOTrainer`` arguments (``train_dataset``, ``processing_class``, ...).
    """

    def __init__(
        self,
        model: Any,
        reward_funcs: Any | Sequence[Any],
        cost_funcs: Sequence[Any],
        limits: Sequence[float],
        args: Any = None,
        *,
        constraint_names: Sequence[str] | None = None,
        advantage: AdvantageSpec | Mapping[str, Any] | None = None,
        multiplier: MultiplierConfig | Mapping[str, Any] | None = None,
        reward_weights: Sequence[float] | None = None,
        on_batch: Callable[[dict[str, Any]], None] | None = None,
        **kwargs: Any,
    ):
        rewards = list(reward_funcs) if isinstance(reward_funcs, (list, tuple)) else [reward_funcs]
        costs = list(cost_funcs)
        if not rewards:
            raise ValueError("reward_funcs is empty; pass at least one reward function")
        lim = np.asarray(limits, dtype=np.float64).reshape(-1)
        if lim.size != len(costs):
            raise ValueError(f"got {len(costs)} cost function(s) but {lim.size} limit(s); pass one limit per cost function")
        names = tuple(constraint_names) if constraint_names is not None else tuple(_name(f) for f in costs)
        if len(names) != len(costs) or len(set(names)) != len(names):
            raise ValueError(f"constraint_names={list(names)} must be {len(costs)} distinct names, one per cost function")
        weights = np.ones(len(rewards)) if reward_weights is None else np.asarray(reward_weights, dtype=np.float64).reshape(-1)
        if weights.size != len(rewards):
            raise ValueError(f"got {weights.size} reward_weights for {len(rewards)} reward function(s); pass one per reward function")
        if args is not None and getattr(args, "reward_weights", None) is not None:
            raise ValueError(
                "GRPOConfig.reward_weights must be None with ConstrainedGRPOTrainer (the costs' weights are the "
                "multipliers); pass reward_weights= to the trainer for the reward functions"
            )
        self.spec = advantage_spec(advantage)
        mconf = multiplier if isinstance(multiplier, MultiplierConfig) else MultiplierConfig.from_dict(dict(multiplier or {}))
        if mconf.rule in ("augmented", "crpo"):
            raise ValueError(
                f"multiplier rule {mconf.rule!r} weighs the batch by its own costs, which TRL's reward "
                "functions do not see; use dual_ascent (optimistic=True for the last iterate), regularized, adam or pid"
            )
        self.multiplier: Multiplier = make_multiplier(lim, mconf)
        self.constraint_names = names
        self.num_reward_funcs = len(rewards)
        self.reward_component_weights = weights
        self.on_batch = on_batch
        self.last_batch: dict[str, Any] | None = None
        self.batches = 0
        self.completions_seen = 0
        self._components: torch.Tensor | None = None
        self._wall_start: float | None = None
        super().__init__(model=model, reward_funcs=rewards + costs, args=args, **kwargs)
        if len(self.reward_funcs) != len(rewards) + len(costs):
            raise ValueError(
                f"TRL holds {len(self.reward_funcs)} reward functions, not the {len(rewards) + len(costs)} given "
                "(an environment_factory adds its own); ConstrainedGRPOTrainer supports reward_funcs + cost_funcs only"
            )

    # --- the multipliers ------------------------------------------------------------------
    @property
    def constrained(self) -> bool:
        """Whether the aggregator uses the multipliers (``reward`` ignores the costs)."""
        return self.spec.aggregator != "reward"

    @property
    def lambdas(self) -> np.ndarray:
        """Current multipliers ``(K,)``."""
        return self.multiplier.values.copy()

    def signed_function_weights(self, lambdas: np.ndarray) -> np.ndarray:
        """Per-function weights ``[w_1, ..., w_nR, -lambda_1, ..., -lambda_K]`` (TRL's ``reward_weights``)."""
        lam = lambdas if self.constrained else np.zeros_like(lambdas)
        return np.concatenate([self.spec.reward_weight * self.reward_component_weights, -lam])

    def components(self, rewards_per_func: np.ndarray, num_generations: int) -> np.ndarray:
        """``[P, G, 1+K]`` components from TRL's ``[N, n_R + K]`` scores (module docstring)."""
        scores = np.asarray(rewards_per_func, dtype=np.float64)
        bad = ~np.isfinite(scores)
        if bad.any():
            col = int(np.flatnonzero(bad.any(axis=0))[0])
            raise ValueError(
                f"reward/cost function {self.reward_func_names[col]!r} returned None or a non-finite value for "
                f"{int(bad[:, col].sum())} completion(s); constrained advantages need a number for every completion"
            )
        if scores.shape[0] % num_generations:
            raise ValueError(f"{scores.shape[0]} scores do not split into groups of num_generations={num_generations}")
        reward = scores[:, : self.num_reward_funcs] @ self.reward_component_weights
        x = np.concatenate([reward[:, None], scores[:, self.num_reward_funcs:]], axis=1)
        return x.reshape(-1, num_generations, x.shape[1])

    # --- TRL hooks ------------------------------------------------------------------------
    def _calculate_rewards(self, inputs: Any, prompts: Any, completions: Any, completion_ids_list: Any) -> torch.Tensor:
        scores = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._components = scores
        return scores

    def _generate_and_score_completions(self, inputs: Any) -> dict[str, Any]:
        if self._wall_start is None:
            self._wall_start = time.perf_counter()
        mode = "train" if self.model.training else "eval"
        lambdas_used = self.lambdas
        # TRL's own aggregation (whose advantages are replaced below) then logs the Lagrangian as "reward".
        self.reward_weights = torch.tensor(self.signed_function_weights(lambdas_used), dtype=torch.float32)
        self._components = None
        output = super()._generate_and_score_completions(inputs)
        if self._components is None:
            raise RuntimeError("TRL did not score the completions through _calculate_rewards; this TRL version is unsupported")
        g = self.num_generations if mode == "train" else self.num_generations_eval
        x = self.components(self._components.detach().cpu().numpy(), g)
        lam = lambdas_used if self.constrained else np.zeros_like(lambdas_used)
        adv = compute_advantages(x, lam, self.spec).reshape(-1)
        eff_w = effective_weights(x, lam, self.spec)
        local = output["advantages"]
        n = local.shape[0]
        start = self.accelerator.process_index * n
        output["advantages"] = torch.as_tensor(adv[start : start + n], dtype=local.dtype, device=local.device)

        mean_costs = x[..., 1:].reshape(-1, x.shape[2] - 1).mean(axis=0)
        if mode == "train":
            if self.constrained:
                self.multiplier.update(mean_costs)
            self.batches += 1
            self.completions_seen += x.shape[0] * x.shape[1]
        metrics = self._metrics[mode]
        metrics["objective/reward"].append(float(x[..., 0].mean()))
        metrics["eff_w/reward"].append(float(eff_w[0]))
        for k, name in enumerate(self.constraint_names):
            metrics[f"constraints/{name}/cost"].append(float(mean_costs[k]))
            metrics[f"constraints/{name}/limit"].append(float(self.multiplier.limits[k]))
            metrics[f"constraints/{name}/lambda"].append(float(self.multiplier.values[k]) if self.constrained else 0.0)
            metrics[f"constraints/{name}/weight"].append(float(-lam[k]))
            metrics[f"eff_w/{name}"].append(float(eff_w[1 + k]))
        self.last_batch = {
            "mode": mode,
            "batch": self.batches,
            "completions": self.completions_seen,
            "wall_s": time.perf_counter() - self._wall_start,
            "components": x,
            "advantages": adv.reshape(x.shape[:2]),
            "mean_reward": float(x[..., 0].mean()),
            "mean_costs": mean_costs,
            "lambdas_used": lam,
            "lambdas": self.lambdas if self.constrained else np.zeros_like(lam),
            "eff_w": eff_w,
            "completion_length": float(output["completion_mask"].sum(dim=1).float().mean()),
        }
        if mode == "train" and self.on_batch is not None:
            self.on_batch(self.last_batch)
        return output

    # --- persistence ----------------------------------------------------------------------
    def constrained_state(self) -> dict[str, Any]:
        """The multipliers and the advantage spec, as JSON values (saved in every checkpoint)."""
        return {
            "constraint_names": list(self.constraint_names),
            "advantage": asdict(self.spec),
            "multiplier": self.multiplier.state_dict(),
            "batches": self.batches,
            "completions_seen": self.completions_seen,
        }

    def _save_checkpoint(self, model: Any, trial: Any) -> None:
        super()._save_checkpoint(model, trial)
        if self.args.should_save:
            folder = Path(self._get_output_dir(trial=trial)) / f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
            atomic_write_text(folder / STATE_FILE, json.dumps(self.constrained_state(), indent=2, sort_keys=True))

    def _load_optimizer_and_scheduler(self, checkpoint: str | None) -> None:
        super()._load_optimizer_and_scheduler(checkpoint)
        path = None if checkpoint is None else Path(checkpoint) / STATE_FILE
        if path is not None and path.is_file():
            state = json.loads(path.read_text())
            if state["constraint_names"] != list(self.constraint_names):
                raise ValueError(
                    f"{path} holds multipliers of constraints {state['constraint_names']}, not "
                    f"{list(self.constraint_names)}; resume with the same cost functions"
                )
            self.multiplier.load_state_dict(state["multiplier"])
            self.batches = int(state["batches"])
            self.completions_seen = int(state["completions_seen"])
