"""Short training runs: learning happens; the acceptance criterion (``eval.metrics``) and the
benchmark helpers work end to end."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import constrained_grpo
from constrained_grpo.eval.scoring.metrics import first_time_criterion_met, optimum_return, tail_summary

TINY = "Grid/HazardFuel3x3-v0"  # optimum 1.2; hazard limit 0.2, fuel 4.4


def test_cgrpo_learns_on_the_3x3_grid() -> None:
    """From a uniform policy (return ~0.75, hazard ~0.8) to the safe gem route."""
    agent = constrained_grpo.make_agent("cgrpo", TINY, seed=0, preset="quick")
    records: list[dict[str, Any]] = []
    agent.learn(40_000, records.append)
    first, last = records[:5], records[-len(records) // 5:]
    ret0 = np.mean([r["ep_return"] for r in first])
    ret1 = np.mean([r["ep_return"] for r in last])
    hazard0 = np.mean([r["ep_cost"][0] for r in first])
    hazard1 = np.mean([r["ep_cost"][0] for r in last])
    assert hazard0 > 0.5
    assert hazard1 <= 0.2, f"hazard rate {hazard1:.3f} did not fall under its limit 0.2"
    assert ret1 > ret0 + 0.2, f"return did not rise: {ret0:.3f} -> {ret1:.3f}"
    assert agent.multipliers[0] >= 0 and agent.multipliers[1] > 0  # fuel is violated by the gem route


def records_from(rows: list[tuple[float, float, float]]) -> list[dict[str, Any]]:
    return [
        {"iteration": i + 1, "env_steps": 100 * (i + 1), "wall_s": float(i + 1), "ep_return": r, "ep_cost": [h, f],
         "multipliers": [0.1, 0.2]}
        for i, (r, h, f) in enumerate(rows)
    ]


def test_tail_summary_criterion() -> None:
    limits, optimum = [0.1, 12.0], 1.1333
    # last 20% = last 2 of 10 iterations
    good = records_from([(0.5, 0.9, 30.0)] * 8 + [(1.05, 0.105, 13.0), (1.10, 0.10, 12.0)])
    s = tail_summary(good, limits, optimum)
    assert s.passed and s.within_limits and s.return_ok
    assert s.ep_return == pytest.approx(1.075)
    assert s.ep_cost == pytest.approx((0.1025, 12.5))
    too_costly = records_from([(1.1, 0.2, 12.0)] * 10)
    assert not tail_summary(too_costly, limits, optimum).passed
    too_poor = records_from([(1.0, 0.0, 9.0)] * 10)  # 1.0 < 1.1333 * 0.9
    s = tail_summary(too_poor, limits, optimum)
    assert s.within_limits and not s.return_ok and not s.passed
    assert tail_summary(too_poor, limits, None).return_ok is None


def test_first_time_criterion_met() -> None:
    rows = [(0.5, 0.9, 30.0)] * 5 + [(1.1, 0.05, 12.0)] * 5
    hit = first_time_criterion_met(records_from(rows), [0.1, 12.0], 1.1333, window=3)
    assert hit == {"iteration": 8, "env_steps": 800, "wall_s": 8.0}
    assert first_time_criterion_met(records_from(rows[:5]), [0.1, 12.0], 1.1333, window=3) is None


def test_tail_is_rounded_up() -> None:
    """The tail of 7 iterations is ceil(1.4) = 2 of them (the one tail rule of eval.metrics):
    returns (1.0, 1.1) average 1.05 >= 0.9 R*; the last iteration alone would pass too, but
    the one before it (hazard 0.3) breaks the limit on average: (0.3 + 0.0) / 2 > 0.11."""
    rows = [(0.5, 0.9, 30.0)] * 5 + [(1.0, 0.3, 12.0), (1.1, 0.0, 12.0)]
    s = tail_summary(records_from(rows), [0.1, 12.0], 1.1333)
    assert s.ep_return == pytest.approx(1.05) and s.ep_cost == pytest.approx((0.15, 12.0))
    assert s.multipliers == pytest.approx((0.1, 0.2)) and s.num_iterations == 7
    assert not s.within_limits and not s.passed
    with pytest.raises(ValueError, match="no iterations"):
        tail_summary([], [0.1, 12.0], 1.1333)


def test_optimum_return_of_an_agent() -> None:
    """R* of the 3x3 grid under its own limits is 1.2; under other limits there is no exact reference."""
    agent = constrained_grpo.make_agent("cgrpo", TINY, seed=0, preset="quick")
    assert optimum_return(agent) == pytest.approx(1.2)
    other = constrained_grpo.make_agent("cgrpo", TINY, seed=0, preset="quick", limits=[0.5, 4.4])
    assert optimum_return(other) is None


def test_speed_benchmark_smoke(tmp_path: Path) -> None:
    from constrained_grpo.eval.bench import grpo as speed_grpo

    rows = speed_grpo.bench_algo("cgrpo", env_id=TINY, budget=500)
    kinds = {r["kind"]: r for r in rows}
    assert set(kinds) == {"criterion", "split"}
    split = kinds["split"]
    assert split["rollout_ms"] > 0 and split["backward_ms"] > 0
    assert 0 <= split["advantage_share"] < 1


def test_training_benchmark_children() -> None:
    """``make bench``'s training.csv: one throughput measurement and one criterion run, in process."""
    from constrained_grpo.eval.bench import training as speed_training

    small = {"n_envs": 4, "n_steps": 8, "batch_size": 32}
    row = speed_training.child_throughput("ppo-lag", TINY, 40, False, 0, small)
    assert row["env_steps"] == 64  # 40 steps round up to two rollouts of 4 x 8
    import resource

    # In process, the peak RSS is this test process's so far (a bench child starts fresh).
    assert row["num_envs"] == 4 and 0 < row["peak_rss_mb"] <= resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 + 1
    assert row["env_steps_per_cpu_s"] == pytest.approx(64 / row["cpu_s"], rel=0.05)
    # The 3x3 grid's optimum is 1.2 (R*); cgrpo's quick preset meets the criterion within 100k
    # steps (about 30k with seed 0), and the run stops at the end of that chunk.
    done = speed_training.child_criterion("cgrpo", TINY, 0, 100_000, {"preset": "quick"}, chunk=10_000)
    assert done["reached"] and done["optimum_return"] == pytest.approx(1.2)
    assert done["criterion_env_steps"] <= done["run_env_steps"] < done["criterion_env_steps"] + 10_000 + 1_000
    capped = speed_training.child_criterion("ppo-lag", TINY, 0, 64, small, chunk=10_000)
    assert not capped["reached"] and capped["criterion_env_steps"] is None and capped["run_env_steps"] == 64
    # training_run.csv: a whole run timed over its first window and the rest, whose steps add up.
    whole = speed_training.child_run("ppo-lag", TINY, 160, 40, 0, small)
    assert whole["first_env_steps"] == 64 and whole["env_steps"] == 160  # two rollouts, then three more
    assert whole["env_steps_per_cpu_s"] == pytest.approx(160 / whole["cpu_s"], rel=0.05)
    assert min(whole["first_env_steps_per_cpu_s"], whole["rest_env_steps_per_cpu_s"]) <= whole["env_steps_per_cpu_s"] \
        <= max(whole["first_env_steps_per_cpu_s"], whole["rest_env_steps_per_cpu_s"])


def test_benchmark_children_run_every_thread_pool_at_one_thread_as_sweep_workers_do(monkeypatch) -> None:
    """A child measures what a sweep worker runs: OpenMP, MKL and OpenBLAS at one thread unless
    the caller set a count (an OpenBLAS pool per core spins beside the run and bills its CPU time)."""
    from constrained_grpo.eval.bench import training as speed_training
    from constrained_grpo.eval.sweep import one_thread_env

    assert one_thread_env({"OPENBLAS_NUM_THREADS": "4", "HOME": "/h"}) == {
        "OPENBLAS_NUM_THREADS": "4", "HOME": "/h", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    seen = {}

    def fake_run(cmd, **kw):
        seen.update(kw["env"])
        return subprocess.CompletedProcess(cmd, 0, json.dumps({"ok": 1}) + "\n", "")

    pools = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
    for var in pools:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(speed_training.subprocess, "run", fake_run)
    assert speed_training._in_child("throughput", algo="ppo") == {"ok": 1}
    assert [seen[v] for v in pools] == ["1", "1", "1"]
