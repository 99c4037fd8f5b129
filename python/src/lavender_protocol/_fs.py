"""Crash-safe file writes: a reader sees the old file or the new one, never half of one."""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path
from typing import Any

#: Prefix of everything in flight; lavender's listing and status skip such entries.
TMP_PREFIX = ".tmp-"

_counter = itertools.count()


def unique_suffix() -> str:
    """`<pid>-<n>`, unique within this machine at this moment."""
    return f"{os.getpid()}-{next(_counter)}"


def fsync_dir(path: Path) -> None:
    """Make the entries of a directory (creations, renames) durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_bytes(path: Path, data: bytes) -> None:
    """Write `data` to `path` atomically: temporary sibling, fsync, rename, fsync dir."""
    path = Path(path)
    tmp = path.with_name(f"{TMP_PREFIX}{path.name}-{unique_suffix()}")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    fsync_dir(path.parent)


def write_json(path: Path, value: Any) -> None:
    """Pretty JSON written atomically."""
    text = json.dumps(value, indent=2, allow_nan=False) + "\n"
    write_bytes(path, text.encode())


def append_line(path: Path, line: str) -> None:
    """Append one line with a single write on an O_APPEND descriptor, so concurrent
    appenders never interleave within a line."""
    data = (line.rstrip("\n") + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
