"""A hand-written DistributedDataParallel loop with lavender_protocol, started by
torchrun (gloo on CPU here; NCCL on GPUs) and supervised by lavenderd.

    lavenderd start --config examples/torchrun/lavender.yaml      # from the repository root

Every rank makes a `Worker`; rank 0 writes the heartbeat, the events and the
checkpoints. A SIGTERM (lavenderd stop, or torchrun passing it on) is agreed on by
all ranks after the same step; rank 0 saves once and every rank exits 0. A rank that
dies takes the others down (their collectives fail), torchrun exits non-zero and
lavenderd restarts the run from its newest checkpoint.

The loss (averaged over the ranks, so all judge alike) goes through lavender's
divergence rule: a NaN or a lasting spike ends every rank with `diverged` before
anything is saved, and lavenderd rolls back to a checkpoint before the spike,
recording the steps to skip; this script skips them by moving its data position
(`data_offset`, kept in each checkpoint so a later resume replays the same data).

Options after lavender's own: --max-steps, --save-every, --batch-size, --seq-len, --lr,
--eval-batches (held-out batches evaluated before each save; 0 = none), --min-step-ms (a
step lasts at least this long; 0 = as fast as it goes: a run that must outlast a deadline,
such as a Slurm time limit in a test, on any machine; the arithmetic is the same).
"""

import argparse
import gzip
import math
import os
import socket
import sys
import time
from pathlib import Path

import torch
import torch.distributed as td
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from lavender_protocol import Worker
from lavender_protocol.divergence import SpikeDetector

CORPUS = Path(__file__).resolve().parents[2] / "data" / "tinyshakespeare.txt.gz"


class TinyLM(nn.Module):
    """A byte-level causal transformer: one block, 64 wide."""

    def __init__(self, seq_len: int, width: int = 64):
        super().__init__()
        self.tok = nn.Embedding(256, width)
        self.pos = nn.Embedding(seq_len, width)
        layer = nn.TransformerEncoderLayer(width, nhead=2, dim_feedforward=4 * width, batch_first=True, dropout=0.0)
        self.block = nn.TransformerEncoder(layer, num_layers=1)
        self.head = nn.Linear(width, 256)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(seq_len), persistent=False)

    def forward(self, ids):
        x = self.tok(ids) + self.pos(torch.arange(ids.shape[1]))
        return self.head(self.block(x, mask=self.mask, is_causal=True))


def batch(data, step, rank, batch_size, seq_len):
    """The same windows for the same (step, rank) in every run, so a resume replays exactly."""
    g = torch.Generator().manual_seed(step * 1000 + rank)
    starts = torch.randint(0, len(data) - seq_len - 1, (batch_size,), generator=g)
    x = torch.stack([data[s : s + seq_len] for s in starts])
    y = torch.stack([data[s + 1 : s + seq_len + 1] for s in starts])
    return x, y


def evaluate(model, data, batches, batch_size, seq_len):
    """Mean loss on the same held-out windows every time."""
    model.eval()
    with torch.no_grad():
        losses = []
        for k in range(batches):
            x, y = batch(data, -1 - k, 0, batch_size, seq_len)
            losses.append(nn.functional.cross_entropy(model(x).reshape(-1, 256), y.reshape(-1)).item())
    model.train()
    return sum(losses) / len(losses)


def main() -> int:
    w = Worker.from_argv()
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--max-steps", type=int, default=300)
    p.add_argument("--save-every", type=int, default=50)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--eval-batches", type=int, default=2)
    p.add_argument("--min-step-ms", type=int, default=0)
    opts = p.parse_args(w.args.rest)
    w.total_steps = opts.max_steps

    td.init_process_group("gloo")
    rank = td.get_rank()
    with gzip.open(CORPUS, "rb") as f:
        data = torch.tensor(list(f.read()), dtype=torch.long)
    cut = len(data) * 95 // 100
    data, held_out = data[:cut], data[cut:]

    torch.manual_seed(1337)
    model = DDP(TinyLM(opts.seq_len))
    opt = torch.optim.AdamW(model.parameters(), lr=opts.lr)
    start, offset = 0, 0
    detector = SpikeDetector()
    if w.resume is not None:
        saved = w.load(lambda path: torch.load(path / "model.pt", weights_only=True))
        model.module.load_state_dict(saved["model"])
        opt.load_state_dict(saved["optimizer"])
        start = w.resume.step
        offset = int(w.resume.state.get("data_offset", 0))
        detector.restore(w.resume.state.get("divergence", {}))
    # Batches a rollback skips: step s trains on the data of step s + offset.
    offset += w.skip_steps
    print(
        f"torchrun rank {rank} on {socket.gethostname()} (pid {os.getpid()}): "
        f"run {w.run_dir}, from step {start}, data offset {offset}",
        flush=True,
    )

    with w:
        w.start(step=start, world_size=td.get_world_size())
        for step in range(start + 1, opts.max_steps + 1):
            began = time.monotonic()
            lr = opts.lr * 0.5 * (1 + math.cos(math.pi * step / opts.max_steps))
            for group in opt.param_groups:
                group["lr"] = lr
            x, y = batch(data, step + offset, rank, opts.batch_size, opts.seq_len)
            loss = nn.functional.cross_entropy(model(x).reshape(-1, 256), y.reshape(-1))
            opt.zero_grad()
            loss.backward()
            grad_norm = nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            mean_loss = loss.detach().clone()
            td.all_reduce(mean_loss)
            mean_loss = mean_loss.item() / td.get_world_size()
            w.step(step, loss=mean_loss, lr=lr, grad_norm=grad_norm.item())
            time.sleep(max(0.0, began + opts.min_step_ms / 1000 - time.monotonic()))
            diverged = detector.observe(step, mean_loss, grad_norm.item())
            if diverged:
                print(f"torchrun rank {rank}: {diverged.message}", flush=True)
                td.destroy_process_group()
                return w.diverged(diverged)

            stop = w.should_stop()  # every rank, every step: all stop after the same step
            final = stop or step == opts.max_steps
            if final or step % opts.save_every == 0:
                val_loss = None
                if opts.eval_batches > 0:
                    with w.phase("evaluating"):
                        val_loss = evaluate(model.module, held_out, opts.eval_batches, opts.batch_size, opts.seq_len)
                state = {"model": model.module.state_dict(), "optimizer": opt.state_dict()}
                w.save(
                    step,
                    lambda d: torch.save(state, d / "model.pt"),
                    final=final,
                    loss=mean_loss,
                    val_loss=val_loss,
                    extra={"data_offset": offset, "divergence": detector.state()},
                )
            if stop:
                print(f"torchrun rank {rank}: stopped after step {step}", flush=True)
                td.destroy_process_group()
                return w.stopped()
        print(f"torchrun rank {rank}: finished at step {opts.max_steps}", flush=True)
        td.destroy_process_group()
        return w.finished()


if __name__ == "__main__":
    sys.exit(main())
