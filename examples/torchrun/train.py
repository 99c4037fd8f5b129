"""A hand-written DistributedDataParallel loop with lavender_protocol, started by
torchrun (gloo on CPU here; NCCL on GPUs) and supervised by lavenderd.

    lavenderd start --config examples/torchrun/lavender.yaml      # from the repository root

Every rank makes a `Worker`; rank 0 writes the heartbeat, the events and the
checkpoints. A SIGTERM (lavenderd stop, or torchrun passing it on) is agreed on by
all ranks after the same step; rank 0 saves once and every rank exits 0. A rank that
dies takes the others down (their collectives fail), torchrun exits non-zero and
lavenderd restarts the run from its newest checkpoint.

Options after lavender's own: --max-steps, --save-every, --batch-size, --seq-len, --lr.
"""

import argparse
import gzip
import math
import sys
from pathlib import Path

import torch
import torch.distributed as td
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from lavender_protocol import Worker

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


def main() -> int:
    w = Worker.from_argv()
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--max-steps", type=int, default=300)
    p.add_argument("--save-every", type=int, default=50)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--lr", type=float, default=3e-3)
    opts = p.parse_args(w.args.rest)
    w.total_steps = opts.max_steps

    td.init_process_group("gloo")
    rank = td.get_rank()
    with gzip.open(CORPUS, "rb") as f:
        data = torch.tensor(list(f.read()), dtype=torch.long)

    torch.manual_seed(1337)
    model = DDP(TinyLM(opts.seq_len))
    opt = torch.optim.AdamW(model.parameters(), lr=opts.lr)
    start = 0
    if w.resume is not None:
        saved = torch.load(w.resume.path / "model.pt", weights_only=True)
        model.module.load_state_dict(saved["model"])
        opt.load_state_dict(saved["optimizer"])
        start = w.resume.step
    print(f"torchrun rank {rank}: run {w.run_dir}, from step {start}", flush=True)

    with w:
        w.start(step=start, world_size=td.get_world_size())
        for step in range(start + 1, opts.max_steps + 1):
            lr = opts.lr * 0.5 * (1 + math.cos(math.pi * step / opts.max_steps))
            for group in opt.param_groups:
                group["lr"] = lr
            x, y = batch(data, step, rank, opts.batch_size, opts.seq_len)
            loss = nn.functional.cross_entropy(model(x).reshape(-1, 256), y.reshape(-1))
            opt.zero_grad()
            loss.backward()
            grad_norm = nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            w.step(step, loss=loss.item(), lr=lr, grad_norm=grad_norm.item())

            stop = w.should_stop()  # every rank, every step: all stop after the same step
            final = stop or step == opts.max_steps
            if final or step % opts.save_every == 0:
                state = {"model": model.module.state_dict(), "optimizer": opt.state_dict()}
                w.save(step, lambda d: torch.save(state, d / "model.pt"), final=final, loss=loss.item())
            if stop:
                print(f"torchrun rank {rank}: stopped after step {step}", flush=True)
                td.destroy_process_group()
                return w.stopped()
        print(f"torchrun rank {rank}: finished at step {opts.max_steps}", flush=True)
        td.destroy_process_group()
        return w.finished()


if __name__ == "__main__":
    sys.exit(main())
