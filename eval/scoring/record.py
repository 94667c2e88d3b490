"""The compact record of an experiment: every run's long-table rows, task facts and recorded
configuration in a few compressed files, from which the leaderboard and the figures
regenerate byte for byte.

A folder ``DIR`` holds a record when it holds ``DIR/record.json`` (the manifest) and one
``DIR/<task>.npz`` per task beside it:

- ``record.json``: the schema (``cgrpo-record/1``), the long table's columns and dtypes in
  order, every task's metadata (``TaskMeta.to_dict()``: constraints and exact optimum), what
  each algorithm's runs record about it (:func:`~constrained_grpo.eval.scoring.loader.algo_properties`),
  and per task file its rows, runs, byte size and SHA-256;
- ``<task>.npz``: a zip of ``.npy`` arrays (read with ``allow_pickle=False``), one encoding
  per column of the task's rows: a string column as its distinct values and an int32 code
  per row (-1: empty); a numeric column as its distinct 64-bit patterns and a code per row
  (uint8/16/32: values are kept bit for bit, -0.0 and NaN included), or the raw column when
  the codes would not be smaller; plus ``configs`` and ``done`` (each run's ``config.json``
  and ``done.json`` as text) and ``run_keys`` (``algo/seed``).

The zip entries carry a fixed date, so packing the same runs writes the same bytes. Loading
checks every file's size and SHA-256 against the manifest before parsing it, then every
array's length against the row counts: a truncated, altered or missing file is refused with
one line naming it, and nothing is returned half-loaded. The table was validated
(:func:`~constrained_grpo.eval.scoring.loader.validate_table`) when it was packed; the
checksums prove it unchanged, so loading does not validate it again.

``python -m constrained_grpo.eval.scoring.record pack SOURCE... --out DIR`` packs run
folders and records (merged; a run in two sources is refused); ``cgrpo leaderboard DIR``
reads the record as it reads run folders and writes the full long table (``results.csv``).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from constrained_grpo.eval import storage
from constrained_grpo.schema import TaskMeta

__all__ = ["MANIFEST", "SCHEMA", "Record", "is_record", "load_record", "pack", "record_algos", "write_record"]

SCHEMA = "cgrpo-record/1"
MANIFEST = "record.json"
#: A record's files are read whole: a larger one is refused before it is read.
MAX_FILE_BYTES = 64 * 1024 * 1024
#: What one task file may unpack to (its arrays in memory).
MAX_UNPACKED_BYTES = 1024 * 1024 * 1024
_ZIP_DATE = (1980, 1, 1, 0, 0, 0)
_STRING_DTYPE = "str"


class Record:
    """A loaded record: the long table, the tasks' metadata, the algorithms' recorded
    properties, and each run's ``config.json`` / ``done.json``."""

    def __init__(self, table: pd.DataFrame, tasks: dict[str, TaskMeta], algos: dict[str, dict[str, Any]],
                 configs: dict[tuple[str, str, int], tuple[dict[str, Any], dict[str, Any]]]):
        self.table = table
        self.tasks = tasks
        self.algos = algos
        self.configs = configs


def is_record(path: str | Path) -> bool:
    """Whether ``path`` is a folder holding a record (its ``record.json``)."""
    return (Path(path) / MANIFEST).is_file()


def _task_file(task: str) -> str:
    return storage.safe_name(task.replace("/", "_")) + ".npz"


# --- encoding ---------------------------------------------------------------------------
def _codes(inverse: np.ndarray, n: int) -> np.ndarray:
    for dtype in (np.uint8, np.uint16, np.uint32):
        if n <= np.iinfo(dtype).max + 1:
            return inverse.astype(dtype)
    return inverse.astype(np.uint64)


