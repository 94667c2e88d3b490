"""Atomic file writes: the old file or the new one on disk, never half of one.

Every writer goes through a hidden temporary file beside the target and ``os.replace``,
which is atomic on POSIX, so a reader (or a SIGKILL mid-write) sees a complete file.
Progress tables rewritten every iteration pass ``fsync=False``; final files keep the
default ``fsync=True``, which also guards them against power loss.
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

__all__ = ["atomic_write_bytes", "atomic_write_csv", "atomic_write_many", "atomic_write_text", "csv_columns"]


def atomic_write_bytes(path: str | Path, data: bytes, *, fsync: bool = True) -> None:
    """Write ``data`` to ``path`` through a hidden temporary file and ``os.replace``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "wb") as fh:
        fh.write(data)
        if fsync:
            # SIGKILL keeps the page cache; fsync guards the final files against power loss too.
            fh.flush()
            os.fsync(fh.fileno())
    os.replace(tmp, path)


def atomic_write_many(files: Mapping[Path, bytes | str]) -> None:
    """Write several files that belong together: every one to its hidden temporary file
    first (fsynced), then all renamed into place in one burst, so that no old file sits
    beside a new one while the slow part (writing) runs; a failure before the renames leaves
    every old file and no temporary."""
    staged: list[tuple[Path, Path]] = []
    try:
        for path, data in files.items():
            path = Path(path)
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
            staged.append((tmp, path))
            with open(tmp, "wb") as fh:
                fh.write(data.encode("utf-8") if isinstance(data, str) else data)
                fh.flush()
                os.fsync(fh.fileno())
    except BaseException:
        for tmp, _ in staged:
            tmp.unlink(missing_ok=True)
        raise
    for tmp, path in staged:
        os.replace(tmp, path)


def atomic_write_text(path: str | Path, text: str, *, fsync: bool = True) -> None:
    """``atomic_write_bytes`` for UTF-8 text."""
    atomic_write_bytes(path, text.encode("utf-8"), fsync=fsync)


def csv_columns(rows: Iterable[Mapping[str, Any]]) -> list[str]:
    """The union of the rows' keys in first-seen order.

    >>> csv_columns([{"a": 1, "b": 2}, {"c": 3, "a": 4}])
    ['a', 'b', 'c']
    """
    return list(dict.fromkeys(key for row in rows for key in row))


def atomic_write_csv(path: str | Path, rows: Iterable[Mapping[str, Any]], *, fsync: bool = True) -> None:
    """Write ``rows`` as a CSV with a header (:func:`csv_columns`), atomically.

    A row without some column gets an empty cell; the cells are written as
    :class:`csv.DictWriter` writes them.
    """
    rows = list(rows)
    buf = io.StringIO(newline="")
    writer = csv.DictWriter(buf, fieldnames=csv_columns(rows))
    writer.writeheader()
    writer.writerows(rows)
    atomic_write_text(path, buf.getvalue(), fsync=fsync)
