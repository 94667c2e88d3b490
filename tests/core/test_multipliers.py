"""Hand-worked tests of every multiplier rule (constrained_grpo.multipliers)."""

from __future__ import annotations

import json
import math
from dataclasses import asdict

import numpy as np
import pytest

from constrained_grpo.multipliers import (
    MULTIPLIER_RULES,
    AdamMultiplier,
    DualAscentMultiplier,
    LogSGDMultiplier,
    MultiplierConfig,
    PIDMultiplier,
    make_multiplier,
)


def test_dual_ascent_steps_by_lr_times_violation_and_projects_at_zero() -> None:
    m = make_multiplier([1.0, 2.0], MultiplierConfig(rule="dual_ascent", lr=0.5))
    assert isinstance(m, DualAscentMultiplier)
    # e = [3 - 1, 1 - 2] = [2, -1]  ->  [0 + 0.5 * 2, max(0, 0 - 0.5)] = [1.0, 0.0]
    np.testing.assert_allclose(m.update([3.0, 1.0]), [1.0, 0.0])
    # e = [0.5, 3]  ->  [1.25, 1.5]
    np.testing.assert_allclose(m.update([1.5, 5.0]), [1.25, 1.5])


def test_dual_ascent_normalize_divides_violation_by_limit() -> None:
    m = make_multiplier([0.1, 10.0], MultiplierConfig(lr=1.0, normalize=True))
    # e / d = [(0.3 - 0.1) / 0.1, (15 - 10) / 10] = [2, 0.5]
    np.testing.assert_allclose(m.update([0.3, 15.0]), [2.0, 0.5])


def test_normalize_leaves_zero_limit_unscaled() -> None:
    m = make_multiplier([0.0], MultiplierConfig(lr=1.0, normalize=True))
    np.testing.assert_allclose(m.update([0.25]), [0.25])


def test_lambda_max_bounds_every_rule() -> None:
    for rule in set(MULTIPLIER_RULES) - {"crpo"}:  # CRPO has no multiplier, only a 0/1 switch
        cfg = MultiplierConfig(rule=rule, lr=10.0, init=0.5, lambda_max=1.5, ki=10.0, kp=10.0)
        m = make_multiplier([0.0], cfg)
        for _ in range(5):
            values = m.update([100.0])
        assert values[0] == pytest.approx(1.5), rule


def test_warmup_keeps_init_then_steps() -> None:
    m = make_multiplier([1.0], MultiplierConfig(lr=0.1, init=0.3, warmup=2))
    assert m.update([5.0])[0] == 0.3
    assert m.update([5.0])[0] == 0.3
    # third update: 0.3 + 0.1 * (5 - 1) = 0.7
    assert m.update([5.0])[0] == pytest.approx(0.7)


def test_log_sgd_is_multiplicative_and_never_zero() -> None:
    m = make_multiplier([1.0], MultiplierConfig(rule="log_sgd", lr=0.1, init=1.0))
    assert isinstance(m, LogSGDMultiplier)
    # mu = log 1 = 0;  mu += 0.1 * 1 * (3 - 1) = 0.2
    assert m.update([3.0])[0] == pytest.approx(math.exp(0.2))
    # mu += 0.1 * e^0.2 * (0 - 1)
    mu = 0.2 - 0.1 * math.exp(0.2)
    assert m.update([0.0])[0] == pytest.approx(math.exp(mu))
    for _ in range(200):
        m.update([0.0])
    assert m.values[0] > 0.0


def test_log_sgd_needs_positive_init() -> None:
    with pytest.raises(ValueError, match="init > 0"):
        MultiplierConfig(rule="log_sgd", init=0.0)


