"""Which policy a GRPO agent deploys after training: the last iterate, or a remedy for its cycle.

Primal-dual training meets the limits on average over its late iterates while the last one
can cycle out of them (ReLOAD, arXiv 2302.01275). Two cheap remedies need no change to
training, only snapshots of the policy taken as it trains (``GRPOConfig.final_policy``):

* ``best-feasible``: the policy of the iteration with the highest batch return among those
  whose batch mean costs were all within their limits, ``Jhat_k <= d_k`` (the snapshot is the
  policy that collected that batch). The batch estimates are noisy, so the choice favours
  iterates whose batch was lucky; the harness's evaluation then says what was kept.
* ``tail-mixture``: the average iterate made deployable. The average iterate is scored on the
  last ``m = ceil(0.2 T)`` of a run's ``T`` iterations (``metrics.tail_length``), each
  iteration weighing the same; the mixture keeps ``n`` of those iterations' policies, evenly
  spaced by iteration (not by env step: iterations of long episodes use more steps, and
  spacing by steps would over-represent them), and an episode plays snapshot
  ``constrained_grpo.sampling.episode_choice(reset_seed, n)``. Its expected costs are the
  mean of its members', the average iterate's up to the grid of ``n`` members, and each
  episode is still a function of its reset seed.

``last`` (the default) deploys the last iterate.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

__all__ = ["FINAL_POLICIES", "FinalPolicyKeeper"]

FINAL_POLICIES: tuple[str, ...] = ("last", "best-feasible", "tail-mixture")
#: Share of a learn call's iterations whose policies the tail mixture averages (the average iterate's tail).
TAIL = 0.2
#: Policies are buffered from this share of the budget on: the tail's iterations start later
#: unless the last iterations use far fewer env steps than the first.
BUFFER_FROM = 0.6


class FinalPolicyKeeper:
    """Keeps the snapshots the rule ``rule`` deploys from (flat parameter lists, CPU copies)."""

    def __init__(self, rule: str, limits: np.ndarray, snapshots: int = 10):
        if rule not in FINAL_POLICIES:
            raise ValueError(f"final_policy={rule!r}; choose one of {list(FINAL_POLICIES)}")
        if not (isinstance(snapshots, int) and snapshots >= 1):
            raise ValueError(f"final_snapshots={snapshots!r} must be an integer >= 1")
        self.rule = rule
        self.limits = np.asarray(limits, dtype=np.float64)
        self.n = snapshots
        self.kept: list[list[torch.Tensor]] = []
        self.best_return = -math.inf
        self.best_iteration: int | None = None
        self._buffer: list[list[torch.Tensor]] = []
        self._buffer_from = 0.0
        self._iterations = 0

    @property
    def active(self) -> bool:
        """Whether the trainer must copy the parameters before each update."""
        return self.rule != "last"

    def begin(self, start_steps: int, target_steps: int) -> None:
        """A ``learn`` call from ``start_steps`` to ``target_steps`` (the mixture of a new call is
        taken over that call's iterations)."""
        if self.rule != "tail-mixture":
            return
        self._buffer, self._iterations = [], 0
        self._buffer_from = start_steps + BUFFER_FROM * (target_steps - start_steps)

    def observe(self, params: list[torch.Tensor] | None, steps_before: int, steps_after: int,
                batch_return: float, batch_costs: np.ndarray, iteration: int) -> None:
        """The batch collected by ``params`` (the policy before this iteration's update) spanned
        env steps ``[steps_before, steps_after)`` with mean return and costs as given."""
        if params is None:
            return
        if self.rule == "best-feasible":
            if np.all(np.asarray(batch_costs) <= self.limits) and batch_return > self.best_return:
                self.best_return, self.best_iteration = float(batch_return), int(iteration)
                self.kept = [params]
        elif self.rule == "tail-mixture":
            self._iterations += 1
            if steps_before >= self._buffer_from:
                self._buffer.append(params)

    def finish(self) -> None:
        """The end of a ``learn`` call: the mixture keeps ``n`` policies of its last
        ``m = ceil(0.2 T)`` iterations, member ``j`` the one at position ``floor((j + 1/2) m / n)``."""
        if self.rule != "tail-mixture" or not self._buffer:
            return
        m = max(1, math.ceil(TAIL * self._iterations))
        tail = self._buffer[-m:]
        count = min(self.n, len(tail))
        self.kept = [tail[int((j + 0.5) * len(tail) / count)] for j in range(count)]
        self._buffer = []

    def deployed(self) -> list[list[torch.Tensor]]:
        """The parameter lists deployed (empty: the last iterate, also where nothing qualified)."""
        return list(self.kept)

    # --- persistence ------------------------------------------------------------------
    def tensors(self) -> dict[str, torch.Tensor]:
        """``final.<snapshot>.<param>`` for safetensors."""
        return {f"final.{j}.{i}": p.clone() for j, ps in enumerate(self.kept) for i, p in enumerate(ps)}

    def load_tensors(self, tensors: dict[str, torch.Tensor]) -> None:
        found: dict[int, dict[int, torch.Tensor]] = {}
        for name, value in tensors.items():
            if name.startswith("final."):
                _, j, i = name.split(".")
                found.setdefault(int(j), {})[int(i)] = value
        self.kept = [[found[j][i].clone() for i in range(len(found[j]))] for j in range(len(found))]

    def state(self) -> dict[str, Any]:
        return {"rule": self.rule, "best_return": None if not math.isfinite(self.best_return) else self.best_return,
                "best_iteration": self.best_iteration, "kept": len(self.kept)}

    def load_state(self, state: dict[str, Any] | None) -> None:
        if not state:
            return
        best = state.get("best_return")
        self.best_return = -math.inf if best is None else float(best)
        self.best_iteration = state.get("best_iteration")
