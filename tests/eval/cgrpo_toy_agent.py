"""A test-only agent following Contract 2, loaded by dotted path ``cgrpo_toy_agent:ToyAgent``,
and the constants the harness tests share (a uniquely named module, unlike ``conftest``).

A uniformly random policy with projected dual ascent on the multipliers,
lambda_k <- clip(lambda_k + lr (J_k - d_k) / max(d_k, 1), 0, 100), so that the logs look
like a constrained agent's. Knobs make it slow, crash once, crash always, or kill its
own process once, for the harness tests. Everything random comes from ``seed``.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from constrained_grpo.constraints import get_constraints
from constrained_grpo.registry import EvalResult
from constrained_grpo.tasks import make_env, rollout_episodes

HERE = Path(__file__).resolve().parent
TOY = "cgrpo_toy_agent:ToyAgent"
TOY_UNCONSTRAINED = "cgrpo_toy_agent:unconstrained"
#: The 3x3 grid: K=2 like HazardFuel, and its exact optimum solves in under a second.
TASK = "Grid/HazardFuel3x3-v0"


def subprocess_env() -> dict[str, str]:
    """Environment for child processes: this module importable, one thread."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), *filter(None, [env.get("PYTHONPATH")])])
    env["OMP_NUM_THREADS"] = "1"
    env.pop("CGRPO_PROGRESS_FLUSH_S", None)
    return env


class ToyAgent:
    """Random policy + dual ascent; ``constrained=False`` logs no multipliers."""

    def __init__(
        self,
        env_id: str,
        seed: int = 0,
        *,
        episodes_per_iter: int = 4,
        lr_lambda: float = 0.5,
        constrained: bool = True,
        sleep_s: float = 0.0,
        crash: str | None = None,
        marker_dir: str | None = None,
    ) -> None:
        if crash not in (None, "always", "once", "kill_once"):
            raise ValueError(f"crash={crash!r}; use None, 'always', 'once' or 'kill_once'")
        self.env_id = env_id
        self.seed = seed
        self.env = make_env(env_id)
        self.constraints = get_constraints(self.env)
        self.episodes_per_iter = episodes_per_iter
        self.lr_lambda = lr_lambda
        self.constrained = constrained
        self.sleep_s = sleep_s
        self.crash = crash
        self.marker_dir = marker_dir
        self.rng = np.random.default_rng(seed)

    def _first_time(self) -> bool:
        """True once per (marker_dir, seed): the marker file records that it happened."""
        assert self.marker_dir is not None, "crash='once' needs marker_dir"
        marker = Path(self.marker_dir) / f"crashed_{self.seed}"
        if marker.exists():
            return False
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text("1")
        return True

    def learn(self, total_env_steps: int, log: Callable[[dict[str, Any]], None] | None = None) -> None:
        limits = np.array([c.limit for c in self.constraints])
        lam = np.zeros(len(limits))
        steps, start = 0, time.perf_counter()
        while steps < total_env_steps:
            ep_seed = int(self.rng.integers(0, 2**31 - 1))
            res = rollout_episodes(self.env, lambda obs: int(self.rng.integers(4)), self.episodes_per_iter, seed=ep_seed)
            steps += int(res.lengths.sum())
            cost = res.costs.mean(axis=0)
            lam = np.clip(lam + self.lr_lambda * (cost - limits) / np.maximum(limits, 1.0), 0.0, 100.0)
            eff = np.concatenate([[1.0], lam]) / (1.0 + lam.sum())
            if log is not None:
                log({
                    "iteration": 1 + steps,  # an agent's own counter; the harness renumbers rows
                    "env_steps": steps,
                    "wall_s": time.perf_counter() - start,
                    "ep_return": float(res.returns.mean()),
                    "ep_cost": cost.tolist(),
                    "multipliers": lam.tolist() if self.constrained else [],
                    "loss": float(self.rng.normal()),
                    "eff_w": eff.tolist() if self.constrained else [],
                })
            if self.crash == "always" or (self.crash == "once" and self._first_time()):
                raise RuntimeError(f"toy agent crash ({self.crash}) at env step {steps}")
            if self.crash == "kill_once" and self._first_time():
                os.kill(os.getpid(), signal.SIGKILL)
            if self.sleep_s:
                time.sleep(self.sleep_s)

    def seed_evaluation(self, seed: int) -> None:
        """The evaluation's stream for one episode: its reset seed and the run's seed, so
        that two seeds (and the two toys) evaluate differently, as two runs of a learner do."""
        self._eval_rng = np.random.default_rng([self.seed, seed, int(self.constrained)])

    def act(self, obs: np.ndarray, deterministic: bool = True) -> int:
        """Uniformly random (both policies: the toy has no mode), from the evaluation's stream."""
        rng = getattr(self, "_eval_rng", None)
        return int(np.random.randint(4) if rng is None else rng.integers(4))

    def evaluate(self, n_episodes: int, deterministic: bool = True) -> EvalResult:
        rng = np.random.default_rng(10_000 + self.seed)  # independent of training's stream
        return rollout_episodes(self.env, lambda obs: int(rng.integers(4)), n_episodes, seed=10_000 + self.seed)

    def save(self, path: str | Path) -> None:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        (path / "config.json").write_text(json.dumps({"env_id": self.env_id, "seed": self.seed}))


def unconstrained(env_id: str, seed: int = 0, **config: Any) -> ToyAgent:
    """The toy agent without multipliers (an unconstrained algorithm)."""
    return ToyAgent(env_id, seed, constrained=False, **config)

