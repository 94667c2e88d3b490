"""The harness's final evaluation of a trained agent: episodes sized by the verdict rule,
played on the task's batched twin where it has one, identical to the serial path.

Episode i of every run of a task starts from ``reset(seed=first_seed + i)``, and a sampled
policy with ``act_batch`` draws its actions from
``constrained_grpo.sampling.episode_uniforms(first_seed + i, t, D)``: an episode is a function
of its reset seed and the policy alone, so the batched evaluation (thousands of episodes
stepped at once) and the serial one (one env, one episode after another) agree episode by
episode, and the runs of a task are paired.

A control agent with ``act(obs, deterministic)`` alone (:func:`play_seeded`) is played one
episode after another (on a task with a batched twin, the twin plays those very episodes with
the generators' states kept per row: :mod:`constrained_grpo.eval.act_rows`), and at the
start of episode i the harness seeds torch's and numpy's global generators and calls the
agent's ``seed_evaluation(seed)`` where it has one, with ``seed = episode_seed(first_seed +
i)`` (:func:`constrained_grpo.sampling.episode_seed`, a hash of the reset seed): its sampled
episode i is then a function of the reset seed and the
policy too, provided it draws its actions from those generators. Whether it does is checked
before the evaluation (:func:`sampling_is_seeded`): the first episodes are replayed twice,
up to :data:`REPLAY_STEPS` sampled actions, and when the replays differ an
:class:`UnseededEvaluationWarning` names the agent and the fix, and the protocol records
``sampler="unseeded"``. An ``act_batch`` agent gets the same check with the same draws.

How many episodes (:func:`evaluation_size`): a run that names its count gets it, if the
count can certify every indicator limit at all (:func:`~constrained_grpo.eval.scoring.verdict.check_eval_size`);
otherwise the task family's :class:`~constrained_grpo.envs.registration.EvalPlan` sizes it
from the limits (:func:`~constrained_grpo.eval.scoring.verdict.plan_episodes`), after a pilot of the
first episodes where a cost is not an indicator. The pilot's episodes are the first of the
evaluation (nothing is thrown away), and the plan depends on their spread, not their mean.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from constrained_grpo.constraints import Constraint, costs_from_info, get_constraints
from constrained_grpo.registry import EvalResult, agent_methods
from constrained_grpo.sampling import episode_seed, episode_uniforms, noise_dims, play_waves
from constrained_grpo.schema import EVAL_POLICIES
from constrained_grpo.tasks import make_env, make_vec_env, task_info
from constrained_grpo.eval.scoring.verdict import ALPHA, TOL, check_eval_size, plan_episodes
from constrained_grpo.eval import eval_progress
from constrained_grpo.eval.act_rows import act_only_rows

__all__ = ["EVAL_SEED", "REPLAY_STEPS", "WAVE", "BeginEpisodes", "EvalProtocol", "UnseededEvaluationWarning",
           "evaluate_agent", "play_batched", "play_refilled", "play_seeded", "play_serial", "sampling_is_seeded"]

#: Reset seed of the first final-evaluation episode: episode i of every run, whatever its
#: algorithm or training seed, starts from ``reset(seed=EVAL_SEED + i)``, so that all
#: algorithms of a task are evaluated on the same episodes (a paired comparison).
EVAL_SEED = 1_000_000
#: Rows stepped at once on a batched twin (refilled as episodes end where the env takes a
#: partial reset; otherwise a wave runs until its longest episode ends).
WAVE = 2048
#: Continuous batching (:func:`play_refilled`): at least this many rows (the batched highway
#: simulator steps about 4,350 rows/s at 256 rows, 4,700-5,400 at 2,048, on one loaded core),
#: and about this many episodes per row, so that the tail, where rows whose plan is spent
#: idle, is at most about 1/8 of the work (10,175 episodes: 1,272 rows).
REFILL_MIN_ROWS = 256
REFILL_EPISODES = 8
#: Sampled actions that :func:`sampling_is_seeded` replays twice (the first evaluation
#: episodes, as many as these steps reach): an agent drawing from a generator the harness
#: does not seed picks two equal sequences of 32 actions only if its policy is (nearly)
#: deterministic, when sampling does not matter; 64 steps cost nothing beside the evaluation.
REPLAY_STEPS = 32

#: ``act_batch(obs (B, ...), deterministic, uniforms (B, D)) -> actions (B, ...)``.
ActBatch = Callable[[np.ndarray, bool, np.ndarray], np.ndarray]
#: ``act(obs, deterministic) -> action``: one observation.
Act = Callable[..., Any]


class UnseededEvaluationWarning(UserWarning):
    """An agent's sampled evaluation is not a function of the episodes' reset seeds: two
    replays of the same episodes, seeded alike, sampled different actions."""


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
            reset seed, :mod:`constrained_grpo.sampling`), ``"episode-generator"`` (the
            agent's generator, ``seed_evaluation``, or torch's and numpy's, seeded in each
            episode with ``episode_seed`` of its reset seed), ``"generator"`` (a text
            agent's, seeded with ``first_seed``), ``"unseeded"`` (the agent drew from a
            generator the harness does not seed: :class:`UnseededEvaluationWarning`), or None.
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


def _play(env: Any, seeds: Sequence[int], k: int, start: Callable[[int], None],
          choose: Callable[[Any, int, int], Any]) -> EvalResult:
    """One episode after another on ``env``: episode j from ``reset(seed=seeds[j])``, then
    ``start(seeds[j])``, action ``choose(obs, seeds[j], t)`` at step t (as :func:`_first_actions`)."""
    n = len(seeds)
    returns, costs, lengths = np.zeros(n), np.zeros((n, k)), np.zeros(n, dtype=np.int64)
    for j, seed in enumerate(int(s) for s in seeds):
        obs, _ = env.reset(seed=seed)
        start(seed)
        t, done = 0, False
        while not done:
            obs, reward, terminated, truncated, info = env.step(choose(obs, seed, t))
            returns[j] += float(reward)
            costs[j] += costs_from_info(info, k)
            t += 1
            done = terminated or truncated
        lengths[j] = t
        eval_progress.episodes_done(1)
    return EvalResult(returns=returns, costs=costs, lengths=lengths)


def play_serial(env: Any, act_batch: ActBatch, deterministic: bool, seeds: Sequence[int], k: int,
                begin: BeginEpisodes | None = None) -> EvalResult:
    """One episode after another on ``env``: episode j from ``reset(seed=seeds[j])``, actions
    ``act_batch(obs[None], deterministic, episode_uniforms(seeds[j], t, D))[0]`` (after
    ``begin([seeds[j]])`` where the agent has the hook)."""
    dims = noise_dims(env.action_space)

    def start(seed: int) -> None:
        if begin is not None:
            begin(np.array([seed], dtype=np.int64))

    def choose(obs: Any, seed: int, t: int) -> Any:
        return act_batch(np.asarray(obs)[None], deterministic, episode_uniforms(seed, t, dims))[0]

    return _play(env, seeds, k, start, choose)


def play_seeded(env: Any, act: Act, deterministic: bool, seeds: Sequence[int], k: int,
                seed_evaluation: Callable[[int], None] | None = None) -> EvalResult:
    """One episode after another on ``env`` for an agent with ``act(obs, deterministic)``
    alone: episode j from ``reset(seed=seeds[j])``, then torch's and numpy's global
    generators and the agent's own (``seed_evaluation``) seeded with ``episode_seed(seeds[j])``,
    so that a sampled episode depends on its reset seed and the policy, not on the episodes
    before it. The caller's global generators are restored after."""
    with _own_global_generators():
        return _play(env, seeds, k, lambda seed: _seed_generators(episode_seed(seed), seed_evaluation),
                     lambda obs, seed, t: act(obs, deterministic=deterministic))