def _encode_column(name: str, col: pd.Series) -> tuple[dict[str, np.ndarray], str]:
    """The arrays of one column and its kind (``str``, ``int64`` or ``float64``)."""
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
    bits = col.to_numpy().view(np.int64)  # the exact 64-bit pattern of every value
    values, inverse = np.unique(bits, return_inverse=True)
    codes = _codes(inverse, len(values))
    if values.nbytes + codes.nbytes >= bits.nbytes:
        return {f"{name}.raw": bits}, kind
    return {f"{name}.values": values, f"{name}.codes": codes}, kind


def _decode_column(name: str, kind: str, arrays: Mapping[str, np.ndarray], rows: int, where: str) -> np.ndarray:
    if kind == _STRING_DTYPE:
        values, codes = arrays.get(f"{name}.values"), arrays.get(f"{name}.codes")
        if values is None or codes is None or len(codes) != rows or (len(codes) and int(codes.max(initial=-1)) >= len(values)):
            raise ValueError(f"{where}: column {name!r} is damaged; pack the record again")
        if not len(values):
            return np.full(rows, np.nan, dtype=object)
        lookup = np.append(values.astype(object), np.nan)  # code -1 reads the trailing NaN
        return lookup[codes]
    if f"{name}.raw" in arrays:
        bits = arrays[f"{name}.raw"]
    else:
        values, codes = arrays.get(f"{name}.values"), arrays.get(f"{name}.codes")
        if values is None or codes is None or (len(codes) and int(codes.max()) >= len(values)):
            raise ValueError(f"{where}: column {name!r} is damaged; pack the record again")
        bits = values[codes]
    if len(bits) != rows or bits.dtype != np.int64:
        raise ValueError(f"{where}: column {name!r} has {len(bits)} values for {rows} rows; pack the record again")
    return bits.view(np.dtype(kind))


def _zip_bytes(arrays: Mapping[str, np.ndarray]) -> bytes:
    """``arrays`` as an ``.npz`` whose bytes depend only on the arrays (fixed entry dates)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as zf:
        for key in sorted(arrays):
            array = np.ascontiguousarray(arrays[key])
            entry = io.BytesIO()
            np.lib.format.write_array(entry, array, allow_pickle=False)
            info = zipfile.ZipInfo(f"{key}.npy", date_time=_ZIP_DATE)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zf.writestr(info, entry.getvalue(), compresslevel=9)
    return buf.getvalue()


# --- writing ----------------------------------------------------------------------------
def write_record(out: str | Path, table: pd.DataFrame, tasks: Mapping[str, TaskMeta],
                 algos: Mapping[str, Mapping[str, Any]],
                 configs: Mapping[tuple[str, str, int], tuple[Mapping[str, Any], Mapping[str, Any]]]) -> Path:
    """Write the record of ``table`` (a validated long table, as ``load_results`` returns it)
    to ``out``; returns the manifest's path. The task files are written first and the
    manifest last, each atomically: a reader sees the old record or the new one."""
    out = Path(out)
    columns = list(table.columns)
    kinds: dict[str, str] = {}
    files = []
    blobs: dict[str, bytes] = {}
    for task in pd.unique(table["task"]):
        rows = table[table["task"] == task]
        keys = rows[["algo", "seed"]].drop_duplicates()
        arrays: dict[str, np.ndarray] = {}
        for col in columns:
            enc, kind = _encode_column(col, rows[col])
            if kinds.setdefault(col, kind) != kind:
                raise ValueError(f"column {col!r} is {kind} for {task} but {kinds[col]} elsewhere")
            arrays.update(enc)
        runs = [(str(task), str(a), int(s)) for a, s in zip(keys["algo"], keys["seed"])]
        missing = [f"{a}/seed_{s}" for _, a, s in runs if (task, a, s) not in configs]
        if missing:
            raise ValueError(f"{task}: no config.json recorded for run(s) {missing[:3]}")
        arrays["run_keys"] = np.array([f"{a}/{s}" for _, a, s in runs], dtype=np.str_)
        for i, field in enumerate(("configs", "done")):
            arrays[field] = np.array([json.dumps(configs[key][i], sort_keys=True) for key in runs], dtype=np.str_)
        name = _task_file(str(task))
        blob = _zip_bytes(arrays)
        if len(blob) > MAX_FILE_BYTES:
            raise ValueError(f"{task}: its record file would be {len(blob)} bytes, over {MAX_FILE_BYTES}")
        blobs[name] = blob
        files.append({"task": str(task), "file": name, "rows": int(len(rows)), "runs": len(runs),
                      "bytes": len(blob), "sha256": hashlib.sha256(blob).hexdigest()})
    manifest = {
        "schema": SCHEMA,
        "columns": [{"name": c, "kind": kinds[c]} for c in columns],
        "tasks": {t: tasks[t].to_dict() for t in sorted(tasks)},
        "algos": {a: dict(algos[a]) for a in sorted(algos)},
        "files": files,
    }
    for name, blob in blobs.items():
        storage.atomic_write_bytes(out / name, blob)
    stale = {p.name for p in out.glob("*.npz")} - set(blobs)
    storage.atomic_write_json(out / MANIFEST, manifest)
    for name in stale:  # task files of an earlier record that this one no longer has
        (out / name).unlink()
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
    if not isinstance(manifest, dict) or manifest.get("schema") != SCHEMA:
        raise ValueError(f"{where}: schema {manifest.get('schema') if isinstance(manifest, dict) else None!r} is not {SCHEMA}")
    return manifest


def record_algos(path: str | Path) -> dict[str, dict[str, Any]]:
    """What the record's runs record about each algorithm (its manifest only)."""
    algos = _manifest(Path(path)).get("algos")
    if not isinstance(algos, dict) or not all(isinstance(p, dict) for p in algos.values()):
        raise ValueError(f"{Path(path) / MANIFEST}: malformed 'algos'; pack the record again")
    return {str(a): dict(p) for a, p in algos.items()}


