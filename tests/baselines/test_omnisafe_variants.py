"""The OmniSafe-matched variants (baselines/omnisafe.py): their configs against
docs/parity.md's table, the multiplier updates and the KL early stop on hand-worked
numbers, and the running observation normalisation against numpy."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch as th

from constrained_grpo.baselines.agent import BASELINES, _config, make_baseline
from constrained_grpo.baselines.omnisafe import RunningObsNorm, linear_decay_lr
from constrained_grpo.multipliers import make_multiplier

VARIANTS = ("ppo-lag-omnisafe", "pid-lag-omnisafe", "trpo-lag-omnisafe")
DOC = Path(__file__).resolve().parents[2] / "docs" / "parity.md"


def _doc_table() -> dict[str, dict[str, object]]:
    """{variant: {option: value}} from the settings table of docs/parity.md."""
    out: dict[str, dict[str, object]] = {v: {} for v in VARIANTS}
    for line in DOC.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 6 or not cells[1].startswith("`"):
            continue
        options = re.findall(r"`([\w.]+)`", cells[1])
        prefix = options[0].rsplit(".", 1)[0] + "." if "." in options[0] else ""
        options = [options[0]] + [o if "." in o else prefix + o for o in options[1:]]
        for variant, cell in zip(VARIANTS, cells[2:5]):
            if cell == "-":
                continue
            values = [v.strip() for v in cell.split(" / ")] if len(options) > 1 else [cell]
            for option, value in zip(options, values, strict=True):
                out[variant][option] = json.loads(value)
    return out


def _flat(config: object) -> dict[str, object]:
    data = config.to_dict()  # type: ignore[attr-defined]
    mult = data.pop("multiplier")
    return {**data, **{f"multiplier.{k}": v for k, v in mult.items()}}


@pytest.mark.parametrize("variant", VARIANTS)
def test_resolved_config_equals_the_parity_table(variant: str) -> None:
    table = _doc_table()[variant]
    assert len(table) >= 25  # the table was read, not skipped
    resolved = _flat(_config(BASELINES[variant], {}, "Safety/HopperVelocity-v1"))
    for option, value in table.items():
        assert resolved[option] == value, f"{variant}: {option} = {resolved[option]!r}, table says {value!r}"


def test_adam_multiplier_hand_worked() -> None:
    """OmniSafe's Lagrange: Adam(lr 0.035) on -lambda (J - d), d = 25, lambda_0 = 0.001.

    Step 1, J = 30: g = -5, m = -0.5, v = 0.025, mhat = -5, vhat = 25: lambda = 0.001 + 0.035 = 0.036.
    Step 2, J = 20: g = 5, m = 0.05, v = 0.049975, mhat = 0.05 / 0.19, vhat = 0.049975 / 0.001999 = 25:
    lambda = 0.036 - 0.035 * (0.05 / 0.19) / 5 = 0.0341578947...
    """
    cfg = _config(BASELINES["ppo-lag-omnisafe"], {}, "Safety/HopperVelocity-v1").multiplier
    m = make_multiplier([25.0], cfg)
    assert m.values[0] == 0.001
    assert m.update([30.0])[0] == pytest.approx(0.036, abs=1e-9)
    assert m.update([20.0])[0] == pytest.approx(0.036 - 0.035 * (0.05 / 0.19) / 5, abs=1e-9)
    # The same two steps by torch's Adam on OmniSafe's loss (common/lagrange.py).
    lam = th.nn.Parameter(th.tensor(0.001, dtype=th.float64))
    opt = th.optim.Adam([lam], lr=0.035)
    for j in (30.0, 20.0):
        opt.zero_grad()
        (-lam * (j - 25.0)).backward()
        opt.step()
        lam.data.clamp_(0.0, None)
    assert m.values[0] == pytest.approx(lam.item(), abs=1e-12)
    # Absolute violation and no practical bound: a violation of 1e6 is one Adam step, as one of 1.
    big = make_multiplier([25.0], cfg)
    assert big.update([25.0 + 1e6])[0] == pytest.approx(0.036, abs=1e-9)


def test_pid_multiplier_hand_worked() -> None:
    """CPPOPID, d = 25, J = 35 (e = 10): P = 0.05 * 10 = 0.5, I = 0.001 + 0.01 * 10 = 0.101,
    C = 0.05 * 35 = 1.75, D = 1.75 - 0: lambda = 0.1 * 0.5 + 0.101 + 0.01 * 1.75 = 0.1685."""
    cfg = _config(BASELINES["pid-lag-omnisafe"], {}, "Safety/HopperVelocity-v1").multiplier
    m = make_multiplier([25.0], cfg)
    assert m.update([35.0])[0] == pytest.approx(0.1685, abs=1e-12)


def test_running_obs_norm_against_numpy() -> None:
    rng = np.random.default_rng(0)
    norm = RunningObsNorm((3,), clip=5.0)
    first = rng.normal(size=(1, 3))
    np.testing.assert_array_equal(norm.normalize(first), first)  # one sample: returned as is
    batches = [first] + [rng.normal(loc=[1.0, -2.0, 0.0], scale=[1.0, 3.0, 1e-4], size=(n, 3)) for n in (1, 7, 1, 30)]
    for b in batches[1:]:
        out = norm.normalize(b)
    data = np.concatenate(batches)
    std = np.maximum(data.std(axis=0, ddof=1), 1e-2)  # OmniSafe's floor of 1e-2
    np.testing.assert_allclose(norm.mean.numpy(), data.mean(axis=0), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(norm.std, std, rtol=1e-10)
    np.testing.assert_allclose(out, np.clip((batches[-1] - data.mean(axis=0)) / std, -5, 5), rtol=1e-10)
    assert int(norm.count) == len(data)
    # The statistics travel with a state dict.
    other = RunningObsNorm((3,))
    other.load_state_dict(norm.state_dict())
    np.testing.assert_array_equal(other.apply(data[:2]), norm.apply(data[:2]))


def test_linear_lr_decay() -> None:
    assert [linear_decay_lr(3e-4, i, 4) for i in range(5)] == pytest.approx([3e-4, 2.25e-4, 1.5e-4, 7.5e-5, 0.0])


def _categorical_kl(p: np.ndarray, q: np.ndarray) -> float:
    return float(np.mean(np.sum(p * (np.log(p) - np.log(q)), axis=1)))


def test_kl_early_stop_full_batch() -> None:
    """target_kl 0 stops after one pass; the logged KL is the full-epoch KL(old || new),
    recomputed here from the two policies' action probabilities."""
    common = dict(n_steps=64, batch_size=16, n_epochs=4)
    agent = make_baseline("ppo-lag-omnisafe", "Grid/HazardFuel-v0", 0, target_kl=0.0, **common)
    model = agent.model
    old_policy: list = []
    original = model.train

    def train() -> None:
        old_policy.append(copy.deepcopy(model.policy))
        original()

    model.train = train  # type: ignore[method-assign]
    agent.learn(64)
    assert model.logger.name_to_value["train/update_passes"] == 1
    obs = th.as_tensor(model.rollout_buffer.observations.reshape(64, -1))
    with th.no_grad():
        p = old_policy[0].get_distribution(obs).distribution.probs.numpy()
        q = model.policy.get_distribution(obs).distribution.probs.numpy()
    assert model.logger.name_to_value["train/approx_kl"] == pytest.approx(_categorical_kl(p, q), rel=1e-4)
    free = make_baseline("ppo-lag-omnisafe", "Grid/HazardFuel-v0", 0, target_kl=None, **common)
    free.learn(64)
    assert free.model.logger.name_to_value["train/update_passes"] == 4


