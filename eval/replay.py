"""Saved runs brought back: re-evaluation with the harness protocol, and replays as GIFs.

``cgrpo eval RUN_DIR`` rebuilds the run's agent (``make_agent`` with the recorded task,
seed and config, then ``agent.load(RUN_DIR/agent)``, Contract 2; from registered names only:
a recorded ``module:factory`` or ``module:Task-v0`` is imported only when the command line
names the module, ``--import MODULE``, and recorded ``env_kwargs`` may not set what the task's
family marks as naming code, ``Family.code_options``), evaluates it with
:func:`~constrained_grpo.eval.runner.evaluate_agent` (episode i from ``reset(seed=first_seed + i)``,
sampled and greedy actions) and scores it with the same metrics as ``cgrpo train``.

``cgrpo render RUN_DIR --out FILE.gif`` replays one episode from ``reset(seed=first_seed)``:
the gridworld as the grid with the route walked so far and the running costs, the highway
tasks with highway-env's ``rgb_array`` renderer, any other task with an ``rgb_array`` renderer
through it, and a text task (the math tasks) as one frame per problem: the prompt, the
completion, the reward and the costs.
"""

from __future__ import annotations

import dataclasses

import json
import math
import tempfile
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

import gymnasium
import numpy as np

from constrained_grpo.constraints import Constraint
from constrained_grpo.eval import storage

__all__ = ["RenderError", "check_recorded_code", "load_saved_agent", "reevaluate", "render_run", "run_spec"]


class RenderError(ValueError):
    """The run cannot be replayed or rendered; the message says why and what to do."""


def not_a_run_dir(path: Path) -> str:
    """The error for a folder without ``config.json``, naming the run folders below it if any."""
    below = sorted(p.parent for p in path.glob(f"*/{storage.CONFIG_FILE}"))[:3] if path.is_dir() else []
    hint = f" (below it: {', '.join(str(p) for p in below)}; e.g. `{below[0]}`)" if below else ""
    return f"{path} is not a run directory (no {storage.CONFIG_FILE}){hint}; give OUT/<task>/<algo>/seed_<n>"


def run_spec(run_dir: str | Path) -> Any:
    """The :class:`~constrained_grpo.eval.runner.RunSpec` recorded in ``RUN_DIR/config.json``."""
    from constrained_grpo.eval.runner import RunSpec

    path = Path(run_dir)
    file = path / storage.CONFIG_FILE
    if not file.is_file():
        raise RenderError(not_a_run_dir(path))
    try:
        return RunSpec.from_dict(storage.read_json(file)["run"])
    except (KeyError, TypeError, ValueError) as err:
        raise RenderError(f"{file} does not describe a run ({err}); give a run directory written by cgrpo") from None


def check_recorded_code(spec: Any, path: Path, trusted: Collection[str] = ()) -> None:
    """Refuse a run whose ``config.json`` names code to import: an algorithm that is not a
    registered name (a dotted path ``module:factory``) or a task id ``module:Task-v0``,
    unless the user named that module on the command line (``--import MODULE``, in
    ``trusted``), or ``env_kwargs`` that set one of the family's ``code_options``
    (:func:`_check_code_options`). A downloaded run directory never chooses what runs."""
    from constrained_grpo.registry import list_agents
    from constrained_grpo.tasks import split_task_id

    where = path / storage.CONFIG_FILE
    algo = str(spec.algo)
    if algo not in list_agents():
        module = algo.partition(":")[0] if ":" in algo else algo.rpartition(".")[0]
        if not module or module not in trusted:
            raise RenderError(
                f"{where}: algorithm {algo!r} is not a registered name, and rebuilding it would import "
                f"{module or algo!r} as the run directory says; if you trust that code, add --import {module or algo}"
            )
    task_module, task = split_task_id(str(spec.task))
    if task_module is not None and task_module not in trusted:
        raise RenderError(f"{where}: task {spec.task!r} would import {task_module!r} as the run directory says; "
                          f"if you trust that code, add --import {task_module}")
    _check_code_options(spec, task, where, trusted)


_UNSET = object()


def _option(tree: Any, dotted: str) -> Any:
    """``tree[a][b]`` for ``"a.b"``; :data:`_UNSET` where a key is absent."""
    for part in dotted.split("."):
        if not isinstance(tree, Mapping) or part not in tree:
            return _UNSET
        tree = tree[part]
    return tree


