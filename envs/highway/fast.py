"""Fast paths for highway-env's hot spots, each returning what highway-env returns.

Under a profiler, a step of ``highway-fast-v0`` spends its time in ``Road.neighbour_vehicles``
(every other vehicle's IDM/MOBIL asks for the vehicles ahead and behind, ~25 times a
frame, each a loop of ``lane.local_coordinates`` calls), in ``KinematicObservation.observe``
(pandas), in scalar ``np.clip``/``np.dot`` calls of the vehicle models, and, on roads with
many lanes, in ``RoadNetwork.get_closest_lane_index`` and the intersection's rule checks.
Each is replaced by a subclass (installed on highway-env's objects by the scenario sims):

* :func:`lane_coordinates`: ``lane.local_coordinates`` for many positions at once, with
  highway-env's floating-point operations in its order (straight, sine and circular
  lanes; other lane types use their own method);
* :class:`FastRoad` / :class:`FastRegulatedRoad`: ``neighbour_vehicles`` from a snapshot
  taken at the start of ``Road.act()`` (while vehicles decide, nobody moves): per lane,
  the on-lane vehicles are sorted once by their coordinate ``s`` and each query is a
  binary search. Ties are broken as highway-env's loop breaks them: the front vehicle is
  the *last* in list order with the smallest ``s >= s_ego``, the rear one the *first*
  with the largest ``s < s_ego``. The regulated road also predicts each vehicle's path
  once per rule check instead of once per pair of vehicles;
* :class:`FastRoadNetwork`: the distance from a position to all lanes at once;
* :class:`FastStraightLane`: ``local_coordinates`` in float arithmetic, without two
  ``np.dot`` calls;
* :class:`FastKinematicObservation`: the kinematics features with numpy, no pandas;
* :class:`FastIDMVehicle`: highway-env's own IDM/MOBIL and steering functions (their
  code objects, not a copy of their source) with ``np.clip`` of scalars resolved to
  ``min(max(x, lo), hi)``, the same value without numpy's dispatch.

"The same" is bit-for-bit where ``np.dot`` of two 2-vectors is ``a0 b0 + a1 b1`` (no
fused multiply-add), as with x86-64 OpenBLAS here; the highway's lanes are axis-aligned,
where both are exact anyway. The tests compare coordinates to 1e-9 m and the discrete
results (neighbours, closest lanes, trajectories, observations) exactly, on seeded
rollouts (``tests/envs/test_highway_fast.py``).

:class:`TrafficIDMVehicle` is highway-env's ``IDMVehicle`` with its IDM constants pinned
on the class: highway-env's ``IntersectionEnv`` overwrites ``DISTANCE_WANTED`` and the
comfort accelerations *on the class* it is given, which would otherwise leak from an
intersection task into every later task of the process.
"""

from __future__ import annotations

import types
from bisect import bisect_left
from collections.abc import Callable
from typing import Any

import numpy as np
from highway_env import utils
from highway_env.envs.common.observation import KinematicObservation
from highway_env.road.lane import AbstractLane, CircularLane, SineLane, StraightLane
from highway_env.road.regulation import RegulatedRoad
from highway_env.road.road import LaneIndex, Road, RoadNetwork
from highway_env.vehicle.behavior import IDMVehicle
from highway_env.vehicle.controller import ControlledVehicle
from highway_env.vehicle.kinematics import Vehicle
from highway_env.vehicle.objects import Landmark, RoadObject

__all__ = [
    "FastKinematicObservation",
    "FastRegulatedRoad",
    "FastRoad",
    "FastRoadNetwork",
    "FastIDMVehicle",
    "FastIntersectionIDMVehicle",
    "FastStraightLane",
    "IntersectionIDMVehicle",
    "TrafficIDMVehicle",
    "close_objects",
    "install_fast_observation",
    "install_fast_road",
    "lane_coordinates",
    "lanes_with_offsets",
]



