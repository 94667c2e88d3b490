"""Second-order constrained baselines: ``trpo-lag``, ``cpo`` and ``pcpo``.

Each iteration linearises the objectives around the rollout policy ``theta_0`` and bounds
the step by the mean KL divergence, whose Hessian ``H`` (the Fisher matrix) enters only
through products ``H v`` (Pearlmutter's trick: the gradient of ``grad KL . v``):

    g   = grad_theta  E[ratio * A]            (reward surrogate, or the Lagrangian one)
    b_k = L grad_theta  E[ratio * A_ck]       (cost surrogate of constraint k)
    c_k = Jhat_k - d_k                        (the current violation)

where ``L`` is the rollout's mean episode length (its steps over its episode starts):
by the performance-difference lemma for undiscounted episodes,
``J_k(theta) - J_k(theta_0) ~ L E[ratio A_ck]``, so ``b_k' x`` and ``c_k`` are both in
episodic cost units, as the linearised constraint ``c_k + b_k' x <= 0`` needs.
    q = g' H^-1 g,  r_k = g' H^-1 b_k,  S_kl = b_k' H^-1 b_l

with ``H^-1 v`` by conjugate gradients (``cg_iters`` steps, damping ``cg_damping``).
The step ``x`` then goes through a backtracking line search (``x * coef^j``) that
accepts the first candidate with ``KL <= delta``, a reward surrogate that does not fall
(TRPO-Lag, and CPO from a feasible start; from an infeasible one, and in PCPO's
projection, reward may be traded for feasibility) and, for CPO and PCPO, predicted cost changes ``<= max(-c_k, 0)``
(OmniSafe's acceptance rule). The critics are fitted afterwards by
minibatch Adam (:meth:`ConstrainedPolicyOptimization.fit_critics`).

The conjugate gradients and the line search are the standard ones of TRPO (Schulman et
al. 2015), as in sb3-contrib's ``TRPO``; they are written here on flat parameter
vectors so that the same code serves the constrained steps. The ``K + 1`` solves run in
lock-step (:func:`block_conjugate_gradient`), each iteration one vmapped backward pass
through ``grad KL`` (built once per update) for all of them, and ``H`` is estimated on
every ``fisher_subsample``-th state of the rollout.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch as th
from scipy.optimize import minimize
from stable_baselines3.common.vec_env import VecEnv

from constrained_grpo.baselines.config import PPOLagConfig
from constrained_grpo.baselines.constrained_base import (
    ConstrainedPolicyOptimization,
    actor_parameters,
    kl_per_state,
    lag_model_kwargs,
)
from constrained_grpo.baselines.ppo_lagrangian import normalize_advantage
from constrained_grpo.constraints import Constraint
from constrained_grpo.multipliers import Multiplier

__all__ = [
    "CPO",
    "PCPO",
    "TRPOLagrangian",
    "TrustRegionConfig",
    "block_conjugate_gradient",
    "conjugate_gradient",
    "cpo_step_coefficients",
    "cpo_dual_step",
    "min_norm_feasible",
    "pcpo_step",
]


# --- the math, on plain arrays (unit-tested by hand) ------------------------------------
def conjugate_gradient(avp: Callable[[th.Tensor], th.Tensor], b: th.Tensor, iters: int = 15, tol: float = 1e-10) -> th.Tensor:
    """Approximately solve ``A x = b`` for symmetric positive-definite ``A`` given by
    products ``avp(v) = A v`` (Hestenes & Stiefel 1952); exact in ``dim`` steps."""
    return block_conjugate_gradient(lambda v: avp(v[:, 0])[:, None], b[:, None], iters, tol)[:, 0]


def block_conjugate_gradient(
    avp: Callable[[th.Tensor], th.Tensor], b: th.Tensor, iters: int = 15, tol: float = 1e-10
) -> th.Tensor:
    """``m`` conjugate-gradient solves of ``A x_j = b_j`` in lock-step: ``b`` is ``(P, m)``
    and ``avp(V) = A V`` takes all ``m`` directions at once (one batched Fisher-vector
    product per iteration instead of ``m``). Each column runs its own recursion
    (its own step sizes), as ``m`` separate solves would; a column whose residual
    ``r'r <= tol`` stops moving."""
    x = th.zeros_like(b)
    r = b.clone()
    p = b.clone()
    rr = (r * r).sum(dim=0)
    for _ in range(iters):
        active = rr > tol
        if not bool(active.any()):
            break
        ap = avp(p)
        alpha = th.where(active, rr / ((p * ap).sum(dim=0) + 1e-12), th.zeros_like(rr))
        x += alpha * p
        r -= alpha * ap
        rr_new = (r * r).sum(dim=0)
        p = r + th.where(active, rr_new / th.where(active, rr, th.ones_like(rr)), th.zeros_like(rr)) * p
        rr = rr_new
    return x


