"""A tiny byte-level transformer trained by a PyTorch Lightning `Trainer` on the
embedded corpus, on CPU, supervised by lavenderd through
`lavender_protocol.lightning.LavenderCallback`.

    lavenderd start --config examples/lightning/lavender.yaml     # from the repository root

Run alone (no daemon) it makes its own run directory under --data-root. Bytes are
the tokens (a vocabulary of 256), so nothing is downloaded. Its data loader resumes
mid-epoch (Lightning keeps its `state_dict` in the checkpoint), so a resumed run
trains the batches the uninterrupted one would have. Options after lavender's own:
--max-steps, --save-steps, --val-every (0: no validation), --batch-size, --seq-len,
--threads.
"""

import argparse
import gzip
import sys
from pathlib import Path

import lightning as L
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from lavender_protocol import Worker
from lavender_protocol.lightning import LavenderCallback
from lavender_protocol.resumable import ResumableLoader

CORPUS = Path(__file__).resolve().parents[2] / "data" / "tinyshakespeare.txt.gz"


class Windows(Dataset):
    """Fixed byte windows of the corpus, spread by a stride that visits it evenly."""

    def __init__(self, data: torch.Tensor, seq_len: int, count: int):
        self.data, self.seq_len, self.count = data, seq_len, count

    def __len__(self):
        return self.count

    def __getitem__(self, i):
        span = len(self.data) - self.seq_len - 1
        start = (i * 7919 * self.seq_len) % span
        return self.data[start : start + self.seq_len + 1]


class TinyLM(L.LightningModule):
    def __init__(self, seq_len: int, lr: float, warmup: int, max_steps: int):
        super().__init__()
        self.lr, self.warmup, self.max_steps = lr, warmup, max_steps
        self.embed = nn.Embedding(256, 64)
        self.position = nn.Parameter(torch.zeros(seq_len, 64))
        layer = nn.TransformerEncoderLayer(64, 2, 128, dropout=0.1, batch_first=True)
        self.blocks = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(64, 256)
        self.register_buffer("causal", nn.Transformer.generate_square_subsequent_mask(seq_len), persistent=False)

    def loss(self, batch):
        x, y = batch[:, :-1], batch[:, 1:]
        h = self.blocks(self.embed(x) + self.position[: x.shape[1]], mask=self.causal, is_causal=True)
        return nn.functional.cross_entropy(self.head(h).reshape(-1, 256), y.reshape(-1))

    def training_step(self, batch, batch_idx):
        return self.loss(batch)

    def validation_step(self, batch, batch_idx):
        self.log("val_loss", self.loss(batch))

    def configure_optimizers(self):
        opt = torch.optim.AdamW(self.parameters(), lr=self.lr)

        def schedule(step):
            if step < self.warmup:
                return (step + 1) / self.warmup
            done = (step - self.warmup) / max(1, self.max_steps - self.warmup)
            return 0.5 * (1 + torch.cos(torch.tensor(min(done, 1.0) * torch.pi)).item())

        sched = torch.optim.lr_scheduler.LambdaLR(opt, schedule)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


def main() -> int:
    worker = Worker.from_argv()  # lavenderd's arguments; the script's own in worker.args.rest
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--max-steps", type=int, default=300)
    p.add_argument("--save-steps", type=int, default=50)
    p.add_argument("--val-every", type=int, default=50)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--corpus", type=Path, default=CORPUS)
    opts = p.parse_args(worker.args.rest)
    cb = LavenderCallback(worker, save_steps=opts.save_steps)
    torch.set_num_threads(opts.threads)

    with gzip.open(opts.corpus, "rb") as f:
        data = torch.tensor(list(f.read()), dtype=torch.long)
    cut = len(data) * 95 // 100
    train = ResumableLoader(Windows(data[:cut], opts.seq_len, opts.max_steps * opts.batch_size), opts.batch_size)
    held_out = DataLoader(Windows(data[cut:], opts.seq_len, 4 * opts.batch_size), batch_size=opts.batch_size)

    L.seed_everything(1337, verbose=False)
    model = TinyLM(opts.seq_len, lr=3e-3, warmup=10, max_steps=opts.max_steps)
    validate = opts.val_every > 0
    trainer = L.Trainer(
        max_steps=opts.max_steps,
        accelerator="cpu",
        devices=1,
        callbacks=[cb],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        val_check_interval=opts.val_every if validate else None,
        check_val_every_n_epoch=None if validate else 1,
        limit_val_batches=None if validate else 0,
    )
    with worker:  # an exception: a `failed` heartbeat and event, its kind's exit code
        resume = cb.ckpt_path
        print(f"lightning: run {worker.run_dir}, resume from {resume or 'scratch'}", flush=True)
        trainer.fit(model, train, held_out if validate else None, ckpt_path=resume)
    print(
        f"lightning: ended at step {trainer.global_step} ({'stopped' if worker.stop_requested else 'finished'})",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
