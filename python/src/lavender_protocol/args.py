"""The arguments lavenderd passes to a worker:
`<step> --config C --data-root D [--run-dir R] --scale S --chunk N [--resume PATH|latest]`.
Arguments of the script's own are left alone (`LavenderArgs.rest`)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional, Sequence


@dataclass
class LavenderArgs:
    step: Optional[str] = None
    config: Optional[Path] = None
    data_root: Optional[Path] = None
    run_dir: Optional[Path] = None
    scale: Optional[str] = None
    chunk: Optional[int] = None
    resume: Optional[str] = None
    #: Everything that is not one of lavender's arguments, in order.
    rest: List[str] = field(default_factory=list)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    p.add_argument("--config", type=Path)
    p.add_argument("--data-root", type=Path)
    p.add_argument("--run-dir", type=Path)
    p.add_argument("--scale")
    p.add_argument("--chunk", type=int)
    p.add_argument("--resume")
    return p


def parse_args(argv: Optional[Sequence[str]] = None) -> LavenderArgs:
    """Parse lavender's arguments out of `argv` (default: `sys.argv[1:]`). The pipeline
    step is the first positional argument, when there is one and it is not an option."""
    import sys

    argv = list(sys.argv[1:] if argv is None else argv)
    known, rest = _parser().parse_known_args(argv)
    step = None
    if rest and not rest[0].startswith("-"):
        step = rest.pop(0)
    return LavenderArgs(
        step=step,
        config=known.config,
        data_root=known.data_root,
        run_dir=known.run_dir,
        scale=known.scale,
        chunk=known.chunk,
        resume=known.resume,
        rest=rest,
    )