def _first_actions(env: Any, start: Callable[[int], None], choose: Callable[[np.ndarray, int, int], Any],
                   first_seed: int, steps: int) -> list[np.ndarray]:
    """The first ``steps`` sampled actions of the evaluation: episodes from ``reset(seed=first_seed
    + i)``, ``start(seed)`` after each reset, action ``choose(obs, seed, t)`` at step t."""
    actions: list[np.ndarray] = []
    seed = first_seed
    while len(actions) < steps:
        obs, _ = env.reset(seed=seed)
        start(seed)
        t, done = 0, False
        while not done and len(actions) < steps:
            action = choose(obs, seed, t)
            actions.append(np.array(action, copy=True))
            obs, _, terminated, truncated, _ = env.step(action)
            t += 1
            done = terminated or truncated
        seed += 1
    return actions


def sampling_is_seeded(env: Any, start: Callable[[int], None], choose: Callable[[np.ndarray, int, int], Any],
                       first_seed: int = EVAL_SEED, steps: int = REPLAY_STEPS) -> bool:
    """Whether two replays of the evaluation's first ``steps`` sampled actions agree (see
    :func:`_first_actions` for ``start`` and ``choose``): an agent whose actions are a function
    of the observation and the seeded draws picks the same sequence twice, one that draws from
    a generator of its own (unseeded, or seeded once at construction) does not. The global
    generators are restored after."""
    with _own_global_generators():
        first = _first_actions(env, start, choose, first_seed, steps)
        again = _first_actions(env, start, choose, first_seed, steps)
    return all(a.shape == b.shape and np.array_equal(a, b) for a, b in zip(first, again))