def cpo_step_coefficients(q: float, r: float, s: float, c: float, delta: float, eps: float = 1e-8) -> tuple[float, float, str]:
    """CPO's closed form for one constraint (Achiam et al. 2017, Theorem 2 / Appendix 10.2).

    Solves ``max_x g'x  s.t.  b'x + c <= 0,  x'Hx / 2 <= delta`` and returns
    ``(alpha_g, alpha_b, case)`` with the step ``x = alpha_g H^-1 g - alpha_b H^-1 b``:

    * ``trpo``: the whole trust region is feasible (``c < 0`` and ``B < 0``) or the cost
      gradient vanishes: ``x = sqrt(2 delta / q) H^-1 g``;
    * ``recovery``: no point of the trust region is feasible (``c > 0`` and ``B < 0``):
      ``x = -sqrt(2 delta / s) H^-1 b``, the steepest decrease of the cost;
    * ``dual``: with ``A = q - r^2/s``, ``B = 2 delta - c^2/s``, maximise the dual over
      ``lambda`` on the two pieces ``Lambda_a = {lambda c + r > 0}`` (constraint active),
      ``f_a = -(A/lambda + B lambda)/2 + r c / s``, and ``Lambda_b = {lambda c + r <= 0}``,
      ``f_b = -(q/lambda + 2 delta lambda)/2``, each at its stationary point
      (``sqrt(A/B)``, ``sqrt(q / 2 delta)``) projected onto the piece; then
      ``nu = max(0, lambda c + r) / s`` and ``x = (H^-1 g - nu H^-1 b) / lambda``.
    """
    if s <= eps:
        return math.sqrt(2 * delta / max(q, eps)), 0.0, "trpo"
    big_a = max(q - r * r / s, 0.0)  # >= 0 by Cauchy-Schwarz
    big_b = 2 * delta - c * c / s
    if big_b < 0:
        if c < 0:
            return math.sqrt(2 * delta / max(q, eps)), 0.0, "trpo"
        return 0.0, math.sqrt(2 * delta / s), "recovery"
    # The pieces of [0, inf) where the constraint binds (a) or not (b).
    inf = math.inf
    if c > 0:
        piece_a, piece_b = (max(0.0, -r / c), inf), (0.0, max(0.0, -r / c))
    elif c < 0:
        piece_a, piece_b = ((0.0, -r / c) if r > 0 else None), (max(0.0, -r / c), inf)
    else:
        piece_a, piece_b = ((0.0, inf), None) if r > 0 else (None, (0.0, inf))

    def f_a(lam: float) -> float:
        return -0.5 * (big_a / lam + big_b * lam) + r * c / s if lam > 0 else -inf

    def f_b(lam: float) -> float:
        return -0.5 * (q / lam + 2 * delta * lam) if lam > 0 else -inf

    candidates = []
    if piece_a is not None:
        lam = min(max(math.sqrt(big_a / big_b) if big_b > 0 else inf, piece_a[0]), piece_a[1])
        candidates.append((f_a(lam), lam))
    if piece_b is not None:
        lam = min(max(math.sqrt(q / (2 * delta)), piece_b[0]), piece_b[1])
        candidates.append((f_b(lam), lam))
    value, lam = max(candidates)
    if not (math.isfinite(value) and 0 < lam < inf):
        return math.sqrt(2 * delta / max(q, eps)), 0.0, "trpo"
    nu = max(0.0, lam * c + r) / s
    return 1.0 / lam, nu / lam, "dual"