def test_adam_moves_about_lr_whatever_the_violation() -> None:
    small = make_multiplier([0.0], MultiplierConfig(rule="adam", lr=0.1))
    large = make_multiplier([0.0], MultiplierConfig(rule="adam", lr=0.1))
    assert isinstance(small, AdamMultiplier)
    # First step: mhat = g, vhat = g^2, so the step is lr * |g| / (|g| + eps) ~ lr.
    assert small.update([0.01])[0] == pytest.approx(0.1, rel=1e-5)
    assert large.update([100.0])[0] == pytest.approx(0.1, rel=1e-9)
    # A constant violation keeps mhat / sqrt(vhat) = 1: +lr per step.
    assert large.update([100.0])[0] == pytest.approx(0.2, rel=1e-9)
    # A satisfied constraint moves it down by about lr, projected at 0.
    down = make_multiplier([1.0], MultiplierConfig(rule="adam", lr=0.1, init=0.05))
    assert down.update([0.0])[0] == 0.0


def test_adam_second_step_hand_worked() -> None:
    m = make_multiplier([0.0], MultiplierConfig(rule="adam", lr=0.1, adam_beta1=0.5, adam_beta2=0.5, adam_eps=0.0))
    m.update([2.0])  # g = -2: m = -1, v = 2; mhat = -2, vhat = 4 -> +0.1
    # g = -4: m = -0.5 - 2 = -2.5, v = 1 + 8 = 9; mhat = -2.5 / 0.75, vhat = 9 / 0.75
    step = 0.1 * (2.5 / 0.75) / math.sqrt(9 / 0.75)
    assert m.update([4.0])[0] == pytest.approx(0.1 + step)


def pid_config(**kw: float) -> MultiplierConfig:
    base = dict(rule="pid", kp=1.0, ki=0.5, kd=2.0, ema_p=0.5, ema_d=0.5, d_delay=1)
    base.update(kw)
    return MultiplierConfig(**base)


def test_pid_hand_computed() -> None:
    m = make_multiplier([1.0], pid_config())
    assert isinstance(m, PIDMultiplier)
    # J=3, e=2: P = 0.5*0 + 0.5*2 = 1; I = 0 + 0.5*2 = 1; C = 0.5*0 + 0.5*3 = 1.5 (the EMA
    # starts at 0, as OmniSafe's), D = 1.5 - C_0 = 1.5 -> 1 + 1 + 2 * 1.5 = 5
    assert m.update([3.0])[0] == pytest.approx(5.0)
    # J=1, e=0: P = 0.5; I = 1; C = 0.75 + 0.5 = 1.25, D = max(0, 1.25 - 1.5) = 0 -> 1.5
    assert m.update([1.0])[0] == pytest.approx(1.5)
    # J=5, e=4: P = 0.25 + 2 = 2.25; I = 1 + 2 = 3; C = 0.625 + 2.5 = 3.125, D = 3.125 - 1.25
    # lambda = 2.25 + 3 + 2 * 1.875 = 9
    assert m.update([5.0])[0] == pytest.approx(9.0)


def test_pid_integral_is_clamped() -> None:
    m = make_multiplier([1.0], pid_config(integral_max=2.0))
    m.update([3.0])
    m.update([1.0])
    # as above but I = min(3, 2) = 2: 2.25 + 2 + 3.75
    assert m.update([5.0])[0] == pytest.approx(8.0)
    # the integral never goes below 0 either
    low = make_multiplier([1.0], pid_config(kp=0.0, kd=0.0))
    low.update([0.0])
    assert low.integral[0] == 0.0


def test_pid_derivative_uses_delay() -> None:
    m = make_multiplier([0.0], pid_config(kp=0.0, ki=0.0, kd=1.0, ema_d=0.0, d_delay=2))
    # ema_d = 0: C_t = J_t.  D_t = max(0, C_t - C_{max(0, t-2)}), C_0 = 0
    assert m.update([1.0])[0] == pytest.approx(1.0)  # C_1 - C_0
    assert m.update([2.0])[0] == pytest.approx(2.0)  # C_2 - C_0
    assert m.update([4.0])[0] == pytest.approx(3.0)  # C_3 - C_1
    assert m.update([5.0])[0] == pytest.approx(3.0)  # C_4 - C_2


