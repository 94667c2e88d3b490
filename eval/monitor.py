"""Live monitoring of runs: the same metric tags for every algorithm, from the harness's log.

Every agent's ``learn`` log record passes through :class:`~constrained_grpo.eval.storage.ProgressLog`
(Contract 2), which flattens it into a progress.csv row; the sinks here read that row, so the
GRPO families, the SB3 baselines and user algorithms all write the same tags:

=====================  ===================================================================
``return``             mean episodic return of the iteration's episodes
``cost/<name>``        mean episodic cost k; ``limit/<name>`` its limit d_k
``lambda/<name>``      multiplier lambda_k (constrained algorithms)
``eff_w/<component>``  effective weight of the reward and of each cost (GRPO aggregators)
``loss/<key>``         every logged key that names a loss (``loss``, ``policy_loss``, ...)
``kl/<key>``           every logged key that names a KL estimate (``kl``, ``approx_kl``)
``steps_per_s``        env steps per wall-clock second over the iteration
=====================  ===================================================================

At the end of a run, once its evaluation is written, the evaluation's scalars
(:func:`evaluation_tags`), at the run's last env-step count:

===========================  ==============================================================
``eval/return``              mean return of the final policy's evaluation episodes (its
                             primary policy: sampled, or greedy where the agent evaluated itself)
``eval/cost/<name>``         mean episodic cost k of those episodes
``eval/cost_upper/<name>``   its one-sided 95% upper bound (the verdict's)
``eval/within/<name>``       the verdict on limit k: 1 within, 0 over, 0.5 too close to call
``eval/feasible``            the run's verdict: 1 feasible (every limit within), 0 infeasible,
                             0.5 too close to call
``eval/greedy_return``       mean return of the greedy policy's episodes
``eval/episodes``            evaluation episodes per policy
===========================  ==============================================================

The x axis is the env-step count. ``cgrpo train/bench --tensorboard DIR`` (extra ``[tb]``)
and ``--wandb PROJECT`` (needs ``wandb``) set :data:`TENSORBOARD_ENV` / :data:`WANDB_ENV`,
which sweep workers inherit; one TensorBoard run (one W&B run) per run directory, named
``<task>/<algo>/seed_<n>``.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

__all__ = ["TENSORBOARD_ENV", "WANDB_ENV", "MetricSink", "evaluation_tags", "metric_tags", "run_name", "sinks_from_env"]

#: A verdict as a number: what ``eval/within/<name>`` and ``eval/feasible`` plot.
VERDICT_VALUE = {"within": 1.0, "over": 0.0, "undetermined": 0.5,
                 "feasible": 1.0, "violates": 0.0}

TENSORBOARD_ENV = "CGRPO_TENSORBOARD"
WANDB_ENV = "CGRPO_WANDB"


class MetricSink(Protocol):
    """Called as ``sink(run_path, row)`` for every progress row; closed at the end of the run."""

    def __call__(self, run_path: Path, row: Mapping[str, Any]) -> None: ...

    def close(self) -> None: ...


def _number(value: Any) -> float | None:
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def run_name(run_path: Path) -> str:
    """``<family>/<task>/<algo>/seed_<n>``: the last four parts of a run directory."""
    return "/".join(Path(run_path).parts[-4:])


def _limits(run_path: Path) -> dict[str, float]:
    """The run's limits d_k as its config.json records them (written before training)."""
    try:
        task = json.loads((Path(run_path) / "config.json").read_text())["task"]
        return {c["name"]: float(c["limit"]) for c in task["constraints"]}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def metric_tags(row: Mapping[str, Any], limits: Mapping[str, float], previous: Mapping[str, Any] | None = None) -> dict[str, float]:
    """The tags of one progress row (see the module docstring); non-numbers are left out.

    ``steps_per_s`` is (env_steps - previous env_steps) / (wall_s - previous wall_s), or
    env_steps / wall_s for the first row.

    >>> metric_tags({"env_steps": 200, "wall_s": 2.0, "return": 1.5, "cost_fuel": 10.0, "lambda_fuel": 0.5,
    ...              "eff_w_reward": 0.8, "policy_loss": -0.1, "approx_kl": 0.01}, {"fuel": 12.0},
    ...             {"env_steps": 100, "wall_s": 1.5})
    {'return': 1.5, 'cost/fuel': 10.0, 'lambda/fuel': 0.5, 'eff_w/reward': 0.8, 'loss/policy_loss': -0.1, 'kl/approx_kl': 0.01, 'limit/fuel': 12.0, 'steps_per_s': 200.0}
    """
    tags: dict[str, float] = {}
    for key, value in row.items():
        x = _number(value)
        if x is None:
            continue
        if key == "return":
            tags["return"] = x
        elif key.startswith("cost_") and key[5:] in limits:
            tags[f"cost/{key[5:]}"] = x
        elif key.startswith("lambda_"):
            tags[f"lambda/{key[7:]}"] = x
        elif key.startswith("eff_w_"):
            tags[f"eff_w/{key[6:]}"] = x
        elif "loss" in key:
            tags[f"loss/{key}"] = x
        elif key == "kl" or key.endswith("_kl") or key.startswith("kl_"):
            tags[f"kl/{key}"] = x
    if not limits:  # no config.json: keep the costs anyway
        tags.update({f"cost/{k[5:]}": v for k, v in row.items() if k.startswith("cost_") and _number(v) is not None})
    for name, d in limits.items():
        tags[f"limit/{name}"] = float(d)
    steps, wall = _number(row.get("env_steps")), _number(row.get("wall_s"))
    if steps is not None and wall is not None:
        s0 = _number((previous or {}).get("env_steps")) or 0.0
        w0 = _number((previous or {}).get("wall_s")) or 0.0
        if wall > w0:
            tags["steps_per_s"] = (steps - s0) / (wall - w0)
    return tags