def _check_code_options(spec: Any, task: str, where: Path, trusted: Collection[str]) -> None:
    """Refuse recorded ``env_kwargs`` that set a keyword the task's family marks as naming
    code or a program (``Family.code_options``: the Safety worker's interpreter and maker,
    highway-env's traffic class) to a value other than the task's registered one; a value
    ``module:attr`` or ``module.attr`` passes when ``trusted`` holds its module."""
    from constrained_grpo.tasks import task_info

    env_kwargs = spec.config.get("env_kwargs") if isinstance(spec.config, Mapping) else None
    if not isinstance(env_kwargs, Mapping):
        return
    try:
        info = task_info(task)
    except Exception:  # an unknown task fails later, with its own message
        return
    for key in info.family.code_options:
        value, registered = _option(env_kwargs, key), _option(info.kwargs, key)
        if value is _UNSET or value == registered:
            continue
        text = str(value)
        module = text.partition(":")[0] if ":" in text else text.rpartition(".")[0]
        if isinstance(value, str) and module and module in trusted:
            continue
        named = isinstance(value, str) and all(part.isidentifier() for part in module.split("."))
        hint = f"add --import {module}" if named else f"remove env_kwargs.{key} from it"
        raise RenderError(f"{where}: env_kwargs.{key} = {text[:80]!r} names code or a program to run (the task's own: "
                          f"{registered if registered is not _UNSET else 'unset'}), as the run directory says; "
                          f"if you trust it, {hint}")


def load_saved_agent(run_dir: str | Path, trusted: Collection[str] = ()) -> Any:
    """The run's trained agent: built as the run built it, then ``load(RUN_DIR/agent)``;
    only from registered names and the ``trusted`` modules (:func:`check_recorded_code`)."""
    from constrained_grpo.registry import make_agent

    path = Path(run_dir)
    spec = run_spec(path)
    check_recorded_code(spec, path, trusted)
    saved = path / storage.AGENT_DIR
    if not saved.is_dir():
        # The results root: path is ROOT/<task's parts>/<algo>/seed_<n> (a copy elsewhere: its parent).
        depth = len([p for p in str(spec.task).split("/") if p]) + 1
        root = path.parents[depth] if len(path.parents) > depth else path.parent
        rerun = dataclasses.replace(spec, save_agent=True).command(root)
        raise RenderError(f"{path} has no saved agent ({storage.AGENT_DIR}/): the run was made with --no-save; "
                          f"rerun it saving the agent: {rerun} --force")
    try:
        agent = make_agent(spec.algo, spec.task, seed=spec.seed, **dict(spec.config))
    except TypeError as err:  # an env or agent option the code does not take
        raise RenderError(f"{path / storage.CONFIG_FILE}: its settings do not build {spec.algo} on {spec.task} "
                          f"({str(err)[:200]}); give a run directory written by cgrpo") from None
    if not callable(getattr(agent, "load", None)):
        raise RenderError(f"{spec.algo} has no load(path) (Contract 2): its saved agent cannot be read back")
    try:
        loaded = agent.load(saved)
    except Exception as err:  # noqa: BLE001 - whatever the saved files hold, one line naming them
        raise RenderError(f"{saved}: the saved agent cannot be read back ({type(err).__name__}: {str(err)[:200]}); "
                          "rerun the run saving the agent") from None
    return agent if loaded is None else loaded


def reevaluate(run_dir: str | Path, episodes: int | None = None, trusted: Collection[str] = ()) -> tuple[Any, Any]:
    """Evaluate the saved agent again with the harness protocol; returns the metrics row
    (``eval.metrics.run_metrics``) and the task meta. The run directory is not modified."""
    from constrained_grpo.eval.scoring.loader import load_run
    from constrained_grpo.eval.scoring.metrics import run_metrics
    from constrained_grpo.eval.runner import EVAL_FILE, _write_eval, evaluate_agent

    path = Path(run_dir)
    if not storage.is_complete(path):
        raise RenderError(f"{path} is not a complete run (no {storage.DONE_FILE}); finish it with cgrpo train first")
    spec = run_spec(path)
    agent = load_saved_agent(path, trusted)
    config = storage.read_json(path / storage.CONFIG_FILE)
    # The run's own constraints (its limits plan the count when the run let the task plan it).
    constraints = [Constraint(**c) for c in config["task"]["constraints"]]
    n = episodes if episodes is not None else spec.eval_episodes
    results, protocol = evaluate_agent(agent, spec.task, None if n is None else int(n), spec.config.get("env_kwargs"),
                                       constraints=constraints)
    names = [c.name for c in constraints]
    with tempfile.TemporaryDirectory() as tmp:
        # A copy of the run with the new evaluation, scored by the loader and metrics like any run.
        copy = Path(tmp) / path.name
        copy.mkdir()
        for name in (storage.CONFIG_FILE, storage.PROGRESS_FILE):
            (copy / name).write_bytes((path / name).read_bytes())
        done = storage.read_json(path / storage.DONE_FILE)
        done["eval_rows"] = _write_eval(copy / EVAL_FILE, results, protocol, names)
        done["eval"] = protocol.to_dict()
        storage.atomic_write_json(copy / storage.DONE_FILE, done)
        table, meta = load_run(copy, known_algos=None)
        return run_metrics(table, {meta.task: meta}).iloc[0], meta