def load_record(path: str | Path, *, configs: bool = False) -> Record:
    """Read the record in folder ``path`` (module docstring); raises ``ValueError`` with one
    line naming the file when anything does not match the manifest. The runs'
    ``config.json`` / ``done.json`` are parsed only with ``configs`` (else ``Record.configs``
    is empty); their arrays are checked either way."""
    path = Path(path)
    where = path / MANIFEST
    manifest = _manifest(path)
    try:
        columns = [(str(c["name"]), str(c["kind"])) for c in manifest["columns"]]
        tasks = {str(t): TaskMeta.from_dict(m) for t, m in manifest["tasks"].items()}
        algos = {str(a): dict(p) for a, p in manifest["algos"].items()}
        files = [(str(f["task"]), str(f["file"]), int(f["rows"]), int(f["runs"]), int(f["bytes"]), str(f["sha256"]))
                 for f in manifest["files"]]
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise ValueError(f"{where}: malformed ({type(err).__name__}: {err}); pack the record again") from None
    frames, recorded = [], {}
    for task, name, rows, runs, size, digest in files:
        file = path / name
        if Path(name).name != name or not name.endswith(".npz"):
            raise ValueError(f"{where}: file name {name!r} is not a task file of this folder")
        blob = _read_capped(file, size)
        if hashlib.sha256(blob).hexdigest() != digest:
            raise ValueError(f"{file}: its SHA-256 differs from {where}'s: the file was changed; pack the record again")
        try:
            # A crafted file may deflate to far more than its size: its entries' sizes are checked first.
            with zipfile.ZipFile(io.BytesIO(blob)) as zf:
                unpacked = sum(info.file_size for info in zf.infolist())
        except (OSError, zipfile.BadZipFile, EOFError, ValueError) as err:
            raise ValueError(f"{file}: not a readable record file ({type(err).__name__}); pack the record again") from None
        if unpacked > MAX_UNPACKED_BYTES:
            raise ValueError(f"{file} unpacks to {unpacked:,} bytes, over {MAX_UNPACKED_BYTES:,}; it is not a record file")
        try:
            with np.load(io.BytesIO(blob), allow_pickle=False) as npz:
                arrays = {k: npz[k] for k in npz.files}
        except (ValueError, OSError, zipfile.BadZipFile, EOFError) as err:
            raise ValueError(f"{file}: not a readable record file ({type(err).__name__}); pack the record again") from None
        data = {col: _decode_column(col, kind, arrays, rows, str(file)) for col, kind in columns}
        frame = pd.DataFrame(data)
        if len(frame) != rows or set(frame["task"].dropna()) != {task}:
            raise ValueError(f"{file}: holds rows of {sorted(set(frame['task'].dropna()))}, not {rows} rows of {task}")
        keys, cfgs, dones = arrays.get("run_keys"), arrays.get("configs"), arrays.get("done")
        if keys is None or cfgs is None or dones is None or not (len(keys) == len(cfgs) == len(dones) == runs):
            raise ValueError(f"{file}: its run list does not hold the {runs} runs of {where}; pack the record again")
        for key, cfg, done in zip(keys, cfgs, dones) if configs else ():
            algo, seed = str(key).rsplit("/", 1)
            recorded[(task, algo, int(seed))] = (json.loads(str(cfg)), json.loads(str(done)))
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
    return Record(table, tasks, algos, recorded)


