"""The constrained highway-driving task: highway-env's scenarios with a cost vector.

``HighwayTaskEnv`` owns a highway-env simulator (:mod:`.scenarios`) and turns it into a
task of the suite (docs/architecture.md, Contract 1):

* observation: highway-env's kinematics observation (``V`` vehicles x ``F`` features,
  normalised as highway-env does), flattened to a float32 vector for MLP policies;
* action: highway-env's discrete meta-actions or its continuous ``[throttle, steering]``;
* reward: highway-env's own reward with ``collision_reward = 0``: the collision penalty
  has become the ``collision`` cost, the rest (speed, lane, merging, arrival terms and
  highway-env's normalisation) is unchanged;
* costs: ``collision``, ``speeding``, ``headway`` and one rule/comfort cost
  (definitions and defaults in :mod:`.options`), measured at every simulation frame.

``info`` of a step::

    {"costs": float64 (4,), "cost": float, "speed": float (m/s), "crashed": bool,
     "time_headway": float (smallest gap / speed in the step, s; inf if nobody ahead)}

``reset(seed=s)`` seeds highway-env's generator, from which every random draw of the
scene and the traffic comes, so ``s`` fixes the whole episode given the actions.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

try:
    import highway_env  # noqa: F401  (registers nothing we use; checks the install)
except ImportError as exc:  # pragma: no cover - exercised only without highway-env
    raise gym.error.DependencyNotInstalled(
        'the highway tasks need highway-env; install it with `pip install -e ".[highway]"`'
    ) from exc

from highway_env.envs.common.action import ContinuousAction, DiscreteMetaAction
from highway_env.envs.common.observation import KinematicObservation

from constrained_grpo.constraints import Constraint
from constrained_grpo.envs.highway.costs import CostMonitor
from constrained_grpo.envs.highway.options import DEFAULT_LIMITS, HighwayOptions, closest
from constrained_grpo.envs.highway.scenarios import SIMS

__all__ = ["HighwayTaskEnv", "build_sim_config"]

#: Features of highway-env's kinematics observation.
KINEMATIC_FEATURES: tuple[str, ...] = (
    "presence", "x", "y", "vx", "vy", "heading", "cos_h", "sin_h", "cos_d", "sin_d", "long_off", "lat_off", "ang_off",
)
_UNIT_FEATURES = ("cos_h", "sin_h", "cos_d", "sin_d")
_ACTION_TYPES = {"discrete": ("DiscreteMetaAction", DiscreteMetaAction), "continuous": ("ContinuousAction", ContinuousAction)}


def _keys_of(cls: type, defaults: Mapping[str, Any]) -> set[str]:
    """Keys an observation/action type accepts: its ``__init__`` parameters and the defaults'."""
    params = set(inspect.signature(cls.__init__).parameters) - {"self", "env", "kwargs"}
    return params | set(defaults) | {"type"}


def _check_keys(where: str, given: Mapping[str, Any], known: set[str]) -> None:
    unknown = sorted(k for k in given if k not in known)
    if unknown:
        hints = "".join(closest(k, sorted(known)) for k in unknown)
        raise ValueError(
            f"unknown highway-env {where} key(s) {unknown}{hints}; highway-env would silently "
            f"ignore them. Known keys: {sorted(known)}"
        )


