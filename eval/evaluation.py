"""The harness's final evaluation of a trained agent: episodes sized by the verdict rule,
played on the task's batched twin where it has one, identical to the serial path.

Episode i of every run of a task starts from ``reset(seed=first_seed + i)``, and a sampled
policy draws its actions from ``constrained_grpo.sampling.episode_uniforms(first_seed + i,
t, D)``: an episode is a function of its reset seed and the policy alone, so the batched
evaluation (thousands of episodes stepped at once) and the serial one (one env, one
episode after another) agree episode by episode, and the runs of a task are paired.

How many episodes (:func:`evaluation_size`): a run that names its count gets it, if the
count can certify every indicator limit at all (:func:`~constrained_grpo.eval.scoring.verdict.check_eval_size`);
otherwise the task family's :class:`~constrained_grpo.envs.registration.EvalPlan` sizes it
from the limits (:func:`~constrained_grpo.eval.scoring.verdict.plan_episodes`), after a pilot of the
first episodes where a cost is not an indicator. The pilot's episodes are the first of the
evaluation (nothing is thrown away), and the plan depends on their spread, not their mean.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from constrained_grpo.constraints import Constraint, costs_from_info, get_constraints
from constrained_grpo.registry import EvalResult
from constrained_grpo.sampling import episode_uniforms, noise_dims
from constrained_grpo.schema import EVAL_POLICIES
from constrained_grpo.tasks import make_env, make_vec_env, rollout_episodes, task_info
from constrained_grpo.eval.scoring.verdict import ALPHA, TOL, check_eval_size, plan_episodes

__all__ = ["EVAL_SEED", "WAVE", "BeginEpisodes", "EvalProtocol", "evaluate_agent", "play_batched", "play_serial"]

#: Reset seed of the first final-evaluation episode: episode i of every run, whatever its
#: algorithm or training seed, starts from ``reset(seed=EVAL_SEED + i)``, so that all
#: algorithms of a task are evaluated on the same episodes (a paired comparison).
EVAL_SEED = 1_000_000
#: Episodes stepped at once on a batched twin (a wave runs until its longest episode ends).
WAVE = 2048

#: ``act_batch(obs (B, ...), deterministic, uniforms (B, D)) -> actions (B, ...)``.
ActBatch = Callable[[np.ndarray, bool, np.ndarray], np.ndarray]


@dataclass(frozen=True)
class EvalProtocol:
    """How a run's final policy was evaluated (``done.json["eval"]``).

    Attributes:
        episodes: episodes per policy.
        first_seed: reset seed of episode 0 (episode i: ``first_seed + i``); None when the
            agent ran its own evaluation and did not say which episodes it played.
        policies: the evaluated policies, ``EVAL_POLICIES`` or a subset.
        owner: ``"harness"`` (the harness stepped the env, or had a text agent score the
            harness's problem seeds) or ``"agent"`` (``agent.evaluate``).
        sampler: how sampled actions were drawn: ``"episode-uniforms"`` (a function of the
            reset seed, :mod:`constrained_grpo.sampling`), ``"generator"`` (the agent's or
            torch's generator, seeded with ``first_seed``), or None.
        batched: whether the episodes were stepped on the task's batched twin.
        rule: how ``episodes`` was chosen: ``{"rule": "fixed"}`` or ``{"rule": "planned", "power",
            "cap", "pilot" (episodes of the pilot, 0 without one), "tol", "alpha"}``.
    """

    episodes: int
    first_seed: int | None
    policies: tuple[str, ...]
    owner: str
    sampler: str | None = None
    batched: bool = False
    rule: Mapping[str, Any] = field(default_factory=lambda: {"rule": "fixed"})

    def to_dict(self) -> dict[str, Any]:
        return {"episodes": self.episodes, "first_seed": self.first_seed, "policies": list(self.policies),
                "owner": self.owner, "sampler": self.sampler, "batched": self.batched, "rule": dict(self.rule)}


#: ``begin_episodes(reset_seeds (B,))``: an agent's optional hook, called as each batch of rows
#: starts its episodes (a mixture policy picks each episode's member from its reset seed).
BeginEpisodes = Callable[[np.ndarray], None]


def play_serial(env: Any, act_batch: ActBatch, deterministic: bool, seeds: Sequence[int], k: int,
                begin: BeginEpisodes | None = None) -> EvalResult:
    """One episode after another on ``env``: episode j from ``reset(seed=seeds[j])``, actions
    ``act_batch(obs[None], deterministic, episode_uniforms(seeds[j], t, D))[0]`` (after
    ``begin([seeds[j]])`` where the agent has the hook)."""
    dims = noise_dims(env.action_space)
    n = len(seeds)
    returns, costs, lengths = np.zeros(n), np.zeros((n, k)), np.zeros(n, dtype=np.int64)
    for j, seed in enumerate(seeds):
        obs, _ = env.reset(seed=int(seed))
        if begin is not None:
            begin(np.array([int(seed)], dtype=np.int64))
        t, done = 0, False
        while not done:
            u = episode_uniforms(int(seed), t, dims)
            action = act_batch(np.asarray(obs)[None], deterministic, u)[0]
            obs, reward, terminated, truncated, info = env.step(action)
            returns[j] += float(reward)
            costs[j] += costs_from_info(info, k)
            t += 1
            done = terminated or truncated
        lengths[j] = t
    return EvalResult(returns=returns, costs=costs, lengths=lengths)


def play_batched(
    make_vec: Callable[[int], Any], act_batch: ActBatch, deterministic: bool, seeds: Sequence[int], k: int, wave: int = WAVE,
    begin: BeginEpisodes | None = None,
) -> EvalResult:
    """The same episodes as :func:`play_serial`, ``wave`` at a time on a vector env with
    same-step autoreset (``make_vec(num_envs)``): every slot is reset with its episode's seed,
    and its rows are ignored once its episode has ended."""
    seeds = np.asarray(seeds, dtype=np.int64)
    n = len(seeds)
    returns, costs, lengths = np.zeros(n), np.zeros((n, k)), np.zeros(n, dtype=np.int64)
    size = min(wave, n)
    vec = make_vec(size)
    try:
        dims = noise_dims(vec.single_action_space)
        for start in range(0, n, size):
            part = seeds[start:start + size]
            b = len(part)
            if b < size:  # the last wave: a smaller env, so that no slot plays an unseeded episode
                vec.close()
                size = b
                vec = make_vec(size)
            obs, _ = vec.reset(seed=[int(s) for s in part])
            if begin is not None:
                begin(part)
            alive = np.ones(b, dtype=bool)
            ret, cost, length = np.zeros(b), np.zeros((b, k)), np.zeros(b, dtype=np.int64)
            t = 0
            while alive.any():
                u = episode_uniforms(part, t, dims)
                actions = act_batch(np.asarray(obs), deterministic, u)
                obs, reward, terminated, truncated, info = vec.step(actions)
                step_costs = np.asarray(info["costs"], dtype=np.float64).reshape(b, k)
                ret += np.where(alive, np.asarray(reward, dtype=np.float64), 0.0)
                cost += np.where(alive[:, None], step_costs, 0.0)
                length += alive
                alive &= ~(np.asarray(terminated) | np.asarray(truncated))
                t += 1
            returns[start:start + b], costs[start:start + b], lengths[start:start + b] = ret, cost, length
    finally:
        vec.close()
    return EvalResult(returns=returns, costs=costs, lengths=lengths)


def _concat(parts: Sequence[EvalResult]) -> EvalResult:
    return EvalResult(returns=np.concatenate([p.returns for p in parts]),
                      costs=np.concatenate([p.costs for p in parts]),
                      lengths=np.concatenate([p.lengths for p in parts]))


def evaluate_agent(
    agent: Any,
    task: str,
    episodes: int | None = None,
    env_kwargs: Mapping[str, Any] | None = None,
    first_seed: int = EVAL_SEED,
    *,
    constraints: Sequence[Constraint] | None = None,
    batched: bool | None = None,
) -> tuple[dict[str, EvalResult], EvalProtocol]:
    """The final evaluation: ``episodes`` (None: the task's plan) per policy of ``EVAL_POLICIES``,
    episode i from ``reset(seed=first_seed + i)``.

    A control agent with ``act_batch(obs, deterministic, uniforms)`` is evaluated on the
    task's batched twin (``batched``: None lets the task say, ``TaskInfo.batched_eval``) or
    one env, with the same episodes; one with only ``act(obs, deterministic)`` on one env,
    sampling from torch's global generator (forked, seeded with ``first_seed``) or its own
    (``seed_evaluation(seed)``). An agent that acts on more than the task's observation
    (Saute's remaining budget) exposes ``wrap_eval_env(env)`` and is evaluated on one env. A
    text agent (Text observations) provides ``evaluate(n, deterministic, seed=...)`` over the
    harness's problem seeds. An agent with neither evaluates itself (``evaluate(n,
    deterministic)``): its episodes are its own, ``owner="agent"``, and the leaderboard does
    not pair it with others. ``constraints``: the run's (its limits plan the size; default
    the task's). Raises ``EvalSizeError`` for a count below what the rule needs.
    """
    import gymnasium as gym

    kwargs = dict(env_kwargs or {})
    info = task_info(task)
    env = make_env(task, **kwargs)
    try:
        cons = tuple(constraints) if constraints is not None else get_constraints(env)
        k = len(cons)
        plan = info.family.eval
        if episodes is not None:
            check_eval_size(int(episodes), cons, "--eval-episodes")
        text = isinstance(env.observation_space, gym.spaces.Text)
        evaluate = getattr(agent, "evaluate", None)
        seeded_evaluate = callable(evaluate) and "seed" in inspect.signature(evaluate).parameters
        act = getattr(agent, "act", None)
        act_batch = getattr(agent, "act_batch", None)
        wrap = getattr(agent, "wrap_eval_env", None)
        if not ((text and seeded_evaluate) or (not text and (callable(act) or callable(act_batch)))):
            if not callable(evaluate):
                raise TypeError(f"{type(agent).__name__} has neither act(obs, deterministic) nor evaluate(n, deterministic) (Contract 2)")
            n = int(episodes) if episodes is not None else plan_episodes(cons, power=plan.power, cap=plan.cap)
            rule = _rule(episodes, plan, 0)
            return {"deterministic": evaluate(n, deterministic=True)}, EvalProtocol(n, None, ("deterministic",), "agent", None, False, rule)
        if not text and callable(wrap):  # observations the policy needs beyond the task's own
            env = wrap(env)
        use_batched = (not text and callable(act_batch) and not callable(wrap)
                       and (info.batched_eval if batched is None else bool(batched)))

        def play(policy: str, start: int, count: int) -> EvalResult:
            det = policy == "deterministic"
            seeds = list(range(first_seed + start, first_seed + start + count))
            if text:
                return _forked(first_seed + start, lambda: evaluate(count, deterministic=det, seed=first_seed + start))
            if callable(act_batch):
                begin = getattr(agent, "begin_episodes", None)
                begin = begin if callable(begin) else None
                if use_batched:
                    return play_batched(lambda b: make_vec_env(task, b, **kwargs), act_batch, det, seeds, k, begin=begin)
                return play_serial(env, act_batch, det, seeds, k, begin=begin)

            def serial() -> EvalResult:
                if callable(getattr(agent, "seed_evaluation", None)):
                    agent.seed_evaluation(first_seed + start)
                return rollout_episodes(env, lambda o: act(o, deterministic=det), count, seed=first_seed + start)

            return _forked(first_seed + start, serial)

        pilot = 0
        if episodes is not None:
            n = int(episodes)
        else:  # the indicators' plan; a pilot for the other costs' spread unless that is the cap already
            n = plan_episodes([c for c in cons if c.indicator], power=plan.power, cap=plan.cap)
            if n < plan.cap and not all(c.indicator for c in cons):
                pilot = min(plan.pilot, plan.cap)
        results: dict[str, EvalResult] = {}
        if pilot:
            results = {p: play(p, 0, pilot) for p in EVAL_POLICIES}
            n = max(pilot, *(plan_episodes(cons, power=plan.power, cap=plan.cap,
                                           pilot_costs=[r.costs[:, j] for j in range(k)]) for r in results.values()))
        for policy in EVAL_POLICIES:
            done = len(results[policy].returns) if policy in results else 0
            if n > done:
                more = play(policy, done, n - done)
                results[policy] = _concat([results[policy], more]) if done else more
        sampler = "episode-uniforms" if (not text and callable(act_batch)) else "generator"
        return results, EvalProtocol(n, first_seed, EVAL_POLICIES, "harness", sampler, use_batched, _rule(episodes, plan, pilot))
    finally:
        env.close()


def _rule(episodes: int | None, plan: Any, pilot: int) -> dict[str, Any]:
    if episodes is not None:
        return {"rule": "fixed"}
    return {"rule": "planned", **plan.to_dict(), "pilot": pilot, "tol": TOL, "alpha": ALPHA}


def _forked(seed: int, fn: Callable[[], EvalResult]) -> EvalResult:
    """``fn()`` with torch's and numpy's global generators seeded with ``seed`` and restored after."""
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        state = np.random.get_state()
        np.random.seed(seed % 2**32)
        try:
            return fn()
        finally:
            np.random.set_state(state)
