"""A tiny PyTorch Lightning script with `lavender_protocol.lightning.LavenderCallback`
(driven by test_lightning.py, which also imports its model): a two-layer network with
dropout on fixed random data, `--batches` batches an epoch from a loader that resumes
mid-epoch, a save every `--save-steps`; `--devices 2`: two ranks under Lightning's own
DDP launcher (gloo), each on the same batches."""

import argparse
import sys

import lightning as L
import torch
from torch import nn
from torch.utils.data import Dataset

from lavender_protocol import Worker
from lavender_protocol.lightning import LavenderCallback
from lavender_protocol.resumable import ResumableLoader

BATCH = 4


class Data(Dataset):
    def __init__(self, count: int):
        g = torch.Generator().manual_seed(7)
        self.x = torch.randn(count, 8, generator=g)
        self.y = self.x.sum(dim=1, keepdim=True) + 0.1 * torch.randn(count, 1, generator=g)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


def loader(batches: int) -> ResumableLoader:
    """`batches` batches of the data, resumable mid-epoch."""
    return ResumableLoader(Data(batches * BATCH), BATCH)


class Tiny(L.LightningModule):
    """Records what it trained: each batch's loss, each optimizer step's gradient
    norm, the global step of each validation."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(0.2), nn.Linear(16, 1))
        self.losses, self.norms, self.validated = [], [], []

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.mse_loss(self.net(x), y)
        self.losses.append(float(loss.detach()))
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", nn.functional.mse_loss(self.net(x), y))
        self.validated.append(self.trainer.global_step)

    def on_before_optimizer_step(self, optimizer):
        grads = [p.grad for p in self.parameters() if p.grad is not None]
        self.norms.append(float(torch.nn.utils.get_total_norm(grads)))

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0 / (1 + step))
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


def trainer(cb, max_steps: int, callbacks=(), **options) -> L.Trainer:
    settings = {
        "max_steps": max_steps,
        "accelerator": "cpu",
        "devices": 1,
        "callbacks": [*callbacks, cb],
        "logger": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "num_sanity_val_steps": 0,
        "limit_val_batches": 0,
    }
    settings.update(options)
    return L.Trainer(**settings)


def main() -> int:
    w = Worker.from_argv(heartbeat_min_interval_s=0)
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--save-steps", type=int, default=None)
    p.add_argument("--batches", type=int, default=4)
    p.add_argument("--devices", type=int, default=1)
    opts = p.parse_args(w.args.rest)
    cb = LavenderCallback(w, save_steps=opts.save_steps)
    torch.manual_seed(0)
    ddp = {"strategy": "ddp", "devices": opts.devices, "use_distributed_sampler": False} if opts.devices > 1 else {}
    t = trainer(cb, opts.steps, **ddp)
    with w:
        t.fit(Tiny(), loader(opts.batches), ckpt_path=cb.ckpt_path)
    print(f"rank {t.global_rank}: {'stopped' if w.stop_requested else 'finished'} at step {t.global_step}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
