"""Which policy a learner deploys after training: the last iterate, or a remedy for its cycle.

Deployment is a factor of a run, not an algorithm: every learner (the GRPO agents and the
SB3-based baselines alike) takes ``deploy`` in :data:`DEPLOY_RULES`, and the same training
gives the same last iterate whatever the rule (the snapshots are copies; nothing they do
feeds back into training).

Primal-dual training meets the limits on average over its late iterates while the last one
can cycle out of them (ReLOAD, arXiv 2302.01275). Two cheap remedies need no change to
training, only snapshots of the policy taken as it trains, one candidate per iteration (a
GRPO batch, an SB3 rollout), the policy that collected that iteration's data:

* ``best-feasible``: a screen on each candidate's own batch, then a held-out validation of the
  best few. The screen: for every cost k the one-sided ``1 - alpha`` upper bound
  (:data:`SELECTION_ALPHA` = 0.05, ``deploy_alpha``) of the batch's mean is at most ``d_k``.
  Episodes that share a start are not independent, so the bound treats the batch's ``G``
  per-start group means ``c_1..c_G`` as the samples::

      U_k = mean(c) + t_{G-1, 1-alpha} * sd(c) / sqrt(G)        (U_k = +inf for G < 2)

  A GRPO batch of 16 starts x 16 copies is 16 samples, not 256; an SB3 rollout's finished
  episodes each start afresh (groups of one; an episode that began in the rollout before
  counts for the one it ends in, and a rollout that ends fewer than 2 episodes is no
  candidate). The screen is per candidate and cheap, but the candidate with the top batch
  return among the hundreds that pass it is optimistic (a winner's curse: its batch was
  likely lucky, and 16 starts that all saw no violation bound an indicator's rate by 0).

  The validation: the ``M`` (:data:`SHORTLIST` = 5, ``deploy_shortlist``) candidates with
  the highest batch returns among those passing the screen are kept (CPU copies), and at the
  end of each ``learn`` call each of the ``m <= M`` is played with the learner's own sampled
  policy on the same ``V`` held-out episodes (``deploy_validation_episodes``; by default
  :func:`validation_size`, ``V = ceil(E / 200)`` for the ``E`` episodes trained, within
  [200, 5000], so that the ``m + 1 <= 6`` policies played cost at most 3% of training's
  episodes above the floor), episode ``i`` reset with seed
  ``VALIDATION_SEED + i`` (:data:`VALIDATION_SEED` = 2^63 - 500,000: above every seed the
  harness evaluates, public from 1,000,000 or private from below 2^63 - 10^6, each fewer than
  480,000 episodes, and every seed training draws) and acting on
  ``constrained_grpo.sampling.episode_uniforms`` as the harness's sampled evaluation does
  (the same episodes, and no training stream is drawn from). Each cost k of candidate j gets
  an exact one-sided bound at level ``a = alpha / ((m + 1) K)`` (Bonferroni over the
  candidates, the last iterate and the costs)::

      indicator cost, x of V episodes violate:   U_jk = Beta^{-1}(1 - a; x + 1, V - x)   (1 if x = V)
      any other cost:                            U_jk = mean + t_{V-1, 1-a} s' / sqrt(V),
                                                 s' = max(s, c(d_k) / sqrt(V)), c(d) = d or 1 if d = 0

  (Clopper-Pearson; Student's t with the harness verdict's floor, so no spread never
  certifies alone). The deployed policy is the candidate with the highest validation mean
  return among those with every ``U_jk <= d_k``; where none has, the last iterate, itself
  validated on the same episodes. The candidates are fixed before the validation episodes
  are drawn, so with probability at least ``1 - alpha`` every recorded bound holds at once,
  the deployed policy's included whichever it is (for indicator costs exactly, for the others
  up to the t approximation). ``deploy_validation_episodes = 0`` turns the validation off:
  the screen's top candidate is deployed (runs recorded before the validation existed).
  Cost: ``(m + 1) V`` episodes at most after training.
* ``tail-mixture``: the average iterate made deployable. The average iterate is scored on the
  last ``m = ceil(0.2 T)`` of a run's ``T`` iterations (``metrics.tail_length``), each
  iteration weighing the same; the mixture keeps ``n`` of those iterations' policies, evenly
  spaced by iteration (not by env step: iterations of long episodes use more steps, and
  spacing by steps would over-represent them), and an episode plays snapshot
  ``constrained_grpo.sampling.episode_choice(reset_seed, n)``. Its expected costs are the
  mean of its members', the average iterate's up to the grid of ``n`` members, and each
  episode is still a function of its reset seed.

``last`` (the default) deploys the last iterate. Memory: ``best-feasible`` holds ``M`` copies
of the parameters (one without validation), ``tail-mixture`` the iterations from
:data:`BUFFER_FROM` of the budget on (then ``n``). ``done.json["deployed"]`` (the keeper's
:meth:`FinalPolicyKeeper.state`) records a ``best-feasible`` run's deployed iteration with its
screen (``best_return``, ``best_iteration``, ``cost_mean``, ``cost_bound``, ``groups``,
``alpha``; None where the last iterate is deployed), the shortlist, and ``validation``: the
episodes, first and last seed, level, each candidate's validation return, mean costs, bounds
and verdict, and the deployed policy's (``deployed``: its iteration or ``"last"``;
``return_mean``, ``cost_mean``, ``cost_bound``: the bound its evaluation is checked against).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from scipy import stats


__all__ = ["DEPLOY_RULES", "FINAL_POLICIES", "LEGACY_DEPLOY_KEYS", "MAX_VALIDATION_EPISODES",
           "SELECTION_ALPHA", "SHORTLIST", "VALIDATION_EPISODES", "VALIDATION_EPISODES_AUTO_MAX",
           "VALIDATION_SEED", "VALIDATION_SHARE", "VALIDATION_WAVE", "DeployOptions", "DeploymentSet", "FinalPolicyKeeper", "PlayFn",
           "check_deploy",
           "cost_upper_bound", "load_params", "member_rows", "params_of", "upgrade_recorded",
           "validation_bounds", "validation_seeds", "validation_size"]

DEPLOY_RULES: tuple[str, ...] = ("last", "best-feasible", "tail-mixture")
#: The former name of :data:`DEPLOY_RULES`.
FINAL_POLICIES = DEPLOY_RULES
#: The options' former names (config.json of earlier runs), read as the new ones.
LEGACY_DEPLOY_KEYS: dict[str, str] = {"final_policy": "deploy", "final_snapshots": "deploy_snapshots"}
#: One-sided level of the screen's bound on a candidate's batch costs (per candidate and cost),
#: and the family-wise level of the validation's bounds (over the shortlist and the costs).
SELECTION_ALPHA = 0.05
#: Candidates (the top batch returns among those passing the screen) validated at the end of training.
SHORTLIST = 5
#: Held-out validation episodes per shortlisted candidate where ``deploy_validation_episodes``
#: is None (the default): ``ceil(E / VALIDATION_SHARE)`` for E episodes trained so far, clipped
#: to ``[VALIDATION_EPISODES, VALIDATION_EPISODES_AUTO_MAX]`` (0 turns the validation off).
VALIDATION_EPISODES = 200
#: Training episodes per validation episode of one candidate (the shortlist and the last
#: iterate together play at most ``(M + 1) / 200``, 3%, of training's episodes above the floor).
VALIDATION_SHARE = 200
#: The most validation episodes per candidate the default size gives.
VALIDATION_EPISODES_AUTO_MAX = 5000
#: Reset seed of validation episode 0 (episode i: ``VALIDATION_SEED + i``), ``2^63 - 500,000``:
#: above every seed an evaluation can use (the public one from 1,000,000, a private one from
#: below ``2^63 - 10^6``; each fewer than 480,000 episodes) and every seed training draws
#: (GRPO's group seeds are below ``2^31``, an SB3 learner's env copies ``seed + i``).
VALIDATION_SEED = 2**63 - 500_000
#: Rows of the vector env a validation plays its episodes on at once (in waves).
VALIDATION_WAVE = 1024
#: The most validation episodes a candidate may have (its seeds stay below ``2^63 - 400,000``).
MAX_VALIDATION_EPISODES = 100_000
#: Share of a learn call's iterations whose policies the tail mixture averages (the average iterate's tail).
TAIL = 0.2
#: Policies are buffered from this share of the budget on: the tail's iterations start later
#: unless the last iterations use far fewer env steps than the first.
BUFFER_FROM = 0.6


def check_deploy(rule: Any, snapshots: Any = 10, alpha: Any = SELECTION_ALPHA, shortlist: Any = SHORTLIST,
                 validation_episodes: Any = None) -> None:
    """One-line ``ValueError`` naming a bad ``deploy``, ``deploy_snapshots``, ``deploy_alpha``,
    ``deploy_shortlist`` or ``deploy_validation_episodes`` value and the fix."""
    if rule not in DEPLOY_RULES:
        raise ValueError(f"deploy={rule!r}; choose one of {list(DEPLOY_RULES)}")
    if not (isinstance(snapshots, int) and not isinstance(snapshots, bool) and snapshots >= 1):
        raise ValueError(f"deploy_snapshots={snapshots!r} must be an integer >= 1")
    if not (isinstance(alpha, (int, float)) and not isinstance(alpha, bool) and 0 < alpha < 1):
        raise ValueError(f"deploy_alpha={alpha!r} must lie in (0, 1), e.g. 0.05 (a one-sided 95% bound)")
    if not (isinstance(shortlist, int) and not isinstance(shortlist, bool) and shortlist >= 1):
        raise ValueError(f"deploy_shortlist={shortlist!r} must be an integer >= 1 (candidates validated, e.g. {SHORTLIST})")
    if validation_episodes is not None and not (
            isinstance(validation_episodes, int) and not isinstance(validation_episodes, bool)
            and (validation_episodes == 0 or 2 <= validation_episodes <= MAX_VALIDATION_EPISODES)):
        raise ValueError(f"deploy_validation_episodes={validation_episodes!r} must be null (sized by the training), 0 (no "
                         f"validation) or an integer in [2, {MAX_VALIDATION_EPISODES:,}], e.g. {VALIDATION_EPISODES}")


@dataclass(frozen=True)
class DeployOptions:
    """The deployment options of every learner: the GRPO agents' ``GRPOConfig`` and the SB3
    baselines' ``PPOConfig`` inherit them (one declaration; :meth:`check_deploy_options` in
    their ``__post_init__``). Training is the same whatever the rule."""

    deploy: str = "last"
    """The policy deployed after training: ``last`` (the last iterate), ``best-feasible`` (the
    best validation return among the ``deploy_shortlist`` best batch returns whose batch costs
    are within every limit by a one-sided bound over the batch's starts, validated on held-out
    episodes) or ``tail-mixture`` (``deploy_snapshots`` policies of the last 20% of training,
    one per episode: the average iterate made deployable). A candidate is one training batch's
    policy (a GRPO iteration, an SB3 rollout: the policy that collected it). Control tasks only."""
    deploy_snapshots: int = 10
    """Snapshots of the ``tail-mixture``."""
    deploy_alpha: float = 0.05
    """One-sided level of ``best-feasible``'s bound on a candidate's batch costs."""
    deploy_shortlist: int = 5
    """``best-feasible``'s candidates validated after training: the top batch returns among
    those passing the screen (CPU parameter copies)."""
    deploy_validation_episodes: int | None = None
    """Held-out episodes (reset seeds from ``2^63 - 500,000``, disjoint from every evaluation's)
    on which each shortlisted candidate is played after training; the one deployed has the
    highest validation return among those whose exact bounds, simultaneous over the shortlist
    and the costs, are within every limit (else the last iterate). None: one per 200 episodes
    trained, 200 to 5000 (:func:`validation_size`); 0: no validation."""

    def check_deploy_options(self) -> None:
        """:func:`check_deploy` on these options."""
        check_deploy(self.deploy, self.deploy_snapshots, self.deploy_alpha, self.deploy_shortlist,
                     self.deploy_validation_episodes)


def upgrade_recorded(resolved: Any) -> Any:
    """A recorded resolved configuration (``config.json["algo"]["resolved"]``) as the code now
    spells what that run did, so that comparing it with a run made now sees only real changes.
    In every learner configuration it holds (a dict with ``num_groups``, a GRPO config, or
    ``clip_range``, an SB3 one; nested ones too, e.g. a warm-start reference's):

    * ``final_policy``/``final_snapshots`` read as ``deploy``/``deploy_snapshots``; a run
      recorded before the options existed deployed its last iterate with 10 snapshots;
    * ``deploy_alpha`` at its default, except for ``best-feasible``, whose rule changed (those
      runs selected on the batch mean: they differ from a run made now);
    * ``deploy_shortlist``/``deploy_validation_episodes`` at their defaults, except for
      ``best-feasible``, whose runs before the options deployed the screen's candidate
      without validation (``1``/``0``: they differ from a run made now);
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
            out.setdefault("deploy_shortlist", SHORTLIST)
            out.setdefault("deploy_validation_episodes", None)
        elif "deploy_validation_episodes" not in out:
            out.setdefault("deploy_shortlist", 1)
            out["deploy_validation_episodes"] = 0
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


def validation_size(episodes_trained: int) -> int:
    """Validation episodes per candidate by default: ``ceil(E / VALIDATION_SHARE)`` for ``E``
    training episodes, within ``[VALIDATION_EPISODES, VALIDATION_EPISODES_AUTO_MAX]`` (200 to
    5000): a fixed share of the training's episodes, so the validation's cost follows the
    run's (a gridworld run of 2M steps trains about 180,000 episodes: 900 per candidate; a
    Highway run of 300k steps about 10,000: the floor, 200)."""
    return int(min(VALIDATION_EPISODES_AUTO_MAX, max(VALIDATION_EPISODES, -(-int(episodes_trained) // VALIDATION_SHARE))))


def validation_seeds(episodes: int) -> np.ndarray:
    """The reset seeds of ``episodes`` validation episodes: ``VALIDATION_SEED + i``, the same for
    every candidate (the candidates are compared on the same episodes)."""
    return np.arange(episodes, dtype=np.int64) + np.int64(VALIDATION_SEED)


def validation_bounds(costs: np.ndarray, limits: np.ndarray, indicators: Any, level: float) -> np.ndarray:
    """One-sided ``1 - level`` upper bounds ``(K,)`` of each cost's mean from ``(V, K)`` episodic
    costs of independent episodes: Clopper-Pearson's ``Beta^{-1}(1 - level; x + 1, V - x)`` (1
    when ``x = V``) for an indicator cost whose episodes are all 0 or 1 (``x`` of them 1), else
    Student's ``mean + t_{V-1, 1-level} s' / sqrt(V)`` with ``s' = max(s, c(d) / sqrt(V))``
    (``c(d) = d``, or 1 for ``d = 0``: no spread is read as one episode off by the limit's
    scale, as the harness's verdict reads it)."""
    c = np.asarray(costs, dtype=np.float64)
    c = c.reshape(len(c), -1)
    n = len(c)
    out = np.full(c.shape[1], math.inf)
    if n < 2:
        return out
    for k in range(c.shape[1]):
        x = c[:, k]
        if not np.isfinite(x).all():
            continue
        if bool(np.asarray(indicators)[k]) and bool(np.all((x == 0.0) | (x == 1.0))):
            events = int(np.count_nonzero(x))
            out[k] = 1.0 if events == n else float(stats.beta.ppf(1.0 - level, events + 1, n - events))
        else:
            d = float(limits[k])
            sd = max(float(x.std(ddof=1)), (d if d > 0 else 1.0) / math.sqrt(n))
            out[k] = float(x.mean()) + float(stats.t.ppf(1.0 - level, n - 1)) * sd / math.sqrt(n)
    return out


#: ``play(params, seeds) -> (returns (V,), costs (V, K))``: the learner's sampled policy with the
#: snapshot ``params`` (None: the live policy, the last iterate) on the episodes reset with
#: ``seeds``, each drawing its actions from ``constrained_grpo.sampling.episode_uniforms``
#: (``constrained_grpo.sampling.play_waves``, as the harness plays a batched evaluation in waves).
PlayFn = Callable[[list[torch.Tensor] | None, np.ndarray], tuple[np.ndarray, np.ndarray]]


class FinalPolicyKeeper:
    """Keeps the snapshots the rule ``rule`` deploys from (flat parameter lists, CPU copies).

    ``best-feasible``: ``shortlist`` candidates passing the screen, validated at :meth:`finish`
    on ``validation_episodes`` held-out episodes each (0: no validation, the screen's best is
    deployed), ``indicators`` saying which costs are indicators (Clopper-Pearson)."""

    def __init__(self, rule: str, limits: np.ndarray, snapshots: int = 10, alpha: float = SELECTION_ALPHA,
                 shortlist: int = 1, validation_episodes: int | None = 0, indicators: Any = None):
        check_deploy(rule, snapshots, alpha, shortlist, validation_episodes)
        self.rule = rule
        self.limits = np.asarray(limits, dtype=np.float64)
        self.n = snapshots
        self.alpha = float(alpha)
        self.shortlist_size = int(shortlist)
        #: Episodes per candidate (None: :func:`validation_size` of the episodes trained).
        self.validation_episodes = None if validation_episodes is None else int(validation_episodes)
        #: Training episodes observed (every learn call), which size a default validation.
        self.episodes_seen = 0
        self.indicators = np.zeros(len(self.limits), dtype=bool) if indicators is None else np.asarray(indicators, dtype=bool)
        if self.indicators.shape != self.limits.shape:
            raise ValueError(f"indicators {self.indicators.tolist()} do not match the {len(self.limits)} limit(s)")
        self.kept: list[list[torch.Tensor]] = []
        self.best_return = -math.inf
        self.best_iteration: int | None = None
        #: The selected candidate's batch mean costs, their upper bounds and its group count.
        self.best_cost_mean: list[float] | None = None
        self.best_cost_bound: list[float] | None = None
        self.best_groups: int | None = None
        #: The top ``shortlist`` screened candidates, best batch return first: (params, record).
        self.shortlist: list[tuple[list[torch.Tensor], dict[str, Any]]] = []
        #: What the validation found (None: not validated).
        self.validation: dict[str, Any] | None = None
        self._loaded_params: list[list[torch.Tensor]] = []
        self._loaded_records: list[dict[str, Any]] = []
        self._buffer: list[list[torch.Tensor]] = []
        self._buffer_from = 0.0
        self._iterations = 0

    @property
    def active(self) -> bool:
        """Whether the trainer must copy the parameters before each update."""
        return self.rule != "last"

    @property
    def validates(self) -> bool:
        """Whether :meth:`finish` plays the shortlist's candidates on held-out episodes."""
        return self.rule == "best-feasible" and self.validation_episodes != 0

    def begin(self, start_steps: int, target_steps: int) -> None:
        """A ``learn`` call from ``start_steps`` to ``target_steps`` (the mixture of a new call is
        taken over that call's iterations)."""
        if self.rule != "tail-mixture":
            return
        self._buffer, self._iterations = [], 0
        self._buffer_from = start_steps + BUFFER_FROM * (target_steps - start_steps)

    def observe(self, params: list[torch.Tensor] | None, steps_before: int, steps_after: int,
                batch_return: float, group_costs: np.ndarray, iteration: int, episodes: int | None = None) -> None:
        """The batch collected by ``params`` (the policy before this iteration's update) spanned
        env steps ``[steps_before, steps_after)``, with mean return ``batch_return`` and per-start
        group mean costs ``group_costs`` ``(G, K)`` (one row per start; an episode of its own is a
        group of one), ``episodes`` episodes in all (None: one per row)."""
        if params is None:
            return
        self.episodes_seen += int(len(np.asarray(group_costs)) if episodes is None else episodes)
        if self.rule == "best-feasible":
            costs = np.asarray(group_costs, dtype=np.float64).reshape(-1, len(self.limits))
            if not math.isfinite(batch_return) or len(costs) == 0:
                return
            if batch_return <= self.best_return and not (
                    self.validates and (len(self.shortlist) < self.shortlist_size
                                        or batch_return > self.shortlist[-1][1]["batch_return"])):
                return
            bound = cost_upper_bound(costs, self.alpha)
            if not np.all(bound <= self.limits):
                return
            record = {"iteration": int(iteration), "batch_return": float(batch_return),
                      "cost_mean": [round(float(v), 6) for v in costs.mean(axis=0)],
                      "cost_bound": [round(float(v), 6) for v in bound], "groups": len(costs)}
            if batch_return > self.best_return:
                self._select(params, record)
            if self.validates:  # best batch return first; an equal return keeps the earlier iteration
                self.shortlist.append((params, record))
                self.shortlist.sort(key=lambda c: -c[1]["batch_return"])
                del self.shortlist[self.shortlist_size:]
        elif self.rule == "tail-mixture":
            self._iterations += 1
            if steps_before >= self._buffer_from:
                self._buffer.append(params)

    def _select(self, params: list[torch.Tensor] | None, record: dict[str, Any] | None) -> None:
        """Deploy ``params`` with the screen's ``record`` (None, None: the last iterate)."""
        if params is None or record is None:
            self.kept, self.best_return, self.best_iteration = [], -math.inf, None
            self.best_cost_mean = self.best_cost_bound = self.best_groups = None
            return
        self.kept = [params]
        self.best_return, self.best_iteration = record["batch_return"], record["iteration"]
        self.best_cost_mean, self.best_cost_bound = record["cost_mean"], record["cost_bound"]
        self.best_groups = record["groups"]

    def finish(self, play: PlayFn | None = None) -> None:
        """The end of a ``learn`` call.

        ``tail-mixture`` keeps ``n`` policies of the call's last ``m = ceil(0.2 T)`` iterations,
        member ``j`` the one at position ``floor((j + 1/2) m / n)``. ``best-feasible`` with
        validation plays each of the ``m`` shortlisted candidates with ``play`` on the
        validation episodes and deploys the highest validation return among those whose
        bounds (:func:`validation_bounds`, level ``alpha / ((m + 1) K)``) are all within the
        limits; where none is, the last iterate, itself validated (``play(None, seeds)``). No
        ``play`` (a learner that cannot play episodes): the screen's best, not validated."""
        if self.validates and play is not None:
            self._validate(play)
        if self.rule != "tail-mixture" or not self._buffer:
            return
        m = max(1, math.ceil(TAIL * self._iterations))
        tail = self._buffer[-m:]
        count = min(self.n, len(tail))
        self.kept = [tail[int((j + 0.5) * len(tail) / count)] for j in range(count)]
        self._buffer = []

    def _validate(self, play: PlayFn) -> None:
        start = time.perf_counter()  # recorded with the validation: after training, outside its wall_s
        v = validation_size(self.episodes_seen) if self.validation_episodes is None else self.validation_episodes
        k = len(self.limits)
        seeds = validation_seeds(v)
        # Bonferroni over the m candidates and the last iterate (any of them may be deployed)
        # and the K costs: every recorded bound holds at once with probability >= 1 - alpha.
        level = self.alpha / ((len(self.shortlist) + 1) * k)

        def measure(params: list[torch.Tensor] | None) -> dict[str, Any]:
            returns, costs = play(params, seeds)
            costs = np.asarray(costs, dtype=np.float64).reshape(v, k)
            bound = validation_bounds(costs, self.limits, self.indicators, level)
            return {"return_mean": round(float(np.mean(returns)), 6),
                    "cost_mean": [round(float(c), 6) for c in costs.mean(axis=0)],
                    "cost_bound": [round(float(b), 6) for b in bound], "within": bool(np.all(bound <= self.limits))}

        candidates = []
        for params, record in self.shortlist:
            candidates.append({"iteration": record["iteration"], "batch_return": record["batch_return"], **measure(params)})
        passing = [j for j, c in enumerate(candidates) if c["within"]]
        out: dict[str, Any] = {"episodes": v, "first_seed": int(seeds[0]), "last_seed": int(seeds[-1]),
                               "level": level, "candidates": candidates}
        if passing:  # the highest validation return; a tie keeps the higher batch return
            j = max(passing, key=lambda i: (candidates[i]["return_mean"], -i))
            self._select(*self.shortlist[j])
            chosen = candidates[j]
            out["deployed"] = chosen["iteration"]
        else:
            self._select(None, None)
            chosen = measure(None)
            out["deployed"] = "last"
            out["last"] = chosen
        out.update({"return_mean": chosen["return_mean"], "cost_mean": chosen["cost_mean"], "cost_bound": chosen["cost_bound"],
                    "wall_s": round(time.perf_counter() - start, 3)})
        self.validation = out

    def deployed(self) -> list[list[torch.Tensor]]:
        """The parameter lists deployed (empty: the last iterate, also where nothing qualified)."""
        return list(self.kept)

    # --- persistence ------------------------------------------------------------------
    def tensors(self) -> dict[str, torch.Tensor]:
        """``final.<snapshot>.<param>`` for safetensors, and the shortlist's ``shortlist.<j>.<param>``."""
        out = {f"final.{j}.{i}": p.clone() for j, ps in enumerate(self.kept) for i, p in enumerate(ps)}
        out.update({f"shortlist.{j}.{i}": p.clone() for j, (ps, _) in enumerate(self.shortlist) for i, p in enumerate(ps)})
        return out

    def load_tensors(self, tensors: dict[str, torch.Tensor]) -> None:
        found: dict[str, dict[int, dict[int, torch.Tensor]]] = {"final": {}, "shortlist": {}}
        for name, value in tensors.items():
            head, _, rest = name.partition(".")
            if head in found:
                j, i = rest.split(".")
                found[head].setdefault(int(j), {})[int(i)] = value
        lists = {h: [[f[j][i].clone() for i in range(len(f[j]))] for j in range(len(f))] for h, f in found.items()}
        self.kept = lists["final"]
        self._loaded_params = lists["shortlist"]
        self._join_shortlist()

    def _join_shortlist(self) -> None:
        """The shortlist from its loaded parameters and records (either may be loaded first)."""
        if len(self._loaded_params) == len(self._loaded_records):
            self.shortlist = list(zip(self._loaded_params, self._loaded_records, strict=True))

    def state(self) -> dict[str, Any]:
        """JSON-safe: the rule, the snapshots kept and, for ``best-feasible``, the deployed
        iteration with its batch mean costs, the screen's bounds, its group count and the level
        (None where the last iterate is deployed), and ``validation``: the validation episodes,
        their seeds and level, each candidate's validation return, mean costs and bounds, and
        the deployed policy's (``deployed``: its iteration, or ``"last"``)."""
        out: dict[str, Any] = {"rule": self.rule, "kept": len(self.kept)}
        if self.rule == "best-feasible":
            out.update({"best_return": None if not math.isfinite(self.best_return) else self.best_return,
                        "best_iteration": self.best_iteration, "cost_mean": self.best_cost_mean,
                        "cost_bound": self.best_cost_bound, "groups": self.best_groups, "alpha": self.alpha})
            if self.validates:
                out["episodes_seen"] = self.episodes_seen
                out["shortlist"] = [c[1] for c in self.shortlist]
                out["validation"] = self.validation
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
        self.validation = state.get("validation")
        self.episodes_seen = int(state.get("episodes_seen", 0))
        self._loaded_records = [dict(r) for r in state.get("shortlist") or []]
        self._join_shortlist()



class DeploymentSet:
    """One training, several deployment rules: a keeper per rule, all fed the same snapshots.

    It stands where an agent holds its :class:`FinalPolicyKeeper` and forwards training's
    calls (:meth:`begin`, :meth:`observe`, :meth:`finish`) to every keeper; what is deployed,
    recorded and saved (:meth:`deployed`, :meth:`state`, :meth:`tensors`) is the keeper of
    the rule in use (:meth:`use`). Each keeper sees exactly what it would see alone (the
    snapshots are copies nothing writes to), so a rule's deployed policy and record are those
    of a run trained with that rule by itself, and the last iterate is the same policy."""

    def __init__(self, keepers: dict[str, FinalPolicyKeeper], rule: str):
        if rule not in keepers:
            raise ValueError(f"deploy={rule!r} is not among the kept rules {sorted(keepers)}")
        self.keepers = dict(keepers)
        self.current = keepers[rule]

    @classmethod
    def around(cls, keeper: "FinalPolicyKeeper | DeploymentSet", rules: list[str] | tuple[str, ...]) -> "DeploymentSet":
        """``keeper``'s rule and ``rules``, each kept with ``keeper``'s options (limits,
        snapshots, level, shortlist, validation size, indicator costs)."""
        base = keeper.current if isinstance(keeper, DeploymentSet) else keeper
        keepers = dict(keeper.keepers) if isinstance(keeper, DeploymentSet) else {base.rule: base}
        for rule in rules:
            if rule not in keepers:
                keepers[rule] = FinalPolicyKeeper(rule, base.limits, base.n, base.alpha, base.shortlist_size,
                                                  base.validation_episodes, base.indicators)
        return cls(keepers, base.rule)

    def use(self, rule: str) -> None:
        """Deploy, record and save ``rule``'s policy from now on."""
        if rule not in self.keepers:
            raise ValueError(f"deploy={rule!r} was not kept during training; kept: {sorted(self.keepers)}")
        self.current = self.keepers[rule]

    @property
    def rule(self) -> str:
        return self.current.rule

    @property
    def active(self) -> bool:
        return any(k.active for k in self.keepers.values())

    @property
    def validates(self) -> bool:
        return self.current.validates

    def begin(self, start_steps: int, target_steps: int) -> None:
        for keeper in self.keepers.values():
            keeper.begin(start_steps, target_steps)

    def observe(self, params: list[torch.Tensor] | None, steps_before: int, steps_after: int,
                batch_return: float, group_costs: np.ndarray, iteration: int, episodes: int | None = None) -> None:
        for keeper in self.keepers.values():
            keeper.observe(params, steps_before, steps_after, batch_return, group_costs, iteration, episodes)

    def finish(self, play: PlayFn | None = None) -> None:
        for keeper in self.keepers.values():
            keeper.finish(play)

    def deployed(self) -> list[list[torch.Tensor]]:
        return self.current.deployed()

    def tensors(self) -> dict[str, torch.Tensor]:
        return self.current.tensors()

    def load_tensors(self, tensors: dict[str, torch.Tensor]) -> None:
        self.current.load_tensors(tensors)

    def state(self) -> dict[str, Any]:
        return self.current.state()

    def load_state(self, state: dict[str, Any] | None) -> None:
        self.current.load_state(state)


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
