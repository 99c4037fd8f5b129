"""Why a worker ends without finishing: the protocol's failure kinds.

lavenderd reads `failure: {kind, message, step?, since_step?}` from the last
heartbeat (state `failed`) or the `failed` event, else the exit code, and acts by
kind: `config`, `incompatible_checkpoint` and `data` are not retried, `diverged` is
rolled back to a checkpoint before `since_step`, `damaged_checkpoint` (the checkpoint
to resume from cannot be read) sets it aside and resumes from the one before,
`disk_full` (a write found no space left, or the quota used up) is waited out
until space is freed, then resumed; `missing_run_file` (the checkpoint is intact but
its run folder lacks a file its resume reads) is not retried; anything else is
restarted.
"""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any, Collection, Dict, Iterator, Optional, Tuple

from .checkpoints import ResumeError

DIVERGED = "diverged"
OUT_OF_MEMORY = "out_of_memory"
CONFIG = "config"
INCOMPATIBLE_CHECKPOINT = "incompatible_checkpoint"
DAMAGED_CHECKPOINT = "damaged_checkpoint"
DATA = "data"
DISK_FULL = "disk_full"
MISSING_RUN_FILE = "missing_run_file"
CRASH = "crash"

#: Each kind's exit code, the same as lavender-worker's (`lavender::failure`).
EXIT_CODES: Dict[str, int] = {
    CRASH: 1,
    DATA: 65,
    CONFIG: 78,
    INCOMPATIBLE_CHECKPOINT: 79,
    DIVERGED: 80,
    OUT_OF_MEMORY: 81,
    DAMAGED_CHECKPOINT: 82,
    DISK_FULL: 83,
    MISSING_RUN_FILE: 84,
}
KINDS = tuple(EXIT_CODES)


def exit_code(kind: str) -> int:
    """The exit code that says `kind` (1, a crash, for a kind lavender does not know)."""
    return EXIT_CODES.get(kind, 1)


class WorkerFailure(Exception):
    """Raise it to end the worker with a kind of your choosing, e.g.
    `raise WorkerFailure("data", "shard 3 is truncated; rebuild the shards")`."""

    def __init__(
        self,
        kind: str,
        message: str,
        *,
        step: Optional[int] = None,
        since_step: Optional[int] = None,
    ) -> None:
        if kind not in EXIT_CODES:
            raise ValueError(f"failure kind {kind!r} is not one of {', '.join(KINDS)}")
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.step = step
        self.since_step = since_step


#: The allocator's words for memory that ran out (CUDA, MPS, the CPU allocator).
_OOM_WORDS = ("out of memory", "can't allocate memory", "cannot allocate memory")


def is_out_of_memory(error: BaseException) -> bool:
    """`torch.cuda.OutOfMemoryError` (and torch's other `OutOfMemoryError`s),
    `MemoryError`, and the `RuntimeError`s libtorch raises when an allocation fails."""
    if isinstance(error, MemoryError):
        return True
    if any(cls.__name__ == "OutOfMemoryError" for cls in type(error).__mro__):
        return True
    return isinstance(error, RuntimeError) and any(w in str(error).lower() for w in _OOM_WORDS)


#: A write that found no space: the disk full, or the quota used up (the same to a run).
_DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


def _chain(error: BaseException) -> Iterator[BaseException]:
    """`error` and its causes (or contexts), each once."""
    seen = set()
    e: Optional[BaseException] = error
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        yield e
        e = e.__cause__ or e.__context__


def is_disk_full(error: BaseException) -> bool:
    """An `OSError` with `ENOSPC` or `EDQUOT`, raised directly or as the cause (or
    context) of the error that ends the worker."""
    return any(isinstance(e, OSError) and e.errno in _DISK_FULL_ERRNOS for e in _chain(error))


