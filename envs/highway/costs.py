"""Measuring the highway costs, frame by frame (definitions in :mod:`.options`).

:class:`CostMonitor` is told about every simulation frame (``on_frame``) and every
decision step (``begin_step`` / ``end_step``); the step's cost vector is the frame
violations divided by ``f T`` (``f`` frames per step, ``T`` nominal steps per episode),
plus the collision indicator and the lane-change count.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from highway_env.road.road import LaneIndex, Road
from highway_env.vehicle.objects import RoadObject

from constrained_grpo.envs.highway.fast import lanes_with_offsets
from constrained_grpo.envs.highway.options import HighwayOptions

__all__ = ["CostMonitor", "front_gap", "is_headway_violation"]


def _s_on(road: Road, lane_index: LaneIndex, obj: RoadObject) -> float | None:
    """``s`` of ``obj`` in the frame of ``lane_index``, by ``Road.neighbour_vehicles``' rule:
    the first searched lane the object lies on (margin 1 m), plus that lane's offset."""
    for lane, offset in lanes_with_offsets(road, lane_index):
        s, r = lane.local_coordinates(obj.position)
        if lane.on_lane(obj.position, s, r, margin=1):
            return s + offset
    return None


def front_gap(road: Road, vehicle: RoadObject) -> tuple[RoadObject | None, float]:
    """The vehicle ahead in ``vehicle``'s lane (as highway-env's IDM sees it) and the
    bumper-to-bumper gap ``s_front - s_ego - (L_ego + L_front) / 2`` (m); ``inf`` if none."""
    lane_index = vehicle.lane_index
    if not lane_index:
        return None, math.inf
    front, _ = road.neighbour_vehicles(vehicle, lane_index)
    if front is None:
        return None, math.inf
    s_front = _s_on(road, lane_index, front)
    if s_front is None:  # cannot happen for a vehicle the search returned; be safe
        return None, math.inf
    s_ego = road.network.get_lane(lane_index).local_coordinates(vehicle.position)[0]
    return front, float(s_front - s_ego - (vehicle.LENGTH + front.LENGTH) / 2)


def is_headway_violation(gap: float, speed: float, headway_time: float) -> bool:
    """``gap < headway_time * max(speed, 0)``: closer than ``headway_time`` seconds of travel.

    Written as a product so that a stopped vehicle (``speed <= 0``) violates only when
    overlapping, and ``headway_time = 0`` disables the cost.

    >>> is_headway_violation(gap=20.0, speed=25.0, headway_time=1.0)   # 0.8 s
    True
    >>> is_headway_violation(gap=30.0, speed=25.0, headway_time=1.0)   # 1.2 s
    False
    """
    return gap < headway_time * max(speed, 0.0)


class CostMonitor:
    """Accumulates one decision step's violations of a highway task, frame by frame.

    Usage per step: ``begin_step(ego)``, then the simulator calls ``on_frame()`` after
    each frame, then ``end_step()`` returns the step's float64 cost vector ``(K,)``.
    """

    def __init__(self, options: HighwayOptions, sim: Any):
        self.options = options
        self.sim = sim
        self.names = options.cost_names
        self._comfort = options.comfort
        self.reset()

    @property
    def frames_per_step(self) -> int:
        cfg = self.sim.config
        return int(cfg["simulation_frequency"] // cfg["policy_frequency"])

    @property
    def nominal_steps(self) -> float:
        """``T``: the episode's time limit in decision steps."""
        cfg = self.sim.config
        return max(float(cfg["duration"]) * float(cfg["policy_frequency"]), 1.0)

    def reset(self) -> None:
        """A new episode."""
        self._collided = False
        self._begin_step()

    def _begin_step(self) -> None:
        self._frames = 0
        self._speeding = 0
        self._headway = 0
        self._comfort_frames = 0
        self._min_headway = math.inf
        self._target = None

    def begin_step(self) -> None:
        self._begin_step()
        ego = self.sim.vehicle
        self._target = getattr(ego, "target_lane_index", None)

    def on_frame(self) -> None:
        """Record the violations of the frame just simulated."""
        ego, road, o = self.sim.vehicle, self.sim.road, self.options
        self._frames += 1
        speed = float(ego.speed)
        self._speeding += speed > o.speed_limit
        _, gap = front_gap(road, ego)
        if gap < math.inf:
            self._headway += is_headway_violation(gap, speed, o.headway_time)
            if speed > 0:
                self._min_headway = min(self._min_headway, gap / speed)
        if self._comfort == "offroad":
            self._comfort_frames += not ego.on_road
        elif self._comfort == "hard_brake":
            self._comfort_frames += float(ego.action.get("acceleration", 0.0)) < -o.hard_brake_decel

    def end_step(self) -> np.ndarray:
        """The cost vector of the step just taken, in the order of ``options.cost_names``."""
        ego = self.sim.vehicle
        scale = 1.0 / (self.frames_per_step * self.nominal_steps)
        collision = 0.0
        if ego.crashed and not self._collided:
            self._collided = True
            collision = 1.0
        if self._comfort == "lane_change":
            before, after = self._target, getattr(ego, "target_lane_index", None)
            comfort = float(
                before is not None and after is not None and before[:2] == after[:2] and before[2] != after[2]
            )
        else:
            comfort = self._comfort_frames * scale
        return np.array([collision, self._speeding * scale, self._headway * scale, comfort], dtype=np.float64)

    @property
    def min_time_headway(self) -> float:
        """The smallest time headway ``gap / v`` seen during the last step (s; inf if none)."""
        return self._min_headway
