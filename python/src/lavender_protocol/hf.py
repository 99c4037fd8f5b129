"""`LavenderCallback`: the worker protocol for a `transformers.Trainer`.

    cb = LavenderCallback()                      # reads lavenderd's arguments
    args = TrainingArguments(output_dir=cb.output_dir, save_strategy="steps", ...)
    trainer = Trainer(model, args, ..., callbacks=[cb])
    trainer.train(resume_from_checkpoint=cb.resume_from_checkpoint)

- heartbeat from `on_step_end` / `on_log` (loss, learning rate, grad norm, epoch);
- phases: `loading` from the Trainer's construction while it resumes (the
  checkpoint, then the data position) until its first step, `evaluating` from the
  step that asks for an evaluation until `on_evaluate` (kept fresh by the
  prediction steps), `saving` from the step that asks for a save until `on_save`;
- an exception out of `trainer.train()` is a `failed` heartbeat and event with its
  kind (`torch.cuda.OutOfMemoryError` → `out_of_memory`, a checkpoint it cannot read
  while resuming → `damaged_checkpoint`: a file of that checkpoint, or an error out of
  the Trainer's own loaders, `LOADERS`; a data file is not; else `crash`); leave
  through `with cb.worker:` for the kind's exit code;
- SIGTERM → `control.should_save = control.should_training_stop = True` after the
  current step (agreed across ranks under torchrun), then exit 0 with a `stopping`
  heartbeat;
- saves are committed atomically: the Trainer writes `checkpoint-<N>/` into a hidden
  staging directory of the run (`cb.output_dir`); once complete (its
  `trainer_state.json` and RNG state written) every file is hashed and fsynced, its
  `manifest.json` written, and the directory renamed into the run, where lavender
  lists it as a checkpoint;
- `--resume PATH|latest` becomes `resume_from_checkpoint`.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Any, Optional, Sequence

from transformers import TrainerCallback

from . import _fs, checkpoints, protocol
from .worker import Worker

#: The Trainer's output_dir inside the run: hidden, so never listed as a checkpoint.
STAGING_DIR = _fs.TMP_PREFIX + "hf-staging"

#: The Trainer's own readers of the checkpoint it resumes from: an unreadable file
#: raised in one is a damaged checkpoint, even one that names no file.
LOADERS = frozenset(
    {
        "transformers.trainer._load_from_checkpoint",
        "transformers.trainer._load_optimizer_and_scheduler",
        "transformers.trainer._load_scaler",
        "transformers.trainer._load_rng_state",
        "transformers.trainer_callback.load_from_json",
        "transformers.integrations.deepspeed.deepspeed_load_checkpoint",
    }
)


#: Set by lavenderd on a resume whose steps up to it the run had trained before.
REPLAY_THROUGH_VAR = "LAVENDER_REPLAY_THROUGH_STEP"


#: In the run folder: the highest step whose logs the Trainer's reporters took
#: (written by the mark `attach` puts after the last of them).
REPORTED_FILE = ".reported_through"


def _replay_through(value: Optional[str]) -> Optional[int]:
    """The variable's step; anything but a plain non-negative integer is none."""
    if value is None or not value.isdigit() or len(value) > 19:
        return None
    return int(value)


def _reported_through(run_dir) -> Optional[int]:
    """The step in the run folder's `REPORTED_FILE`; none when it is missing or
    holds anything but a plain non-negative integer."""
    try:
        text = (Path(run_dir) / REPORTED_FILE).read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return _replay_through(text)


#: Metric keys on a tracker that are not the Trainer's logs: lavenderd's own
#: (`lavender/event`, goodput) and MLflow's system metrics (their steps are samples).
NOT_THE_TRAINERS = ("lavender/", "system/")


def _mlflow_through(run_id: str) -> Optional[int]:
    """The highest step of the Trainer's metrics that MLflow's run `run_id` holds (0
    for none); None when the server cannot be asked. The Trainer logs to MLflow in the
    background (`synchronous=False`), so a log its reporter took before a SIGKILL may
    never have reached the server: only the server knows what it has."""
    try:
        from mlflow.tracking import MlflowClient

        client = MlflowClient()
        keys = [k for k in client.get_run(run_id).data.metrics if not k.startswith(NOT_THE_TRAINERS)]
        return max((m.step for k in keys for m in client.get_metric_history(run_id, k)), default=0)
    except Exception as e:  # noqa: BLE001 - any failure falls back to the mark
        print(
            f"lavender: could not ask MLflow which steps run {run_id} holds ({e}); going by {REPORTED_FILE} for it",
            file=sys.stderr,
        )
        return None


def _asked_through(reporter) -> Optional[int]:
    """The highest step `reporter`'s tracker holds, where it can be asked (MLflow,
    continuing the run `MLFLOW_RUN_ID` names); None where it cannot."""
    from transformers.integrations.integration_utils import MLflowCallback

    run_id = os.environ.get("MLFLOW_RUN_ID")
    if type(reporter) is MLflowCallback and run_id:
        return _mlflow_through(run_id)
    return None


