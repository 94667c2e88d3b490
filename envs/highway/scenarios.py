"""The simulators behind the highway tasks: highway-env's scenario envs, subclassed.

Each class below is highway-env's own scenario (``highway-fast-v0``, ``merge-v1``,
``roundabout-v1``, ``intersection-v2``: the last three with highway-env 1.12's
connected-lane neighbour search, its recommended versions) plus three changes:

* the traffic is :class:`~.fast.TrafficIDMVehicle`: highway-env's ``IDMVehicle`` with
  its constants pinned (highway-env's intersection overwrites them on the class);
* with ``fast=True`` the road, its lanes and the kinematics observation are switched
  to their twins from :mod:`.fast` right after highway-env builds them, and the traffic
  to :class:`~.fast.FastIDMVehicle` (same results, tested);
* ``_simulate`` calls ``frame_hook()`` after every simulation frame, so the task can
  measure its costs at the simulation rate, not only at decision steps;
* the merge gets a time limit (``duration``, s), which highway-env's merge lacks;
* the reward terms see no meta-action under continuous actions (highway-env's merge
  and roundabout would compare the action array with ``[0, 2]`` and fail).

Nothing else changes: the vehicles, their behaviour and the random draws are
highway-env's, so a seeded episode follows the same trajectory with or without ``fast``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from highway_env import utils
from highway_env.envs.common.action import DiscreteMetaAction
from highway_env.envs.highway_env import HighwayEnvFast
from highway_env.envs.intersection_env import ConnectedLaneIntersectionEnv
from highway_env.envs.merge_env import ConnectedLaneMergeEnv
from highway_env.envs.roundabout_env import ConnectedLaneRoundaboutEnv

from constrained_grpo.envs.highway.fast import install_fast_observation, install_fast_road

__all__ = ["HighwaySim", "IntersectionSim", "MergeSim", "RoundaboutSim", "SIMS"]

_FAST = "constrained_grpo.envs.highway.fast."
_TRAFFIC = _FAST + "TrafficIDMVehicle"
_INTERSECTION_TRAFFIC = _FAST + "IntersectionIDMVehicle"
#: The traffic class of each default, with the scalar-clip decisions (``fast=True``).
_FAST_TRAFFIC = {_TRAFFIC: _FAST + "FastIDMVehicle", _INTERSECTION_TRAFFIC: _FAST + "FastIntersectionIDMVehicle"}


class _SimMixin:
    """Fast paths and the per-frame hook, shared by the four scenario sims."""

    #: Called after each simulation frame (set by the task env).
    frame_hook: Callable[[], None] | None = None

    def __init__(self, config: dict[str, Any] | None = None, render_mode: str | None = None, fast: bool = True):
        # Set before highway-env's __init__, which already builds a scene through reset().
        self.fast = bool(fast)
        config = dict(config or {})
        if fast:
            traffic = config.get("other_vehicles_type", self.default_config()["other_vehicles_type"])
            config["other_vehicles_type"] = _FAST_TRAFFIC.get(traffic, traffic)
        super().__init__(config=config, render_mode=render_mode)

    def _rewards(self, action: Any) -> dict[str, float]:
        # highway-env's merge and roundabout test `action in [0, 2]` (a lane-change
        # meta-action), which fails on a continuous action array: no meta-action there.
        return super()._rewards(action if isinstance(self.action_type, DiscreteMetaAction) else None)

    def _speed_up_road(self) -> None:
        if self.fast:
            install_fast_road(self.road)

    def define_spaces(self) -> None:
        super().define_spaces()
        if self.fast:
            install_fast_observation(self.observation_type)

    def _simulate(self, action: Any = None) -> None:
        """highway-env's ``AbstractEnv._simulate``, plus ``frame_hook()`` after each frame."""
        frames = int(self.config["simulation_frequency"] // self.config["policy_frequency"])
        for frame in range(frames):
            if action is not None and not self.config["manual_control"] and self.steps % frames == 0:
                self.action_type.act(action)
            self.road.act()
            self.road.step(1 / self.config["simulation_frequency"])
            self.steps += 1
            if self.frame_hook is not None:
                self.frame_hook()
            if frame < frames - 1:
                self._automatic_rendering()
        self.enable_auto_render = False


class HighwaySim(_SimMixin, HighwayEnvFast):
    """``highway-fast-v0``: 3 lanes, 20 vehicles, 5 Hz simulation, 30 s."""

    @classmethod
    def default_config(cls) -> dict:
        cfg = super().default_config()
        cfg["other_vehicles_type"] = _TRAFFIC
        return cfg

    def _create_road(self) -> None:
        super()._create_road()
        self._speed_up_road()


class MergeSim(_SimMixin, ConnectedLaneMergeEnv):
    """``merge-v1``: a two-lane highway with an on-ramp; ends past the ramp (x > 370 m)
    or, added here, after ``duration`` seconds."""

    @classmethod
    def default_config(cls) -> dict:
        cfg = super().default_config()
        utils.update_config(cfg, {"other_vehicles_type": _TRAFFIC, "duration": 20})
        return cfg

    def _make_road(self) -> None:
        super()._make_road()
        self._speed_up_road()

    def _is_truncated(self) -> bool:
        return self.time >= self.config["duration"]


class RoundaboutSim(_SimMixin, ConnectedLaneRoundaboutEnv):
    """``roundabout-v1``: enter a two-lane roundabout and take the north exit, 11 s."""

    @classmethod
    def default_config(cls) -> dict:
        cfg = super().default_config()
        cfg["other_vehicles_type"] = _TRAFFIC
        return cfg

    def _make_road(self) -> None:
        super()._make_road()
        self._speed_up_road()


class IntersectionSim(_SimMixin, ConnectedLaneIntersectionEnv):
    """``intersection-v2``: cross a four-way intersection (turn left to ``o1``), 13 s."""

    @classmethod
    def default_config(cls) -> dict:
        cfg = super().default_config()
        cfg["other_vehicles_type"] = _INTERSECTION_TRAFFIC
        return cfg

    def _make_road(self) -> None:
        super()._make_road()
        self._speed_up_road()


#: Scenario name -> simulator class.
SIMS: dict[str, type] = {
    "highway": HighwaySim,
    "merge": MergeSim,
    "roundabout": RoundaboutSim,
    "intersection": IntersectionSim,
}
