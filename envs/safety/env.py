"""Legacy-gymnasium envs as gymnasium 1.x envs that follow the cost contract.

:class:`LegacyBridgeEnv` is one env, :class:`LegacyBridgeVectorEnv` its batched twin (one
worker process steps all ``num_envs`` envs per message, same-step autoreset). Both are
generic: any legacy env id, any ``maker`` and any interpreter (docs/safety_bridge.md). With
the defaults (``python=None``) they run in the Safety-Gymnasium interpreter that
``make safety`` builds; the ``Safety/...`` ids in :mod:`.tasks` use
``maker="safety_gymnasium:make"``.

The legacy step's cost (Safety-Gymnasium's 6-tuple, or ``info["costs"]``/``info["cost"]``
of a 5-tuple) becomes ``info["costs"]`` (float64, ``(K,)``) and ``info["cost"]``; the
constraints are declared from ``cost_names`` with limit 25 each (Safety-Gymnasium's
benchmark limit) unless ``limits`` says otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from constrained_grpo.constraints import Constraint, CostContractError, make_cost_info, override_limits
from constrained_grpo.envs.safety.bridge import STEP_TIMEOUT, LegacyBridge

__all__ = ["DEFAULT_LIMIT", "LegacyBridgeEnv", "LegacyBridgeVectorEnv", "declare_constraints"]

#: The cost limit of Safety-Gymnasium's and OmniSafe's benchmarks.
DEFAULT_LIMIT = 25.0


def declare_constraints(
    cost_names: Sequence[str],
    cost_descriptions: Sequence[str] | None,
    limits: Mapping[str, float] | Sequence[float] | None,
) -> tuple[Constraint, ...]:
    """One :class:`Constraint` per legacy cost component, limit 25 unless ``limits`` overrides it."""
    names = list(cost_names)
    descriptions = list(cost_descriptions) if cost_descriptions is not None else [""] * len(names)
    if len(descriptions) != len(names):
        raise ValueError(f"got {len(descriptions)} cost_descriptions for {len(names)} cost_names {names}")
    declared = tuple(Constraint(n, DEFAULT_LIMIT, d) for n, d in zip(names, descriptions))
    return override_limits(declared, limits)


def _batch_one(value: Any) -> Any:
    """A single env's action as a batch of one (dicts and tuples of arrays too)."""
    if isinstance(value, dict):
        return {k: _batch_one(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(_batch_one(v) for v in value)
    return np.asarray(value)[None]


def _row(batch: Any, i: int) -> Any:
    if isinstance(batch, dict):
        return {k: _row(v, i) for k, v in batch.items()}
    if isinstance(batch, tuple):
        return tuple(_row(v, i) for v in batch)
    return batch[i]


def _check_costs(cost: np.ndarray, constraints: tuple[Constraint, ...], label: str) -> None:
    if cost.shape[1] != len(constraints):
        raise CostContractError(
            f"{label}: the legacy env returned {cost.shape[1]} cost(s) per step, but "
            f"{len(constraints)} constraint(s) {[c.name for c in constraints]} are declared; "
            "pass cost_names with one name per cost component"
        )


class LegacyBridgeEnv(gym.Env[Any, Any]):
    """One legacy env, run by a worker process in its own interpreter.

    Args:
        legacy_id: the id in the legacy suite, e.g. ``"SafetyPointGoal1-v0"``.
        python: the legacy interpreter; None: the Safety-Gymnasium one (``$CGRPO_SAFETY_PYTHON``,
            else the record that ``make safety`` writes).
        maker: ``"module:function"`` that makes the env in the worker, called as
            ``maker(legacy_id, **legacy_kwargs)``; ``"gymnasium:make"`` by default.
        legacy_kwargs: keywords for ``maker`` (JSON values or numeric arrays).
        pythonpath: folders put in front of the worker's ``sys.path``.
        cost_names: names of the legacy cost vector's components (one constraint each).
        cost_descriptions: one line per cost component.
        limits: ``{name: limit}`` or one limit per constraint; 25 each by default.
        startup_timeout: seconds allowed for the worker to start and make the env.
        step_timeout: seconds allowed for one reset or step reply; a worker that does not
            answer in time is killed and ``WorkerTimeout`` raised.

    ``info`` of a step: the legacy info (e.g. ``cost_hazards``), plus ``costs`` (float64
    ``(K,)``) and ``cost`` (their sum). The worker starts when the spaces, ``reset`` or
    ``step`` are first needed, and stops with :meth:`close`.
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(
        self,
        legacy_id: str,
        *,
        python: str | None = None,
        maker: str = "gymnasium:make",
        legacy_kwargs: Mapping[str, Any] | None = None,
        pythonpath: Sequence[str] = (),
        cost_names: Sequence[str] = ("cost",),
        cost_descriptions: Sequence[str] | None = None,
        limits: Mapping[str, float] | Sequence[float] | None = None,
        startup_timeout: float = 300.0,
        step_timeout: float = STEP_TIMEOUT,
        render_mode: str | None = None,
    ):
        if render_mode is not None:
            raise ValueError(
                f"render_mode={render_mode!r}: bridged envs do not render; render the legacy env in "
                "its own interpreter instead (its observations and actions are the same)"
            )
        self.render_mode = None
        self.constraints: tuple[Constraint, ...] = declare_constraints(cost_names, cost_descriptions, limits)
        self.bridge = LegacyBridge(
            legacy_id,
            python=python,
            maker=maker,
            legacy_kwargs=legacy_kwargs,
            pythonpath=pythonpath,
            num_envs=1,
            autoreset=False,
            startup_timeout=startup_timeout,
            step_timeout=step_timeout,
        )

    def _start(self) -> None:
        if self.bridge.description is None and self.spec is not None:
            self.bridge.label = f"{self.spec.id} (legacy {self.bridge.legacy_id})"
        self.bridge.start()

    @property
    def observation_space(self) -> gym.Space:  # type: ignore[override]
        self._start()
        return self.bridge.spaces[0]

    @property
    def action_space(self) -> gym.Space:  # type: ignore[override]
        self._start()
        return self.bridge.spaces[1]

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self._start()
        out = self.bridge.reset([seed], options)
        return _row(out["obs"], 0), out["infos"][0]

    def step(self, action: Any):
        self._start()
        out = self.bridge.step(_batch_one(action))
        cost = out["cost"]
        _check_costs(cost, self.constraints, self.bridge.label)
        info = out["infos"][0]
        info.update(make_cost_info(cost[0]))
        return (
            _row(out["obs"], 0),
            float(out["reward"][0]),
            bool(out["terminated"][0]),
            bool(out["truncated"][0]),
            info,
        )

    def close(self) -> None:
        self.bridge.close()
        super().close()


class LegacyBridgeVectorEnv(gym.vector.VectorEnv):
    """``num_envs`` legacy envs in ONE worker process: one round trip per vector step.

    Same keywords as :class:`LegacyBridgeEnv`. Autoreset is same-step: when env ``i``
    finishes, the returned observation starts its next episode. ``info`` of a step::

        {"costs": float64 (B, K), "cost": float64 (B,),          # this step's costs, every row
         <legacy keys>: (B,) with masks "_<key>",                 # reset info for finished rows
         "final_obs": (B, ...), "_final_obs": bool (B,),          # when any env finished
         "final_info": {...}, "_final_info": bool (B,)}           # the finished rows' step info

    ``reset(seed=s)`` seeds env ``i`` with ``s + i``; a list gives one seed per env, so
    ``[s] * G`` makes a GRPO group.
    """

    metadata: dict[str, Any] = {"autoreset_mode": AutoresetMode.SAME_STEP, "render_modes": []}

    def __init__(
        self,
        num_envs: int = 1,
        legacy_id: str = "",
        *,
        python: str | None = None,
        maker: str = "gymnasium:make",
        legacy_kwargs: Mapping[str, Any] | None = None,
        pythonpath: Sequence[str] = (),
        cost_names: Sequence[str] = ("cost",),
        cost_descriptions: Sequence[str] | None = None,
        limits: Mapping[str, float] | Sequence[float] | None = None,
        startup_timeout: float = 300.0,
        step_timeout: float = STEP_TIMEOUT,
        render_mode: str | None = None,
    ):
        if not isinstance(num_envs, (int, np.integer)) or num_envs < 1:
            raise ValueError(f"num_envs must be a positive integer, got {num_envs!r}")
        if not legacy_id:
            raise ValueError("legacy_id is required: the env id in the legacy suite, e.g. 'SafetyPointGoal1-v0'")
        if render_mode is not None:
            raise ValueError(f"render_mode={render_mode!r}: bridged envs do not render")
        self.num_envs = int(num_envs)
        self.render_mode = None
        self.constraints: tuple[Constraint, ...] = declare_constraints(cost_names, cost_descriptions, limits)
        self.bridge = LegacyBridge(
            legacy_id,
            python=python,
            maker=maker,
            legacy_kwargs=legacy_kwargs,
            pythonpath=pythonpath,
            num_envs=self.num_envs,
            autoreset=True,
            startup_timeout=startup_timeout,
            step_timeout=step_timeout,
        )
        self._batched: tuple[gym.Space, gym.Space] | None = None

    def _start(self) -> None:
        if self.bridge.description is None and self.spec is not None:
            self.bridge.label = f"{self.spec.id} x{self.num_envs} (legacy {self.bridge.legacy_id})"
        self.bridge.start()

    @property
    def single_observation_space(self) -> gym.Space:  # type: ignore[override]
        self._start()
        return self.bridge.spaces[0]

    @property
    def single_action_space(self) -> gym.Space:  # type: ignore[override]
        self._start()
        return self.bridge.spaces[1]

    def _batched_spaces(self) -> tuple[gym.Space, gym.Space]:
        if self._batched is None:
            obs, act = self.single_observation_space, self.single_action_space
            self._batched = (batch_space(obs, self.num_envs), batch_space(act, self.num_envs))
        return self._batched

    @property
    def observation_space(self) -> gym.Space:  # type: ignore[override]
        return self._batched_spaces()[0]

    @property
    def action_space(self) -> gym.Space:  # type: ignore[override]
        return self._batched_spaces()[1]

    def reset(self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None):
        if seed is None:
            seeds: list[int | None] = [None] * self.num_envs
        elif isinstance(seed, (int, np.integer)):
            seeds = [int(seed) + i for i in range(self.num_envs)]
        else:
            seeds = list(seed)
            if len(seeds) != self.num_envs:
                raise ValueError(f"got {len(seeds)} seeds for {self.num_envs} envs")
        if seeds[0] is not None:
            self._np_random, self._np_random_seed = gym.utils.seeding.np_random(seeds[0])
        self._start()
        out = self.bridge.reset(seeds, options)
        infos: dict[str, Any] = {}
        for i, info in enumerate(out["infos"]):
            if info:
                infos = self._add_info(infos, info, i)
        return out["obs"], infos

    def step(self, actions: Any):
        self._start()
        out = self.bridge.step(actions)
        cost = out["cost"]
        _check_costs(cost, self.constraints, self.bridge.label)
        infos: dict[str, Any] = {}
        for i, info in enumerate(out["infos"]):
            if info:
                infos = self._add_info(infos, info, i)
        infos["costs"] = cost
        infos["cost"] = cost.sum(axis=1)
        if "final_obs" in out:
            done = np.logical_or(out["terminated"], out["truncated"])
            final_info: dict[str, Any] = {}
            for i, info in enumerate(out["final_infos"]):
                if info is not None:
                    final_info = self._add_info(final_info, {**info, **make_cost_info(cost[i])}, i)
            infos["final_obs"], infos["_final_obs"] = out["final_obs"], done
            infos["final_info"], infos["_final_info"] = final_info, done
        return out["obs"], out["reward"], out["terminated"], out["truncated"], infos

    def close_extras(self, **kwargs: Any) -> None:
        self.bridge.close()
