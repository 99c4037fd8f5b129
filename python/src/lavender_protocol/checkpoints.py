"""Checkpoints as lavender defines them.

A checkpoint is a directory of the run, `<stage>-<HH-MM-SS>-<NNNN>` (stage of
`[a-z0-9_]`, UTC clock, a counter that only grows within the run), complete once its
`trainer_state.json` exists and parses. It is built in a hidden `.tmp-` directory,
every file is hashed and fsynced, `manifest.json` (each file's size and SHA-256,
`trainer_state.json`'s included, hashed from the bytes about to be written) is
written, `trainer_state.json` goes in last and the directory is renamed
into place, so a checkpoint is either complete or invisible. A Hugging Face
`checkpoint-<N>/` whose `trainer_state.json` parses (it carries `global_step`)
counts too.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

from . import _fs, _time, protocol

TRAINER_STATE_FILE = "trainer_state.json"
#: The content manifest (lavender's `checkpoint::contents`): every other file's size and hash.
MANIFEST_FILE = "manifest.json"
MANIFEST_FORMAT = "lavender.checkpoint-manifest"
MANIFEST_VERSION = 1
_HASH_BLOCK = 1 << 20
CHECKPOINTS_DIR = "checkpoints"
RUN_PREFIX = "run-"

_STAGE_RE = re.compile(r"^[a-z0-9_]+$")
_NAME_RE = re.compile(r"^([a-z0-9_]+)-(\d\d)-(\d\d)-(\d\d)-(\d{4,})$")
_RUN_RE = re.compile(r"^run-\d{4}-\d\d-\d\d_\d\d-\d\d-\d\d$")


class ResumeError(Exception):
    """`--resume` names nothing usable; the message says what to do."""


def valid_stage(stage: str) -> bool:
    return bool(_STAGE_RE.match(stage))


def checkpoint_name(stage: str, at: datetime, counter: int) -> str:
    """`pretrain-16-08-47-0003`."""
    if not valid_stage(stage):
        raise ValueError(f"stage {stage!r} must be [a-z0-9_]+ (it goes into checkpoint names)")
    return f"{stage}-{at.astimezone(_time.now().tzinfo).strftime('%H-%M-%S')}-{counter:04d}"


def parse_name(name: str) -> Optional[Tuple[str, int]]:
    """(stage, counter) of a lavender checkpoint name, else None."""
    m = _NAME_RE.match(name)
    if not m:
        return None
    h, mi, s = int(m.group(2)), int(m.group(3)), int(m.group(4))
    if h > 23 or mi > 59 or s > 59:
        return None
    return m.group(1), int(m.group(5))


def _hf_step(name: str) -> Optional[int]:
    m = re.match(r"^checkpoint-(\d+)$", name)
    return int(m.group(1)) if m else None


@dataclass
class Checkpoint:
    """A complete checkpoint."""

    path: Path
    state: Dict[str, Any]
    mtime: float

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def step(self) -> int:
        return state_step(self.state)

    @property
    def is_hf(self) -> bool:
        return "global_step" in self.state and "stage" not in self.state

    def _key(self):
        parsed = parse_name(self.name)
        return (self.mtime, parsed[1] if parsed else 0, self.name)


def state_step(state: Dict[str, Any]) -> int:
    """The global step of a trainer_state (lavender's `step` or HF's `global_step`)."""
    if isinstance(state.get("step"), int):
        return state["step"]
    return int(state.get("global_step", 0))


def read_state(ckpt_dir: Path) -> Optional[Dict[str, Any]]:
    """The checkpoint's trainer_state, or None when it is missing or incomplete."""
    try:
        doc = json.loads((Path(ckpt_dir) / TRAINER_STATE_FILE).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict):
        return None
    lavender = isinstance(doc.get("step"), int) and doc["step"] >= 0 and isinstance(doc.get("stage"), str)
    hf = isinstance(doc.get("global_step"), int) and doc["global_step"] >= 0
    return doc if (lavender or hf) else None


def load(ckpt_dir: Path) -> Optional[Checkpoint]:
    ckpt_dir = Path(ckpt_dir)
    state = read_state(ckpt_dir)
    if state is None:
        return None
    try:
        mtime = (ckpt_dir / TRAINER_STATE_FILE).stat().st_mtime
    except OSError:
        return None
    return Checkpoint(path=ckpt_dir, state=state, mtime=mtime)


