"""An agent with ``act(obs, deterministic)`` alone, evaluated on a task's batched twin with
the very episodes and actions of the serial path.

The serial path (:func:`~constrained_grpo.eval.evaluation.play_seeded`) seeds torch's CPU
generator and numpy's global one with ``episode_seed(s)`` at the start of the episode reset
with seed s, and the agent draws its sampled actions from them. :class:`RowGenerators` keeps
those two generators' states per row of a wave: before row i's ``act`` it installs row i's
states, after it saves them back, so row i's episode sees exactly the draws it would see
alone, whatever the other rows did. ``act_batch`` is then a loop of ``act`` over the rows
(the policy is not batched; the environment is, which is where the serial path spends its
time: highway-env plays about 84 steps per CPU second).

Exactness needs every draw to come from those two generators. An agent with
``seed_evaluation(seed)`` draws from a generator of its own, whose state cannot be saved
generically, and an agent that acts on a wrapped observation (``wrap_eval_env``) without a
batched wrapper (``wrap_eval_vec_env``) cannot be stepped on the twin: both are played one
episode at a time, after a :class:`SlowEvaluationWarning` with the estimated time and the
five-line fix (an ``act_batch`` drawing from the episodes' uniforms).
"""

from __future__ import annotations

import ctypes
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from constrained_grpo.sampling import episode_seed
from constrained_grpo.eval.eval_progress import format_duration

__all__ = ["ACT_BATCH_FIX", "RowGenerators", "SlowEvaluationWarning", "act_only_rows"]

#: The fix a slow-path warning names: ``act_batch`` on top of an existing ``act``.
ACT_BATCH_FIX = """\
    def act_batch(self, obs, deterministic, uniforms):   # obs (B, ...), uniforms (B, D) in [0, 1)
        logits = self.policy(torch.as_tensor(obs, dtype=torch.float32)).detach().numpy()
        if deterministic:
            return logits.argmax(axis=1)
        return categorical_from_uniform(softmax(logits, axis=1), uniforms)   # constrained_grpo.sampling"""


class SlowEvaluationWarning(UserWarning):
    """An ``act``-only agent is evaluated one episode at a time on a task with a batched twin."""


def _numpy_fingerprint() -> Callable[[], bytes] | None:
    """A cheap snapshot of numpy's global MT19937 (its 624 words and position), to tell whether
    a call drew from it; None where that generator cannot be read so (then every row swaps
    numpy's state in full)."""
    try:
        bits = np.random.mtrand._rand._bit_generator
        address = bits.ctypes.state_address
    except AttributeError:
        return None
    return lambda: ctypes.string_at(address, 624 * 4 + 4)


class RowGenerators:
    """``act_batch(obs, deterministic, uniforms)`` and ``begin_episodes(seeds)`` around ``act``:
    row i of a wave plays its episode with torch's CPU and numpy's global generators in the
    state the serial path gives them (seeded with ``episode_seed(seeds[i])`` at reset, then
    advanced by row i's own ``act`` calls only). ``uniforms`` are ignored: the agent draws
    from the generators. The caller's generator states are restored after every call.

    Swapping numpy's legacy state costs about 0.1 ms a row, torch's 2 us, so numpy's is kept
    per row only once a call is seen to draw from it (that call is then redone from the row's
    own state): an agent sampling with torch alone pays for torch alone."""

    def __init__(self, act: Callable[..., Any]) -> None:
        self.act = act
        self._seeds: list[int] = []
        self._torch: list[Any] = []
        self._numpy: list[Any] = []  # None: the row has not drawn from numpy since its seeding
        self._fingerprint = _numpy_fingerprint()
        self.numpy_rows = self._fingerprint is None  # whether numpy's state is swapped per row

    def begin_episodes(self, seeds: np.ndarray) -> None:
        import torch

        caller = torch.default_generator.get_state()
        try:
            self._seeds = [episode_seed(int(s)) for s in np.asarray(seeds, dtype=np.int64)]
            self._torch = []
            for seed in self._seeds:
                torch.default_generator.manual_seed(seed)  # the CPU generator alone, as the serial path
                self._torch.append(torch.default_generator.get_state())
            self._numpy = [None] * len(self._seeds)
        finally:
            torch.default_generator.set_state(caller)

    def _act_row(self, i: int, obs: Any, deterministic: bool) -> np.ndarray:
        import torch

        torch.default_generator.set_state(self._torch[i])
        if self.numpy_rows:
            if self._numpy[i] is None:
                np.random.seed(self._seeds[i] % 2**32)
            else:
                np.random.set_state(self._numpy[i])
        action = np.asarray(self.act(obs, deterministic=deterministic))
        self._torch[i] = torch.default_generator.get_state()
        if self.numpy_rows:
            self._numpy[i] = np.random.get_state()
        return action

    def act_batch(self, obs: np.ndarray, deterministic: bool, uniforms: np.ndarray | None = None) -> np.ndarray:
        import torch

        if len(obs) != len(self._seeds):
            raise ValueError(f"act_batch got {len(obs)} rows after begin_episodes of {len(self._seeds)} episodes")
        caller = torch.default_generator.get_state(), np.random.get_state()
        actions = []
        try:
            for i in range(len(obs)):
                if self.numpy_rows:
                    actions.append(self._act_row(i, obs[i], deterministic))
                    continue
                before = self._fingerprint()
                torch_before = self._torch[i]
                action = self._act_row(i, obs[i], deterministic)
                if self._fingerprint() != before:  # it draws from numpy: redo this row from its own state
                    self.numpy_rows = True
                    self._torch[i] = torch_before
                    action = self._act_row(i, obs[i], deterministic)
                actions.append(action)
        finally:
            torch.default_generator.set_state(caller[0])
            if self.numpy_rows:
                np.random.set_state(caller[1])
        return np.stack(actions)


