"""Contract 2 for the GRPO family: registry names, config errors, logging, NaN stop, save/load."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import constrained_grpo
from constrained_grpo.agents import GRPOAgent, GRPOConfig, NonFiniteRolloutError, load_agent, make_config
from constrained_grpo.agents.trainer import GRPOTrainer, RolloutBatch
from constrained_grpo.agents.variants import VARIANTS
from constrained_grpo.constraints import ConstraintError
from constrained_grpo.registry import EvalResult, agent_spec, validate_log_record

TINY = "Grid/HazardFuel3x3-v0"
QUICK: dict[str, Any] = {"preset": "quick"}


def test_registry_names() -> None:
    names = constrained_grpo.list_agents()
    for name in ("cgrpo", "grpo-screw", "grpo", "cgrpo-gdpo", "cgrpo-dara", "cgrpo-softmax", "cgrpo-mu",
                 "cgrpo-maxrl", "cgrpo-drgrpo"):
        assert name in names
    assert agent_spec("grpo").constrained is False
    assert agent_spec("cgrpo").constrained is True
    assert set(VARIANTS) <= set(names)


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_every_variant_builds_with_a_valid_config(name: str) -> None:
    agent = constrained_grpo.make_agent(name, TINY, seed=0, preset="quick", num_groups=4, minibatches=2)
    assert agent.algo == name
    assert agent.config.aggregator == VARIANTS[name].options.get("aggregator", "scadv")


def test_unconstrained_grpo_has_no_multipliers() -> None:
    agent = constrained_grpo.make_agent("grpo", TINY, seed=0, **QUICK)
    records: list[dict[str, Any]] = []
    agent.learn(200, records.append)
    assert records[0]["multipliers"] == []
    assert len(records[0]["ep_cost"]) == 2
    validate_log_record(records[0], 2)


def test_log_record_follows_contract_2() -> None:
    agent = constrained_grpo.make_agent("cgrpo", TINY, seed=0, **QUICK)
    records: list[dict[str, Any]] = []
    agent.learn(1500, records.append)
    assert len(records) >= 2
    for i, record in enumerate(records, start=1):
        validate_log_record(record, 2)
        assert record["iteration"] == i
        for key in ("pg_loss", "entropy", "kl", "eff_w_reward", "eff_w_hazard", "eff_w_fuel",
                    "rollout_s", "advantage_s", "backward_s"):
            assert np.isfinite(record[key]), key
        assert len(record["multipliers"]) == 2
    assert records[-1]["env_steps"] >= 1500
    assert records[-1]["wall_s"] > records[0]["wall_s"] > 0
    json.dumps(records)  # JSON-safe, so a log callback can write it as is


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"limits": [-0.1, 4.0]}, "must be finite and >= 0"),
        ({"group_size": 1}, "group_size"),
        ({"estimator": "zcore"}, "unknown estimator 'zcore'"),
        ({"aggregator": "mean"}, "unknown aggregator"),
        ({"lerning_rate": 1e-3}, "unknown GRPO option"),
        ({"multiplier": {"rule": "sgd"}}, "unknown multiplier rule"),
        ({"loss_agg": "mean"}, "unknown loss_agg"),
    ],
)
def test_bad_config_errors(options: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        constrained_grpo.make_agent("cgrpo", TINY, seed=0, **QUICK, **options)


def test_limits_must_match_the_task() -> None:
    with pytest.raises(ConstraintError, match="1 limit"):
        constrained_grpo.make_agent("cgrpo", TINY, seed=0, limits=[0.1], **QUICK)
    with pytest.raises(ConstraintError, match="unknown constraint"):
        constrained_grpo.make_agent("cgrpo", TINY, seed=0, limits={"speed": 1.0}, **QUICK)
    agent = constrained_grpo.make_agent("cgrpo", TINY, seed=0, limits={"fuel": 5.0}, **QUICK)
    np.testing.assert_allclose(agent.adapter.limits, [0.2, 5.0])


def test_unknown_preset() -> None:
    with pytest.raises(ValueError, match="quick"):
        make_config("fast")


def test_config_round_trips_through_json() -> None:
    cfg = make_config("paper", limits={"fuel": 3.0}, multiplier={"rule": "pid", "kp": 0.5})
    again = GRPOConfig.from_dict(json.loads(json.dumps(cfg.to_dict())))
    assert again == cfg
    assert again.multiplier.rule == "pid" and again.multiplier.kp == 0.5


def test_variant_multiplier_options_merge_with_user_options() -> None:
    agent = constrained_grpo.make_agent("cgrpo-pid", TINY, seed=0, multiplier={"kp": 0.7}, **QUICK)
    assert agent.config.multiplier.rule == "pid"
    assert agent.config.multiplier.kp == 0.7


def test_save_load_round_trip(tmp_path: Path) -> None:
    agent = constrained_grpo.make_agent("cgrpo", TINY, seed=3, kl_coef=0.05, **QUICK)
    agent.learn(800)
    agent.save(tmp_path / "run")
    assert (tmp_path / "run" / "model.safetensors").exists()
    meta = json.loads((tmp_path / "run" / "config.json").read_text())
    assert meta["algo"] == "cgrpo" and meta["env_id"] == TINY and meta["seed"] == 3

    clone = load_agent(tmp_path / "run")
    assert clone.config == agent.config
    np.testing.assert_array_equal(clone.multipliers, agent.multipliers)
    for a, b in zip(agent.policy.state_dict().values(), clone.policy.state_dict().values()):
        assert torch.equal(a, b)
    assert clone.trainer.env_steps == agent.trainer.env_steps
    assert clone.trainer.iteration == agent.trainer.iteration
    for a, b in zip(agent.trainer.reference.state_dict().values(), clone.trainer.reference.state_dict().values()):
        assert torch.equal(a, b)
    ev_a, ev_b = agent.evaluate(5, deterministic=True), clone.evaluate(5, deterministic=True)
    assert isinstance(ev_a, EvalResult) and ev_a.costs.shape == (5, 2)
    np.testing.assert_array_equal(ev_a.returns, ev_b.returns)
    np.testing.assert_array_equal(ev_a.costs, ev_b.costs)

    # the optimiser state came along: one more iteration from both gives the same weights
    agent.trainer.adapter.rng = np.random.default_rng(7)
    clone.trainer.adapter.rng = np.random.default_rng(7)
    agent.trainer.adapter.generator.manual_seed(7)
    clone.trainer.adapter.generator.manual_seed(7)
    agent.trainer.generator.manual_seed(7)
    clone.trainer.generator.manual_seed(7)
    agent.trainer.step()
    clone.trainer.step()
    for a, b in zip(agent.policy.state_dict().values(), clone.policy.state_dict().values()):
        torch.testing.assert_close(a, b)


def test_load_into_a_different_agent_is_an_error(tmp_path: Path) -> None:
    agent = constrained_grpo.make_agent("cgrpo", TINY, seed=0, **QUICK)
    agent.save(tmp_path / "run")
    other = constrained_grpo.make_agent("cgrpo", TINY, seed=0, preset="quick", lr=0.123)
    with pytest.raises(ValueError, match="load_agent"):
        other.load(tmp_path / "run")


def test_same_seed_same_run() -> None:
    runs = []
    for _ in range(2):
        agent = constrained_grpo.make_agent("cgrpo", TINY, seed=11, **QUICK)
        records: list[dict[str, Any]] = []
        agent.learn(600, records.append)
        runs.append([(r["ep_return"], r["ep_cost"], r["multipliers"]) for r in records])
    assert runs[0] == runs[1]


def test_deterministic_and_stochastic_evaluation() -> None:
    agent = constrained_grpo.make_agent("cgrpo", TINY, seed=0, **QUICK)
    det = agent.evaluate(4, deterministic=True)
    sto = agent.evaluate(4, deterministic=False)
    assert det.returns.shape == sto.returns.shape == (4,)
    assert np.all(det.lengths >= 1)


class NaNAfter:
    """A rollout adapter whose reward turns NaN at a given iteration (tests the trainer alone)."""

    constraint_names = ("hazard", "fuel")
    limits = np.array([0.1, 5.0])

    def __init__(self, bad_iteration: int, component: int):
        self.calls = 0
        self.bad_iteration = bad_iteration
        self.component = component

    def collect(self, policy: torch.nn.Module, num_groups: int, group_size: int) -> RolloutBatch:
        self.calls += 1
        n = num_groups * group_size
        x = np.random.default_rng(self.calls).random((num_groups, group_size, 3))
        if self.calls == self.bad_iteration:
            x[0, 1, self.component] = np.nan
        obs = torch.randn(n, 3, 2)
        with torch.no_grad():
            logp = torch.log_softmax(policy(obs), -1)[..., 0]
        return RolloutBatch(x, logp, torch.ones(n, 3, dtype=torch.bool), 3 * n, np.full(n, 3), obs)

    def log_probs(self, policy: torch.nn.Module, batch: RolloutBatch, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logp_all = torch.log_softmax(policy(batch.data[index]), -1)
        return logp_all[..., 0], -(logp_all.exp() * logp_all).sum(-1)


@pytest.mark.parametrize(("component", "label"), [(0, "reward"), (2, "fuel")])
def test_nan_stops_training_after_logging_earlier_iterations(component: int, label: str) -> None:
    cfg = make_config("quick", num_groups=2, group_size=3, minibatches=1)
    trainer = GRPOTrainer(cfg, NaNAfter(3, component), torch.nn.Linear(2, 2))
    logged: list[dict[str, Any]] = []
    with pytest.raises(NonFiniteRolloutError, match=f"iteration 3: non-finite episodic {label}"):
        trainer.train(10_000, logged.append)
    assert [r["iteration"] for r in logged] == [1, 2]


def test_agent_nan_in_task_stops_with_named_component(monkeypatch: pytest.MonkeyPatch) -> None:
    agent: GRPOAgent = constrained_grpo.make_agent("cgrpo", TINY, seed=0, **QUICK)
    collect = agent.adapter.collect
    calls = {"n": 0}

    def poisoned(policy: torch.nn.Module, p: int, g: int) -> RolloutBatch:
        batch = collect(policy, p, g)
        calls["n"] += 1
        if calls["n"] == 2:
            batch.components[0, 0, 1] = np.nan  # hazard
        return batch

    monkeypatch.setattr(agent.adapter, "collect", poisoned)
    logged: list[dict[str, Any]] = []
    with pytest.raises(NonFiniteRolloutError, match="iteration 2: non-finite episodic hazard"):
        agent.learn(100_000, logged.append)
    assert len(logged) == 1


def test_option_precedence_preset_control_family_variant_user() -> None:
    from constrained_grpo.agents.agent import CONTROL_OVERRIDES, control_defaults

    grid = control_defaults("Grid/HazardFuel-v0")
    assert grid["hidden_sizes"] == () and grid["multiplier"]["normalize"] is True
    assert control_defaults("Grid/HazardFuelCoords-v0")["hidden_sizes"] == (64, 64)
    assert control_defaults("Highway/Highway-v0") == CONTROL_OVERRIDES
    agent = constrained_grpo.make_agent("cgrpo-pid", TINY, seed=0, preset="quick", hidden_sizes=(8,),
                                        multiplier={"kp": 0.3})
    cfg = agent.config
    assert cfg.hidden_sizes == (8,)  # user beats the family row
    assert cfg.multiplier.rule == "pid" and cfg.multiplier.kp == 0.3  # variant rule, user gain
    assert cfg.multiplier.normalize is True  # control default kept
    assert cfg.num_groups == 8  # the quick preset


def test_gaussian_policy_log_prob_and_entropy() -> None:
    from constrained_grpo.agents.control import GaussianMLPPolicy

    torch.manual_seed(0)
    policy = GaussianMLPPolicy(3, 2, (8,), "tanh", init_log_std=-0.5)
    obs = torch.randn(5, 3)
    action, logp = policy.sample(obs, torch.Generator().manual_seed(1))
    dist = torch.distributions.Normal(policy.net(obs), policy.log_std.exp())
    torch.testing.assert_close(logp, dist.log_prob(action).sum(-1))
    logp2, entropy = policy.log_prob_entropy(obs, action)
    torch.testing.assert_close(logp2, logp)
    torch.testing.assert_close(entropy, dist.entropy().sum(-1))
    torch.testing.assert_close(policy.mode(obs), policy.net(obs))


def test_categorical_policy_sampling_matches_its_probabilities() -> None:
    from constrained_grpo.agents.control import CategoricalMLPPolicy

    policy = CategoricalMLPPolicy(2, 3, ())
    with torch.no_grad():
        policy.net[0].weight.zero_()
        policy.net[0].bias.copy_(torch.log(torch.tensor([0.2, 0.3, 0.5])))
    obs = torch.zeros(20_000, 2)
    action, logp = policy.sample(obs, torch.Generator().manual_seed(0))
    freq = torch.bincount(action, minlength=3).double() / len(action)
    torch.testing.assert_close(freq, torch.tensor([0.2, 0.3, 0.5], dtype=torch.float64), atol=0.015, rtol=0)
    torch.testing.assert_close(logp, torch.log(torch.tensor([0.2, 0.3, 0.5]))[action])


def test_custom_task_outside_the_table_gets_the_control_agent() -> None:
    """A user's env registered with gymnasium only: the control agent trains on it through
    the sync vector env, whose finishing-step costs must reach the multipliers."""
    import gymnasium as gym

    from constrained_grpo.tasks import task_info

    env_id = "CourseGrid3x3-v0"
    if env_id not in gym.registry:
        gym.register(env_id, entry_point="constrained_grpo.envs.gridworld:GridWorldEnv", kwargs={"size": 3},
                     max_episode_steps=None)
    assert task_info(env_id).family.name == "user"
    agent = constrained_grpo.make_agent("cgrpo", env_id, seed=0, preset="quick")
    assert isinstance(agent, GRPOAgent)
    logged: list[dict[str, Any]] = []
    agent.learn(3_000, logged.append)
    # Every episode uses fuel, so a mean fuel cost of 0 would mean the last step's costs were lost.
    assert all(r["ep_cost"][1] >= 2 for r in logged)
    with pytest.raises(gym.error.UnregisteredEnv):
        task_info("NoSuchTask-v0")


def test_linear_policy_fast_path_matches_the_autograd_path() -> None:
    """A linear policy's numpy rollout and closed-form update give what the torch path gives.

    Same seed, same groups: the rollouts agree exactly on actions, masks, returns and
    costs (the same uniform draws pick the same actions) and on log pi_old to float32
    round-off; one update (2 epochs x 2 minibatches of Adam) moves the weights alike.
    ``closed_form=False`` is the config flag that selects the readable path.
    """
    from constrained_grpo.agents.advantages import compute_advantages

    options = {**QUICK, "hidden_sizes": (), "kl_coef": 0.05}
    fast = constrained_grpo.make_agent("cgrpo", TINY, seed=3, **options)
    slow = constrained_grpo.make_agent("cgrpo", TINY, seed=3, closed_form=False, **options)
    assert fast.policy.linear_layer is not None and slow.policy.linear_layer is None
    assert fast.config.closed_form and not slow.config.closed_form
    cfg = fast.config
    for _ in range(2):  # the second rollout starts where the first left the random stream
        batch_fast = fast.adapter.collect(fast.policy, cfg.num_groups, cfg.group_size)
        with torch.no_grad():
            batch_slow = slow.adapter.collect(slow.policy, cfg.num_groups, cfg.group_size)
        assert batch_slow.mask.shape[1] > 8  # longer than one block of uniform draws
    mask = batch_slow.mask
    np.testing.assert_array_equal(batch_fast.mask.numpy(), mask.numpy())
    np.testing.assert_array_equal(batch_fast.components, batch_slow.components)
    np.testing.assert_array_equal(batch_fast.data.actions[mask].numpy(), batch_slow.data.actions[mask].numpy())
    np.testing.assert_allclose(batch_fast.logp_old[mask].numpy(), batch_slow.logp_old[mask].numpy(), atol=1e-6)

    fast.trainer.multiplier.values[:] = slow.trainer.multiplier.values[:] = [0.5, 0.2]
    adv = compute_advantages(batch_slow.components, slow.trainer.lambdas, cfg.advantage_spec)
    adv_t = torch.as_tensor(adv.reshape(-1), dtype=torch.float32)
    stats_fast = fast.trainer._update(batch_fast, adv_t)
    stats_slow = slow.trainer._update(batch_slow, adv_t)
    for p_fast, p_slow in zip(fast.policy.parameters(), slow.policy.parameters()):
        np.testing.assert_allclose(p_fast.detach().numpy(), p_slow.detach().numpy(), atol=2e-6)
    moved = sum(float((p.detach() - q).abs().sum()) for p, q in zip(fast.policy.parameters(), fast.trainer.reference.parameters()))
    assert moved > 1e-3  # the update did move the policy
    for key in ("loss", "pg_loss", "kl", "entropy", "clip_frac", "approx_kl", "grad_norm"):
        assert stats_fast[key] == pytest.approx(stats_slow[key], rel=1e-4, abs=1e-7), key


def test_adam_step_is_torch_adam() -> None:
    """The numpy Adam step of the linear path follows torch.optim.Adam step for step."""
    from constrained_grpo.agents.trainer import adam_step

    gen = torch.Generator().manual_seed(0)
    param = torch.nn.Parameter(torch.randn(3, 5, generator=gen))
    mine = param.detach().numpy().copy()
    state = (np.zeros((), dtype=np.float32), np.zeros_like(mine), np.zeros_like(mine))
    opt = torch.optim.Adam([param], lr=0.01)
    for _ in range(5):
        grad = torch.randn(3, 5, generator=gen)
        param.grad = grad.clone()
        opt.step()
        adam_step(mine, grad.numpy(), state, 0.01, (0.9, 0.999), 1e-8)
    np.testing.assert_allclose(mine, param.detach().numpy(), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(state[1], opt.state[param]["exp_avg"].numpy(), rtol=1e-6)
    assert float(state[0]) == 5.0