#: What the readers of checkpoint files raise on bytes they cannot parse (safetensors,
#: pickle, torch's zip archive, JSON) or a file that is not there.
_UNREADABLE_TYPES = (
    "SafetensorError",
    "UnpicklingError",
    "BadZipFile",
    "JSONDecodeError",
    "EOFError",
    "FileNotFoundError",
)
_UNREADABLE_WORDS = (
    "pytorchstreamreader",
    "failed reading zip archive",
    "unexpected eof",
    "can't find a valid checkpoint",
)


#: torch.load's `weights_only` refusing a type the file names (a class pickled into
#: a checkpoint's hyperparameters, say): the bytes read, the loader declined them.
_REFUSED_WORDS = ("was not an allowed global by default", "unsupported GLOBAL")


def is_unreadable(error: BaseException) -> bool:
    """The checkpoint's bytes cannot be read back (cut short, garbled, a file gone):
    not a shape or config mismatch, nor a type `torch.load(weights_only=True)`
    refuses, which stay the script's own error."""
    if any(w in str(error) for w in _REFUSED_WORDS):
        return False
    if any(cls.__name__ in _UNREADABLE_TYPES for cls in type(error).__mro__):
        return True
    return isinstance(error, (RuntimeError, ValueError, OSError)) and any(
        w in str(error).lower() for w in _UNREADABLE_WORDS
    )


def files_named(error: BaseException) -> list:
    """The files `error` (or its cause) names: an `OSError`'s `filename` and
    `filename2` (a `FileNotFoundError` of `open`, say)."""
    names = []
    for e in _chain(error):
        for attr in ("filename", "filename2"):
            name = getattr(e, attr, None)
            if isinstance(name, (str, bytes, Path)) and name:
                names.append(Path(name.decode() if isinstance(name, bytes) else name))
    return names


def _under(path: Path, directory: Path) -> bool:
    try:
        path.resolve().relative_to(directory.resolve())
        return True
    except ValueError:
        return False


def raised_in(error: BaseException, functions: Collection[str]) -> bool:
    """Whether `error` (or its cause) passed through one of `functions`, each named
    `module.function` (a library's own checkpoint loaders, say)."""
    for e in _chain(error):
        tb = e.__traceback__
        while tb is not None:
            frame = tb.tb_frame
            if f"{frame.f_globals.get('__name__', '')}.{frame.f_code.co_name}" in functions:
                return True
            tb = tb.tb_next
    return False


def classify(error: BaseException, loading: Optional[Path] = None, loader: bool = True) -> Tuple[str, str]:
    """(kind, one-line message) for an exception that ends the worker. `loading`: the
    checkpoint being loaded when it came; one that cannot be read is
    `damaged_checkpoint` (lavenderd sets it aside and resumes from the one before).
    An error that names a file is damage only if the file lies in that checkpoint (a
    data shard missing while a resume loads is not); one that names none only if it
    came out of the loader's own calls (`loader`)."""
    message = " ".join(f"{type(error).__name__}: {error}".split())
    if isinstance(error, WorkerFailure):
        return error.kind, " ".join(error.message.split())
    if is_out_of_memory(error):
        return OUT_OF_MEMORY, message
    if is_disk_full(error):
        return DISK_FULL, message
    if loading is not None and is_unreadable(error):
        named = files_named(error)
        if any(_under(f, loading) for f in named) if named else loader:
            return DAMAGED_CHECKPOINT, f"could not load checkpoint {loading}: {message}"
    if isinstance(error, ResumeError):
        return CONFIG, message
    return CRASH, message


def record(
    kind: str,
    message: str,
    *,
    step: Optional[int] = None,
    since_step: Optional[int] = None,
) -> Dict[str, Any]:
    """The `failure` value of the heartbeat and the `failed` event."""
    if kind not in EXIT_CODES:
        raise ValueError(f"failure kind {kind!r} is not one of {', '.join(KINDS)}")
    doc: Dict[str, Any] = {"kind": kind, "message": message}
    if step is not None:
        doc["step"] = int(step)
    if since_step is not None:
        doc["since_step"] = int(since_step)
    return doc