def _episode_seconds(env: Any, act: Callable[..., Any], first_seed: int,
                     seed_evaluation: Callable[[int], None] | None, budget_s: float = 0.5,
                     most: int = 20) -> tuple[float, int]:
    """Mean wall seconds of one sampled episode as the serial path plays it (reset, generators
    seeded, then ``act`` per step), over the first episodes of the evaluation until ``budget_s``
    has passed or ``most`` were played; and how many were (the probe of the estimate). The
    caller keeps the global generators."""
    import torch

    start, played = time.perf_counter(), 0
    while played < most and (played == 0 or time.perf_counter() - start < budget_s):
        seed = first_seed + played
        obs, _ = env.reset(seed=seed)
        torch.default_generator.manual_seed(episode_seed(seed))
        np.random.seed(episode_seed(seed) % 2**32)
        if seed_evaluation is not None:
            seed_evaluation(episode_seed(seed))
        done = False
        while not done:
            obs, _, terminated, truncated, _ = env.step(act(obs, deterministic=False))
            done = terminated or truncated
        played += 1
    return (time.perf_counter() - start) / played, played


def slow_path_message(name: str, task: str, why: str, episode_s: float, probed: int, episodes: tuple[int, int],
                      policies: int) -> str:
    """The warning's text: the estimate (episodes x policies x the probe's seconds per episode,
    ``episodes`` the fewest and most the plan may ask) and the fix."""
    lo, hi = episodes
    count = f"{lo:,}" if lo == hi else f"{lo:,} to {hi:,}"
    took = format_duration(episode_s * lo * policies)
    if hi != lo:
        took += f" to {format_duration(episode_s * hi * policies)}"
    each = f"{episode_s * 1000:.1f} ms" if episode_s < 0.1 else f"{episode_s:.2f} s"
    return (f"{name} has act() alone and {why}, so it is evaluated on {task} one episode at a time: {count} episodes "
            f"x {policies} policies at {each} per episode (the first {probed} measured) is about "
            f"{took}. With act_batch the task's batched twin plays them all at once; add "
            f"(5 lines):\n{ACT_BATCH_FIX}")


def act_only_rows(agent: Any, env: Any, task: str, *, twin: bool, unbatched_wrap: bool,
                  seed_evaluation: Callable[[int], None] | None, episodes: int | None, constraints: Sequence[Any],
                  first_seed: int, plan: Any, policies: int = 2) -> RowGenerators | None:
    """How an agent with ``act`` alone is evaluated: :class:`RowGenerators` to play it on the
    batched twin (same episodes, same actions as one at a time), or None for one episode at a
    time. ``twin``: the task has a batched twin and the caller allows it; ``unbatched_wrap``:
    the agent wraps its observations (``wrap_eval_env``) with no batched form. Where the twin
    exists but cannot be used exactly, one :class:`SlowEvaluationWarning` says so before any
    episode of the evaluation, with its time estimated as episodes x policies x the mean
    seconds of the first episodes played as the serial path plays them (at most 20, or 0.5 s),
    the episodes being ``episodes``, else from the plan's size for the indicator limits (or
    its pilot) to, where a pilot may raise it, the plan's cap."""
    if not twin:
        return None
    if seed_evaluation is None and not unbatched_wrap:
        return RowGenerators(agent.act)
    from constrained_grpo.eval.scoring.verdict import plan_episodes

    why = ("draws from a generator of its own (seed_evaluation), which cannot be replayed row by row"
           if seed_evaluation is not None else "wraps its observations without wrap_eval_vec_env")
    if episodes is not None:
        n = (int(episodes), int(episodes))
    else:  # the indicators' plan; a pilot may raise it up to the cap for the other costs
        indicators = [c for c in constraints if c.indicator]
        fewest = plan_episodes(indicators, power=plan.power, cap=plan.cap) if indicators else min(plan.pilot, plan.cap)
        n = (fewest, fewest if len(indicators) == len(constraints) else int(plan.cap))
    import torch

    with torch.random.fork_rng(devices=[]):
        state = np.random.get_state()
        try:
            seconds, probed = _episode_seconds(env, agent.act, first_seed, seed_evaluation)
        finally:
            np.random.set_state(state)
    warnings.warn(SlowEvaluationWarning(slow_path_message(type(agent).__name__, task, why, seconds, probed, n, policies)),
                  stacklevel=3)
    return None
