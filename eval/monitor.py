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

The x axis is the env-step count. ``cgrpo train/bench --tensorboard DIR`` (extra ``[tb]``)
and ``--wandb PROJECT`` (needs ``wandb``) set :data:`TENSORBOARD_ENV` / :data:`WANDB_ENV`,
which sweep workers inherit; one TensorBoard run per run directory, named
``<task>/<algo>/seed_<n>``.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

__all__ = ["TENSORBOARD_ENV", "WANDB_ENV", "MetricSink", "metric_tags", "run_name", "sinks_from_env"]

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

    def close(self) -> None:
        for writer in self._writers.values():
            writer.close()
        self._writers.clear()


class WandbSink:
    """Logs :func:`metric_tags` to Weights & Biases project ``project``, one W&B run per run directory."""

    def __init__(self, project: str) -> None:
        import wandb  # an ImportError here names the package to install

        self._wandb = wandb
        self.project = project
        self._runs: dict[Path, Any] = {}
        self._state: dict[Path, tuple[dict[str, float], dict[str, Any]]] = {}

    def __call__(self, run_path: Path, row: Mapping[str, Any]) -> None:
        run_path = Path(run_path)
        if run_path not in self._runs:
            self._runs[run_path] = self._wandb.init(project=self.project, name=run_name(run_path), reinit=True)
            self._state[run_path] = (_limits(run_path), {})
        limits, previous = self._state[run_path]
        tags = metric_tags(row, limits, previous)
        tags["env_steps"] = float(_number(row.get("env_steps")) or 0)
        self._runs[run_path].log(tags)
        self._state[run_path] = (limits, dict(row))

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
