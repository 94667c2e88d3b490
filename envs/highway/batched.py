"""highway-env's ``highway-fast-v0`` for ``B`` scenes at once, on ``(B, N)`` numpy arrays.

:class:`BatchedHighway` steps ``B`` copies of the ``Highway/Highway-v0`` (or
``Highway/HighwayContinuous-v0``) task together; vehicle 0 of each scene is the ego,
vehicles ``1..N-1`` highway-env's ``IDMVehicle`` traffic, in highway-env's list order.
It reproduces highway-env 1.12.1 on its straight 3-lane road (lanes ``k`` at
``y = 4k``, 10 km long, speed limit 30 m/s, all headings 0, so a lane coordinate is
``s = x``, ``r = y - 4k``):

* scene: the same random draws as ``HighwayEnv._create_vehicles`` from the same
  generator (``gymnasium.utils.seeding.np_random(seed)``), so a seed gives highway-env's
  scene; a later reset continues the env's generator, as highway-env's does;
* per simulation frame (5 Hz, 5 frames per decision), in highway-env's order:
  the ego's meta-action (first frame only), every vehicle's decision (``Road.act``),
  every vehicle's bicycle-model step (``Road.step``), the ego's collision checks with
  each other vehicle, then the task's cost measurement;
* decisions: the ego's speed/steering controllers
  (``a = (v* - v) / 0.6``; lateral P-control on ``r``, heading P-control, inverse
  bicycle slip), the traffic's IDM
  ``a = 3 (1 - (v / v*)^delta - (d*/d)^2)``, ``d* = 10 + 1.5 v + v dv / (2 sqrt 15)``
  with ``a`` the smaller of the current and target lanes' and clipped to +-6, and MOBIL
  every second (politeness 0: change if the new follower brakes less than 2 m/s^2 and
  the gain is at least 0.2 m/s^2; the right lane wins over the left), with an ongoing
  change aborted when a vehicle already aiming at that lane is within the desired gap
  ahead (decided in list order: a vehicle sees the new targets of those before it);
* neighbours as ``Road.neighbour_vehicles``: the closest vehicle with ``s >= s_i``
  (front) and ``s < s_i`` (rear) among those within 3 m of the lane's centre line;
* collisions: highway-env's bounding-circle pre-check, then its separating-axis test
  (``utils.are_polygons_intersecting``, vectorised over the pairs that pass; tested
  equal), with its impact translation applied on the next frame;
* observation, reward and costs exactly as ``HighwayTaskEnv`` (kinematics of the ego
  and its 4 nearest vehicles ahead, normalised and clipped; highway-env's reward with
  ``collision_reward = 0``; costs of :mod:`.options`).

Floating-point operations follow highway-env's order, so trajectories agree to
rounding (tested against highway-env itself, ``tests/envs/test_highway_batched.py``).
One tie rule differs: two vehicles at exactly the same ``x`` (measure zero).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.utils import seeding
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from constrained_grpo.constraints import Constraint
from constrained_grpo.envs.highway.options import HighwayOptions

__all__ = ["BatchedHighway", "HighwayBatchedVectorEnv", "make_highway_vector_env", "supports"]

# highway-fast-v0's settings and highway-env 1.12's constants.
LANES = 3
LANE_WIDTH = 4.0
ROAD_LENGTH = 10000.0
SPEED_LIMIT = 30
OTHERS = 20
FRAMES = 5
DT = 1 / 5
DURATION = 30
EGO_SPACING = 1.5
DENSITY = 1.0
LENGTH, WIDTH = 5.0, 2.0
VEHICLE_LENGTH = 5.0  # AbstractLane.VEHICLE_LENGTH
MAX_SPEED, MIN_SPEED = 40.0, -40.0
TARGET_SPEEDS = np.linspace(20, 30, 3)
# ControlledVehicle
KP_A = 1 / 0.6
KP_HEADING = 1 / 0.2
KP_LATERAL = 1 / 0.6
TAU_PURSUIT = 0.5 * 0.2
MAX_STEERING_ANGLE = np.pi / 3
# IDMVehicle
ACC_MAX = 6.0
COMFORT_ACC_MAX = 3.0
COMFORT_ACC_MIN = -5.0
DISTANCE_WANTED = 5.0 + LENGTH
TIME_WANTED = 1.5
LANE_CHANGE_MIN_ACC_GAIN = 0.2
LANE_CHANGE_MAX_BRAKING_IMPOSED = 2.0
LANE_CHANGE_DELAY = 1.0
# observation: Kinematics, 5 vehicles, features presence/x/y/vx/vy, relative, sorted.
OBS_VEHICLES = 5
PERCEPTION_DISTANCE = 5.0 * MAX_SPEED
X_RANGE = (-5.0 * MAX_SPEED, 5.0 * MAX_SPEED)
Y_RANGE = (-LANE_WIDTH * LANES, LANE_WIDTH * LANES)
V_RANGE = (-2 * MAX_SPEED, 2 * MAX_SPEED)
# reward
RIGHT_LANE_REWARD = 0.1
HIGH_SPEED_REWARD = 0.4
REWARD_SPEED_RANGE = (20, 30)
# meta-actions
LANE_LEFT, IDLE, LANE_RIGHT, FASTER, SLOWER = range(5)

_DIAGONAL = np.sqrt(LENGTH**2 + WIDTH**2)
_LANE_Y = np.arange(LANES) * LANE_WIDTH
_TWO_SQRT_AB = 2 * np.sqrt(-COMFORT_ACC_MAX * COMFORT_ACC_MIN)


def supports(**kwargs: Any) -> bool:
    """Whether :class:`HighwayBatchedVectorEnv` can stand for ``HighwayTaskEnv(**kwargs)``:
    the highway scenario with highway-env's default settings (no ``config`` overrides)
    and no rendering."""
    return (
        kwargs.get("scenario", "highway") == "highway"
        and not kwargs.get("config")
        and kwargs.get("render_mode") is None
    )


def _not_zero(x: np.ndarray, eps: float = 1e-2) -> np.ndarray:
    """``utils.not_zero``: ``x`` if ``|x| > eps``, else ``+-eps`` by the sign of ``x``."""
    return np.where(np.abs(x) > eps, x, np.where(x >= 0, eps, -eps))


def _wrap_to_pi(x: np.ndarray) -> np.ndarray:
    return ((x + np.pi) % (2 * np.pi)) - np.pi


Rect = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def polygons(x: np.ndarray, y: np.ndarray, heading: np.ndarray) -> np.ndarray:
    """``RoadObject.polygon()`` of many vehicles: ``(M, 5, 2)``, the rotated 5 x 2 m
    rectangles' corners ``R(h) p + (x, y)`` (closed: the first corner repeated)."""
    px = np.array([-LENGTH / 2, -LENGTH / 2, +LENGTH / 2, +LENGTH / 2, -LENGTH / 2])
    py = np.array([-WIDTH / 2, +WIDTH / 2, +WIDTH / 2, -WIDTH / 2, -WIDTH / 2])
    c, s = np.cos(heading)[:, None], np.sin(heading)[:, None]
    return np.stack([c * px + -s * py + x[:, None], s * px + c * py + y[:, None]], axis=2)


