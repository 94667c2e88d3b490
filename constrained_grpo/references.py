"""Reference policies: unranked anchors of the leaderboard, run through the harness like agents.

* ``ref-random``: uniformly random actions (``action_space.sample`` on a seeded space), on
  every task;
* ``ref-optimal``: the task's exact constrained optimum, where the task offers one
  (``env.unwrapped.reference_policies()["optimal"]``; the gridworlds' LP policy): its
  evaluated return must land on R* and its costs on the limits, an end-to-end check of
  the evaluation pipeline;
* ``ref-unconstrained``: the task's reward-maximising policy that ignores the limits;
* ``ref-safe-driver`` (highway, discrete actions): keep lane, keep a safe time headway, a
  rule on the observation (:mod:`constrained_grpo.envs.highway.policies`);
* ``ref-warmstart`` (math): the text agent's warm-started policy with no GRPO update, the
  point every GRPO learner of a math task starts from.

Which task runs which: its family's ``references`` (``TaskInfo.task_references``, envs/registration.py).

They do not learn. ``learn`` plays ``episodes`` evaluation-free episodes and logs them as
one iteration (Contract 2 asks for a record per iteration); the harness then evaluates them
like any run, on the same episodes. The leaderboard shows their rows without a rank
(``AgentSpec.reference``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from constrained_grpo.constraints import get_constraints
from constrained_grpo.options import check_options
from constrained_grpo.sampling import categorical_from_uniform
from constrained_grpo.registry import EvalResult, register_agent
from constrained_grpo.tasks import make_env, rollout_episodes

__all__ = ["REFERENCES", "SCRIPTED", "ReferenceAgent", "WarmStartReference"]

#: registry name -> (policy key, description)
REFERENCES: dict[str, tuple[str, str]] = {
    "ref-random": ("random", "reference: uniformly random actions (unranked)"),
    "ref-optimal": ("optimal", "reference: the task's exact constrained optimum, e.g. the gridworld LP policy (unranked)"),
    "ref-unconstrained": ("unconstrained", "reference: the reward-maximising policy that ignores the limits (unranked)"),
    "ref-safe-driver": ("safe-driver", "reference: highway driver that keeps its lane and a safe headway (unranked)"),
}

#: Scripted policies that a task family offers outside its env: policy key -> factory
#: ``"module:function"`` taking the env and returning ``act(obs, deterministic)``.
SCRIPTED: dict[str, str] = {"safe-driver": "constrained_grpo.envs.highway.policies:make_safe_driver"}



def _log_episodes(log: Callable[[dict[str, Any]], None] | None, res: EvalResult, start: float) -> None:
    """Log a reference's one "iteration": the episodes ``res`` it played since ``start`` (perf_counter)."""
    if log is not None:
        log({
            "env_steps": int(res.lengths.sum()),
            "wall_s": time.perf_counter() - start,
            "ep_return": float(res.returns.mean()),
            "ep_cost": res.costs.mean(axis=0).tolist(),
            "multipliers": [],
        })