def evaluation_tags(m: Mapping[str, Any], names: list[str] | tuple[str, ...]) -> dict[str, float]:
    """The evaluation's tags (module docstring) from a run's ``run_metrics`` row ``m``; a
    value that is not a finite number is left out.

    >>> evaluation_tags({"eval_return": 1.1, "eval_cost_hazard": 0.08, "eval_cost_hi_hazard": 0.12,
    ...                  "verdict_hazard": "undetermined", "feasibility": "undetermined", "greedy_return": 1.2,
    ...                  "eval_episodes": 6534}, ["hazard"])
    {'eval/return': 1.1, 'eval/greedy_return': 1.2, 'eval/episodes': 6534.0, 'eval/feasible': 0.5, 'eval/cost/hazard': 0.08, 'eval/cost_upper/hazard': 0.12, 'eval/within/hazard': 0.5}
    """
    values: dict[str, Any] = {"eval/return": m.get("eval_return"), "eval/greedy_return": m.get("greedy_return"),
                              "eval/episodes": m.get("eval_episodes"),
                              "eval/feasible": VERDICT_VALUE.get(str(m.get("feasibility")))}
    for name in names:
        values[f"eval/cost/{name}"] = m.get(f"eval_cost_{name}")
        values[f"eval/cost_upper/{name}"] = m.get(f"eval_cost_hi_{name}")
        values[f"eval/within/{name}"] = VERDICT_VALUE.get(str(m.get(f"verdict_{name}")))
    return {tag: x for tag, v in values.items() if (x := _number(v)) is not None}


