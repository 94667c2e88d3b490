"""Lagrange multipliers, one per constraint, with their update rules.

The Lagrangian of ``max_pi J_r(pi) s.t. J_k(pi) <= d_k`` is

    L(pi, lambda) = J_r(pi) - sum_k lambda_k (J_k(pi) - d_k),   lambda_k >= 0,

and every rule below is a step of (approximate) dual ascent on ``lambda`` driven by
the batch estimate ``Jhat_k`` of the episodic cost, except CRPO's switch, which has no
dual variable. The GRPO agent and the PPO-Lagrangian baselines share these classes: one
implementation of each rule.

All classes hold the K multipliers as a float64 array ``values`` and expose
``update(mean_costs) -> values``, ``weights(mean_costs)`` (the reward weight and the
multipliers the policy step on a batch with that cost estimate uses: ``(1, values)`` but
for the augmented Lagrangian and CRPO), ``state_dict()`` and ``load_state_dict()``.
``warmup`` updates are skipped at the start (the multipliers keep ``init``), and every
rule projects onto ``[0, lambda_max]``.

Plain primal-dual updates converge on average, not in the last iterate (the policy and the
multiplier cycle around the saddle; ReLOAD, arXiv 2302.01275). The rules with a published
last-iterate guarantee (for tabular policies and exact gradients, docs/papers.md) are
``dual_ascent`` and ``regularized`` with ``optimistic=True`` (optimistic gradient ascent on
the multiplier, to be paired with the optimistic policy step of the agent), ``regularized``
(RPG-PD's ``- tau lambda``, to a point biased by ``tau lambda*``) and ``augmented`` (the
augmented Lagrangian); ``crpo``'s guarantee is for the mixture of its feasible iterates. How
often their final policies meet the limits in the suite is measured, not assumed
(``results/last_iterate/``).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, ClassVar

import numpy as np

from constrained_grpo.options import with_options

__all__ = [
    "MULTIPLIER_RULES",
    "AdamMultiplier",
    "AugmentedLagrangianMultiplier",
    "CRPOSwitch",
    "DualAscentMultiplier",
    "LogSGDMultiplier",
    "Multiplier",
    "MultiplierConfig",
    "PIDMultiplier",
    "RegularizedMultiplier",
    "make_multiplier",
]


@dataclass(frozen=True)
class MultiplierConfig:
    """How the Lagrange multipliers are updated.

    Shared by every constrained agent (``cgrpo``, ``grpo-screw``, ``ppo-lag``, ...).
    """

    # --- rule and scale -------------------------------------------------------
    rule: str = "dual_ascent"
    """One of ``dual_ascent`` (projected dual ascent; MASA, FSRL), ``log_sgd`` (SGD on
    log lambda; safe-rlhf), ``adam`` (Adam on lambda; OmniSafe, SafePO), ``pid`` (PID
    Lagrangian; Stooke, Achiam & Abbeel 2020), ``regularized`` (RPG-PD, Ding et al. 2023),
    ``augmented`` (the augmented Lagrangian) or ``crpo`` (CRPO's switch, Xu, Liang & Lan 2021)."""
    lr: float = 0.05
    """Step size eta of ``dual_ascent``, ``log_sgd``, ``adam``, ``regularized`` and
    ``augmented``."""
    init: float = 0.0
    """Initial value of every multiplier (``log_sgd`` needs ``init > 0``)."""
    lambda_max: float = 100.0
    """Upper bound of the projection ``[0, lambda_max]``."""
    normalize: bool = False
    """Divide the violation ``Jhat_k - d_k`` by ``d_k`` (when ``d_k > 0``) so that one
    step size suits limits of different scales; the PID rule divides its derivative term
    (the rise of the cost) by ``d_k`` as well."""
    warmup: int = 0
    """Number of initial ``update`` calls that leave the multipliers at ``init``."""

    # --- Adam (OmniSafe's Lagrange optimiser) ---------------------------------
    adam_beta1: float = 0.9
    """Adam's first-moment decay."""
    adam_beta2: float = 0.999
    """Adam's second-moment decay."""
    adam_eps: float = 1e-8
    """Adam's denominator guard."""

    # --- PID Lagrangian (Stooke et al. 2020) ----------------------------------
    kp: float = 0.1
    """Proportional gain on the (EMA-smoothed) violation."""
    ki: float = 0.01
    """Integral gain; the integral is clamped to ``[0, min(integral_max, lambda_max)]``
    (anti wind-up)."""
    kd: float = 0.01
    """Derivative gain on the rise of the (EMA-smoothed) cost over ``d_delay`` updates
    (relative to ``d_k`` under ``normalize``)."""
    ema_p: float = 0.95
    """EMA coefficient of the proportional term: ``P <- a P + (1 - a) e``."""
    ema_d: float = 0.95
    """EMA coefficient of the cost used by the derivative term."""
    d_delay: int = 10
    """Lag, in updates, of the derivative term's difference."""
    integral_max: float = 100.0
    """Clamp of the integral term; ``lambda_max`` bounds it too, whichever is lower."""

    # --- last-iterate rules ---------------------------------------------------
    optimistic: bool = False
    """Optimistic step (``dual_ascent``, ``regularized``): ``lambda <- [lambda + eta (2 g_t
    - g_{t-1})]_+`` with ``g_t`` the rule's own step direction (ReLOAD; OPG-PD). One
    optimistic player is not enough: pair it with the agent's optimistic policy step."""
    reg_tau: float = 0.01
    """Dual regularisation tau of ``regularized``: ``g_t = e_t - tau lambda_t``. The fixed
    point sits where the violation equals ``tau lambda``, a bias of ``tau lambda*``
    (relative to ``d`` under ``normalize``)."""
    rho: float = 1.0
    """Penalty rho of ``augmented``: the policy step weighs cost ``k`` by
    ``max(0, lambda_k + rho e_k)``, the derivative of ``(rho/2) max(0, e_k + lambda_k/rho)^2``."""
    crpo_tol: float = 0.0
    """CRPO's tolerance eta: a constraint counts as violated when ``e_k > crpo_tol``
    (relative to ``d_k`` under ``normalize``)."""

    def __post_init__(self) -> None:
        if self.rule not in MULTIPLIER_RULES:
            raise ValueError(
                f"unknown multiplier rule {self.rule!r}; choose one of {sorted(MULTIPLIER_RULES)}"
            )
        for name in ("lr", "lambda_max", "kp", "ki", "kd", "integral_max", "adam_eps", "reg_tau", "rho", "crpo_tol"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"multiplier option {name}={value!r} must be finite and >= 0")
        if not (math.isfinite(self.init) and 0 <= self.init <= self.lambda_max):
            raise ValueError(
                f"multiplier init={self.init!r} must lie in [0, lambda_max={self.lambda_max}]"
            )
        if self.rule == "log_sgd" and self.init <= 0:
            raise ValueError(
                "rule 'log_sgd' works on log(lambda) and needs init > 0; set e.g. init=0.01"
            )
        for name in ("ema_p", "ema_d", "adam_beta1", "adam_beta2"):
            value = getattr(self, name)
            if not 0 <= value < 1:
                raise ValueError(f"multiplier option {name}={value!r} must lie in [0, 1)")
        if self.optimistic and self.rule not in ("dual_ascent", "regularized"):
            raise ValueError(
                f"multiplier optimistic=True applies to rule 'dual_ascent' or 'regularized', not {self.rule!r}; "
                "set optimistic=False with that rule"
            )
        if self.warmup < 0 or self.d_delay < 1:
            raise ValueError(
                f"multiplier warmup={self.warmup} must be >= 0 and d_delay={self.d_delay} >= 1"
            )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "MultiplierConfig":
        """Build from a dict; an unknown key is an error naming the valid keys."""
        return with_options(cls(), data, "multiplier")


class Multiplier:
    """Base class: K multipliers, projected onto ``[0, lambda_max]``."""

    rule: ClassVar[str] = ""

    def __init__(self, limits: np.ndarray | list[float], config: MultiplierConfig | None = None):
        self.config = config or MultiplierConfig(rule=self.rule)
        self.limits = np.asarray(limits, dtype=np.float64).reshape(-1)
        if np.any(~np.isfinite(self.limits)) or np.any(self.limits < 0):
            raise ValueError(f"limits must be finite and >= 0, got {self.limits.tolist()}")
        self.values = np.full(self.limits.shape, self.config.init, dtype=np.float64)
        self.num_updates = 0

    @property
    def num_constraints(self) -> int:
        return int(self.limits.size)

    def scaled(self, v: np.ndarray) -> np.ndarray:
        """``v_k / d_k`` where ``normalize`` and ``d_k > 0``; ``v_k`` otherwise."""
        if not self.config.normalize:
            return v
        return np.where(self.limits > 0, v / np.where(self.limits > 0, self.limits, 1.0), v)

    def violation(self, mean_costs: np.ndarray) -> np.ndarray:
        """``e_k = Jhat_k - d_k``, divided by ``d_k`` where ``normalize`` and ``d_k > 0``."""
        return self.scaled(mean_costs - self.limits)

    def update(self, mean_costs: np.ndarray | list[float]) -> np.ndarray:
        """One multiplier step from the batch estimate of ``J_k``; returns the new values."""
        j = self._estimate(mean_costs)
        self.num_updates += 1
        if self.num_updates <= self.config.warmup:
            return self.values.copy()
        self._step(j)
        np.clip(self.values, 0.0, self.config.lambda_max, out=self.values)
        return self.values.copy()

    def _step(self, mean_costs: np.ndarray) -> None:
        raise NotImplementedError

    def weights(self, mean_costs: np.ndarray | list[float] | None = None) -> tuple[float, np.ndarray]:
        """``(w_R, lambda)``: the reward weight and the multipliers the policy step on a batch
        with cost estimate ``mean_costs`` uses. Here ``(1, values)``: the Lagrangian
        ``R - sum_k lambda_k C_k`` with the current multipliers."""
        return 1.0, self.values.copy()

    def _estimate(self, mean_costs: np.ndarray | list[float]) -> np.ndarray:
        """``mean_costs`` as a float64 ``(K,)``: one finite estimate per multiplier."""
        j = np.asarray(mean_costs, dtype=np.float64).reshape(-1)
        if j.shape != self.limits.shape:
            raise ValueError(
                f"got {j.size} cost estimate(s) for {self.limits.size} multiplier(s)"
            )
        if not np.all(np.isfinite(j)):
            raise FloatingPointError(f"non-finite cost estimate {j.tolist()} in multiplier update")
        return j

    # --- persistence (plain lists: JSON-safe) ---------------------------------
    def state_dict(self) -> dict[str, Any]:
        """A snapshot: copies, never views of the live state, so later updates leave it as is."""
        state = {k: (v.tolist() if isinstance(v, np.ndarray) else copy.deepcopy(v)) for k, v in vars(self).items()}
        state["config"] = asdict(self.config)
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for key, value in state.items():
            if key == "config":
                self.config = MultiplierConfig.from_dict(value)
            elif isinstance(getattr(self, key, None), np.ndarray):
                setattr(self, key, np.array(value, dtype=np.float64))
            else:
                setattr(self, key, copy.deepcopy(value))


class DualAscentMultiplier(Multiplier):
    """Projected dual ascent (MASA; FSRL without PID).

        lambda_k <- clip(lambda_k + eta * e_k, 0, lambda_max),   e_k = Jhat_k - d_k
        (or (Jhat_k - d_k) / d_k with ``normalize``).

    The step is proportional to the violation: a constraint far over its limit moves its
    multiplier fast, one at its limit leaves it still.
    """

    rule = "dual_ascent"

    def __init__(self, limits: np.ndarray | list[float], config: MultiplierConfig | None = None):
        super().__init__(limits, config)
        # g_{t-1} of the optimistic step; None before the first step (which is then plain).
        self.last_direction: np.ndarray | None = None

    def direction(self, mean_costs: np.ndarray) -> np.ndarray:
        """The step direction ``g_t``: the violation ``e_t``."""
        return self.violation(mean_costs)

    def _step(self, mean_costs: np.ndarray) -> None:
        g = self.direction(mean_costs)
        if self.config.optimistic and self.last_direction is not None:
            self.values += self.config.lr * (2.0 * g - self.last_direction)
        else:
            self.values += self.config.lr * g
        self.last_direction = g

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        if self.last_direction is not None:
            self.last_direction = np.asarray(self.last_direction, dtype=np.float64)


class RegularizedMultiplier(DualAscentMultiplier):
    """Regularised dual ascent (RPG-PD, Ding, Wei, Zhang & Ribeiro 2023, arXiv 2306.11700):

        lambda_k <- clip(lambda_k + eta (e_k - tau lambda_k), 0, lambda_max),

    the ascent step on ``L - (tau/2) |lambda|^2``, whose strong concavity in lambda
    damps the cycle of plain dual ascent (last-iterate convergence to the regularised
    saddle point, where ``e_k = tau lambda_k``). With ``optimistic`` the step is
    ``eta (2 g_t - g_{t-1})``, ``g_t = e_t - tau lambda_t`` (OPG-PD).
    """

    rule = "regularized"

    def direction(self, mean_costs: np.ndarray) -> np.ndarray:
        """``g_t = e_t - tau lambda_t``."""
        return self.violation(mean_costs) - self.config.reg_tau * self.values


class AugmentedLagrangianMultiplier(Multiplier):
    """The augmented Lagrangian (Hestenes 1969, Powell 1969; for CMDPs e.g. arXiv 2605.11694).

    The penalty of constraint ``k`` is ``psi(e, lambda) = (rho/2) max(0, e + lambda/rho)^2
    - lambda^2 / (2 rho)``, whose derivative in ``e`` is ``max(0, lambda + rho e)``: the
    policy step on a batch with violation ``e_t`` weighs cost ``k`` by

        lambda~_k = clip(lambda_k + rho e_k,t, 0, lambda_max)          (:meth:`weights`),

    a multiplier that already answers this batch's violation, and the multiplier steps
    ``lambda_k <- clip(lambda_k + eta e_k, 0, lambda_max)``. The classic method takes one
    dual step of ``rho`` per solved subproblem; one step of ``eta`` per policy iteration is
    that step spread over ``rho / eta`` iterations.
    """

    rule = "augmented"

    def weights(self, mean_costs: np.ndarray | list[float] | None = None) -> tuple[float, np.ndarray]:
        """``(1, clip(lambda + rho e(mean_costs), 0, lambda_max))``; ``(1, lambda)`` without an estimate."""
        if mean_costs is None:
            return 1.0, self.values.copy()
        return 1.0, np.clip(self.values + self.config.rho * self.violation(self._estimate(mean_costs)), 0.0, self.config.lambda_max)

    def _step(self, mean_costs: np.ndarray) -> None:
        self.values += self.config.lr * self.violation(mean_costs)


class CRPOSwitch(Multiplier):
    """CRPO (Xu, Liang & Lan, ICML 2021, arXiv 2011.05869): no multiplier, a switch.

    On a batch with violations ``e_k`` (relative under ``normalize``): when every
    ``e_k <= crpo_tol`` the policy steps on the reward alone, ``(w_R, lambda) = (1, 0)``;
    otherwise on the most violated cost alone, ``(0, one_hot(argmax_k e_k))`` (the paper
    allows any violated one; the largest relative violation is the deterministic choice).
    ``values`` records the last switch (0, or 1 on the cost stepped on).
    """

    rule = "crpo"

    def _switch(self, j: np.ndarray) -> tuple[float, np.ndarray]:
        e = self.violation(j)
        lam = np.zeros_like(self.values)
        if np.all(e <= self.config.crpo_tol):
            return 1.0, lam
        lam[int(np.argmax(e))] = 1.0
        return 0.0, lam

    def weights(self, mean_costs: np.ndarray | list[float] | None = None) -> tuple[float, np.ndarray]:
        """The switch on ``mean_costs``; without an estimate, the reward step ``(1, 0)``."""
        return (1.0, np.zeros_like(self.values)) if mean_costs is None else self._switch(self._estimate(mean_costs))

    def _step(self, mean_costs: np.ndarray) -> None:
        self.values = self._switch(mean_costs)[1]


class LogSGDMultiplier(Multiplier):
    """SGD on ``log lambda`` (safe-rlhf).

    The dual loss ``-lambda (Jhat - d)`` with ``lambda = exp(mu)`` has gradient
    ``-lambda (Jhat - d)`` w.r.t. ``mu``, so one SGD step is

        mu_k <- mu_k + eta * lambda_k * e_k,   lambda_k = min(exp(mu_k), lambda_max):

    multiplicative, never exactly 0, and fast once lambda is large.
    """

    rule = "log_sgd"

    def __init__(self, limits: np.ndarray | list[float], config: MultiplierConfig | None = None):
        super().__init__(limits, config)
        self.log_values = np.log(self.values)

    def _step(self, mean_costs: np.ndarray) -> None:
        self.log_values += self.config.lr * np.exp(self.log_values) * self.violation(mean_costs)
        self.log_values = np.minimum(self.log_values, math.log(max(self.config.lambda_max, 1e-300)))
        self.values = np.exp(self.log_values)


class AdamMultiplier(Multiplier):
    """Adam on lambda (OmniSafe's and SafePO's ``Lagrange``: lr 0.035, init 0.001).

    Gradient ``g_k = -e_k`` of the dual loss ``-lambda_k e_k``; then
    ``m <- b1 m + (1-b1) g``, ``v <- b2 v + (1-b2) g^2`` and
    ``lambda <- clip(lambda - lr * mhat / (sqrt(vhat) + eps), 0, lambda_max)``.

    On one scalar, ``mhat / sqrt(vhat)`` is about ``sign(g)``: Adam moves each multiplier
    by about +-lr per update *whatever the size of the violation*.
    """

    rule = "adam"

    def __init__(self, limits: np.ndarray | list[float], config: MultiplierConfig | None = None):
        super().__init__(limits, config)
        self.m = np.zeros_like(self.values)
        self.v = np.zeros_like(self.values)
        self.t = 0

    def _step(self, mean_costs: np.ndarray) -> None:
        c = self.config
        g = -self.violation(mean_costs)
        self.t += 1
        self.m = c.adam_beta1 * self.m + (1 - c.adam_beta1) * g
        self.v = c.adam_beta2 * self.v + (1 - c.adam_beta2) * g * g
        m_hat = self.m / (1 - c.adam_beta1**self.t)
        v_hat = self.v / (1 - c.adam_beta2**self.t)
        self.values -= c.lr * m_hat / (np.sqrt(v_hat) + c.adam_eps)


class PIDMultiplier(Multiplier):
    """PID Lagrangian (Stooke, Achiam & Abbeel 2020, Algorithm 2; OmniSafe's ``PIDLagrangian``).

    With ``e_t = Jhat_t - d`` and ``s(v) = v / d`` under ``normalize`` (``v`` otherwise):

        P_t = a_p P_{t-1} + (1 - a_p) s(e_t),           P_0 = 0         (EMA of the error)
        I_t = clip(I_{t-1} + K_i s(e_t), 0, I_hi),      I_0 = init      (anti wind-up)
        C_t = a_d C_{t-1} + (1 - a_d) Jhat_t,            C_0 = 0         (EMA of the cost)
        D_t = max(0, s(C_t - C_{max(0, t - delay)}))                     (only a rising cost)
        lambda_t = clip(K_p P_t + I_t + K_d D_t, 0, lambda_max)

    with ``I_hi = min(integral_max, lambda_max)``. The proportional and derivative terms
    damp the oscillation that pure integral control (= dual ascent) shows; the integral
    keeps the steady state at the limit.

    As in OmniSafe, both EMAs start at 0 and the derivative's reference is ``C_0 = 0``
    for the first ``delay`` updates. Deliberate differences from OmniSafe:

    - ``normalize`` divides all three terms by ``d`` (OmniSafe's ``sum_norm`` and
      ``diff_norm`` rescale the advantages instead), so one set of gains suits limits of
      any scale: a cost that doubles its limit gives the same ``P``, ``I`` and ``D``
      whether ``d`` is 0.1 or 30;
    - the integral is bounded by ``lambda_max`` (OmniSafe bounds it only below, or by 1
      under ``diff_norm``): an integral above the output's bound would hold lambda at
      ``lambda_max`` for as many updates as it takes to unwind, long after the violation
      ended.
    """

    rule = "pid"

    def __init__(self, limits: np.ndarray | list[float], config: MultiplierConfig | None = None):
        super().__init__(limits, config)
        self.p = np.zeros_like(self.values)
        self.integral = np.full_like(self.values, self.config.init)
        self.cost_ema = np.zeros_like(self.values)
        # C_{t-delay}, ..., C_{t-1} (at most ``d_delay`` entries); the oldest is D's reference.
        self.cost_history: list[list[float]] = [self.cost_ema.tolist()]

    def _step(self, mean_costs: np.ndarray) -> None:
        c = self.config
        e = self.violation(mean_costs)
        self.p = c.ema_p * self.p + (1 - c.ema_p) * e
        self.integral = np.clip(self.integral + c.ki * e, 0.0, min(c.integral_max, c.lambda_max))
        self.cost_ema = c.ema_d * self.cost_ema + (1 - c.ema_d) * mean_costs
        derivative = np.maximum(0.0, self.scaled(self.cost_ema - np.asarray(self.cost_history[0])))
        self.cost_history = [*self.cost_history, self.cost_ema.tolist()][-c.d_delay:]
        self.values = c.kp * self.p + self.integral + c.kd * derivative

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("cost_ema", ()) is None:  # a state saved before the first update by older code
            state = {**state, "cost_ema": [0.0] * self.num_constraints, "cost_history": [[0.0] * self.num_constraints]}
        super().load_state_dict(state)


MULTIPLIER_RULES: dict[str, type[Multiplier]] = {
    cls.rule: cls
    for cls in (
        DualAscentMultiplier, LogSGDMultiplier, AdamMultiplier, PIDMultiplier,
        RegularizedMultiplier, AugmentedLagrangianMultiplier, CRPOSwitch,
    )
}


def make_multiplier(
    limits: np.ndarray | list[float], config: MultiplierConfig | dict[str, Any] | None = None
) -> Multiplier:
    """The multiplier object for ``config.rule`` (default: projected dual ascent)."""
    if config is None:
        config = MultiplierConfig()
    elif isinstance(config, dict):
        config = MultiplierConfig.from_dict(config)
    return MULTIPLIER_RULES[config.rule](limits, config)
