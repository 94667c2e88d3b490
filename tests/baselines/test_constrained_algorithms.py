"""The constrained baselines beyond PPO-Lagrangian, on hand-worked cases of their updates.

Trust-region cases use a 2-d quadratic model: ``H`` the Fisher matrix, ``delta = 0.5``
(so with ``H = I`` the trust region is the unit disc), ``g`` the reward gradient, ``b``
the cost gradient, ``c = J - d``. Each expected step is worked out by hand from the
geometry (the maximiser of ``g'x`` on the disc intersected with ``b'x + c <= 0``) and,
for other ``H``, checked against scipy's SLSQP on the primal problem.
"""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from scipy.optimize import minimize
from stable_baselines3.common.vec_env import DummyVecEnv

from constrained_grpo.baselines.first_order import (
    cup_projection_loss,
    focops_loss,
    focops_target,
    p3o_loss,
    ppo_clip_loss,
)
from constrained_grpo.baselines.saute import (
    SauteConfig,
    SauteObservation,
    SauteVecEnv,
    saute_reward,
    saute_update,
)
from constrained_grpo.baselines.trust_region import (
    conjugate_gradient,
    cpo_dual_step,
    cpo_step_coefficients,
    pcpo_step,
)
from constrained_grpo.registry import agent_spec, list_agents, make_agent
from constrained_grpo.tasks import make_env
from constrained_grpo.wrappers import RecordEpisodeCost

from baseline_envs import FIXED_COST_ID, FixedCostEnv

DELTA = 0.5
NEW = ("trpo-lag", "cpo", "pcpo", "focops", "cup", "p3o", "rcpo", "saute-ppo")