class ReferenceAgent:
    """A fixed policy with the agent interface (Contract 2).

    Args:
        env_id: the task.
        seed: seeds the random policy's action space and the episodes ``learn`` plays.
        policy: ``random`` or a key of the task's ``reference_policies()``.
        episodes: episodes ``learn`` plays and logs as its one iteration.
        env_kwargs: the task's constructor keywords; limits: the run's limits (the task's
            keyword ``limits``, so that the optimal policy is the one for them).
    """

    def __init__(self, env_id: str, seed: int = 0, *, policy: str = "random", episodes: int = 20,
                 env_kwargs: dict[str, Any] | None = None, limits: Any = None) -> None:
        if episodes < 1:
            raise ValueError(f"episodes={episodes!r} must be >= 1")
        self.env_id, self.seed, self.policy = env_id, int(seed), policy
        self.episodes = int(episodes)
        # Limits are constructor keywords (Contract 1): the optimum is then the one for them.
        self.env = make_env(env_id, **dict(env_kwargs or {}), **({} if limits is None else {"limits": limits}))
        self.constraints = get_constraints(self.env)
        if policy == "random":
            space = self.env.action_space
            space.seed(self.seed)
            self._act: Callable[[np.ndarray, bool], Any] = lambda obs, deterministic: space.sample()
        elif policy in SCRIPTED:
            import importlib

            module, _, attr = SCRIPTED[policy].partition(":")
            try:
                self._act = getattr(importlib.import_module(module), attr)(self.env)
            except ValueError as err:
                self.env.close()
                raise ValueError(f"task {env_id!r} cannot run the {policy!r} reference: {err}") from None
        else:
            offered = getattr(self.env.unwrapped, "reference_policies", None)
            table = offered() if callable(offered) else {}
            if policy not in table:
                self.env.close()
                raise ValueError(
                    f"task {env_id!r} offers no {policy!r} reference policy (it offers {sorted(table) or 'none'}); "
                    "use ref-random there"
                )
            self._act = table[policy]

    @property
    def multipliers(self) -> np.ndarray:
        return np.zeros(0)

    def act(self, obs: np.ndarray, deterministic: bool = True) -> Any:
        """The reference policy's action (its most likely action when ``deterministic``)."""
        return self._act(obs, deterministic)

    def act_batch(self, obs: np.ndarray, deterministic: bool, uniforms: np.ndarray) -> np.ndarray:
        """Actions for a batch ``(B, ...)``, sampled from the episodes' draws ``uniforms``
        ``(B, D)`` (:mod:`constrained_grpo.sampling`): the random policy is uniform over the
        actions (``floor(u n)``, or ``low + u (high - low)`` in a Box) in both modes; a tabular
        policy (``probs_batch``) takes its mode or the inverse-transform draw; a scripted one acts
        on each observation (it does not sample)."""
        space = self.env.action_space
        if self.policy == "random":
            if isinstance(space, gym.spaces.Discrete):
                return space.start + np.minimum((uniforms[:, 0] * space.n).astype(np.int64), space.n - 1)
            low, high = np.asarray(space.low, np.float64), np.asarray(space.high, np.float64)
            return (low + uniforms.reshape((-1, *space.shape)) * (high - low)).astype(space.dtype)
        probs = getattr(self._act, "probs_batch", None)
        if callable(probs):
            table = probs(np.asarray(obs))
            return table.argmax(axis=1) if deterministic else categorical_from_uniform(table, uniforms)
        return np.asarray([self._act(o, deterministic) for o in obs])

    def learn(self, total_env_steps: int, log: Callable[[dict[str, Any]], None] | None = None) -> "ReferenceAgent":
        """No learning: one iteration of ``episodes`` sampled episodes, logged."""
        start = time.perf_counter()
        state = np.random.get_state()
        np.random.seed(self.seed % 2**32)
        try:
            res = rollout_episodes(self.env, lambda o: self._act(o, False), self.episodes, seed=self.seed * 10_007)
        finally:
            np.random.set_state(state)
        _log_episodes(log, res, start)
        return self

    def evaluate(self, n_episodes: int = 10, deterministic: bool = True) -> EvalResult:
        """``n_episodes`` episodes from reset seeds ``1_000_000 + i`` (the harness uses ``act``)."""
        return rollout_episodes(self.env, lambda o: self._act(o, deterministic), n_episodes, seed=1_000_000)

    def save(self, path: str | Path) -> Path:
        """Nothing to save but what the policy is."""
        import json

        out = Path(path)
        out.mkdir(parents=True, exist_ok=True)
        (out / "reference.json").write_text(json.dumps({"env_id": self.env_id, "seed": self.seed, "policy": self.policy}))
        return out


def make_ref_random(env_id: str, seed: int = 0, **config: Any) -> ReferenceAgent:
    """Registry entry point of ``ref-random``."""
    return ReferenceAgent(env_id, seed, policy="random", **config)


def make_ref_optimal(env_id: str, seed: int = 0, **config: Any) -> ReferenceAgent:
    """Registry entry point of ``ref-optimal``."""
    return ReferenceAgent(env_id, seed, policy="optimal", **config)


def make_ref_unconstrained(env_id: str, seed: int = 0, **config: Any) -> ReferenceAgent:
    """Registry entry point of ``ref-unconstrained``."""
    return ReferenceAgent(env_id, seed, policy="unconstrained", **config)


def make_ref_safe_driver(env_id: str, seed: int = 0, **config: Any) -> ReferenceAgent:
    """Registry entry point of ``ref-safe-driver``."""
    return ReferenceAgent(env_id, seed, policy="safe-driver", **config)


def _from_resolved(env_id: str, seed: int, resolved: Mapping[str, Any]) -> ReferenceAgent:
    """The reference of a configuration its resolver gave (or ``config.json`` recorded)."""
    return ReferenceAgent(env_id, seed, policy=resolved["policy"], **resolved["config"])


def _resolver(policy: str) -> Callable[..., dict[str, Any]]:
    def resolve(env_id: str, **config: Any) -> dict[str, Any]:
        """The reference's options, checked by name: ``episodes``, ``env_kwargs``, ``limits``."""
        check_options(config, ("episodes", "env_kwargs", "limits"), "reference policy")
        return {"kind": "reference", "policy": policy,
                "config": {"episodes": 20, "env_kwargs": {}, "limits": None, **config}}

    return resolve


