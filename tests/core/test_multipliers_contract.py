"""The multiplier classes' shared contract (each rule's numbers are in test_multipliers.py)."""

import numpy as np
import pytest

from constrained_grpo.multipliers import MULTIPLIER_RULES, MultiplierConfig, make_multiplier


@pytest.mark.parametrize("rule", sorted(MULTIPLIER_RULES))
def test_projection_and_state_round_trip(rule):
    cfg = MultiplierConfig(rule=rule, lr=0.5, init=0.1, lambda_max=2.0)
    m = make_multiplier([1.0, 2.0], cfg)
    for j in ([5.0, 0.0], [9.0, 0.0], [0.0, 0.0], [3.0, 8.0]):
        values = m.update(j)
        assert np.all(values >= 0) and np.all(values <= 2.0)
    clone = make_multiplier([1.0, 2.0], cfg)
    clone.load_state_dict(m.state_dict())
    np.testing.assert_array_equal(clone.values, m.values)
    np.testing.assert_array_equal(clone.update([4.0, 1.0]), m.update([4.0, 1.0]))


def test_bad_config_names_the_option():
    with pytest.raises(ValueError, match="unknown multiplier rule 'sgdd'"):
        MultiplierConfig(rule="sgdd")
    with pytest.raises(ValueError, match="lr=-1"):
        MultiplierConfig(lr=-1)
    with pytest.raises(ValueError, match="unknown multiplier option"):
        MultiplierConfig.from_dict({"learning_rate": 0.1})
    with pytest.raises(ValueError, match="log_sgd.*init > 0"):
        MultiplierConfig(rule="log_sgd", init=0.0)
    m = make_multiplier([1.0])
    with pytest.raises(ValueError, match="1 multiplier"):
        m.update([1.0, 2.0])
    with pytest.raises(FloatingPointError):
        m.update([float("nan")])


@pytest.mark.parametrize("rule", sorted(MULTIPLIER_RULES))
def test_state_dict_is_a_snapshot_not_a_view(rule):
    m = make_multiplier([1.0, 2.0], MultiplierConfig(rule=rule, lr=0.5, init=0.1, d_delay=2))
    m.update([3.0, 1.0])
    snapshot = m.state_dict()
    before = repr(snapshot)
    for j in ([4.0, 0.0], [0.5, 5.0], [2.0, 2.0]):
        m.update(j)
    assert repr(snapshot) == before
    restored = make_multiplier([1.0, 2.0], MultiplierConfig(rule=rule, init=0.5))
    restored.load_state_dict(snapshot)
    replay = make_multiplier([1.0, 2.0], MultiplierConfig(rule=rule, lr=0.5, init=0.1, d_delay=2))
    replay.update([3.0, 1.0])
    for j in ([4.0, 0.0], [0.5, 5.0], [2.0, 2.0], [6.0, 1.0]):
        np.testing.assert_array_equal(restored.update(j), replay.update(j))
