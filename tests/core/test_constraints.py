import math

import numpy as np
import pytest

from constrained_grpo.constraints import (
    Constraint,
    ConstraintError,
    CostContractError,
    costs_from_info,
    make_cost_info,
    override_limits,
)


@pytest.mark.parametrize("bad", [-0.1, math.nan, math.inf, "abc", None])
def test_bad_limit_is_named(bad):
    with pytest.raises(ConstraintError) as err:
        Constraint("hazard", bad)
    assert "hazard" in str(err.value) and repr(bad) in str(err.value)


@pytest.mark.parametrize("name", ["", "Hazard", "has space", "a-b"])
def test_bad_name(name):
    with pytest.raises(ConstraintError, match="lowercase identifier"):
        Constraint(name, 1.0)


def test_limit_is_float_and_with_limit_validates():
    c = Constraint("fuel", 12)
    assert isinstance(c.limit, float) and c.limit == 12.0
    assert c.with_limit(3).limit == 3.0
    with pytest.raises(ConstraintError):
        c.with_limit(-1)


def test_override_limits_by_name_and_sequence():
    cs = (Constraint("hazard", 0.1), Constraint("fuel", 12.0))
    assert [c.limit for c in override_limits(cs, {"fuel": 10})] == [0.1, 10.0]
    assert [c.limit for c in override_limits(cs, [0.2, 8])] == [0.2, 8.0]
    assert override_limits(cs, None) == cs
    with pytest.raises(ConstraintError, match=r"unknown constraint.*'speed'.*\['hazard', 'fuel'\]"):
        override_limits(cs, {"speed": 1.0})
    with pytest.raises(ConstraintError, match="got 1 limit"):
        override_limits(cs, [0.2])


def test_costs_from_info():
    info = make_cost_info([1.0, 0.5])
    assert info["cost"] == 1.5 and info["costs"].dtype == np.float64
    np.testing.assert_array_equal(costs_from_info(info, 2), [1.0, 0.5])
    # Safety-Gymnasium's scalar cost is accepted for one constraint only.
    np.testing.assert_array_equal(costs_from_info({"cost": 2.0}, 1), [2.0])
    with pytest.raises(CostContractError, match="Contract 1"):
        costs_from_info({"cost": 2.0}, 2)
    with pytest.raises(CostContractError, match="shape"):
        costs_from_info({"costs": np.zeros(3)}, 2)