def build_sim_config(options: HighwayOptions) -> dict[str, Any]:
    """The highway-env config of the task's simulator: its defaults, the user's overrides
    (validated, with ``observation`` and ``action`` merged key by key) and
    ``collision_reward = 0``.

    Raises ``ValueError`` on any key highway-env does not know (its own ``configure``
    accepts typos silently) and on settings the task cannot honour.
    """
    sim_cls = SIMS[options.scenario]
    defaults = sim_cls.default_config()
    user = dict(options.config)
    _check_keys(f"config (scenario {options.scenario!r})", user, set(defaults))
    if "collision_reward" in user:
        raise ValueError(
            "config['collision_reward'] cannot be set: the collision penalty is the `collision` cost of this "
            "task; bound it with limits={'collision': d} (a violation probability) instead"
        )
    if user.get("controlled_vehicles", 1) != 1:
        raise ValueError(f"config['controlled_vehicles'] must be 1 (single-agent tasks), got {user['controlled_vehicles']!r}")
    if "duration" in user and not (isinstance(user["duration"], (int, float)) and user["duration"] > 0):
        raise ValueError(f"config['duration'] must be a positive number of seconds, got {user['duration']!r}")
    sim_f = user.get("simulation_frequency", defaults["simulation_frequency"])
    pol_f = user.get("policy_frequency", defaults["policy_frequency"])
    if not (isinstance(sim_f, int) and isinstance(pol_f, int) and 0 < pol_f <= sim_f):
        raise ValueError(
            f"need integer frequencies with 0 < policy_frequency <= simulation_frequency, got "
            f"policy_frequency={pol_f!r}, simulation_frequency={sim_f!r}"
        )

    obs_user = dict(user.pop("observation", None) or {})
    _check_keys("observation config", obs_user, _keys_of(KinematicObservation, defaults["observation"]))
    if obs_user.get("type", "Kinematics") != "Kinematics":
        raise ValueError(
            f"observation type {obs_user['type']!r} is not supported: the highway tasks observe "
            "'Kinematics' (flattened for MLPs); drop config['observation']['type']"
        )
    observation = {**defaults["observation"], **obs_user}
    features = list(observation.get("features") or KinematicObservation.FEATURES)
    bad = [f for f in features if f not in KINEMATIC_FEATURES]
    if bad:
        raise ValueError(f"unknown kinematics feature(s) {bad}; choose from {list(KINEMATIC_FEATURES)}")
    count = observation.get("vehicles_count", 5)
    if not isinstance(count, int) or count < 2:
        raise ValueError(f"observation vehicles_count must be an integer >= 2 (the ego and others), got {count!r}")

    type_name, action_cls = _ACTION_TYPES[options.action_mode]
    act_user = dict(user.pop("action", None) or {})
    base_action = dict(defaults["action"]) if options.action_mode == "discrete" else {"type": type_name}
    _check_keys("action config", act_user, _keys_of(action_cls, base_action))
    if act_user.get("type", type_name) != type_name:
        raise ValueError(
            f"action type {act_user['type']!r} does not match action_mode={options.action_mode!r} "
            f"({type_name}); choose the action type with the action_mode keyword"
        )
    action = {**base_action, **act_user}
    if options.comfort == "lane_change" and not action.get("lateral", True):
        raise ValueError("comfort='lane_change' needs lateral meta-actions, but config['action']['lateral'] is False")

    return {**user, "observation": observation, "action": action, "collision_reward": 0}


def _observation_bounds(obs_type: KinematicObservation) -> tuple[np.ndarray, np.ndarray]:
    """Per-entry bounds of the flattened kinematics observation.

    ``presence`` lies in [0, 1]; a feature with a range is in [-1, 1] when highway-env
    normalises and clips it; cos/sin features are in [-1, 1]; the rest is unbounded.
    """
    ranged = set(obs_type.features_range or ("x", "y", "vx", "vy"))
    low, high = [], []
    for f in obs_type.features:
        if f == "presence":
            lo, hi = 0.0, 1.0
        elif (obs_type.normalize and obs_type.clip and f in ranged) or f in _UNIT_FEATURES:
            lo, hi = -1.0, 1.0
        else:
            lo, hi = -np.inf, np.inf
        low.append(lo)
        high.append(hi)
    rows = obs_type.vehicles_count
    return np.tile(np.array(low, dtype=np.float32), rows), np.tile(np.array(high, dtype=np.float32), rows)