# --- packing ----------------------------------------------------------------------------
def pack(sources: Sequence[str | Path], out: str | Path) -> Path:
    """Merge the complete runs of ``sources`` (run folders or records) into one record at
    ``out``; a (task, algo, seed) present in two sources is refused, naming both."""
    from constrained_grpo.eval.scoring.loader import _finish, algo_properties, find_runs, load_results, validate_table

    tables, tasks, algos, configs, origin = [], {}, {}, {}, {}
    for source in sources:
        source = Path(source)
        if is_record(source):
            rec = load_record(source, configs=True)
            table, src_tasks, src_algos, src_configs = rec.table, rec.tasks, rec.algos, rec.configs
        else:
            res = load_results(source)
            table, src_tasks, src_algos = res.table, res.tasks, algo_properties(source)
            src_configs = {}
            for run in find_runs(source):
                if storage.is_complete(run):
                    cfg = storage.read_json(run / storage.CONFIG_FILE)
                    key = (str(cfg["run"]["task"]), str(cfg["run"]["algo"]), int(cfg["run"]["seed"]))
                    src_configs[key] = (cfg, storage.read_json(run / storage.DONE_FILE))
        for key in src_configs:
            if key in origin:
                raise ValueError(f"{key[0]}/{key[1]}/seed_{key[2]} is in both {origin[key]} and {source}; pack each run once")
            origin[key] = source
        for task, meta in src_tasks.items():
            if tasks.setdefault(task, meta) != meta:
                raise ValueError(f"{source}: {task} has other constraints or optimum than the runs packed with it")
        for algo, props in src_algos.items():
            if algos.setdefault(algo, props) != props:
                raise ValueError(f"{source}: algorithm {algo} records {props}, other sources {algos[algo]}")
        tables.append(table)
        configs.update(src_configs)
    table = _finish(pd.concat(tables, ignore_index=True))
    table, tasks = validate_table(table, tasks, source=" + ".join(str(s) for s in sources))
    return write_record(out, table, tasks, algos, configs)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m constrained_grpo.eval.scoring.record", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("pack", help="pack run folders and records into one record")
    p.add_argument("sources", nargs="+", type=Path)
    p.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    try:
        manifest = pack(args.sources, args.out)
    except ValueError as err:
        print(f"error: {err}")
        return 1
    total = sum(f["bytes"] for f in json.loads(manifest.read_text())["files"])
    print(f"wrote {manifest} and its task files ({total / 1e6:.2f} MB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
