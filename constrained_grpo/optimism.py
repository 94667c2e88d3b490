"""The optimistic policy step, shared by the GRPO trainer and the SB3 Lagrangian baselines.

Gradient descent-ascent on the Lagrangian converges on average, not in the last iterate:
the policy and the multipliers cycle around the saddle point. Optimistic gradient steps
on *both* players converge in the last iterate (ReLOAD, Moskovitz et al., ICML 2023,
arXiv 2302.01275; one optimistic player is not enough). For the policy, with ``Delta_t`` the
change of its parameters made by iteration ``t``'s ordinary update,

    theta_{t+1} = theta_t + Delta_t + beta (Delta_t - Delta_{t-1}),

which for a plain gradient step ``Delta_t = eta g_t`` and ``beta = 1`` is optimistic
gradient ascent ``theta_{t+1} = theta_t + eta (2 g_t - g_{t-1})``; over PPO's clipped Adam
epochs it extrapolates their displacement the same way. The multiplier's optimistic step
is ``MultiplierConfig(optimistic=True)`` (:mod:`constrained_grpo.multipliers`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

__all__ = ["OptimisticStep"]


class OptimisticStep:
    """``theta <- theta + beta (Delta_t - Delta_{t-1})`` after each update of ``params``.

    Call :meth:`before` ahead of an iteration's update and :meth:`after` once it is done;
    ``beta = 0`` does nothing (no copies either). The first update has no ``Delta_{t-1}``
    and is left as it is.
    """

    def __init__(self, beta: float = 0.0):
        if not (math.isfinite(beta) and beta >= 0):
            raise ValueError(f"policy_optimism={beta!r} must be finite and >= 0 (1: optimistic gradient ascent)")
        self.beta = float(beta)
        self.last_update: list[torch.Tensor] | None = None
        self._before: list[torch.Tensor] | None = None

    def before(self, params: Sequence[torch.Tensor]) -> None:
        """Remember ``params`` as they are before the update."""
        self._before = [p.detach().clone() for p in params] if self.beta > 0 else None

    @torch.no_grad()
    def after(self, params: Sequence[torch.Tensor]) -> None:
        """Extrapolate ``params`` by ``beta (Delta_t - Delta_{t-1})``; remember ``Delta_t``."""
        if self._before is None:
            return
        delta = [p.detach() - b for p, b in zip(params, self._before)]
        if self.last_update is not None:
            for p, d, d_prev in zip(params, delta, self.last_update):
                p.add_(d - d_prev, alpha=self.beta)
        self.last_update = delta
        self._before = None

    # --- persistence: resuming continues the same sequence of steps -------------------
    def tensors(self, prefix: str = "optimism.") -> dict[str, torch.Tensor]:
        """``Delta_{t-1}`` flat-keyed for safetensors (``<prefix><index>``)."""
        return {f"{prefix}{i}": d.clone() for i, d in enumerate(self.last_update or ())}

    def load_tensors(self, tensors: dict[str, torch.Tensor], prefix: str = "optimism.") -> None:
        """Inverse of :meth:`tensors` (none saved: the next update is the first)."""
        found = {int(k[len(prefix):]): v for k, v in tensors.items() if k.startswith(prefix)}
        self.last_update = [found[i].clone() for i in range(len(found))] if found else None

    def state_dict(self) -> list[list[float]] | None:
        """``Delta_{t-1}`` as JSON-safe nested lists (float32 values are exact as floats)."""
        return None if self.last_update is None else [d.reshape(-1).tolist() for d in self.last_update]

    def load_state_dict(self, state: Any, params: Sequence[torch.Tensor]) -> None:
        """Inverse of :meth:`state_dict`, shaped like ``params``."""
        if state is None:
            self.last_update = None
            return
        self.last_update = [torch.tensor(v, dtype=p.dtype).reshape(p.shape) for v, p in zip(state, params)]
