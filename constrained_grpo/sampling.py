"""Evaluation sampling that makes an episode a function of its reset seed alone.

The harness evaluates a sampled policy with one uniform draw per action dimension per step,
``u = episode_uniforms(reset_seed, t, dims)``, a counter-based hash (SplitMix64) of the
episode's reset seed and the step. An agent maps the draw to its action by inverse
transform sampling (:func:`categorical_from_uniform`, :func:`gaussian_from_uniform`), so
episode i is the same whether the harness steps one env or a batch of thousands, in any
order, on any machine: the serial and batched evaluations agree episode by episode, and two
algorithms with the same policy play the same episodes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["GAMMA", "MASK64", "categorical_from_uniform", "episode_choice", "episode_seed", "episode_uniforms",
           "gaussian_from_uniform", "noise_dims", "play_waves", "splitmix64"]

#: SplitMix64's increment (the golden ratio in 64 bits) and the 64-bit mask.
GAMMA = 0x9E3779B97F4A7C15
MASK64 = (1 << 64) - 1
_GAMMA = np.uint64(GAMMA)
_SALT = np.uint64(0xC2B2AE3D27D4EB4F)  # an odd multiplier no task's own draws use
_CHOICE_SALT = np.uint64(0x165667B19E3779F9)  # another, for the per-episode choice of a mixture
_SEED_SALT = 0x27D4EB2F165667C5  # and one for the seed of an agent's own evaluation generator


def splitmix64(x: Any) -> Any:
    """SplitMix64 finaliser on Python ints or uint64 numpy arrays (wrapping arithmetic)."""
    if isinstance(x, np.ndarray):
        # In place on one temporary: at B = 1024 allocation is a large share of the cost.
        z = x + _GAMMA
        z ^= z >> np.uint64(30)
        z *= np.uint64(0xBF58476D1CE4E5B9)
        z ^= z >> np.uint64(27)
        z *= np.uint64(0x94D049BB133111EB)
        z ^= z >> np.uint64(31)
        return z
    z = (x + GAMMA) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def episode_uniforms(reset_seeds: np.ndarray | int, step: np.ndarray | int, dims: int) -> np.ndarray:
    """Uniform draws in (0, 1), ``(B, dims)``: draw j of step t of the episode reset with seed
    s is ``(h(h(s * SALT) + (t * dims + j + 1) * GAMMA) >> 11 + 1/2) / 2^53`` (h: SplitMix64)."""
    seeds = np.atleast_1d(np.asarray(reset_seeds, dtype=np.int64)).astype(np.uint64)
    t = np.broadcast_to(np.asarray(step, dtype=np.int64), seeds.shape).astype(np.uint64)
    with np.errstate(over="ignore"):
        keys = splitmix64(seeds * _SALT)
        counter = (t * np.uint64(dims))[:, None] + np.arange(dims, dtype=np.uint64) + np.uint64(1)
        bits = splitmix64(keys[:, None] + counter * _GAMMA) >> np.uint64(11)
    return (bits.astype(np.float64) + 0.5) * (1.0 / (1 << 53))


def episode_choice(reset_seeds: np.ndarray | int, n: int) -> np.ndarray:
    """Which of ``n`` policies a mixture plays in the episode reset with each seed, ``(B,)``:
    ``floor(n u)`` with ``u = (h(s * SALT') >> 11 + 1/2) / 2^53``, a draw no action uses, so a
    mixture's episode, like any policy's, is a function of its reset seed alone."""
    if n < 1:
        raise ValueError(f"n={n!r}: a mixture needs at least one policy")
    seeds = np.atleast_1d(np.asarray(reset_seeds, dtype=np.int64)).astype(np.uint64)
    with np.errstate(over="ignore"):
        bits = splitmix64(seeds * _CHOICE_SALT) >> np.uint64(11)
    u = (bits.astype(np.float64) + 0.5) * (1.0 / (1 << 53))
    return np.minimum((u * n).astype(np.int64), n - 1)


def episode_seed(reset_seed: int) -> int:
    """The seed of an agent's own evaluation generator in the episode reset with seed s:
    ``h(s * SALT'')`` (SplitMix64, 64 bits), a function of s alone. Not s itself: gymnasium
    seeds an env's ``np_random`` as ``numpy.random.default_rng(s)`` does, so an agent
    generator seeded with s would replay the env's own draws (on a bridge that falls when
    u < 0.5, a policy that crosses when its u > 0.8 would never fall)."""
    return int(splitmix64((int(reset_seed) * _SEED_SALT) & MASK64))


def noise_dims(action_space: object) -> int:
    """Draws per step an action of ``action_space`` takes: 1 for Discrete, the size of a Box."""
    shape = getattr(action_space, "shape", ())
    return 1 if not shape else int(np.prod(shape))


def categorical_from_uniform(probs: np.ndarray, u: np.ndarray) -> np.ndarray:
    """The action ``a`` with ``F(a - 1) <= u * F(A - 1) < F(a)``, F the running sum of ``probs``
    ``(B, A)`` (unnormalised rows are fine), for draws ``u`` ``(B,)`` or ``(B, 1)``."""
    p = np.asarray(probs, dtype=np.float64)
    cdf = np.cumsum(p, axis=1)
    target = np.asarray(u, dtype=np.float64).reshape(-1, 1) * cdf[:, -1:]
    return np.minimum((cdf <= target).sum(axis=1), p.shape[1] - 1).astype(np.int64)


def gaussian_from_uniform(mean: np.ndarray, std: np.ndarray, u: np.ndarray) -> np.ndarray:
    """``mean + std * Phi^{-1}(u)``: a draw of N(mean, diag(std^2)) from uniforms of its shape."""
    from scipy.special import ndtri  # only continuous actions need it

    return np.asarray(mean, dtype=np.float64) + np.asarray(std, dtype=np.float64) * ndtri(np.asarray(u, dtype=np.float64))


def play_waves(make_vec: Callable[[int], Any], act: Callable[[np.ndarray, np.ndarray], np.ndarray], seeds: Any, k: int,
               wave: int, *, vec: Any = None, begin: Callable[[np.ndarray], None] | None = None,
               on_ended: Callable[[int], None] | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(returns (n,), costs (n, K), lengths (n,))`` of the episodes reset with ``seeds`` on a
    vector env with same-step autoreset (``make_vec(rows)``), in waves of ``min(wave, n)`` rows:
    step ``t`` of the episode reset with seed ``s`` acts ``act(obs, episode_uniforms(s, t, D))``,
    and a row's rewards and costs (``info["costs"]``) stop counting when its episode ends, so
    every episode is a function of its seed and the policy. ``vec``: an env of ``min(wave, n)``
    rows already made; the last, smaller wave gets one of its own (no row plays an unseeded
    episode). ``begin(part)`` after each wave's reset; ``on_ended(count)`` as episodes end.
    Every env it steps is closed; it draws from no generator."""
    seeds = np.asarray(seeds, dtype=np.int64)
    n = len(seeds)
    returns, costs, lengths = np.zeros(n), np.zeros((n, k)), np.zeros(n, dtype=np.int64)
    size = min(wave, n)
    if vec is None:
        vec = make_vec(size)
    try:
        dims = noise_dims(vec.single_action_space)
        for start in range(0, n, size):
            part = seeds[start:start + size]
            b = len(part)
            if b < size:
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
                obs, reward, terminated, truncated, info = vec.step(act(np.asarray(obs), episode_uniforms(part, t, dims)))
                step_costs = np.asarray(info["costs"], dtype=np.float64).reshape(b, k)
                ret += np.where(alive, np.asarray(reward, dtype=np.float64), 0.0)
                cost += np.where(alive[:, None], step_costs, 0.0)
                length += alive
                ended = alive & (np.asarray(terminated) | np.asarray(truncated))
                alive &= ~ended
                if on_ended is not None:
                    on_ended(int(ended.sum()))
                t += 1
            returns[start:start + b], costs[start:start + b], lengths[start:start + b] = ret, cost, length
    finally:
        vec.close()
    return returns, costs, lengths