def _unseeded_message(agent: Any, first_seed: int, batch: bool, has_seed_evaluation: bool) -> str:
    name = type(agent).__name__
    seeds = f"reset seeds {first_seed}+i"
    if batch:
        return (f"{name}.act_batch(obs, False, uniforms) sampled different actions in two replays of the first "
                f"evaluation episodes ({seeds}) with the same draws: its sampled evaluation cannot be reproduced "
                "and is not paired with other algorithms'. Pick each sampled action from its row of `uniforms` "
                "(constrained_grpo.sampling.categorical_from_uniform, gaussian_from_uniform), not from a "
                "generator of the agent's own.")
    how = ("each after the same seed_evaluation(seed) calls" if has_seed_evaluation
           else "seeded alike (it has no seed_evaluation(seed))")
    return (f"{name}.act(obs, deterministic=False) sampled different actions in two replays of the first "
            f"evaluation episodes ({seeds}), {how}: it draws from a generator the harness does not seed, so "
            "its sampled evaluation cannot be reproduced and is not paired with other algorithms'. Implement "
            "seed_evaluation(seed), which the harness calls at the start of each evaluation episode with a seed "
            "of that episode, and draw the sampled actions from the generator it seeds.")


def play_batched(
    make_vec: Callable[[int], Any], act_batch: ActBatch, deterministic: bool, seeds: Sequence[int], k: int, wave: int = WAVE,
    begin: BeginEpisodes | None = None, refill: bool = True,
) -> EvalResult:
    """The same episodes as :func:`play_serial`, on ``min(wave, n)`` rows of a vector env with
    same-step autoreset (``make_vec(num_envs)``). Where the env takes gymnasium's partial
    reset (``metadata["reset_mask"]``) and ``refill``, a row whose episode ends starts the
    plan's next episode at once (:func:`play_refilled`); otherwise in waves: every slot is
    reset with its episode's seed, and its rows are ignored once its episode has ended."""
    seeds = np.asarray(seeds, dtype=np.int64)
    n = len(seeds)
    size = min(wave, n)
    vec = make_vec(size)
    if refill and getattr(vec, "metadata", {}).get("reset_mask", False):
        try:
            # Rows enough to amortise a batched step (REFILL_MIN_ROWS), few enough that each plays
            # about REFILL_EPISODES episodes: the rows idle only at the tail, when the plan is spent.
            rows = min(size, max(REFILL_MIN_ROWS, -(-n // REFILL_EPISODES)))
            if rows < size:
                vec.close()
                vec = make_vec(rows)
            return play_refilled(vec, act_batch, deterministic, seeds, k, begin)
        finally:
            vec.close()
    returns, costs, lengths = play_waves(make_vec, lambda obs, u: act_batch(obs, deterministic, u), seeds, k, size,
                                         vec=vec, begin=begin, on_ended=eval_progress.episodes_done)
    return EvalResult(returns=returns, costs=costs, lengths=lengths)


def play_refilled(vec: Any, act_batch: ActBatch, deterministic: bool, seeds: Sequence[int], k: int,
                  begin: BeginEpisodes | None = None) -> EvalResult:
    """The episodes of :func:`play_serial` with continuous batching on ``vec`` (B rows, B <= n):
    rows start episodes 0..B-1; when a row's episode ends, the row is reset (gymnasium's
    ``reset(seed, options={"reset_mask"})``) with the seed of the plan's next episode, which
    plays from step 0 with ``episode_uniforms(seed, t, D)``: every episode is still a function
    of its reset seed and the policy. Rows idle only once the plan has no episode left, so a
    plan of n episodes of lengths L_i costs about ``sum_i L_i / B + max_i L_i`` batched steps
    (waves: ``n / B`` times the longest episode of each wave). ``begin`` gets the seeds of
    every row after each refill (a row's choice depends on its own seed alone)."""
    seeds = np.asarray(seeds, dtype=np.int64)
    n, b = len(seeds), vec.num_envs
    if not 1 <= b <= n:
        raise ValueError(f"a vector env of {b} rows for {n} episodes; make it with 1 to {n} rows")
    returns, costs, lengths = np.zeros(n), np.zeros((n, k)), np.zeros(n, dtype=np.int64)
    dims = noise_dims(vec.single_action_space)
    episode = np.arange(b)          # the plan's episode each row plays; -1 once the plan is spent
    row_seeds = seeds[:b].copy()
    t = np.zeros(b, dtype=np.int64)
    following = b
    obs, _ = vec.reset(seed=[int(s) for s in row_seeds])
    if begin is not None:
        begin(row_seeds.copy())
    while (episode >= 0).any():
        actions = act_batch(np.asarray(obs), deterministic, episode_uniforms(row_seeds, t, dims))
        obs, reward, terminated, truncated, info = vec.step(actions)
        live = np.flatnonzero(episode >= 0)
        mine = episode[live]
        returns[mine] += np.asarray(reward, dtype=np.float64)[live]
        costs[mine] += np.asarray(info["costs"], dtype=np.float64).reshape(b, k)[live]
        t += 1
        ended = live[(np.asarray(terminated) | np.asarray(truncated))[live]]
        if not ended.size:
            continue
        lengths[episode[ended]] = t[ended]
        eval_progress.episodes_done(int(ended.size))
        refilled = ended[: max(0, min(ended.size, n - following))]
        episode[ended] = -1
        if refilled.size:
            episode[refilled] = np.arange(following, following + refilled.size)
            following += refilled.size
            row_seeds[refilled] = seeds[episode[refilled]]
            t[refilled] = 0
            mask = np.zeros(b, dtype=bool)
            mask[refilled] = True
            obs, _ = vec.reset(seed=[int(s) if m else None for s, m in zip(row_seeds, mask)],
                               options={"reset_mask": mask})
            if begin is not None:
                begin(row_seeds.copy())
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
    one env, with the same episodes; one with only ``act(obs, deterministic)`` on one env
    (:func:`play_seeded`), episode i sampling from torch's and numpy's global generators
    (forked) and from its own (``seed_evaluation``), all seeded with
    ``episode_seed(first_seed + i)``. Either is first checked to sample reproducibly
    (:func:`sampling_is_seeded`, :data:`REPLAY_STEPS` actions replayed twice); one that does
    not gets one :class:`UnseededEvaluationWarning` and ``sampler="unseeded"``. An agent
    that acts on more than the task's observation (Saute's remaining budget) exposes
    ``wrap_eval_env(env)``, and ``wrap_eval_vec_env(vec)`` for the batched twin (without it,
    it is evaluated on one env). A
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
        methods = agent_methods(agent)  # the declared optional methods, signatures checked
        evaluate, act, act_batch = methods.evaluate, methods.act, methods.act_batch
        wrap, wrap_vec = methods.wrap_eval_env, methods.wrap_eval_vec_env
        if not ((text and methods.seeded_evaluate) or (not text and (act is not None or act_batch is not None))):
            if evaluate is None:
                raise TypeError(f"{type(agent).__name__} has neither act(obs, deterministic) nor evaluate(n, deterministic) (Contract 2)")
            n = int(episodes) if episodes is not None else plan_episodes(cons, power=plan.power, cap=plan.cap)
            rule = _rule(episodes, plan, 0)
            return {"deterministic": evaluate(n, deterministic=True)}, EvalProtocol(n, None, ("deterministic",), "agent", None, False, rule)
        if not text and wrap is not None:  # observations the policy needs beyond the task's own
            env = wrap(env)
        use_batched = (not text and act_batch is not None and (wrap is None or wrap_vec is not None)
                       and (info.batched_eval if batched is None else bool(batched)))

        def make_vec(b: int) -> Any:
            vec = make_vec_env(task, b, **kwargs)
            return wrap_vec(vec) if wrap_vec is not None else vec

        begin = methods.begin_episodes
        seed_evaluation = methods.seed_evaluation
        seeded = True
        if not text:
            if act_batch is not None:
                dims = noise_dims(env.action_space)
                seeded = sampling_is_seeded(
                    env, lambda s: begin(np.array([s], dtype=np.int64)) if begin is not None else None,
                    lambda o, s, t: act_batch(np.asarray(o)[None], False, episode_uniforms(s, t, dims))[0], first_seed)
            else:
                seeded = sampling_is_seeded(env, lambda s: _seed_generators(episode_seed(s), seed_evaluation),
                                            lambda o, s, t: act(o, deterministic=False), first_seed)
            if not seeded:
                warnings.warn(UnseededEvaluationWarning(
                    _unseeded_message(agent, first_seed, act_batch is not None, seed_evaluation is not None)), stacklevel=2)
        # act() alone: on the batched twin with per-row generators (exact), or warned about (eval/act_rows.py).
        rows = None if text or act_batch is not None else act_only_rows(
            agent, env, task, twin=info.batched_eval if batched is None else bool(batched),
            unbatched_wrap=wrap is not None and wrap_vec is None, seed_evaluation=seed_evaluation,
            episodes=episodes, constraints=cons, first_seed=first_seed, plan=plan, policies=len(EVAL_POLICIES))
        use_batched = use_batched or rows is not None

        def play(policy: str, start: int, count: int) -> EvalResult:
            det = policy == "deterministic"
            seeds = list(range(first_seed + start, first_seed + start + count))
            if text:
                return _forked(first_seed + start, lambda: evaluate(count, deterministic=det, seed=first_seed + start))
            if act_batch is not None:
                if use_batched:
                    return play_batched(make_vec, act_batch, det, seeds, k, begin=begin)
                return play_serial(env, act_batch, det, seeds, k, begin=begin)
            if rows is not None:
                return play_batched(make_vec, rows.act_batch, det, seeds, k, begin=rows.begin_episodes)
            return play_seeded(env, act, det, seeds, k, seed_evaluation)

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
        eval_progress.planned(n * len(EVAL_POLICIES))
        for policy in EVAL_POLICIES:
            done = len(results[policy].returns) if policy in results else 0
            if n > done:
                more = play(policy, done, n - done)
                results[policy] = _concat([results[policy], more]) if done else more
        if text:
            sampler = "generator"
        elif not seeded:
            sampler = "unseeded"
        else:
            sampler = "episode-uniforms" if act_batch is not None else "episode-generator"
        return results, EvalProtocol(n, first_seed, EVAL_POLICIES, "harness", sampler, use_batched, _rule(episodes, plan, pilot))
    finally:
        env.close()


def _rule(episodes: int | None, plan: Any, pilot: int) -> dict[str, Any]:
    if episodes is not None:
        return {"rule": "fixed"}
    return {"rule": "planned", **plan.to_dict(), "pilot": pilot, "tol": TOL, "alpha": ALPHA}


@contextmanager
def _own_global_generators() -> Iterator[None]:
    """Torch's (CPU) and numpy's global generators restored on exit, so that what the
    evaluation draws from them leaves the caller's streams as they were."""
    import torch

    with torch.random.fork_rng(devices=[]):
        state = np.random.get_state()
        try:
            yield
        finally:
            np.random.set_state(state)


def _seed_generators(seed: int, seed_evaluation: Callable[[int], None] | None = None) -> None:
    """Seed torch's CPU and numpy's global generators and the agent's own with ``seed``."""
    import torch

    # The CPU generator alone: torch.manual_seed also seeds every device backend, over 100
    # times slower per episode, and fork_rng(devices=[]) restores the CPU state only.
    torch.default_generator.manual_seed(seed)
    np.random.seed(seed % 2**32)
    if seed_evaluation is not None:
        seed_evaluation(seed)


def _forked(seed: int, fn: Callable[[], EvalResult]) -> EvalResult:
    """``fn()`` with torch's and numpy's global generators seeded with ``seed`` and restored after."""
    import torch

    with _own_global_generators():
        torch.manual_seed(seed)  # every device's generator too: a text agent may sample on one
        np.random.seed(seed % 2**32)
        return fn()
