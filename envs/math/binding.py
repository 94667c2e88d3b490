"""Whether a math task's length limit binds: the numbers behind ``Math/ChainSumLong-v0``.

A limit *binds* when the reward maximiser breaks it: then a constrained learner must give
up reward that an unconstrained one takes, and the two separate. Two measurements:

* :func:`style_violation_rates` (no model): for each worked-solution style, the fraction
  of problems whose solution is longer than the task's budget, and the warm-start
  mixture's rate ``sum_s w_s * P(len_s > budget)``, the length-violation rate of a policy
  that imitates its demonstrations perfectly;
* :func:`length_split` (a policy): the policy's accuracy on its over-budget completions,
  ``P(correct | long)``, and on the others, ``P(correct | short)``. If
  ``P(correct | long) > P(correct | short)``, moving probability to long completions
  raises the reward, so an unconstrained maximiser violates the limit.

``python -m constrained_grpo.envs.math.binding`` warm-starts the text agent's policy on a
task (no GRPO update) and prints both (torch needed; minutes on a CPU).
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from constrained_grpo.envs.math.solutions import DEFAULT_MIXTURE, STYLES, worked_solution

__all__ = ["LengthSplit", "length_split", "scripted_sides", "style_violation_rates"]


def style_violation_rates(
    env_id: str, n: int = 2000, mixture: Mapping[str, float] | None = None, seed: int = 0
) -> dict[str, float]:
    """``{style: P(len > budget)}`` over the problems of reset seeds ``0..n-1``, plus
    ``"mixture"``: the rate of the warm-start ``mixture`` (default: the task's)."""
    from constrained_grpo.tasks import make_env

    if n < 1:
        raise ValueError(f"n={n!r} must be >= 1 (problems to measure)")
    env = make_env(env_id)
    try:
        math_env = env.unwrapped
        budget = math_env.rules.max_tokens
        count = math_env._count
        rng = np.random.default_rng(seed)
        rates = {}
        for style in STYLES:
            over = [count(worked_solution(math_env.problem_for_seed(s), style, rng)) > budget for s in range(n)]
            rates[style] = float(np.mean(over))
    finally:
        env.close()
    mix = dict(DEFAULT_MIXTURE if mixture is None else mixture)
    total = sum(mix.values())
    rates["mixture"] = float(sum(w * rates[s] for s, w in mix.items()) / total)
    return rates


def scripted_sides(env_id: str, problems: int = 2000, first_seed: int = 1_000_000) -> tuple[dict[str, Any], dict[str, Any]]:
    """Scripted stand-ins of a math task's binding check, scored by the env on the problems of
    reset seeds ``first_seed + i``: ``({"ref-worked": ...}, {"ref-fitting": ...})`` as
    :class:`~constrained_grpo.registry.EvalResult`.

    * ``ref-worked`` writes the concise worked solution of every problem: what the warm start
      teaches and an unconstrained learner keeps when working pays (ChainSumLong's ``grpo``);
    * ``ref-fitting`` writes it where it fits the budget and the bare answer ``#### n``
      elsewhere: a witness that every limit can be kept.

    Both know the answer (return 1): they show which limit the working breaks, not the
    return a learner gives up, which needs recorded runs.
    """
    from constrained_grpo.registry import EvalResult
    from constrained_grpo.tasks import make_env

    if problems < 1:
        raise ValueError(f"problems={problems!r} must be >= 1")
    env = make_env(env_id)
    try:
        math_env = env.unwrapped
        budget, count = math_env.rules.max_tokens, math_env._count
        rng = np.random.default_rng(0)
        k = len(math_env.constraints)
        played = {name: (np.zeros(problems), np.zeros((problems, k))) for name in ("ref-worked", "ref-fitting")}
        for i in range(problems):
            problem = math_env.problem_for_seed(first_seed + i)
            worked = worked_solution(problem, "concise", rng)
            fitting = worked if count(worked) <= budget else worked_solution(problem, "direct", rng)
            for name, text in (("ref-worked", worked), ("ref-fitting", fitting)):
                env.reset(seed=first_seed + i)
                _, reward, _, _, info = env.step(text)
                played[name][0][i], played[name][1][i] = reward, info["costs"]
    finally:
        env.close()
    results = {name: EvalResult(returns=r, costs=c, lengths=np.ones(problems, dtype=np.int64))
               for name, (r, c) in played.items()}
    return {"ref-worked": results["ref-worked"]}, {"ref-fitting": results["ref-fitting"]}


@dataclass(frozen=True)
class LengthSplit:
    """A policy's completions split by the length cost: rates and accuracies."""

    n: int
    violation_rate: float
    accuracy: float
    accuracy_long: float
    accuracy_short: float

    def __str__(self) -> str:
        return (
            f"n={self.n}  length violations {self.violation_rate:.3f}  accuracy {self.accuracy:.3f}  "
            f"P(correct|long) {self.accuracy_long:.3f}  P(correct|short) {self.accuracy_short:.3f}"
        )


def length_split(returns: np.ndarray, length_costs: np.ndarray) -> LengthSplit:
    """Accuracy overall and conditioned on the ``length`` indicator (NaN for an empty side)."""
    r = np.asarray(returns, dtype=np.float64)
    long = np.asarray(length_costs, dtype=np.float64) > 0.5
    if r.shape != long.shape or r.ndim != 1 or r.size == 0:
        raise ValueError(f"returns {r.shape} and length_costs {long.shape} must be equal, non-empty 1-D arrays")
    def side(mask: np.ndarray) -> float:
        return float(r[mask].mean()) if mask.any() else float("nan")

    return LengthSplit(int(r.size), float(long.mean()), float(r.mean()), side(long), side(~long))


def main(argv: list[str] | None = None) -> None:
    """Print the style rates and the warm-started policy's length split on a task."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--task", default="Math/ChainSumLong-v0")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--episodes", type=int, default=512)
    parser.add_argument("--preset", default="standard", help="the text agent's preset (its LM and warm start)")
    args = parser.parse_args(argv)
    from constrained_grpo.registry import make_agent  # the text agent, through the registry

    rates = style_violation_rates(args.task)
    print(f"{args.task}: P(len > budget) by style:", "  ".join(f"{k} {v:.3f}" for k, v in rates.items()))
    agent = make_agent("grpo", args.task, seed=args.seed, preset=args.preset)
    index = [c.name for c in agent.constraints].index("length")
    for det in (False, True):
        res = agent.evaluate(args.episodes, deterministic=det)
        print(f"warm start ({'greedy' if det else 'sampled'}):", length_split(res.returns, res.costs[:, index]))


if __name__ == "__main__":
    main()
