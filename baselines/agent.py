"""The Contract-2 agent around the SB3 models: ``ppo``, ``ppo-lag`` and ``pid-lag``.

``BaselineAgent`` owns an SB3 model (``stable_baselines3.PPO`` for ``ppo``,
:class:`PPOLagrangian` otherwise) on the task's batched twin where it has one
(:class:`~constrained_grpo.baselines.vec_env.GymVectorVecEnv` over ``make_vec_env``),
else on a ``DummyVecEnv`` of ``make_env(env_id)`` copies, each wrapped in
``RecordEpisodeCost`` (``PPOConfig.vec_env``). It offers ``learn(total_env_steps, log)``,
``evaluate(n_episodes, deterministic)``, ``save(path)`` and ``load(path)``; :func:`load_agent`
rebuilds a saved agent from its directory alone.

A saved agent is a directory: ``model.zip`` is SB3's own ``save`` (weights and optimizer
state), read back with ``set_parameters``, i.e. ``torch.load(weights_only=True)``, never
unpickled; ``agent.json`` beside it holds the config, the task, the seed, the
multiplier state and the counters.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
import zipfile
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from functools import partial
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import stable_baselines3
import torch as th
from safetensors.torch import load_file, save_file
from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.logger import Logger
from stable_baselines3.common.vec_env import DummyVecEnv, VecEnv, VecEnvWrapper
from torch import nn

from constrained_grpo.nonfinite import (
    NonFiniteRolloutError,
    NonFiniteUpdateError,
    check_finite_observations,
    check_finite_parameters,
    logged_note,
)
from constrained_grpo.baselines.config import PPOConfig, PPOLagConfig, merge_config_layers, task_defaults
from constrained_grpo.baselines.constrained_base import lag_model_kwargs
from constrained_grpo.baselines.first_order import CUPConfig, FOCOPSConfig, P3OConfig, RCPOConfig
from constrained_grpo.baselines.ppo_lagrangian import PPOLagrangian, actor_parameters
from constrained_grpo.baselines.omnisafe import OMNISAFE_PRESETS, OmniSafePPOLagConfig, OmniSafeTRPOLagConfig
from constrained_grpo.baselines.saute import SauteConfig
from constrained_grpo.baselines.trust_region import CPOConfig, PCPOConfig, TRPOLagConfig
from constrained_grpo.baselines.vec_env import has_batched_twin, make_sb3_vec_env
from constrained_grpo.constraints import Constraint, costs_from_info, get_constraints, override_limits
from constrained_grpo.deploy import VALIDATION_WAVE, DeploymentSet, FinalPolicyKeeper, load_params, member_rows, params_of
from constrained_grpo.files import atomic_write_text
from constrained_grpo.multipliers import make_multiplier
from constrained_grpo.options import CheckpointError, read_saved_json, reading_checkpoint
from constrained_grpo.registry import DEPLOY_ALIAS_SUFFIXES, EvalResult, register_agent
from constrained_grpo.sampling import categorical_from_uniform, episode_choice, gaussian_from_uniform, play_waves
from constrained_grpo.tasks import make_env, make_vec_env, rollout_episodes, task_info
from constrained_grpo.wrappers import RecordEpisodeCost

__all__ = [
    "BASELINES",
    "BaselineAgent",
    "BaselineFactory",
    "BaselineSpec",
    "load_agent",
    "make_baseline",
    "make_baseline_vec_env",
    "register_baselines",
    "resolve_baseline_config",
    "sb3_ppo_kwargs",
]

#: Evaluation episode i of an agent with seed s starts from reset(seed=s + EVAL_SEED_OFFSET + i),
#: away from the seeds that training uses.
EVAL_SEED_OFFSET = 1_000_003

SAVE_FORMAT = 1
#: The kept snapshots of a ``deploy`` rule other than ``last`` (safetensors).
DEPLOY_FILE = "deploy.safetensors"
_ACTIVATION_FN: dict[str, type[nn.Module]] = {"tanh": nn.Tanh, "relu": nn.ReLU}


@dataclass(frozen=True)
class BaselineSpec:
    """One registered baseline: a row of :data:`BASELINES` is all that registers it
    (:func:`register_baselines`, entry point :class:`BaselineFactory`).

    Attributes:
        config_cls: ``PPOConfig`` (unconstrained), ``PPOLagConfig`` or a subclass; a
            subclass builds its own model (``build_model``) or agent (``agent_class``).
        preset: options that override the config class's defaults for this name (the
            registry's ``defaults``).
        description: one line for listings.
        lambda_in_reward_units: whether lambda multiplies costs against the reward in reward
            units (None: the same as ``constrained``).
    """

    config_cls: type[PPOConfig]
    preset: Mapping[str, Any]
    description: str
    lambda_in_reward_units: bool | None = None

    def __post_init__(self) -> None:
        if not (isinstance(self.config_cls, type) and issubclass(self.config_cls, PPOConfig)):
            raise TypeError(f"BaselineSpec config_cls={self.config_cls!r} must be PPOConfig or a subclass of it")

    @property
    def constrained(self) -> bool:
        return issubclass(self.config_cls, PPOLagConfig) or getattr(self.config_cls, "constrained_method", False)


#: The baselines, keyed by registry name. A preset overrides the config class's defaults.
BASELINES: dict[str, BaselineSpec] = {
    "ppo": BaselineSpec(PPOConfig, {}, "PPO (stable-baselines3), the unconstrained reference"),
    "ppo-lag": BaselineSpec(
        PPOLagConfig,
        {},
        "PPO-Lagrangian on stable-baselines3: cost critic, cost GAE, dual-ascent multipliers (Ray et al. 2019)",
    ),
    "pid-lag": BaselineSpec(
        PPOLagConfig,
        # Ki = the dual-ascent step of ppo-lag; Kp adds a response to the (EMA-smoothed)
        # relative violation itself, Kd one to a rising episodic cost (Stooke et al. 2020).
        {"multiplier": {"rule": "pid", "kp": 0.05, "ki": 0.01, "kd": 0.01}},
        "PID-Lagrangian on stable-baselines3 (Stooke, Achiam & Abbeel 2020)",
    ),
    # Last-iterate remedies on PPO-Lagrangian (constrained_grpo.multipliers, constrained_grpo.optimism).
    "ppo-lag-ogda": BaselineSpec(
        PPOLagConfig,
        {"multiplier": {"optimistic": True}, "policy_optimism": 1.0},
        "PPO-Lagrangian with optimistic steps on both players (ReLOAD, Moskovitz et al. 2023)",
    ),
    "ppo-lag-al": BaselineSpec(
        PPOLagConfig,
        # rho = pid-lag's Kp: the penalty answers the rollout's own violation as its P term does.
        {"multiplier": {"rule": "augmented", "rho": 0.05}},
        "PPO with the augmented Lagrangian: cost weight max(0, lambda + rho e) on the rollout's violation",
    ),
    "crpo": BaselineSpec(
        PPOLagConfig,
        {"multiplier": {"rule": "crpo"}},
        "CRPO: a PPO step on the reward while every cost is within its limit, else on the most violated cost (Xu et al. 2021)",
        False,
    ),
    # The other constrained baselines (baselines/trust_region.py, first_order.py, saute.py).
    "trpo-lag": BaselineSpec(TRPOLagConfig, {}, "TRPO-Lagrangian: TRPO on PPO-Lagrangian's advantage (Ray et al. 2019)", True),
    "cpo": BaselineSpec(CPOConfig, {}, "Constrained Policy Optimization, K >= 1 (Achiam et al. 2017)", False),
    "pcpo": BaselineSpec(PCPOConfig, {}, "Projection-based CPO, KL projection, K >= 1 (Yang et al. 2020)", False),
    "focops": BaselineSpec(FOCOPSConfig, {}, "First Order Constrained Optimization in Policy Space (Zhang et al. 2020)", True),
    "cup": BaselineSpec(CUPConfig, {}, "Constrained Update Projection (Yang et al. 2022)", False),
    "p3o": BaselineSpec(P3OConfig, {}, "Penalized PPO, exact penalty kappa = 20 (Zhang et al. 2022)", False),
    "rcpo": BaselineSpec(RCPOConfig, {}, "Reward Constrained Policy Optimization: PPO on r - lambda c (Tessler et al. 2019)", True),
    "saute-ppo": BaselineSpec(SauteConfig, {}, "Saute RL: PPO on the budget-augmented state (Sootla et al. 2022)", False),
    # OmniSafe 0.5.0's PPOLag / CPPOPID / TRPOLag defaults, key by key (baselines/omnisafe.py, docs/parity.md).
    "ppo-lag-omnisafe": BaselineSpec(OmniSafePPOLagConfig, OMNISAFE_PRESETS["ppo-lag-omnisafe"], "PPO-Lagrangian with OmniSafe 0.5.0's PPOLag defaults"),
    "pid-lag-omnisafe": BaselineSpec(OmniSafePPOLagConfig, OMNISAFE_PRESETS["pid-lag-omnisafe"], "PID-Lagrangian with OmniSafe 0.5.0's CPPOPID defaults"),
    "trpo-lag-omnisafe": BaselineSpec(OmniSafeTRPOLagConfig, OMNISAFE_PRESETS["trpo-lag-omnisafe"], "TRPO-Lagrangian with OmniSafe 0.5.0's TRPOLag defaults", True),
}


def _recorded_env(env_id: str, env_kwargs: Mapping[str, Any]) -> gym.Env:
    return RecordEpisodeCost(make_env(env_id, **env_kwargs))


def _probe_cost_contract(env_id: str, env_kwargs: Mapping[str, Any], seed: int) -> tuple[Constraint, ...]:
    """The task's constraints, after checking on one step that it reports ``info["costs"]``.

    Raises ``CostContractError`` (pointing to Contract 1) for a task that declares no
    constraints or whose step info carries no cost vector of the right shape.
    """
    env = make_env(env_id, **env_kwargs)
    try:
        if isinstance(env.observation_space, gym.spaces.Text) or isinstance(env.action_space, gym.spaces.Text):
            family = task_info(env_id).family.name
            raise ValueError(
                f"{env_id!r} is a {family!r} task: it takes and gives text, and the PPO baselines "
                f"({', '.join(sorted(BASELINES))}) need Box or Discrete spaces for their MLP policies; "
                f"use a GRPO agent, which trains a language model on it: make_agent('cgrpo', {env_id!r}) "
                "(or 'grpo-screw', 'grpo'; see `cgrpo algos`)"
            )
        constraints = get_constraints(env)
        env.reset(seed=seed)
        env.action_space.seed(seed)
        *_, info = env.step(env.action_space.sample())
        costs_from_info(info, len(constraints))
        return constraints
    finally:
        env.close()


def use_batched_env(env_id: str, config: PPOConfig) -> bool:
    """Whether ``config.vec_env`` steps ``env_id`` through its batched twin."""
    if config.vec_env == "auto":
        return has_batched_twin(env_id)
    if config.vec_env == "batched" and not has_batched_twin(env_id):
        raise ValueError(
            f"vec_env='batched' but {env_id!r} registers no batched twin (vector_entry_point); "
            "use vec_env='auto' or 'dummy'"
        )
    return config.vec_env == "batched"


def make_baseline_vec_env(env_id: str, config: PPOConfig, constraints: Sequence[Constraint]) -> VecEnv:
    """The SB3 ``VecEnv`` of ``config.n_envs`` copies of ``env_id`` that ``config.vec_env``
    names: :class:`GymVectorVecEnv` over the batched twin, or ``DummyVecEnv`` of
    ``RecordEpisodeCost`` copies. Both report ``info["episode"]`` with ``r``, ``l``, ``c``."""
    if use_batched_env(env_id, config):
        venv = make_sb3_vec_env(env_id, config.n_envs, constraints, **config.env_kwargs)
        venv.time_limit_bootstrap = config.time_limit_bootstrap
        return venv
    dummy = DummyVecEnv([partial(_recorded_env, env_id, dict(config.env_kwargs))] * config.n_envs)
    return dummy if config.time_limit_bootstrap else _EndAtTimeLimit(dummy)


class _EndAtTimeLimit(VecEnvWrapper):
    """``TimeLimit.truncated`` always False: SB3 does not bootstrap a time-limit cut, which
    ends the scored episode (``PPOConfig.time_limit_bootstrap`` False)."""

    def reset(self) -> Any:
        return self.venv.reset()

    def step_wait(self) -> Any:
        obs, rewards, dones, infos = self.venv.step_wait()
        for info in infos:
            if info.get("TimeLimit.truncated"):
                info["TimeLimit.truncated"] = False
        return obs, rewards, dones, infos


def sb3_ppo_kwargs(config: PPOConfig, seed: int) -> dict[str, Any]:
    """The keywords of SB3's ``PPO`` that ``config`` sets (shared with the speed benchmark)."""
    return dict(
        learning_rate=config.learning_rate,
        n_steps=config.n_steps,
        batch_size=config.batch_size,
        n_epochs=config.n_epochs,
        gamma=config.gamma,
        gae_lambda=config.gae_lambda,
        clip_range=config.clip_range,
        ent_coef=config.ent_coef,
        vf_coef=config.vf_coef,
        max_grad_norm=config.max_grad_norm,
        target_kl=config.target_kl,
        normalize_advantage=config.normalize_advantage,
        policy_kwargs=dict(
            net_arch=dict(pi=list(config.net_arch), vf=list(config.net_arch)),
            activation_fn=_ACTIVATION_FN[config.activation],
        ),
        seed=seed,
        device=config.device,
        verbose=0,
    )