def omnisafe_pid(costs: list[float], limit: float, kp: float, ki: float, kd: float, delay: int,
                 a_p: float, a_d: float, init: float, penalty_max: float) -> list[float]:
    """OmniSafe's ``PIDLagrangian.pid_update`` (omnisafe/common/pid_lagrange.py, no
    sum_norm / diff_norm), rewritten on scalars: the reference for the EMA start."""
    from collections import deque

    pid_i, delta_p, cost_d = init, 0.0, 0.0
    cost_ds: deque[float] = deque([0.0], maxlen=delay)
    out = []
    for j in costs:
        delta = j - limit
        pid_i = max(0.0, pid_i + delta * ki)
        delta_p = a_p * delta_p + (1 - a_p) * delta
        cost_d = a_d * cost_d + (1 - a_d) * j
        pid_d = max(0.0, cost_d - cost_ds[0])
        out.append(min(max(0.0, kp * delta_p + pid_i + kd * pid_d), penalty_max))
        cost_ds.append(cost_d)
    return out


def test_pid_matches_omnisafe_from_the_first_update() -> None:
    # Issue 16: the cost EMA started at the first cost, not 0; with these gains lambda was
    # up to 1.09 away from OmniSafe's in the first 10 updates (kd on the EMA's rise).
    costs = [30.0, 28.0, 35.0, 20.0, 26.0, 40.0, 22.0, 25.0, 31.0, 18.0, 27.0, 24.0, 33.0, 29.0]
    gains = dict(kp=0.1, ki=0.01, kd=0.1, delay=10, a_p=0.95, a_d=0.95, init=0.001, penalty_max=100.0)
    expected = omnisafe_pid(costs, 25.0, **gains)
    cfg = MultiplierConfig(rule="pid", kp=0.1, ki=0.01, kd=0.1, d_delay=10, ema_p=0.95, ema_d=0.95, init=0.001)
    m = make_multiplier([25.0], cfg)
    got = [m.update([j])[0] for j in costs]
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12)


def test_pid_normalize_scales_the_derivative_with_the_limit() -> None:
    # Issue 16: limits 0.1 and 30, both costs at their limit for 10 updates, then at twice
    # it for 32: the same relative history. The derivative used to be in cost units
    # (kd D = 0.013 for d = 0.1 against 3.89 for d = 30 here, with P = 0.806 for both); now
    # every term is relative, so both multipliers are equal, and equal to a PID on J / d, d = 1.
    cfg = MultiplierConfig(rule="pid", kp=1.0, ki=0.0, kd=1.0, normalize=True, init=0.0)
    m = make_multiplier([0.1, 30.0], cfg)
    unit = make_multiplier([1.0], MultiplierConfig(rule="pid", kp=1.0, ki=0.0, kd=1.0, init=0.0))
    history = [1.0] * 10 + [2.0] * 32
    for rel in history:
        values = m.update([0.1 * rel, 30.0 * rel])
        ref = unit.update([rel])[0]
    assert m.p[0] == pytest.approx(1 - 0.95**32) and m.p[0] == pytest.approx(0.806, abs=5e-4)
    np.testing.assert_allclose(m.p, [m.p[0]] * 2)
    # D = C_42 - C_32 with C_t = 1 - 0.95^t for t <= 10, then 2 - (2 - C_10) 0.95^(t - 10)
    c10 = 1 - 0.95**10
    d = (2 - (2 - c10) * 0.95**32) - (2 - (2 - c10) * 0.95**22)
    np.testing.assert_allclose(values, [m.p[0] + d] * 2, rtol=1e-12)
    assert values[0] == pytest.approx(ref, rel=1e-12)


def test_pid_integral_cannot_wind_up_past_lambda_max() -> None:
    # Issue 16: lambda_max = 2, integral_max = 100. Cost 11 over a limit of 1 (e = 10) for 5
    # updates with ki = 1 used to wind the integral up to 50, and lambda then stayed pinned
    # at 2 for 48 updates after the cost fell to 0 (e = -1 per update). Now I <= 2.
    cfg = MultiplierConfig(rule="pid", kp=0.0, ki=1.0, kd=0.0, lambda_max=2.0, integral_max=100.0)
    m = make_multiplier([1.0], cfg)
    for _ in range(5):
        assert m.update([11.0])[0] == 2.0
    assert m.integral[0] == 2.0
    after = [m.update([0.0])[0] for _ in range(3)]
    assert after == pytest.approx([1.0, 0.0, 0.0])  # leaves the bound on the first update
    # integral_max still bounds it when lower than lambda_max
    low = make_multiplier([1.0], MultiplierConfig(rule="pid", kp=0.0, ki=1.0, kd=0.0, integral_max=0.5))
    assert low.update([11.0])[0] == 0.5


