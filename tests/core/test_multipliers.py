"""Hand-worked tests of every multiplier rule (constrained_grpo.multipliers)."""

from __future__ import annotations

import json
import math

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
    for rule in MULTIPLIER_RULES:
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
    # J=3, e=2: P = 0.5*0 + 0.5*2 = 1; I = 0 + 0.5*2 = 1; C = 3 (first), D = 0 -> 1 + 1 + 0
    assert m.update([3.0])[0] == pytest.approx(2.0)
    # J=1, e=0: P = 0.5; I = 1; C = 0.5*3 + 0.5*1 = 2, D = max(0, 2 - 3) = 0 -> 1.5
    assert m.update([1.0])[0] == pytest.approx(1.5)
    # J=5, e=4: P = 0.25 + 2 = 2.25; I = 1 + 2 = 3; C = 0.5*2 + 0.5*5 = 3.5, D = 3.5 - 2 = 1.5
    # lambda = 2.25 + 3 + 2 * 1.5 = 8.25
    assert m.update([5.0])[0] == pytest.approx(8.25)


def test_pid_integral_is_clamped() -> None:
    m = make_multiplier([1.0], pid_config(integral_max=2.0))
    m.update([3.0])
    m.update([1.0])
    # as above but I = min(3, 2) = 2: 2.25 + 2 + 3
    assert m.update([5.0])[0] == pytest.approx(7.25)
    # the integral never goes below 0 either
    low = make_multiplier([1.0], pid_config(kp=0.0, kd=0.0))
    low.update([0.0])
    assert low.integral[0] == 0.0


def test_pid_derivative_uses_delay() -> None:
    m = make_multiplier([0.0], pid_config(kp=0.0, ki=0.0, kd=1.0, ema_d=0.0, d_delay=2))
    # ema_d = 0: C_t = J_t.  D_t = max(0, C_t - C_{t-2}) (the oldest kept entry)
    assert m.update([1.0])[0] == pytest.approx(0.0)
    assert m.update([2.0])[0] == pytest.approx(1.0)  # only 2 entries: C_2 - C_1
    assert m.update([4.0])[0] == pytest.approx(3.0)  # C_3 - C_1
    assert m.update([5.0])[0] == pytest.approx(3.0)  # C_4 - C_2


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