#: Losses of a log record that must be finite (SB3's logged means over the update).
_LOSS_KEYS: tuple[str, ...] = ("policy_loss", "value_loss", "entropy_loss", "approx_kl", "value_loss_cost")


class _ContractLog(BaseCallback):
    """Calls ``log(record)`` once per iteration, right after SB3's policy update.

    SB3 2.9.2's loop is ``collect_rollouts -> dump_logs -> train``; ``on_rollout_start``
    of the next rollout (and ``on_training_end``) therefore follows the update, whose
    losses then sit in ``logger.name_to_value``.
    """

    def __init__(self, agent: "BaselineAgent", log: Callable[[dict[str, Any]], None] | None):
        super().__init__()
        self.agent = agent
        self.log = log
        self._episodes: list[tuple[float, np.ndarray, int]] = []
        self._pending: list[tuple[float, np.ndarray, int]] | None = None
        self._start = time.perf_counter()
        # The deployment candidate of the rollout under way: the policy that collects it.
        self._collecting: list[th.Tensor] | None = None
        self._steps_before = 0

    def _on_step(self) -> bool:
        dones, infos = self.locals["dones"], self.locals["infos"]
        self._check_finite()
        for idx in np.flatnonzero(dones):
            ep = infos[idx].get("episode")
            if ep is not None:  # RecordEpisodeCost's r, l, c
                self._episodes.append((float(ep["r"]), np.asarray(ep["c"], dtype=np.float64), int(ep["l"])))
        return True

    def _check_finite(self) -> None:
        """Stop on a NaN/inf observation, reward or cost vector of this step, before SB3 stores it."""
        step = f"env step {self.agent.env_steps}"
        check_finite_observations(np.asarray(self.locals["new_obs"]), step, self.agent.iterations)
        for name in ("rewards", "costs"):  # costs: PPOLagrangian's (n_envs, K) matrix
            values = self.locals.get(name)
            if values is not None and not np.isfinite(values).all():
                rows = np.flatnonzero(~np.isfinite(np.asarray(values).reshape(len(values), -1)).all(axis=1))
                raise NonFiniteRolloutError(
                    f"{step}: non-finite {name[:-1]} from env(s) {rows[:8].tolist()}; training stopped"
                    f"{logged_note(self.agent.iterations)}. Check the task's {name[:-1]} for NaN or inf."
                )

    def _on_rollout_end(self) -> None:
        self._pending, self._episodes = self._episodes, []
        # Each finished episode started afresh: a group of one (constrained_grpo.deploy).
        episodes = self._pending
        ret = float(np.mean([e[0] for e in episodes])) if episodes else math.nan
        costs = np.array([e[1] for e in episodes], dtype=np.float64).reshape(len(episodes), self.agent.num_constraints)
        self.agent.final.observe(self._collecting, self._steps_before, self.agent.env_steps, ret, costs,
                                 self.agent.iterations + 1)
        self._collecting = None

    def _on_rollout_start(self) -> None:
        self._emit()
        if self.agent.final.active:  # a copy: nothing here feeds back into training
            self._collecting, self._steps_before = params_of(self.agent.model.policy), self.agent.env_steps

    def _on_training_end(self) -> None:
        self._emit()

    def _emit(self) -> None:
        if self._pending is None:
            return
        episodes, self._pending = self._pending, None
        record = self.agent._iteration_record(episodes, self.agent._wall_s + time.perf_counter() - self._start)
        where = f"iteration {record['iteration']}"
        bad = [k for k in _LOSS_KEYS if k in record and not math.isfinite(record[k])]
        if bad:
            raise NonFiniteUpdateError(
                f"{where}: non-finite {', '.join(f'{k}={record[k]}' for k in bad)}; training stopped"
                f"{logged_note(self.agent.iterations - 1)}"
            )
        check_finite_parameters(self.agent.model.policy, where, self.agent.iterations - 1)
        if self.log is not None:
            self.log(record)


