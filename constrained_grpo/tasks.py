"""Making task envs by id, and rolling out evaluation episodes.

Task families register their ids on ``import constrained_grpo.envs``; the helpers
here import that package on demand (by name, so the core never imports a task family
statically) and give one place where an unknown id gets a helpful error.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import os
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from constrained_grpo.constraints import Constraint, costs_from_info, get_constraints
from constrained_grpo.registry import AgentContractError, EvalResult
from constrained_grpo.schema import TaskMeta

__all__ = ["FinalStepCosts", "check_task_id", "ensure_tasks_registered", "import_user_modules", "known_task_ids", "split_task_id", "task_info", "task_meta", "make_env", "make_vec_env", "rollout_episodes", "task_constraints"]

TASK_PACKAGE = "constrained_grpo.envs"
#: Modules (comma-separated) imported with the task families, in this process and in every
#: run's worker process: ``cgrpo --import MODULE`` sets it so user tasks register everywhere.
IMPORT_ENV = "CGRPO_IMPORT"
#: Ids that user modules registered when this process imported them.
_USER_IDS: set[str] = set()


def import_user_modules(modules: Sequence[str] = ()) -> list[str]:
    """Import ``modules`` and those named in ``$CGRPO_IMPORT`` (user tasks and algorithms
    register themselves on import); record ``modules`` in ``$CGRPO_IMPORT`` for worker processes.

    Raises ``ImportError`` with one line naming the module and the fix.
    """
    listed = [m for m in os.environ.get(IMPORT_ENV, "").split(",") if m]
    names = list(dict.fromkeys([*listed, *modules]))
    for name in names:
        before = set(gym.registry)
        try:
            importlib.import_module(name)
            _USER_IDS.update(set(gym.registry) - before)
        except ImportError as err:
            raise ImportError(
                f"--import {name}: cannot import it ({err}); put its folder on PYTHONPATH "
                "(e.g. PYTHONPATH=. cgrpo ...) or install it"
            ) from None
        except AgentContractError as err:  # an algorithm it registers breaks the agent contract
            raise ImportError(f"--import {name}: {err}") from None
    if names:
        os.environ[IMPORT_ENV] = ",".join(names)
    return names


def ensure_tasks_registered() -> None:
    """Import the task families, and the user modules of ``$CGRPO_IMPORT``, so that their
    ids are in gymnasium's registry."""
    importlib.import_module(TASK_PACKAGE)
    if os.environ.get(IMPORT_ENV):
        import_user_modules()


def task_info(env_id: str) -> Any:
    """The facts of task ``env_id`` (``constrained_grpo.envs.task_info``: its family's
    evaluation plan, references, text or not, pip extra and default settings), the one
    lookup every part uses; raises ``gymnasium.error.UnregisteredEnv`` for an unknown id."""
    ensure_tasks_registered()
    return importlib.import_module(TASK_PACKAGE).task_info(env_id)


@functools.lru_cache(maxsize=None)
def task_meta(task: str, with_optimum: bool = True) -> TaskMeta:
    """Constraints, family name (``user`` for a gymnasium-only id) and, if the env offers
    ``optimum()``, the exact optimum of ``task``.

    Solving the optimum is a linear program that takes seconds (minutes for the largest
    grids), so a sweep calls this once per task in the driver and hands it to the runs; a
    registered task whose family keeps its optimum (``Family.optima``, as the LP solved it)
    takes it from there.
    """
    family = task_info(task).family
    known = family.optima.get(task) if with_optimum else None
    env = make_env(task)
    try:
        constraints = get_constraints(env)
        solver = getattr(env.unwrapped, "optimum", None) if with_optimum and known is None else None
        opt = solver() if callable(solver) else None
    finally:
        env.close()
    if known is not None:
        return TaskMeta(task, family.name, constraints, float(known["constrained_return"]),
                        float(known["unconstrained_return"]), tuple(float(m) for m in known["multipliers"]))
    if opt is None:
        return TaskMeta(task, family.name, constraints)
    return TaskMeta(
        task,
        task_info(task).family.name,
        constraints,
        float(opt.constrained_return),
        float(opt.unconstrained_return),
        tuple(float(m) for m in opt.multipliers),
    )


def split_task_id(env_id: str) -> tuple[str | None, str]:
    """Gymnasium's ``"module:Task-v0"`` syntax: ``("module", "Task-v0")``; a plain id: ``(None, id)``."""
    module, colon, task = env_id.rpartition(":")
    return (module, task) if colon and module else (None, env_id)


def known_task_ids() -> list[str]:
    """The suite's task ids followed by the ids that user modules registered (``--import``, or
    ``register_task`` in a module imported otherwise)."""
    ensure_tasks_registered()
    package = importlib.import_module(TASK_PACKAGE)
    suite = package.list_tasks()
    declared = set(package.user_tasks())  # register_task, in a module imported any way
    return suite + sorted((_USER_IDS | declared) - set(suite))


def check_task_id(env_id: str) -> None:
    """Raise ``gymnasium.error.UnregisteredEnv`` (one line, with "did you mean") unless ``env_id``
    (or ``module:id``, whose module is imported first) is a registered task."""
    _check_id(env_id)