def _nonneg_qp(S: np.ndarray, v: np.ndarray) -> np.ndarray:
    """``argmin_{mu >= 0} mu' S mu / 2 - mu' v`` for small PSD ``S`` (L-BFGS-B)."""
    k = len(v)
    if k == 1:
        return np.array([max(0.0, v[0] / S[0, 0])]) if S[0, 0] > 0 else np.zeros(1)
    res = minimize(
        lambda mu: (0.5 * mu @ S @ mu - mu @ v, S @ mu - v),
        np.zeros(k), jac=True, method="L-BFGS-B", bounds=[(0.0, None)] * k,
        options={"ftol": 1e-15, "gtol": 1e-12, "maxiter": 500},
    )
    return np.maximum(res.x, 0.0)


def min_norm_feasible(S: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, float]:
    """The smallest step (in the ``H`` norm) onto the linearised feasible set
    ``{x : B'x + c <= 0}``: ``x = -H^-1 B mu`` with ``mu = argmin_{mu>=0} mu'S mu/2 - mu'c``;
    returns ``(mu, x'Hx = mu' S mu)``."""
    mu = _nonneg_qp(S, c)
    return mu, float(mu @ S @ mu)


def cpo_dual_step(q: float, r: np.ndarray, S: np.ndarray, c: np.ndarray, delta: float, eps: float = 1e-8) -> tuple[float, np.ndarray, str]:
    """CPO for K >= 1 constraints: ``(alpha_g, beta, case)`` with the step
    ``x = alpha_g H^-1 g - H^-1 B beta``.

    * ``recovery``: the trust region misses the linearised feasible set (the smallest
      feasible step has ``x'Hx > 2 delta``): that step scaled back to the boundary,
      ``beta = sqrt(2 delta / mu'S mu) mu`` (for K = 1, ``-sqrt(2 delta / s) H^-1 b``);
    * ``trpo``: the TRPO step ``sqrt(2 delta / q) H^-1 g`` already satisfies every
      linearised constraint;
    * ``dual``: minimise the dual ``D(nu) = sqrt(2 delta Q(nu)) - nu'c`` over ``nu >= 0``,
      ``Q(nu) = q - 2 nu'r + nu'S nu`` (the optimal ``lambda = sqrt(Q / 2 delta)`` already
      substituted), then ``x = H^-1 (g - B nu) / lambda``.
    """
    r, S, c = np.asarray(r, float), np.asarray(S, float), np.asarray(c, float)
    mu, norm2 = min_norm_feasible(S, c)
    if norm2 > 2 * delta:
        return 0.0, math.sqrt(2 * delta / norm2) * mu, "recovery"
    alpha = math.sqrt(2 * delta / max(q, eps))
    if np.all(alpha * r + c <= 0):
        return alpha, np.zeros_like(c), "trpo"

    def dual(nu: np.ndarray) -> tuple[float, np.ndarray]:
        big_q = max(q - 2 * nu @ r + nu @ S @ nu, eps)
        root = math.sqrt(2 * delta * big_q)
        return root - nu @ c, 2 * delta * (S @ nu - r) / root - c

    start = mu if mu.any() else np.full_like(c, 1.0)
    res = minimize(dual, start, jac=True, method="L-BFGS-B", bounds=[(0.0, None)] * len(c),
                   options={"ftol": 1e-15, "gtol": 1e-12, "maxiter": 1000})
    nu = np.maximum(res.x, 0.0)
    lam = math.sqrt(max(q - 2 * nu @ r + nu @ S @ nu, eps) / (2 * delta))
    return 1.0 / lam, nu / lam, "dual"


