"""Options of the highway tasks: scenarios, cost thresholds and limits.

This module imports nothing from highway-env, so the task table, the constraints and
their limits can be read (and validated) without the simulator installed.

Costs (``K = 4``, in this order; ``f`` simulation frames per decision step,
``T = duration x policy_frequency`` the nominal number of steps of an episode):

``collision`` (indicator)
    1 at the step where the ego vehicle first collides, else 0. Its limit is the
    allowed collision probability per episode.
``speeding``
    ``(1 / (f T)) sum_frames 1[v > speed_limit]``: the episode's sum is the fraction of
    the nominal episode duration driven faster than ``speed_limit`` (m/s).
``headway``
    ``(1 / (f T)) sum_frames 1[gap < headway_time * max(v, 0)]``, with ``gap`` the
    bumper-to-bumper distance to the vehicle ahead in the ego's lane (the one
    highway-env's IDM follows): the fraction of the episode spent closer than a time
    headway of ``headway_time`` seconds.
one rule/comfort cost, ``comfort`` =
    ``lane_change``: 1 per step whose target lane switched to another lane of the same
    road (discrete meta-actions with lateral actions); the limit is a count per episode.
    ``offroad``: ``(1 / (f T)) sum_frames 1[ego off every lane]`` (continuous actions).
    ``hard_brake``: ``(1 / (f T)) sum_frames 1[a < -hard_brake_decel]``, the fraction of
    time braking harder than ``hard_brake_decel`` m/s^2 (the intersection, whose
    meta-actions are longitudinal only).
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from constrained_grpo.constraints import Constraint, override_limits

__all__ = [
    "ACTION_MODES",
    "COMFORT_COSTS",
    "DEFAULT_LIMITS",
    "SCENARIOS",
    "HighwayOptions",
    "ScenarioDefaults",
    "closest",
]

ACTION_MODES: tuple[str, ...] = ("discrete", "continuous")
COMFORT_COSTS: tuple[str, ...] = ("lane_change", "offroad", "hard_brake")


@dataclass(frozen=True)
class ScenarioDefaults:
    """Per-scenario defaults.

    Attributes:
        base_env: the highway-env id whose settings (and trajectories) the task reproduces.
        speed_limit: the ``speeding`` threshold, m/s, halfway between the two fastest target
            speeds of the meta-actions: the fastest one speeds, the next one does not (a
            threshold *at* a target speed would flag the slow approach to it from above).
        lane_change_limit: allowed lane changes per episode (``lane_change`` cost).
        discrete_comfort: the rule/comfort cost with discrete meta-actions.
        summary: one line for the task table.
    """

    base_env: str
    speed_limit: float
    lane_change_limit: float
    discrete_comfort: str
    summary: str


#: The scenarios; discrete meta-action target speeds are highway-env's (m/s).
SCENARIOS: dict[str, ScenarioDefaults] = {
    "highway": ScenarioDefaults(
        "highway-fast-v0", 27.5, 3.0, "lane_change",
        "3-lane highway, 20 vehicles, 30 s; target speeds 20/25/30 m/s",
    ),
    "merge": ScenarioDefaults(
        "merge-v1", 27.5, 2.0, "lane_change",
        "2-lane highway with an on-ramp, up to 20 s; target speeds 20/25/30 m/s",
    ),
    "roundabout": ScenarioDefaults(
        "roundabout-v1", 12.0, 2.0, "lane_change",
        "2-lane roundabout, take the north exit, 11 s; target speeds 0/8/16 m/s",
    ),
    "intersection": ScenarioDefaults(
        "intersection-v2", 7.0, 2.0, "hard_brake",
        "4-way intersection, turn left, 13 s; longitudinal meta-actions 0/4.5/9 m/s",
    ),
}

#: Default limits; ``lane_change``'s is per scenario (``ScenarioDefaults.lane_change_limit``).
DEFAULT_LIMITS: dict[str, float] = {
    "collision": 0.1,
    "speeding": 0.1,
    "headway": 0.1,
    "offroad": 0.05,
    "hard_brake": 0.05,
}


def closest(name: str, choices: Sequence[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest choice, or an empty string."""
    match = difflib.get_close_matches(str(name), list(choices), n=1)
    return f" (did you mean {match[0]!r}?)" if match else ""


def _threshold(name: str, value: Any, unit: str, example: str) -> float:
    try:
        x = float(value)
    except (TypeError, ValueError):
        x = math.nan
    if isinstance(value, bool) or not math.isfinite(x) or x < 0:
        raise ValueError(f"{name} must be a finite number >= 0 ({unit}), got {value!r}; e.g. {name}={example}")
    return x


