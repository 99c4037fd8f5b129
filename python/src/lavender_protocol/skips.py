"""`<run>/skipped.json`: the data a run skips after lavenderd rolled it back from a
divergence (see lavender's `src/skips.rs`).

A range `{from_step, to_step}` says: a worker resuming from a checkpoint at step
`from_step` advances its data past the batches steps `from_step + 1 ..= to_step`
consumed, then trains step `from_step + 1` on the batch after them. A checkpoint
records (`skips_applied` in trainer_state.json) how many ranges its data position
already includes, so none is applied twice. `Worker.skip_steps` is what to skip at
this start; `Worker.save` records `skips_applied`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List

FILE = "skipped.json"
APPLIED_KEY = "skips_applied"


def read(run_dir: Path) -> List[Dict[str, Any]]:
    """The record's ranges, in order; none when the run has no record."""
    path = Path(run_dir) / FILE
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        return []
    except ValueError as e:
        raise ValueError(f"{path} is not valid JSON ({e}); it is lavenderd's rollback record") from e
    ranges = doc.get("ranges") if isinstance(doc, dict) else None
    if not isinstance(ranges, list):
        raise ValueError(f"{path} has no `ranges` list; it is lavenderd's rollback record")
    return ranges


def to_apply(ranges: List[Dict[str, Any]], step: int, applied: int) -> List[Dict[str, Any]]:
    """The ranges a worker starting at `step`, whose data position includes the first
    `applied` ranges, still applies, in order."""
    return [r for r in ranges[applied:] if int(r.get("from_step", -1)) == int(step)]


def steps(ranges: List[Dict[str, Any]]) -> int:
    """Optimizer steps' worth of data the ranges skip."""
    return sum(max(0, int(r["to_step"]) - int(r["from_step"])) for r in ranges)
