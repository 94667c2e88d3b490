"""The Contract-2 Constrained GRPO agent for control tasks, and the GRPO entry points.

:func:`make_grpo_agent` (every GRPO variant's registry entry point) and :func:`load_agent`
serve every task family: a task of a text family (its ``Family.text``, the math tasks)
gets the language-model agent of :mod:`constrained_grpo.agents.text_agent`, any other task
the control agent below.

``GRPOAgent(env_id, seed, preset="standard", **options)`` builds a config
(:mod:`constrained_grpo.agents.config`), the control rollout adapter and MLP policy
(:mod:`constrained_grpo.agents.control`) and the trainer
(:mod:`constrained_grpo.agents.trainer`), and offers ``learn``, ``evaluate``, ``save``
and ``load``. Saved runs are a directory::

    model.safetensors   policy (``policy.*``), reference (``reference.*``), Adam moments (``optim.*``),
                        the optimistic step's last update (``optimism.*``, with ``policy_optimism``)
    config.json         {"algo", "env_id", "seed", "config": {...}}: enough to rebuild the agent
    state.json          iteration, env steps, wall time, multiplier state
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np
import torch
from safetensors.torch import save_file

from constrained_grpo.agents.checkpoint import CONFIG_FILE, STATE_FILE, WEIGHTS_FILE, load_trained_state
from constrained_grpo.agents.config import GRPOConfig, make_config
from constrained_grpo.agents.control import ControlAdapter
from constrained_grpo.agents.final_policy import load_params, member_rows
from constrained_grpo.agents.trainer import GRPOTrainer
from constrained_grpo.deploy import VALIDATION_WAVE, DeploymentSet
from constrained_grpo.files import atomic_write_text
from constrained_grpo.options import CheckpointError, merge_options, read_saved_json, reading_checkpoint
from constrained_grpo.registry import EvalResult
from constrained_grpo.sampling import episode_choice, play_waves
from constrained_grpo.tasks import make_env, make_vec_env, rollout_episodes, task_info

__all__ = [
    "CONTROL_OVERRIDES",
    "GRPOAgent",
    "control_defaults",
    "is_text_task",
    "load_agent",
    "make_grpo_agent",
]

if TYPE_CHECKING:
    from constrained_grpo.agents.text_agent import TextGRPOAgent


#: The control family's knobs, applied on top of every GRPO preset (the text agent applies
#: its own ``TEXT_PRESETS`` instead, so these do not leak into a language model's run).
#: One-line reasons; the measurements behind them are in docs/tuning.md.
#:
#: - ``entropy_coef``: keeps a near-deterministic group exploring, where GRPO's z-scores
#:   would collapse the policy onto the first route it finds.
#: - ``multiplier``: a PI controller (``kd`` 0; ``cgrpo-pid`` adds the derivative term) on
#:   the violation divided by the limit, so one gain serves a rate limit and a step-count
#:   limit; the proportional term answers a violation within a few iterations, the integral
#:   holds the steady state at the limit. ScAdv's multipliers are scale-free (each cost is
#:   z-scored), so the balance point is near lambda = 1.
CONTROL_OVERRIDES: dict[str, Any] = {
    "entropy_coef": 0.05,
    "multiplier": {"rule": "pid", "kp": 1.0, "ki": 0.01, "kd": 0.0, "normalize": True},
}

def is_text_task(env_id: str) -> bool:
    """Whether ``env_id`` takes and gives text (its family's ``text`` fact): the language-model
    agent (:class:`~constrained_grpo.agents.text_agent.TextGRPOAgent`) serves it."""
    return bool(task_info(env_id).family.text)


def control_defaults(env_id: str) -> dict[str, Any]:
    """The options the control agent puts over the preset for ``env_id``: :data:`CONTROL_OVERRIDES`,
    then its family's and its own ``grpo`` rows (``TaskInfo.algo_defaults``)."""
    return merge_options(CONTROL_OVERRIDES, *task_info(env_id).algo_defaults("grpo"))


def control_config(env_id: str, preset: str = "standard", **options: Any) -> GRPOConfig:
    """The whole configuration of a control agent: the preset, then :func:`control_defaults`
    of the task, then ``options`` (a ``multiplier`` dict merges key by key)."""
    return make_config(preset, **merge_options(control_defaults(env_id), options))


class GRPOAgent:
    """Constrained GRPO (and its variants) on a Gymnasium control task.

    Args:
        env_id: a registered task id (``constrained_grpo.envs.list_tasks()``).
        seed: fixes the policy init, the group reset seeds and the action sampling.
        preset: ``quick``, ``standard`` or ``paper`` (:data:`~constrained_grpo.agents.config.PRESETS`).
        algo: the registry name, recorded in ``config.json``.
        **options: :class:`~constrained_grpo.agents.config.GRPOConfig` fields, applied on
            top of the preset and :func:`control_defaults` (a ``multiplier`` dict merges).
    """

    def __init__(self, env_id: str, seed: int = 0, preset: str = "standard", algo: str = "cgrpo", *,
                 config: GRPOConfig | None = None, **options: Any):
        self.env_id = env_id
        self.seed = int(seed)
        self.algo = algo
        if config is not None and options:
            raise ValueError(f"give a resolved config or options, not both (options {sorted(options)})")
        self.config: GRPOConfig = config if config is not None else control_config(env_id, preset, **options)
        cfg = self.config
        if cfg.num_threads > 0:
            # Small MLPs run fastest single-threaded, and the machine is shared.
            torch.set_num_threads(cfg.num_threads)
        torch.manual_seed(self.seed)
        self.adapter = ControlAdapter(
            env_id,
            cfg.num_samples,
            env_kwargs=cfg.env_kwargs,
            limits=cfg.limits,
            seed=self.seed,
            max_episode_steps=cfg.max_episode_steps,
        )
        self.constraints = self.adapter.constraints
        self.policy = self.adapter.make_policy(cfg.hidden_sizes, cfg.activation, cfg.init_log_std)
        if hasattr(self.policy, "closed_form"):  # a categorical policy: linear ones have the fast path
            self.policy.closed_form = cfg.closed_form
        self.trainer = GRPOTrainer(cfg, self.adapter, self.policy, torch.Generator().manual_seed(self.seed + 1))
        self.trainer.validation_play = self._play_snapshot
        self._eval_env = None
        self._eval_generator = torch.Generator().manual_seed(cfg.eval_seed)
        self._deployed: list[torch.nn.Module] | None = None  # built from the trainer's snapshots on first use
        self._choices: np.ndarray | None = None  # the mixture's snapshot per row (begin_episodes)

    # --- the deployed policy (constrained_grpo.agents.final_policy) --------------------
    def deployed_policies(self) -> list[torch.nn.Module]:
        """The policies deployed after training: ``[policy]`` for the last iterate (and where a
        remedy found nothing to keep), the best feasible snapshot, or the tail mixture's."""
        if self._deployed is None:
            kept = self.trainer.final.deployed()
            if not kept:
                self._deployed = [self.policy]
            else:
                self._deployed = []
                for params in kept:
                    module = copy.deepcopy(self.policy)
                    load_params(module, params)
                    self._deployed.append(module)
        return self._deployed

    @property
    def deploys_last_iterate(self) -> bool:
        """Whether the deployed policy is the last iterate (the rule kept no snapshot)."""
        return not self.trainer.final.deployed()

    def keep_deployments(self, rules: list[str] | tuple[str, ...]) -> None:
        """Also keep what ``rules`` deploy while training (one training, several deployments:
        :class:`~constrained_grpo.deploy.DeploymentSet`); call before :meth:`learn`."""
        self.trainer.final = DeploymentSet.around(self.trainer.final, rules)

    def use_deployment(self, rule: str, algo: str | None = None) -> None:
        """Deploy ``rule``'s policy (kept by :meth:`keep_deployments`) from now on: acting,
        evaluating, recording and saving, under the run name ``algo`` where given."""
        if not isinstance(self.trainer.final, DeploymentSet):
            self.trainer.final = DeploymentSet.around(self.trainer.final, [])
        self.trainer.final.use(rule)
        self.config = dataclasses.replace(self.config, deploy=rule)
        self.algo = self.algo if algo is None else algo
        self._deployed, self._choices = None, None

    @property
    def deployment(self) -> dict[str, Any]:
        """The rule and what it kept, JSON-safe (``best-feasible``: the selected iteration, its
        batch mean costs, their one-sided bounds, its group count and the level)."""
        return self.trainer.final.state()

    def _play_snapshot(self, params: list[torch.Tensor] | None, seeds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``best-feasible``'s validation (:data:`constrained_grpo.deploy.PlayFn`): the sampled
        policy with the snapshot ``params`` (None: the live policy) on the task's batched env,
        as the harness evaluates it; no generator is drawn from."""
        module = self.policy
        if params is not None:
            module = copy.deepcopy(self.policy)
            load_params(module, params)

        def act(obs: np.ndarray, uniforms: np.ndarray) -> np.ndarray:
            with torch.no_grad():
                obs_t = torch.as_tensor(np.asarray(obs, dtype=np.float32).reshape(len(obs), -1))
                return self.adapter.env_action(module.from_uniform(obs_t, uniforms))

        returns, costs, _ = play_waves(lambda b: make_vec_env(self.env_id, b, **self.config.env_kwargs), act, seeds,
                                       len(self.constraints), VALIDATION_WAVE)
        return returns, costs

    def begin_episodes(self, reset_seeds: np.ndarray) -> None:
        """The harness starts episodes with these reset seeds, one per row of the next
        ``act_batch`` calls: a mixture plays snapshot ``episode_choice(seed, n)`` in each."""
        n = len(self.deployed_policies())
        self._choices = episode_choice(np.asarray(reset_seeds), n) if n > 1 else None

    def _forward(self, fn: Callable[..., torch.Tensor], obs_t: torch.Tensor, *rows_of: np.ndarray) -> torch.Tensor:
        """``fn(policy, obs, *rows_of)`` with each row's deployed policy: one call per snapshot
        on its rows of ``obs_t`` and of the per-row arrays ``rows_of`` (e.g. the draws). A
        mixture needs each row's episode (``begin_episodes``; else a one-line error)."""
        policies = self.deployed_policies()
        if len(policies) == 1:
            return fn(policies[0], obs_t, *rows_of)
        out: torch.Tensor | None = None
        for j, idx in member_rows(len(policies), self._choices, len(obs_t)):
            part = fn(policies[j], obs_t[torch.as_tensor(idx)], *(a[idx] for a in rows_of))
            if out is None:
                out = torch.empty((len(obs_t), *part.shape[1:]), dtype=part.dtype)
            out[torch.as_tensor(idx)] = part
        assert out is not None
        return out

    # --- Contract 2 -------------------------------------------------------------------
    @property
    def multipliers(self) -> np.ndarray:
        """Current multipliers ``(K,)``; empty for an unconstrained agent."""
        if self.trainer.multiplier is None:
            return np.zeros(0)
        return self.trainer.multiplier.values.copy()

    @property
    def lambda_max(self) -> float | None:
        """The bound of the multipliers' projection [0, lambda_max] (None when unconstrained)."""
        return None if self.trainer.multiplier is None else float(self.trainer.multiplier.config.lambda_max)

    def learn(self, total_env_steps: int, log: Callable[[dict[str, Any]], None] | None = None) -> "GRPOAgent":
        """Train for ``total_env_steps`` env steps, calling ``log(record)`` every iteration."""
        self.trainer.train(total_env_steps, log)
        self._deployed, self._choices = None, None
        return self

    def act(self, obs: np.ndarray, deterministic: bool = True) -> Any:
        """The action for one observation (the mode when ``deterministic``). A ``tail-mixture``
        agent plays the member its episode's reset seed chose: call ``begin_episodes([seed])``
        after ``env.reset(seed=seed)``."""
        with torch.no_grad():
            obs_t = torch.as_tensor(np.asarray(obs, dtype=np.float32).reshape(1, -1))
            if deterministic:
                action = self._forward(lambda pi, o: pi.mode(o), obs_t)
            else:
                action = self._forward(lambda pi, o: pi.sample(o, self._eval_generator)[0], obs_t)
        return self.adapter.env_action(action)[0]

    def act_batch(self, obs: np.ndarray, deterministic: bool, uniforms: np.ndarray) -> np.ndarray:
        """Actions for a batch of observations ``(B, ...)``: the modes, or the actions the
        episodes' draws ``uniforms`` ``(B, D)`` pick by inverse transform sampling
        (:mod:`constrained_grpo.sampling`), so that an episode does not depend on its batch."""
        with torch.no_grad():
            obs_t = torch.as_tensor(np.asarray(obs, dtype=np.float32).reshape(len(obs), -1))
            if deterministic:
                action = self._forward(lambda pi, o: pi.mode(o), obs_t)
            else:
                action = self._forward(lambda pi, o, u: pi.from_uniform(o, u), obs_t, np.asarray(uniforms))
        return self.adapter.env_action(action)

    def seed_evaluation(self, seed: int) -> None:
        """Restart the generator that ``act(obs, deterministic=False)`` samples with."""
        self._eval_generator = torch.Generator().manual_seed(int(seed))

    def evaluate(self, n_episodes: int = 10, deterministic: bool = True) -> EvalResult:
        """``n_episodes`` episodes from reset seeds ``eval_seed + i``.

        Note: a constrained optimum can be a mixture of routes; its deterministic
        (mode) policy is one route, so ``deterministic=False`` measures the learned mixture.
        """
        if self._eval_env is None:
            self._eval_env = make_env(self.env_id, **self.config.env_kwargs)
        self._eval_generator = torch.Generator().manual_seed(self.config.eval_seed)
        return rollout_episodes(
            self._eval_env, lambda o: self.act(o, deterministic), n_episodes, seed=self.config.eval_seed,
            on_reset=lambda s: self.begin_episodes(np.array([s], dtype=np.int64)),
        )

    def save(self, path: str | Path) -> Path:
        """Write weights (safetensors), ``config.json`` and ``state.json`` into directory ``path``."""
        out = Path(path)
        out.mkdir(parents=True, exist_ok=True)
        tensors = {f"policy.{k}": v.detach().contiguous() for k, v in self.policy.state_dict().items()}
        if self.trainer.reference is not None:
            tensors.update({f"reference.{k}": v.detach().contiguous() for k, v in self.trainer.reference.state_dict().items()})
        tensors.update(self.trainer.optimizer_tensors())
        tmp = out / (WEIGHTS_FILE + ".tmp")
        save_file(tensors, str(tmp))
        os.replace(tmp, out / WEIGHTS_FILE)
        meta = {"algo": self.algo, "env_id": self.env_id, "seed": self.seed, "config": self.config.to_dict()}
        atomic_write_text(out / CONFIG_FILE, json.dumps(meta, indent=2, sort_keys=True))
        atomic_write_text(out / STATE_FILE, json.dumps(self.trainer.state(), indent=2))
        return out

    def load(self, path: str | Path) -> "GRPOAgent":
        """Restore weights, optimiser and multipliers saved by :meth:`save` into this agent.

        The saved run must be for the same task and an equal config; build a fresh agent
        from a directory with :func:`load_agent`.
        """
        src = Path(path)
        meta = read_saved_json(src / CONFIG_FILE, ("algo", "env_id", "config"), "saved GRPO agent")
        with reading_checkpoint(src / CONFIG_FILE, "agent config"):
            saved = GRPOConfig.from_dict(meta["config"])
        if meta["env_id"] != self.env_id or saved != self.config:
            raise ValueError(
                f"{src} holds a {meta['algo']!r} run on {meta['env_id']!r} with another config; "
                "use constrained_grpo.agents.load_agent(path) to rebuild that agent"
            )
        load_trained_state(src, self.policy, self.trainer, "policy weights and optimiser state", "saved GRPO agent")
        self._deployed, self._choices = None, None
        return self


def make_grpo_agent(env_id: str, seed: int = 0, **config: Any) -> "GRPOAgent | TextGRPOAgent":
    """Registry entry point (``make_agent("cgrpo", env_id, seed, **config)``): the agent of
    :func:`resolve_grpo_config`, built by :func:`grpo_from_resolved`.

    A task of a text family (``Family.text``, e.g. ``Math/ChainSum-v0``) gets a
    :class:`~constrained_grpo.agents.text_agent.TextGRPOAgent` (its ``preset`` names a
    :data:`~constrained_grpo.agents.text_agent.TEXT_PRESETS` row, and it also takes
    ``lm={...}``); any other task a :class:`GRPOAgent`.
    """
    return grpo_from_resolved(env_id, seed, resolve_grpo_config(env_id, **config))


def resolve_grpo_config(env_id: str, **config: Any) -> dict[str, Any]:
    """The whole configuration of a GRPO variant on ``env_id``, as JSON values, without building
    the agent: ``{"kind", "algo", "preset", "config"}`` (and ``"lm"`` on text tasks). ``algo``
    picks the row of :data:`~constrained_grpo.agents.variants.VARIANTS` whose options lie under
    the user's; a user's ``multiplier={...}`` merges *into* the variant's, so
    ``make_agent("grpo-screw", ..., multiplier={"lr": 0.1})`` keeps the variant's rule. Raises the
    agent's own one-line error for a misspelled option or a value of the wrong type."""
    from constrained_grpo.agents.variants import VARIANTS

    if is_text_task(env_id):
        from constrained_grpo.agents.text_agent import resolve_text_config

        return resolve_text_config(env_id, **config)
    if "lm" in config:
        raise ValueError(
            f"lm={config['lm']!r} configures a language-model policy, but {env_id!r} is a "
            f"{task_info(env_id).family.name!r} task, which does not take text; drop the lm option"
        )
    algo = config.get("algo", "cgrpo")
    options = merge_options(VARIANTS[algo].options if algo in VARIANTS else {}, config)
    options.pop("algo", None)
    preset = options.pop("preset", "standard")
    return {"kind": "control", "algo": algo, "preset": preset, "config": control_config(env_id, preset, **options).to_dict()}


def grpo_from_resolved(env_id: str, seed: int, resolved: Mapping[str, Any]) -> "GRPOAgent | TextGRPOAgent":
    """The agent of a configuration :func:`resolve_grpo_config` gave (or ``config.json`` recorded)."""
    if resolved.get("kind") == "text":
        from constrained_grpo.agents.text_agent import text_from_resolved

        return text_from_resolved(env_id, seed, resolved)
    return GRPOAgent(env_id, seed=seed, algo=resolved["algo"], config=GRPOConfig.from_dict(resolved["config"]))


make_grpo_agent.resolve_config = resolve_grpo_config  # type: ignore[attr-defined]
make_grpo_agent.from_resolved = grpo_from_resolved  # type: ignore[attr-defined]


def load_agent(path: str | Path) -> "GRPOAgent | TextGRPOAgent":
    """Rebuild the agent saved in directory ``path`` (config, weights, multipliers).

    A text agent's ``config.json`` says ``"kind": "text"``; it is rebuilt by
    :func:`~constrained_grpo.agents.text_agent.load_text_agent`.
    """
    file = Path(path) / CONFIG_FILE
    meta = read_saved_json(file, ("env_id", "seed", "algo", "config"), "saved GRPO agent")
    if meta.get("kind") == "text":
        from constrained_grpo.agents.text_agent import load_text_agent

        return load_text_agent(path)
    if not isinstance(meta["config"], dict):
        raise CheckpointError(f"{file}: 'config' must be a JSON object, got {meta['config']!r}")
    with reading_checkpoint(file, "agent recorded in it"):
        agent = GRPOAgent(meta["env_id"], seed=meta["seed"], algo=meta["algo"], **meta["config"])
    return agent.load(path)