def test_pid_in_memory_snapshot_is_not_changed_by_later_updates() -> None:
    # Issue 16: state_dict() shared cost_history with the live object ([[2.0]] became
    # [[2.0], [2.05]] after the next update), so a restored snapshot diverged.
    cfg = MultiplierConfig(rule="pid", kp=0.1, ki=0.05, kd=1.0, d_delay=2)
    m = make_multiplier([1.0], cfg)
    m.update([2.0])
    snapshot = m.state_dict()
    frozen = json.loads(json.dumps(snapshot))
    for j in (3.0, 1.0, 4.0, 0.5):
        m.update([j])
    assert snapshot == frozen  # C_0 = 0, C_1 = 0.05 * 2 = 0.1: [[0.0], [0.1]]
    assert snapshot["cost_history"] == [[0.0], [pytest.approx(0.1)]]
    a, b = make_multiplier([1.0], cfg), make_multiplier([1.0], cfg)
    a.load_state_dict(snapshot)
    b.load_state_dict(frozen)
    for j in (3.0, 1.0, 4.0, 0.5, 2.5, 6.0):  # past the point where the history is full
        np.testing.assert_array_equal(a.update([j]), b.update([j]))
    # loading copies too: the loaded object's updates leave the given dict alone
    assert snapshot == frozen


@pytest.mark.parametrize("rule", sorted(MULTIPLIER_RULES))
def test_state_round_trip_through_json(rule: str) -> None:
    cfg = MultiplierConfig(rule=rule, lr=0.05, init=0.2, normalize=True, warmup=1)
    a = make_multiplier([0.1, 12.0], cfg)
    for costs in ([0.5, 20.0], [0.3, 9.0], [0.0, 14.0]):
        a.update(costs)
    state = json.loads(json.dumps(a.state_dict()))
    b = make_multiplier([0.1, 12.0], MultiplierConfig(rule=rule, init=0.01))
    b.load_state_dict(state)
    assert b.config == cfg
    np.testing.assert_array_equal(a.values, b.values)
    for costs in ([0.4, 13.0], [0.05, 8.0]):
        np.testing.assert_allclose(a.update(costs), b.update(costs), rtol=0, atol=0)


def test_update_checks_shape_and_finiteness() -> None:
    m = make_multiplier([1.0, 2.0])
    with pytest.raises(ValueError, match="2 multiplier"):
        m.update([1.0])
    with pytest.raises(FloatingPointError):
        m.update([float("nan"), 1.0])


def test_config_rejects_unknown_rule_and_option() -> None:
    with pytest.raises(ValueError, match="dual_ascent"):
        MultiplierConfig(rule="sgd")
    with pytest.raises(ValueError, match="unknown multiplier option"):
        MultiplierConfig.from_dict({"learning_rate": 0.1})


def test_unconstrained_has_no_multipliers() -> None:
    m = make_multiplier([])
    assert m.values.shape == (0,)
    assert m.update([]).shape == (0,)


def test_pid_loads_a_state_saved_before_its_first_update_by_older_code() -> None:
    cfg = MultiplierConfig(rule="pid", kp=1.0, ki=0.5, kd=2.0, ema_p=0.5, ema_d=0.5, d_delay=1)
    old_state = {"values": [0.0], "num_updates": 0, "p": [0.0], "integral": [0.0], "cost_ema": None,
                 "cost_history": [], "limits": [1.0], "config": asdict(cfg)}
    m = make_multiplier([1.0], cfg)
    m.load_state_dict(old_state)
    assert m.update([3.0])[0] == pytest.approx(5.0)  # as test_pid_hand_computed's first update
