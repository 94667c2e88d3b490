"""Fidelity of the batched highway simulator against highway-env itself.

Two comparisons, run as a script (``python -m constrained_grpo.envs.highway.fidelity``):

* ``trajectories``: from the same seed (so the same initial scene, drawn by highway-env's
  own reset) and the same actions, the positions, speeds and headings of every vehicle
  in :class:`~.batched.BatchedHighway` and in highway-env's ``HighwayEnvFast`` (configured
  as the ``Highway/Highway-v0`` task) are compared after every policy step. A rollout
  *matches* when all of them agree to ``tol`` for its first ``steps`` steps (or until
  highway-env's episode ends); the report gives the fraction of matching rollouts and
  how many steps each stays equal, under the IDLE and the uniformly random policy.
* ``episodes``: the per-episode statistics (collision, mean speed, the four costs,
  return) of ``n`` episodes under IDLE, always-FASTER and uniformly random policies,
  on both sides; the reference side is ``HighwayTaskEnv(fast=False)`` (highway-env's
  simulator plus the task's cost bookkeeping), seeds ``0..n-1``. The batched side runs
  the same seeds (every statistic should then be equal) and, for the table, ``n``
  independent seeds; each side's mean and 95% CI (``1.96 sd / sqrt(n)``) and whether
  the two CIs overlap.

Usage: first ``--reference-out FILE`` (slow: highway-env, ~60 steps/s; appends one JSON
line per episode, so a stopped run keeps its episodes and resumes), then
``--reference-in FILE`` for the tables (``--rollouts 0`` skips the trajectory table).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np

POLICIES: tuple[str, ...] = ("idle", "faster", "random")
STATS: tuple[str, ...] = ("collision", "mean_speed", "speeding", "headway", "lane_change", "return", "length")
_IDLE, _FASTER = 1, 3


def policy_action(policy: str, rng: np.random.Generator) -> int:
    """The scripted policies' meta-action: IDLE (1), FASTER (3) or uniform over 0..4."""
    if policy == "idle":
        return _IDLE
    if policy == "faster":
        return _FASTER
    return int(rng.integers(5))


def _policy_rng(seed: int) -> np.random.Generator:
    return np.random.default_rng([seed, 12345])


def reference_episode(env: Any, policy: str, seed: int) -> dict[str, float]:
    """One episode of ``HighwayTaskEnv`` under ``policy``, from ``reset(seed=seed)``."""
    rng = _policy_rng(seed)
    env.reset(seed=seed)
    total = np.zeros(4)
    ret, speeds, steps = 0.0, [], 0
    while True:
        _, r, term, trunc, info = env.step(policy_action(policy, rng))
        total += info["costs"]
        ret += r
        speeds.append(info["speed"])
        steps += 1
        if term or trunc:
            break
    return _record(policy, seed, total, ret, float(np.mean(speeds)), steps)


def _record(policy: str, seed: int, costs: np.ndarray, ret: float, mean_speed: float, steps: int) -> dict[str, Any]:
    return {
        "policy": policy,
        "seed": int(seed),
        "collision": float(costs[0]),
        "speeding": float(costs[1]),
        "headway": float(costs[2]),
        "lane_change": float(costs[3]),
        "return": float(ret),
        "mean_speed": float(mean_speed),
        "length": int(steps),
    }


def run_reference(n: int, out: Path, start: int = 0) -> None:
    """Append ``n`` reference episodes per policy (seeds ``start..start+n-1``) to ``out``,
    the policies interleaved so that a stopped run is balanced."""
    from constrained_grpo.envs.highway.env import HighwayTaskEnv

    env = HighwayTaskEnv(fast=False)
    done = {(r["policy"], r["seed"]) for r in _read(out)} if out.exists() else set()
    with out.open("a") as fh:
        for seed in range(start, start + n):
            for policy in POLICIES:
                if (policy, seed) in done:
                    continue
                fh.write(json.dumps(reference_episode(env, policy, seed)) + "\n")
                fh.flush()


def run_batched(n: int, seed0: int = 0) -> list[dict[str, Any]]:
    """``n`` episodes per policy on the batched simulator: env ``i`` runs one episode from
    seed ``seed0 + i`` with the policy generator of that seed (as :func:`reference_episode`).

    One episode per env, all of them counted: taking the first ``n`` episodes to end
    across fewer envs would over-sample short (crashing) episodes.
    """
    from constrained_grpo.envs.highway.batched import HighwayBatchedVectorEnv

    rows: list[dict[str, Any]] = []
    seeds = [seed0 + i for i in range(n)]
    for policy in POLICIES:
        venv = HighwayBatchedVectorEnv(num_envs=n)
        venv.reset(seed=seeds)
        rngs = [_policy_rng(s) for s in seeds]
        costs = np.zeros((n, 4))
        ret = np.zeros(n)
        speed = np.zeros(n)
        steps = np.zeros(n, dtype=int)
        running = np.ones(n, dtype=bool)
        while running.any():
            actions = np.array([policy_action(policy, g) if r else 1 for g, r in zip(rngs, running)])
            _, r, term, trunc, info = venv.step(actions)
            costs[running] += info["costs"][running]
            ret[running] += r[running]
            speed[running] += info["speed"][running]
            steps[running] += 1
            ended = running & (term | trunc)
            for i in np.flatnonzero(ended).tolist():
                rows.append(_record(policy, seeds[i], costs[i], ret[i], speed[i] / steps[i], int(steps[i])))
            running &= ~ended
        venv.close()
    return rows