# --- trust region -----------------------------------------------------------------------
def _quantities(H: np.ndarray, g: np.ndarray, B: np.ndarray) -> tuple[float, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    Hi = np.linalg.inv(H)
    return float(g @ Hi @ g), B.T @ Hi @ g, B.T @ Hi @ B, Hi @ g, Hi @ B


def _cpo_x(H: np.ndarray, g: np.ndarray, b: np.ndarray, c: float) -> tuple[np.ndarray, str]:
    q, r, S, xg, xb = _quantities(H, g, b[:, None])
    alpha, beta, case = cpo_step_coefficients(q, float(r[0]), float(S[0, 0]), c, DELTA)
    return alpha * xg - beta * xb[:, 0], case


def _primal(H: np.ndarray, g: np.ndarray, B: np.ndarray, c: np.ndarray) -> np.ndarray:
    """The primal max g'x s.t. x'Hx/2 <= delta, B'x + c <= 0, by scipy (with analytic
    gradients; SLSQP's line search can stall on a machine's BLAS, then trust-constr decides)."""
    cons = [{"type": "ineq", "fun": lambda x: DELTA - 0.5 * x @ H @ x, "jac": lambda x: -(H @ x)}]
    cons += [{"type": "ineq", "fun": lambda x, k=k: -(B[:, k] @ x + c[k]), "jac": lambda x, k=k: -B[:, k]}
             for k in range(len(c))]
    res = minimize(lambda x: -g @ x, np.zeros(len(g)), jac=lambda x: -g, constraints=cons, method="SLSQP",
                   options={"ftol": 1e-12, "maxiter": 1000})
    if not res.success:
        res = minimize(lambda x: -g @ x, np.zeros(len(g)), jac=lambda x: -g, constraints=cons, method="trust-constr",
                       options={"gtol": 1e-10, "xtol": 1e-12, "maxiter": 5000})
    assert res.success, res.message
    return res.x


def test_conjugate_gradient_solves_a_2x2_system_exactly() -> None:
    A = th.tensor([[4.0, 1.0], [1.0, 3.0]], dtype=th.float64)
    x = conjugate_gradient(lambda v: A @ v, th.tensor([1.0, 2.0], dtype=th.float64), iters=2)
    assert np.allclose(x.numpy(), [1 / 11, 7 / 11])  # A^-1 b by hand


@pytest.mark.parametrize(
    ("g", "c", "expected", "case"),
    [
        # Infeasible start, boundary x2 = -1/2 cuts the disc: x = (sqrt(3)/2, -1/2).
        ((1.0, 0.0), 0.5, (math.sqrt(3) / 2, -0.5), "dual"),
        # Feasible start, the TRPO step (1,1)/sqrt2 breaks x2 <= 1/4: x = (sqrt(15)/4, 1/4).
        ((1.0, 1.0), -0.25, (math.sqrt(15) / 4, 0.25), "dual"),
        # Feasible start, TRPO step (1, 0) keeps x2 <= 1/2 (constraint inactive).
        ((1.0, 0.0), -0.5, (1.0, 0.0), "dual"),
        # The whole disc is feasible (x2 <= 2): the TRPO step.
        ((1.0, 0.0), -2.0, (1.0, 0.0), "trpo"),
        # No point of the disc has x2 <= -2: recovery, x = -sqrt(2 delta / s) H^-1 b = (0, -1).
        ((1.0, 0.0), 2.0, (0.0, -1.0), "recovery"),
    ],
)
def test_cpo_closed_form_on_the_unit_disc(g: tuple[float, float], c: float, expected: tuple[float, float], case: str) -> None:
    x, got_case = _cpo_x(np.eye(2), np.array(g), np.array([0.0, 1.0]), c)
    assert got_case == case
    assert np.allclose(x, expected, atol=1e-6)


def test_cpo_dual_solution_nu_and_lambda_by_hand() -> None:
    # g = (1, 1), b = (0, 1), c = -1/4, H = I: x = (g - nu b) / lambda = (sqrt15/4, 1/4)
    # gives lambda = 4/sqrt15 and nu = 1 - lambda/4.
    alpha, beta, _ = cpo_step_coefficients(q=2.0, r=1.0, s=1.0, c=-0.25, delta=DELTA)
    lam = 4 / math.sqrt(15)
    assert alpha == pytest.approx(1 / lam)
    assert beta / alpha == pytest.approx(1 - lam / 4)


@pytest.mark.parametrize("seed", range(6))
def test_cpo_closed_form_matches_the_primal_for_a_general_metric(seed: int) -> None:
    rng = np.random.default_rng(seed)
    M = rng.normal(size=(2, 2))
    H = M @ M.T + 0.5 * np.eye(2)
    g, b = rng.normal(size=2), rng.normal(size=2)
    c = float(rng.normal(scale=0.5))
    x, case = _cpo_x(H, g, b, c)
    if case == "recovery":  # then no feasible point: the step is the steepest cost decrease to the boundary
        assert 0.5 * x @ H @ x == pytest.approx(DELTA)
        assert b @ x + c > 0
        return
    assert np.allclose(x, _primal(H, g, b[:, None], np.array([c])), atol=1e-4)


def test_cpo_k_constraint_dual_by_hand_and_against_the_primal() -> None:
    H, g, B = np.eye(2), np.array([1.0, 1.0]), np.eye(2)
    # x1 <= 1/2 binds, x2 <= 0.9 does not: x = (1/2, sqrt(3)/2).
    q, r, S, xg, xb = _quantities(H, g, B)
    alpha, beta, case = cpo_dual_step(q, r, S, np.array([-0.5, -0.9]), DELTA)
    assert case == "dual"
    assert np.allclose(alpha * xg - xb @ beta, [0.5, math.sqrt(3) / 2], atol=1e-5)
    # Both x1 <= -1 and x2 <= -1: nearest feasible point (-1, -1) lies outside the disc, so the
    # recovery step goes towards it up to the boundary: (-1, -1) / sqrt 2.
    alpha, beta, case = cpo_dual_step(q, r, S, np.array([1.0, 1.0]), DELTA)
    assert case == "recovery" and alpha == 0.0
    assert np.allclose(-xb @ beta, [-1 / math.sqrt(2), -1 / math.sqrt(2)], atol=1e-6)
    rng = np.random.default_rng(7)
    for _ in range(5):
        M = rng.normal(size=(3, 3))
        H3 = M @ M.T + np.eye(3)
        g3, B3, c3 = rng.normal(size=3), rng.normal(size=(3, 2)), rng.uniform(-0.6, 0.1, size=2)
        q, r, S, xg, xb = _quantities(H3, g3, B3)
        alpha, beta, case = cpo_dual_step(q, r, S, c3, DELTA)
        if case != "recovery":
            assert np.allclose(alpha * xg - xb @ beta, _primal(H3, g3, B3, c3), atol=1e-4)


def test_cpo_one_constraint_dual_agrees_with_the_closed_form() -> None:
    for c in (-0.25, 0.3, 0.6):
        q, r, S, xg, xb = _quantities(np.diag([2.0, 0.5]), np.array([1.0, 0.4]), np.array([[0.3], [1.0]]))
        a1, b1, _ = cpo_step_coefficients(q, float(r[0]), float(S[0, 0]), c, DELTA)
        a2, b2, _ = cpo_dual_step(q, r, S, np.array([c]), DELTA)
        assert np.allclose(a1 * xg - b1 * xb[:, 0], a2 * xg - xb @ b2, atol=1e-6)


def test_pcpo_projects_the_trpo_step_onto_the_constraint() -> None:
    # TRPO step (1, 1)/sqrt2; projection onto x2 <= 1/4 (H = I): (1/sqrt2, 1/4).
    H, g, B = np.eye(2), np.array([1.0, 1.0]), np.array([[0.0], [1.0]])
    q, r, S, xg, xb = _quantities(H, g, B)
    alpha, mu = pcpo_step(q, r, S, np.array([-0.25]), DELTA)
    assert mu[0] == pytest.approx(1 / math.sqrt(2) - 0.25)
    assert np.allclose(alpha * xg - xb @ mu, [1 / math.sqrt(2), 0.25])
    # A TRPO step that already satisfies the constraint is kept.
    alpha, mu = pcpo_step(q, r, S, np.array([-2.0]), DELTA)
    assert mu[0] == 0.0


# --- FOCOPS, CUP, P3O -----------------------------------------------------------------------
def test_focops_loss_weights_and_drops_states_beyond_eta() -> None:
    loss = focops_loss(th.tensor([0.01, 0.03]), th.tensor([1.2, 0.9]), th.tensor([1.5, -3.0]), lam=1.5, eta=0.02)
    # State 1: 0.01 - 1.2 * 1.5 / 1.5 = -1.19; state 2 (KL 0.03 > eta) drops out: mean -0.595.
    assert loss.item() == pytest.approx(-0.595)


@pytest.mark.slow
def test_focops_target_and_its_loss_minimiser() -> None:
    # pi* = pi_old exp(A / lambda) / Z: A = (lambda ln 3, 0) on a uniform pi_old gives (3/4, 1/4).
    assert np.allclose(focops_target(np.array([0.5, 0.5]), np.array([1.5 * math.log(3), 0.0]), 1.5), [0.75, 0.25])
    # Minimising the FOCOPS loss over a free categorical (samples drawn in proportion to
    # pi_old = (1/2, 1/4, 1/4)) reaches that target.
    old = th.tensor([0.5, 0.25, 0.25], dtype=th.float64)
    adv_per_action = th.tensor([0.3, -0.6, 0.9], dtype=th.float64)
    actions = th.tensor([0, 0, 1, 2])
    logits = th.zeros(3, dtype=th.float64, requires_grad=True)
    opt = th.optim.Adam([logits], lr=0.05)
    for _ in range(3000):
        logp = th.log_softmax(logits, 0)
        kl = (logp.exp() * (logp - old.log())).sum().expand(4)
        loss = focops_loss(kl, (logp[actions] - old.log()[actions]).exp(), adv_per_action[actions], lam=1.5, eta=1e9)
        opt.zero_grad()
        loss.backward()
        opt.step()
    target = focops_target(old.numpy(), adv_per_action.numpy(), 1.5)
    assert np.allclose(th.softmax(logits, 0).detach().numpy(), target, atol=1e-4)


def test_ppo_clip_loss_by_hand() -> None:
    ratio = th.tensor([1.5, 0.5])
    # A > 0: min(1.5, 1.2) and min(0.5, 0.8): -(1.2 + 0.5) / 2.
    assert ppo_clip_loss(ratio, th.tensor([1.0, 1.0]), 0.2).item() == pytest.approx(-0.85)
    # A < 0: min(-1.5, -1.2) and min(-0.5, -0.8): (1.5 + 0.8) / 2.
    assert ppo_clip_loss(ratio, th.tensor([-1.0, -1.0]), 0.2).item() == pytest.approx(1.15)


def test_cup_projection_loss_by_hand() -> None:
    loss = cup_projection_loss(
        kl=th.tensor([0.1, 0.3]), ratio=th.tensor([1.0, 2.0]),
        cost_adv=th.tensor([[1.0, 0.0], [-1.0, 2.0]]), nu=th.tensor([0.5, 1.0]), coef=2.0,
    )
    # 2 * 1 * 0.5 + 0.1 = 1.1 and 2 * 2 * (-0.5 + 2) + 0.3 = 6.3: mean 3.7.
    assert loss.item() == pytest.approx(3.7)


def test_p3o_penalty_by_hand() -> None:
    ratio, adv = th.tensor([1.0, 1.5]), th.tensor([1.0, 1.0])
    cost_adv = th.tensor([[1.0, -2.0], [2.0, -2.0]])
    # L_clip = -(1 + 1.2) / 2 = -1.1. Lc_1 = mean(1, max(3, 2.4)) = 2; Lc_2 = mean(-2, max(-3, -2.4)) = -2.2.
    loss, active = p3o_loss(ratio, adv, cost_adv, th.tensor([-0.5, 1.0]), clip=0.2, kappa=20.0)
    # Penalties: 20 * max(0, 2 - 0.5) = 30 and 20 * max(0, -2.2 + 1) = 0.
    assert loss.item() == pytest.approx(-1.1 + 30.0)
    assert active.tolist() == [1.0, 0.0]
    loss, active = p3o_loss(ratio, adv, cost_adv, th.tensor([-3.0, -3.0]), clip=0.2, kappa=20.0)
    assert loss.item() == pytest.approx(-1.1) and active.tolist() == [0.0, 0.0]


# --- Saute ------------------------------------------------------------------------------------
def test_saute_budget_update_and_reward() -> None:
    z = saute_update(np.ones(2), np.array([1.0, 1.0]), np.array([0.2, 4.4]))
    assert np.allclose(z, [1 - 5.0, 1 - 1 / 4.4])
    assert saute_reward(np.array(0.5), z, -1.0) == -1.0
    assert saute_update(np.array([0.5]), np.array([0.0]), np.array([1.0]), gamma_s=0.5)[0] == 1.0
    # Four steps of 1.1 fuel spend a 4.4 budget exactly: still within it.
    z = np.ones(1)
    for _ in range(4):
        z = saute_update(z, np.array([1.1]), np.array([4.4]))
    assert saute_reward(np.array(0.5), z, -1.0) == 0.5


def test_saute_vec_env_augments_state_and_reshapes_reward() -> None:
    # FixedCost: 5 steps, reward 0, costs (1, 1{last step}), limits (3, 0.5).
    venv = SauteVecEnv(DummyVecEnv([lambda: RecordEpisodeCost(make_env(FIXED_COST_ID))]), np.array([3.0, 0.5]))
    obs = venv.reset()
    assert obs.shape == (1, 3) and np.allclose(obs[0, 1:], [1.0, 1.0])
    rewards = []
    for t in range(1, 6):
        obs, rew, done, info = venv.step(np.array([0]))
        rewards.append(float(rew[0]))
        if t < 5:
            assert np.allclose(obs[0, 1:], [1 - t / 3, 1.0], atol=1e-6)
    # Budget 1 is spent after the 4th step (4 > 3), budget 2 at the 5th.
    assert rewards == [0.0, 0.0, 0.0, -1.0, -1.0]
    assert done[0]
    assert np.allclose(info[0]["terminal_observation"][1:], [1 - 5 / 3, 1 - 1 / 0.5], atol=1e-6)
    assert np.allclose(obs[0, 1:], [1.0, 1.0])  # the next episode starts with full budgets
    assert info[0]["episode"]["r"] == 0.0  # the task's own return


def test_saute_observation_wrapper_keeps_the_true_reward() -> None:
    env = SauteObservation(make_env(FIXED_COST_ID), np.array([3.0, 0.5]))
    obs, _ = env.reset(seed=0)
    assert np.allclose(obs[1:], [1.0, 1.0])
    for _ in range(4):
        obs, reward, *_ = env.step(0)
    assert reward == 0.0 and np.allclose(obs[1:], [1 - 4 / 3, 1.0], atol=1e-6)


def test_saute_vector_observation_tracks_each_row_and_restarts_it_at_an_episode_end() -> None:
    """The batched twin's wrapper: FixedCost spends cost 1 of the first constraint every step
    and 1 of the second at its 5th (last) step, so with limits (3, 0.5) row z after t < 5
    steps is (1 - t/3, 1); at the 5th the episode ends and the returned observation (the next
    episode's) carries z = (1, 1). Rewards and costs stay the task's."""
    from constrained_grpo.baselines.saute import SauteVectorObservation
    from constrained_grpo.tasks import make_vec_env

    vec = SauteVectorObservation(make_vec_env(FIXED_COST_ID, 2), np.array([3.0, 0.5]))
    try:
        assert vec.single_observation_space.shape == (3,) and vec.observation_space.shape == (2, 3)
        obs, _ = vec.reset(seed=[0, 1])
        assert np.allclose(obs[:, 1:], 1.0)
        for t in range(1, 6):
            obs, reward, terminated, truncated, info = vec.step(np.array([0, 1]))
            assert np.allclose(reward, 0.0)
            assert np.allclose(info["costs"], [[1.0, float(t == 5)]] * 2)
            want = [1.0, 1.0] if t == 5 else [1 - t / 3, 1.0]
            assert np.allclose(obs[:, 1:], [want, want], atol=1e-6), t
        assert np.all(terminated | truncated)
        obs, *_ = vec.step(np.array([0, 0]))  # the next episode spends its own budget
        assert np.allclose(obs[:, 1:], [[1 - 1 / 3, 1.0]] * 2, atol=1e-6)
    finally:
        vec.close()


def test_saute_rejects_a_zero_limit() -> None:
    with pytest.raises(ValueError, match="limits"):
        SauteObservation(make_env(FIXED_COST_ID), np.array([3.0, 0.0]))
    with pytest.raises(ValueError, match="saute_gamma"):
        SauteConfig(saute_gamma=0.0)


# --- registry and Contract 2 ---------------------------------------------------------------------
def test_new_baselines_are_registered_with_their_lambda_units() -> None:
    names = set(list_agents())
    assert set(NEW) <= names
    units = {n: agent_spec(n).lambda_in_reward_units for n in NEW}
    assert units == {"trpo-lag": True, "cpo": False, "pcpo": False, "focops": True, "cup": False,
                     "p3o": False, "rcpo": True, "saute-ppo": False}
    assert all(agent_spec(n).constrained for n in NEW)


@pytest.mark.parametrize("name", NEW)
def test_every_new_baseline_trains_saves_and_loads(name: str, tmp_path: object) -> None:
    from constrained_grpo.baselines import load_agent

    agent = make_agent(name, FIXED_COST_ID, seed=0, n_envs=2, n_steps=16, batch_size=16, n_epochs=1)
    records: list[dict] = []
    agent.learn(64, records.append)
    assert [r["env_steps"] for r in records] == [32, 64]
    assert all(np.isfinite(r["policy_loss"]) for r in records)
    result = agent.evaluate(2)
    assert np.allclose(result.costs, [[5.0, 1.0], [5.0, 1.0]])  # FixedCost's costs, whatever the policy
    path = agent.save(tmp_path / name)  # type: ignore[operator]
    again = load_agent(path)
    assert type(again) is type(agent) and again.env_steps == 64
    assert np.allclose(again.multipliers, agent.multipliers)
    env = make_env(FIXED_COST_ID)
    if name == "saute-ppo":
        # The harness evaluates it through the budget-augmented observation it acts on.
        env = agent.wrap_eval_env(env)
        obs, _ = env.reset(seed=0)
        assert obs.shape == (env.unwrapped.observation_space.shape[0] + 2,) and np.allclose(obs[-2:], 1.0)
    else:
        obs, _ = env.reset(seed=0)
    assert agent.act(obs, deterministic=True) in (0, 1)


class BoxFixedCostEnv(FixedCostEnv):
    """FixedCost with a 2-d Box action (ignored): costs and returns as FixedCost's."""

    def __init__(self) -> None:
        super().__init__()
        self.action_space = gym.spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)


