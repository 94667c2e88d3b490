"""The compact record of an experiment: every run's training log, the summary of its
evaluation and its recorded configuration in a few compressed files, from which the
leaderboard and the figures regenerate byte for byte.

A folder ``DIR`` holds a record when it holds ``DIR/record.json`` (the manifest) and one
``DIR/<task>.<sha256[:16]>.npz`` per task beside it (named by content, so that a new record
is written beside the old one and switched by the manifest's rename, :func:`write_record`):

- ``record.json``: the schema (``cgrpo-record/2``), the columns and dtypes of the long
  table's train rows and of the evaluation summaries, in order, every task's metadata
  (``TaskMeta.to_dict()``: constraints and exact optimum), what each algorithm's runs record
  about it (:func:`~constrained_grpo.eval.scoring.loader.algo_properties`), and per task file
  its train rows, summary rows, runs, byte size and SHA-256;
- ``<task>.<sha256[:16]>.npz``: a zip (LZMA) of ``.npy`` arrays (read with ``allow_pickle=False``): the
  task's train rows, one encoding per column (:func:`_encode_column`), its evaluation
  summaries (:func:`~constrained_grpo.eval.scoring.metrics.eval_summaries`: per run and
  policy the episode count, the exact mean return and, per cost, the exact mean and sum of
  squared deviations, the event and within-limit counts), under the prefix ``e.``; and
  ``configs`` and ``done`` (each run's ``config.json`` and ``done.json`` as text) and
  ``run_keys`` (``algo/seed``).

The evaluation episodes themselves are not kept: every metric of the evaluation is a
function of the summaries (the verdict's bounds, the expected score, the share of episodes
within a limit), and a powered evaluation has tens of thousands of episodes per run. A
numeric column is kept bit for bit, in whichever of these compresses smallest: its distinct
64-bit patterns and a code per row; the decimal digits of each value's shortest
representation (``m * 10^e``, exact where both are small, the rest as exceptions), per value
or with one exponent for the column (as they are or as first differences: a clock); first
differences (integers); raw.

The zip entries carry a fixed date, so packing the same runs writes the same bytes. Loading
checks every file's size and SHA-256 against the manifest before parsing it, then every
array's length against the row counts: a truncated, altered or missing file is refused with
one line naming it, and nothing is returned half-loaded. The runs were validated
(:func:`~constrained_grpo.eval.scoring.loader.validate_table`) when they were packed; the
checksums prove them unchanged, so loading does not validate them again. Records of the
first schema (``cgrpo-record/1``, the evaluation episodes kept as rows) are read too.

``python -m constrained_grpo.eval.scoring.record pack SOURCE... --out DIR`` packs run
folders and records (merged; a run in two sources is refused); ``cgrpo leaderboard DIR``
reads the record as it reads run folders (``--table`` writes its train rows and summaries).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import lzma
import math
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from constrained_grpo.eval import storage
from constrained_grpo.schema import TaskMeta

__all__ = ["MANIFEST", "SCHEMA", "Record", "is_record", "load_record", "pack", "record_algos", "write_record"]

SCHEMA = "cgrpo-record/2"
#: Schemas this module reads (the first kept the evaluation episodes as rows).
READABLE = ("cgrpo-record/1", SCHEMA)
MANIFEST = "record.json"
#: A record's files are read whole: a larger one is refused before it is read.
MAX_FILE_BYTES = 64 * 1024 * 1024
#: What one task file may unpack to (its arrays in memory).
MAX_UNPACKED_BYTES = 1024 * 1024 * 1024
_ZIP_DATE = (1980, 1, 1, 0, 0, 0)
_STRING_DTYPE = "str"
#: Prefix of the evaluation summaries' arrays in a task file.
_EVAL = "e."


class Record:
    """A loaded record: the long table's rows (train rows; a first-schema record's eval rows
    too), the evaluation summaries (None for a first-schema record: its eval rows give them),
    the tasks' metadata, the algorithms' recorded properties, and each run's ``config.json``
    / ``done.json``."""

    def __init__(self, table: pd.DataFrame, evals: pd.DataFrame | None, tasks: dict[str, TaskMeta],
                 algos: dict[str, dict[str, Any]],
                 configs: dict[tuple[str, str, int], tuple[dict[str, Any], dict[str, Any]]]):
        self.table = table
        self.evals = evals
        self.tasks = tasks
        self.algos = algos
        self.configs = configs


def is_record(path: str | Path) -> bool:
    """Whether ``path`` is a folder holding a record (its ``record.json``)."""
    return (Path(path) / MANIFEST).is_file()


def _task_file(task: str, digest: str) -> str:
    """A task file's name: the task and the start of its SHA-256 (content-addressed: a new
    record never overwrites a file the old manifest names)."""
    return f"{storage.safe_name(task.replace('/', '_'))}.{digest[:16]}.npz"


def _sweep(out: Path, keep: set[str]) -> None:
    """Remove the task files no manifest names and the hidden temporary files a killed
    writer left (``.NAME.tmp-PID``, :func:`constrained_grpo.files.atomic_write_bytes`)."""
    for path in out.iterdir():
        stray = path.suffix == ".npz" and path.name not in keep
        temporary = path.name.startswith(f".{MANIFEST}.tmp-") or (path.name.startswith(".") and ".npz.tmp-" in path.name)
        if (stray or temporary) and path.is_file() and not path.is_symlink():
            path.unlink()


# --- encoding ---------------------------------------------------------------------------
_POW10 = 10.0 ** np.arange(23)
_MAX_EXACT = 2 ** 53


def _narrow(a: np.ndarray, unsigned: bool = False) -> np.ndarray:
    """``a`` (integers) in the smallest integer dtype that holds it."""
    lo, hi = (int(a.min()), int(a.max())) if a.size else (0, 0)
    for dtype in ((np.uint8, np.uint16, np.uint32) if unsigned else (np.int8, np.int16, np.int32)):
        info = np.iinfo(dtype)
        if info.min <= lo and hi <= info.max:
            return a.astype(dtype)
    return a.astype(np.uint64 if unsigned else np.int64)


def _decimal_parts(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per value, ``(m, e)`` with the shortest representation ``repr(x) = m * 10^e`` (m
    without trailing zeros); ``(0, 0)`` for NaN, infinities and an m or e too large for an
    exact :func:`_compose`."""
    m = np.zeros(x.size, np.int64)
    e = np.zeros(x.size, np.int64)
    for i, v in enumerate(x.tolist()):
        if not math.isfinite(v) or v == 0.0:
            continue
        mant, _, exp = repr(v).partition("e")
        ex = int(exp) if exp else 0
        whole, _, frac = mant.partition(".")
        frac = frac.rstrip("0")
        k = int(whole + frac)
        ex -= len(frac)
        while k % 10 == 0:
            k //= 10
            ex += 1
        if abs(k) < _MAX_EXACT and -22 <= ex <= 22:
            m[i], e[i] = k, ex
    return m, e


