"""Roll out a random and the scripted route policies on every gridworld task.

``python -m constrained_grpo.envs.gridworld.demo [--episodes N]`` prints, per task and
policy, the mean return and each mean episodic cost against its limit, with the exact
constrained and unconstrained optima for comparison.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from constrained_grpo.envs import list_tasks
from constrained_grpo.envs.gridworld.policies import ROUTES, route_policy
from constrained_grpo.tasks import make_env, rollout_episodes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--episodes", type=int, default=50)
    parser.add_argument("--tasks", nargs="*", default=None, help="task ids (default: every gridworld task)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    tasks = args.tasks or list_tasks("gridworld")
    for env_id in tasks:
        env = make_env(env_id)
        base = env.unwrapped
        opt = base.optimum()
        print(f"\n{env_id}  optimum: {opt.constrained_return:.4f} constrained, "
              f"{opt.unconstrained_return:.4f} unconstrained; lambda* = "
              + ", ".join(f"{n}={v:.3f}" for n, v in zip(opt.cost_names, opt.multipliers)))
        header = f"  {'policy':8s} {'return':>8s}  " + "  ".join(
            f"{c.name + ' (<= ' + format(c.limit, 'g') + ')':>18s}" for c in base.constraints
        )
        print(header)
        rng = np.random.default_rng(args.seed)
        policies = {"random": lambda obs: int(rng.integers(4))}
        policies.update({name: route_policy(base.model, name) for name in ROUTES})
        for name, act in policies.items():
            res = rollout_episodes(env, act, args.episodes, seed=args.seed)
            mean_costs = res.costs.mean(axis=0)
            cells = "  ".join(
                f"{m:>12.3f} {'ok ' if m <= c.limit + 1e-9 else 'OVER':>5s}"
                for m, c in zip(mean_costs, base.constraints)
            )
            print(f"  {name:8s} {res.returns.mean():8.3f}  {cells}")
        env.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
