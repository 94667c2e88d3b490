"""Loading run directories into the long table, and validating long tables.

The long table (docs/architecture.md, Contract 3) has one row per training iteration
(``kind == "train"``) and one per evaluation episode (``kind == "eval"``):

==============  =======  ==================================================================
column          type     meaning
==============  =======  ==================================================================
suite           str      task family (``gridworld``, ...): the stratum of cross-task statistics
task            str      task id
algo            str      algorithm name
seed            int      run seed
kind            str      ``train`` or ``eval``
policy          str      eval rows: ``sampled`` (actions sampled from the final policy: the primary
                         evaluation) or ``deterministic`` (its mode); empty on train rows
iteration       int      training iteration, from 0 (train); the run's last one, whose policy was
                         evaluated (eval)
episode         int      eval rows: evaluation episode index per policy, from 0; empty on train rows
reset_seed      int      eval rows: the episode's ``reset(seed=...)``, the same for every run of a
                         task (harness-owned evaluation); empty when unknown and on train rows
env_steps       int      env steps so far (train); the run's final env steps (eval)
wall_s          float    seconds since training started (train); empty for eval rows
return          float    mean episodic return of the iteration (train; empty if the iteration
                         finished no episode); the episode's return (eval, always filled)
length          float    episode length (eval); empty for train rows
cost_<name>     float    mean episodic cost of constraint <name> (train; empty like return);
                         the episode's (eval, always filled)
lambda_<name>   float    multiplier of <name> after the iteration (train); the final one (eval);
                         empty throughout a run of an unconstrained algorithm
eff_w_<comp>    float    optional: effective weight of component <comp> (reward or a constraint)
==============  =======  ==================================================================

A train row's measured values (``return``, ``cost_*``, ``lambda_*``, ``eff_w_*``) are read at
``TRAIN_DIGITS`` (4) significant digits and its ``wall_s`` to 10 ms; eval rows are kept as written.
The columns are ``constrained_grpo.schema.CORE_COLUMNS``; a train row is keyed by
``iteration``, an eval row by ``(policy, episode)``. Columns of constraints that a row's
task does not have are empty. Everything else an
agent logs (losses, ...) stays in ``progress.csv`` (``load_results(extra_columns=True)``
keeps it). The same schema is the submission format (docs/leaderboard_schema.md).
"""

from __future__ import annotations

import functools
import io
import json
import math
import os
import re
import stat
import unicodedata
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from constrained_grpo.eval import storage
from constrained_grpo.schema import CONFIG_SCHEMA, CORE_COLUMNS, EVAL_POLICIES, TaskMeta, eval_columns

__all__ = [
    "ALGO_NAME",
    "CORE_COLUMNS",
    "REQUIRED_COLUMNS",
    "Results",
    "ResultsError",
    "check_submission_table",
    "episode_ranges",
    "escape_csv_formulas",
    "escape_markdown",
    "find_runs",
    "algo_properties",
    "join_summarised",
    "load_results",
    "load_run",
    "read_table_csv",
    "run_configs",
    "validate_table",
]

#: Values of ``policy`` on eval rows.
POLICIES: tuple[str, ...] = EVAL_POLICIES
#: Columns every long table must have (plus ``cost_<name>`` of each task's constraints).
REQUIRED_COLUMNS: tuple[str, ...] = (
    "suite", "task", "algo", "seed", "kind", "policy", "iteration", "episode", "env_steps", "return",
)
_STR_COLUMNS = ("suite", "task", "algo", "kind")
_INT_COLUMNS = ("seed", "iteration", "env_steps")
_PATTERN_COLUMN = re.compile(r"(cost|lambda|eff_w)_[A-Za-z0-9_]+")
_KINDS = ("train", "eval")
#: An algorithm name: a registered name or a dotted path ``pkg.mod:factory`` (matched whole).
ALGO_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:+-]*")
#: The form of every string column (matched whole, with ``fullmatch``): nothing a
#: Markdown table, HTML page or spreadsheet could read as markup, a formula or a new line.
_STRING_FORMS: dict[str, re.Pattern[str]] = {
    "suite": re.compile(r"[a-z0-9][a-z0-9_-]*"),
    "task": re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:+-]*"),
    "algo": ALGO_NAME,
    "kind": re.compile(r"train|eval"),
}
_MAX_STRING = 200
#: Integer columns are int64 in the table; a value at or above 2^63 would wrap.
_INT_LIMIT = 2**63


class ResultsError(ValueError):
    """Results on disk or a long table are malformed; the message names the file and column."""


