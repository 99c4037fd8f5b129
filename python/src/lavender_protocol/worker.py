"""`Worker`: the worker protocol for a training loop in a few calls.

w = Worker.from_argv(total_steps=1000)
start = w.resume.step if w.resume else 0
if w.resume:
    w.load(lambda path: model.load_state_dict(torch.load(path / "model.pt")))
with w:                                         # an exception: `failed`, its kind's exit code
    w.start(step=start)
    for step in range(start + 1, w.total_steps + 1):
        loss = train_one_step()
        w.step(step, loss=loss, lr=lr)
        if step % 500 == 0:
            with w.phase("evaluating"):
                val_loss = evaluate()
        stop = w.should_stop()                  # SIGTERM seen (on any rank)
        if stop or step % 100 == 0 or step == w.total_steps:
            w.save(step, lambda d: torch.save(model.state_dict(), d / "model.pt"),
                   final=stop or step == w.total_steps)
        if stop:
            sys.exit(w.stopped())
    sys.exit(w.finished())
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, Optional, Sequence, TypeVar

from . import _time, checkpoints, dist, failure, lifetime, protocol, skips
from .args import LavenderArgs, parse_args
from .checkpoints import Checkpoint, PendingCheckpoint, ResumeError
from .divergence import Divergence

T = TypeVar("T")

#: The exit code when `--resume` names nothing usable (the script cannot start):
#: the worker rejects its arguments, a `config` failure.
RESUME_EXIT = failure.EXIT_CODES[failure.CONFIG]
#: The exit code when lavenderd asks this script for a step it does not do.
WRONG_STEP_EXIT = 2


#: The environment variable that tells a worker the step to stop at (`lavenderd drill`).
STOP_AT_STEP_VAR = "LAVENDER_STOP_AT_STEP"


def _stop_at_step(value: Optional[str]) -> Optional[int]:
    if value is None or value == "":
        return None
    try:
        step = int(value)
    except ValueError:
        raise ValueError(
            f"{STOP_AT_STEP_VAR}={value!r} is not a step number; unset it or give one (e.g. 120)"
        ) from None
    if step < 0:
        raise ValueError(f"{STOP_AT_STEP_VAR}={value!r} is negative; give a step number (e.g. 120)")
    return step


class Worker:
    """One process of a supervised training run. Under torchrun every rank makes a
    `Worker`; only rank 0 writes files, every rank honours a stop."""

    def __init__(
        self,
        run_dir: Path,
        *,
        total_steps: int = 0,
        stage: str = "train",
        data_root: Optional[Path] = None,
        resume: Optional[str] = None,
        epochs: Optional[int] = None,
        heartbeat_every: int = 1,
        heartbeat_min_interval_s: float = 1.0,
        retention: Optional[str] = None,
        rank: Optional[int] = None,
        handle_signals: bool = True,
        handle_failures: Optional[bool] = None,
    ) -> None:
        if not checkpoints.valid_stage(stage):
            raise ValueError(f"stage {stage!r} must be [a-z0-9_]+ (it goes into checkpoint names)")
        if retention not in (None, "daemon", "worker"):
            raise ValueError(f"retention must be None, 'daemon' or 'worker', not {retention!r}")
        self.run_dir = Path(run_dir)
        self.data_root = Path(data_root) if data_root else None
        self.total_steps = int(total_steps)
        self.stage = stage
        self.epochs = epochs
        self.heartbeat_every = max(1, int(heartbeat_every))
        self.heartbeat_min_interval_s = float(heartbeat_min_interval_s)
        self.retention = retention
        self.rank = dist.rank() if rank is None else int(rank)
        self.writes = self.rank == 0
        # A rank whose launcher dies must not keep writing into the run (`lifetime`).
        lifetime.die_with_launcher()
        self.latest_checkpoint: Optional[str] = None
        self.best_val_loss: Optional[float] = None
        self._stop_flag = False
        self._stop_agreed = False
        self._state = "starting"
        self._step = 0
        self._last: Dict[str, Any] = {}
        self._loss_smooth: Optional[float] = None
        self._rate: Optional[float] = None
        self._rate_mark: Optional[tuple] = None
        self._last_hb_time = 0.0
        self._last_hb_step = -1
        self._started = time.monotonic()
        self._stepped = False
        self._failure: Optional[Dict[str, Any]] = None
        # The checkpoint being loaded, until it loaded: a failure to read it then is
        # `damaged_checkpoint`, not a crash.
        self.loading: Optional[Path] = None
        # `loading` came from `load`, whose `load_fn` is all that runs meanwhile: an
        # error naming no file is the loader's too.
        self._in_load = False
        #: A training library's own checkpoint loaders (`module.function`, set by its
        #: callback): an error raised in one is judged as one while loading, whenever
        #: it comes (the Trainer reads the RNG state at the first step).
        self.loader_calls: frozenset = frozenset()
        self._previous_handler = None
        self._previous_excepthook = None
        #: SIGTERM is this worker's (`install_signal_handler`).
        self.handles_sigterm = False
        if handle_signals:
            self.install_signal_handler()
        # Process-wide hooks go together: a worker that leaves SIGTERM alone (a test,
        # a notebook) leaves sys.excepthook alone too, unless told otherwise.
        if handle_signals if handle_failures is None else handle_failures:
            self.install_excepthook()
        if self.writes:
            self.run_dir.mkdir(parents=True, exist_ok=True)
        self.resume: Optional[Checkpoint] = None
        if resume:
            root = self.data_root / checkpoints.CHECKPOINTS_DIR if self.data_root else self.run_dir.parent
            self.resume = checkpoints.resolve_resume(resume, root)
            self.latest_checkpoint = self.resume.name
            self._step = self.resume.step
        # What a rollback recorded for this start (`skips`): the caller's data skips
        # `skip_steps` steps' worth of batches; every save records `skips_applied`.
        ranges = skips.read(self.run_dir)
        applied = int(self.resume.state.get(skips.APPLIED_KEY, 0)) if self.resume else 0
        start_step = self.resume.step if self.resume else 0
        self.skip_ranges = skips.to_apply(ranges, start_step, applied)
        self.skip_steps = skips.steps(self.skip_ranges)
        self.skips_applied = len(ranges)
        #: `LAVENDER_STOP_AT_STEP` (set by `lavenderd drill`): once this step is done,
        #: `should_stop()` is true, as after a SIGTERM (the drill's worker saves into
        #: its scratch run and exits).
        self.stop_at_step = _stop_at_step(os.environ.get(STOP_AT_STEP_VAR))

    # ----- construction from lavenderd's arguments -----

    @classmethod
    def from_args(cls, args: LavenderArgs, **kwargs: Any) -> "Worker":
        """A worker for the arguments lavenderd passed. Without `--run-dir` (a run
        outside lavenderd) a new run directory is made under `--data-root`
        (default `./data-root`)."""
        if args.step is not None and args.step != "train":
            print(
                f"lavender_protocol: this script trains; lavenderd asked for step {args.step!r}. "
                "Set `steps: [train]` in the lavender config that runs it.",
                file=sys.stderr,
            )
            sys.exit(WRONG_STEP_EXIT)
        data_root = args.data_root or Path("data-root")
        run_dir = args.run_dir
        if run_dir is None:
            if dist.rank() != 0:
                raise ValueError("every rank needs the same --run-dir; pass it explicitly")
            run_dir = checkpoints.create_run(data_root / checkpoints.CHECKPOINTS_DIR)
        try:
            return cls(run_dir, data_root=data_root, resume=args.resume, **kwargs)
        except ResumeError as e:
            message = f"cannot resume: {e}"
            print(f"lavender_protocol: {message}", file=sys.stderr)
            # Said in the run too: a launcher (torchrun) reports any rank's exit as 1,
            # and lavenderd would take this for a crash and retry it.
            if dist.rank() == 0 and Path(run_dir).is_dir():
                record = failure.record(failure.CONFIG, message)
                protocol.append_event(run_dir, protocol.Kind.FAILED, message, failure=record)
            sys.exit(RESUME_EXIT)

    @classmethod
    def from_argv(cls, argv: Optional[Sequence[str]] = None, **kwargs: Any) -> "Worker":
        """`from_args(parse_args(argv))`; the script's own arguments are in `worker.args.rest`."""
        args = parse_args(argv)
        worker = cls.from_args(args, **kwargs)
        worker.args = args
        return worker

    args: LavenderArgs = LavenderArgs()

    # ----- stop handling -----

    def install_signal_handler(self) -> None:
        """SIGTERM sets the stop flag (the loop saves and exits 0). Must run in the
        main thread, as Python delivers signals there."""
        self._previous_handler = signal.signal(signal.SIGTERM, self._on_sigterm)
        self.handles_sigterm = True

    def _on_sigterm(self, signum, frame) -> None:  # noqa: ARG002
        self._stop_flag = True

    def request_stop(self) -> None:
        """What SIGTERM does: ask the loop to save and stop."""
        self._stop_flag = True

    @property
    def stop_requested(self) -> bool:
        """This process saw SIGTERM (no communication with other ranks)."""
        return self._stop_flag or self._stop_agreed

    def should_stop(self) -> bool:
        """True once any rank saw SIGTERM. Under torch.distributed this is a collective
        (every rank calls it once per step, at the same point), so all ranks stop
        after the same step."""
        if self.stop_at_step is not None and self._step >= self.stop_at_step:
            self._stop_flag = True
        if not self._stop_agreed:
            self._stop_agreed = dist.any_rank(self._stop_flag)
        return self._stop_agreed

    def install_excepthook(self) -> None:
        """An exception nothing caught ends the process with a `failed` heartbeat and
        event naming its kind (the exit code stays Python's 1; leave through `with
        worker:` for the kind's exit code)."""
        self._previous_excepthook = sys.excepthook

        def hook(exc_type, exc, tb):
            if self._failure is None and not issubclass(exc_type, (KeyboardInterrupt, SystemExit)):
                try:
                    self.failed(exc)
                except OSError:
                    pass
            (self._previous_excepthook or sys.__excepthook__)(exc_type, exc, tb)

        sys.excepthook = hook

    # ----- heartbeat and events -----

    def event(self, kind: str, message: str, **fields: Any) -> None:
        if self.writes:
            protocol.append_event(self.run_dir, kind, message, **fields)

    def heartbeat(self, state: Optional[str] = None) -> None:
        """Write the heartbeat now (atomically), with the latest figures."""
        if state is not None:
            self._state = state
        self._last_hb_time = time.monotonic()
        self._last_hb_step = self._step
        if not self.writes:
            return
        eta = None
        if self._rate and self.total_steps > self._step:
            eta = (self.total_steps - self._step) / self._rate
        elif self.total_steps and self._step >= self.total_steps:
            eta = 0
        protocol.write_heartbeat(
            self.run_dir,
            protocol.heartbeat_document(
                step=self._step,
                total_steps=max(self.total_steps, self._step),
                stage=self.stage,
                state=self._state,
                epoch=self._last.get("epoch"),
                epochs=self.epochs,
                loss=self._last.get("loss"),
                loss_smooth=self._loss_smooth,
                lr=self._last.get("lr"),
                grad_norm=self._last.get("grad_norm"),
                steps_per_sec=self._rate,
                eta_seconds=eta,
                latest_checkpoint=self.latest_checkpoint,
                failure=self._failure if self._state == "failed" else None,
            ),
        )

    @contextlib.contextmanager
    def phase(self, state: str) -> Iterator[None]:
        """`with worker.phase("evaluating"):` — a phase that holds training
        (`loading`, `evaluating`, `saving`): the heartbeat says so when it begins, so
        lavenderd gives it that phase's allowance rather than the one between steps,
        and goes back to `training` (`starting` before the first step) when it ends."""
        if state not in protocol.PHASES:
            raise ValueError(f"phase {state!r} is not one of {', '.join(protocol.PHASES)}")
        outer = self._state
        self.heartbeat(state)
        try:
            yield
        finally:
            if self._state == state:
                # Back to the phase this one was inside of, else to steps.
                self.heartbeat(outer if outer in protocol.PHASES else self._base_state())

    def _base_state(self) -> str:
        return "training" if self._stepped else "starting"

    def leave_phase(self, state: str, to: Optional[str] = None) -> None:
        """A phase a training library's callback entered with `heartbeat(state)` ends
        (its hooks cannot hold a `with phase(...)` open): the heartbeat says `to`,
        else `training` (`starting` before the first step), unless another state was
        said meanwhile."""
        if self._state == state:
            self.heartbeat(to or self._base_state())

    def refresh(self) -> None:
        """The heartbeat rewritten as it is, once `heartbeat_min_interval_s` passed
        since the last: for a phase's batches (an evaluation), which report no step."""
        if time.monotonic() - self._last_hb_time >= self.heartbeat_min_interval_s:
            self.heartbeat()

    def load(self, load_fn: Callable[[Path], T]) -> T:
        """Loads the checkpoint `--resume` named with `load_fn(path)` in the
        `loading` phase; returns what `load_fn` returns."""
        if self.resume is None:
            raise ValueError("there is no checkpoint to load: the run did not get --resume")
        with self.phase("loading"):
            self.loading, self._in_load = self.resume.path, True
            loaded = load_fn(self.resume.path)
            self.loading, self._in_load = None, False
            return loaded

    def start(self, step: Optional[int] = None, **fields: Any) -> None:
        """The run begins (or resumes) at `step`: a `run_started` event (and
        `checkpoint_loaded` when resuming), then a `starting` heartbeat."""
        if step is not None:
            self._step = int(step)
        self._rate_mark = (time.monotonic(), self._step)
        if self.writes:
            protocol.log_run_dir(self.run_dir)
            # The steps after this one were lost with the process before: trained again.
            protocol.cut_back_steps(self.run_dir, self._step)
            extra = dict(fields)
            if self.skip_ranges:
                self.event(
                    protocol.Kind.DATA_SKIPPED,
                    f"skipping the data of {self.skip_steps} step(s) after step {self._step} "
                    f"({len(self.skip_ranges)} rollback range(s) in {skips.FILE})",
                    step=self._step,
                    steps=self.skip_steps,
                    ranges=self.skip_ranges,
                )
            if self.retention:
                extra["retention"] = self.retention
            self.event(
                protocol.Kind.RUN_STARTED,
                f"run started at step {self._step}",
                step=self._step,
                total_steps=self.total_steps,
                stage=self.stage,
                rank_count=dist.world_size(),
                **extra,
            )
            if self.resume is not None:
                self.event(
                    protocol.Kind.CHECKPOINT_LOADED,
                    f"resumed from {self.resume.name}",
                    path=str(self.resume.path),
                    step=self.resume.step,
                )
        self.heartbeat("starting")

    def step(
        self,
        step: int,
        *,
        loss: Optional[float] = None,
        lr: Optional[float] = None,
        grad_norm: Optional[float] = None,
        epoch: Optional[float] = None,
        force: bool = False,
    ) -> None:
        """Report step `step` done; the heartbeat is rewritten every `heartbeat_every`
        steps, at most every `heartbeat_min_interval_s` seconds (always on the first
        step and when `force`). A step with its `loss` is appended to the run's step
        record (`log_history.jsonl`), every step, for lavenderd's replay check."""
        self._step = int(step)
        self._stepped = True
        if self.writes and loss is not None:
            entry = protocol.step_entry(
                step, loss=loss, learning_rate=lr, grad_norm=grad_norm, epoch=epoch, stage=self.stage
            )
            protocol.append_step(self.run_dir, entry)
        for key, value in (("loss", loss), ("lr", lr), ("grad_norm", grad_norm), ("epoch", epoch)):
            if value is not None:
                self._last[key] = float(value)
        if loss is not None:
            loss = float(loss)
            if loss == loss:  # not NaN
                self._loss_smooth = loss if self._loss_smooth is None else 0.9 * self._loss_smooth + 0.1 * loss
        now = time.monotonic()
        if self._rate_mark is None:
            self._rate_mark = (now, self._step)
        t0, s0 = self._rate_mark
        if now - t0 >= 1.0 and self._step > s0:
            rate = (self._step - s0) / (now - t0)
            self._rate = rate if self._rate is None else 0.7 * self._rate + 0.3 * rate
            self._rate_mark = (now, self._step)
        elif self._rate is None and self._step > s0 and now > t0:
            self._rate = (self._step - s0) / (now - t0)
        due = (self._step - max(self._last_hb_step, 0)) >= self.heartbeat_every
        # The first step, and the first after a phase, always say `training`.
        first = self._state != "training"
        recent = now - self._last_hb_time < self.heartbeat_min_interval_s
        if force or first or (due and not recent):
            self.heartbeat("training")

    # ----- checkpoints -----

    def save(
        self,
        step: int,
        save_fn: Callable[[Path], None],
        *,
        final: bool = False,
        val_loss: Optional[float] = None,
        loss: Optional[float] = None,
        stage: Optional[str] = None,
        data_cursor: Any = None,
        rng_state: Any = None,
        extra: Optional[Dict[str, Any]] = None,
    ) -> Optional[Path]:
        """Save a checkpoint atomically. Rank 0 calls `save_fn(dir)` to write the
        files into a hidden temporary directory, then everything is fsynced,
        `trainer_state.json` is written last and the directory renamed into place;
        `checkpoint_saved` (or `final_saved`) follows. Other ranks return None
        without writing. Returns the checkpoint's path."""
        self._step = int(step)
        if not self.writes:
            return None
        stage = stage or self.stage
        with self.phase("saving"):
            return self._save(step, save_fn, stage, final, val_loss, loss, data_cursor, rng_state, extra)

    def _save(self, step, save_fn, stage, final, val_loss, loss, data_cursor, rng_state, extra) -> Path:
        at = _time.now()
        name = checkpoints.checkpoint_name(stage, at, checkpoints.next_counter(self.run_dir))
        pending = PendingCheckpoint.begin(self.run_dir, name)
        extra = dict(extra or {})
        extra.setdefault(skips.APPLIED_KEY, self.skips_applied)
        try:
            save_fn(pending.dir)
            if val_loss is not None:
                v = float(val_loss)
                if v == v and (self.best_val_loss is None or v < self.best_val_loss):
                    self.best_val_loss = v
            state = checkpoints.trainer_state(
                step=self._step,
                stage=stage,
                total_steps=self.total_steps,
                epoch=self._last.get("epoch"),
                epochs=self.epochs,
                lr=self._last.get("lr"),
                loss=self._last.get("loss") if loss is None else loss,
                val_loss=val_loss,
                best_val_loss=self.best_val_loss,
                data_cursor=data_cursor,
                rng_state=rng_state,
                wall_time_s=time.monotonic() - self._started,
                extra=extra,
            )
            path = pending.commit(state)
        except BaseException:
            pending.abort()
            raise
        self.committed(path, final=final, val_loss=val_loss)
        return path

    def committed(self, path: Path, *, final: bool = False, val_loss: Optional[float] = None) -> None:
        """A complete checkpoint is in place (written by `save` or by a trainer of its
        own): log the SAVE line, the event, and name it in the heartbeat."""
        if not self.writes:
            return
        path = Path(path)
        protocol.log_save(self.run_dir, path.name)
        self.latest_checkpoint = path.name
        kind = protocol.Kind.FINAL_SAVED if final else protocol.Kind.CHECKPOINT_SAVED
        fields: Dict[str, Any] = {"path": str(path), "step": self._step}
        if val_loss is not None:
            fields["eval_loss"] = float(val_loss)
        self.event(kind, f"saved {path.name} at step {self._step}", **fields)
        self.heartbeat()

    # ----- endings -----

    def stopped(self) -> int:
        """After the save that a stop asked for: the final `stopping` heartbeat.
        Returns 0, the exit code lavenderd expects."""
        self.heartbeat("stopping")
        return 0

    def finished(self) -> int:
        """Training is done (after its final save): the `finished` heartbeat."""
        self.heartbeat("finished")
        return 0

    def fail(
        self,
        kind: str,
        message: str,
        *,
        step: Optional[int] = None,
        since_step: Optional[int] = None,
        **fields: Any,
    ) -> int:
        """The worker ends without finishing, for a reason of `kind`
        (`lavender_protocol.failure.KINDS`): a `failed` event and the last heartbeat
        (`failed`) carry `failure: {kind, message, step, since_step}`. Returns the
        kind's exit code, for `sys.exit`."""
        record = failure.record(kind, message, step=step, since_step=since_step)
        self._failure = record
        self.event(protocol.Kind.FAILED, message, failure=record, step=self._step if step is None else step, **fields)
        self.heartbeat("failed")
        return failure.exit_code(kind)

    def failed(self, error: BaseException) -> int:
        """`fail` for an exception: its kind (`failure.classify`: torch's
        OutOfMemoryError and allocation failures are `out_of_memory`, a
        `WorkerFailure` says its own, a checkpoint `load` cannot read is
        `damaged_checkpoint` (a file named in the error must lie in it), anything
        else is a `crash`) and its message,
        with the traceback in the event. Returns the exit code."""
        loading, loader = self.loading, self._in_load
        if self.resume is not None and failure.raised_in(error, self.loader_calls):
            loading, loader = self.resume.path, True
        kind, message = failure.classify(error, loading=loading, loader=loader)
        step = getattr(error, "step", None) if isinstance(error, failure.WorkerFailure) else None
        since = getattr(error, "since_step", None) if isinstance(error, failure.WorkerFailure) else None
        return self.fail(
            kind,
            message,
            step=step,
            since_step=since,
            traceback="".join(traceback.format_exception(type(error), error, error.__traceback__))[-4000:],
        )

    def diverged(self, divergence: Divergence) -> int:
        """`fail("diverged", ...)` for a `SpikeDetector`'s finding: lavenderd rolls
        back to a checkpoint saved before `divergence.since_step`. Save nothing after
        this (the state has diverged). Returns 80."""
        return self.fail(
            failure.DIVERGED,
            f"training diverged: {divergence.message}",
            step=divergence.step,
            since_step=divergence.since_step,
        )

    def __enter__(self) -> "Worker":
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        """An exception leaving the block is reported (`failed`) and ends the process
        with its kind's exit code; a crash (1) propagates as it is."""
        if exc is None or isinstance(exc, (SystemExit, KeyboardInterrupt)):
            return False
        try:
            code = self.failed(exc)
        except OSError:
            return False
        if code == failure.exit_code(failure.CRASH):
            return False
        traceback.print_exception(exc_type, exc, tb)
        sys.stderr.flush()
        raise SystemExit(code) from exc