def _compose(m: np.ndarray, e: np.ndarray) -> np.ndarray:
    """``m * 10^e``, correctly rounded: m and 10^|e| are exact doubles (|m| < 2^53,
    |e| <= 22), so one multiplication or division rounds once, as parsing the decimal does."""
    mf, ei = m.astype(np.float64), e.astype(np.int64)
    p = _POW10[np.abs(ei)]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(ei >= 0, mf * p, mf / p)


def _nbytes(arrays: Mapping[str, np.ndarray]) -> int:
    return sum(a.nbytes for a in arrays.values())


def _ints(key: str, a: np.ndarray) -> dict[str, np.ndarray]:
    """int64 ``a`` in the narrowest of int8/16/32/64 that holds all but a few of its values,
    those few as exceptions (``key.i``: where, ``key.v``: what)."""
    best: dict[str, np.ndarray] = {key: a}
    for dtype in (np.int8, np.int16, np.int32):
        info = np.iinfo(dtype)
        wide = (a < info.min) | (a > info.max)
        where = np.flatnonzero(wide)
        option = {key: np.where(wide, 0, a).astype(dtype), f"{key}.i": _narrow(where, unsigned=True), f"{key}.v": a[where]}
        if _nbytes(option) < _nbytes(best):
            best = option
    return best