class HighwayTaskEnv(gym.Env[np.ndarray, Any]):
    """A highway-env scenario as a constrained task with costs ``(collision, speeding,
    headway, <comfort>)``.

    Args:
        scenario: ``"highway"`` (``highway-fast-v0`` settings), ``"merge"``,
            ``"roundabout"`` or ``"intersection"``.
        action_mode: ``"discrete"`` (highway-env's meta-actions) or ``"continuous"``
            (``[throttle, steering]`` in [-1, 1]^2).
        comfort: the rule/comfort cost, ``"lane_change"``, ``"offroad"`` or
            ``"hard_brake"``; default: the scenario's for discrete actions, ``"offroad"``
            for continuous ones.
        speed_limit: speeding threshold, m/s (default per scenario, :data:`.options.SCENARIOS`).
        headway_time: time-headway threshold, s (default 1).
        hard_brake_decel: hard-braking threshold, m/s^2 (default 4).
        headway_limit: the declared ``headway`` limit (default 0.1; ``Highway/Highway-v1``
            declares 0.2, ``Highway/Highway-v2`` 0.13); ``limits`` overrides it like any other limit.
        collision_limit: the declared ``collision`` limit (default 0.1; ``Highway/Highway-v2``
            declares 0.05); ``limits`` overrides it like any other limit.
        limits: constraint limits, ``{name: d}`` or one per constraint (defaults in
            :data:`.options.DEFAULT_LIMITS`).
        config: highway-env config overrides; unknown keys are errors.
        fast: use the numpy observation and neighbour search (same results, faster).
        render_mode: ``None``, ``"rgb_array"`` or ``"human"`` (highway-env's renderer).
    """

    metadata = {"render_modes": ["human", "rgb_array"], "render_fps": 2}

    def __init__(
        self,
        scenario: str = "highway",
        action_mode: str = "discrete",
        comfort: str | None = None,
        speed_limit: float | None = None,
        headway_time: float = 1.0,
        hard_brake_decel: float = 4.0,
        headway_limit: float = DEFAULT_LIMITS["headway"],
        collision_limit: float = DEFAULT_LIMITS["collision"],
        limits: Mapping[str, float] | list[float] | tuple[float, ...] | None = None,
        config: Mapping[str, Any] | None = None,
        fast: bool = True,
        render_mode: str | None = None,
    ):
        self.options = HighwayOptions(
            scenario=scenario,
            action_mode=action_mode,
            comfort=comfort,
            speed_limit=speed_limit,
            headway_time=headway_time,
            hard_brake_decel=hard_brake_decel,
            headway_limit=headway_limit,
            collision_limit=collision_limit,
            limits=limits,
            config=dict(config or {}),
            fast=fast,
        )
        if render_mode not in (None, *self.metadata["render_modes"]):
            raise ValueError(f"render_mode={render_mode!r}; choose None or one of {self.metadata['render_modes']}")
        self.render_mode = render_mode
        self.constraints: tuple[Constraint, ...] = self.options.constraints
        sim_cls = SIMS[self.options.scenario]
        self.sim = sim_cls(config=build_sim_config(self.options), render_mode=render_mode, fast=self.options.fast)
        self.monitor = CostMonitor(self.options, self.sim)
        self.sim.frame_hook = self.monitor.on_frame
        low, high = _observation_bounds(self.sim.observation_type)
        self.observation_space = spaces.Box(low, high, dtype=np.float32)
        self.action_space = self.sim.action_space
        self._discrete = isinstance(self.action_space, spaces.Discrete)
        self._needs_reset = True

    @property
    def vehicle(self) -> Any:
        """The ego vehicle (highway-env's)."""
        return self.sim.vehicle

    def _flat(self, obs: np.ndarray) -> np.ndarray:
        # Road objects have no heading/lane offsets in highway-env (NaN there); report 0.
        return np.nan_to_num(np.asarray(obs, dtype=np.float32).reshape(-1), copy=False, nan=0.0)

    def _info(self) -> dict[str, Any]:
        ego = self.sim.vehicle
        return {"speed": float(ego.speed), "crashed": bool(ego.crashed)}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        if options:
            raise ValueError(
                f"reset options {sorted(options)} are not supported; task settings are constructor keywords"
            )
        super().reset(seed=seed)
        obs, _ = self.sim.reset(seed=seed)
        self.monitor.reset()
        self._needs_reset = False
        return self._flat(obs), self._info()

    def _check_action(self, action: Any) -> Any:
        if self._discrete:
            try:
                a = int(action)
                exact = bool(a == action)  # rejects 1.5 and "1"
            except (TypeError, ValueError):
                a, exact = -1, False
            if not exact or not 0 <= a < self.action_space.n or np.ndim(action) != 0:
                raise ValueError(
                    f"action {action!r} is not one of 0..{self.action_space.n - 1} "
                    f"({self.sim.action_type.actions})"
                )
            return a
        # The space's dtype (float32): highway-env maps the action in its dtype, so a float64
        # copy would drive differently from highway-env given the same action.
        a = np.asarray(action, dtype=self.action_space.dtype)
        if a.shape != self.action_space.shape or not np.all(np.isfinite(a)):
            raise ValueError(
                f"action {action!r} must be a finite array of shape {self.action_space.shape} "
                "(throttle, steering) in [-1, 1]"
            )
        return a

    def step(self, action: Any):
        if self._needs_reset:
            raise gym.error.ResetNeeded("call reset() before step()")
        a = self._check_action(action)
        self.monitor.begin_step()
        obs, reward, terminated, truncated, _ = self.sim.step(a)
        costs = self.monitor.end_step()
        info = self._info()
        info.update({"costs": costs, "cost": float(costs.sum()), "time_headway": self.monitor.min_time_headway})
        return self._flat(obs), float(reward), bool(terminated), bool(truncated), info

    def render(self) -> np.ndarray | None:
        if self.render_mode is None:
            return None
        return self.sim.render()

    def close(self) -> None:
        self.sim.close()

    def __repr__(self) -> str:
        o = self.options
        return f"HighwayTaskEnv(scenario={o.scenario!r}, action_mode={o.action_mode!r}, costs={list(o.cost_names)})"