@dataclass(frozen=True)
class Results:
    """A loaded set of runs.

    Attributes:
        table: the long table (module docstring), rows sorted by suite, task, algo, seed,
            kind, iteration.
        tasks: the metadata (constraints, optimum) of every task in ``table``.
        incomplete: run directories without a completion marker (only when allowed).
        failed: run directories whose last attempt failed, with the first line of the error.
        summaries: the runs' evaluation summaries when ``table`` holds only their train rows
            (a compact record); None when its eval rows give them.
        modified: per task ranked with settings other than the registered task's (only under
            ``allow_modified_tasks``), the differences in words.
    """

    table: pd.DataFrame
    tasks: dict[str, TaskMeta]
    incomplete: tuple[Path, ...] = ()
    failed: dict[str, str] = field(default_factory=dict)
    summaries: pd.DataFrame | None = None
    modified: dict[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def algos(self) -> list[str]:
        return sorted(self.table["algo"].unique())

    @functools.cached_property
    def evals(self) -> pd.DataFrame:
        """One row per run and evaluated policy (:func:`~constrained_grpo.eval.scoring.metrics.eval_summaries`)."""
        from constrained_grpo.eval.scoring.metrics import eval_summaries

        return self.summaries if self.summaries is not None else eval_summaries(self.table, self.tasks)


#: The largest results file read (a run's progress.csv and eval.csv are a few MB, its JSON
#: files a few kB): anything larger is refused before it is read.
MAX_CSV_BYTES = 256 * 1024 * 1024
MAX_JSON_BYTES = 4 * 1024 * 1024


def _file_bytes(path: Path, cap: int) -> bytes:
    """The bytes of ``path`` when it is a regular file (not a link, device or pipe) of at most
    ``cap`` bytes; else :class:`ResultsError` naming it. ``FileNotFoundError`` passes through."""
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISREG(st.st_mode):
        raise ResultsError(f"{path} is not a regular file (a link, device or pipe); results are read from regular "
                           "files inside the results folder only: put the file itself there")
    if st.st_size > cap:
        raise ResultsError(f"{path} has {st.st_size:,} bytes, over the {cap:,} a results file may have; it is not a run's file")
    with open(path, "rb") as fh:
        data = fh.read(cap + 1)
    if len(data) > cap:
        raise ResultsError(f"{path} grew past {cap:,} bytes while being read; it is not a run's file")
    return data


def _read_json(path: Path) -> Any:
    """A results JSON file (:func:`_file_bytes`), or :class:`ResultsError` in one line."""
    data = _file_bytes(path, MAX_JSON_BYTES)
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as err:
        raise ResultsError(f"{path} is not valid JSON ({type(err).__name__}); delete the run directory and rerun it") from None


def _is_harness_config(path: Path) -> bool:
    """Whether ``path`` is a harness run's ``config.json`` (it carries ``schema``).

    A saved agent also writes a ``config.json``; its folder may sit under the same
    results directory and is not a run. A file
    that does not parse counts as a run, so that the loader reports it.
    """
    try:
        config = _read_json(path)
    except (OSError, ValueError):
        return True
    return not isinstance(config, dict) or "schema" in config


def find_runs(root: str | Path) -> list[Path]:
    """Run directories (those holding a harness ``config.json``) under ``root``, sorted;
    hidden folders and other tools' folders skipped."""
    root = Path(root)
    if not root.is_dir():
        raise ResultsError(f"results directory {root} does not exist; run `cgrpo bench --out {root}` first")
    runs: set[Path] = set()
    # Shallowest first, so that files inside a run (an agent's own config.json) are skipped.
    for config in sorted(root.rglob(storage.CONFIG_FILE), key=lambda p: (len(p.parts), str(p))):
        rel = config.relative_to(root).parts
        if any(p.startswith(".") for p in rel):
            continue
        if not runs.isdisjoint(config.parents):
            continue
        if not _is_harness_config(config):
            continue
        runs.add(config.parent)
    return sorted(runs)


def _read_csv(path: Path) -> pd.DataFrame:
    try:
        return pd.read_csv(io.BytesIO(_file_bytes(path, MAX_CSV_BYTES)), keep_default_na=True)
    except FileNotFoundError:
        raise ResultsError(f"{path} is missing, but the run is marked complete; delete {path.parent} and rerun it") from None
    except (pd.errors.EmptyDataError, pd.errors.ParserError, UnicodeDecodeError) as err:
        raise ResultsError(f"{path} is not a readable CSV ({err}); delete {path.parent} and rerun it") from None


def _check_numeric(df: pd.DataFrame, columns: Iterable[str], where: str, *, allow_nan: bool = False) -> None:
    """Each column must be numbers (and, unless ``allow_nan``, no empty cells or NaN)."""
    for col in columns:
        values = pd.to_numeric(df[col], errors="coerce")
        bad_type = values.isna() & df[col].notna()
        if bad_type.any():
            i = int(np.flatnonzero(bad_type.to_numpy())[0])
            raise ResultsError(
                f"{where}: column {col!r} must hold numbers; row {i} has {df[col].iloc[i]!r}"
            )
        if not allow_nan and values.isna().any():
            rows = np.flatnonzero(values.isna().to_numpy())[:5].tolist()
            raise ResultsError(f"{where}: column {col!r} has empty or NaN cells at row(s) {rows}")
        if np.isinf(values.to_numpy(dtype=float)).any():
            rows = np.flatnonzero(np.isinf(values.to_numpy(dtype=float)))[:5].tolist()
            raise ResultsError(f"{where}: column {col!r} has infinite values at row(s) {rows}")
        df[col] = values


def _check_integral(df: pd.DataFrame, columns: Iterable[str], where: str) -> None:
    """Each column must hold integers in [0, 2^63) (int64 without wrapping)."""
    for col in columns:
        exact = df[col].to_numpy()
        if np.issubdtype(exact.dtype, np.integer):
            # Compared as integers: 2^63 - 1 is a float's 2^63 and would read as out of range.
            bad = np.array([not 0 <= int(v) < _INT_LIMIT for v in exact.tolist()], dtype=bool)
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                raise ResultsError(
                    f"{where}: column {col!r} must hold integers in [0, 2^63); row {i} has {df[col].iloc[i]!r}"
                )
            df[col] = exact.astype(np.int64)
            continue
        values = df[col].to_numpy(dtype=float)
        bad = (values != np.round(values)) | (values < 0) | (values >= float(_INT_LIMIT))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ResultsError(
                f"{where}: column {col!r} must hold integers in [0, 2^63); row {i} has {df[col].iloc[i]!r}"
            )
        df[col] = values.astype(np.int64)


def _check_algo(name: Any, where: str, known: Collection[str] | None) -> str:
    """A well-formed algorithm name, registered (when ``known`` is given) or a dotted path.

    A dotted path ``pkg.mod:factory`` is accepted by its form alone: reading results
    never imports anything, whatever a results folder names.
    """
    if not isinstance(name, str) or not name:
        raise ResultsError(f"{where}: algorithm name must be a non-empty string, got {name!r}")
    if len(name) > _MAX_STRING or not ALGO_NAME.fullmatch(name):
        raise ResultsError(
            f"{where}: algorithm name {name!r} must match [A-Za-z0-9][A-Za-z0-9._:+-]* "
            f"(at most {_MAX_STRING} characters); rename it"
        )
    if known is None or name in known or ":" in name:
        return name
    raise ResultsError(
        f"{where}: unknown algorithm {name!r}; registered: {sorted(known)}. Register it "
        "(constrained_grpo.register_agent) before loading, or remove the run"
    )


def _check_strings(df: pd.DataFrame, source: str) -> None:
    """Every string column: non-empty text of the column's form, no control characters."""
    for col, form in _STRING_FORMS.items():
        for i, value in enumerate(df[col].tolist()):
            if isinstance(value, str) and value and len(value) <= _MAX_STRING and form.fullmatch(value):
                continue
            if isinstance(value, str) and any(unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp") for ch in value):
                why = "control or line-break characters"
            elif not isinstance(value, str) or not value:
                why = "a non-empty string is required"
            elif len(value) > _MAX_STRING:
                why = f"longer than {_MAX_STRING} characters"
            else:
                why = f"it must match {form.pattern}"
            raise ResultsError(f"{source}: column {col!r} row {i} has {value!r} ({why})")


def registered_info(task: str) -> Any:
    """The registered facts of ``task`` (``tasks.task_info``: a family's table entry or a user
    module's), None for an id nothing declares."""
    try:
        from constrained_grpo.tasks import task_info

        return task_info(task)
    except Exception:
        return None


def _registered_family(task: str) -> Any:
    """The :class:`~constrained_grpo.envs.registration.Family` of a registered task, None for an unknown id."""
    info = registered_info(task)
    return None if info is None else info.family


@functools.lru_cache(maxsize=None)
def declared_returns(task: str) -> Any:
    """What one episode of ``task`` can return, as its family declares it
    (``Family.episode_returns``, an :class:`~constrained_grpo.envs.registration.EpisodeReturns`);
    None where the family declares nothing (the gridworlds' envs say it themselves)."""
    info = registered_info(task)
    if info is None or info.family.episode_returns is None:
        return None
    return info.family.episode_returns(info.kwargs)


def _check_declared_episodes(df: pd.DataFrame, source: str) -> None:
    """Refuse the first evaluation episode whose return and length its task's family
    declares impossible (:func:`declared_returns`)."""
    ev = df[df["kind"] == "eval"]
    for task, rows in ev.groupby("task", sort=True):
        declared = declared_returns(str(task))
        if declared is None or not declared.bounded:
            continue
        lengths = rows["length"].to_numpy(dtype=float) if "length" in rows.columns else None
        ok = declared.possible(rows["return"].to_numpy(dtype=float), lengths)
        if ok.all():
            continue
        i = int(np.flatnonzero(~ok)[0])
        row = rows.iloc[i]
        length = "" if lengths is None or not np.isfinite(lengths[i]) else f" in {lengths[i]:g} steps"
        raise ResultsError(
            f"{source}: run task={task} algo={row['algo']} seed={int(row['seed'])}: {row['policy']} episode "
            f"{int(row['episode'])} has return {float(row['return']):g}{length}, which no episode of {task} can have "
            f"({declared.rule}); give the episodes cgrpo evaluated")


@dataclass(frozen=True)
class EpisodeRanges:
    """Bounds that any single episode of a task satisfies (hence every mean of episodes).

    Attributes:
        ret: (low, high) of the episodic return, or None where the task declares none.
        costs: constraint name -> (low, high) of its episodic cost.
    """

    ret: tuple[float, float] | None
    costs: dict[str, tuple[float, float]]


@functools.lru_cache(maxsize=None)
def episode_ranges(task: str, constraints: tuple[Any, ...] | None = None) -> EpisodeRanges:
    """Per-episode ranges of return and costs of ``task``.

    Costs are >= 0 (Contract 1), and an indicator cost is 0 or 1 per episode. Where the
    task's family says its envs offer ``return_bounds()`` (``Family.return_bounds``, the
    gridworlds), the return lies in those bounds and each cost (at most 1 per step) in
    ``[0, max_episode_steps]``; elsewhere only the cost bounds hold.
    """
    costs = {} if constraints is None else {c.name: (0.0, 1.0 if c.indicator else math.inf) for c in constraints}
    family = _registered_family(task)
    declared = declared_returns(task)
    if declared is not None:
        return EpisodeRanges(declared.return_range(), costs)
    if family is None or not family.return_bounds:
        return EpisodeRanges(None, costs)
    from constrained_grpo.tasks import make_env

    env = make_env(task)
    try:
        lo, hi = (float(x) for x in env.unwrapped.return_bounds())
        t_max = getattr(env.unwrapped, "max_episode_steps", None) or getattr(env.spec, "max_episode_steps", None)
    finally:
        env.close()
    if t_max is not None:  # a cost of at most 1 per step sums to at most the horizon
        costs = {name: (0.0, min(high, float(t_max))) for name, (_, high) in costs.items()}
    return EpisodeRanges((lo, hi), costs)


#: No measured value (a return, cost, multiplier, weight, length or clock) is this large in
#: magnitude; a larger one is refused, so that sums over a table's rows stay finite (1e308
#: multipliers overflowed the stability metric's sum).
MAX_MAGNITUDE = 1e15


def _check_magnitudes(df: pd.DataFrame, source: str) -> None:
    """The schema's measured columns hold values of magnitude at most :data:`MAX_MAGNITUDE`."""
    for col in [c for c in df.columns if c in ("return", "wall_s", "length") or _PATTERN_COLUMN.fullmatch(str(c))]:
        values = np.abs(df[col].to_numpy(dtype=float))
        bad = ~np.isnan(values) & (values > MAX_MAGNITUDE)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ResultsError(f"{source}: column {col!r} row {i} has {float(df[col].iloc[i])!r}, beyond "
                               f"+-{MAX_MAGNITUDE:g} (no return, cost, multiplier or clock of a run is that large); "
                               "the value is impossible")


def _check_ranges(df: pd.DataFrame, metas: Mapping[str, TaskMeta], source: str) -> None:
    """Returns, costs and multipliers within what the task can produce (:func:`episode_ranges`).

    A train row's return and costs are means over the iteration's episodes, so they
    obey the per-episode bounds too. Multipliers of inequality constraints are >= 0.
    """
    lam_cols = [c for c in df.columns if str(c).startswith("lambda_")]
    for task, rows in df.groupby("task", sort=True):
        meta = metas[task]
        ranges = episode_ranges(task, tuple(meta.constraints))
        checks: list[tuple[str, float, float, str]] = []
        if ranges.ret is not None:
            checks.append(("return", *ranges.ret, "the most and least any episode of the task can earn"))
        for name, (lo, hi) in ranges.costs.items():
            why = "costs are >= 0" + (", and an indicator cost is at most 1 per episode" if hi == 1.0 else "")
            if 1.0 < hi < math.inf:
                why += f", at most 1 per step over at most {hi:g} steps"
            checks.append((f"cost_{name}", lo, hi, why))
        checks += [(c, 0.0, math.inf, "Lagrange multipliers of inequality constraints are >= 0") for c in lam_cols]
        for col, lo, hi, why in checks:
            if col not in rows.columns:
                continue
            values = rows[col].to_numpy(dtype=float)
            bad = ~np.isnan(values) & ((values < lo - 1e-9 * max(1.0, abs(lo))) | (values > hi + 1e-9 * max(1.0, abs(hi))))
            if bad.any():
                i = int(rows.index[np.flatnonzero(bad)[0]])
                raise ResultsError(
                    f"{source}: task {task}: column {col!r} row {i} has {float(values[np.flatnonzero(bad)[0]])!r}, "
                    f"outside [{lo:g}, {hi:g}] ({why}); the value is impossible"
                )


def _formula_cell(value: Any) -> Any:
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    return value


def escape_csv_formulas(table: pd.DataFrame) -> pd.DataFrame:
    """A copy whose string cells a spreadsheet would run as a formula (starting with
    ``=``, ``+``, ``-``, ``@``, tab or carriage return) are prefixed with ``'``.

    Numbers are left alone (``-1.5`` stays a number); call it on any table written to CSV
    for people to open.
    """
    out = table.copy()
    for col in out.columns:
        if out[col].dtype == object:
            out[col] = out[col].map(_formula_cell)
    return out


#: What could end a table cell, open an HTML tag or entity, a link or code span.
_MD_SPECIAL = re.compile(r"([\\`|<>\[\]&_*]|(?<=www)\.|:(?=//))", re.IGNORECASE)


def escape_markdown(text: str) -> str:
    """``text`` safe inside a Markdown table cell: control characters and line breaks become
    spaces, and what could end the cell or open markup (``\\ ` | < > [ ] & _ *``: an
    underscore or star between punctuation and a letter opens emphasis; with the brackets
    escaped no link or image opens; the ``.`` of ``www.`` and the ``:`` of ``://``, which
    GitHub autolinks) is backslash-escaped. Names that pass
    :func:`validate_table` contain none of these but ``www.``."""
    clean = "".join(" " if unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp") else ch for ch in str(text))
    return _MD_SPECIAL.sub(r"\\\1", clean)


def _checked_meta(meta: TaskMeta) -> TaskMeta:
    """``meta`` when its ids are strings and its optimum finite numbers (or absent); else
    ``ValueError`` naming the field (a crafted ``config.json`` must not reach the metrics)."""
    if not isinstance(meta.task, str) or not isinstance(meta.suite, str):
        raise ValueError(f"task and suite must be strings, got {meta.task!r} and {meta.suite!r}")
    values = [meta.optimum_return, meta.unconstrained_return, *(meta.optimal_multipliers or ())]
    for value in values:
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)):
            raise ValueError(f"the optimum holds {value!r}, not a finite number")
    return meta


def load_run(path: str | Path, *, known_algos: Collection[str] | None = None, extra_columns: bool = False) -> tuple[pd.DataFrame, TaskMeta]:
    """One complete run directory as long-table rows, and its task's metadata.

    Checks ``config.json`` (schema, algorithm), the CSVs' required columns, types, NaN,
    row counts against ``done.json``; raises :class:`ResultsError` naming the file and column.
    """
    path = Path(path)
    where_cfg = str(path / storage.CONFIG_FILE)
    try:
        config = _read_json(path / storage.CONFIG_FILE)
        done = _read_json(path / storage.DONE_FILE)
    except ValueError as err:
        raise ResultsError(str(err)) from None
    except FileNotFoundError as err:
        raise ResultsError(f"{err.filename} is missing; the run is not complete, rerun the sweep to finish it") from None
    if not isinstance(config, dict) or config.get("schema") != CONFIG_SCHEMA:
        raise ResultsError(
            f"{where_cfg}: schema {config.get('schema') if isinstance(config, dict) else None!r} is not "
            f"{CONFIG_SCHEMA}; it was written by another version of constrained-grpo"
        )
    if not isinstance(done, dict):
        raise ResultsError(f"{path / storage.DONE_FILE}: holds {json.dumps(done)[:40]}, not the JSON object cgrpo "
                           "writes; delete the run and rerun it")
    try:
        run = config["run"]
        meta = _checked_meta(TaskMeta.from_dict(config["task"]))
        algo = _check_algo(run["algo"], where_cfg, known_algos)
        seed = int(run["seed"])
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as err:
        if isinstance(err, ResultsError):
            raise
        raise ResultsError(f"{where_cfg}: malformed ({type(err).__name__}: {str(err)[:200]}); delete the run and rerun it") from None
    if not 0 <= seed < _INT_LIMIT:
        raise ResultsError(f"{where_cfg}: seed {str(seed)[:24]} is outside [0, 2^63); delete the run and rerun it")
    names = meta.constraint_names

    progress_path = path / storage.PROGRESS_FILE
    progress = _read_csv(progress_path)
    required = ["iteration", "env_steps", "wall_s", "return", *[f"cost_{n}" for n in names]]
    missing = [c for c in required if c not in progress.columns]
    if missing:
        raise ResultsError(f"{progress_path}: missing column(s) {missing}; it has {list(progress.columns)}")
    lambdas = [f"lambda_{n}" for n in names]
    present = [c for c in lambdas if c in progress.columns]
    if present and len(present) != len(lambdas):
        raise ResultsError(
            f"{progress_path}: has {present} but not {sorted(set(lambdas) - set(present))}; "
            "an agent logs one multiplier per constraint or none"
        )
    eff = sorted(c for c in progress.columns if c.startswith("eff_w_"))
    measured = ["return", *[f"cost_{n}" for n in names]]
    _check_numeric(progress, ["iteration", "env_steps", "wall_s", *present], str(progress_path))
    # An iteration that finished no episode has no return or cost to report (an empty cell).
    _check_numeric(progress, measured + eff, str(progress_path), allow_nan=True)
    for col in measured:
        if progress[col].isna().all():
            raise ResultsError(f"{progress_path}: column {col!r} is empty in every row; no iteration finished an episode")
    _check_integral(progress, ["iteration", "env_steps"], str(progress_path))
    if len(progress) != done.get("progress_rows"):
        raise ResultsError(
            f"{progress_path}: has {len(progress)} rows but {path / storage.DONE_FILE} records "
            f"{done.get('progress_rows')}; the file was changed after the run finished"
        )
    if not np.array_equal(progress["iteration"].to_numpy(), np.arange(len(progress))):
        raise ResultsError(f"{progress_path}: column 'iteration' must be 0, 1, ..., {len(progress) - 1}")
    if (np.diff(progress["env_steps"].to_numpy()) < 0).any():
        raise ResultsError(f"{progress_path}: column 'env_steps' must be non-decreasing (cumulative env steps)")

    eval_path = path / storage.EVAL_FILE
    evals = _read_csv(eval_path)
    required_eval = eval_columns(names)
    missing = [c for c in required_eval if c not in evals.columns]
    if missing:
        raise ResultsError(f"{eval_path}: missing column(s) {missing}; it has {list(evals.columns)}")
    measured_eval = [c for c in required_eval if c not in ("policy", "reset_seed")]
    _check_numeric(evals, measured_eval, str(eval_path))
    _check_integral(evals, ["episode"], str(eval_path))
    policy = evals["policy"].astype(str)
    if not policy.isin(POLICIES).all():
        raise ResultsError(f"{eval_path}: column 'policy' must hold {list(POLICIES)}; it has {sorted(set(policy))}")
    # Empty where the agent evaluated itself on episodes of its own (they cannot be paired).
    reset_seed = evals["reset_seed"]
    _check_numeric(evals, ["reset_seed"], str(eval_path), allow_nan=True)
    if len(evals) != done.get("eval_rows") or len(evals) == 0:
        raise ResultsError(
            f"{eval_path}: has {len(evals)} rows but {path / storage.DONE_FILE} records {done.get('eval_rows')}"
        )

    ident = {"suite": meta.suite, "task": meta.task, "algo": algo, "seed": seed}
    keep = required + present + eff
    if extra_columns:
        keep += [c for c in progress.columns if c not in keep and pd.api.types.is_numeric_dtype(progress[c])]
    train = progress[keep].assign(kind="train", **ident)
    final = progress.iloc[-1]
    evalrows = pd.DataFrame(
        {
            "iteration": int(final["iteration"]),
            "episode": evals["episode"].to_numpy(dtype=float),
            "policy": policy.to_numpy(),
            "reset_seed": reset_seed.to_numpy(dtype=float),
            "env_steps": int(final["env_steps"]),
            "return": evals["return"].to_numpy(dtype=float),
            "length": evals["length"].to_numpy(dtype=float),
            **{f"cost_{n}": evals[f"cost_{n}"].to_numpy(dtype=float) for n in names},
            **{c: float(final[c]) for c in present},
        }
    ).assign(kind="eval", **ident)
    return pd.concat([train, evalrows], ignore_index=True), meta


def _order_columns(columns: Iterable[str]) -> list[str]:
    cols = list(columns)
    head = [c for c in CORE_COLUMNS if c in cols]
    groups = [sorted(c for c in cols if c.startswith(p)) for p in ("cost_", "lambda_", "eff_w_")]
    seen = set(head).union(*groups)
    rest = sorted(c for c in cols if c not in seen)
    return head + [c for g in groups for c in g] + rest


#: Significant digits kept of a train row's measured values (``return``, ``cost_*``,
#: ``lambda_*``, ``eff_w_*``): iteration means carry summation noise in their last digits,
#: the board prints three, and a record of 1,590 runs stays a few MB.
TRAIN_DIGITS = 4
#: Decimals of seconds kept of a train row's ``wall_s`` (10 ms).
WALL_DECIMALS = 2


def rounded(x: np.ndarray, spec: str) -> np.ndarray:
    """Each value as Python's ``format(v, spec)`` writes it and reads back (``".4g"``: 4
    significant digits, ``".2f"``: 2 decimals): correctly rounded, so the same bits on every
    machine; NaN stays NaN."""
    values, inverse = np.unique(np.asarray(x, dtype=np.float64), return_inverse=True)
    out = np.array([float(format(v, spec)) for v in values.tolist()], dtype=np.float64)
    return out[inverse.ravel()]


def _is_measured(col: str) -> bool:
    return col == "return" or col.startswith(("cost_", "lambda_", "eff_w_"))


def _finish(table: pd.DataFrame) -> pd.DataFrame:
    """Column order, dtypes and row order that make the table deterministic; train rows'
    measured values at ``TRAIN_DIGITS`` significant digits, their wall time at ``WALL_DECIMALS``."""
    for col in CORE_COLUMNS:
        if col not in table.columns:
            table[col] = np.nan
    table = table[_order_columns(table.columns)]
    for col in _INT_COLUMNS:
        table[col] = table[col].astype(np.int64)
    for col in table.columns:
        if col not in _STR_COLUMNS and col not in _INT_COLUMNS and col != "policy":
            table[col] = table[col].astype(np.float64)
    table["policy"] = table["policy"].astype(object).where(table["kind"] == "eval", np.nan)
    train = (table["kind"] == "train").to_numpy()
    if train.any():
        for col in [c for c in table.columns if _is_measured(c) or c == "wall_s"]:
            values = table[col].to_numpy(dtype=np.float64).copy()
            values[train] = rounded(values[train], f".{WALL_DECIMALS}f" if col == "wall_s" else f".{TRAIN_DIGITS}g")
            table[col] = values
    kind_order = table["kind"].map({"train": 0, "eval": 1})
    policy_order = table["policy"].map({p: i for i, p in enumerate(POLICIES)}).fillna(-1)
    table = (
        table.assign(_k=kind_order, _p=policy_order)
        .sort_values(["suite", "task", "algo", "seed", "_k", "_p", "iteration", "episode"], kind="mergesort")
        .drop(columns=["_k", "_p"])
        .reset_index(drop=True)
    )
    return table


def _check_one_experiment(runs: Sequence[Path], root: str | Path) -> None:
    """Refuse, in one line naming the folders to rank, a root that holds the same (task, algo,
    seed) in two experiments (e.g. ``results/``, with the standard runs and the coupling runs)."""
    root = Path(root)
    seen: dict[tuple[str, str, int], Path] = {}
    groups: dict[Path, dict[Path, int]] = {}  # root's subfolder -> experiment folders -> runs
    clash: tuple[tuple[str, str, int], Path, Path] | None = None
    for path in runs:
        try:
            run = _read_json(path / storage.CONFIG_FILE)["run"]
            key = (str(run["task"]), str(run["algo"]), int(run["seed"]))
        except (OSError, ValueError, KeyError, TypeError, OverflowError):
            continue  # load_run names what is wrong with this run
        experiment = path.parents[len(storage.run_dir("", *key).parts) - 1]
        rel = experiment.relative_to(root).parts if experiment != root and root in experiment.parents else ()
        group = groups.setdefault(root / rel[0] if rel else root, {})
        group[experiment] = group.get(experiment, 0) + 1
        if key in seen and clash is None:
            clash = (key, seen[key], path)
        seen.setdefault(key, path)
    if clash is not None:
        (task, algo, seed), first, second = clash
        largest = max(groups, key=lambda g: (sum(groups[g].values()), str(g)))
        suggest = next(iter(groups[largest])) if len(groups[largest]) == 1 else largest
        raise ResultsError(
            f"{root} holds {task}/{algo}/seed_{seed} twice ({first} and {second}): it has the runs of several "
            f"experiments ({', '.join(str(g) for g in sorted(groups))}); rank one folder, e.g. `cgrpo leaderboard {suggest}`"
        )


@functools.lru_cache(maxsize=None)
def registered_meta(task: str) -> TaskMeta | None:
    """The metadata of the registered task ``task`` (None for an unknown id): its constraints
    from its env, its exact optimum as its family keeps it (``Family.optima``), else solved
    (cached in the process)."""
    if ":" in task:
        return None
    family = _registered_family(task)
    if family is None:
        return None
    from constrained_grpo.tasks import task_meta

    known = family.optima.get(task)
    if known is not None:
        return TaskMeta.from_dict({**task_meta(task, with_optimum=False).to_dict(), "optimum": dict(known)})
    return task_meta(task)


def _same(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-12)


def meta_differences(recorded: TaskMeta, registered: TaskMeta) -> list[str]:
    """What ``recorded`` (a record's or a run's task metadata) says otherwise than the
    registered task, one phrase per field naming both values (descriptions are not compared)."""
    out = []
    if recorded.suite != registered.suite:
        out.append(f"suite: recorded {recorded.suite!r}, registered {registered.suite!r}")
    if recorded.constraint_names != registered.constraint_names:
        out.append(f"constraint names: recorded {list(recorded.constraint_names)}, registered {list(registered.constraint_names)}")
    else:
        for a, b in zip(recorded.constraints, registered.constraints):
            if not _same(a.limit, b.limit):
                out.append(f"limit of {a.name}: recorded {a.limit:g}, registered {b.limit:g}")
            if bool(a.indicator) != bool(b.indicator):
                out.append(f"indicator of {a.name}: recorded {a.indicator}, registered {b.indicator}")
    for what, x, y in (("R* (exact optimum)", recorded.optimum_return, registered.optimum_return),
                       ("unconstrained optimum", recorded.unconstrained_return, registered.unconstrained_return)):
        if not _same(x, y):
            out.append(f"{what}: recorded {x!r}, registered {y!r}")
    xs, ys = recorded.optimal_multipliers, registered.optimal_multipliers
    if (xs is None) != (ys is None) or (xs is not None and (len(xs) != len(ys) or not all(_same(a, b) for a, b in zip(xs, ys)))):
        out.append(f"optimal multipliers: recorded {None if xs is None else list(xs)}, registered {None if ys is None else list(ys)}")
    return out


def _plan_differences(task: str, configs: Iterable[Mapping[str, Any]]) -> list[str]:
    """The evaluation plan the runs' ``config.json`` record (``eval.plan``) against the task
    family's (``Family.eval``)."""
    family = _registered_family(task)
    if family is None:
        return []
    want = family.eval.to_dict()
    for cfg in configs:
        plan = (cfg.get("eval") or {}).get("plan") if isinstance(cfg, Mapping) else None
        if plan is not None and plan != want:
            return [f"evaluation plan: recorded {plan}, registered {want}"]
    return []


def _check_names(frames: Iterable[pd.DataFrame], source: str) -> None:
    """The string columns of ``frames`` (train rows, evaluation summaries) of their columns' forms."""
    for frame in frames:
        cols = [c for c in ("suite", "task", "algo") if c in frame.columns]
        names = frame[cols].drop_duplicates().reset_index(drop=True).assign(kind="train")
        _check_strings(names, source)
        if "policy" in frame.columns:
            bad = sorted(set(frame["policy"].dropna()) - set(POLICIES))
            if bad:
                raise ResultsError(f"{source}: column 'policy' has {bad[0]!r}; it must be one of {list(POLICIES)}")


def _check_summaries(summaries: pd.DataFrame, metas: Mapping[str, TaskMeta], source: str,
                     unbounded: Collection[str] = ()) -> None:
    """Every run's evaluation summary possible for its task: the mean return within the
    task's per-episode range (:func:`episode_ranges`) and mean costs within theirs; on a task
    with an exact optimum, the mean return's one-sided lower bound (Hoeffding's, from the
    per-episode range, at :data:`IMPOSSIBLE_ALPHA`) at most what any policy earns at its
    costs' upper bounds (:func:`_return_bound`). A genuine run is refused with probability at
    most 2 x ``IMPOSSIBLE_ALPHA``. ``unbounded``: tasks whose recorded optimum belongs to other
    limits (ranked under ``--allow-modified-tasks``), checked against the ranges only."""
    from constrained_grpo.eval.scoring.metrics import _summary_stats
    from constrained_grpo.eval.scoring.verdict import cost_bounds

    for task, rows in summaries.groupby("task", sort=True):
        meta = metas[task]
        ranges = episode_ranges(str(task), tuple(meta.constraints))
        k = max(1, len(meta.constraints))
        for row in rows.to_dict("records"):
            where = f"{source}: run task={task} algo={row['algo']} seed={int(row['seed'])} ({row['policy']} episodes)"
            r, n = float(row["return_mean"]), int(row["episodes"])
            if ranges.ret is not None:
                lo, hi = ranges.ret
                if not lo - 1e-9 * max(1.0, abs(lo)) <= r <= hi + 1e-9 * max(1.0, abs(hi)):
                    raise ResultsError(f"{where}: mean return {r:.6g} is outside [{lo:g}, {hi:g}], the least and most any "
                                       f"episode of {task} earns; pack the runs cgrpo evaluated")
            for c in meta.constraints:
                lo, hi = ranges.costs[c.name]
                m = float(row[f"mean_{c.name}"])
                if not lo <= m <= hi * (1 + 1e-9):
                    raise ResultsError(f"{where}: mean cost {c.name} {m:.6g} is outside [{lo:g}, {hi:g}]; pack the runs "
                                       "cgrpo evaluated")
            if meta.optimum_return is None or ranges.ret is None or n < 2 or task in unbounded:
                continue
            upper = np.array([cost_bounds(_summary_stats(row, c.name), c.limit, c.indicator, alpha_lower=IMPOSSIBLE_ALPHA / k,
                                          alpha_upper=IMPOSSIBLE_ALPHA / k)[1] for c in meta.constraints])
            bound = _bound_at(upper, meta)
            lower = r - (ranges.ret[1] - ranges.ret[0]) * math.sqrt(math.log(1 / IMPOSSIBLE_ALPHA) / (2 * n))
            if lower > bound + 1e-9:
                raise ResultsError(
                    f"{where}: mean return {r:.4g} over {n} episodes (lower bound {lower:.4g}) is above {bound:.4g}, the "
                    f"most any policy of {task} earns at its costs' upper bounds (R* = {meta.optimum_return:.4g} at the "
                    "limits); no policy can do that: pack the runs cgrpo evaluated")


def _check_recorded_algos(algos: Mapping[str, Mapping[str, Any]], configs: Mapping[tuple[str, str, int], Any],
                          source: str) -> None:
    """A record's manifest says of each algorithm what its runs' ``config.json`` say (a
    ranked algorithm re-sealed as a reference policy would leave the ranking unseen)."""
    runs: dict[str, list[Mapping[str, Any]]] = {}
    bounds: dict[str, set[Any]] = {}
    for (_, algo, _), (cfg, done) in configs.items():
        runs.setdefault(algo, []).append(cfg.get("algo") or {} if isinstance(cfg, Mapping) else {})
        bound = done.get("lambda_max") if isinstance(done, Mapping) else None
        bounds.setdefault(algo, set()).add(float(bound) if isinstance(bound, (int, float)) and math.isfinite(bound) else None)
    for algo in sorted(set(algos) | set(runs)):
        recorded = algos.get(algo, {})
        for key in ("reference", "lambda_in_reward_units"):
            says = all(bool(a.get(key, False)) for a in runs.get(algo, [{}]))
            if bool(recorded.get(key, False)) != says:
                raise ResultsError(f"{source}: algorithm {algo}: the manifest records {key}={bool(recorded.get(key, False))}, "
                                   f"its runs' config.json {key}={says}; pack the record again from the runs")
        seen = bounds.get(algo, {None})
        says = next(iter(seen)) if len(seen) == 1 else None  # as algo_properties: one bound for every run, else none
        if recorded.get("lambda_max") != says:
            raise ResultsError(f"{source}: algorithm {algo}: the manifest records lambda_max={recorded.get('lambda_max')!r}, "
                               f"its runs' done.json {says!r}; pack the record again from the runs")


def check_recorded(tasks: Mapping[str, TaskMeta], table: pd.DataFrame, summaries: pd.DataFrame,
                   configs: Iterable[Mapping[str, Any]], source: str, *, allow_modified_tasks: bool = False
                   ) -> dict[str, tuple[str, ...]]:
    """Validate runs read from disk (a compact record or run folders) as a submission is
    validated: names of their columns' forms, the task metadata they carry (limits,
    constraint names, R*, lambda*, the evaluation plan) equal to the registered task's, and
    every evaluation summary possible (:func:`_check_summaries`). A task whose metadata
    differs is refused naming the field and both values, unless ``allow_modified_tasks``:
    then it is returned, task -> the differences, for the page to say so."""
    _check_names([table, summaries], source)
    train = table[table["kind"] == "train"]
    _check_magnitudes(train.reset_index(drop=True), source)
    _check_ranges(train.reset_index(drop=True), tasks, source)  # a record's train rows are checked nowhere else
    configs = list(configs)
    modified: dict[str, tuple[str, ...]] = {}
    for task in sorted(tasks):
        registered = registered_meta(task)
        if registered is None:
            from constrained_grpo.envs import list_tasks

            raise ResultsError(f"{source}: unknown task {task!r}; registered tasks: {list_tasks()} (a user task's module "
                               "is imported with --import MODULE)")
        runs = [c for c in configs if isinstance(c, Mapping) and (c.get("run") or {}).get("task") == task]
        diffs = meta_differences(tasks[task], registered) + _plan_differences(task, runs)
        if not diffs:
            continue
        if not allow_modified_tasks:
            more = f" (and {len(diffs) - 1} more)" if len(diffs) > 1 else ""
            raise ResultsError(f"{source}: {task}: {diffs[0]}{more}; its runs were not made on the registered task: rank "
                               "runs of the registered task, or pass --allow-modified-tasks to rank them as they are "
                               "(the page then says so)")
        modified[task] = tuple(diffs)
    _check_summaries(summaries, tasks, source, unbounded=set(modified))
    return modified


def load_results(
    root: str | Path,
    *,
    allow_incomplete: bool = False,
    extra_columns: bool = False,
    known_algos: Collection[str] | None = None,
    allow_modified_tasks: bool = False,
) -> Results:
    """Every run under ``root`` as one long table.

    A run without ``done.json`` is incomplete: an error (naming the runs and how to
    finish them) unless ``allow_incomplete``, in which case it is listed in
    ``Results.incomplete``. A run's algorithm is the name its ``config.json`` records (with
    the capabilities recorded beside it): reading results consults no registry and imports
    no trainer. ``known_algos``, when given, restricts the names accepted. A folder holding
    a compact record (:mod:`~constrained_grpo.eval.scoring.record`) is read from it.

    Either is checked against the registered tasks (:func:`check_recorded`): a record's
    checksums prove its files unchanged since they were sealed, not that what was sealed
    is possible. ``allow_modified_tasks`` ranks runs made with other task settings, listed in
    ``Results.modified``.
    """
    from constrained_grpo.eval.scoring import record

    if record.is_record(root):
        if find_runs(root):
            raise ResultsError(
                f"{root} holds a compact record ({record.MANIFEST}) and run directories: pack the runs into it with "
                f"`python -m constrained_grpo.eval.scoring.record pack {root} RUNS --out {root}`, or move them out"
            )
        if extra_columns:
            raise ResultsError(f"{root} is a compact record: it keeps the long table's columns only, not the agents' own logs")
        try:
            rec = record.load_record(root, configs=True)
        except ValueError as err:
            raise ResultsError(str(err)) from None
        if known_algos is not None:
            for algo in rec.table["algo"].unique():
                _check_algo(algo, str(Path(root) / record.MANIFEST), set(known_algos))
        from constrained_grpo.eval.scoring.metrics import eval_summaries

        summaries = rec.evals if rec.evals is not None else eval_summaries(rec.table, rec.tasks)
        modified = check_recorded(rec.tasks, rec.table, summaries, (cfg for cfg, _ in rec.configs.values()),
                                  str(Path(root) / record.MANIFEST), allow_modified_tasks=allow_modified_tasks)
        _check_recorded_algos(rec.algos, rec.configs, str(Path(root) / record.MANIFEST))
        return Results(rec.table, rec.tasks, summaries=rec.evals, modified=modified)
    runs = find_runs(root)
    records = sorted(p.parent for p in Path(root).rglob(record.MANIFEST) if not any(
        part.startswith(".") for part in p.relative_to(root).parts))
    if records:  # a folder of experiments kept as compact records: each is ranked on its own
        listed = ", ".join(str(r) for r in records)
        suggest = next((r for r in records if r.name == "standard"), records[0])
        raise ResultsError(f"{root} holds the compact record(s) of {len(records)} experiment(s) ({listed}); "
                           f"rank one folder, e.g. `cgrpo leaderboard {suggest}`")
    if not runs:
        raise ResultsError(f"no run directories (with {storage.CONFIG_FILE}) under {root}")
    _check_one_experiment(runs, root)
    known = None if known_algos is None else set(known_algos)
    frames: list[pd.DataFrame] = []
    tasks: dict[str, TaskMeta] = {}
    incomplete: list[Path] = []
    failed: dict[str, str] = {}
    for path in runs:
        if not storage.is_complete(path):
            incomplete.append(path)
            err = path / storage.ERROR_FILE
            if err.is_file():
                try:
                    text = _file_bytes(err, MAX_JSON_BYTES).decode("utf-8", errors="replace")
                except (OSError, ResultsError):
                    text = ""
                lines = [ln for ln in text.splitlines() if ln.strip()]
                failed[str(path)] = lines[-1] if lines else "failed"
            continue
        frame, meta = load_run(path, known_algos=known, extra_columns=extra_columns)
        old = tasks.setdefault(meta.task, meta)
        if old != meta:
            raise ResultsError(
                f"{path / storage.CONFIG_FILE}: task {meta.task} has constraints/optimum {meta.to_dict()} but "
                f"other runs under {root} have {old.to_dict()}; keep runs with different limits in separate directories"
            )
        frames.append(frame)
    if incomplete and not allow_incomplete:
        listed = "\n  ".join(str(p) + (f"  (failed: {failed[str(p)]})" if str(p) in failed else "") for p in incomplete)
        raise ResultsError(
            f"{len(incomplete)} run(s) under {root} are not complete (no {storage.DONE_FILE}):\n  {listed}\n"
            "finish them by rerunning the same `cgrpo bench` command (it resumes), or pass --allow-incomplete"
        )
    if not frames:
        raise ResultsError(f"no complete run under {root}")
    table = _finish(pd.concat(frames, ignore_index=True))
    validate_table(table, tasks, source=str(root), extra_columns=extra_columns)
    from constrained_grpo.eval.scoring.metrics import eval_summaries

    modified = check_recorded(tasks, table, eval_summaries(table, tasks), run_configs(root).values(), str(root),
                              allow_modified_tasks=allow_modified_tasks)
    return Results(table, tasks, tuple(incomplete), failed, modified=modified)


def join_summarised(table: pd.DataFrame, tasks: Mapping[str, TaskMeta], evals: pd.DataFrame, sub: pd.DataFrame,
                    sub_tasks: Mapping[str, TaskMeta]) -> tuple[pd.DataFrame, dict[str, TaskMeta], pd.DataFrame]:
    """A compact record's train rows and evaluation summaries joined with a submission's
    runs (validated, :func:`check_submission_table`): ``(table, tasks, summaries)``."""
    from constrained_grpo.eval.scoring.metrics import concat_summaries, eval_summaries

    merged = {**tasks, **sub_tasks}
    joined = _finish(pd.concat([table, sub[sub["kind"] == "train"]], ignore_index=True))
    return joined, merged, concat_summaries([evals, eval_summaries(sub, merged)], merged)


def algo_properties(root: str | Path) -> dict[str, dict[str, Any]]:
    """Per algorithm of the complete runs under ``root``, what its runs record about it:
    ``lambda_in_reward_units`` and ``reference`` (``config.json``; True only if every run
    says so) and ``lambda_max`` (``done.json``; None unless every run records the same bound);
    for a compact record, what its manifest recorded of them."""
    from constrained_grpo.eval.scoring import record

    if record.is_record(root):
        try:
            return record.record_algos(root)
        except ValueError as err:
            raise ResultsError(str(err)) from None
    out: dict[str, dict[str, Any]] = {}
    for path in find_runs(root):
        try:
            algo = _read_json(path / storage.CONFIG_FILE)["algo"]
            name, units = str(algo["name"]), bool(algo.get("lambda_in_reward_units", False))
            reference = bool(algo.get("reference", False))
            bound = _read_json(path / storage.DONE_FILE).get("lambda_max")
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue
        bound = float(bound) if isinstance(bound, (int, float)) and math.isfinite(bound) else None
        prev = out.setdefault(name, {"lambda_in_reward_units": units, "lambda_max": bound, "reference": reference})
        prev["lambda_in_reward_units"] = prev["lambda_in_reward_units"] and units
        prev["reference"] = prev["reference"] and reference
        if prev["lambda_max"] != bound:
            prev["lambda_max"] = None
    return out


def run_deployment(config: Mapping[str, Any]) -> tuple[str, str]:
    """``(learner, deploy)`` of a run from its ``config.json``: the learning algorithm it
    trained (an alias such as ``cgrpo-best`` names ``algo.alias_of``; any other run is its own
    learner, under ``run.algo``, the name the long table gives it) and the deployment rule
    (``algo.resolved.config.deploy``; ``final_policy`` in runs recorded before the option had
    that name; ``last`` where the learner has none). Runs recorded before aliases were recorded
    name the alias's learner through the rule their ``algo.defaults`` set."""
    algo = config.get("algo") if isinstance(config.get("algo"), Mapping) else {}
    run = config.get("run") if isinstance(config.get("run"), Mapping) else {}
    name = str(run.get("algo", algo.get("name", "")))
    resolved = algo.get("resolved") if isinstance(algo.get("resolved"), Mapping) else {}
    cfg = resolved.get("config") if isinstance(resolved.get("config"), Mapping) else {}
    deploy = str(cfg.get("deploy", cfg.get("final_policy", "last")))
    learner = algo.get("alias_of")
    if not learner:
        defaults = algo.get("defaults") if isinstance(algo.get("defaults"), Mapping) else {}
        sets_rule = any(k in defaults for k in ("deploy", "final_policy"))
        # The aliases' naming: <learner>-best / <learner>-mix set a rule on <learner>.
        learner = name.rsplit("-", 1)[0] if sets_rule and "-" in name else name
    return str(learner), deploy


def run_configs(root: str | Path) -> dict[tuple[str, str, int], dict[str, Any]]:
    """``config.json`` of every complete run under ``root`` (run folders or a compact
    record), keyed by ``(task, algo, seed)``."""
    from constrained_grpo.eval.scoring import record

    if record.is_record(root):
        try:
            return {key: cfg for key, (cfg, _) in record.load_record(root, configs=True).configs.items()}
        except ValueError as err:
            raise ResultsError(str(err)) from None
    out: dict[tuple[str, str, int], dict[str, Any]] = {}
    for path in find_runs(root):
        if not storage.is_complete(path):
            continue
        try:
            cfg = _read_json(path / storage.CONFIG_FILE)
            run = cfg["run"]
            out[(str(run["task"]), str(run["algo"]), int(run["seed"]))] = cfg
        except (OSError, ValueError, KeyError, TypeError, OverflowError) as err:
            raise ResultsError(f"{path / storage.CONFIG_FILE}: malformed ({type(err).__name__}); delete the run and rerun it") from None
    return out


def read_table_csv(path: str | Path) -> pd.DataFrame:
    """Read a long table (or a submission) from CSV, keeping every column."""
    path = Path(path)
    try:
        return pd.read_csv(path, dtype={c: str for c in (*_STR_COLUMNS, "policy")}, keep_default_na=True)
    except FileNotFoundError:
        raise ResultsError(f"{path} does not exist") from None
    except (pd.errors.EmptyDataError, pd.errors.ParserError, UnicodeDecodeError) as err:
        raise ResultsError(f"{path} is not a readable CSV ({err})") from None


def validate_table(
    table: pd.DataFrame,
    tasks: Mapping[str, TaskMeta] | None = None,
    *,
    source: str = "table",
    known_algos: Collection[str] | None = None,
    extra_columns: bool = False,
) -> tuple[pd.DataFrame, dict[str, TaskMeta]]:
    """Check a long table against the schema (module docstring); return it normalised.

    With ``extra_columns``, columns outside the schema (an agent's own logs, such as
    losses) are allowed and passed through unchecked.

    ``tasks`` gives the constraints of each task; tasks missing from it must be
    registered (their metadata, with the exact optimum, is then computed). Raises
    :class:`ResultsError` with the reason: a missing or unknown column, a wrong type, an
    empty cell or NaN where a value is required, an unknown task or algorithm, a run
    without train or eval rows, duplicated or decreasing iterations; a string cell not of
    its column's form (control characters, markup, an algorithm name outside
    ``[A-Za-z0-9][A-Za-z0-9._:+-]*``), a ``suite`` other than the task's registered
    family, an integer outside [0, 2^63), and a return, cost or multiplier that the task
    cannot produce (:func:`episode_ranges`; multipliers >= 0). No algorithm is imported, nor a
    module a task id names (``module:Task-v0`` is refused).
    """
    df = table.copy()
    missing = [c for c in REQUIRED_COLUMNS if c not in df.columns]
    if missing:
        raise ResultsError(f"{source}: missing column(s) {missing}; required: {list(REQUIRED_COLUMNS)} plus cost_<name> per constraint")
    unknown = [c for c in df.columns if c not in CORE_COLUMNS and not _PATTERN_COLUMN.fullmatch(str(c))]
    if unknown and not extra_columns:
        raise ResultsError(
            f"{source}: unknown column(s) {unknown}; allowed: {list(CORE_COLUMNS)} and cost_<name>, "
            "lambda_<name>, eff_w_<component> (docs/leaderboard_schema.md)"
        )
    if df.empty:
        raise ResultsError(f"{source}: the table has no rows")
    bad_kind = ~df["kind"].isin(_KINDS)
    if bad_kind.any():
        i = int(np.flatnonzero(bad_kind.to_numpy())[0])
        raise ResultsError(f"{source}: column 'kind' must be 'train' or 'eval'; row {i} has {df['kind'].iloc[i]!r}")
    _check_strings(df, source)
    for name in sorted(df["algo"].unique()):
        _check_algo(name, source, known_algos)
    bad_policy = (df["kind"] == "eval") & ~df["policy"].isin(POLICIES)
    bad_policy |= (df["kind"] == "train") & df["policy"].notna()
    if bad_policy.any():
        i = int(np.flatnonzero(bad_policy.to_numpy())[0])
        raise ResultsError(
            f"{source}: column 'policy' must be empty on train rows and one of {list(POLICIES)} on eval rows; "
            f"row {i} has {df['policy'].iloc[i]!r}"
        )
    numeric = [c for c in df.columns if c not in _STR_COLUMNS and c != "policy"]
    _check_numeric(df, ["seed", "iteration", "env_steps"], source)
    _check_numeric(df, [c for c in numeric if c not in _INT_COLUMNS], source, allow_nan=True)
    _check_integral(df, list(_INT_COLUMNS), source)
    is_eval = (df["kind"] == "eval").to_numpy()
    episode = df["episode"].to_numpy(dtype=float)
    bad_episode = (is_eval & ((episode != np.round(episode)) | ~(episode >= 0))) | (~is_eval & ~np.isnan(episode))
    if bad_episode.any():
        i = int(np.flatnonzero(bad_episode)[0])
        raise ResultsError(
            f"{source}: column 'episode' must be an integer >= 0 on eval rows and empty on train rows; "
            f"row {i} ({df['kind'].iloc[i]}) has {df['episode'].iloc[i]!r}"
        )
    nan_eval = is_eval & df["return"].isna().to_numpy()
    if nan_eval.any():
        rows = np.flatnonzero(nan_eval)[:5].tolist()
        raise ResultsError(f"{source}: column 'return' has empty or NaN cells in eval rows {rows}")

    metas: dict[str, TaskMeta] = dict(tasks or {})
    for task in sorted(df["task"].unique()):
        if task not in metas:
            if ":" in str(task):  # module:Task-v0 would import the module the table names
                raise ResultsError(
                    f"{source}: task {str(task)!r} names a module to import, and reading results imports nothing; "
                    f"give the plain task id ({str(task).rpartition(':')[2]!r}), its module imported with --import MODULE"
                )
            try:
                from constrained_grpo.tasks import task_meta  # builds the env: only for tasks not given

                metas[task] = task_meta(task)
            except Exception as err:
                from constrained_grpo.envs import list_tasks

                raise ResultsError(
                    f"{source}: unknown task {task!r} ({type(err).__name__}); registered tasks: {list_tasks()}"
                ) from None
    suites = df.groupby("task")["suite"].unique()
    for task, values in suites.items():
        if len(values) != 1:
            raise ResultsError(f"{source}: task {task!r} appears with several suites {sorted(values)}; use one")
        family = _registered_family(task)
        expected = family.name if family is not None else metas[task].suite
        if values[0] != expected or metas[task].suite != expected:
            raise ResultsError(
                f"{source}: task {task!r} belongs to suite {expected!r}, but the table says "
                f"{values[0]!r}" + ("" if metas[task].suite == expected else f" and its metadata {metas[task].suite!r}")
            )

    cost_cols = [c for c in df.columns if c.startswith("cost_")]
    lambda_cols = [c for c in df.columns if c.startswith("lambda_")]
    all_names = {n for m in metas.values() for n in m.constraint_names}
    stray = [c for c in cost_cols + lambda_cols if c.split("_", 1)[1] not in all_names]
    if stray:
        raise ResultsError(f"{source}: column(s) {stray} name no constraint of the tasks in the table")
    for (task, algo, seed), group in df.groupby(["task", "algo", "seed"], sort=True):
        where = f"{source}: run task={task} algo={algo} seed={seed}"
        names = metas[task].constraint_names
        need = [f"cost_{n}" for n in names]
        absent = [c for c in need if c not in df.columns]
        if absent:
            raise ResultsError(f"{where}: missing column(s) {absent} (the task's constraints are {names})")
        ev = group["kind"] == "eval"
        for col in need:
            if group.loc[ev, col].isna().any():
                rows = group.index[ev & group[col].isna()][:5].tolist()
                raise ResultsError(f"{where}: column {col!r} has empty or NaN cells in eval row(s) {rows}")
        for col in ["return", *need]:
            if group.loc[~ev, col].isna().all():
                raise ResultsError(f"{where}: column {col!r} is empty in every train row")
        for col in cost_cols + lambda_cols:
            if col.split("_", 1)[1] not in names and group[col].notna().any():
                raise ResultsError(f"{where}: column {col!r} has values, but the task has no such constraint ({names})")
        lam = [f"lambda_{n}" for n in names if f"lambda_{n}" in df.columns]
        if lam:
            filled = group[lam].notna().to_numpy()
            if filled.any() and not filled.all():
                raise ResultsError(
                    f"{where}: columns {lam} must be all filled (a constrained algorithm) or all empty "
                    "(an unconstrained one); some cells are empty"
                )
        kinds = set(group["kind"])
        if kinds != set(_KINDS):
            raise ResultsError(f"{where}: has only {sorted(kinds)} rows; a run needs train rows and eval rows")
        train = group[group["kind"] == "train"].sort_values("iteration")
        if train["iteration"].duplicated().any():
            raise ResultsError(f"{where}: train iteration {train['iteration'][train['iteration'].duplicated()].iloc[0]} appears twice")
        evals = group[ev]
        keys = evals[["policy", "episode"]]
        if keys.duplicated().any():
            policy, episode = keys[keys.duplicated()].iloc[0]
            raise ResultsError(f"{where}: eval episode {int(episode)} of the {policy} policy appears twice")
        last = int(train["iteration"].max())
        if (evals["iteration"] != last).any():
            raise ResultsError(
                f"{where}: eval rows must carry the last train iteration ({last}), whose policy was evaluated; "
                f"they have {sorted(set(evals['iteration'].tolist()))}"
            )
        if (np.diff(train["env_steps"].to_numpy()) < 0).any():
            raise ResultsError(f"{where}: env_steps decrease along the train iterations; they must be cumulative")
    if not math.isfinite(float(df["return"].abs().max())):
        raise ResultsError(f"{source}: column 'return' has infinite values")
    _check_magnitudes(df, source)
    _check_declared_episodes(df, source)  # before the ranges: it names the episode and the rule
    _check_ranges(df, metas, source)
    return _finish(df), metas


#: One-sided level at which a submitted return is called above the exact optimum R*.
IMPOSSIBLE_ALPHA = 0.001


def _check_submitted_episodes(table: pd.DataFrame, metas: Mapping[str, TaskMeta], source: str) -> None:
    """The rules a submission's evaluation episodes must meet beyond the schema:

    - paired: each run's episodes of a policy are ``reset_seed = s_0 + episode`` for one
      first seed ``s_0`` (the harness's protocol; cherry-picked starts are not paired), and
      they are episodes 0 to n - 1 (a selection of the best episodes keeps their indices);
    - independent: no two seeds of an algorithm hold identical evaluation rows (one run copied);
    - possible episodes: on a task whose family checks them (``Family.episode_check``), every
      episode's return, length and costs are an outcome of the task (``possible_episodes``);
    - possible: on a task with an exact optimum R*, no run whose mean return (its one-sided
      lower bound at :data:`IMPOSSIBLE_ALPHA`) is above what any policy earns at its costs
      (:func:`_return_bound`); a genuine run is refused with probability at most 2 x
      ``IMPOSSIBLE_ALPHA``.
    """
    ev = table[table["kind"] == "eval"]
    for (task, algo, seed, policy), g in ev.groupby(["task", "algo", "seed", "policy"], sort=True):
        where = f"{source}: run task={task} algo={algo} seed={int(seed)} ({policy} episodes)"
        seeds, episodes = g["reset_seed"].to_numpy(dtype=float), g["episode"].to_numpy(dtype=float)
        if not np.isfinite(seeds).all():
            raise ResultsError(f"{where}: reset_seed is empty in {int((~np.isfinite(seeds)).sum())} of {len(seeds)} rows; "
                               "fill it with each episode's reset seed, first_seed + episode (cgrpo's episode i starts "
                               "from reset(seed=1000000 + i))")
        if len(np.unique(seeds - episodes)) != 1:
            raise ResultsError(f"{where}: reset_seed must be first_seed + episode for every episode (the harness's "
                               "paired protocol); give the episodes cgrpo evaluated, not a selection")
        if not np.array_equal(np.sort(episodes), np.arange(len(episodes))):
            gap = int(np.setdiff1d(np.arange(len(episodes)), episodes)[0])
            raise ResultsError(f"{where}: episodes must be 0, 1, ..., {len(episodes) - 1} (every episode evaluated, in "
                               f"order); episode {gap} is missing: give the episodes cgrpo evaluated, not a selection")
    for task, g in ev.groupby("task", sort=True):
        _check_possible_episodes(str(task), g, metas[task] if task in metas else None, source)
    # A copy: the same evaluation episodes under two seeds. Seeds that converge to one
    # deterministic policy evaluate alike too, but a self-reported table cannot show that it
    # is not a copy: such policies are ranked by re-evaluation (submission.py).
    measured = ["kind", "policy", "iteration", "episode", "env_steps", "return", "length",
                *[c for c in table.columns if c.startswith(("cost_", "lambda_"))]]
    for (task, algo), g in table.groupby(["task", "algo"], sort=True):
        cols = [c for c in measured if c in g.columns and g[c].notna().any()]
        evals = [c for c in cols if c in ("policy", "episode", "return", "length") or c.startswith("cost_")]
        digests: dict[int, tuple[tuple[int, ...], tuple[int, ...]]] = {}
        for seed, run in g.groupby("seed", sort=True):
            ordered = run[cols].sort_values(["kind", "policy", "iteration", "episode"], na_position="first")
            whole = tuple(pd.util.hash_pandas_object(ordered.reset_index(drop=True), index=False).tolist())
            ev_rows = ordered[ordered["kind"] == "eval"][evals].reset_index(drop=True)
            episodes = tuple(pd.util.hash_pandas_object(ev_rows, index=False).tolist())
            twin = next((s for s, d in digests.items() if d[1] == episodes), None)
            if twin is not None:
                what = "training and evaluation rows" if digests[twin][0] == whole else "evaluation rows"
                alike = ""
                if _acts_greedily(g[g["seed"] == twin]) and _acts_greedily(run):
                    alike = (", and each one's sampled episodes are its greedy ones: both final policies are "
                             "deterministic and act alike")
                raise ResultsError(f"{source}: {task} {algo}: seeds {twin} and {int(seed)} hold identical {what}{alike}; "
                                   "one evaluation counted twice is not two independent seeds, and a self-reported "
                                   "table cannot show that it is not a copy. Policies that truly evaluate alike are "
                                   "ranked by re-evaluating their saved agents (the run folders cgrpo wrote): "
                                   "docs/benchmark.md section 7")
            digests[int(seed)] = (whole, episodes)
    for (task, algo, seed), g in ev[ev["policy"] == "sampled"].groupby(["task", "algo", "seed"], sort=True):
        meta = metas.get(task)
        if meta is None or meta.optimum_return is None or len(g) < 2:
            continue
        bound = _return_bound(g, meta)
        r = g["return"].to_numpy(dtype=float)
        sd = float(np.std(r, ddof=1))
        lower = float(np.mean(r)) - sps_t_ppf(1 - IMPOSSIBLE_ALPHA, len(r) - 1) * sd / math.sqrt(len(r))
        if lower > bound + 1e-9:
            raise ResultsError(
                f"{source}: run task={task} algo={algo} seed={int(seed)}: mean return {np.mean(r):.4g} (lower bound "
                f"{lower:.4g}) is above {bound:.4g}, the most any policy of this task earns at its costs' upper bounds "
                f"(exact optimum R* = {meta.optimum_return:.4g} at the limits); no policy of this task can do that"
            )


def _acts_greedily(run: pd.DataFrame) -> bool:
    """Whether a run's sampled evaluation episodes are its greedy ones, episode for episode
    (return, length and costs): its final policy is deterministic on the episodes played."""
    ev = run[run["kind"] == "eval"]
    cols = [c for c in ("return", "length", *(c for c in ev.columns if c.startswith("cost_"))) if c in ev.columns]
    sampled, greedy = (ev[ev["policy"] == p].sort_values("episode")[cols].reset_index(drop=True)
                       for p in ("sampled", "deterministic"))
    return len(sampled) > 0 and sampled.equals(greedy)


def _check_possible_episodes(task: str, ev: pd.DataFrame, meta: TaskMeta | None, source: str) -> None:
    """Refuse the first evaluation episode of ``task`` that its env says cannot happen."""
    family = _registered_family(task)
    if family is None or not family.episode_check or meta is None:
        return
    from constrained_grpo.tasks import make_env

    env = make_env(task)
    try:
        names = [c.name for c in meta.constraints]
        lengths = ev["length"].to_numpy(dtype=float) if "length" in ev.columns else None
        ok = np.asarray(env.unwrapped.possible_episodes(
            ev["return"].to_numpy(dtype=float), lengths, {n: ev[f"cost_{n}"].to_numpy(dtype=float) for n in names}))
        rule = str(env.unwrapped.episode_rule()) if callable(getattr(env.unwrapped, "episode_rule", None)) else ""
    finally:
        env.close()
    if ok.all():
        return
    i = int(np.flatnonzero(~ok)[0])
    row = ev.iloc[i]
    length = "length unknown" if lengths is None or not np.isfinite(lengths[i]) else f"{lengths[i]:g} steps"
    spent = ", ".join(f"{n} {float(row[f'cost_{n}']):g}" for n in names)
    raise ResultsError(
        f"{source}: run task={task} algo={row['algo']} seed={int(row['seed'])}: {row['policy']} episode "
        f"{int(row['episode'])} has return {float(row['return']):g} in {length} with {spent}, which no episode of "
        f"{task} can have" + (f" ({rule})" if rule else "") + "; give the episodes cgrpo evaluated"
    )


def _return_bound(g: pd.DataFrame, meta: TaskMeta) -> float:
    """The largest mean return any policy of the task earns with mean costs at most their
    one-sided upper bounds U_k (each at ``IMPOSSIBLE_ALPHA / K``): the LP's value is concave
    in the limits with the duals lambda*_k as a supergradient, so
    ``R*(U) <= R*(d) + sum_k lambda*_k (U_k - d_k)``, and never above the unconstrained optimum.
    Without lambda*: R*(d) where every U_k <= d_k, else the unconstrained optimum (or no bound)."""
    from constrained_grpo.eval.scoring.verdict import cost_bounds

    k = max(1, len(meta.constraints))
    upper = np.array([
        cost_bounds(g[f"cost_{c.name}"].to_numpy(dtype=float), c.limit, c.indicator,
                    alpha_lower=IMPOSSIBLE_ALPHA / k, alpha_upper=IMPOSSIBLE_ALPHA / k)[1]
        for c in meta.constraints
    ])
    return _bound_at(upper, meta)


def _bound_at(upper: np.ndarray, meta: TaskMeta) -> float:
    """:func:`_return_bound` given the costs' upper bounds ``upper``."""
    limits = np.array([c.limit for c in meta.constraints])
    ceiling = math.inf if meta.unconstrained_return is None else float(meta.unconstrained_return)
    if not np.isfinite(upper).all():
        return ceiling
    star = meta.optimal_multipliers
    if star is not None and len(star) == len(limits):
        return min(float(meta.optimum_return) + float(np.dot(star, upper - limits)), ceiling)  # type: ignore[arg-type]
    return float(meta.optimum_return) if bool(np.all(upper <= limits)) else ceiling  # type: ignore[arg-type]


def sps_t_ppf(q: float, df: int) -> float:
    """Student's t quantile (scipy, imported when a submission is checked)."""
    from scipy import stats

    return float(stats.t.ppf(q, df))


def check_submission_table(
    path: str | Path,
    tasks: Mapping[str, TaskMeta] | None = None,
    existing: pd.DataFrame | None = None,
) -> tuple[pd.DataFrame, dict[str, TaskMeta]]:
    """Validate a third-party submission CSV; the one rule set of ``--check`` and ``--add``.

    :func:`validate_table` (schema, string forms, suites, ranges, integer bounds) plus: no
    algorithm name that ``existing`` (the results it would join) ranks already, on any task
    (a submission adds algorithms; it never adds seeds to the board's own, whose runs are
    the board's to make). Raises :class:`ResultsError` with the reason.
    """
    table = read_table_csv(path)
    table, metas = validate_table(table, tasks, source=str(path))
    if existing is not None and len(existing):
        taken = sorted(set(table["algo"]) & set(existing["algo"]))
        if taken:
            mine = set(zip(table["task"], table["algo"], table["seed"].astype(int)))
            theirs = set(zip(existing["task"], existing["algo"], existing["seed"].astype(int)))
            what = "run(s) (task, algo, seed) are in the results already" if mine & theirs else "name(s) are on the board already"
            raise ResultsError(f"{path}: algorithm {', '.join(taken[:3])}: {what}; rename the algorithm (e.g. mine-{taken[0]})")
    _check_submitted_episodes(table, metas, str(path))
    return table, metas
