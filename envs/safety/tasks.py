"""The Safety-Gymnasium task table: ``Safety/<Task>-vN`` runs ``Safety<Task>-vN`` through the bridge.

Imports nothing heavy: listing these ids needs neither the bridge nor the second Python
environment; making one starts a worker in it (``make safety`` builds it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from constrained_grpo.envs.registration import EpisodeReturns, EvalPlan, Family, TaskInfo

__all__ = ["SAFETY", "SAFETY_TASKS", "SAFETY_MAKER"]

#: The Safety-Gymnasium family's facts: episodes of 1,000 steps through a worker process in
#: a second Python, so evaluation is 20 episodes per policy (the costs are cumulative: the
#: t bound needs no minimum). The envs need ``make safety``, not a pip extra. The worker's
#: interpreter, import path, maker and legacy id name code to run (``code_options``).
def episode_returns(kwargs: Mapping[str, Any]) -> EpisodeReturns:
    """Declared unbounded: Safety-Gymnasium's rewards (progress to a goal, forward velocity)
    have no per-step bound that its tasks declare, and the bridge adds none."""
    return EpisodeReturns.unbounded("Safety-Gymnasium declares no bound on its tasks' per-step rewards")


SAFETY = Family("safety", EvalPlan(power=0.95, cap=20, pilot=20),
                code_options=("python", "pythonpath", "maker", "legacy_id"), episode_returns=episode_returns)

_ENV = "constrained_grpo.envs.safety.env:LegacyBridgeEnv"
_VEC = "constrained_grpo.envs.safety.env:LegacyBridgeVectorEnv"
#: How the worker makes a Safety-Gymnasium env (its own registry, not gymnasium's).
SAFETY_MAKER = "safety_gymnasium:make"

_NAV_COST = "Safety-Gymnasium's cost_sum: contacts with hazards, vases, pillars, gremlins or wrong buttons"
_VEL_COST = "Safety-Gymnasium's velocity cost: 1 for each step above the agent's velocity threshold"

_NAV = {
    "Goal": "reach goals in turn, avoiding hazards and vases",
    "Button": "press the goal button, avoiding hazards, gremlins and wrong buttons",
    "Push": "push a box to the goal, avoiding hazards and pillars",
    "Circle": "run in a circle, staying inside the boundaries",
}
_ROBOTS = {"Point": "point robot (2 actions)", "Car": "car robot (2 actions)"}
_VELOCITY = ("Ant", "HalfCheetah", "Hopper", "Humanoid", "Swimmer", "Walker2d")


def _safety(task: str, version: int, description: str, cost_description: str) -> TaskInfo:
    kwargs = {
        "legacy_id": f"Safety{task}-v{version}",
        "maker": SAFETY_MAKER,
        "cost_names": ("cost",),
        "cost_descriptions": (cost_description,),
    }
    return TaskInfo(f"Safety/{task}-v{version}", SAFETY, _ENV, kwargs, description, _VEC)


#: Navigation tasks (levels 1 and 2) and velocity tasks (v1), as in OmniSafe's benchmarks.
SAFETY_TASKS: tuple[TaskInfo, ...] = tuple(
    _safety(f"{robot}{task}{level}", 0, f"{what}; {who}, level {level}; cost limit 25", _NAV_COST)
    for task, what in _NAV.items()
    for level in (1, 2)
    for robot, who in _ROBOTS.items()
) + tuple(
    _safety(f"{body}Velocity", 1, f"MuJoCo {body} run forward under a velocity limit; cost limit 25", _VEL_COST)
    for body in _VELOCITY
)