class FastStraightLane(StraightLane):
    """``StraightLane`` whose ``local_coordinates`` is float arithmetic:
    ``s = (x - x0) u_x + (y - y0) u_y``, ``r = (x - x0) n_x + (y - y0) n_y``, the operations
    of highway-env's ``np.dot`` on 2-vectors without its call overhead."""

    _frame: tuple[float, float, float, float, float, float] | None = None

    def local_coordinates(self, position: np.ndarray) -> tuple[float, float]:
        frame = self._frame
        if frame is None:  # the lane's geometry as Python floats, once
            frame = self._frame = (
                *map(float, self.start), *map(float, self.direction), *map(float, self.direction_lateral)
            )
        x0, y0, ux, uy, nx, ny = frame
        dx = float(position[0]) - x0
        dy = float(position[1]) - y0
        return dx * ux + dy * uy, dx * nx + dy * ny


# Lane types whose local_coordinates we vectorise (exact types: a subclass may override it).
_STRAIGHT_LANES = (StraightLane, FastStraightLane)
_CONSTANT_WIDTH_LANES = (StraightLane, FastStraightLane, SineLane, CircularLane)


def lane_coordinates(lane: AbstractLane, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(s_i, r_i) = lane.local_coordinates((x_i, y_i))`` for every ``i``, as float64 arrays.

    Straight lane from ``p0`` with unit direction ``u`` and lateral ``n``:
    ``s = (p - p0) . u``, ``r = (p - p0) . n``; a sine lane subtracts
    ``A sin(omega s + phi)`` from ``r``; a circular lane (centre ``c``, radius ``R``,
    start phase ``theta0``, direction ``d = +-1``) has
    ``s = d (theta0 + wrap(atan2(p - c) - theta0) - theta0) R`` and ``r = d (R - |p - c|)``.
    Each expression repeats highway-env's operations in its order (``np.dot`` of two
    2-vectors is ``a0 b0 + a1 b1``; ``np.linalg.norm`` is ``sqrt(a0 a0 + a1 a1)``),
    so the arrays equal the scalar results exactly.
    """
    kind = type(lane)
    if kind in _STRAIGHT_LANES or kind is SineLane:
        dx = x - lane.start[0]
        dy = y - lane.start[1]
        s = dx * lane.direction[0] + dy * lane.direction[1]
        r = dx * lane.direction_lateral[0] + dy * lane.direction_lateral[1]
        if kind is SineLane:
            r = r - lane.amplitude * np.sin(lane.pulsation * s + lane.phase)
        return s, r
    if kind is CircularLane:
        dx = x - lane.center[0]
        dy = y - lane.center[1]
        phi = np.arctan2(dy, dx)
        phi = lane.start_phase + (((phi - lane.start_phase) + np.pi) % (2 * np.pi) - np.pi)
        radius = np.sqrt(dx * dx + dy * dy)
        s = lane.direction * (phi - lane.start_phase) * lane.radius
        r = lane.direction * (lane.radius - radius)
        return s, r
    # Any other geometry (splines, ...): its own method, one position at a time.
    coords = [lane.local_coordinates(np.array([a, b])) for a, b in zip(x.tolist(), y.tolist())]
    out = np.array(coords, dtype=np.float64).reshape(-1, 2)
    return out[:, 0], out[:, 1]


def _on_lane(lane: AbstractLane, s: np.ndarray, r: np.ndarray, margin: float) -> np.ndarray:
    """Vectorised ``lane.on_lane(position, s, r, margin)``:
    ``|r| <= w(s)/2 + margin`` and ``-L_v <= s < length + L_v`` (``L_v = lane.VEHICLE_LENGTH``)."""
    if type(lane) in _CONSTANT_WIDTH_LANES:
        half = lane.width_at(0.0) / 2 + margin
        return (np.abs(r) <= half) & (-lane.VEHICLE_LENGTH <= s) & (s < lane.length + lane.VEHICLE_LENGTH)
    return np.array(
        [bool(lane.on_lane(None, si, ri, margin=margin)) for si, ri in zip(s.tolist(), r.tolist())], dtype=bool
    )


def lanes_with_offsets(road: Road, lane_index: LaneIndex) -> list[tuple[AbstractLane, float]]:
    """The lanes ``Road.neighbour_vehicles`` searches for ``lane_index``, with the offset that
    maps each lane's ``s`` into the frame of ``lane_index`` (highway-env 1.12's rule).

    Without ``neighbour_vehicles_connected_lanes`` it is ``[(lane, 0)]``; with it, the next
    lanes (offset ``+length`` of this lane) and the previous lanes (offset ``-their length``)
    follow, in the order highway-env tries them.
    """
    lane = road.network.get_lane(lane_index)
    out: list[tuple[AbstractLane, float]] = [(lane, 0)]
    if road.neighbour_vehicles_connected_lanes:
        _from, _to, _id = lane_index
        for next_lanes in road.network.graph.get(_to, {}).values():
            if _id < len(next_lanes):
                out.append((next_lanes[_id], lane.length))
            elif next_lanes:
                out.append((next_lanes[0], lane.length))
        for to_dict in road.network.graph.values():
            if _from in to_dict:
                prev_lanes = to_dict[_from]
                if _id < len(prev_lanes):
                    prev_lane = prev_lanes[_id]
                elif prev_lanes:
                    prev_lane = prev_lanes[0]
                else:
                    continue
                out.append((prev_lane, -prev_lane.length))
    return out


class _Snapshot:
    """Positions of a road's vehicles and objects at one instant, with per-lane orders.

    ``order(lane_index)`` gives the candidates of ``neighbour_vehicles`` on that lane:
    their effective ``s`` (sorted ascending, ties by *descending* list position) and the
    objects in that order, plus every item's ``s`` on the lane itself (for the query vehicle).
    """

    __slots__ = ("_orders", "index", "items", "road", "x", "y")

    def __init__(self, road: Road):
        # Same order as highway-env's loop (vehicles, then objects), without landmarks.
        self.items: list[RoadObject] = [o for o in road.vehicles + road.objects if not isinstance(o, Landmark)]
        self.index: dict[int, int] = {id(o): i for i, o in enumerate(self.items)}
        pos = np.array([o.position for o in self.items], dtype=np.float64).reshape(-1, 2)
        self.x, self.y = pos[:, 0], pos[:, 1]
        self.road = road
        self._orders: dict[LaneIndex, tuple[list[float], list[RoadObject], list[float]]] = {}

    def order(self, lane_index: LaneIndex) -> tuple[list[float], list[RoadObject], list[float]]:
        cached = self._orders.get(lane_index)
        if cached is not None:
            return cached
        n = len(self.items)
        s_eff = np.zeros(n)
        taken = np.zeros(n, dtype=bool)
        s_own: np.ndarray | None = None
        for lane, offset in lanes_with_offsets(self.road, lane_index):
            s, r = lane_coordinates(lane, self.x, self.y)
            if s_own is None:
                s_own = s
            # highway-env keeps the first lane of the list on which a vehicle lies.
            hit = _on_lane(lane, s, r, margin=1) & ~taken
            s_eff = np.where(hit, s + offset, s_eff)
            taken |= hit
        idx = np.flatnonzero(taken)
        keys = s_eff[idx]
        perm = np.lexsort((-idx, keys))  # by s ascending, then list position descending
        sorted_idx = idx[perm].tolist()
        result = (keys[perm].tolist(), [self.items[i] for i in sorted_idx], s_own.tolist())
        self._orders[lane_index] = result
        return result

    def neighbours(self, vehicle: RoadObject, lane_index: LaneIndex) -> tuple[RoadObject | None, RoadObject | None]:
        keys, objs, s_own = self.order(lane_index)
        i = self.index.get(id(vehicle))
        if i is not None and self.items[i] is vehicle:
            s = s_own[i]
        else:  # a vehicle that is not on the road (a prediction copy, say)
            s = self.road.network.get_lane(lane_index).local_coordinates(vehicle.position)[0]
        j = bisect_left(keys, s)
        front = rear = None
        for k in range(j, len(objs)):
            if objs[k] is not vehicle:
                front = objs[k]
                break
        for k in range(j - 1, -1, -1):
            if objs[k] is not vehicle:
                rear = objs[k]
                break
        return front, rear


class _LaneTable:
    """The lanes of a network in ``graph`` order, grouped by geometry, as arrays."""

    def __init__(self, network: RoadNetwork):
        self.indexes: list[LaneIndex] = []
        lanes: list[AbstractLane] = []
        for _from, to_dict in network.graph.items():
            for _to, ids in to_dict.items():
                for _id, lane in enumerate(ids):
                    self.indexes.append((_from, _to, _id))
                    lanes.append(lane)
        self.size = len(lanes)
        self.groups: list[tuple[type, np.ndarray, dict[str, np.ndarray]]] = []
        self.others: list[tuple[int, AbstractLane]] = []
        for kind in (StraightLane, SineLane, CircularLane):
            kinds = _STRAIGHT_LANES if kind is StraightLane else (kind,)
            members = [i for i, lane in enumerate(lanes) if type(lane) in kinds]
            if not members:
                continue
            ls = [lanes[i] for i in members]
            arrays = {"length": np.array([lane.length for lane in ls], dtype=np.float64)}
            if kind is CircularLane:
                arrays.update(
                    cx=np.array([lane.center[0] for lane in ls]),
                    cy=np.array([lane.center[1] for lane in ls]),
                    radius=np.array([lane.radius for lane in ls], dtype=np.float64),
                    start_phase=np.array([lane.start_phase for lane in ls], dtype=np.float64),
                    direction=np.array([lane.direction for lane in ls], dtype=np.float64),
                )
            else:
                arrays.update(
                    sx=np.array([lane.start[0] for lane in ls]),
                    sy=np.array([lane.start[1] for lane in ls]),
                    ux=np.array([lane.direction[0] for lane in ls]),
                    uy=np.array([lane.direction[1] for lane in ls]),
                    nx=np.array([lane.direction_lateral[0] for lane in ls]),
                    ny=np.array([lane.direction_lateral[1] for lane in ls]),
                    heading=np.array([lane.heading for lane in ls], dtype=np.float64),
                )
                if kind is SineLane:
                    arrays.update(
                        amplitude=np.array([lane.amplitude for lane in ls], dtype=np.float64),
                        pulsation=np.array([lane.pulsation for lane in ls], dtype=np.float64),
                        phase=np.array([lane.phase for lane in ls], dtype=np.float64),
                    )
            self.groups.append((kind, np.array(members), arrays))
        done = {i for _, members, _ in self.groups for i in members.tolist()}
        self.others = [(i, lanes[i]) for i in range(self.size) if i not in done]

    def distances(self, position: np.ndarray, heading: float | None) -> np.ndarray:
        """``lane.distance_with_heading(position, heading)`` for every lane, in ``graph`` order:
        ``|r| + max(s - length, 0) + max(0 - s, 0) (+ 1.0 |wrap(heading - heading_at(s))|)``."""
        out = np.empty(self.size)
        px, py = position[0], position[1]
        for kind, members, a in self.groups:
            if kind is CircularLane:
                dx, dy = px - a["cx"], py - a["cy"]
                phi = np.arctan2(dy, dx)
                phi = a["start_phase"] + (((phi - a["start_phase"]) + np.pi) % (2 * np.pi) - np.pi)
                s = a["direction"] * (phi - a["start_phase"]) * a["radius"]
                r = a["direction"] * (a["radius"] - np.sqrt(dx * dx + dy * dy))
            else:
                dx, dy = px - a["sx"], py - a["sy"]
                s = dx * a["ux"] + dy * a["uy"]
                r = dx * a["nx"] + dy * a["ny"]
                if kind is SineLane:
                    r = r - a["amplitude"] * np.sin(a["pulsation"] * s + a["phase"])
            d = np.abs(r) + np.maximum(s - a["length"], 0) + np.maximum(0 - s, 0)
            if heading is not None:
                if kind is CircularLane:
                    lane_heading = (a["direction"] * s / a["radius"] + a["start_phase"]) + np.pi / 2 * a["direction"]
                elif kind is SineLane:
                    lane_heading = a["heading"] + np.arctan(
                        a["amplitude"] * a["pulsation"] * np.cos(a["pulsation"] * s + a["phase"])
                    )
                else:
                    lane_heading = a["heading"]
                angle = np.abs(((heading - lane_heading) + np.pi) % (2 * np.pi) - np.pi)
                d = d + 1.0 * angle
            out[members] = d
        for i, lane in self.others:
            out[i] = lane.distance_with_heading(position, heading)
        return out


class FastRoadNetwork(RoadNetwork):
    """``get_closest_lane_index`` over all lanes at once (same index as highway-env's).

    The lane table is built on first use and rebuilt if lanes are added; with few lanes
    (a straight highway) highway-env's loop is as fast, so it is kept.
    """

    MIN_LANES = 5
    _table: _LaneTable | None = None

    def add_lane(self, _from: str, _to: str, lane: AbstractLane) -> None:
        self._table = None
        super().add_lane(_from, _to, lane)

    def get_closest_lane_index(self, position: np.ndarray, heading: float | None = None) -> LaneIndex:
        table = self._table
        if table is None:
            table = self._table = _LaneTable(self)
        if table.size < self.MIN_LANES:
            return super().get_closest_lane_index(position, heading)
        return table.indexes[int(np.argmin(table.distances(position, heading)))]


class FastRoadMixin:
    """``neighbour_vehicles`` by binary search in per-lane orders (same answers as highway-env).

    During ``act()`` one snapshot serves every vehicle's queries (nobody moves while
    deciding); outside ``act()`` each query takes a fresh snapshot, so external changes
    to the road (spawned or removed vehicles) are always seen.
    """

    _snapshot: _Snapshot | None = None

    def act(self) -> None:
        self._snapshot = _Snapshot(self)
        try:
            super().act()
        finally:
            self._snapshot = None

    def neighbour_vehicles(
        self, vehicle: RoadObject, lane_index: LaneIndex | None = None
    ) -> tuple[RoadObject | None, RoadObject | None]:
        lane_index = lane_index or vehicle.lane_index
        if not lane_index:
            return None, None
        snapshot = self._snapshot or _Snapshot(self)
        return snapshot.neighbours(vehicle, lane_index)


class FastRoad(FastRoadMixin, Road):
    """highway-env's ``Road`` with the fast neighbour search."""


