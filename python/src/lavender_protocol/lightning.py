"""`LavenderCallback`: the worker protocol for a PyTorch Lightning `Trainer`, written
for Lightning 2.6.x (`lightning.pytorch`; another version is refused when the callback
is first named, as it relies on how 2.6 handles SIGTERM and resumes).

    cb = LavenderCallback(save_steps=500)        # reads lavenderd's arguments
    trainer = L.Trainer(max_steps=10_000, callbacks=[cb], logger=False)
    with cb.worker:                              # an exception: `failed`, its kind's exit code
        trainer.fit(model, train_loader, ckpt_path=cb.ckpt_path)

Lightning is imported when `LavenderCallback` is first named, so `lavender_protocol`
imports without it. The callback is the Trainer's checkpointer (a `Checkpoint`: the
Trainer adds no `ModelCheckpoint` of its own):

- heartbeat and a step-record line (`log_history.jsonl`, as `Worker.step` writes it)
  from every optimizer step: its loss (the mean over the step's batches when
  gradients accumulate), the learning rate and the gradient norm it stepped with, the
  epoch;
- phases: `loading` from `setup` while it resumes until the first step, `evaluating`
  while it validates (kept fresh by the validation batches), `saving` while it saves;
- saves every `save_steps` optimizer steps, on a stop and when training ends, through
  `Worker.save`: `trainer.save_checkpoint` writes `lightning.ckpt` into a hidden
  directory of the run, every file is hashed and fsynced, `manifest.json` and
  `trainer_state.json` are written and the directory renamed into the run
  (`train-<HH-MM-SS>-<NNNN>/`). A save comes at the end of its batch, where Lightning
  resumes mid-epoch; a validation loss (`monitor`) goes with it when a validation ran
  at its step. The RNG states (Python, NumPy, torch, CUDA) go into the checkpoint too
  and are put back when the resumed training starts;
- SIGTERM: Lightning's own handler (registered as `fit` starts) would end `fit` with
  `SIGTERMException` at the end of the batch without a save. The callback takes
  SIGTERM back when the loop starts (`on_sanity_check_start`, `on_train_start`): the
  worker's flag, agreed across ranks by `should_stop()` after each optimizer step;
  then it saves (`final_saved`) and sets `trainer.should_stop` (no `min_epochs` /
  `min_steps` holds it, no validation delays it), `fit` returns, `on_train_end` writes
  the `stopping` heartbeat and the script exits 0;
- `--resume PATH|latest` becomes `ckpt_path` (`<checkpoint>/lightning.ckpt`); a
  checkpoint this callback did not save is refused (`ResumeError`, exit 78). A file of
  it that cannot be read (an error naming a file in it, or an unreadable-file error
  out of Lightning's loaders, `LOADERS`) is `damaged_checkpoint`.

One process; under many (DDP) every rank makes a callback, the rank is the Trainer's,
rank 0 writes and every rank takes part in the Trainer's save.
"""

from __future__ import annotations

import random
import signal
import threading
from collections.abc import Mapping
from typing import Any, Dict, Optional, Sequence

from . import checkpoints
from .worker import Worker

#: The Lightning versions the callback is written for.
SUPPORTED_VERSIONS = "2.6."
#: The Trainer's checkpoint inside each of the run's checkpoint directories.
CHECKPOINT_FILE = "lightning.ckpt"
#: The `trainer_state.json` key that marks a checkpoint of this callback (its value:
#: `CHECKPOINT_FILE`).
STATE_KEY = "lightning_checkpoint"

#: Lightning's readers of the checkpoint it resumes from: an unreadable file raised in
#: one is a damaged checkpoint, even one that names no file.
LOADERS = frozenset(
    {
        "lightning.pytorch.trainer.connectors.checkpoint_connector.resume_start",
        "lightning.fabric.plugins.io.torch_io.load_checkpoint",
        "lightning.fabric.utilities.cloud_io._load",
    }
)


