"""Safety-Gymnasium throughput: env-steps/s through the bridge vs in-process, for 1 and 8
envs, on ``Safety/PointGoal1-v0``. Writes ``safety.csv``.

*In-process* is the legacy env stepped by a plain loop in its own interpreter
(``.venv-safety``), no bridge; *bridge* is our process stepping ``make_env`` (1 env) or
``make_vec_env`` (8 envs, one worker, one round trip per vector step). Both sides make the
same envs, reset them with the same seeds and step random actions. The shared CPUs this
runs on drift by tens of percent within seconds, so the two sides alternate in short
windows (in-process, bridge, in-process, ...) and the figures are medians over the rounds;
the ratio is the median of each round's bridge / in-process ratio.

Besides wall-clock steps/s, each side's CPU time per env step (for the bridge: worker plus
our process) and its run-queue wait (time runnable but not running, i.e. the machine's
other load) come from ``/proc/<pid>/schedstat``: the CPU ratio is the bridge's cost free of
that load, and a large wait says the wall-clock figures measure the neighbours.

All windows fit in the first 1000-step episode, so no reset falls inside one: a
Safety-Gymnasium reset costs seconds (MuJoCo decodes the skybox images on every world rebuild), the same on
both sides; it is reported apart (``reset_s``, the first reset, in-process).

Target: the batched bridge reaches >= 0.85x the in-process rate. Skipped (no CSV) when the
second environment is not built (``make safety``).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from constrained_grpo.envs.safety.bridge import BridgeUnavailable, find_safety_python
from constrained_grpo.eval.bench import write_rows
from constrained_grpo.tasks import make_env, make_vec_env

TASK = "Safety/PointGoal1-v0"
LEGACY = "SafetyPointGoal1-v0"
#: (envs, vector steps per window); ROUNDS windows per side. WARMUP + ROUNDS * steps stays
#: under the 1000 steps of an episode (PointGoal never terminates: a reached goal moves).
CASES = ((1, 120), (8, 30))
ROUNDS = 7
WARMUP = 20
TARGET = 0.85

# A plain loop in the legacy interpreter: reads "n" on stdin, steps every env n times with
# fresh random actions, answers the seconds it took and its schedstat deltas.
_IN_PROCESS = r"""
import json, sys, time
import numpy as np
import safety_gymnasium
env_id, num_envs = sys.argv[1], int(sys.argv[2])
envs = [safety_gymnasium.make(env_id) for _ in range(num_envs)]
start = time.perf_counter()
for i, env in enumerate(envs):
    env.reset(seed=i)
print(json.dumps({"reset_s": (time.perf_counter() - start) / num_envs}), flush=True)
rng = np.random.default_rng(0)

def schedstat():
    with open("/proc/self/schedstat") as fh:
        return [int(x) for x in fh.read().split()[:2]]

for line in sys.stdin:
    actions = rng.uniform(-1.0, 1.0, size=(int(line), num_envs, 2))
    s0, start = schedstat(), time.perf_counter()
    for a in actions:
        for i, env in enumerate(envs):
            obs, reward, cost, terminated, truncated, info = env.step(a[i])
            if terminated or truncated:
                env.reset()
    seconds, s1 = time.perf_counter() - start, schedstat()
    print(json.dumps({"seconds": seconds, "cpu_ns": s1[0] - s0[0], "wait_ns": s1[1] - s0[1]}), flush=True)
"""


def _schedstat(pid: int | str) -> np.ndarray:
    """Nanoseconds on a CPU and waiting on a run queue, of ``pid``'s main thread."""
    with open(f"/proc/{pid}/schedstat") as fh:
        return np.array([int(x) for x in fh.read().split()[:2]])


class _InProcess:
    """The in-process side: ``num_envs`` legacy envs in a plain loop in the legacy interpreter."""

    def __init__(self, python: str, num_envs: int):
        args = [python, "-c", _IN_PROCESS, LEGACY, str(num_envs)]
        self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True, bufsize=1)
        self.reset_s = self._answer()["reset_s"]

    def _answer(self) -> dict[str, float]:
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the in-process benchmark died in the legacy interpreter (exit {self.proc.wait()})")
        return json.loads(line)

    def window(self, steps: int) -> tuple[float, np.ndarray]:
        """Seconds for ``steps`` vector steps, and [cpu_ns, wait_ns]."""
        self.proc.stdin.write(f"{steps}\n")
        res = self._answer()
        return res["seconds"], np.array([res["cpu_ns"], res["wait_ns"]])

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(30)