class FastRegulatedRoad(FastRoadMixin, RegulatedRoad):
    """highway-env's ``RegulatedRoad`` (intersections) with the fast neighbour search, and
    each vehicle's predicted trajectory computed once per rule check instead of once per
    pair of vehicles (``enforce_road_rules`` only changes target speeds, which the
    constant-speed prediction does not read)."""

    _predictions: dict[int, tuple[np.ndarray, list[float]]] | None = None

    def enforce_road_rules(self) -> None:
        self._predictions = {}
        try:
            super().enforce_road_rules()
        finally:
            self._predictions = None

    def _predicted(self, vehicle: Vehicle, times: np.ndarray) -> tuple[np.ndarray, list[float]]:
        cached = self._predictions.get(id(vehicle))
        if cached is None:
            positions, headings = vehicle.predict_trajectory_constant_speed(times)
            cached = (np.array(positions, dtype=np.float64).reshape(-1, 2), list(headings))
            self._predictions[id(vehicle)] = cached
        return cached

    def is_conflict_possible(self, v1: Vehicle, v2: Vehicle, horizon: int = 3, step: float = 0.25) -> bool:
        """``RegulatedRoad.is_conflict_possible`` from cached predictions: the first time at
        which the centres are within ``L1`` and the 1.5 L x 0.9 W boxes intersect."""
        if self._predictions is None:
            return RegulatedRoad.is_conflict_possible(v1, v2, horizon, step)
        times = np.arange(step, horizon, step)
        p1, h1 = self._predicted(v1, times)
        p2, h2 = self._predicted(v2, times)
        n = min(len(p1), len(p2))
        dx, dy = p2[:n, 0] - p1[:n, 0], p2[:n, 1] - p1[:n, 1]
        for t in np.flatnonzero(~(np.sqrt(dx * dx + dy * dy) > v1.LENGTH)).tolist():
            if utils.rotated_rectangles_intersect(
                (p1[t], 1.5 * v1.LENGTH, 0.9 * v1.WIDTH, h1[t]),
                (p2[t], 1.5 * v2.LENGTH, 0.9 * v2.WIDTH, h2[t]),
            ):
                return True
        return False