def pcpo_step(q: float, r: np.ndarray, S: np.ndarray, c: np.ndarray, delta: float, eps: float = 1e-8) -> tuple[float, np.ndarray]:
    """PCPO (Yang et al. 2020, KL projection): ``(alpha_g, beta)`` with the step
    ``x = alpha_g H^-1 g - H^-1 B beta``.

    First the TRPO reward step ``x_r = sqrt(2 delta / q) H^-1 g``; then its projection in
    the ``H`` norm onto ``{x : B'x + c <= 0}``: ``x = x_r - H^-1 B mu`` with
    ``mu = argmin_{mu>=0} mu'S mu / 2 - mu'(B'x_r + c)``; for K = 1,
    ``mu = max(0, (sqrt(2 delta / q) r + c) / s)`` (the paper's eq. 7).
    """
    r, S, c = np.asarray(r, float), np.asarray(S, float), np.asarray(c, float)
    alpha = math.sqrt(2 * delta / max(q, eps))
    return alpha, _nonneg_qp(S, alpha * r + c)


# --- the config -----------------------------------------------------------------------
@dataclass(frozen=True)
class TrustRegionConfig(PPOLagConfig):
    """PPO-Lagrangian's config plus the trust region (OmniSafe's TRPO-family defaults:
    ``target_kl`` 0.01, ``cg_iters`` 15, ``cg_damping`` 0.1, 15 backtracking steps of 0.8)."""

    trust_region_kl: float = 0.01
    """delta: the bound on the mean ``KL(pi_old || pi)`` of one actor step."""
    cg_iters: int = 15
    """Conjugate-gradient steps per ``H^-1 v``."""
    cg_damping: float = 0.1
    """Added to the Fisher matrix: ``(H + damping I) v``."""
    line_search_steps: int = 15
    """Backtracking candidates ``x * coef^j``, j = 0 .. steps - 1."""
    line_search_coef: float = 0.8
    """Shrink factor of the line search."""
    fisher_subsample: int = 8
    """The Fisher-vector products use every ``fisher_subsample``-th state of the (shuffled)
    rollout; the gradients and the line search use all of it (TRPO's 10% of the data,
    Schulman et al. 2015; sb3-contrib ``sub_sampling_factor``, OmniSafe ``fvp_sample_freq``)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not (math.isfinite(self.trust_region_kl) and self.trust_region_kl > 0):
            raise ValueError(f"trust_region_kl={self.trust_region_kl!r} must be a finite number > 0, e.g. 0.01")
        for name in ("cg_iters", "line_search_steps", "fisher_subsample"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name}={value!r} must be an integer >= 1")
        if not self.cg_damping >= 0:
            raise ValueError(f"cg_damping={self.cg_damping!r} must be >= 0")
        if not 0 < self.line_search_coef < 1:
            raise ValueError(f"line_search_coef={self.line_search_coef!r} must lie in (0, 1), e.g. 0.8")

    def trust_region_kwargs(self) -> dict[str, Any]:
        """The trust-region keywords of :class:`TrustRegionBase` that this config sets."""
        return dict(
            trust_region_kl=self.trust_region_kl, cg_iters=self.cg_iters, cg_damping=self.cg_damping,
            line_search_steps=self.line_search_steps, line_search_coef=self.line_search_coef,
            fisher_subsample=self.fisher_subsample,
        )

    def build_model(self, env: VecEnv, constraints: Sequence[Constraint], multiplier: Multiplier, sb3_kwargs: dict[str, Any]) -> "TrustRegionBase":
        return self.model_class()(env, constraints, multiplier, **self.trust_region_kwargs(), **lag_model_kwargs(self), **sb3_kwargs)

    def model_class(self) -> type["TrustRegionBase"]:
        raise NotImplementedError


@dataclass(frozen=True)
class TRPOLagConfig(TrustRegionConfig):
    """``trpo-lag``: TRPO on the Lagrangian advantage."""

    def model_class(self) -> type["TrustRegionBase"]:
        return TRPOLagrangian


@dataclass(frozen=True)
class CPOConfig(TrustRegionConfig):
    """``cpo``: Constrained Policy Optimization."""

    def model_class(self) -> type["TrustRegionBase"]:
        return CPO


@dataclass(frozen=True)
class PCPOConfig(TrustRegionConfig):
    """``pcpo``: Projection-based CPO."""

    def model_class(self) -> type["TrustRegionBase"]:
        return PCPO


# --- the algorithms -------------------------------------------------------------------
class TrustRegionBase(ConstrainedPolicyOptimization):
    """The shared trust-region actor step (module docstring); subclasses give the step
    direction from ``(x_g = H^-1 g, X_b = H^-1 B, q, r, S, c)``."""

    actor_step_trains_critics = False
    uses_costs = True  # whether the step needs b_k, r_k, S (TRPO-Lag does not)
    check_reward = True  # whether the line search requires the reward surrogate not to fall
    #: How the KL of a multi-dimensional Gaussian policy combines its dimensions: "sum" (the
    #: KL of the joint distribution) or "mean" (OmniSafe 0.5.0's trust region).
    kl_over_actions = "sum"

    def __init__(
        self,
        *args: Any,
        trust_region_kl: float = 0.01,
        cg_iters: int = 15,
        cg_damping: float = 0.1,
        line_search_steps: int = 15,
        line_search_coef: float = 0.8,
        fisher_subsample: int = 1,
        **kwargs: Any,
    ):
        self.trust_region_kl = trust_region_kl
        self.cg_iters = cg_iters
        self.cg_damping = cg_damping
        self.line_search_steps = line_search_steps
        self.line_search_coef = line_search_coef
        self.fisher_subsample = fisher_subsample
        self.last_case = ""
        super().__init__(*args, **kwargs)

    def violation(self) -> np.ndarray:
        """``c_k = Jhat_k - d_k`` (before any episode ended: ``-d_k``, i.e. no cost yet)."""
        limits = np.array([con.limit for con in self.constraints])
        estimate = self.cost_estimate if self.cost_estimate is not None else np.zeros_like(limits)
        return np.asarray(estimate, float) - limits

    def _mix_advantages(self) -> None:
        # CPO and PCPO take the reward advantage; the cost advantages stay apart.
        buf = self.rollout_buffer
        shape = buf.reward_advantages.shape
        adv = normalize_advantage(buf.reward_advantages.reshape(-1), self.reward_advantage_norm)
        buf.advantages = adv.reshape(shape).astype(np.float32)

    def direction(self, q: float, r: np.ndarray, S: np.ndarray, c: np.ndarray) -> tuple[float, np.ndarray, str]:
        raise NotImplementedError

    def _update_actor(self) -> dict[str, float]:
        data = self.full_batch()
        params = actor_parameters(self.policy)
        obs, actions = data.observations, self._actions(data)
        with th.no_grad():
            # SB3 reuses one distribution object per policy: keep this one's tensors apart.
            old = copy.copy(self.policy.get_distribution(obs))
        cost_adv = th.as_tensor(
            normalize_advantage(data.cost_advantages.cpu().numpy(), self.cost_advantage_norm), dtype=th.float32
        )

        def surrogates() -> tuple[th.Tensor, th.Tensor, Any]:
            dist = self.policy.get_distribution(obs)
            ratio = th.exp(dist.log_prob(actions) - data.old_log_prob)
            return (ratio * data.advantages).mean(), (ratio[:, None] * cost_adv).mean(dim=0), dist

        def flat_grads(ys: th.Tensor, batched: th.Tensor | None = None, **kw: Any) -> th.Tensor:
            """``d ys / d theta`` flattened; with ``batched`` ``(m, n)`` cotangents, the ``m``
            products ``batched_j' (d ys / d theta)`` as an ``(m, P)`` matrix (one vmapped backward)."""
            grads = th.autograd.grad(ys, params, grad_outputs=batched, is_grads_batched=batched is not None,
                                     allow_unused=True, **kw)
            lead = () if batched is None else (batched.shape[0],)
            return th.cat([(gr if gr is not None else th.zeros(*lead, *p.shape)).reshape(*lead, -1)
                           for gr, p in zip(grads, params)], dim=-1)

        # grad KL(pi_old || pi_theta) at theta_0 with its graph, built once: every Fisher-vector
        # product of every solve is then one backward pass through it, H V = d(grad_kl' V)/d theta.
        fisher_obs = obs[:: self.fisher_subsample]
        with th.no_grad():
            fisher_old = old if self.fisher_subsample == 1 else copy.copy(self.policy.get_distribution(fisher_obs))
        kl = kl_per_state(fisher_old, self.policy.get_distribution(fisher_obs), self.kl_over_actions).mean()
        grad_kl = flat_grads(kl, create_graph=True)

        def fvp(v: th.Tensor) -> th.Tensor:  # (P, m) -> (H + damping I)(P, m)
            return flat_grads(grad_kl, v.T.contiguous(), retain_graph=True).T + self.cg_damping * v

        reward_surr, cost_surr, _ = surrogates()
        k = self.n_costs
        c = self.violation()
        scale = 1.0
        if self.uses_costs:
            # g and the K cost gradients b_k in one vmapped backward; then the K + 1 solves in lock-step.
            scale = self.mean_episode_length()
            cost_surr = scale * cost_surr
            grads = flat_grads(th.cat([reward_surr[None], cost_surr]), th.eye(k + 1)).T
            solved = block_conjugate_gradient(fvp, grads, self.cg_iters)
            g, b, x_g, x_b = grads[:, 0], grads[:, 1:], solved[:, 0], solved[:, 1:]
            r = (g @ x_b).double().numpy()
            S = (b.T @ x_b).double().numpy()
            S = 0.5 * (S + S.T)
        else:
            g = flat_grads(reward_surr)
            x_g = block_conjugate_gradient(fvp, g[:, None], self.cg_iters)[:, 0]
            x_b = th.zeros((g.numel(), k))
            r, S = np.zeros(k), np.eye(k)
        q = float(g @ x_g)
        alpha, beta, case = self.direction(q, r, S, c)
        self.last_case = case
        step = alpha * x_g - x_b @ th.as_tensor(beta, dtype=x_g.dtype)

        theta0 = th.cat([p.detach().reshape(-1) for p in params])
        old_reward, old_cost = reward_surr.item(), cost_surr.detach().numpy()
        accepted, kl_value = 0.0, 0.0
        with th.no_grad():
            for j in range(self.line_search_steps):
                frac = self.line_search_coef**j
                _set_flat(params, theta0 + frac * step)
                new_reward, new_cost, dist = surrogates()
                new_cost = scale * new_cost
                kl_value = kl_per_state(old, dist, self.kl_over_actions).mean().item()
                ok = math.isfinite(new_reward.item()) and kl_value <= self.trust_region_kl
                # From an infeasible start CPO may trade reward for feasibility (OmniSafe: optim_case 1).
                if ok and self.check_reward and case != "recovery" and not (self.uses_costs and np.any(c > 0)):
                    ok = new_reward.item() >= old_reward
                if ok and self.uses_costs:
                    ok = bool(np.all(new_cost.numpy() - old_cost <= np.maximum(-c, 0.0) + 1e-12))
                if ok:
                    accepted = frac
                    break
            else:
                _set_flat(params, theta0)
                kl_value = 0.0
        self._n_updates += 1
        self.logger.record("train/line_search_fraction", accepted)
        self.logger.record("train/step_case", case)
        return {"policy_gradient_loss": -old_reward, "approx_kl": kl_value}