def _check_id(env_id: str) -> None:
    module, task = split_task_id(env_id)
    if module is not None:
        import_user_modules([module])
    ensure_tasks_registered()
    if task not in gym.registry:
        from constrained_grpo.options import did_you_mean

        known = known_task_ids()
        raise gym.error.UnregisteredEnv(
            f"unknown task id {task!r}{did_you_mean([task], known)}; registered tasks: {known} (run `cgrpo envs` "
            "to list them with their constraints; a task of your own: --import MODULE or MODULE:Task-v0)"
        )


#: What gymnasium says when it makes an id of which a later version is registered. The
#: suite's versions are distinct tasks (Highway-v1 and -v2 have other limits, each its own
#: results), not upgrades, so the advice to upgrade is left out.
_OUT_OF_DATE = r".*The environment \S+ is out of date\. You should consider upgrading"


@contextlib.contextmanager
def _without_upgrade_advice() -> Iterator[None]:
    """Leave out gymnasium's :data:`_OUT_OF_DATE` advice while making an env."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_OUT_OF_DATE, category=DeprecationWarning)
        yield


def make_env(env_id: str, **kwargs: Any) -> gym.Env:
    """``gymnasium.make(env_id, **kwargs)`` after registering the task families."""
    _check_id(env_id)
    with _without_upgrade_advice():
        return gym.make(split_task_id(env_id)[1], **kwargs)


def make_vec_env(env_id: str, num_envs: int, **kwargs: Any) -> gym.vector.VectorEnv:
    """A vector env of ``num_envs`` copies, with same-step autoreset.

    Uses the task's own batched implementation (``vector_entry_point``) where it has one,
    otherwise a ``SyncVectorEnv``. The autoreset mode is pinned to ``SAME_STEP``: a
    finished episode's last observation is in ``info["final_obs"]`` and the returned
    observation already belongs to the next episode.
    """
    _check_id(env_id)
    env_id = split_task_id(env_id)[1]
    spec = gym.spec(env_id)
    with _without_upgrade_advice():
        if spec.vector_entry_point is not None:
            return gym.make_vec(env_id, num_envs=num_envs, vectorization_mode="vector_entry_point", **kwargs)
        vec = gym.make_vec(
            env_id,
            num_envs=num_envs,
            vectorization_mode="sync",
            vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP},
            **kwargs,
        )
    return FinalStepCosts(vec)


class FinalStepCosts(gym.vector.VectorWrapper):
    """Puts a finished copy's last-step costs back into ``info["costs"]`` / ``info["cost"]``.

    ``SyncVectorEnv`` with same-step autoreset resets a finished copy inside ``step`` and
    reports the reset's info in row i, so the costs of the step that ended the episode
    would read 0 there; it keeps them only in ``info["final_info"]``. The batched twins
    report the step's costs in ``info["costs"]`` for every row, and so does this wrapper.
    """

    def step(self, actions: Any):
        obs, reward, terminated, truncated, info = self.env.step(actions)
        final = info.get("final_info")
        if final is not None and "costs" in final:
            done = np.asarray(info.get("_final_info", terminated | truncated), dtype=bool)
            k = np.asarray(final["costs"]).shape[-1]
            costs = np.zeros((self.num_envs, k)) if "costs" not in info else np.array(info["costs"], dtype=np.float64)
            costs[done] = np.asarray(final["costs"], dtype=np.float64)[done]
            info["costs"], info["_costs"] = costs, np.ones(self.num_envs, dtype=bool)
            info["cost"], info["_cost"] = costs.sum(axis=1), np.ones(self.num_envs, dtype=bool)
        return obs, reward, terminated, truncated, info


def task_constraints(env_id: str, **kwargs: Any) -> tuple[Constraint, ...]:
    """The constraints of task ``env_id`` made with ``kwargs``."""
    env = make_env(env_id, **kwargs)
    try:
        return get_constraints(env)
    finally:
        env.close()


def rollout_episodes(
    env: gym.Env,
    act: Callable[[np.ndarray], Any],
    n_episodes: int,
    seed: int | None = None,
    on_reset: Callable[[int], None] | None = None,
) -> EvalResult:
    """Run ``n_episodes`` full episodes of ``act(obs) -> action`` on ``env``.

    Episode ``i`` starts from ``reset(seed=seed + i)`` when ``seed`` is given, so an
    evaluation is reproducible and independent of training's random stream; ``on_reset(seed
    + i)`` is called after that reset (a mixture policy picks the episode's member there).
    """
    if n_episodes < 1:
        raise ValueError(f"n_episodes must be >= 1, got {n_episodes}")
    k = len(get_constraints(env))
    returns = np.zeros(n_episodes)
    costs = np.zeros((n_episodes, k))
    lengths = np.zeros(n_episodes, dtype=np.int64)
    for i in range(n_episodes):
        obs, _ = env.reset(seed=None if seed is None else seed + i)
        if on_reset is not None and seed is not None:
            on_reset(seed + i)
        done = False
        while not done:
            obs, reward, terminated, truncated, info = env.step(act(obs))
            returns[i] += float(reward)
            costs[i] += costs_from_info(info, k)
            lengths[i] += 1
            done = terminated or truncated
    return EvalResult(returns=returns, costs=costs, lengths=lengths)
