"""The files a worker writes into its run directory: `heartbeat.json` (atomic),
`events.jsonl` (append-only), `log_history.jsonl` (one line a training step) and
`train.log` (SAVE / RETAIN lines)."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Dict, Optional

from . import _fs, _time

HEARTBEAT_FILE = "heartbeat.json"
EVENTS_FILE = "events.jsonl"
TRAIN_LOG_FILE = "train.log"
#: Every training step's values, one JSON line a step in Hugging Face's key names, as
#: lavender-worker writes it: the record lavenderd compares a resume's replayed
#: steps with (its replay check).
STEP_RECORD_FILE = "log_history.jsonl"

#: Heartbeat states, as lavenderd reads them. `loading`, `evaluating` and `saving`
#: are phases that hold training: each has its own allowance before lavenderd judges
#: the worker hung.
STATES = ("starting", "loading", "training", "evaluating", "saving", "stopping", "finished", "failed")
#: The phases `Worker.phase` enters.
PHASES = ("loading", "evaluating", "saving")


class Kind:
    """Event kinds lavender knows; readers accept others too."""

    RUN_STARTED = "run_started"
    DATA_LOADED = "data_loaded"
    TOKENIZER_READY = "tokenizer_ready"
    DATASET_BUILT = "dataset_built"
    STAGE_STARTED = "stage_started"
    CHECKPOINT_SAVED = "checkpoint_saved"
    CHECKPOINT_LOADED = "checkpoint_loaded"
    #: Written by lavenderd: a checkpoint set aside as damaged (`<run>/damaged/<name>/`).
    CHECKPOINT_DAMAGED = "checkpoint_damaged"
    DATA_SKIPPED = "data_skipped"
    STAGE_FINISHED = "stage_finished"
    FINAL_SAVED = "final_saved"
    RETENTION = "retention"
    ERROR = "error"
    #: The worker ends without finishing; `failure: {kind, message, ...}` says why.
    FAILED = "failed"


def _finite(x: Any) -> Optional[float]:
    """A JSON-safe float: NaN and infinities (which JSON cannot carry) become None."""
    if x is None:
        return None
    try:
        f = float(x)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def heartbeat_document(
    *,
    step: int,
    total_steps: int,
    stage: str,
    state: str,
    epoch: Optional[float] = None,
    epochs: Optional[int] = None,
    loss: Optional[float] = None,
    loss_smooth: Optional[float] = None,
    lr: Optional[float] = None,
    grad_norm: Optional[float] = None,
    steps_per_sec: Optional[float] = None,
    eta_seconds: Optional[float] = None,
    latest_checkpoint: Optional[str] = None,
    pid: Optional[int] = None,
    failure: Optional[Dict[str, Any]] = None,
) -> Dict[str, Any]:
    """The heartbeat as lavender's `Heartbeat` type reads it; `failure` (state
    `failed`) is a `lavender_protocol.failure.record`."""
    if state not in STATES:
        raise ValueError(f"heartbeat state {state!r} is not one of {', '.join(STATES)}")
    if step < 0 or total_steps < 0:
        raise ValueError(f"step ({step}) and total_steps ({total_steps}) must not be negative")
    eta = _finite(eta_seconds)
    doc = {
        "step": int(step),
        "total_steps": int(total_steps),
        "stage": stage,
        "epoch": _finite(epoch),
        "epochs": None if epochs is None else int(epochs),
        "loss": _finite(loss),
        "loss_smooth": _finite(loss_smooth),
        "lr": _finite(lr),
        "grad_norm": _finite(grad_norm),
        "steps_per_sec": _finite(steps_per_sec),
        "eta_seconds": None if eta is None or eta < 0 else int(round(eta)),
        "timestamp": _time.rfc3339(_time.now()),
        "pid": os.getpid() if pid is None else int(pid),
        "state": state,
        "latest_checkpoint": latest_checkpoint,
    }
    if failure is not None:
        doc["failure"] = failure
    return doc


def write_heartbeat(run_dir: Path, document: Dict[str, Any]) -> None:
    """Replace `<run>/heartbeat.json` atomically."""
    _fs.write_json(Path(run_dir) / HEARTBEAT_FILE, document)


def read_heartbeat(run_dir: Path) -> Dict[str, Any]:
    return json.loads((Path(run_dir) / HEARTBEAT_FILE).read_text())


def event(kind: str, message: str, **fields: Any) -> Dict[str, Any]:
    """`{ts, kind, message, ...fields}`; fields cannot shadow the three reserved keys."""
    doc: Dict[str, Any] = {"ts": _time.rfc3339(_time.now()), "kind": kind, "message": message}
    for key, value in fields.items():
        if key in doc:
            continue
        doc[key] = _finite(value) if isinstance(value, float) else value
    return doc


def append_event(run_dir: Path, kind: str, message: str, **fields: Any) -> Dict[str, Any]:
    """Append one event to `<run>/events.jsonl` as a single line."""
    doc = event(kind, message, **fields)
    line = json.dumps(doc, separators=(",", ":"), default=str)
    _fs.append_line(Path(run_dir) / EVENTS_FILE, line)
    return doc


def read_events(run_dir: Path):
    """Every complete, valid event of the run (a test and debugging aid)."""
    path = Path(run_dir) / EVENTS_FILE
    out = []
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict) and "kind" in doc:
            out.append(doc)
    return out


def step_entry(step: int, **values: Any) -> Dict[str, Any]:
    """One line of the step record: `step` and the values given (`loss`,
    `learning_rate`, `grad_norm`, `epoch` numbers, NaN as null; `stage` a string;
    `window`, the steps a mean `loss` is over, ending at `step`)."""
    entry: Dict[str, Any] = {"step": int(step)}
    for key, value in values.items():
        if key == "stage":
            entry[key] = str(value)
        elif key == "window":
            entry[key] = int(value)
        elif value is not None or key == "loss":
            entry[key] = _finite(value)
    return entry


def append_step(run_dir: Path, entry: Dict[str, Any]) -> None:
    """Appends one step's line to `<run>/log_history.jsonl`."""
    _fs.append_line(Path(run_dir) / STEP_RECORD_FILE, json.dumps(entry, separators=(",", ":")))


def cut_back_steps(run_dir: Path, step: int) -> None:
    """Rewrites the step record without the lines of steps after `step` (and a torn
    last line): a resume trains them again. Lines that are not steps are kept."""
    path = Path(run_dir) / STEP_RECORD_FILE
    try:
        text = path.read_bytes()
    except FileNotFoundError:
        return
    kept = []
    for line in text.split(b"\n")[:-1]:
        try:
            doc = json.loads(line)
            past = isinstance(doc, dict) and isinstance(doc.get("step"), int) and doc["step"] > step
        except ValueError:
            past = False
        if not past:
            kept.append(line + b"\n")
    _fs.write_bytes(path, b"".join(kept))


def log_run_dir(run_dir: Path) -> None:
    _fs.append_line(Path(run_dir) / TRAIN_LOG_FILE, f"CKPT run-dir {run_dir}")


def log_save(run_dir: Path, name: str, at=None) -> None:
    at = at or _time.now()
    _fs.append_line(Path(run_dir) / TRAIN_LOG_FILE, f"SAVE {name} @ {_time.clock(at)}")


def saved_names(run_dir: Path):
    """Checkpoint names of the run's `SAVE` lines, oldest first."""
    path = Path(run_dir) / TRAIN_LOG_FILE
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return []
    names = []
    for line in text.splitlines():
        if line.startswith("SAVE ") and " @ " in line:
            names.append(line[len("SAVE ") :].split(" @ ", 1)[0])
    return names
