"""The arguments lavenderd passes to a worker:
`<step> --config C --data-root D [--run-dir R] --chunk N [--resume PATH|latest]`.
The run's scale is in the config file (its `scale` key); `--scale S` is still taken
for a worker run by hand. Arguments of the script's own are left alone
(`LavenderArgs.rest`)."""

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
    step is the word just before `--config` (where lavenderd puts it, after the
    script's own arguments), else a first argument that is not an option."""
    import sys

    argv = list(sys.argv[1:] if argv is None else argv)
    step = None
    # lavenderd appends `<step> --config …` after the script's own arguments.
    if "--config" in argv:
        i = argv.index("--config")
        if i > 0 and not argv[i - 1].startswith("-"):
            step = argv.pop(i - 1)
    known, rest = _parser().parse_known_args(argv)
    if step is None and rest and not rest[0].startswith("-"):
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