def polygons_intersecting(a: Rect, b: Rect) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``utils.are_polygons_intersecting`` of the vehicles ``a = (x, y, heading, speed)``
    and ``b`` (arrays of ``M`` pairs), with displacements ``speed (cos h, sin h) DT``.

    Separating axes: the unit normals ``n`` of the 8 edges; the pair intersects unless
    some axis separates the projections ``[min p.n, max p.n]``, and will intersect unless
    one separates them once A's interval is stretched by ``n . (d_A - d_B)``. The
    translation is ``min |distance| * (+-n)`` over the axes, pointing from B to A.
    Returns ``(intersecting, will_intersect, translation (M, 2))``.
    """
    pa, pb = polygons(a[0], a[1], a[2]), polygons(b[0], b[1], b[2])
    da = np.stack([a[3] * np.cos(a[2]), a[3] * np.sin(a[2])], axis=1) * DT
    db = np.stack([b[3] * np.cos(b[2]), b[3] * np.sin(b[2])], axis=1) * DT
    m = len(pa)
    intersecting = np.ones(m, dtype=bool)
    will = np.ones(m, dtype=bool)
    min_distance = np.full(m, np.inf)
    axis = np.zeros((m, 2))
    centre = pa[:, :-1].mean(axis=1) - pb[:, :-1].mean(axis=1)
    for poly in (pa, pb):
        for e in range(4):
            p1, p2 = poly[:, e], poly[:, e + 1]
            nx, ny = -p2[:, 1] + p1[:, 1], p2[:, 0] - p1[:, 0]
            norm = np.sqrt(nx * nx + ny * ny)
            nx, ny = nx / norm, ny / norm
            proj_a = pa[:, :, 0] * nx[:, None] + pa[:, :, 1] * ny[:, None]
            proj_b = pb[:, :, 0] * nx[:, None] + pb[:, :, 1] * ny[:, None]
            min_a, max_a = proj_a.min(axis=1), proj_a.max(axis=1)
            min_b, max_b = proj_b.min(axis=1), proj_b.max(axis=1)
            intersecting &= ~(np.where(min_a < min_b, min_b - max_a, min_a - max_b) > 0)
            vp = nx * (da[:, 0] - db[:, 0]) + ny * (da[:, 1] - db[:, 1])
            min_a = np.where(vp < 0, min_a + vp, min_a)
            max_a = np.where(vp < 0, max_a, max_a + vp)
            distance = np.where(min_a < min_b, min_b - max_a, min_a - max_b)
            will &= ~(distance > 0)
            closer = np.abs(distance) < min_distance
            min_distance = np.where(closer, np.abs(distance), min_distance)
            sign = np.where(centre[:, 0] * nx + centre[:, 1] * ny > 0, 1.0, -1.0)
            axis = np.where(closer[:, None], np.stack([sign * nx, sign * ny], axis=1), axis)
    return intersecting, will, min_distance[:, None] * axis


def draw_scene(rng: np.random.Generator) -> dict[str, np.ndarray]:
    """A new scene from ``rng``, drawing what ``HighwayEnvFast._create_vehicles`` draws, in
    its order (``Vehicle.create_random`` per vehicle, then the traffic's ``DELTA``).

    Returns float64 arrays of the ``N = 21`` vehicles: ``x``, ``y``, ``speed``, ``delta``
    (the ego's unused) and the lane ids ``lane``.
    """
    factor = np.exp(-5 / 40 * LANES)
    xs: list[float] = []
    ys: list[float] = []
    speeds: list[float] = []
    deltas: list[float] = [0.0]
    lanes: list[int] = []

    def create(speed: float | None, spacing: float) -> None:
        # highway-env draws the road and the lane with rng.choice: of one road, which
        # draws nothing, then of LANES lanes, which is rng.integers(0, LANES) (tested).
        lane_id = int(rng.integers(0, LANES))
        if speed is None:
            speed = rng.uniform(0.7 * SPEED_LIMIT, 0.8 * SPEED_LIMIT)
        default_spacing = 12 + 1.0 * speed
        offset = spacing * default_spacing * factor
        x0 = max(xs) if xs else 3 * offset
        x0 += offset * rng.uniform(0.9, 1.1)
        xs.append(float(x0))
        ys.append(float(lane_id * LANE_WIDTH))
        speeds.append(float(speed))
        lanes.append(lane_id)

    create(25.0, EGO_SPACING)
    for _ in range(OTHERS):
        create(None, 1 / DENSITY)
        deltas.append(float(rng.uniform(low=3.5, high=4.5)))
    return {
        "x": np.array(xs),
        "y": np.array(ys),
        "speed": np.array(speeds),
        "delta": np.array(deltas),
        "lane": np.array(lanes, dtype=np.int64),
    }


class BatchedHighway:
    """``B`` scenes of the highway task, stepped together (see the module docstring).

    Args:
        num_envs: ``B``.
        options: the task's options (scenario ``"highway"``); default ``HighwayOptions()``.

    State, all ``(B, N)``: ``x, y, heading, speed`` (m, rad, m/s), the stored low-level
    action ``steer, acc``, ``lane`` (closest lane), ``target`` (target lane),
    ``target_speed``, the traffic's ``delta`` and MOBIL ``timer``, ``crashed`` and
    the pending collision ``impact``.
    """

    def __init__(self, num_envs: int, options: HighwayOptions | None = None):
        if not isinstance(num_envs, (int, np.integer)) or isinstance(num_envs, bool) or num_envs < 1:
            raise ValueError(f"num_envs must be a positive integer, got {num_envs!r}")
        self.options = options if options is not None else HighwayOptions()
        if self.options.scenario != "highway" or self.options.config:
            raise ValueError(
                f"BatchedHighway simulates scenario 'highway' with highway-env's defaults; got scenario="
                f"{self.options.scenario!r}, config={dict(self.options.config)!r} (use HighwayVectorEnv for those)"
            )
        self.num_envs = B = int(num_envs)
        self.discrete = self.options.action_mode == "discrete"
        N = self.n_vehicles = OTHERS + 1
        self.x = np.zeros((B, N))
        self.y = np.zeros((B, N))
        self.heading = np.zeros((B, N))
        self.speed = np.zeros((B, N))
        self.steer = np.zeros((B, N))
        self.acc = np.zeros((B, N))
        self.lane = np.zeros((B, N), dtype=np.int64)
        self.target = np.zeros((B, N), dtype=np.int64)
        self.target_speed = np.zeros((B, N))
        self.delta = np.zeros((B, N))
        self.timer = np.zeros((B, N))
        self.crashed = np.zeros((B, N), dtype=bool)
        self.impact = np.zeros((B, N, 2))
        self.has_impact = np.zeros((B, N), dtype=bool)
        self.time = np.zeros(B, dtype=np.int64)
        self.collided = np.zeros(B, dtype=bool)
        self.rngs: list[np.random.Generator | None] = [None] * B
        self._arange = np.arange(N)
        self._rows = np.arange(B)[:, None]
        self._controlled = np.ones(N, dtype=bool)
        self._controlled[0] = self.discrete  # a continuous ego is a plain Vehicle
        self._scale = 1.0 / (FRAMES * DURATION)
        self.min_time_headway = np.full(B, np.inf)

    # -- scenes ----------------------------------------------------------------------------
    def reset_envs(self, envs: Sequence[int] | np.ndarray, seeds: Sequence[int | None]) -> None:
        """New scenes in envs ``envs``; a seed reseeds the env's generator, ``None``
        continues it (a fresh random one the first time)."""
        envs = np.asarray(envs, dtype=np.int64).reshape(-1)
        if len(envs) != len(seeds):
            raise ValueError(f"got {len(seeds)} seeds for {len(envs)} envs; give one seed (or None) per env")
        for b, seed in zip(envs.tolist(), seeds):
            if seed is not None or self.rngs[b] is None:
                self.rngs[b] = seeding.np_random(seed)[0]
            scene = draw_scene(self.rngs[b])
            self.x[b] = scene["x"]
            self.y[b] = scene["y"]
            self.heading[b] = 0.0
            self.speed[b] = scene["speed"]
            self.steer[b] = 0.0
            self.acc[b] = 0.0
            self.lane[b] = scene["lane"]
            self.target[b] = scene["lane"]
            self.target_speed[b] = scene["speed"]
            self.delta[b] = scene["delta"]
            # IDMVehicle: timer = (x + y) pi mod 1 s.
            self.timer[b] = ((scene["x"] + scene["y"]) * np.pi) % LANE_CHANGE_DELAY
            self.timer[b, 0] = 0.0
            if self.discrete:  # MDPVehicle: the target speed snapped to the grid (25 m/s)
                self.target_speed[b, 0] = TARGET_SPEEDS[self._speed_index(np.array([scene["speed"][0]]))[0]]
            self.crashed[b] = False
            self.has_impact[b] = False
            self.impact[b] = 0.0
            self.time[b] = 0
            self.collided[b] = False

    def states(self, b: int) -> np.ndarray:
        """``(N, 4)``: x, y, speed, heading of env ``b``'s vehicles."""
        return np.stack([self.x[b], self.y[b], self.speed[b], self.heading[b]], axis=1)

    @staticmethod
    def _speed_index(speed: np.ndarray) -> np.ndarray:
        """``MDPVehicle.speed_to_index``: the nearest of the target speeds (rounding half to even)."""
        x = (speed - TARGET_SPEEDS[0]) / (TARGET_SPEEDS[-1] - TARGET_SPEEDS[0])
        return np.clip(np.round(x * (TARGET_SPEEDS.size - 1)), 0, TARGET_SPEEDS.size - 1).astype(np.int64)

    # -- decisions -------------------------------------------------------------------------
    def _neighbours(self) -> tuple[np.ndarray, np.ndarray]:
        """``(front, rear)``, each ``(B, N, K)``: the vehicle index ``Road.neighbour_vehicles``
        returns for vehicle ``i`` on lane ``k`` (-1: none)."""
        x, y = self.x, self.y
        B, N = x.shape
        onlane = (np.abs(y[:, :, None] - _LANE_Y) <= LANE_WIDTH / 2 + 1) & (
            ((-VEHICLE_LENGTH <= x) & (x < ROAD_LENGTH + VEHICLE_LENGTH))[:, :, None]
        )
        # By x ascending, ties by list position descending (highway-env's loop keeps the
        # last of equal fronts and the first of equal rears).
        order = N - 1 - np.argsort(x[:, ::-1], axis=1, kind="stable")
        rank = np.empty_like(order)
        np.put_along_axis(rank, order, self._arange[None, :], axis=1)
        ons = np.take_along_axis(onlane, order[:, :, None], axis=1)
        pos = self._arange[None, :, None]
        nxt = np.minimum.accumulate(np.where(ons, pos, N)[:, ::-1], axis=1)[:, ::-1]
        prv = np.maximum.accumulate(np.where(ons, pos, -1), axis=1)
        # strictly after / before the vehicle's own rank
        nxt = np.concatenate([nxt[:, 1:], np.full((B, 1, LANES), N)], axis=1)
        prv = np.concatenate([np.full((B, 1, LANES), -1), prv[:, :-1]], axis=1)
        r = np.broadcast_to(rank[:, :, None], (B, N, LANES))
        order_ext = np.concatenate([order, np.full((B, 1), -1)], axis=1)[:, :, None]  # rank N or -1 -> -1
        front = np.take_along_axis(order_ext, np.take_along_axis(nxt, r, axis=1), axis=1)
        rear = np.take_along_axis(order_ext, np.take_along_axis(prv, r, axis=1), axis=1)
        return front, rear

    def _free_road(self, b: np.ndarray, e: np.ndarray, delta: np.ndarray, k: dict[str, np.ndarray]) -> np.ndarray:
        """IDM's free-road term ``3 (1 - (max(v_e, 0) / |v*_e|)^delta)`` of vehicles ``e`` of
        envs ``b``, with ``v*`` clipped to the lane's limit and ``delta`` the caller's."""
        ve = self.speed[b, e]
        target = np.clip(k["target_speed"][b, e], 0, SPEED_LIMIT)
        return COMFORT_ACC_MAX * (1 - np.power(np.maximum(ve, 0) / np.abs(_not_zero(target)), delta))

    def _idm(
        self, free: np.ndarray, b: np.ndarray, e: np.ndarray, f: np.ndarray, k: dict[str, np.ndarray]
    ) -> np.ndarray:
        """``IDMVehicle.acceleration(ego_vehicle=e, front_vehicle=f)`` from its free-road term:
        ``free - 3 (d* / d)^2`` with ``d = x_f - x_e`` and
        ``d* = 10 + 1.5 v_e + v_e ((v_e - v_f) . u_e) / (2 sqrt 15)``; ``free`` where ``f`` is -1."""
        has = f >= 0
        if not has.any():
            return free
        fc = np.maximum(f, 0)
        ve, ce, se = self.speed[b, e], k["c"][b, e], k["s"][b, e]
        dv = (k["vx"][b, e] - k["vx"][b, fc]) * ce + (k["vy"][b, e] - k["vy"][b, fc]) * se
        d_star = DISTANCE_WANTED + ve * TIME_WANTED + ve * dv / _TWO_SQRT_AB
        d = self.x[b, fc] - self.x[b, e]
        return np.where(has, free - COMFORT_ACC_MAX * np.power(d_star / _not_zero(d), 2), free)

    def _steering(self, target: np.ndarray, speed: np.ndarray, heading: np.ndarray, y: np.ndarray) -> np.ndarray:
        """``ControlledVehicle.steering_control`` towards lane ``target`` (heading 0)."""
        lateral = y - target * LANE_WIDTH
        lateral_speed_command = -KP_LATERAL * lateral
        nz = _not_zero(speed)
        heading_command = np.arcsin(np.clip(lateral_speed_command / nz, -1, 1))
        heading_ref = 0.0 + np.clip(heading_command, -np.pi / 4, np.pi / 4)
        heading_rate_command = KP_HEADING * _wrap_to_pi(heading_ref - heading)
        slip_angle = np.arcsin(np.clip(LENGTH / 2 / nz * heading_rate_command, -1, 1))
        steering = np.arctan(2 * np.tan(slip_angle))
        return np.clip(steering, -MAX_STEERING_ANGLE, MAX_STEERING_ANGLE)

    def _act(self) -> None:
        """``Road.act()``: the ego's controllers and the traffic's MOBIL + IDM decisions."""
        B, N = self.x.shape
        c, s = np.cos(self.heading), np.sin(self.heading)
        k = {"c": c, "s": s, "vx": self.speed * c, "vy": self.speed * s, "target_speed": self.target_speed}
        if not self.discrete:
            k["target_speed"] = self.target_speed.copy()
            k["target_speed"][:, 0] = 0.0  # a plain Vehicle has no target speed: IDM reads 0
        front, rear = self._neighbours()
        lane, target, delta = self.lane, self.target, self.delta
        rows, me = self._rows, self._arange[None, :]
        live = ~self.crashed
        live[:, 0] = False
        free = self._free_road(rows, me, delta, k)
        # IDM on the own lane; MOBIL's "self_a" (behind the old preceding vehicle) is the same.
        acc = self._idm(free, rows, me, front[rows, me, lane], k)
        changing = lane != target
        new_target = target.copy()
        # MOBIL, every LANE_CHANGE_DELAY seconds, for vehicles keeping their lane.
        mobil = live & ~changing & (self.timer > LANE_CHANGE_DELAY)
        if mobil.any():
            self.timer[mobil] = 0.0
            bi, ii = np.nonzero(mobil)
            x_i, y_i, lane_i = self.x[bi, ii], self.y[bi, ii], lane[bi, ii]
            self_a = acc[bi, ii]
            free_i, delta_i = free[bi, ii], delta[bi, ii]
            base = ~(np.abs(self.speed[bi, ii]) < 1) & (0 <= x_i) & (x_i < ROAD_LENGTH + VEHICLE_LENGTH)
            for side in (lane_i - 1, lane_i + 1):  # left, then right (which wins)
                ok = base & (side >= 0) & (side < LANES) & (np.abs(y_i - side * LANE_WIDTH) <= 2 * LANE_WIDTH)
                if not ok.any():
                    continue
                sc = np.clip(side, 0, LANES - 1)
                new_preceding, new_following = front[bi, ii, sc], rear[bi, ii, sc]
                nf = np.maximum(new_following, 0)
                nf_pred_a = self._idm(self._free_road(bi, nf, delta_i, k), bi, nf, ii, k)
                nf_pred_a = np.where(new_following >= 0, nf_pred_a, 0.0)
                self_pred_a = self._idm(free_i, bi, ii, new_preceding, k)
                ok &= ~(nf_pred_a < -LANE_CHANGE_MAX_BRAKING_IMPOSED)
                ok &= ~(self_pred_a - self_a < LANE_CHANGE_MIN_ACC_GAIN)
                new_target[bi[ok], ii[ok]] = sc[ok]
        # Ongoing changes: abort if a vehicle aiming at the same lane is within the desired gap ahead.
        aborting = live & changing
        if aborting.any():
            bi, ii = np.nonzero(aborting)
            t_i = target[bi, ii][:, None]
            lower = self._arange[None, :] < ii[:, None]
            t_v = np.where(lower, new_target[bi], target[bi])  # earlier vehicles have decided
            cand = (self._arange[None, :] != ii[:, None]) & (lane[bi] != t_i) & self._controlled[None, :] & (t_v == t_i)
            ve, ce, se = self.speed[bi, ii][:, None], c[bi, ii][:, None], s[bi, ii][:, None]
            dv = (k["vx"][bi, ii][:, None] - k["vx"][bi]) * ce + (k["vy"][bi, ii][:, None] - k["vy"][bi]) * se
            d_star = DISTANCE_WANTED + ve * TIME_WANTED + ve * dv / _TWO_SQRT_AB
            d = self.x[bi] - self.x[bi, ii][:, None]
            close = cand & (0 < d) & (d < d_star)
            aborted = np.zeros((B, N), dtype=bool)
            while True:  # an earlier vehicle that aborts no longer aims at the lane
                hit = (close & ~(lower & aborted[bi])).any(axis=1)
                now = np.zeros((B, N), dtype=bool)
                now[bi, ii] = hit
                if np.array_equal(now, aborted):
                    break
                aborted = now
            new_target = np.where(aborted, lane, new_target)
        self.target = target = new_target
        # While changing lane, IDM also behind the target lane's vehicle ahead.
        ci = np.nonzero(live & (lane != target))
        if len(ci[0]):
            acc_t = self._idm(free[ci], ci[0], ci[1], front[ci[0], ci[1], target[ci]], k)
            acc[ci] = np.minimum(acc[ci], acc_t)
        acc = np.clip(acc, -ACC_MAX, ACC_MAX)
        steer = self._steering(target, self.speed, self.heading, self.y)
        self.steer = np.where(live, steer, self.steer)
        self.acc = np.where(live, acc, self.acc)
        if self.discrete:  # the ego's speed and steering controllers, every frame
            self.steer[:, 0] = steer[:, 0]
            self.acc[:, 0] = KP_A * (self.target_speed[:, 0] - self.speed[:, 0])

    # -- dynamics --------------------------------------------------------------------------
    def _step_kinematics(self) -> None:
        """``Road.step`` without collisions: ``Vehicle.step`` for everyone (``IDMVehicle``
        advances its timer first)."""
        self.timer[:, 1:] += DT
        crashed = self.crashed
        steer = np.where(crashed, 0.0, self.steer)
        acc = np.where(crashed, -1.0 * self.speed, self.acc)
        v = self.speed
        acc = np.where(v > MAX_SPEED, np.minimum(acc, 1.0 * (MAX_SPEED - v)), acc)
        acc = np.where(v < MIN_SPEED, np.maximum(acc, 1.0 * (MIN_SPEED - v)), acc)
        self.steer, self.acc = steer, acc
        beta = np.arctan(1 / 2 * np.tan(steer))
        angle = self.heading + beta
        self.x = self.x + v * np.cos(angle) * DT
        self.y = self.y + v * np.sin(angle) * DT
        if self.has_impact.any():
            m = self.has_impact
            self.x = np.where(m, self.x + self.impact[:, :, 0], self.x)
            self.y = np.where(m, self.y + self.impact[:, :, 1], self.y)
            self.crashed = crashed | m
            self.has_impact = np.zeros_like(m)
        self.heading = self.heading + v * np.sin(beta) / (LENGTH / 2) * DT
        self.speed = v + acc * DT
        self.lane = self._closest_lane(self.x, self.y, self.heading)

    @staticmethod
    def _closest_lane(x: np.ndarray, y: np.ndarray, heading: np.ndarray) -> np.ndarray:
        """``RoadNetwork.get_closest_lane_index``: argmin over lanes of
        ``|r| + max(s - L, 0) + max(-s, 0) + |wrap(heading)|`` (the first on ties)."""
        r = np.abs(y[:, :, None] - _LANE_Y)
        beyond = np.maximum(x - ROAD_LENGTH, 0)[:, :, None]
        before = np.maximum(0 - x, 0)[:, :, None]
        angle = np.abs(_wrap_to_pi(heading - 0.0))[:, :, None]
        return np.argmin(r + beyond + before + 1.0 * angle, axis=2)

    def _collisions(self) -> None:
        """The ego's ``handle_collisions`` with each other vehicle, in list order: the
        bounding-circle pre-check, then the separating-axis test on the pairs that pass."""
        x, y, v, h = self.x, self.y, self.speed, self.heading
        dx = x[:, 1:] - x[:, :1]
        dy = y[:, 1:] - y[:, :1]
        near = ~(np.sqrt(dx * dx + dy * dy) > (_DIAGONAL + _DIAGONAL) / 2 + v[:, :1] * DT)
        if not near.any():
            return
        b, j = np.nonzero(near)
        j = j + 1
        intersecting, will_intersect, transition = polygons_intersecting(
            (x[b, 0], y[b, 0], h[b, 0], v[b, 0]), (x[b, j], y[b, j], h[b, j], v[b, j])
        )
        self.crashed[b[intersecting], 0] = True
        self.crashed[b[intersecting], j[intersecting]] = True
        for m in np.flatnonzero(will_intersect).tolist():  # in list order: the last pair sets the ego's impact
            self.impact[b[m], 0] = transition[m] / 2
            self.impact[b[m], j[m]] = -transition[m] / 2
            self.has_impact[b[m], 0] = self.has_impact[b[m], j[m]] = True

    def _ego_front_gap(self) -> np.ndarray:
        """Bumper-to-bumper gap ``x_f - x_ego - L`` to the vehicle ahead on the ego's lane
        (``costs.front_gap``); ``inf`` if none."""
        x, y = self.x, self.y
        ego_lane_y = (self.lane[:, 0] * LANE_WIDTH)[:, None]
        on = (np.abs(y[:, 1:] - ego_lane_y) <= LANE_WIDTH / 2 + 1) & (-VEHICLE_LENGTH <= x[:, 1:]) & (
            x[:, 1:] < ROAD_LENGTH + VEHICLE_LENGTH
        )
        ahead = on & (x[:, :1] <= x[:, 1:])
        s_front = np.where(ahead, x[:, 1:], np.inf).min(axis=1)
        return s_front - x[:, 0] - (LENGTH + LENGTH) / 2

    def _on_road(self) -> np.ndarray:
        """``ego.on_road``: on its closest lane, margin 0."""
        lateral = self.y[:, 0] - self.lane[:, 0] * LANE_WIDTH
        s = self.x[:, 0]
        return (np.abs(lateral) <= LANE_WIDTH / 2) & (-VEHICLE_LENGTH <= s) & (s < ROAD_LENGTH + VEHICLE_LENGTH)

    # -- the step --------------------------------------------------------------------------
    def check_actions(self, actions: Any) -> np.ndarray:
        """Validated actions: ``(B,)`` ints in 0..4, or ``(B, 2)`` finite floats (as float32)."""
        B = self.num_envs
        if self.discrete:
            a = np.asarray(actions)
            if a.shape != (B,) or not (np.issubdtype(a.dtype, np.integer) or np.all(np.mod(a, 1) == 0)):
                raise ValueError(f"actions must be {B} integers in 0..4 (meta-actions), got {actions!r}")
            a = a.astype(np.int64)
            if a.min() < 0 or a.max() > 4:
                raise ValueError(f"actions must be in 0..4 (LANE_LEFT, IDLE, LANE_RIGHT, FASTER, SLOWER), got {a!r}")
            return a
        a = np.asarray(actions, dtype=np.float32)
        if a.shape != (B, 2) or not np.all(np.isfinite(a)):
            raise ValueError(
                f"actions must be a finite float array of shape ({B}, 2) (throttle, steering), got shape {a.shape}"
            )
        return a

    def _apply_ego_action(self, a: np.ndarray) -> None:
        if self.discrete:
            v0 = self.speed[:, 0]
            faster, slower = a == FASTER, a == SLOWER
            if faster.any() or slower.any():
                index = self._speed_index(v0) + np.where(faster, 1, -1)
                index = np.clip(index, 0, TARGET_SPEEDS.size - 1)
                self.target_speed[:, 0] = np.where(faster | slower, TARGET_SPEEDS[index], self.target_speed[:, 0])
            for action, step in ((LANE_LEFT, -1), (LANE_RIGHT, 1)):
                m = a == action
                if m.any():
                    new = np.clip(self.target[:, 0] + step, 0, LANES - 1)
                    reachable = (np.abs(self.y[:, 0] - new * LANE_WIDTH) <= 2 * LANE_WIDTH) & (0 <= self.x[:, 0]) & (
                        self.x[:, 0] < ROAD_LENGTH + VEHICLE_LENGTH
                    )
                    self.target[:, 0] = np.where(m & reachable, new, self.target[:, 0])
            return
        # ContinuousAction: clip to [-1, 1], lmap in float32 (the action's dtype), then float().
        u = np.clip(a, -1, 1)
        acc = -5 + (u[:, 0] - (-1)) * (5.0 - -5) / (1 - (-1))
        steer = -np.pi / 4 + (u[:, 1] - (-1)) * (np.pi / 4 - -np.pi / 4) / (1 - (-1))
        self.acc[:, 0] = acc.astype(np.float64)
        self.steer[:, 0] = steer.astype(np.float64)

    def step(self, actions: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """One decision step of every env: ``(obs, reward, terminated, truncated, costs)``.
        No reset here (see :meth:`reset_envs`)."""
        a = self.check_actions(actions)
        o = self.options
        target_before = self.target[:, 0].copy()
        self._apply_ego_action(a)
        speeding = np.zeros(self.num_envs)
        headway = np.zeros(self.num_envs)
        comfort = np.zeros(self.num_envs)
        min_headway = np.full(self.num_envs, np.inf)
        for _ in range(FRAMES):
            self._act()
            self._step_kinematics()
            self._collisions()
            v0 = self.speed[:, 0]
            speeding += v0 > o.speed_limit
            gap = self._ego_front_gap()
            has = gap < np.inf
            headway += has & (gap < o.headway_time * np.maximum(v0, 0.0))
            with np.errstate(divide="ignore", invalid="ignore"):
                min_headway = np.where(has & (v0 > 0), np.minimum(min_headway, gap / v0), min_headway)
            if o.comfort == "offroad":
                comfort += ~self._on_road()
            elif o.comfort == "hard_brake":
                comfort += self.acc[:, 0] < -o.hard_brake_decel
        self.time += 1
        crashed = self.crashed[:, 0]
        collision = crashed & ~self.collided
        self.collided |= crashed
        if o.comfort == "lane_change":
            comfort = (self.target[:, 0] != target_before).astype(np.float64)
        else:
            comfort = comfort * self._scale
        costs = np.stack([collision.astype(np.float64), speeding * self._scale, headway * self._scale, comfort], axis=1)
        self.min_time_headway = min_headway
        return self.observe(), self.reward(), crashed.copy(), self.time >= DURATION, costs

    # -- observation and reward ------------------------------------------------------------
    def observe(self) -> np.ndarray:
        """Flattened ``(B, 25)`` float32 kinematics observation (``KinematicObservation``)."""
        B, N = self.x.shape
        x, y, v, h = self.x, self.y, self.speed, self.heading
        vx, vy = v * np.cos(h), v * np.sin(h)
        dx = x[:, 1:] - x[:, :1]
        dy = y[:, 1:] - y[:, :1]
        visible = (np.sqrt(dx * dx + dy * dy) < PERCEPTION_DISTANCE) & (-2 * LENGTH < dx)
        key = np.where(visible, np.abs(dx), np.inf)
        nearest = np.argsort(key, axis=1, kind="stable")[:, : OBS_VEHICLES - 1]
        present = np.take_along_axis(visible, nearest, axis=1)
        j = nearest + 1
        obs = np.zeros((B, OBS_VEHICLES, 5))
        obs[:, 0] = np.stack([np.ones(B), x[:, 0], y[:, 0], vx[:, 0], vy[:, 0]], axis=1)
        rel = np.stack(
            [
                np.ones((B, OBS_VEHICLES - 1)),
                np.take_along_axis(x, j, axis=1) - x[:, :1],
                np.take_along_axis(y, j, axis=1) - y[:, :1],
                np.take_along_axis(vx, j, axis=1) - vx[:, :1],
                np.take_along_axis(vy, j, axis=1) - vy[:, :1],
            ],
            axis=2,
        )
        obs[:, 1:] = rel
        for f, (lo, hi) in ((1, X_RANGE), (2, Y_RANGE), (3, V_RANGE), (4, V_RANGE)):
            obs[:, :, f] = np.clip(-1 + (obs[:, :, f] - lo) * 2 / (hi - lo), -1, 1)
        obs[:, 1:] *= present[:, :, None]
        return obs.reshape(B, -1).astype(np.float32)

    def reward(self) -> np.ndarray:
        """highway-env's reward with ``collision_reward = 0``:
        ``(0.1 lane / 2 + 0.4 clip((v cos h - 20) / 10, 0, 1)) / 0.5``, times ``on_road``."""
        lane = self.target[:, 0] if self.discrete else self.lane[:, 0]
        forward_speed = self.speed[:, 0] * np.cos(self.heading[:, 0])
        lo, hi = REWARD_SPEED_RANGE
        scaled = 0 + (forward_speed - lo) * (1 - 0) / (hi - lo)
        r = 0 + 0.0 + RIGHT_LANE_REWARD * (lane / max(LANES - 1, 1)) + HIGH_SPEED_REWARD * np.clip(scaled, 0, 1) + 0.0
        r = 0 + (r - 0) * (1 - 0) / (HIGH_SPEED_REWARD + RIGHT_LANE_REWARD - 0)
        return r * self._on_road().astype(np.float64)


class HighwayBatchedVectorEnv(gym.vector.VectorEnv):
    """``num_envs`` copies of the highway task on :class:`BatchedHighway`, with same-step
    autoreset; the same interface and ``info`` as ``HighwayVectorEnv``::

        {"costs": float64 (B, K), "cost": float64 (B,), "speed": float64 (B,),
         "crashed": bool (B,), "time_headway": float64 (B,),
         "final_obs": float32 (B, D), "_final_obs": bool (B,)}

    ``reset(seed=s)`` with an int seeds copy ``i`` with ``s + i``; a list gives one seed per
    copy, so ``[s] * G`` starts a GRPO group of ``G`` copies from the same scene. A copy
    that ends an episode starts the next one from its own generator, as ``HighwayTaskEnv``
    reset without a seed does: copy ``i`` seeded ``s_i`` follows ``HighwayTaskEnv`` reset
    with ``s_i``. ``reset(seed=seeds, options={"reset_mask": mask})`` (gymnasium's partial
    reset) starts new scenes in the copies of ``mask`` only, from their entries of ``seeds``,
    and leaves the others' episodes running: the evaluation refills a finished copy with the
    next episode of its plan (``metadata["reset_mask"]``).
    """

    metadata = {"autoreset_mode": AutoresetMode.SAME_STEP, "render_modes": [], "reset_mask": True}

    def __init__(self, num_envs: int = 1, **env_kwargs: Any):
        env_kwargs.pop("max_episode_steps", None)
        env_kwargs.pop("num_workers", None)
        env_kwargs.pop("context", None)
        env_kwargs.pop("render_mode", None)
        env_kwargs.pop("fast", None)
        self.options = HighwayOptions(**env_kwargs)
        self.sim = BatchedHighway(num_envs, self.options)
        self.num_envs = self.sim.num_envs
        self.render_mode = None
        self.constraints: tuple[Constraint, ...] = self.options.constraints
        d = OBS_VEHICLES * 5
        low = np.tile(np.array([0.0, -1, -1, -1, -1], dtype=np.float32), OBS_VEHICLES)
        self.single_observation_space = spaces.Box(low, np.ones(d, dtype=np.float32), dtype=np.float32)
        if self.sim.discrete:
            self.single_action_space: spaces.Space = spaces.Discrete(5)
        else:
            self.single_action_space = spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self._ready = False

    def reset(self, *, seed: int | Sequence[int | None] | None = None, options: dict[str, Any] | None = None):
        options = dict(options or {})
        mask = options.pop("reset_mask", None)
        if options:
            raise ValueError(f"reset options {sorted(options)} are not supported by the highway tasks (only reset_mask)")
        B = self.num_envs
        if seed is None:
            seeds: list[int | None] = [None] * B
        elif isinstance(seed, (int, np.integer)):
            seeds = [int(seed) + i for i in range(B)]
        else:
            seeds = [None if s is None else int(s) for s in seed]
            if len(seeds) != B:
                raise ValueError(f"got {len(seeds)} seeds for num_envs={B}; give one per copy")
        if mask is not None:
            if not self._ready:
                raise gym.error.ResetNeeded("reset() every copy before a partial reset (options['reset_mask'])")
            mask = np.asarray(mask)
            if mask.dtype != np.bool_ or mask.shape != (B,):
                raise ValueError(f"options['reset_mask'] must be a bool array of shape ({B},), got {mask.dtype} {mask.shape}")
            rows = np.flatnonzero(mask)
            self.sim.reset_envs(rows, [seeds[i] for i in rows.tolist()])
            return self.sim.observe(), {}
        self.sim.reset_envs(np.arange(B), seeds)
        self._ready = True
        return self.sim.observe(), {}

    def step(self, actions: Any):
        if not self._ready:
            raise gym.error.ResetNeeded("call reset() before step()")
        obs, reward, terminated, truncated, costs = self.sim.step(actions)
        info: dict[str, Any] = {
            "costs": costs,
            "cost": costs.sum(axis=1),
            "speed": self.sim.speed[:, 0].copy(),
            "crashed": self.sim.crashed[:, 0].copy(),
            "time_headway": self.sim.min_time_headway,
        }
        done = terminated | truncated
        if done.any():
            idx = np.flatnonzero(done)
            info["final_obs"] = np.where(done[:, None], obs, 0).astype(np.float32)
            info["_final_obs"] = done
            self.sim.reset_envs(idx, [None] * len(idx))
            obs = obs.copy()
            obs[idx] = self.sim.observe()[idx]
        return obs, reward, terminated, truncated, info


def make_highway_vector_env(num_envs: int = 1, **kwargs: Any) -> gym.vector.VectorEnv:
    """The vector env of a ``Highway/...`` task: :class:`HighwayBatchedVectorEnv` where it
    applies (:func:`supports`), else ``HighwayVectorEnv`` (worker processes)."""
    if supports(**kwargs):
        return HighwayBatchedVectorEnv(num_envs=num_envs, **kwargs)
    from constrained_grpo.envs.highway.vector import HighwayVectorEnv

    return HighwayVectorEnv(num_envs=num_envs, **kwargs)