class _ReportedMark(TrainerCallback):
    """After the last reporter: each log they took raises the run folder's
    `REPORTED_FILE` to its step. A worker killed between lavender's record of a log
    and the reporters' turn has recorded a step no tracker got: the next worker
    keeps from the trackers only the steps up to this mark."""

    def __init__(self, run_dir) -> None:
        self.path = Path(run_dir) / REPORTED_FILE
        self.through = _reported_through(run_dir)

    def on_log(self, args, state, control, logs=None, **kwargs):
        step = int(state.global_step)
        if self.through is None or step > self.through:
            self.through = step
            tmp = self.path.with_name(self.path.name + ".tmp")
            tmp.write_text(str(step), encoding="ascii")
            os.replace(tmp, self.path)
        return control


class LavenderCallback(TrainerCallback):
    def __init__(
        self,
        worker: Optional[Worker] = None,
        argv: Optional[Sequence[str]] = None,
        **worker_options: Any,
    ) -> None:
        self.worker = worker if worker is not None else Worker.from_argv(argv, **worker_options)
        self.worker.loader_calls = LOADERS
        self._eval_loss: Optional[float] = None
        self._eval_step: Optional[int] = None
        # The step whose save the stop asked for. A periodic save that is under way
        # when SIGTERM comes is not the stop's: the stop's comes after its own step.
        self._stop_save_step: Optional[int] = None
        self._began = False
        # The step of the Trainer's last log: its next `loss` is the mean since.
        self._logged_at: Optional[int] = None
        # The last step the run had trained before this resume (lavenderd's
        # LAVENDER_REPLAY_THROUGH_STEP): logs up to it are a replay, kept from the
        # Trainer's trackers (`attach`), which have them already.
        self.replay_through: Optional[int] = _replay_through(os.environ.get(REPLAY_THROUGH_VAR))
        # Of those, the trackers have the ones up to the reporters' mark, where the
        # previous worker left one in this run; `attach` asks the trackers that can
        # be asked (MLflow) instead.
        self._replay_told = self.replay_through
        self.replay_through = self._replayed_through()

    @property
    def output_dir(self) -> str:
        """The Trainer's `output_dir`: a hidden staging directory inside the run."""
        return str(self.worker.run_dir / STAGING_DIR)

    @property
    def resume_from_checkpoint(self) -> Optional[str]:
        """The checkpoint `--resume` resolved to, for `trainer.train(resume_from_checkpoint=…)`."""
        resume = self.worker.resume
        if resume is None:
            return None
        if not resume.is_hf:
            raise checkpoints.ResumeError(
                f"{resume.path} is not a Hugging Face Trainer checkpoint (no global_step in its "
                "trainer_state.json); resume this script from one of its own checkpoint-<N> directories"
            )
        return str(resume.path)

    def attach(self, trainer) -> "LavenderCallback":
        """Puts this callback just before the first of `trainer`'s reporters (the
        callbacks of `report_to`: MLflow, W&B, TensorBoard, …), so that its `on_log`
        runs before theirs: the logs of steps a resume trains again are recorded for
        lavenderd's replay check, then emptied, and no tracker gets a step twice. A
        mark after the last reporter keeps the highest step they took in the run
        folder, so a step recorded but not reported (a kill in between) is reported
        by the next worker. The Trainer's own flow callbacks keep running first.
        Call once, after building the Trainer."""
        from transformers.integrations.integration_utils import INTEGRATION_TO_CALLBACK

        reporters = tuple(INTEGRATION_TO_CALLBACK.values())
        callbacks = trainer.callback_handler.callbacks
        first = next((i for i, c in enumerate(callbacks) if isinstance(c, reporters)), None)
        if first is None:
            return self
        if callbacks.index(self) > first:
            callbacks.remove(self)
            callbacks.insert(first, self)
        if self.worker.writes and not any(isinstance(c, _ReportedMark) for c in callbacks):
            last = max(i for i, c in enumerate(callbacks) if isinstance(c, reporters))
            callbacks.insert(last + 1, _ReportedMark(self.worker.run_dir))
        self.replay_through = self._replayed_through([c for c in callbacks if isinstance(c, reporters)])
        return self

    def _replayed_through(self, reporters=None) -> Optional[int]:
        """The steps of this resume whose logs every reporter has: up to lavenderd's
        `LAVENDER_REPLAY_THROUGH_STEP`, and for each reporter up to what its tracker
        says it holds, or where it cannot be asked (or the reporters are not known
        yet, before `attach`), up to the mark."""
        through = self._replay_told
        if through is None:
            return None
        mark = _reported_through(self.worker.run_dir)
        asked = [None] if reporters is None else [_asked_through(r) for r in reporters]
        held = [mark if step is None else step for step in asked]
        return min([through, *(step for step in held if step is not None)])

    # ----- Trainer events -----

    def on_init_end(self, args, state, control, **kwargs):
        if self.worker.resume is not None:
            # `trainer.train(resume_from_checkpoint=…)` loads it before on_train_begin
            # (its RNG state at the first step, judged by `LOADERS`): until then a
            # missing or unreadable file of it is `damaged_checkpoint`.
            self.worker.loading = self.worker.resume.path
            self.worker.heartbeat("loading")
        return control

    def on_train_begin(self, args, state, control, **kwargs):
        w = self.worker
        # Weights, trainer state and optimizer are loaded: what fails from here on
        # (the data skip, the first step) is not the checkpoint's.
        w.loading = None
        w.total_steps = int(state.max_steps or 0)
        epochs = getattr(state, "num_train_epochs", None)
        if epochs:
            w.epochs = int(epochs)
        self._logged_at = int(state.global_step)
        if not self._began:
            self._began = True
            w.start(step=int(state.global_step))
            if w.resume is not None and int(state.global_step) > 0:
                # The Trainer now skips the batches before its data position.
                w.heartbeat("loading")
        return control

    def on_step_end(self, args, state, control, **kwargs):
        w = self.worker
        w.step(int(state.global_step), epoch=state.epoch)
        if w.should_stop():
            control.should_save = True
            control.should_training_stop = True
            self._stop_save_step = int(state.global_step)
        # The Trainer evaluates, then saves, right after this callback.
        if getattr(control, "should_evaluate", False):
            w.heartbeat("evaluating")
        elif getattr(control, "should_save", False):
            w.heartbeat("saving")
        return control

    def on_prediction_step(self, args, state, control, **kwargs):
        self.worker.refresh()
        return control

    def on_log(self, args, state, control, logs=None, **kwargs):
        logs = logs or {}
        w = self.worker
        for key, ours in (("loss", "loss"), ("learning_rate", "lr"), ("grad_norm", "grad_norm")):
            value = logs.get(key)
            if isinstance(value, (int, float)):
                w._last[ours] = float(value)
        if isinstance(logs.get("loss"), (int, float)):
            loss = float(logs["loss"])
            w._loss_smooth = loss if w._loss_smooth is None else 0.9 * w._loss_smooth + 0.1 * loss
            self._record(state, logs)
        if isinstance(logs.get("eval_loss"), (int, float)):
            self._eval_loss = float(logs["eval_loss"])
            self._eval_step = int(state.global_step)
        if self.replay_through is not None and int(state.global_step) <= self.replay_through:
            # A replayed step: the trackers after this callback (`attach`) have it.
            logs.clear()
        return control

    def _record(self, state, logs) -> None:
        """The step record's line for a logged `loss`: the Trainer's mean over the
        steps since its last log (a `window` of them), compared by lavenderd's replay
        check only with the same window."""
        step = int(state.global_step)
        since = self._logged_at
        self._logged_at = step
        if not self.worker.writes or since is None or step <= since:
            return
        entry = protocol.step_entry(
            step,
            loss=logs["loss"],
            learning_rate=logs.get("learning_rate"),
            grad_norm=logs.get("grad_norm"),
            epoch=state.epoch,
            stage=self.worker.stage,
            window=step - since,
        )
        protocol.append_step(self.worker.run_dir, entry)

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        if metrics and isinstance(metrics.get("eval_loss"), (int, float)):
            self._eval_loss = float(metrics["eval_loss"])
            self._eval_step = int(state.global_step)
        w = self.worker
        w.leave_phase("evaluating", to="saving" if getattr(control, "should_save", False) else None)
        return control

    def on_save(self, args, state, control, **kwargs):
        w = self.worker
        if not w.writes:
            return control
        name = f"checkpoint-{state.global_step}"
        staged = Path(args.output_dir) / name
        if not staged.is_dir():
            return control
        target = w.run_dir / name
        if target.exists() and checkpoints.load(target) is not None:
            # The same step saved again (a resume that stopped before its next step):
            # the complete checkpoint already there stays.
            shutil.rmtree(staged, ignore_errors=True)
        else:
            if target.exists():
                shutil.rmtree(target)
            checkpoints.commit_directory(staged, target)
        final = self._stop_save_step == state.global_step or (state.max_steps and state.global_step >= state.max_steps)
        val = self._eval_loss if self._eval_step == state.global_step else None
        w._step = int(state.global_step)
        w.committed(target, final=bool(final), val_loss=val)
        w.leave_phase("saving")
        return control

    def on_train_end(self, args, state, control, **kwargs):
        w = self.worker
        w._step = int(state.global_step)
        if w.stop_requested:
            w.stopped()
        else:
            w.finished()
        return control