def _read_ints(arrays: Mapping[str, np.ndarray], key: str, damaged: Any) -> np.ndarray | None:
    stored = arrays.get(key)
    if stored is None:
        return None
    a = stored.astype(np.int64)
    where, what = arrays.get(f"{key}.i"), arrays.get(f"{key}.v")
    if (where is None) != (what is None):
        raise damaged()
    if where is not None:
        if len(where) != len(what) or (len(where) and int(where.max()) >= len(a)) or what.dtype != np.int64:
            raise damaged()
        a[where.astype(np.int64)] = what
    return a


def _deltas(key: str, a: np.ndarray) -> dict[str, np.ndarray]:
    """First differences of int64 ``a`` (the first against 0; wrapping, so exact)."""
    return _ints(key, np.diff(a, prepend=np.int64(0)))


def _decimal_options(name: str, raw: np.ndarray, bits: np.ndarray) -> list[dict[str, np.ndarray]]:
    """Encodings of a float column by decimal digits: per value ``m * 10^e``; or with one
    exponent E for the column (fixed point, ``M * 10^E``), the M as they are or as first
    differences (a wall clock). Values without short digits are exceptions (``xi``, ``xb``)."""
    m, e = _decimal_parts(raw)
    miss = np.flatnonzero(_compose(m, e).view(np.int64) != bits)
    exceptions = {f"{name}.xi": _narrow(miss, unsigned=True), f"{name}.xb": bits[miss]}
    options = [{**_ints(f"{name}.m", m), f"{name}.e": _narrow(e), **exceptions}]
    nonzero = m != 0
    if nonzero.any():
        exp = int(e[nonzero].min())
        shift = np.where(nonzero, e - exp, 0)
        digits = np.floor(np.log10(np.maximum(np.abs(m), 1))).astype(np.int64) + 1
        if exp >= -22 and int((digits + shift).max()) <= 15:  # M < 10^15 < 2^53: exact
            fixed = m * 10 ** shift
            options.append({**_ints(f"{name}.M", fixed), f"{name}.E": np.array([exp], np.int64), **exceptions})
            options.append({**_deltas(f"{name}.dM", fixed), f"{name}.E": np.array([exp], np.int64), **exceptions})
    return options


def _encode_column(name: str, col: pd.Series) -> tuple[dict[str, np.ndarray], str]:
    """The arrays of one column and its kind (``str``, ``int64`` or ``float64``): strings as
    values and int32 codes (-1: empty); numbers as the smallest exact encoding (module docstring)."""
    if col.dtype == object:
        missing = col.isna().to_numpy()
        text = col.where(~missing, "").astype(str).to_numpy()
        values, inverse = np.unique(text, return_inverse=True)
        codes = inverse.astype(np.int32)
        codes[missing] = -1
        return {f"{name}.values": values.astype(np.str_), f"{name}.codes": codes}, _STRING_DTYPE
    kind = str(col.dtype)
    if kind not in ("int64", "float64"):
        raise ValueError(f"column {name!r} has dtype {kind}; a record holds str, int64 and float64 columns")
    raw = col.to_numpy()
    bits = raw.view(np.int64)  # the exact 64-bit pattern of every value
    values, inverse = np.unique(bits, return_inverse=True)
    options = [{f"{name}.raw": bits}, {f"{name}.values": values, f"{name}.codes": _narrow(inverse, unsigned=True)}]
    if kind == "int64":
        options.append(_deltas(f"{name}.delta", raw))
    elif bits.size:
        options += _decimal_options(name, raw, bits)
    return min(options, key=_packed_size), kind


def _packed_size(arrays: Mapping[str, np.ndarray]) -> tuple[int, int]:
    """What an encoding costs in the task file (LZMA at a fast preset; ties by raw size)."""
    return (sum(len(lzma.compress(np.ascontiguousarray(a).tobytes(), preset=1)) for a in arrays.values()), _nbytes(arrays))