_FAST_ROADS: dict[type, type] = {Road: FastRoad, RegulatedRoad: FastRegulatedRoad}


def install_fast_road(road: Road) -> bool:
    """Switch ``road`` and its network to their fast twins in place (other classes are
    left alone). Returns whether the road is fast now.

    The twins only override methods (and cache lane tables), so the instances' state is
    valid for them as is.
    """
    if type(road.network) is RoadNetwork:
        road.network.__class__ = FastRoadNetwork
        road.network._table = None
    for lane in road.network.lanes_list():
        if type(lane) is StraightLane:
            lane.__class__ = FastStraightLane
    fast = _FAST_ROADS.get(type(road))
    if fast is None:
        return type(road) in _FAST_ROADS.values()
    road.__class__ = fast
    return True


def close_objects(
    road: Road,
    vehicle: Vehicle,
    distance: float,
    count: int | None = None,
    see_behind: bool = True,
    sort: bool = True,
    vehicles_only: bool = False,
) -> list[RoadObject]:
    """``Road.close_objects_to`` with numpy: the same objects in the same order.

    Vehicles within ``distance`` (euclidean) other than ``vehicle``, in front of
    ``-2 L`` along its lane unless ``see_behind``; then road objects within ``distance``
    and in front of ``-2 L``; stably sorted by ``|s_other - s_ego|`` on the ego's lane.
    """
    vehicles, objects = road.vehicles, ([] if vehicles_only else road.objects)
    items = vehicles + objects
    if not items:
        return []
    pos = np.array([o.position for o in items], dtype=np.float64).reshape(-1, 2)
    ex, ey = vehicle.position[0], vehicle.position[1]
    dx, dy = pos[:, 0] - ex, pos[:, 1] - ey
    near = np.sqrt(dx * dx + dy * dy) < distance
    lane = vehicle.lane
    s, _ = lane_coordinates(lane, pos[:, 0], pos[:, 1])
    s_ego = lane.local_coordinates(vehicle.position)[0]
    lane_dist = s - s_ego
    ahead = -2 * vehicle.LENGTH < lane_dist
    n_veh = len(vehicles)
    keep = near.copy()
    if not see_behind:
        keep[:n_veh] &= ahead[:n_veh]
    keep[n_veh:] &= ahead[n_veh:]
    not_self = np.array([o is not vehicle for o in vehicles] + [True] * len(objects), dtype=bool)
    idx = np.flatnonzero(keep & not_self)
    if sort:
        idx = idx[np.argsort(np.abs(lane_dist[idx]), kind="stable")]
    if count:
        idx = idx[:count]
    return [items[i] for i in idx.tolist()]