class TensorBoardSink:
    """Writes :func:`metric_tags` to ``root/<run name>`` with ``torch.utils.tensorboard``."""

    def __init__(self, root: str | Path) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as err:
            raise ImportError(f"--tensorboard needs the tensorboard package ({err}); pip install 'constrained-grpo[tb]'") from None
        self._writer_cls = SummaryWriter
        self.root = Path(root)
        self._writers: dict[Path, Any] = {}
        self._state: dict[Path, tuple[dict[str, float], dict[str, Any]]] = {}

    def __call__(self, run_path: Path, row: Mapping[str, Any]) -> None:
        run_path = Path(run_path)
        if run_path not in self._writers:
            self._writers[run_path] = self._writer_cls(log_dir=str(self.root / run_name(run_path)))
            self._state[run_path] = (_limits(run_path), {})
        limits, previous = self._state[run_path]
        step = int(_number(row.get("env_steps")) or 0)
        writer = self._writers[run_path]
        for tag, value in metric_tags(row, limits, previous).items():
            writer.add_scalar(tag, value, global_step=step)
        self._state[run_path] = (limits, dict(row))

    def summary(self, run_path: Path, tags: Mapping[str, float], step: int) -> None:
        """The run's end-of-run scalars (:func:`evaluation_tags`) at env step ``step``."""
        writer = self._writers.get(Path(run_path))
        if writer is None:
            writer = self._writers[Path(run_path)] = self._writer_cls(log_dir=str(self.root / run_name(run_path)))
        for tag, value in tags.items():
            writer.add_scalar(tag, value, global_step=step)

    def flush(self) -> None:
        for writer in self._writers.values():
            writer.flush()

    def close(self) -> None:
        for writer in self._writers.values():
            writer.close()
        self._writers.clear()


class WandbSink:
    """Logs :func:`metric_tags` to Weights & Biases project ``project``, one W&B run per run
    directory, named as the TensorBoard run and plotted against ``env_steps``."""

    def __init__(self, project: str) -> None:
        import wandb  # an ImportError here names the package to install

        self._wandb = wandb
        self.project = project
        self._runs: dict[Path, Any] = {}
        self._state: dict[Path, tuple[dict[str, float], dict[str, Any]]] = {}

    def _run(self, run_path: Path) -> Any:
        """The W&B run of ``run_path``, started on its first scalar."""
        if run_path not in self._runs:
            run = self._wandb.init(project=self.project, name=run_name(run_path), reinit=True)
            # W&B's own x axis counts log calls; the harness's is the env-step count, as on TensorBoard.
            run.define_metric("env_steps")
            run.define_metric("*", step_metric="env_steps")
            self._runs[run_path] = run
            self._state[run_path] = (_limits(run_path), {})
        return self._runs[run_path]

    def __call__(self, run_path: Path, row: Mapping[str, Any]) -> None:
        run_path = Path(run_path)
        run = self._run(run_path)
        limits, previous = self._state[run_path]
        tags = metric_tags(row, limits, previous)
        tags["env_steps"] = float(_number(row.get("env_steps")) or 0)
        run.log(tags)
        self._state[run_path] = (limits, dict(row))

    def summary(self, run_path: Path, tags: Mapping[str, float], step: int) -> None:
        """The run's end-of-run scalars (:func:`evaluation_tags`), logged at ``env_steps = step``
        and kept in the W&B run's summary."""
        run = self._run(Path(run_path))
        run.log({**tags, "env_steps": float(step)})
        run.summary.update(dict(tags))

    def close(self) -> None:
        for run in self._runs.values():
            run.finish()
        self._runs.clear()


def sinks_from_env() -> list[MetricSink]:
    """The sinks asked for through :data:`TENSORBOARD_ENV` and :data:`WANDB_ENV` (none by default).

    A sink that cannot start (package missing) is skipped here: the CLI checks the
    packages before any run starts, so this only guards library use.
    """
    sinks: list[MetricSink] = []
    if os.environ.get(TENSORBOARD_ENV):
        try:
            sinks.append(TensorBoardSink(os.environ[TENSORBOARD_ENV]))
        except ImportError:
            pass
    if os.environ.get(WANDB_ENV):
        try:
            sinks.append(WandbSink(os.environ[WANDB_ENV]))
        except ImportError:
            pass
    return sinks