def _decode_column(name: str, kind: str, arrays: Mapping[str, np.ndarray], rows: int, where: str) -> np.ndarray:
    def damaged() -> ValueError:
        return ValueError(f"{where}: column {name!r} is damaged; pack the record again")

    if kind == _STRING_DTYPE:
        values, codes = arrays.get(f"{name}.values"), arrays.get(f"{name}.codes")
        if values is None or codes is None or len(codes) != rows or (len(codes) and int(codes.max(initial=-1)) >= len(values)):
            raise damaged()
        if not len(values):
            return np.full(rows, np.nan, dtype=object)
        lookup = np.append(values.astype(object), np.nan)  # code -1 reads the trailing NaN
        return lookup[codes]
    if f"{name}.raw" in arrays:
        bits = arrays[f"{name}.raw"]
    elif f"{name}.delta" in arrays:
        bits = np.cumsum(_read_ints(arrays, f"{name}.delta", damaged))
    elif f"{name}.m" in arrays or f"{name}.M" in arrays or f"{name}.dM" in arrays:
        xi, xb = arrays.get(f"{name}.xi"), arrays.get(f"{name}.xb")
        if f"{name}.m" in arrays:
            m, e = _read_ints(arrays, f"{name}.m", damaged), arrays.get(f"{name}.e")
        else:
            exp = arrays.get(f"{name}.E")
            if exp is None or exp.shape != (1,):
                raise damaged()
            fixed = _read_ints(arrays, f"{name}.M", damaged)
            m = fixed if fixed is not None else np.cumsum(_read_ints(arrays, f"{name}.dM", damaged))
            e = np.full(len(m), int(exp[0]), np.int64)
        if e is None or xi is None or xb is None or len(m) != len(e) or len(xi) != len(xb) \
                or (len(xi) and int(xi.max()) >= len(m)) or np.abs(e.astype(np.int64)).max(initial=0) > 22:
            raise damaged()
        bits = _compose(m, e).view(np.int64)
        bits[xi.astype(np.int64)] = xb
    else:
        values, codes = arrays.get(f"{name}.values"), arrays.get(f"{name}.codes")
        if values is None or codes is None or (len(codes) and int(codes.max()) >= len(values)):
            raise damaged()
        bits = values[codes]
    if len(bits) != rows or bits.dtype != np.int64:
        raise ValueError(f"{where}: column {name!r} has {len(bits)} values for {rows} rows; pack the record again")
    return bits.view(np.dtype(kind))


def _decode_frame(columns: Sequence[tuple[str, str]], arrays: Mapping[str, np.ndarray], rows: int, where: str,
                  prefix: str = "") -> pd.DataFrame:
    frame = pd.DataFrame({col: _decode_column(prefix + col, kind, arrays, rows, where) for col, kind in columns})
    for col, kind in columns:
        if kind != _STRING_DTYPE:
            frame[col] = frame[col].astype(kind)
    return frame