@dataclass(frozen=True)
class HighwayOptions:
    """The task keywords of ``HighwayTaskEnv`` (all of them but ``render_mode``), validated.

    ``speed_limit`` and ``comfort`` left as None take the scenario's defaults;
    ``headway_limit`` and ``collision_limit`` are the task's declared ``headway`` and
    ``collision`` limits (0.1 and 0.1; headway 0.2 on ``Highway/Highway-v1``, 0.13 and 0.05
    on ``Highway/Highway-v2``), which ``limits`` overrides like any other; ``config`` holds
    highway-env config overrides, checked against highway-env's keys when the simulator
    is built.
    """

    scenario: str = "highway"
    action_mode: str = "discrete"
    comfort: str | None = None
    speed_limit: float | None = None
    headway_time: float = 1.0
    hard_brake_decel: float = 4.0
    headway_limit: float = DEFAULT_LIMITS["headway"]
    collision_limit: float = DEFAULT_LIMITS["collision"]
    limits: Mapping[str, float] | Sequence[float] | None = None
    config: Mapping[str, Any] = field(default_factory=dict)
    fast: bool = True

    def __post_init__(self) -> None:
        if self.scenario not in SCENARIOS:
            raise ValueError(
                f"unknown scenario {self.scenario!r}{closest(self.scenario, SCENARIOS)}; "
                f"choose one of {list(SCENARIOS)}"
            )
        if self.action_mode not in ACTION_MODES:
            raise ValueError(
                f"unknown action_mode {self.action_mode!r}{closest(self.action_mode, ACTION_MODES)}; "
                f"choose one of {list(ACTION_MODES)}"
            )
        defaults = SCENARIOS[self.scenario]
        comfort = self.comfort
        if comfort is None:
            comfort = defaults.discrete_comfort if self.action_mode == "discrete" else "offroad"
        if comfort not in COMFORT_COSTS:
            raise ValueError(
                f"unknown comfort cost {comfort!r}{closest(comfort, COMFORT_COSTS)}; choose one of {list(COMFORT_COSTS)}"
            )
        if comfort == "lane_change" and (self.action_mode != "discrete" or self.scenario == "intersection"):
            raise ValueError(
                f"comfort='lane_change' needs discrete meta-actions with lane changes, but scenario="
                f"{self.scenario!r} with action_mode={self.action_mode!r} has none; use 'offroad' "
                "(continuous) or 'hard_brake'"
            )
        object.__setattr__(self, "comfort", comfort)
        speed = defaults.speed_limit if self.speed_limit is None else self.speed_limit
        object.__setattr__(self, "speed_limit", _threshold("speed_limit", speed, "m/s", "25.0"))
        object.__setattr__(self, "headway_time", _threshold("headway_time", self.headway_time, "s", "1.0"))
        object.__setattr__(
            self, "hard_brake_decel", _threshold("hard_brake_decel", self.hard_brake_decel, "m/s^2", "4.0")
        )
        object.__setattr__(
            self, "headway_limit", _threshold("headway_limit", self.headway_limit, "fraction of the episode", "0.2")
        )
        object.__setattr__(
            self, "collision_limit", _threshold("collision_limit", self.collision_limit, "collision rate", "0.05")
        )
        if self.config is None:
            object.__setattr__(self, "config", {})
        if not isinstance(self.config, Mapping):
            raise TypeError(f"config must be a mapping of highway-env config keys, got {type(self.config).__name__}")
        object.__setattr__(self, "config", dict(self.config))
        if not isinstance(self.fast, bool):
            raise TypeError(f"fast must be a bool, got {self.fast!r}")
        self.constraints  # validates the limits now rather than at the first reset

    @property
    def cost_names(self) -> tuple[str, ...]:
        return ("collision", "speeding", "headway", str(self.comfort))

    @property
    def constraints(self) -> tuple[Constraint, ...]:
        """The task's constraints, with the user's ``limits`` applied."""
        lane_change_limit = SCENARIOS[self.scenario].lane_change_limit
        declared = (
            Constraint("collision", self.collision_limit, "the ego vehicle collides (at most once per episode)", True),
            Constraint(
                "speeding",
                DEFAULT_LIMITS["speeding"],
                f"fraction of the nominal episode duration driven above {self.speed_limit:g} m/s",
            ),
            Constraint(
                "headway",
                self.headway_limit,
                f"fraction of the nominal episode duration with a time headway below {self.headway_time:g} s",
            ),
        )
        comfort = {
            "lane_change": Constraint("lane_change", lane_change_limit, "lane changes per episode"),
            "offroad": Constraint("offroad", DEFAULT_LIMITS["offroad"], "fraction of the nominal episode duration off the road"),
            "hard_brake": Constraint(
                "hard_brake",
                DEFAULT_LIMITS["hard_brake"],
                f"fraction of the nominal episode duration braking harder than {self.hard_brake_decel:g} m/s^2",
            ),
        }[str(self.comfort)]
        return override_limits((*declared, comfort), self.limits)