def list_run_checkpoints(run_dir: Path) -> List[Checkpoint]:
    """Complete checkpoints directly inside `run_dir`, oldest first."""
    try:
        entries = list(os.scandir(run_dir))
    except FileNotFoundError:
        return []
    out = []
    for entry in entries:
        if entry.name.startswith(".") or not entry.is_dir():
            continue
        ckpt = load(Path(entry.path))
        if ckpt is not None:
            out.append(ckpt)
    out.sort(key=Checkpoint._key)
    return out


def list_runs(checkpoints_root: Path) -> List[Path]:
    try:
        return sorted(Path(e.path) for e in os.scandir(checkpoints_root) if e.is_dir() and _RUN_RE.match(e.name))
    except FileNotFoundError:
        return []


def list_checkpoints(checkpoints_root: Path) -> List[Checkpoint]:
    """Every complete checkpoint under the root (nested in runs, and flat), oldest first."""
    out = list_run_checkpoints(checkpoints_root)
    for run in list_runs(checkpoints_root):
        out.extend(list_run_checkpoints(run))
    out.sort(key=Checkpoint._key)
    return out


def latest_complete(run_dir: Path) -> Optional[Checkpoint]:
    found = list_run_checkpoints(run_dir)
    return found[-1] if found else None


def next_counter(run_dir: Path) -> int:
    """One past the highest counter the run ever used: its entries (complete,
    incomplete, in flight) and its train.log SAVE lines."""
    highest = 0

    def see(name: str) -> None:
        nonlocal highest
        if name.startswith(_fs.TMP_PREFIX):
            name = name[len(_fs.TMP_PREFIX) :]
        candidate = "-".join(name.split("-")[:5])
        parsed = parse_name(candidate)
        if parsed:
            highest = max(highest, parsed[1])

    try:
        for entry in os.scandir(run_dir):
            see(entry.name)
    except FileNotFoundError:
        pass
    for name in protocol.saved_names(run_dir):
        see(name)
    return highest + 1


def resolve_resume(spec: str, checkpoints_root: Path) -> Checkpoint:
    """`--resume`: `latest` (newest complete across runs), a checkpoint directory, or
    a run directory meaning its newest complete checkpoint."""
    if spec == "latest":
        found = list_checkpoints(checkpoints_root)
        if not found:
            raise ResumeError(
                f"no complete checkpoint to resume from under {checkpoints_root}; "
                "start without --resume to train from step 0, or pass --resume PATH"
            )
        return found[-1]
    path = Path(spec)
    if not path.is_dir():
        raise ResumeError(
            f"checkpoint directory {path} not found; pass a checkpoint directory, a run directory, or `latest`"
        )
    if (path / TRAINER_STATE_FILE).exists():
        ckpt = load(path)
        if ckpt is None:
            raise ResumeError(
                f"{path / TRAINER_STATE_FILE} does not parse: the save was interrupted; "
                "pick an earlier checkpoint or `latest`"
            )
        return ckpt
    ckpt = latest_complete(path)
    if ckpt is None:
        raise ResumeError(
            f"{path} holds no complete checkpoint (one with trainer_state.json); "
            "the save may have been interrupted; pick an earlier checkpoint or `latest`"
        )
    return ckpt


def create_run(checkpoints_root: Path, at: Optional[datetime] = None) -> Path:
    """A new `run-YYYY-MM-DD_HH-MM-SS` directory; a clash moves to the next second."""
    from datetime import timedelta

    at = at or _time.now()
    root = Path(checkpoints_root)
    root.mkdir(parents=True, exist_ok=True)
    for bump in range(120):
        t = at + timedelta(seconds=bump)
        path = root / (RUN_PREFIX + t.strftime("%Y-%m-%d_%H-%M-%S"))
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue
    raise RuntimeError(f"could not create a run directory in {root}: 120 names in a row are taken")


def _hash_and_fsync(path: Path) -> Tuple[int, str]:
    """One pass over a file just written: its size and SHA-256 (read back from the
    page cache, where the bytes still are), then its fsync on the same descriptor."""
    digest = hashlib.sha256()
    buf = bytearray(_HASH_BLOCK)
    view = memoryview(buf)
    size = 0
    with open(path, "rb", buffering=0) as f:
        while True:
            n = f.readinto(buf)
            if not n:
                break
            digest.update(view[:n])
            size += n
        os.fsync(f.fileno())
    return size, digest.hexdigest()