class _Bridged:
    """The bridge side: ``make_env`` for one env, ``make_vec_env`` (one worker) for several."""

    def __init__(self, num_envs: int):
        self.num_envs = num_envs
        self.rng = np.random.default_rng(0)
        self.env = make_env(TASK) if num_envs == 1 else make_vec_env(TASK, num_envs)
        self.env.reset(seed=0)

    def window(self, steps: int) -> tuple[float, np.ndarray]:
        """Seconds for ``steps`` vector steps, and [cpu_ns, wait_ns] of the worker plus ours."""
        actions = self.rng.uniform(-1.0, 1.0, size=(steps, self.num_envs, 2))
        env, single = self.env, self.num_envs == 1
        worker = env.unwrapped.bridge.pid
        s0, start = _schedstat(worker) + _schedstat("self"), time.perf_counter()
        for a in actions:
            if single:
                *_, terminated, truncated, _ = env.step(a[0])
                if terminated or truncated:  # as the in-process loop does (not expected: see CASES)
                    env.reset()
            else:
                env.step(a)
        seconds = time.perf_counter() - start
        return seconds, _schedstat(worker) + _schedstat("self") - s0

    def close(self) -> None:
        self.env.close()


def measure(python: str, num_envs: int, steps: int, rounds: int = ROUNDS) -> dict[str, float]:
    """Alternate windows of ``steps`` vector steps; medians over the rounds (see the module doc)."""
    base, bridged = _InProcess(python, num_envs), _Bridged(num_envs)
    n = steps * num_envs
    stats: dict[str, list[float]] = {k: [] for k in ("rate_a", "rate_b", "cpu_a", "cpu_b", "wait_a", "wait_b")}
    try:
        base.window(WARMUP), bridged.window(WARMUP)
        for _ in range(rounds):
            for side, obj in (("a", base), ("b", bridged)):
                seconds, (cpu_ns, wait_ns) = obj.window(steps)
                stats[f"rate_{side}"].append(n / seconds)
                stats[f"cpu_{side}"].append(cpu_ns / n / 1e3)
                stats[f"wait_{side}"].append(wait_ns / n / 1e3)
    finally:
        base.close()
        bridged.close()
    med = {k: statistics.median(v) for k, v in stats.items()}
    return {
        "in_process": med["rate_a"], "bridge": med["rate_b"],
        "ratio": statistics.median(b / a for a, b in zip(stats["rate_a"], stats["rate_b"])),
        "cpu_in_process": med["cpu_a"], "cpu_bridge": med["cpu_b"],
        "cpu_ratio": statistics.median(a / b for a, b in zip(stats["cpu_a"], stats["cpu_b"])),
        "wait_in_process": med["wait_a"], "wait_bridge": med["wait_b"],
        "reset_s": base.reset_s,
    }


def run(out_dir: Path) -> list[Path]:
    try:
        python = find_safety_python()
    except BridgeUnavailable as exc:
        print(f"  safety: skipped, {exc}")
        return []
    rows = []
    for num_envs, steps in CASES:
        res = measure(python, num_envs, steps)
        for impl in ("in_process", "bridge"):
            rows.append({
                "task": TASK, "impl": impl, "batch": num_envs, "steps": steps * num_envs * ROUNDS,
                "env_steps_per_s": round(res[impl], 1),
                "ratio_vs_in_process": 1.0 if impl == "in_process" else round(res["ratio"], 3),
                "target": TARGET if impl == "bridge" else None,
                "cpu_us_per_step": round(res[f"cpu_{impl}"], 1),
                "cpu_ratio_vs_in_process": 1.0 if impl == "in_process" else round(res["cpu_ratio"], 3),
                "runqueue_wait_us_per_step": round(res[f"wait_{impl}"], 1),
                "reset_s": round(res["reset_s"], 3), "legacy_python": python,
            })
    for r in rows:
        print(f"  {r['task']} {r['impl']:10s} B={r['batch']:<2d} {r['env_steps_per_s']:>7,.1f} steps/s "
              f"({r['ratio_vs_in_process']:.3f}x in-process); CPU {r['cpu_us_per_step']:,.0f} us/step "
              f"({r['cpu_ratio_vs_in_process']:.3f}x); run-queue wait {r['runqueue_wait_us_per_step']:,.0f} us/step")
    return [write_rows(Path(out_dir) / "safety.csv", rows)]


if __name__ == "__main__":
    run(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("results/bench"))