# Features of Vehicle.to_dict, and the ones a plain RoadObject reports (others are NaN there).
_VEHICLE_FEATURES = (
    "presence", "x", "y", "vx", "vy", "heading", "cos_h", "sin_h", "cos_d", "sin_d", "long_off", "lat_off", "ang_off",
)
_OBJECT_FEATURES = ("presence", "x", "y", "vx", "vy", "cos_h", "sin_h", "cos_d", "sin_d")
_RELATIVE = ("x", "y", "vx", "vy")


def _vehicle_row(v: RoadObject, features: list[str], intentions: bool) -> list[float]:
    """The requested entries of ``v.to_dict(observe_intentions=intentions)`` (absolute),
    computed from the same properties, only those asked for."""
    to_dict = type(v).to_dict
    if to_dict is Vehicle.to_dict:
        row: list[float] = []
        velocity = direction = destination = offset = None
        for f in features:
            if f == "presence":
                row.append(1.0)
            elif f == "x" or f == "y":
                row.append(v.position[0 if f == "x" else 1])
            elif f == "vx" or f == "vy":
                if velocity is None:
                    velocity = v.velocity
                row.append(velocity[0 if f == "vx" else 1])
            elif f == "heading":
                row.append(v.heading)
            elif f == "cos_h" or f == "sin_h":
                if direction is None:
                    direction = v.direction
                row.append(direction[0 if f == "cos_h" else 1])
            elif f == "cos_d" or f == "sin_d":
                if not intentions:
                    row.append(0.0)
                else:
                    if destination is None:
                        destination = v.destination_direction
                    row.append(destination[0 if f == "cos_d" else 1])
            else:  # long_off, lat_off, ang_off
                if offset is None:
                    offset = v.lane_offset
                row.append(offset[("long_off", "lat_off", "ang_off").index(f)])
        return row
    if to_dict is RoadObject.to_dict:
        row = []
        for f in features:
            if f == "presence":
                row.append(1.0)
            elif f == "x" or f == "y":
                row.append(v.position[0 if f == "x" else 1])
            elif f in ("vx", "vy", "cos_d", "sin_d"):
                row.append(0.0)
            elif f == "cos_h":
                row.append(np.cos(v.heading))
            elif f == "sin_h":
                row.append(np.sin(v.heading))
            else:
                row.append(np.nan)
        return row
    d = v.to_dict(None, observe_intentions=intentions)  # an unknown class: its own method
    return [d.get(f, np.nan) for f in features]


