"""The lavender worker protocol for Python training scripts.

Standard library only; torch (for agreeing on a stop across ranks), transformers
(`lavender_protocol.hf`) and Lightning (`lavender_protocol.lightning`) are used when
present. See docs/PYTHON.md."""

from .args import LavenderArgs, parse_args
from .checkpoints import (
    Checkpoint,
    ResumeError,
    latest_complete,
    list_checkpoints,
    list_run_checkpoints,
    next_counter,
    resolve_resume,
)
from .dist import any_rank, rank
from .protocol import Kind
from .worker import Worker

__version__ = "0.1.0"

__all__ = [
    "Checkpoint",
    "Kind",
    "LavenderArgs",
    "ResumeError",
    "Worker",
    "any_rank",
    "latest_complete",
    "list_checkpoints",
    "list_run_checkpoints",
    "next_counter",
    "parse_args",
    "rank",
    "resolve_resume",
]