for _factory, _policy in ((make_ref_random, "random"), (make_ref_optimal, "optimal"), (make_ref_unconstrained, "unconstrained"),
                          (make_ref_safe_driver, "safe-driver")):
    _factory.resolve_config = _resolver(_policy)  # type: ignore[attr-defined]
    _factory.from_resolved = _from_resolved  # type: ignore[attr-defined]

for _name, (_policy, _description) in REFERENCES.items():
    register_agent(_name, f"constrained_grpo.references:make_{_name.replace('-', '_')}", description=_description,
                   constrained=False, reference=True)


class WarmStartReference:
    """The warm-started text policy of a math task, never updated (``ref-warmstart``).

    It is built exactly as the GRPO learners build their starting point
    (:func:`~constrained_grpo.agents.text_agent.make_text_grpo_agent` with the same preset,
    ``lm`` and seed), so its row is where every text learner of the task began.

    Args:
        env_id: a text task (e.g. ``Math/ChainSumLong-v0``).
        seed: the seed of the policy's init and warm start.
        episodes: sampled completions ``learn`` scores and logs as its one iteration.
        **text_options: the text agent's options (``preset``, ``lm``, ``env_kwargs``, ``limits``, ...).
    """

    def __init__(self, env_id: str, seed: int = 0, *, episodes: int = 64, resolved_text: Mapping[str, Any] | None = None,
                 **text_options: Any) -> None:
        if isinstance(episodes, bool) or not isinstance(episodes, int) or episodes < 1:
            raise ValueError(f"episodes={episodes!r} must be an integer >= 1")
        from constrained_grpo.agents.text_agent import make_text_grpo_agent, text_from_resolved

        self.env_id, self.seed, self.episodes = env_id, int(seed), episodes
        # resolved_text: the text agent's resolved configuration (_resolve_warmstart), built as is.
        self.agent = (text_from_resolved(env_id, seed, resolved_text) if resolved_text is not None
                      else make_text_grpo_agent(env_id, seed, algo="grpo", **text_options))
        self.agent.algo = "ref-warmstart"
        self.constraints = self.agent.constraints

    @property
    def multipliers(self) -> np.ndarray:
        return np.zeros(0)

    def learn(self, total_env_steps: int, log: Callable[[dict[str, Any]], None] | None = None) -> "WarmStartReference":
        """No update: ``episodes`` sampled completions (problems ``seed * 10_007 + i``), logged as one iteration."""
        start = time.perf_counter()
        res = self.agent.evaluate(self.episodes, deterministic=False, seed=self.seed * 10_007)
        _log_episodes(log, res, start)
        return self

    def evaluate(self, n_episodes: int = 10, deterministic: bool = True, seed: int | None = None) -> EvalResult:
        """The text agent's evaluation over problems ``seed + i`` (the harness passes its seeds)."""
        return self.agent.evaluate(n_episodes, deterministic, seed)

    def save(self, path: str | Path) -> Path:
        """The warm-started weights, as a text agent saves them."""
        return self.agent.save(path)


def make_ref_warmstart(env_id: str, seed: int = 0, **config: Any) -> WarmStartReference:
    """Registry entry point of ``ref-warmstart``."""
    return WarmStartReference(env_id, seed, **config)


def _resolve_warmstart(env_id: str, **config: Any) -> dict[str, Any]:
    """The warm start's text configuration (as the GRPO learners resolve it) and ``episodes``."""
    from constrained_grpo.agents.text_agent import resolve_text_config

    config = dict(config)
    episodes = config.pop("episodes", 64)
    if "algo" in config:
        raise ValueError(f"ref-warmstart takes no algo (got {config['algo']!r}): it is the warm start with no updates")
    text = resolve_text_config(env_id, algo="grpo", **config)
    return {"kind": "reference", "policy": "warmstart", "config": {"episodes": episodes, **text}}


def _warmstart_from_resolved(env_id: str, seed: int, resolved: Mapping[str, Any]) -> WarmStartReference:
    config = dict(resolved["config"])
    episodes = config.pop("episodes")
    return WarmStartReference(env_id, seed, episodes=episodes, resolved_text=config)


make_ref_warmstart.resolve_config = _resolve_warmstart  # type: ignore[attr-defined]
make_ref_warmstart.from_resolved = _warmstart_from_resolved  # type: ignore[attr-defined]
register_agent("ref-warmstart", "constrained_grpo.references:make_ref_warmstart",
               description="reference: the math task's warm-started language model, no GRPO update (unranked)",
               constrained=False, reference=True, acts_on_text=True)