class FastKinematicObservation(KinematicObservation):
    """``KinematicObservation`` computed with numpy; equal to highway-env's ``observe()``.

    For the ego row ``e`` and each of the ``V - 1`` closest objects ``o`` (sorted by lane
    distance), the features are those of ``Vehicle.to_dict`` (``x, y, vx, vy`` relative
    to the ego unless ``absolute``); each feature ``f`` with a range ``[a, b]`` is mapped
    by ``-1 + (f - a) * 2 / (b - a)`` and clipped to ``[-1, 1]``; missing rows are zeros.
    """

    def observe(self) -> np.ndarray:
        env = self.env
        if not env.road:
            return np.zeros(self.space().shape, dtype=np.float32)
        ego = self.observer_vehicle
        features = list(self.features)
        close = close_objects(
            env.road,
            ego,
            env.PERCEPTION_DISTANCE,
            count=self.vehicles_count - 1,
            see_behind=self.see_behind,
            sort=self.order == "sorted",
            vehicles_only=not self.include_obstacles,
        )
        # highway-env: the ego's own row always observes intentions (to_dict's default).
        rows = [_vehicle_row(ego, features, True)]
        if close:
            origin = None
            if not self.absolute:
                origin_row = _vehicle_row(ego, list(_RELATIVE), True)
                origin = dict(zip(_RELATIVE, origin_row))
            for v in close[-self.vehicles_count + 1 :]:
                row = _vehicle_row(v, features, self.observe_intentions)
                if origin is not None:
                    row = [val - origin[f] if f in origin else val for f, val in zip(features, row)]
                rows.append(row)
        obs = np.array(rows, dtype=np.float64).reshape(len(rows), len(features))
        if self.normalize:
            obs = self._normalize(obs, features)
        if obs.shape[0] < self.vehicles_count:
            obs = np.vstack([obs, np.zeros((self.vehicles_count - obs.shape[0], len(features)))])
        if self.order == "shuffled":
            self.env.np_random.shuffle(obs[1:])
        return obs.astype(self.space().dtype)

    def _normalize(self, obs: np.ndarray, features: list[str]) -> np.ndarray:
        """``normalize_obs`` on an array: same default ranges, same ``lmap`` and clip."""
        if not self.features_range:
            side_lanes = self.env.road.network.all_side_lanes(self.observer_vehicle.lane_index)
            self.features_range = {
                "x": [-5.0 * Vehicle.MAX_SPEED, 5.0 * Vehicle.MAX_SPEED],
                "y": [-AbstractLane.DEFAULT_WIDTH * len(side_lanes), AbstractLane.DEFAULT_WIDTH * len(side_lanes)],
                "vx": [-2 * Vehicle.MAX_SPEED, 2 * Vehicle.MAX_SPEED],
                "vy": [-2 * Vehicle.MAX_SPEED, 2 * Vehicle.MAX_SPEED],
            }
        for feature, (lo, hi) in self.features_range.items():
            if feature in features:
                j = features.index(feature)
                # utils.lmap(v, [lo, hi], [-1, 1]) = -1 + (v - lo) * 2 / (hi - lo)
                col = -1 + (obs[:, j] - lo) * 2 / (hi - lo)
                obs[:, j] = np.clip(col, -1, 1) if self.clip else col
        return obs