def write_manifest(ckpt_dir: Path, state_bytes: Optional[bytes] = None) -> Dict[str, Any]:
    """Hash every file of the checkpoint being built (all but `manifest.json`), fsync
    each on the way, and write `manifest.json` durably: what lavender verifies the
    checkpoint against (`lavenderd verify`). The commit marker is covered too: the
    `trainer_state.json` already there (a Hugging Face save), or `state_bytes`, the
    bytes about to be written as it (`PendingCheckpoint.commit`), so "verified"
    vouches for the step and data cursor a resume reads. Returns the manifest."""
    root = Path(ckpt_dir)
    files = []
    for dirpath, dirs, names in os.walk(root):
        dirs.sort()
        for name in names:
            path = Path(dirpath) / name
            if path.is_symlink() or not path.is_file():
                continue
            rel = path.relative_to(root).as_posix()
            if rel == MANIFEST_FILE or (rel == TRAINER_STATE_FILE and state_bytes is not None):
                _fs.fsync_file(path)
                continue
            size, digest = _hash_and_fsync(path)
            files.append({"path": rel, "size": size, "hash": digest})
        _fs.fsync_dir(Path(dirpath))
    if state_bytes is not None:
        files.append(
            {"path": TRAINER_STATE_FILE, "size": len(state_bytes), "hash": hashlib.sha256(state_bytes).hexdigest()}
        )
    files.sort(key=lambda f: f["path"])
    manifest = {"format": MANIFEST_FORMAT, "version": MANIFEST_VERSION, "algorithm": "sha256", "files": files}
    _fs.write_json(root / MANIFEST_FILE, manifest)
    return manifest


@dataclass
class PendingCheckpoint:
    """A checkpoint being built: write files into `dir`, then `commit` (or `abort`)."""

    run_dir: Path
    name: str
    dir: Path
    target: Path
    done: bool = field(default=False)

    @classmethod
    def begin(cls, run_dir: Path, name: str) -> "PendingCheckpoint":
        run_dir = Path(run_dir)
        target = run_dir / name
        if target.exists():
            raise FileExistsError(f"checkpoint {target} already exists; counters must not be reused")
        tmp = run_dir / f"{_fs.TMP_PREFIX}{name}-{_fs.unique_suffix()}"
        tmp.mkdir(parents=True)
        return cls(run_dir=run_dir, name=name, dir=tmp, target=target)

    def commit(self, state: Dict[str, Any]) -> Path:
        """fsync every file, write trainer_state.json last, rename into place."""
        if "step" not in state or "stage" not in state:
            raise ValueError("trainer_state needs at least `step` and `stage`")
        state_bytes = (json.dumps(state, indent=2, allow_nan=False) + "\n").encode()
        write_manifest(self.dir, state_bytes)
        _fs.write_bytes(self.dir / TRAINER_STATE_FILE, state_bytes)
        _fs.fsync_dir(self.dir)
        os.rename(self.dir, self.target)
        _fs.fsync_dir(self.run_dir)
        self.done = True
        return self.target

    def abort(self) -> None:
        if not self.done:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.done = True


def commit_directory(staged: Path, target: Path) -> Path:
    """Make a directory written by someone else (an HF save) a checkpoint atomically:
    hash and fsync its files, write its manifest, then rename it into place.
    `target` must not exist yet."""
    staged, target = Path(staged), Path(target)
    if target.exists():
        raise FileExistsError(f"checkpoint {target} already exists")
    write_manifest(staged)
    os.rename(staged, target)
    _fs.fsync_dir(target.parent)
    if staged.parent != target.parent:
        _fs.fsync_dir(staged.parent)
    return target


def trainer_state(
    *,
    step: int,
    stage: str,
    total_steps: int = 0,
    epoch: Optional[float] = None,
    epochs: Optional[int] = None,
    stage_step: Optional[int] = None,
    lr: Optional[float] = None,
    loss: Optional[float] = None,
    val_loss: Optional[float] = None,
    best_val_loss: Optional[float] = None,
    data_cursor: Any = None,
    rng_state: Any = None,
    wall_time_s: float = 0.0,
    extra: Optional[Dict[str, Any]] = None,
) -> Dict[str, Any]:
    """A trainer_state.json document lavender's `TrainerState` reads."""
    fin = protocol._finite
    doc: Dict[str, Any] = dict(extra or {})
    doc.update(
        {
            "step": int(step),
            "total_steps": int(total_steps),
            "epoch": fin(epoch) or 0.0,
            "stage": stage,
            "stage_step": int(step if stage_step is None else stage_step),
            "lr": fin(lr) or 0.0,
            "loss": fin(loss),
            "val_loss": fin(val_loss),
            "best_val_loss": fin(best_val_loss),
            "data_cursor": data_cursor,
            "rng_state": rng_state,
            "wall_time_s": float(wall_time_s),
            "saved_at": _time.rfc3339(_time.now()),
        }
    )
    if epochs is not None:
        doc["epochs"] = int(epochs)
    return doc


SaveFn = Callable[[Path], None]