# ----------------------------------------------------------------------------------- render

_CELL_COLOURS = {"#": "#3b3b3b", "H": "#e45756", "M": "#9c755f", "$": "#edc948", "G": "#59a14f", "S": "#4e79a7"}


def _grid_frames(env: Any, cells: list[int], costs: list[np.ndarray], rewards: list[float], names: list[str]) -> list[np.ndarray]:
    """One image per step: the layout, the route walked so far, the agent, and the running
    return and costs against their limits."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    model = env.unwrapped.model
    rows, cols = model.n_rows, model.n_cols
    limits = {c.name: c.limit for c in env.unwrapped.constraints}
    frames = []
    for t in range(len(cells)):
        fig, ax = plt.subplots(figsize=(max(3.0, 0.5 * cols + 1), max(3.4, 0.5 * rows + 1.6)), dpi=80)
        for r, line in enumerate(model.layout):
            for c, ch in enumerate(line):
                ax.add_patch(plt.Rectangle((c, rows - 1 - r), 1, 1, facecolor=_CELL_COLOURS.get(ch, "#f4f4f4"),
                                           edgecolor="#bbbbbb", linewidth=0.5))
                if ch in "HMG$S":
                    ax.text(c + 0.5, rows - 0.5 - r, ch, ha="center", va="center", fontsize=8, color="white")
        xy = [((cell % cols) + 0.5, rows - 0.5 - cell // cols) for cell in cells[: t + 1]]
        ax.plot([p[0] for p in xy], [p[1] for p in xy], "-", color="#1f1f1f", linewidth=2, alpha=0.7)
        ax.plot(*xy[-1], "o", color="#f28e2b", markersize=12, markeredgecolor="black")
        total = np.sum(costs[: t + 1], axis=0) if t > 0 else np.zeros(len(names))
        cost_text = "  ".join(f"{n} {total[k]:g}/{limits.get(n, math.nan):g}" for k, n in enumerate(names))
        ax.set_title(f"step {t}  return {sum(rewards[: t + 1]):.2f}\n{cost_text}", fontsize=9)
        ax.set_xlim(0, cols)
        ax.set_ylim(0, rows)
        ax.set_aspect("equal")
        ax.axis("off")
        fig.canvas.draw()
        frames.append(np.asarray(fig.canvas.buffer_rgba())[..., :3].copy())
        plt.close(fig)
    return frames


def _text_frames(episodes: list[dict[str, Any]], names: list[str], limits: Mapping[str, float]) -> list[np.ndarray]:
    """One image per text episode: prompt, completion, reward and costs, in a fixed-width font."""
    import textwrap

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    frames = []
    for i, ep in enumerate(episodes):
        costs = "  ".join(f"{n} {ep['costs'][k]:g} (limit {limits.get(n, math.nan):g})" for k, n in enumerate(names))
        extra = "  ".join(f"{k} {ep['info'][k]!r}" for k in ("correct", "answer", "target") if k in ep["info"])
        body = ["PROMPT", *textwrap.wrap(ep["prompt"], 88, replace_whitespace=False)[:14], "",
                "COMPLETION", *textwrap.wrap(ep["completion"] or "(empty)", 88, replace_whitespace=False)[:14], "",
                f"reward {ep['reward']:g}   {costs}", extra]
        fig = plt.figure(figsize=(8.0, 6.0), dpi=80)
        fig.text(0.02, 0.97, f"problem {i + 1} of {len(episodes)} (reset seed {ep['seed']})", fontsize=10, weight="bold", va="top")
        fig.text(0.02, 0.92, "\n".join(line.replace("$", r"\$") for line in body), family="monospace", fontsize=8, va="top")
        fig.canvas.draw()
        frames.append(np.asarray(fig.canvas.buffer_rgba())[..., :3].copy())
        plt.close(fig)
    return frames


def render_run(run_dir: str | Path, out: str | Path, *, deterministic: bool = True, seed: int | None = None,
               max_steps: int = 500, fps: int = 4, trusted: Collection[str] = ()) -> Path:
    """Write a GIF of one episode of the saved agent from ``reset(seed)`` (default: the
    harness's first evaluation seed); returns the file written."""
    from constrained_grpo.constraints import costs_from_info
    from constrained_grpo.eval.runner import EVAL_SEED
    from constrained_grpo.tasks import make_env

    out = Path(out)
    if out.suffix.lower() != ".gif":
        raise RenderError(f"--out {out}: only GIF is written; give a file name ending in .gif")
    spec = run_spec(run_dir)
    agent = load_saved_agent(run_dir, trusted)
    act = getattr(agent, "act", None)
    if not callable(act):
        raise RenderError(f"{spec.algo} has no act(obs, deterministic) (a text agent, or an agent that evaluates "
                          "itself): nothing to replay step by step; use cgrpo eval")
    env_kwargs: Mapping[str, Any] = dict(spec.config.get("env_kwargs") or {})
    probe = make_env(spec.task, **env_kwargs)
    grid = hasattr(probe.unwrapped, "model") and hasattr(probe.unwrapped.model, "layout")
    modes = probe.unwrapped.metadata.get("render_modes", [])
    text = isinstance(probe.observation_space, gymnasium.spaces.Text)
    probe.close()
    if text:
        return _render_text(spec, act, env_kwargs, out, deterministic, EVAL_SEED if seed is None else seed)
    if not grid and "rgb_array" not in modes:
        raise RenderError(f"{spec.task} has no image renderer (render modes {modes}); nothing to draw")
    env = make_env(spec.task, **env_kwargs, **({} if grid else {"render_mode": "rgb_array"}))
    names = [c.name for c in env.unwrapped.constraints]
    try:
        obs, info = env.reset(seed=EVAL_SEED if seed is None else seed)
        begin = getattr(agent, "begin_episodes", None)
        if callable(begin):  # a mixture plays the member this reset seed chooses, as in its evaluation
            begin(np.array([EVAL_SEED if seed is None else seed], dtype=np.int64))
        frames: list[np.ndarray] = [] if grid else [env.render()]
        cells, costs, rewards = [int(info.get("cell", 0))], [np.zeros(len(names))], [0.0]
        done, t = False, 0
        while not done and t < max_steps:
            obs, reward, terminated, truncated, info = env.step(act(obs, deterministic=deterministic))
            cells.append(int(info.get("cell", 0)))
            costs.append(costs_from_info(info, len(names)))
            rewards.append(float(reward))
            if not grid:
                frames.append(env.render())
            done, t = terminated or truncated, t + 1
        if grid:
            frames = _grid_frames(env, cells, costs, rewards, names)
    finally:
        env.close()
    summary = {"frames": len(frames), "return": sum(rewards), "costs": dict(zip(names, np.sum(costs, axis=0).tolist()))}
    _write_gif(frames, out, int(1000 / fps), summary)
    return out


def _write_gif(frames: list[np.ndarray], out: Path, duration_ms: int, summary: Mapping[str, Any]) -> None:
    """The frames as a looping GIF, and ``summary`` beside it as ``<out>.json``."""
    from PIL import Image

    images = [Image.fromarray(np.asarray(f, dtype=np.uint8)) for f in frames]
    out.parent.mkdir(parents=True, exist_ok=True)
    images[0].save(out, save_all=True, append_images=images[1:], duration=duration_ms, loop=0)
    out.with_suffix(".json").write_text(json.dumps(dict(summary), indent=2))


def _render_text(spec: Any, act: Any, env_kwargs: Mapping[str, Any], out: Path, deterministic: bool, seed: int,
                 problems: int = 4) -> Path:
    """A text task: ``problems`` problems from reset seeds ``seed + i``, one frame each, shown 3 s."""
    from constrained_grpo.constraints import costs_from_info
    from constrained_grpo.tasks import make_env

    env = make_env(spec.task, **env_kwargs)
    names = [c.name for c in env.unwrapped.constraints]
    limits = {c.name: c.limit for c in env.unwrapped.constraints}
    episodes = []
    try:
        for i in range(problems):
            prompt, _ = env.reset(seed=seed + i)
            completion = act(prompt, deterministic=deterministic)
            _, reward, _, _, info = env.step(completion)
            episodes.append({"seed": seed + i, "prompt": str(prompt), "completion": str(completion), "reward": float(reward),
                             "costs": costs_from_info(info, len(names)).tolist(), "info": info})
    finally:
        env.close()
    summary = {"frames": len(episodes), "return": sum(e["reward"] for e in episodes),
               "costs": {n: sum(e["costs"][k] for e in episodes) for k, n in enumerate(names)},
               "completions": [e["completion"] for e in episodes]}
    _write_gif(_text_frames(episodes, names, limits), out, 3000, summary)
    return out