def install_fast_observation(observation_type: Any) -> bool:
    """Switch a plain ``KinematicObservation`` to :class:`FastKinematicObservation` in place."""
    if type(observation_type) is KinematicObservation:
        observation_type.__class__ = FastKinematicObservation
        return True
    return isinstance(observation_type, FastKinematicObservation)


_SCALARS = (float, int, np.float64)


class _NumpyWithScalarClip(types.ModuleType):
    """numpy, except that ``clip`` of a scalar between scalar bounds is ``min(max(x, lo), hi)``
    (numpy's own clip: ``minimum(maximum(x, lo), hi)``, the same value, NaN included)."""

    def __getattr__(self, name: str) -> Any:
        return getattr(np, name)

    @staticmethod
    def clip(a: Any, a_min: Any, a_max: Any, *args: Any, **kwargs: Any) -> Any:
        if not args and not kwargs and type(a) in _SCALARS and type(a_min) in _SCALARS and type(a_max) in _SCALARS:
            return min(max(a, a_min), a_max)
        return np.clip(a, a_min, a_max, *args, **kwargs)


_NUMPY_WITH_SCALAR_CLIP = _NumpyWithScalarClip("numpy_with_scalar_clip")
# numpy's names as plain attributes (a dict lookup, not __getattr__), except clip.
vars(_NUMPY_WITH_SCALAR_CLIP).update({k: v for k, v in vars(np).items() if not k.startswith("__") and k != "clip"})


