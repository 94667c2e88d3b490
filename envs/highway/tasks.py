"""The highway task table. Imports nothing from highway-env: the ids list without it,
and making one without it fails with ``pip install -e ".[highway]"``.

Every task has K = 4 costs ``(collision, speeding, headway, <comfort>)``; thresholds
and limits default per scenario (:mod:`constrained_grpo.envs.highway.options`) and are
constructor keywords, e.g. ``make_env("Highway/Highway-v0", speed_limit=25.0,
limits={"collision": 0.05})``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from constrained_grpo.envs.highway.options import SCENARIOS, HighwayOptions
from constrained_grpo.envs.registration import Binding, EpisodeReturns, EvalPlan, Family, TaskInfo

__all__ = ["HIGHWAY", "HIGHWAY_TASKS", "episode_returns"]

_ENV = "constrained_grpo.envs.highway.env:HighwayTaskEnv"
_VEC = "constrained_grpo.envs.highway.vector:HighwayVectorEnv"
#: The straight highway's vector env: the batched simulator (falls back to ``_VEC`` for
#: settings it does not cover, e.g. highway-env config overrides).
_BATCHED_VEC = "constrained_grpo.envs.highway.batched:make_highway_vector_env"


#: One step's reward per scenario under highway-env's reward settings with ``collision_reward
#: = 0`` (env.py): the straight highway's ``(0.1 lane + 0.4 speed) / 0.5`` (both terms in
#: [0, 1], normalised) times ``on_road``; the roundabout's ``(0.2 speed - 0.05 lane change) / 0.2``
#: times ``on_road``; the intersection's ``speed`` in [0, 1], or 1 on arrival, times ``on_road``
#: (not normalised). The merge's speed term is not clipped and its altruistic penalty sums over
#: the merging vehicles: no per-step bound.
_STEP_REWARD: dict[str, tuple[float, float]] = {"highway": (0.0, 1.0), "roundabout": (-0.25, 1.0), "intersection": (0.0, 1.0)}


def episode_returns(kwargs: Mapping[str, Any]) -> EpisodeReturns:
    """What one episode of the highway task with constructor ``kwargs`` can return: at most
    ``T`` steps of :data:`_STEP_REWARD`, ``T <= ceil(duration x policy_frequency)`` (one more
    when ``1 / policy_frequency`` is not a whole number of seconds: highway-env's clock sums it).
    Unbounded for the merge and for a ``config`` that changes highway-env's reward settings."""
    scenario = str(kwargs.get("scenario", "highway"))
    config = dict(kwargs.get("config") or {})
    changed = sorted(k for k in config if "reward" in str(k))
    if changed:
        return EpisodeReturns.unbounded(f"its config changes highway-env's reward settings {changed}")
    if scenario not in _STEP_REWARD:
        return EpisodeReturns.unbounded(f"highway-env's {scenario} reward has an unclipped speed term and a penalty "
                                        "summed over the merging vehicles")
    horizon = None
    try:  # highway-env's defaults give the duration (the read side runs without highway-env)
        from constrained_grpo.envs.highway.scenarios import SIMS

        defaults = SIMS[scenario].default_config()
        duration = float(config.get("duration", defaults["duration"]))
        frequency = int(config.get("policy_frequency", defaults["policy_frequency"]))
        horizon = math.ceil(round(duration * frequency, 9)) + (0 if frequency == 1 else 1)
    except ImportError:
        pass
    low, high = _STEP_REWARD[scenario]
    steps = f"at most {horizon} steps" if horizon is not None else "its steps"
    return EpisodeReturns((low, high), horizon=horizon,
                          rule=f"an episode of {steps} earns between {low:g} and {high:g} per step")


#: The highway family's facts. ``eval``: the straight highway evaluates on the batched
#: simulator (1,000 episodes of both policies in about 5 s), so the plan runs to 20,000 like
#: the gridworld's (10,175 episodes certify a collision rate at its limit 0.1 with 95% power);
#: the other scenarios step highway-env one episode at a time. The safe driver reads the
#: straight highway's observation only, so only those tasks run it. highway-env imports the
#: traffic's class from ``config["other_vehicles_type"]`` (``code_options``).
HIGHWAY = Family("highway", EvalPlan(power=0.95, cap=20_000, pilot=1_000), references=("ref-random",), extra="highway",
                 code_options=("config.other_vehicles_type",), episode_returns=episode_returns)
_STRAIGHT_REFERENCES = ("ref-random", "ref-safe-driver")
#: Binding on the straight highway: the unconstrained learners of both families (their
#: recorded runs) must break a limit; the scripted safe driver must keep every limit.
_STRAIGHT_BINDING = Binding(unconstrained=("ppo", "grpo"), keepers=("ref-safe-driver",))


def _task(name: str, scenario: str, action_mode: str, version: int = 0, binding: Binding | None = None,
          return_anchors: tuple[str, str] | None = None, **kwargs: Any) -> TaskInfo:
    options = HighwayOptions(scenario=scenario, action_mode=action_mode, **kwargs)
    actions = "meta-actions" if action_mode == "discrete" else "continuous throttle/steering"
    description = (
        f"{SCENARIOS[scenario].summary}; {actions}; costs {', '.join(options.cost_names)} "
        f"(speed limit {options.speed_limit:g} m/s"
        + (f", headway limit {options.headway_limit:g}" if "headway_limit" in kwargs else "")
        + (f", collision limit {options.collision_limit:g}" if "collision_limit" in kwargs else "") + ")"
    )
    return TaskInfo(
        f"Highway/{name}-v{version}",
        HIGHWAY,
        _ENV,
        {"scenario": scenario, "action_mode": action_mode, **kwargs},
        description,
        _BATCHED_VEC if scenario == "highway" else _VEC,
        references=_STRAIGHT_REFERENCES if scenario == "highway" and action_mode == "discrete" else None,
        batched_eval=scenario == "highway",
        binding=binding if binding is not None else (
            _STRAIGHT_BINDING if scenario == "highway" and action_mode == "discrete" else None),
        # The straight highway has no exact optimum: its returns are normalised between the
        # random driver (0) and the scripted safe driver (1), both run on every board.
        return_anchors=return_anchors if return_anchors is not None else (
            _STRAIGHT_REFERENCES if scenario == "highway" and action_mode == "discrete" else None),
    )


#: The highway-driving tasks: four scenarios, each with discrete and continuous actions, and
#: ``Highway-v1``, the standard preset's: ``Highway-v0`` with the headway limit at 0.2, which
#: the scripted safe driver keeps with a margin, where 0.1 is its own level (traffic cuts in;
#: docs/benchmark.md section 2).
HIGHWAY_TASKS: tuple[TaskInfo, ...] = (
    _task("Highway", "highway", "discrete"),
    _task("Highway", "highway", "discrete", version=1, headway_limit=0.2),
    # Highway-v2: the limits between the safe driver's levels and the unconstrained learners'
    # (on Highway-v1's committed runs, 10 seeds x 10,175 episodes: ref-safe-driver collision
    # 0.029, headway 0.094; ppo's slow policy 0.087-0.094 and 0.151-0.155, grpo 0.44 and 0.35),
    # so that it binds for every family. docs/benchmark.md section 2.
    _task("Highway", "highway", "discrete", version=2, headway_limit=0.13, collision_limit=0.05,
          binding=Binding(unconstrained=("ppo", "grpo"), keepers=("ref-safe-driver",), recorded_as="Highway/Highway-v1")),
    _task("HighwayContinuous", "highway", "continuous"),
    _task("Merge", "merge", "discrete"),
    _task("MergeContinuous", "merge", "continuous"),
    _task("Roundabout", "roundabout", "discrete"),
    _task("RoundaboutContinuous", "roundabout", "continuous"),
    _task("Intersection", "intersection", "discrete"),
    _task("IntersectionContinuous", "intersection", "continuous"),
)
