"""Scripted highway policies: the safe driver, the ``ref-safe-driver`` reference.

The safe driver keeps its lane and a safe time headway, a rule on the kinematics
observation alone (no simulator access), so it runs on ``Highway/Highway-v0`` and on the
batched vector env (observations ``(B, V*F)``) alike. Per decision, with ``v`` the ego's
speed and ``gap`` the bumper-to-bumper distance to the nearest vehicle ahead in its lane
(``dx - L``, ``L = 5`` m the vehicle length; ``inf`` when none is observed), the time
headway is ``h = gap / max(v, 1)`` and the action::

    SLOWER  if h < slow_below  or  (the leader is slower and h < fast_above)
    FASTER  if h > fast_above  and  v < cruise_speed - 1
    SLOWER  if v > cruise_speed + 1
    IDLE    otherwise

It never changes lanes, so its ``lane_change`` cost is 0, and with ``cruise_speed`` below
the task's speed limit it does not speed. Its headway rule holds ``h`` above the task's
1 s threshold except when traffic cuts in, which a lane-keeping driver cannot avoid.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["HIGHWAY_ACTIONS", "SafeDriver", "make_safe_driver"]

#: highway-env's DiscreteMetaAction indices (``ACTIONS_ALL``), which the discrete tasks use.
HIGHWAY_ACTIONS: dict[str, int] = {"LANE_LEFT": 0, "IDLE": 1, "LANE_RIGHT": 2, "FASTER": 3, "SLOWER": 4}
#: The features the rule reads, in the tasks' default order, and their normalisation ranges.
_FEATURES: tuple[str, ...] = ("presence", "x", "y", "vx", "vy")
_RANGES: dict[str, float] = {"x": 200.0, "y": 12.0, "vx": 80.0}
_VEHICLE_LENGTH = 5.0
_SAME_LANE_M = 2.0  # half a lane width: within it a vehicle is in the ego's lane


class SafeDriver:
    """Keep lane, keep a safe headway (module docstring); callable on one or a batch of observations.

    Args:
        vehicles: vehicles per observation (the ego first), 5 on the highway tasks.
        slow_below: brake when the time headway is below this (s).
        fast_above: accelerate only when the time headway is above this (s).
        cruise_speed: the speed it settles at (m/s); highway-env's target speeds are 20, 25, 30.
    """

    def __init__(self, vehicles: int = 5, slow_below: float = 2.0, fast_above: float = 3.0, cruise_speed: float = 25.0):
        if not (isinstance(vehicles, int) and vehicles >= 2):
            raise ValueError(f"vehicles={vehicles!r} must be an integer >= 2 (the ego and at least one other)")
        if not (0 < slow_below < fast_above):
            raise ValueError(f"need 0 < slow_below < fast_above, got slow_below={slow_below!r}, fast_above={fast_above!r}")
        if not (np.isfinite(cruise_speed) and cruise_speed > 0):
            raise ValueError(f"cruise_speed={cruise_speed!r} must be finite and > 0 (m/s)")
        self.vehicles, self.slow_below, self.fast_above, self.cruise_speed = vehicles, slow_below, fast_above, cruise_speed

    def actions(self, obs: np.ndarray) -> np.ndarray:
        """Actions (int64) of a batch ``(B, V*F)`` of normalised, relative kinematics observations."""
        o = np.asarray(obs, dtype=np.float64)
        if o.ndim != 2 or o.shape[1] != self.vehicles * len(_FEATURES):
            raise ValueError(
                f"observations of shape {o.shape}; the safe driver reads (B, {self.vehicles * len(_FEATURES)}): "
                f"{self.vehicles} vehicles x features {list(_FEATURES)}"
            )
        o = o.reshape(len(o), self.vehicles, len(_FEATURES))
        v = o[:, 0, 3] * _RANGES["vx"]
        others = o[:, 1:]
        dx, dy, dvx = others[..., 1] * _RANGES["x"], others[..., 2] * _RANGES["y"], others[..., 3] * _RANGES["vx"]
        ahead = (others[..., 0] > 0.5) & (np.abs(dy) < _SAME_LANE_M) & (dx > 0)
        gaps = np.where(ahead, dx - _VEHICLE_LENGTH, np.inf)
        lead = np.argmin(gaps, axis=1)
        gap = gaps[np.arange(len(o)), lead]
        closing = np.isfinite(gap) & (dvx[np.arange(len(o)), lead] < 0)
        h = gap / np.maximum(v, 1.0)
        act = np.full(len(o), HIGHWAY_ACTIONS["IDLE"], dtype=np.int64)
        act[v > self.cruise_speed + 1] = HIGHWAY_ACTIONS["SLOWER"]
        act[(h > self.fast_above) & (v < self.cruise_speed - 1)] = HIGHWAY_ACTIONS["FASTER"]
        act[(h < self.slow_below) | (closing & (h < self.fast_above))] = HIGHWAY_ACTIONS["SLOWER"]
        return act

    def __call__(self, obs: np.ndarray, deterministic: bool = True) -> Any:
        """One action (an ``int``) for one observation, a batch of actions for a batch."""
        o = np.asarray(obs)
        if o.ndim == 1:
            return int(self.actions(o[None])[0])
        return self.actions(o)


def make_safe_driver(env: Any) -> Callable[[np.ndarray, bool], Any]:
    """The safe driver for ``env`` (a discrete highway task, single or vector), checked
    against its observation layout and actions; a one-line error otherwise."""
    from gymnasium import spaces

    unwrapped = getattr(env, "unwrapped", env)
    space = getattr(env, "single_action_space", env.action_space)
    if not isinstance(space, spaces.Discrete) or space.n != len(HIGHWAY_ACTIONS):
        raise ValueError(
            f"the safe driver takes highway-env's {len(HIGHWAY_ACTIONS)} meta-actions; this task's action space is "
            f"{space}; use a discrete highway task such as Highway/Highway-v0"
        )
    obs_type = getattr(getattr(unwrapped, "sim", None), "observation_type", None)
    vehicles = 5
    if obs_type is not None:
        ranges = obs_type.features_range or {}
        layout_ok = (
            tuple(obs_type.features) == _FEATURES and obs_type.normalize and not obs_type.absolute
            and all(tuple(ranges.get(k, ())) == (-r, r) for k, r in _RANGES.items())
        )
        if not layout_ok:
            raise ValueError(
                f"the safe driver reads relative, normalised features {list(_FEATURES)} with ranges +-{_RANGES}; "
                "this task's observation config differs: drop the observation override"
            )
        vehicles = int(obs_type.vehicles_count)
    else:
        obs_space = getattr(env, "single_observation_space", env.observation_space)
        vehicles = int(np.prod(obs_space.shape)) // len(_FEATURES)
    return SafeDriver(vehicles)
