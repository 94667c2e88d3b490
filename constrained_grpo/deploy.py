"""Which policy a learner deploys after training: the last iterate, or a remedy for its cycle.

Deployment is a factor of a run, not an algorithm: every learner (the GRPO agents and the
SB3-based baselines alike) takes ``deploy`` in :data:`DEPLOY_RULES`, and the same training
gives the same last iterate whatever the rule (the snapshots are copies; nothing they do
feeds back into training).

Primal-dual training meets the limits on average over its late iterates while the last one
can cycle out of them (ReLOAD, arXiv 2302.01275). Two cheap remedies need no change to
training, only snapshots of the policy taken as it trains, one candidate per iteration (a
GRPO batch, an SB3 rollout), the policy that collected that iteration's data:

* ``best-feasible``: the candidate with the highest batch return among those whose batch
  costs are *shown* within the limits: for every cost k the one-sided ``1 - alpha`` upper
  bound (:data:`SELECTION_ALPHA` = 0.05) of its mean is at most ``d_k``. Episodes that share a
  start are not independent, so the bound treats the batch's ``G`` per-start group means
  ``c_1..c_G`` as the samples::

      U_k = mean(c) + t_{G-1, 1-alpha} * sd(c) / sqrt(G)        (U_k = +inf for G < 2)

  A GRPO batch of 16 starts x 16 copies is 16 samples, not 256; an SB3 rollout's finished
  episodes each start afresh (groups of one; an episode that began in the rollout before
  counts for the one it ends in, and a rollout that ends fewer than 2 episodes is no
  candidate). A batch whose mean is under the limit only
  because it was lucky, with a large spread between starts, is rejected; where nothing
  qualifies the last iterate is deployed. The bound is per candidate and per cost (not
  simultaneous over the run's iterations): it removes the batches whose own data cannot
  carry the claim, and the selected candidate's bound is recorded so that its evaluation can
  be checked against it.
* ``tail-mixture``: the average iterate made deployable. The average iterate is scored on the
  last ``m = ceil(0.2 T)`` of a run's ``T`` iterations (``metrics.tail_length``), each
  iteration weighing the same; the mixture keeps ``n`` of those iterations' policies, evenly
  spaced by iteration (not by env step: iterations of long episodes use more steps, and
  spacing by steps would over-represent them), and an episode plays snapshot
  ``constrained_grpo.sampling.episode_choice(reset_seed, n)``. Its expected costs are the
  mean of its members', the average iterate's up to the grid of ``n`` members, and each
  episode is still a function of its reset seed.

``last`` (the default) deploys the last iterate. Memory: ``best-feasible`` holds one copy of
the parameters, ``tail-mixture`` the iterations from :data:`BUFFER_FROM` of the budget on
(then ``n``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from scipy import stats

__all__ = ["DEPLOY_RULES", "FINAL_POLICIES", "LEGACY_DEPLOY_KEYS", "SELECTION_ALPHA", "FinalPolicyKeeper",
           "check_deploy", "cost_upper_bound", "load_params", "member_rows", "params_of", "upgrade_recorded"]

DEPLOY_RULES: tuple[str, ...] = ("last", "best-feasible", "tail-mixture")
#: The former name of :data:`DEPLOY_RULES`.
FINAL_POLICIES = DEPLOY_RULES
#: The options' former names (config.json of earlier runs), read as the new ones.
LEGACY_DEPLOY_KEYS: dict[str, str] = {"final_policy": "deploy", "final_snapshots": "deploy_snapshots"}
#: One-sided level of the selection's bound on a candidate's mean costs (per candidate and cost).
SELECTION_ALPHA = 0.05
#: Share of a learn call's iterations whose policies the tail mixture averages (the average iterate's tail).
TAIL = 0.2
#: Policies are buffered from this share of the budget on: the tail's iterations start later
#: unless the last iterations use far fewer env steps than the first.
BUFFER_FROM = 0.6


def check_deploy(rule: Any, snapshots: Any = 10, alpha: Any = SELECTION_ALPHA) -> None:
    """One-line ``ValueError`` naming a bad ``deploy``, ``deploy_snapshots`` or ``deploy_alpha``
    value and the fix."""
    if rule not in DEPLOY_RULES:
        raise ValueError(f"deploy={rule!r}; choose one of {list(DEPLOY_RULES)}")
    if not (isinstance(snapshots, int) and not isinstance(snapshots, bool) and snapshots >= 1):
        raise ValueError(f"deploy_snapshots={snapshots!r} must be an integer >= 1")
    if not (isinstance(alpha, (int, float)) and not isinstance(alpha, bool) and 0 < alpha < 1):
        raise ValueError(f"deploy_alpha={alpha!r} must lie in (0, 1), e.g. 0.05 (a one-sided 95% bound)")


def upgrade_recorded(resolved: Any) -> Any:
    """A recorded resolved configuration (``config.json["algo"]["resolved"]``) as the code now
    spells what that run did, so that comparing it with a run made now sees only real changes.
    In every learner configuration it holds (a dict with ``num_groups``, a GRPO config, or
    ``clip_range``, an SB3 one; nested ones too, e.g. a warm-start reference's):

    * ``final_policy``/``final_snapshots`` read as ``deploy``/``deploy_snapshots``; a run
      recorded before the options existed deployed its last iterate with 10 snapshots;
    * ``deploy_alpha`` at its default, except for ``best-feasible``, whose rule changed (those
      runs selected on the batch mean: they differ from a run made now);
    * PPO-Lagrangian's ``augmented_weights``: ``after-step`` where the multiplier rule is the
      augmented Lagrangian (those runs took the weights after the step), else the default;
    * a GRPO config's ``closed_form`` on: it chooses how the gridworld policy step is computed,
      not what (runs before the option took the closed form wherever it applied).
    """
    if isinstance(resolved, list):
        return [upgrade_recorded(v) for v in resolved]
    if not isinstance(resolved, dict):
        return resolved
    out = {LEGACY_DEPLOY_KEYS.get(k, k): upgrade_recorded(v) for k, v in resolved.items()}
    if "num_groups" in out or "clip_range" in out:
        if "num_groups" in out:
            out.setdefault("closed_form", True)
        out.setdefault("deploy", "last")
        out.setdefault("deploy_snapshots", 10)
        if out["deploy"] != "best-feasible":
            out.setdefault("deploy_alpha", SELECTION_ALPHA)
        multiplier = out.get("multiplier")
        if "clip_range" in out and isinstance(multiplier, dict) and "cost_window" in out:
            out.setdefault("augmented_weights", "after-step" if multiplier.get("rule") == "augmented" else "before-step")
    return out


def cost_upper_bound(group_costs: np.ndarray, alpha: float = SELECTION_ALPHA) -> np.ndarray:
    """One-sided ``1 - alpha`` upper bound of each cost's mean from ``(G, K)`` per-start group
    means (the independent samples): ``mean + t_{G-1, 1-alpha} sd / sqrt(G)``, ``(K,)``;
    ``+inf`` where ``G < 2`` (one start says nothing about the spread between starts). Rounded
    to 1e-9, so that a batch exactly at a limit is not refused by the summation order."""
    c = np.asarray(group_costs, dtype=np.float64)
    if c.ndim == 1:
        c = c[:, None]
    g = c.shape[0]
    if g < 2:
        return np.full(c.shape[1], math.inf)
    t = float(stats.t.ppf(1.0 - alpha, g - 1))
    return np.round(c.mean(axis=0) + t * c.std(axis=0, ddof=1) / math.sqrt(g), 9)


class FinalPolicyKeeper:
    """Keeps the snapshots the rule ``rule`` deploys from (flat parameter lists, CPU copies)."""

    def __init__(self, rule: str, limits: np.ndarray, snapshots: int = 10, alpha: float = SELECTION_ALPHA):
        check_deploy(rule, snapshots, alpha)
        self.rule = rule
        self.limits = np.asarray(limits, dtype=np.float64)
        self.n = snapshots
        self.alpha = float(alpha)
        self.kept: list[list[torch.Tensor]] = []
        self.best_return = -math.inf
        self.best_iteration: int | None = None
        #: The selected candidate's batch mean costs, their upper bounds and its group count.
        self.best_cost_mean: list[float] | None = None
        self.best_cost_bound: list[float] | None = None
        self.best_groups: int | None = None
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
                batch_return: float, group_costs: np.ndarray, iteration: int) -> None:
        """The batch collected by ``params`` (the policy before this iteration's update) spanned
        env steps ``[steps_before, steps_after)``, with mean return ``batch_return`` and per-start
        group mean costs ``group_costs`` ``(G, K)`` (one row per start; an episode of its own is a
        group of one)."""
        if params is None:
            return
        if self.rule == "best-feasible":
            costs = np.asarray(group_costs, dtype=np.float64).reshape(-1, len(self.limits))
            if not (math.isfinite(batch_return) and batch_return > self.best_return) or len(costs) == 0:
                return
            bound = cost_upper_bound(costs, self.alpha)
            if np.all(bound <= self.limits):
                self.best_return, self.best_iteration = float(batch_return), int(iteration)
                self.best_cost_mean = [round(float(v), 6) for v in costs.mean(axis=0)]
                self.best_cost_bound = [round(float(v), 6) for v in bound]
                self.best_groups = len(costs)
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
        """JSON-safe: the rule, the snapshots kept and, for ``best-feasible``, the selected
        iteration with its batch mean costs, their bounds, its group count and the level."""
        out: dict[str, Any] = {"rule": self.rule, "kept": len(self.kept)}
        if self.rule == "best-feasible":
            out.update({"best_return": None if not math.isfinite(self.best_return) else self.best_return,
                        "best_iteration": self.best_iteration, "cost_mean": self.best_cost_mean,
                        "cost_bound": self.best_cost_bound, "groups": self.best_groups, "alpha": self.alpha})
        return out

    def load_state(self, state: dict[str, Any] | None) -> None:
        if not state:
            return
        best = state.get("best_return")
        self.best_return = -math.inf if best is None else float(best)
        self.best_iteration = state.get("best_iteration")
        self.best_cost_mean = state.get("cost_mean")
        self.best_cost_bound = state.get("cost_bound")
        self.best_groups = state.get("groups")


def params_of(module: torch.nn.Module) -> list[torch.Tensor]:
    """A detached CPU copy of ``module``'s parameters (a candidate snapshot)."""
    return [p.detach().to("cpu", copy=True) for p in module.parameters()]


def load_params(module: torch.nn.Module, params: list[torch.Tensor]) -> None:
    """Copy the snapshot ``params`` into ``module``'s parameters, in order."""
    with torch.no_grad():
        for p, v in zip(module.parameters(), params, strict=True):
            p.copy_(v.to(p.device))


def member_rows(members: int, choices: np.ndarray | None, rows: int) -> list[tuple[int, np.ndarray]]:
    """``[(member, row indices)]``: every row to member 0 for one deployed policy; for a
    mixture, each row to the member its episode's reset seed chose (``begin_episodes``).

    A mixture asked to act on rows it has no episode for raises a one-line ``ValueError``:
    playing one member for every episode would deploy a snapshot, not the mixture."""
    if members == 1:
        return [(0, np.arange(rows))]
    if choices is None or len(choices) != rows:
        have = "no reset seeds" if choices is None else f"{len(choices)} reset seed(s)"
        raise ValueError(
            f"this agent deploys a mixture of {members} policies, one per episode, and has {have} for {rows} row(s): "
            "call agent.begin_episodes(reset_seeds) with each row's reset seed after env.reset(seed=...)")
    return [(int(j), np.flatnonzero(choices == j)) for j in np.unique(choices)]