def _with_scalar_clip(func: Callable[..., Any]) -> Callable[..., Any]:
    """``func`` (highway-env's function) with its global ``np`` bound to the proxy above.

    The code object, defaults and closure are highway-env's; only the name lookup of
    ``np`` differs, so nothing of highway-env's source is copied or patched.
    """
    namespace = dict(func.__globals__)
    namespace["np"] = _NUMPY_WITH_SCALAR_CLIP
    fast = types.FunctionType(func.__code__, namespace, func.__name__, func.__defaults__, func.__closure__)
    fast.__kwdefaults__ = func.__kwdefaults__
    fast.__qualname__, fast.__doc__ = func.__qualname__, func.__doc__
    return fast


class TrafficIDMVehicle(IDMVehicle):
    """highway-env's ``IDMVehicle`` with its IDM constants pinned on this class.

    The values are highway-env 1.12's defaults. Pinning them here means that
    ``IntersectionEnv``'s in-place ``IDMVehicle.DISTANCE_WANTED = 7`` (and comfort
    accelerations) does not change the traffic of the highway tasks made later.
    """

    DISTANCE_WANTED = 5.0 + ControlledVehicle.LENGTH
    COMFORT_ACC_MAX = 3.0
    COMFORT_ACC_MIN = -5.0


class IntersectionIDMVehicle(TrafficIDMVehicle):
    """The intersection's traffic: the constants ``IntersectionEnv`` sets (7 m, 6 and -3 m/s^2),
    declared here so its in-place writes to the class are no-ops."""

    DISTANCE_WANTED = 7
    COMFORT_ACC_MAX = 6
    COMFORT_ACC_MIN = -3


class _ScalarClipDecisions:
    """highway-env's IDM/MOBIL and steering functions, run with a scalar ``np.clip``."""

    act = _with_scalar_clip(IDMVehicle.act)
    acceleration = _with_scalar_clip(IDMVehicle.acceleration)
    steering_control = _with_scalar_clip(ControlledVehicle.steering_control)


class FastIDMVehicle(_ScalarClipDecisions, TrafficIDMVehicle):
    """:class:`TrafficIDMVehicle` deciding with a scalar ``np.clip`` (same decisions)."""


class FastIntersectionIDMVehicle(_ScalarClipDecisions, IntersectionIDMVehicle):
    """:class:`IntersectionIDMVehicle` deciding with a scalar ``np.clip`` (same decisions)."""