class BaselineAgent:
    """A Contract-2 agent around SB3's ``PPO`` (``ppo``) or :class:`PPOLagrangian`.

    Args:
        env_id: a registered task that follows the cost contract.
        seed: seeds torch, numpy, the env copies (copy i: ``seed + i``) and evaluation.
        config: ``PPOConfig`` (unconstrained) or ``PPOLagConfig``.
        name: the registry name, recorded in saves.
    """

    def __init__(self, env_id: str, seed: int = 0, config: PPOConfig | None = None, name: str = "ppo"):
        self.env_id = env_id
        self.seed = int(seed)
        given = config if config is not None else PPOConfig()
        # n_envs, n_steps and batch_size left at None take the sizes of the env path the task gets.
        self.config = given.resolved(use_batched_env(env_id, given))
        self.name = name
        self.constrained = isinstance(self.config, PPOLagConfig)
        th.set_num_threads(self.config.torch_threads)
        cfg = self.config
        declared = _probe_cost_contract(env_id, cfg.env_kwargs, self.seed)
        self.constraints: tuple[Constraint, ...] = (
            override_limits(declared, cfg.limits) if isinstance(cfg, PPOLagConfig) else declared
        )
        self.env = make_baseline_vec_env(env_id, cfg, self.constraints)
        sb3_kwargs = sb3_ppo_kwargs(cfg, self.seed)
        self.model: PPO
        if isinstance(cfg, PPOLagConfig):
            multiplier = make_multiplier([c.limit for c in self.constraints], cfg.multiplier)
            build = getattr(cfg, "build_model", None)  # the other constrained baselines' own model
        if isinstance(cfg, PPOLagConfig) and build is not None:
            self.model = build(self.env, self.constraints, multiplier, sb3_kwargs)
        elif isinstance(cfg, PPOLagConfig):
            self.model = PPOLagrangian(self.env, self.constraints, multiplier, **lag_model_kwargs(cfg), **sb3_kwargs)
        else:
            self.model = PPO("MlpPolicy", self.env, **sb3_kwargs)
        self.iterations = 0
        self._wall_s = 0.0  # training time of earlier learn() calls
        self._recent: deque[tuple[float, np.ndarray, int]] = deque(maxlen=100)
        self._final: FinalPolicyKeeper | None = None  # built on first use: a subclass may set its limits after this
        self._deployed: list[Any] | None = None
        self._choices: np.ndarray | None = None  # the mixture's member per row (begin_episodes)

    # --- the deployed policy (constrained_grpo.deploy) ----------------------------------
    @property
    def final(self) -> FinalPolicyKeeper | DeploymentSet:
        """The snapshots the ``deploy`` rule keeps (one candidate per rollout)."""
        if self._final is None:
            cfg = self.config
            self._final = FinalPolicyKeeper(cfg.deploy, np.array([c.limit for c in self.constraints], dtype=np.float64),
                                            cfg.deploy_snapshots, cfg.deploy_alpha, cfg.deploy_shortlist,
                                            cfg.deploy_validation_episodes, [c.indicator for c in self.constraints])
        return self._final

    def _snapshot_policy(self, params: list[th.Tensor]) -> Any:
        """An SB3 policy holding the snapshot ``params``: rebuilt from its constructor arguments,
        as SB3's own policy load does (a deepcopy trips over the non-leaf tensors some policies cache)."""
        live = self.model.policy
        policy = type(live)(**live._get_constructor_parameters()).to(live.device)
        policy.set_training_mode(False)
        load_params(policy, params)
        return policy

    def _play_snapshot(self, params: list[th.Tensor] | None, seeds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``best-feasible``'s validation (:data:`constrained_grpo.deploy.PlayFn`): the sampled
        policy with the snapshot ``params`` (None: the live policy) on the task's vector env, as
        the harness evaluates it (``act_batch``'s draws; no generator is drawn from)."""
        policy = self.model.policy if params is None else self._snapshot_policy(params)
        wrap = getattr(self, "wrap_eval_vec_env", None)  # a policy that acts on an augmented observation (Saute)

        def make_vec(b: int) -> Any:
            vec = make_vec_env(self.env_id, b, **self.config.env_kwargs)
            return wrap(vec) if callable(wrap) else vec

        returns, costs, _ = play_waves(make_vec, lambda obs, u: self._act_batch(policy, obs, False, u), seeds,
                                       self.num_constraints, VALIDATION_WAVE)
        return returns, costs

    def deployed_policies(self) -> list[Any]:
        """The SB3 policies deployed: ``[model.policy]`` for the last iterate (and where a rule
        found nothing to keep), else copies holding the kept snapshots."""
        if self._deployed is None:
            kept = self.final.deployed()
            self._deployed = [self.model.policy] if not kept else [self._snapshot_policy(params) for params in kept]
        return self._deployed

    @property
    def deploys_last_iterate(self) -> bool:
        """Whether the deployed policy is the last iterate (the rule kept no snapshot)."""
        return not self.final.deployed()

    def keep_deployments(self, rules: list[str] | tuple[str, ...]) -> None:
        """Also keep what ``rules`` deploy while training (one training, several deployments:
        :class:`~constrained_grpo.deploy.DeploymentSet`); call before :meth:`learn`."""
        self._final = DeploymentSet.around(self.final, rules)

    def use_deployment(self, rule: str, algo: str | None = None) -> None:
        """Deploy ``rule``'s policy (kept by :meth:`keep_deployments`) from now on: acting,
        evaluating, recording and saving (``algo``, the run's name, is the learner's here)."""
        final = self.final
        if not isinstance(final, DeploymentSet):
            final = self._final = DeploymentSet.around(final, [])
        final.use(rule)
        self.config = dataclasses.replace(self.config, deploy=rule)
        self._deployed, self._choices = None, None

    @property
    def deployment(self) -> dict[str, Any]:
        """The rule and what it kept, JSON-safe (``best-feasible``: the selected rollout, its
        mean costs, their one-sided bounds, its episode count and the level)."""
        return self.final.state()

    def begin_episodes(self, reset_seeds: np.ndarray) -> None:
        """The episodes of the next ``act``/``act_batch`` rows start from these reset seeds: a
        mixture plays member ``episode_choice(seed, n)`` in each."""
        n = len(self.deployed_policies())
        self._choices = episode_choice(np.asarray(reset_seeds), n) if n > 1 else None

    # --- Contract 2 -----------------------------------------------------------------
    @property
    def num_constraints(self) -> int:
        return len(self.constraints)

    @property
    def env_steps(self) -> int:
        """Env steps trained so far."""
        return int(self.model.num_timesteps)

    @property
    def multipliers(self) -> np.ndarray:
        """Current lambda_k (empty for ``ppo``)."""
        if isinstance(self.model, PPOLagrangian):
            return self.model.multiplier.values.copy()
        return np.zeros(0)

    @property
    def lambda_max(self) -> float | None:
        """The bound of the multipliers' projection [0, lambda_max] (None for ``ppo``)."""
        if isinstance(self.model, PPOLagrangian):
            return float(self.model.multiplier.config.lambda_max)
        return None

    def learn(self, total_env_steps: int, log: Callable[[dict[str, Any]], None] | None = None) -> "BaselineAgent":
        """Train for ``total_env_steps`` more env steps (rounded up to whole rollouts of
        ``n_envs * n_steps``), calling ``log(record)`` once per iteration."""
        if total_env_steps < 1:
            raise ValueError(f"total_env_steps={total_env_steps} must be >= 1")
        callback = _ContractLog(self, log)
        if not self.model._custom_logger:
            # SB3's own logger makes an empty tempdir/SB3-<time> folder per learn() even at
            # verbose=0; this one writes nowhere and keeps name_to_value for the log record.
            self.model.set_logger(Logger(folder=None, output_formats=[]))
        rollout = self.model.n_steps * self.model.n_envs
        self.final.begin(self.env_steps, self.env_steps + math.ceil(total_env_steps / rollout) * rollout)
        try:
            # reset_num_timesteps=False: a second learn() continues the same episodes and counters.
            self.model.learn(total_env_steps, callback=callback, reset_num_timesteps=False, log_interval=1)
        finally:
            self._wall_s += time.perf_counter() - callback._start
        self.final.finish(self._play_snapshot)  # best-feasible's validation: after training, timed with it
        self._deployed, self._choices = None, None
        return self

    def _iteration_record(self, episodes: list[tuple[float, np.ndarray, int]], wall_s: float) -> dict[str, Any]:
        """The log record of the iteration whose rollout ended ``episodes``."""
        self.iterations += 1
        self._recent.extend(episodes)
        # An iteration that ends no episode reports the most recent ones (n_episodes says 0).
        source = episodes or list(self._recent)
        k = self.num_constraints
        if source:
            ep_return = float(np.mean([e[0] for e in source]))
            ep_cost = np.mean([e[1] for e in source], axis=0).tolist()
            ep_length = float(np.mean([e[2] for e in source]))
        else:
            ep_return, ep_cost, ep_length = float("nan"), [float("nan")] * k, float("nan")
        values = self.model.logger.name_to_value
        record: dict[str, Any] = {
            "iteration": self.iterations,
            "env_steps": self.env_steps,
            "wall_s": float(wall_s),
            "ep_return": ep_return,
            "ep_cost": ep_cost,
            "ep_length": ep_length,
            "n_episodes": len(episodes),
            "multipliers": self.multipliers.tolist(),
        }
        for key, sb3_key in (
            ("policy_loss", "train/policy_gradient_loss"),
            ("value_loss", "train/value_loss"),
            ("entropy_loss", "train/entropy_loss"),
            ("approx_kl", "train/approx_kl"),
            ("clip_fraction", "train/clip_fraction"),
            ("explained_variance", "train/explained_variance"),
            # The long table reserves cost_<name> for the constraints (schema.RESERVED_PREFIXES).
            ("value_loss_cost", "train/cost_value_loss"),
            ("explained_variance_cost", "train/cost_explained_variance"),
        ):
            if sb3_key in values:
                record[key] = float(values[sb3_key])
        if isinstance(self.model, PPOLagrangian) and self.model.cost_estimate is not None:
            record["estimated_cost"] = self.model.cost_estimate.tolist()
        return record

    def predict(self, obs: np.ndarray, deterministic: bool = True) -> np.ndarray:
        """The deployed policy's action for ``obs`` (one observation or a batch); a mixture
        plays each row's member (``begin_episodes``)."""
        policies = self.deployed_policies()
        if len(policies) == 1:
            return policies[0].predict(obs, deterministic=deterministic)[0]
        batch = np.asarray(obs)
        single = batch.shape == self.model.observation_space.shape
        rows = batch[None] if single else batch
        parts = [(idx, policies[j].predict(rows[idx], deterministic=deterministic)[0])
                 for j, idx in member_rows(len(policies), self._choices, len(rows))]
        out = np.empty((len(rows), *np.shape(parts[0][1])[1:]), dtype=np.asarray(parts[0][1]).dtype)
        for idx, part in parts:
            out[idx] = part
        return out[0] if single else out

    def act(self, obs: np.ndarray, deterministic: bool = True) -> np.ndarray:
        """The action for one observation (Contract 2; sampling uses torch's global generator).
        A ``tail-mixture`` agent plays the member its episode's reset seed chose: call
        ``begin_episodes([seed])`` after ``env.reset(seed=seed)``."""
        return self.predict(obs, deterministic)

    def act_batch(self, obs: np.ndarray, deterministic: bool, uniforms: np.ndarray) -> np.ndarray:
        """Actions for a batch ``(B, ...)``: SB3's mode, or the action the episodes' draws
        ``uniforms`` ``(B, D)`` pick by inverse transform sampling from the policy's
        distribution (:mod:`constrained_grpo.sampling`); Box actions clipped as ``predict`` does.
        A mixture plays each row's member (``begin_episodes``)."""
        obs = np.asarray(obs)
        uniforms = np.asarray(uniforms)
        policies = self.deployed_policies()
        if len(policies) == 1:
            return self._act_batch(policies[0], obs, deterministic, uniforms)
        parts = [(idx, self._act_batch(policies[j], obs[idx], deterministic, uniforms[idx]))
                 for j, idx in member_rows(len(policies), self._choices, len(obs))]
        out = np.empty((len(obs), *parts[0][1].shape[1:]), dtype=parts[0][1].dtype)
        for idx, part in parts:
            out[idx] = part
        return out

    def _act_batch(self, policy: Any, obs: np.ndarray, deterministic: bool, uniforms: np.ndarray) -> np.ndarray:
        """:meth:`act_batch` with one SB3 ``policy``."""
        with th.no_grad():
            obs_t, _ = policy.obs_to_tensor(np.asarray(obs))
            dist = policy.get_distribution(obs_t)
            if deterministic:
                actions = dist.get_actions(deterministic=True).cpu().numpy()
            elif isinstance(self.model.action_space, gym.spaces.Discrete):
                actions = categorical_from_uniform(dist.distribution.probs.double().cpu().numpy(), uniforms)
            else:
                mean = dist.distribution.mean.double().cpu().numpy()
                actions = gaussian_from_uniform(mean, dist.distribution.stddev.double().cpu().numpy(), uniforms)
        space = self.model.action_space
        if isinstance(space, gym.spaces.Box):
            actions = actions.reshape((-1, *space.shape))
            actions = policy.unscale_action(actions) if policy.squash_output else np.clip(actions, space.low, space.high)
            return actions.astype(space.dtype)
        return np.asarray(actions).reshape(-1).astype(np.int64)

    def evaluate(self, n_episodes: int = 10, deterministic: bool = True, seed: int | None = None) -> EvalResult:
        """``n_episodes`` episodes on a fresh env; episode i starts from ``reset(seed + i)``.

        ``seed`` defaults to ``self.seed + EVAL_SEED_OFFSET``; it also seeds the action
        sampling (in a forked torch RNG), so a stochastic evaluation is reproducible and
        leaves training's random stream untouched.
        """
        seed = self.seed + EVAL_SEED_OFFSET if seed is None else int(seed)
        env = make_env(self.env_id, **self.config.env_kwargs)
        wrap = getattr(self, "wrap_eval_env", None)
        if callable(wrap):  # a policy that acts on an augmented observation (Saute)
            env = wrap(env)
        try:
            with th.random.fork_rng(devices=[]):
                th.manual_seed(seed)
                return rollout_episodes(env, partial(self.predict, deterministic=deterministic), n_episodes, seed,
                                        on_reset=lambda s: self.begin_episodes(np.array([s], dtype=np.int64)))
        finally:
            env.close()

    # --- persistence ------------------------------------------------------------------
    def save(self, path: str | Path) -> Path:
        """Write ``path/model.zip`` (SB3's save) and ``path/agent.json``; returns ``path``."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        tmp_zip = path / "model.tmp.zip"
        self.model.save(tmp_zip)
        os.replace(tmp_zip, path / "model.zip")
        state: dict[str, Any] = {
            "format": SAVE_FORMAT,
            "name": self.name,
            "env_id": self.env_id,
            "seed": self.seed,
            "config": self.config.to_dict(),
            "constraints": [asdict(c) for c in self.constraints],
            "num_timesteps": self.env_steps,
            "iterations": self.iterations,
            "wall_s": self._wall_s,
            "versions": {"stable_baselines3": stable_baselines3.__version__, "torch": th.__version__},
        }
        if isinstance(self.model, PPOLagrangian):
            lag = self.model
            state["multiplier"] = lag.multiplier.state_dict()
            state["cost_window"] = [c.tolist() for c in lag.cost_window]
            state["cost_estimate"] = None if lag.cost_estimate is None else lag.cost_estimate.tolist()
            state["optimism"] = lag.optimism.state_dict()
        if self.final.active:  # the deployed snapshots, beside SB3's zip (safetensors)
            state["deploy"] = self.final.state()
            tmp = path / (DEPLOY_FILE + ".tmp")
            save_file({k: v.contiguous() for k, v in self.final.tensors().items()}, str(tmp))
            os.replace(tmp, path / DEPLOY_FILE)
        atomic_write_text(path / "agent.json", json.dumps(state, indent=2))
        return path

    def load(self, path: str | Path) -> "BaselineAgent":
        """Restore weights, optimizer state, multiplier state and counters saved by
        :meth:`save` into this agent, which must be for the same task and an equal config
        (:func:`load_agent` rebuilds the saved agent itself)."""
        path = Path(path)
        state = _read_state(path)
        config = _config_class(state["name"]).from_dict(state["config"])
        if state["env_id"] != self.env_id or config != self.config:
            raise ValueError(
                f"{path} holds a {state['name']!r} agent for {state['env_id']!r} with another config than "
                f"this {self.name!r} agent for {self.env_id!r}; rebuild it with "
                "constrained_grpo.baselines.load_agent(path)"
            )
        # set_parameters reads only the zip's .pth members, with torch.load(weights_only=True).
        _check_zip(path / "model.zip")
        with reading_checkpoint(path / "model.zip", "policy weights and optimizer state"):
            self.model.set_parameters(str(path / "model.zip"), exact_match=True, device=self.config.device)
        self.model.num_timesteps = int(state["num_timesteps"])
        self.iterations = int(state["iterations"])
        self._wall_s = float(state["wall_s"])
        if isinstance(self.model, PPOLagrangian):
            lag = self.model
            lag.multiplier.load_state_dict(state["multiplier"])
            lag.cost_window.clear()
            lag.cost_window.extend(np.asarray(c, dtype=np.float64) for c in state["cost_window"])
            estimate = state["cost_estimate"]
            lag.cost_estimate = None if estimate is None else np.asarray(estimate, dtype=np.float64)
            lag.optimism.load_state_dict(state.get("optimism"), actor_parameters(lag.policy))
        if self.final.active:
            self.final.load_state(state.get("deploy"))
            if (path / DEPLOY_FILE).is_file():
                with reading_checkpoint(path / DEPLOY_FILE, "deployed policy snapshots"):
                    self.final.load_tensors(load_file(str(path / DEPLOY_FILE)))
        self._deployed, self._choices = None, None
        return self


def _read_state(path: Path) -> dict[str, Any]:
    file = path / "agent.json"
    if not file.is_file():
        raise FileNotFoundError(f"{file} not found; save an agent there with agent.save({str(path)!r})")
    state = read_saved_json(file, ("format",), "saved baseline agent")
    if state.get("format") != SAVE_FORMAT:
        raise ValueError(f"{file} has format {state.get('format')!r}; this code reads format {SAVE_FORMAT}")
    return state


def _check_zip(file: Path) -> None:
    """:class:`CheckpointError` naming ``file`` unless it is a whole zip with SB3's members."""
    if not file.is_file():
        raise CheckpointError(f"{file} is missing: {file.parent} is not a complete saved agent; save it again")
    try:
        with zipfile.ZipFile(file) as archive:
            bad = archive.testzip()
            names = set(archive.namelist())
    except (zipfile.BadZipFile, OSError, EOFError) as err:
        raise CheckpointError(f"{file} is not a readable zip archive ({err}); it is truncated or damaged, save the agent again") from None
    if bad is not None:
        raise CheckpointError(f"{file}: member {bad!r} fails its CRC check; the archive is damaged, save the agent again")
    if "policy.pth" not in names:
        raise CheckpointError(
            f"{file} is not a whole SB3 model archive (no policy.pth among {len(names)} member(s)); "
            "it is truncated or damaged, save the agent again"
        )


def _config_class(name: str) -> type[PPOConfig]:
    spec = BASELINES.get(name)
    if spec is None:
        raise ValueError(f"saved agent names unknown baseline {name!r}; known: {sorted(BASELINES)}")
    return spec.config_cls


def load_agent(path: str | Path) -> BaselineAgent:
    """Rebuild the agent saved in directory ``path``: same task, seed and config, with its
    weights, optimizer, multiplier state and counters."""
    path = Path(path)
    state = _read_state(path)
    config = _config_class(state["name"]).from_dict(state["config"])
    agent_cls = getattr(config, "agent_class", lambda: BaselineAgent)()
    return agent_cls(state["env_id"], state["seed"], config, name=state["name"]).load(path)


def make_baseline(name: str, env_id: str, seed: int = 0, **config: Any) -> BaselineAgent:
    """Build baseline ``name`` (a key of :data:`BASELINES`): the agent of
    :func:`resolve_baseline_config`, built by :func:`baseline_from_resolved`."""
    return baseline_from_resolved(name, env_id, seed, resolve_baseline_config(name, env_id, **config))


def _spec(name: str) -> BaselineSpec:
    try:
        return BASELINES[name]
    except KeyError:
        raise KeyError(f"unknown baseline {name!r}; choose one of {sorted(BASELINES)}") from None


def _config(spec: BaselineSpec, config: Mapping[str, Any], env_id: str) -> PPOConfig:
    """The table row's preset, then the task's :func:`task_defaults` (gamma = 1 on the
    gridworld), then ``config``; a ``multiplier`` dict updates the row's multiplier field by
    field, as it does a GRPO variant's."""
    if "multiplier" in {f.name for f in fields(spec.config_cls)}:
        return spec.config_cls.from_dict(merge_config_layers(spec.preset, task_defaults(env_id), config))
    return spec.config_cls.from_dict({**spec.preset, **task_defaults(env_id), **config})  # no multiplier: its keys are unknown options


def resolve_baseline_config(name: str, env_id: str, **config: Any) -> dict[str, Any]:
    """The whole configuration of baseline ``name`` on ``env_id``, as JSON values, without
    building the agent: ``{"kind": "baseline", "algo", "config"}``, with ``n_envs``, ``n_steps``
    and ``batch_size`` resolved for the env path the task gets (``vec_env``). Raises the
    config's one-line error for a misspelled option or a bad value."""
    cfg = _config(_spec(name), config, env_id)
    return {"kind": "baseline", "algo": name, "config": cfg.resolved(use_batched_env(env_id, cfg)).to_dict()}


def baseline_from_resolved(name: str, env_id: str, seed: int, resolved: Mapping[str, Any]) -> BaselineAgent:
    """The agent of a configuration :func:`resolve_baseline_config` gave (or ``config.json`` recorded)."""
    spec = _spec(name)
    agent_cls = getattr(spec.config_cls, "agent_class", lambda: BaselineAgent)()
    return agent_cls(env_id, seed, spec.config_cls.from_dict(resolved["config"]), name=name)


@dataclass(frozen=True)
class BaselineFactory:
    """The registry entry point of the :data:`BASELINES` row ``name`` (a
    :class:`~constrained_grpo.registry.ConfiguredFactory`): calling it is
    ``make_baseline(name, env_id, seed, **config)``; ``resolve_config`` and ``from_resolved``
    are :func:`resolve_baseline_config` and :func:`baseline_from_resolved` of the row.
    Frozen, so that registering the same row twice registers an equal spec (a no-op)."""

    name: str

    def __call__(self, env_id: str, seed: int = 0, **config: Any) -> BaselineAgent:
        return make_baseline(self.name, env_id, seed, **config)

    def resolve_config(self, env_id: str, **config: Any) -> dict[str, Any]:
        return resolve_baseline_config(self.name, env_id, **config)

    def from_resolved(self, env_id: str, seed: int, resolved: Mapping[str, Any]) -> BaselineAgent:
        return baseline_from_resolved(self.name, env_id, seed, resolved)


def register_baselines() -> None:
    """Register every row of :data:`BASELINES` under its key (idempotent): a new baseline
    is one row there (then this call, which importing the package makes)."""
    for name, spec in BASELINES.items():
        # PPO-Lagrangian mixes (A_r - sum lambda A_c) / (1 + sum lambda): lambda in reward units;
        # a row says otherwise where its multipliers weigh something else (CPO's nu, CUP's nu
        # against a KL, P3O's fixed penalty) or there are none (Saute).
        units = spec.constrained if spec.lambda_in_reward_units is None else spec.lambda_in_reward_units
        register_agent(name, BaselineFactory(name), defaults=spec.preset, description=spec.description,
                       constrained=spec.constrained, lambda_in_reward_units=units)
        # Aliases <name>-best and <name>-mix: the same training, another policy deployed (as
        # cgrpo-best and cgrpo-mix are for cgrpo), so a board can hold both deployments of one
        # training under distinct run names and pair them by seed.
        for suffix, rule in DEPLOY_ALIAS_SUFFIXES.items():
            register_agent(f"{name}-{suffix}", BaselineFactory(name), defaults={**spec.preset, "deploy": rule},
                           description=f"{name} with deploy={rule!r} (an alias)", constrained=spec.constrained,
                           lambda_in_reward_units=units, alias_of=name)