def __getattr__(name: str) -> Any:
    if name == "LavenderCallback":
        cls = _define()
        globals()[name] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _require_lightning() -> None:
    import lightning

    if not lightning.__version__.startswith(SUPPORTED_VERSIONS):
        raise ImportError(
            f"lavender_protocol.lightning is written for Lightning {SUPPORTED_VERSIONS}x (its SIGTERM "
            f"handling and resume); this environment has {lightning.__version__}: "
            f'pip install "lightning=={SUPPORTED_VERSIONS}*"'
        )


def rng_states() -> Dict[str, Any]:
    """The process's RNG states, in types `torch.load(weights_only=True)` reads back."""
    import torch

    version, internal, gauss = random.getstate()
    states: Dict[str, Any] = {"python": [version, list(internal), gauss], "torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states["cuda"] = torch.cuda.get_rng_state_all()
    try:
        import numpy
    except ImportError:
        return states
    name, keys, pos, has_gauss, cached = numpy.random.get_state()
    states["numpy"] = [name, keys.tolist(), int(pos), int(has_gauss), float(cached)]
    return states


def set_rng_states(states: Any) -> None:
    """Puts back what `rng_states` returned (read from a checkpoint: checked first)."""
    import torch

    def bad(what: str) -> ValueError:
        return ValueError(f"the checkpoint's RNG state is malformed ({what}); it was not saved by this callback")

    if not isinstance(states, Mapping):
        raise bad("not a mapping")
    python, cpu = states.get("python"), states.get("torch")
    if not (isinstance(python, (list, tuple)) and len(python) == 3 and isinstance(python[1], (list, tuple))):
        raise bad("python")
    if not (isinstance(cpu, torch.Tensor) and cpu.dtype == torch.uint8):
        raise bad("torch")
    cuda = states.get("cuda")
    if cuda is not None and not (
        isinstance(cuda, (list, tuple)) and all(isinstance(s, torch.Tensor) and s.dtype == torch.uint8 for s in cuda)
    ):
        raise bad("cuda")
    random.setstate((python[0], tuple(python[1]), python[2]))
    torch.set_rng_state(cpu)
    if cuda and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(cuda)
    np_state = states.get("numpy")
    if np_state is not None:
        import numpy

        if not (isinstance(np_state, (list, tuple)) and len(np_state) == 5):
            raise bad("numpy")
        name, keys, pos, has_gauss, cached = np_state
        numpy.random.set_state((name, numpy.asarray(keys, dtype=numpy.uint32), pos, has_gauss, cached))


def _define() -> type:
    _require_lightning()
    import torch
    from lightning.pytorch.callbacks import Checkpoint

    class LavenderCallback(Checkpoint):
        def __init__(
            self,
            worker: Optional[Worker] = None,
            argv: Optional[Sequence[str]] = None,
            *,
            save_steps: Optional[int] = None,
            monitor: str = "val_loss",
            **worker_options: Any,
        ) -> None:
            """`save_steps`: a save every that many optimizer steps (None: only on a
            stop and at the end); `monitor`: the logged metric a save records as its
            validation loss (lavenderd's retention keeps the lowest)."""
            super().__init__()
            if save_steps is not None and int(save_steps) < 1:
                raise ValueError(f"save_steps must be at least 1, or None; not {save_steps!r}")
            self.worker = worker if worker is not None else Worker.from_argv(argv, **worker_options)
            self.worker.loader_calls = LOADERS
            self.save_steps = None if save_steps is None else int(save_steps)
            self.monitor = monitor
            self._began = False
            # The global step of the last step reported, and of the last save.
            self._reported: Optional[int] = None
            self._saved: Optional[int] = None
            # The losses of the batches since that step (gradient accumulation).
            self._losses: list = []
            # What the optimizer stepped with (`on_before_optimizer_step`).
            self._lr: Optional[float] = None
            self._grad_norm: Optional[float] = None
            self._val_loss: Optional[float] = None
            self._val_step: Optional[int] = None
            # The RNG states of the checkpoint resumed from, put back as its training
            # starts; whether the batch of a save was its epoch's last.
            self._rng: Any = None
            self._epoch_end = False

        @property
        def ckpt_path(self) -> Optional[str]:
            """The checkpoint `--resume` resolved to, for `trainer.fit(ckpt_path=…)`."""
            resume = self.worker.resume
            if resume is None:
                return None
            if resume.state.get(STATE_KEY) != CHECKPOINT_FILE:
                raise checkpoints.ResumeError(
                    f"{resume.path} is not a checkpoint of lavender_protocol.lightning (its trainer_state.json "
                    f"has no {STATE_KEY!r}); resume this script from one of its own checkpoints"
                )
            return str(resume.path / CHECKPOINT_FILE)

        # ----- the callback's state in the checkpoint -----

        def state_dict(self) -> Dict[str, Any]:
            return {"rng": rng_states(), "epoch_end": self._epoch_end}

        def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
            # Each data loader draws its seed from the RNG when its pass begins: the
            # resumed Trainer's, while it sets up the data after loading, is the one
            # the uninterrupted run drew after a save at an epoch's end (the states go
            # back now), and one it never drew mid-epoch (they go back after it).
            state = state_dict if isinstance(state_dict, Mapping) else {}
            self._rng = state.get("rng")
            if state.get("epoch_end") is True and self._rng is not None:
                self._put_back_rng()

        def _put_back_rng(self) -> None:
            rng, self._rng = self._rng, None
            # Rank 0's states are in the checkpoint: another rank keeps its own.
            if self.worker.rank == 0:
                set_rng_states(rng)

        # ----- Trainer events -----

        def setup(self, trainer, pl_module, stage: str) -> None:
            if stage != "fit":
                return
            w = self.worker
            if trainer.world_size > 1:
                # Lightning's own launcher sets no RANK: the rank is the Trainer's.
                w.rank = int(trainer.global_rank)
                w.writes = w.rank == 0
            if w.resume is not None:
                # `fit` loads it next (weights, optimizer, loops, data position):
                # until training starts a missing or unreadable file of it is
                # `damaged_checkpoint`.
                w.loading = w.resume.path
                w.heartbeat("loading")

        def on_sanity_check_start(self, trainer, pl_module) -> None:
            self._take_sigterm(trainer)

        def on_train_start(self, trainer, pl_module) -> None:
            self._take_sigterm(trainer)
            w = self.worker
            w.loading = None
            if self._rng is not None:
                self._put_back_rng()
            total = trainer.max_steps
            if total is None or total < 0:
                estimated = trainer.estimated_stepping_batches
                total = int(estimated) if estimated != float("inf") else 0
            w.total_steps = int(total)
            w.epochs = int(trainer.max_epochs) if trainer.max_epochs and trainer.max_epochs > 0 else None
            step = int(trainer.global_step)
            self._reported, self._losses = step, []
            if not self._began:
                self._began = True
                w.start(step=step)

        def _take_sigterm(self, trainer) -> None:
            """SIGTERM back to the worker from Lightning's handler, which `fit`
            registered after `setup`. One that came meanwhile reached both (Lightning's
            handler calls the one it replaced): Lightning's flag is cleared, the
            worker's kept."""
            w = self.worker
            if not w.handles_sigterm or threading.current_thread() is not threading.main_thread():
                return
            signal.signal(signal.SIGTERM, w._on_sigterm)
            connector = getattr(trainer, "_signal_connector", None)
            if connector is not None and connector.received_sigterm:
                connector.received_sigterm = False
                w.request_stop()

        def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
            groups = optimizer.param_groups
            lr = groups[0].get("lr") if groups else None
            self._lr = float(lr) if isinstance(lr, (int, float, torch.Tensor)) else None
            grads = [p.grad for g in groups for p in g["params"] if p.grad is not None and not p.grad.is_sparse]
            if not grads:
                self._grad_norm = None
                return
            with torch.no_grad():
                norms = [torch.linalg.vector_norm(g.detach().float()) for g in grads]
                self._grad_norm = float(torch.linalg.vector_norm(torch.stack([n.to(norms[0].device) for n in norms])))

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
            loss = outputs.get("loss") if isinstance(outputs, Mapping) else outputs
            if isinstance(loss, torch.Tensor) and loss.numel() == 1:
                self._losses.append(loss.detach().float().reshape(()))
            step = int(trainer.global_step)
            if self._reported is not None and step <= self._reported:
                return  # gradients accumulate: no optimizer step yet
            self._epoch_end = batch_idx + 1 == trainer.num_training_batches
            self._reported = step
            w = self.worker
            loss = self._step_loss(trainer, pl_module)
            w.step(step, loss=loss, lr=self._lr, grad_norm=self._grad_norm, epoch=self._epoch(trainer, batch_idx))
            if w.should_stop():
                self._save(trainer, final=True)
                self._stop(trainer)
            elif self.save_steps and step % self.save_steps == 0 and not (w.total_steps and step >= w.total_steps):
                # The last step's save is the final one, when training ends.
                self._save(trainer, final=False)

        def _step_loss(self, trainer, pl_module) -> Optional[float]:
            """The step's loss: the mean of its batches' (in automatic optimization
            Lightning hands each on divided by `accumulate_grad_batches`)."""
            losses, self._losses = self._losses, []
            if not losses:
                return None
            mean = torch.stack([x.to(losses[0].device) for x in losses]).mean()
            if pl_module.automatic_optimization:
                mean = mean * trainer.accumulate_grad_batches
            return float(mean)

        @staticmethod
        def _epoch(trainer, batch_idx: int) -> float:
            batches = trainer.num_training_batches
            if isinstance(batches, (int, float)) and 0 < batches < float("inf"):
                return trainer.current_epoch + (batch_idx + 1) / batches
            return float(trainer.current_epoch)

        def _stop(self, trainer) -> None:
            """A stop ends `fit` after this batch: not an early stop, so no minimum
            holds it and no validation delays it."""
            trainer.should_stop = True
            trainer.fit_loop.min_epochs = 0
            trainer.fit_loop.epoch_loop.min_steps = None
            trainer.limit_val_batches = 0

        def on_validation_start(self, trainer, pl_module) -> None:
            self.worker.heartbeat("evaluating")

        def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0) -> None:
            self.worker.refresh()

        def on_validation_end(self, trainer, pl_module) -> None:
            value = trainer.callback_metrics.get(self.monitor)
            if not trainer.sanity_checking and isinstance(value, (int, float, torch.Tensor)):
                self._val_loss, self._val_step = float(value), int(trainer.global_step)
            self.worker.leave_phase("evaluating")

        def _save(self, trainer, final: bool) -> None:
            w = self.worker
            step = int(trainer.global_step)
            val = self._val_loss if self._val_step == step else None
            path = w.save(
                step,
                lambda d: trainer.save_checkpoint(d / CHECKPOINT_FILE, weights_only=False),
                final=final,
                val_loss=val,
                extra={STATE_KEY: CHECKPOINT_FILE},
            )
            if path is None and trainer.world_size > 1:
                # Not rank 0: the Trainer's save is a collective all the same; only
                # global rank 0 writes the file.
                trainer.save_checkpoint(w.run_dir / CHECKPOINT_FILE, weights_only=False)
            self._saved = step

        def on_train_end(self, trainer, pl_module) -> None:
            w = self.worker
            if self._saved != int(trainer.global_step):
                self._save(trainer, final=True)
            if w.stop_requested:
                w.stopped()
            else:
                w.finished()

    LavenderCallback.__qualname__ = LavenderCallback.__name__
    LavenderCallback.__module__ = __name__
    return LavenderCallback