BOX_ID = "TestBaselines/BoxFixedCost-v0"
if BOX_ID not in gym.registry:
    gym.register(id=BOX_ID, entry_point=BoxFixedCostEnv)


def test_box_actions_run_through_every_new_update() -> None:
    for name in NEW:
        agent = make_agent(name, BOX_ID, seed=0, n_envs=2, n_steps=16, batch_size=16, n_epochs=1)
        agent.learn(32)
        assert np.allclose(agent.evaluate(1).costs, [[5.0, 1.0]])


@pytest.mark.parametrize("name", ["trpo-lag", "cpo", "pcpo"])
def test_trust_region_step_moves_the_policy_within_the_kl_bound(name: str) -> None:
    # Regression: the old policy's distribution must be kept apart from the one SB3 reuses,
    # else KL(old || new) reads 0, H v reduces to the damping term and steps overshoot.
    agent = make_agent(name, "Grid/HazardFuel3x3-v0", seed=0, n_envs=4, n_steps=128, batch_size=256)
    records: list[dict] = []
    agent.learn(1024, records.append)
    kls = [r["approx_kl"] for r in records]
    assert all(0.0 <= kl <= 0.01 for kl in kls) and max(kls) > 1e-4, kls


@pytest.mark.parametrize(
    ("name", "option", "value"),
    [("cpo", "trust_region_kl", -1.0), ("trpo-lag", "line_search_coef", 1.5), ("focops", "focops_lam", 0.0),
     ("p3o", "p3o_kappa", -1.0), ("saute-ppo", "saute_unsafe_reward", float("nan"))],
)
def test_bad_options_fail_before_any_work_naming_the_value(name: str, option: str, value: float) -> None:
    with pytest.raises(ValueError, match=option):
        make_agent(name, FIXED_COST_ID, seed=0, **{option: value})