def test_cost_estimate_window_and_reset_each_epoch() -> None:
    agent = make_baseline("ppo-lag-omnisafe", "Grid/HazardFuel-v0", 0, n_steps=40, batch_size=20, n_epochs=1)
    model = agent.model
    episodes = [np.array([float(i), 0.0]) for i in range(60)]
    est = model._estimate_costs(episodes)
    np.testing.assert_allclose(est, [np.mean(np.arange(10, 60)), 0.0])  # the last 50 of 60
    agent.learn(80)  # two epochs of 40 steps; every one starts from a reset
    assert model._rollouts == 2
    assert bool(model.rollout_buffer.episode_starts[0].all())


def test_paper_preset_runs_the_omnisafe_variants_on_safety_tasks() -> None:
    from constrained_grpo.eval.presets import get_preset

    algos: dict[str, set[str]] = {}
    for run in get_preset("paper").runs():
        algos.setdefault(run.task.split("/")[0], set()).add(run.algo)
    assert set(VARIANTS) <= algos["Safety"] and not {"ppo-lag", "pid-lag"} & algos["Safety"]
    assert not set(VARIANTS) & (algos["Grid"] | algos["Highway"])


def test_saved_agent_keeps_the_observation_statistics(tmp_path: Path) -> None:
    from constrained_grpo.baselines.agent import load_agent

    agent = make_baseline("ppo-lag-omnisafe", "Grid/HazardFuel-v0", 0, n_steps=40, batch_size=20, n_epochs=1)
    agent.learn(40)
    norm = agent.model.obs_norm
    # The reset observation, one per step, and the terminal observation of the 32-step episode
    # that ended (OmniSafe's ObsNormalize pushes final_observation too).
    assert int(norm.count) == 1 + 40 + 1
    agent.save(tmp_path / "a")
    loaded = load_agent(tmp_path / "a")
    np.testing.assert_array_equal(loaded.model.obs_norm.mean.numpy(), norm.mean.numpy())
    obs = np.stack([agent.model.observation_space.sample() for _ in range(8)])
    np.testing.assert_array_equal(loaded.predict(obs), agent.predict(obs))


def test_parity_window_and_interval() -> None:
    """Our side's last-50-episode window from per-iteration means: 30 episodes of return 1,
    then 30 of return 2 (cost 0, then 10; length 10, then 20): (30 * 2 + 20 * 1) / 50 = 1.6,
    cost 300 / 50 = 6, length (30 * 20 + 20 * 10) / 50 = 16."""
    from constrained_grpo.eval.studies.parity import _windowed, our_task, t_interval

    rows = _windowed([
        {"env_steps": 100, "ep_return": 1.0, "ep_cost": 0.0, "ep_length": 10.0, "n_episodes": 30},
        {"env_steps": 200, "ep_return": 9.0, "ep_cost": 9.0, "ep_length": 99.0, "n_episodes": 0},
        {"env_steps": 300, "ep_return": 2.0, "ep_cost": 10.0, "ep_length": 20.0, "n_episodes": 30},
    ])
    assert [r["env_steps"] for r in rows] == [100, 200, 300]
    assert rows[1] == rows[0] | {"env_steps": 200}  # an iteration without episodes repeats the window
    assert rows[2]["ep_return"] == pytest.approx(1.6) and rows[2]["ep_cost"] == pytest.approx(6.0)
    assert rows[2]["ep_length"] == pytest.approx(16.0)
    mean, half = t_interval([1.0, 2.0, 3.0])  # sd 1, t(0.975, 2) = 4.302653
    assert mean == 2.0 and half == pytest.approx(4.302653 / 3**0.5, rel=1e-6)
    assert our_task("SafetyHopperVelocity-v1") == "Safety/HopperVelocity-v1"
    with pytest.raises(ValueError, match="SafetyHopperVelocity-v1"):
        our_task("Safety/HopperVelocity-v1")