def _zip_bytes(arrays: Mapping[str, np.ndarray]) -> bytes:
    """``arrays`` as an ``.npz`` whose bytes depend only on the arrays (fixed entry dates)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_LZMA) as zf:
        for key in sorted(arrays):
            array = np.ascontiguousarray(arrays[key])
            entry = io.BytesIO()
            np.lib.format.write_array(entry, array, allow_pickle=False)
            info = zipfile.ZipInfo(f"{key}.npy", date_time=_ZIP_DATE)
            info.compress_type = zipfile.ZIP_LZMA
            info.external_attr = 0o644 << 16
            zf.writestr(info, entry.getvalue())
    return buf.getvalue()


# --- writing ----------------------------------------------------------------------------
def _encode_frame(frame: pd.DataFrame, kinds: dict[str, str], where: str, prefix: str = "") -> dict[str, np.ndarray]:
    arrays: dict[str, np.ndarray] = {}
    for col in frame.columns:
        enc, kind = _encode_column(prefix + col, frame[col])
        if kinds.setdefault(col, kind) != kind:
            raise ValueError(f"column {col!r} is {kind} for {where} but {kinds[col]} elsewhere")
        arrays.update(enc)
    return arrays


def write_record(out: str | Path, table: pd.DataFrame, evals: pd.DataFrame, tasks: Mapping[str, TaskMeta],
                 algos: Mapping[str, Mapping[str, Any]],
                 configs: Mapping[tuple[str, str, int], tuple[Mapping[str, Any], Mapping[str, Any]]]) -> Path:
    """Write the record of ``table`` (the train rows of a validated long table) and ``evals``
    (their runs' evaluation summaries, :func:`~constrained_grpo.eval.scoring.metrics.eval_summaries`)
    to ``out``; returns the manifest's path. The task files are content-addressed
    (:func:`_task_file`) and written first, the manifest last, each atomically, and the files
    no manifest names are swept after: a reader, or a writer killed at any step, sees the
    old record or the new one."""
    out = Path(out)
    if (table["kind"] != "train").any():
        raise ValueError("write_record takes the train rows; the evaluation episodes go in as their summaries")
    columns, eval_columns = list(table.columns), list(evals.columns)
    kinds: dict[str, str] = {}
    eval_kinds: dict[str, str] = {}
    files = []
    blobs: dict[str, bytes] = {}
    for task in pd.unique(table["task"]):
        rows = table[table["task"] == task]
        summaries = evals[evals["task"] == task]
        keys = rows[["algo", "seed"]].drop_duplicates()
        runs = [(str(task), str(a), int(s)) for a, s in zip(keys["algo"], keys["seed"])]
        unevaluated = sorted(set((a, s) for _, a, s in runs) - set(zip(summaries["algo"], summaries["seed"].astype(int))))
        if unevaluated:
            raise ValueError(f"{task}: no evaluation summary for run(s) {[f'{a}/seed_{s}' for a, s in unevaluated[:3]]}")
        missing = [f"{a}/seed_{s}" for _, a, s in runs if (task, a, s) not in configs]
        if missing:
            raise ValueError(f"{task}: no config.json recorded for run(s) {missing[:3]}")
        arrays = _encode_frame(rows, kinds, str(task))
        arrays.update(_encode_frame(summaries, eval_kinds, str(task), _EVAL))
        arrays["run_keys"] = np.array([f"{a}/{s}" for _, a, s in runs], dtype=np.str_)
        for i, field in enumerate(("configs", "done")):
            arrays[field] = np.array([json.dumps(configs[key][i], sort_keys=True) for key in runs], dtype=np.str_)
        blob = _zip_bytes(arrays)
        if len(blob) > MAX_FILE_BYTES:
            raise ValueError(f"{task}: its record file would be {len(blob)} bytes, over {MAX_FILE_BYTES}")
        digest = hashlib.sha256(blob).hexdigest()
        name = _task_file(str(task), digest)
        blobs[name] = blob
        files.append({"task": str(task), "file": name, "rows": int(len(rows)), "evals": int(len(summaries)),
                      "runs": len(runs), "bytes": len(blob), "sha256": digest})
    manifest = {
        "schema": SCHEMA,
        "columns": [{"name": c, "kind": kinds[c]} for c in columns],
        "eval_columns": [{"name": c, "kind": eval_kinds[c]} for c in eval_columns],
        "tasks": {t: tasks[t].to_dict() for t in sorted(tasks)},
        "algos": {a: dict(algos[a]) for a in sorted(algos)},
        "files": files,
    }
    # The new task files beside the old ones (no name is shared unless the bytes are), then
    # the manifest in one rename, which switches the record; then the old files go. Killed at
    # any step, the folder holds the old record or the new one, and strays the next write sweeps.
    for name, blob in blobs.items():
        storage.atomic_write_bytes(out / name, blob)
    storage.atomic_write_json(out / MANIFEST, manifest)
    _sweep(out, set(blobs))
    return out / MANIFEST


# --- reading ----------------------------------------------------------------------------
def _read_capped(path: Path, expected: int | None = None) -> bytes:
    if path.is_symlink() or not path.is_file():
        raise ValueError(f"{path} is missing or not a regular file; pack the record again")
    size = path.stat().st_size
    if size > MAX_FILE_BYTES or (expected is not None and size != expected):
        what = f"{expected} recorded" if expected is not None else f"at most {MAX_FILE_BYTES}"
        raise ValueError(f"{path} has {size} bytes ({what}): it was truncated or changed; pack the record again")
    return path.read_bytes()


def _manifest(path: Path) -> dict[str, Any]:
    where = path / MANIFEST
    try:
        manifest = json.loads(_read_capped(where).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as err:
        raise ValueError(f"{where} is not a record manifest ({type(err).__name__}); pack the record again") from None
    if not isinstance(manifest, dict) or manifest.get("schema") not in READABLE:
        raise ValueError(f"{where}: schema {manifest.get('schema') if isinstance(manifest, dict) else None!r} is not "
                         f"one of {list(READABLE)}")
    return manifest


def record_algos(path: str | Path) -> dict[str, dict[str, Any]]:
    """What the record's runs record about each algorithm (its manifest only)."""
    algos = _manifest(Path(path)).get("algos")
    if not isinstance(algos, dict) or not all(isinstance(p, dict) for p in algos.values()):
        raise ValueError(f"{Path(path) / MANIFEST}: malformed 'algos'; pack the record again")
    return {str(a): dict(p) for a, p in algos.items()}


def _task_arrays(file: Path, size: int, digest: str, where: Path) -> dict[str, np.ndarray]:
    """The arrays of one task file, after its size, checksum and unpacked size are checked."""
    blob = _read_capped(file, size)
    if hashlib.sha256(blob).hexdigest() != digest:
        raise ValueError(f"{file}: its SHA-256 differs from {where}'s: the file was changed; pack the record again")
    try:
        # A crafted file may inflate to far more than its size: its entries' sizes are checked first.
        with zipfile.ZipFile(io.BytesIO(blob)) as zf:
            unpacked = sum(info.file_size for info in zf.infolist())
    except (OSError, zipfile.BadZipFile, EOFError, ValueError) as err:
        raise ValueError(f"{file}: not a readable record file ({type(err).__name__}); pack the record again") from None
    if unpacked > MAX_UNPACKED_BYTES:
        raise ValueError(f"{file} unpacks to {unpacked:,} bytes, over {MAX_UNPACKED_BYTES:,}; it is not a record file")
    try:
        with np.load(io.BytesIO(blob), allow_pickle=False) as npz:
            return {k: npz[k] for k in npz.files}
    except (ValueError, OSError, zipfile.BadZipFile, EOFError, NotImplementedError) as err:
        raise ValueError(f"{file}: not a readable record file ({type(err).__name__}); pack the record again") from None


def load_record(path: str | Path, *, configs: bool = False) -> Record:
    """Read the record in folder ``path`` (module docstring); raises ``ValueError`` with one
    line naming the file when anything does not match the manifest. The runs'
    ``config.json`` / ``done.json`` are parsed only with ``configs`` (else ``Record.configs``
    is empty); their arrays are checked either way."""
    path = Path(path)
    where = path / MANIFEST
    manifest = _manifest(path)
    summarised = manifest["schema"] != READABLE[0]
    try:
        columns = [(str(c["name"]), str(c["kind"])) for c in manifest["columns"]]
        eval_columns = [(str(c["name"]), str(c["kind"])) for c in manifest["eval_columns"]] if summarised else []
        tasks = {str(t): TaskMeta.from_dict(m) for t, m in manifest["tasks"].items()}
        algos = {str(a): dict(p) for a, p in manifest["algos"].items()}
        files = [(str(f["task"]), str(f["file"]), int(f["rows"]), int(f["evals"]) if summarised else 0, int(f["runs"]),
                  int(f["bytes"]), str(f["sha256"])) for f in manifest["files"]]
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise ValueError(f"{where}: malformed ({type(err).__name__}: {err}); pack the record again") from None
    frames, summaries, recorded = [], [], {}
    for task, name, rows, n_evals, runs, size, digest in files:
        file = path / name
        if Path(name).name != name or not name.endswith(".npz"):
            raise ValueError(f"{where}: file name {name!r} is not a task file of this folder")
        arrays = _task_arrays(file, size, digest, where)
        frame = _decode_frame(columns, arrays, rows, str(file))
        if len(frame) != rows or set(frame["task"].dropna()) != {task}:
            raise ValueError(f"{file}: holds rows of {sorted(set(frame['task'].dropna()))}, not {rows} rows of {task}")
        if summarised:
            evals = _decode_frame(eval_columns, arrays, n_evals, str(file), _EVAL)
            if set(evals["task"]) - {task}:
                raise ValueError(f"{file}: holds summaries of {sorted(set(evals['task']))}, not of {task}")
            summaries.append(evals)
        keys, cfgs, dones = arrays.get("run_keys"), arrays.get("configs"), arrays.get("done")
        if keys is None or cfgs is None or dones is None or not (len(keys) == len(cfgs) == len(dones) == runs):
            raise ValueError(f"{file}: its run list does not hold the {runs} runs of {where}; pack the record again")
        for key, cfg, done in zip(keys, cfgs, dones) if configs else ():
            try:
                algo, seed = str(key).rsplit("/", 1)
                recorded[(task, algo, int(seed))] = (json.loads(str(cfg)), json.loads(str(done)))
            except (ValueError, RecursionError) as err:  # JSONDecodeError is a ValueError
                raise ValueError(f"{file}: run {str(key)[:80]!r} has no readable config ({type(err).__name__}); "
                                 "pack the record again") from None
        frames.append(frame)
    if not frames:
        raise ValueError(f"{where} lists no task file")
    table = pd.concat(frames, ignore_index=True)
    for col, kind in columns:
        if kind != _STRING_DTYPE:
            table[col] = table[col].astype(kind)
    unknown = sorted(set(table["task"]) - set(tasks))
    if unknown:
        raise ValueError(f"{where}: rows of task(s) {unknown} without their metadata; pack the record again")
    evals = pd.concat(summaries, ignore_index=True) if summarised else None
    return Record(table, evals, tasks, algos, recorded)


# --- packing ----------------------------------------------------------------------------
def pack(sources: Sequence[str | Path], out: str | Path, *, replace: bool = False) -> Path:
    """Merge the complete runs of ``sources`` (run folders or records) into one record at
    ``out``; a (task, algo, seed) present in two sources is refused, naming both, unless
    ``replace``: then the later source's run replaces the earlier one's (a re-run of runs
    recorded under settings that changed)."""
    from constrained_grpo.eval.scoring.loader import _finish, algo_properties, find_runs, load_results
    from constrained_grpo.eval.scoring.metrics import concat_summaries, eval_summaries

    tables, summaries, tasks, algos, configs, origin = [], [], {}, {}, {}, {}
    for source in sources:
        source = Path(source)
        if is_record(source):
            rec = load_record(source, configs=True)
            table, src_tasks, src_algos, src_configs = rec.table, rec.tasks, rec.algos, rec.configs
            evals = rec.evals
        else:
            res = load_results(source)  # validated as it is read
            table, src_tasks, src_algos = res.table, res.tasks, algo_properties(source)
            evals = None
            src_configs = {}
            for run in find_runs(source):
                if storage.is_complete(run):
                    cfg = storage.read_json(run / storage.CONFIG_FILE)
                    key = (str(cfg["run"]["task"]), str(cfg["run"]["algo"]), int(cfg["run"]["seed"]))
                    src_configs[key] = (cfg, storage.read_json(run / storage.DONE_FILE))
        clash = sorted(key for key in src_configs if key in origin)
        if clash and not replace:
            key = clash[0]
            raise ValueError(f"{key[0]}/{key[1]}/seed_{key[2]} is in both {origin[key]} and {source}; pack each run once "
                             "(or --replace: the later source's run wins)")
        if clash:  # the earlier sources' copies of these runs leave every frame
            drop = pd.MultiIndex.from_tuples(clash, names=["task", "algo", "seed"])

            def kept(f: pd.DataFrame) -> pd.DataFrame:
                return f[~pd.MultiIndex.from_arrays([f["task"], f["algo"], f["seed"].astype(int)]).isin(drop)]

            tables, summaries = [kept(f) for f in tables], [kept(f) for f in summaries]
        origin.update({key: source for key in src_configs})
        for task, meta in src_tasks.items():
            if tasks.setdefault(task, meta) != meta:
                raise ValueError(f"{source}: {task} has other constraints or optimum than the runs packed with it")
        for algo, props in src_algos.items():
            if algos.setdefault(algo, props) != props:
                raise ValueError(f"{source}: algorithm {algo} records {props}, other sources {algos[algo]}")
        summaries.append(evals if evals is not None else eval_summaries(table, src_tasks))
        tables.append(table[table["kind"] == "train"])
        configs.update(src_configs)
    table = _finish(pd.concat(tables, ignore_index=True))
    return write_record(out, table, concat_summaries(summaries, tasks), tasks, algos, configs)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m constrained_grpo.eval.scoring.record", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("pack", help="pack run folders and records into one record")
    p.add_argument("sources", nargs="+", type=Path)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--replace", action="store_true",
                   help="a run in several sources: keep the last source's (re-runs replace earlier recordings)")
    args = parser.parse_args(argv)
    try:
        manifest = pack(args.sources, args.out, replace=args.replace)
    except ValueError as err:
        print(f"error: {err}")
        return 1
    total = sum(f["bytes"] for f in json.loads(manifest.read_text())["files"])
    print(f"wrote {manifest} and its task files ({total / 1e6:.2f} MB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