def _set_flat(params: list[th.nn.Parameter], flat: th.Tensor) -> None:
    offset = 0
    for p in params:
        n = p.numel()
        p.data.copy_(flat[offset : offset + n].view_as(p))
        offset += n


class TRPOLagrangian(TrustRegionBase):
    """TRPO-Lagrangian (Ray, Achiam & Amodei 2019; OmniSafe ``TRPOLag``).

    TRPO (Schulman et al. 2015) on PPO-Lagrangian's advantage
    ``A = (A_r - sum_k lambda_k A_ck) / (1 + sum_k lambda_k)``:
    ``x = sqrt(2 delta / g'H^-1 g) H^-1 g`` with ``g = grad E[ratio A]``, then the line
    search; the multipliers follow the configured rule on ``Jhat_k - d_k`` (any K).
    """

    uses_costs = False

    def _mix_advantages(self) -> None:
        super(TrustRegionBase, self)._mix_advantages()

    def direction(self, q: float, r: np.ndarray, S: np.ndarray, c: np.ndarray) -> tuple[float, np.ndarray, str]:
        return math.sqrt(2 * self.trust_region_kl / max(q, 1e-8)), np.zeros_like(c), "trpo"


class CPO(TrustRegionBase):
    """Constrained Policy Optimization (Achiam, Held, Tamar & Abbeel 2017).

    Per iteration: ``max_x g'x  s.t.  b_k'x + c_k <= 0 (k = 1..K),  x'Hx / 2 <= delta``.
    For K = 1 the closed form of :func:`cpo_step_coefficients` (the paper's Theorem 2,
    with the infeasible-recovery step ``-sqrt(2 delta / s) H^-1 b``); for K > 1 the
    (K-dimensional, convex) dual of :func:`cpo_dual_step`, minimised numerically, with
    the recovery step towards the nearest point of the linearised feasible set. The
    ``multipliers`` record the last step's ``nu_k`` (CPO keeps no multiplier between
    iterations; the configured rule is not used).
    """

    def _update_multipliers(self, finished: list[np.ndarray]) -> None:
        self._estimate_costs(finished)  # only the estimate: CPO's nu is solved afresh every iteration

    def direction(self, q: float, r: np.ndarray, S: np.ndarray, c: np.ndarray) -> tuple[float, np.ndarray, str]:
        if len(c) == 1:
            alpha, beta, case = cpo_step_coefficients(q, float(r[0]), float(S[0, 0]), float(c[0]), self.trust_region_kl)
            beta_vec = np.array([beta])
        else:
            alpha, beta_vec, case = cpo_dual_step(q, r, S, c, self.trust_region_kl)
        # nu = beta / alpha (x = (H^-1 g - nu H^-1 B) / lambda, alpha = 1 / lambda).
        nu = beta_vec / alpha if alpha > 0 else beta_vec
        self.multiplier.values = np.clip(nu, 0.0, self.multiplier.config.lambda_max).astype(np.float64)
        return alpha, beta_vec, case


class PCPO(CPO):
    """Projection-based Constrained Policy Optimization (Yang, Rosca, Narasimhan &
    Ramadge 2020), KL projection: the TRPO reward step, then its projection in the ``H``
    norm onto the linearised constraints (:func:`pcpo_step`; any K, the K = 1 case
    being the paper's closed form). ``multipliers`` record ``nu_k = mu_k / alpha``, the
    projection's weight in CPO's form ``x = alpha (H^-1 g - sum_k nu_k H^-1 b_k)``."""

    check_reward = False

    def direction(self, q: float, r: np.ndarray, S: np.ndarray, c: np.ndarray) -> tuple[float, np.ndarray, str]:
        alpha, mu = pcpo_step(q, r, S, c, self.trust_region_kl)
        nu = mu / alpha if alpha > 0 else mu  # x = alpha (H^-1 g - nu H^-1 B), as CPO's nu
        self.multiplier.values = np.clip(nu, 0.0, self.multiplier.config.lambda_max).astype(np.float64)
        return alpha, mu, "projection" if mu.any() else "trpo"