def same_seed_agreement(reference: list[dict[str, Any]], batched: list[dict[str, Any]]) -> tuple[int, int, float]:
    """Episodes present on both sides (same policy and seed), how many have every
    statistic equal to 1e-9, and the largest absolute difference of any statistic."""
    ref = {(r["policy"], r["seed"]): r for r in reference}
    both = [(ref[(r["policy"], r["seed"])], r) for r in batched if (r["policy"], r["seed"]) in ref]
    diffs = [max(abs(float(a[k]) - float(b[k])) for k in STATS) for a, b in both]
    return len(both), sum(d <= 1e-9 for d in diffs), max(diffs, default=0.0)


def _read(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def summary(rows: list[dict[str, Any]], policy: str, stat: str) -> tuple[float, float, int]:
    """Mean, 95% CI half-width ``1.96 sd / sqrt(n)`` and ``n`` of one statistic."""
    x = np.array(sorted(float(r[stat]) for r in rows if r["policy"] == policy))
    if len(x) == 0:
        return math.nan, math.nan, 0
    sd = float(x.std(ddof=1)) if len(x) > 1 else 0.0
    return float(math.fsum(x) / len(x)), 1.96 * sd / math.sqrt(len(x)), len(x)


def episode_table(reference: list[dict[str, Any]], batched: list[dict[str, Any]]) -> str:
    """Markdown table: each statistic's mean +- CI on both sides and whether the CIs overlap."""
    lines = ["| policy | statistic | highway-env (n) | batched (n) | CIs overlap |", "|---|---|---|---|---|"]
    for policy in POLICIES:
        for stat in STATS:
            m1, h1, n1 = summary(reference, policy, stat)
            m2, h2, n2 = summary(batched, policy, stat)
            overlap = abs(m1 - m2) <= h1 + h2
            lines.append(
                f"| {policy} | {stat} | {m1:.4f} +- {h1:.4f} ({n1}) | {m2:.4f} +- {h2:.4f} ({n2}) | "
                f"{'yes' if overlap else 'NO'} |"
            )
    return "\n".join(lines)


def vehicle_states(sim: Any) -> np.ndarray:
    """``(N, 4)``: x, y, speed, heading of highway-env's vehicles, in its list order."""
    return np.array([[v.position[0], v.position[1], v.speed, v.heading] for v in sim.road.vehicles])


def compare_rollout(seed: int, policy: str, steps: int, tol: float = 1e-6) -> int:
    """Policy steps for which the batched simulator's vehicle states equal highway-env's
    (to ``tol``) from ``reset(seed=seed)``; ``steps`` if they agree throughout (or until
    highway-env's episode ends)."""
    from highway_env.envs.highway_env import HighwayEnvFast

    from constrained_grpo.envs.highway.batched import BatchedHighway

    raw = HighwayEnvFast(config={"collision_reward": 0})
    raw.reset(seed=seed)
    sim = BatchedHighway(1)
    sim.reset_envs(np.array([0]), [seed])
    rng = _policy_rng(seed)
    if not np.allclose(vehicle_states(raw), sim.states(0), rtol=0, atol=tol):
        return 0
    for t in range(steps):
        a = policy_action(policy, rng)
        _, _, term, trunc, _ = raw.step(a)
        sim.step(np.array([a]))
        if not np.allclose(vehicle_states(raw), sim.states(0), rtol=0, atol=tol):
            return t
        if term or trunc:
            return steps
    return steps


def trajectory_table(seeds: range, steps: int = 10, horizon: int = 30) -> str:
    """Markdown table of the trajectory comparison under IDLE and random policies."""
    lines = [
        f"| policy | rollouts | equal for {steps} steps | mean steps equal (of {horizon}) "
        "| equal for the whole episode |",
        "|---|---|---|---|---|",
    ]
    for policy in ("idle", "random"):
        equal = [compare_rollout(s, policy, horizon) for s in seeds]
        first = sum(e >= steps for e in equal)
        whole = sum(e >= horizon for e in equal)
        lines.append(
            f"| {policy} | {len(equal)} | {first} ({100 * first / len(equal):.1f}%) | "
            f"{math.fsum(equal) / len(equal):.2f} | {whole} ({100 * whole / len(equal):.1f}%) |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reference-out", type=Path, help="run reference episodes, appending JSON lines here")
    p.add_argument("--reference-in", type=Path, help="reference episodes (JSON lines) for the episode table")
    p.add_argument("--episodes", type=int, default=1000, help="episodes per policy")
    p.add_argument("--independent-seed", type=int, default=100_000, help="first seed of the batched episodes")
    p.add_argument("--rollouts", type=int, default=200, help="seeded rollouts of the trajectory comparison (0: none)")
    args = p.parse_args(argv)
    if args.reference_out is not None:
        run_reference(args.episodes, args.reference_out)
        return 0
    if args.rollouts > 0:
        print(trajectory_table(range(args.rollouts)))
    if args.reference_in is not None:
        reference = _read(args.reference_in)
        same = run_batched(args.episodes, seed0=0)
        n, equal, worst = same_seed_agreement(reference, same)
        print(f"\nsame seeds and actions: {equal} of {n} episodes with every statistic equal (max |diff| {worst:.3g})\n")
        print(episode_table(reference, run_batched(args.episodes, seed0=args.independent_seed)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
