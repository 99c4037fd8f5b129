"""A tiny GPT-2 trained by a Hugging Face `Trainer` on the embedded corpus, on CPU,
supervised by lavenderd through `lavender_protocol.hf.LavenderCallback`.

    lavenderd start --config examples/hf-trainer/lavender.yaml     # from the repository root

Run alone (no daemon) it makes its own run directory under --data-root. Byte-level
(vocabulary of 256), so no tokenizer is downloaded. Options after lavender's own:
--max-steps, --save-steps, --eval-steps, --batch-size, --seq-len, --threads,
--report-to (the Trainer's report_to: e.g. mlflow; lavenderd's `tracking:` gives the
tracker one run across restarts).
"""

import argparse
import gzip
import sys
from pathlib import Path

import torch
from torch.utils.data import Dataset
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

from lavender_protocol.hf import LavenderCallback

CORPUS = Path(__file__).resolve().parents[2] / "data" / "tinyshakespeare.txt.gz"


class Windows(Dataset):
    """Fixed byte windows of the corpus, spread by a stride that visits it evenly."""

    def __init__(self, data: torch.Tensor, seq_len: int, count: int, offset: int = 0):
        self.data, self.seq_len, self.count, self.offset = data, seq_len, count, offset

    def __len__(self):
        return self.count

    def __getitem__(self, i):
        span = len(self.data) - self.seq_len - 1
        start = ((i + self.offset) * 7919 * self.seq_len) % span
        ids = self.data[start : start + self.seq_len]
        return {"input_ids": ids, "labels": ids.clone()}


def main() -> int:
    cb = LavenderCallback()
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--max-steps", type=int, default=300)
    p.add_argument("--save-steps", type=int, default=50)
    p.add_argument("--eval-steps", type=int, default=50)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--corpus", type=Path, default=CORPUS)
    p.add_argument("--report-to", default="none", help="the Trainer's report_to, comma-separated")
    p.add_argument(
        "--ignore-data-skip",
        action="store_true",
        help="a resume starts the epoch's data over (the Trainer's ignore_data_skip): "
        "the replayed steps train other batches, which lavenderd's replay check reports",
    )
    opts = p.parse_args(cb.worker.args.rest)
    torch.set_num_threads(opts.threads)

    with gzip.open(opts.corpus, "rb") as f:
        data = torch.tensor(list(f.read()), dtype=torch.long)
    cut = len(data) * 95 // 100
    train = Windows(data[:cut], opts.seq_len, opts.max_steps * opts.batch_size)
    held_out = Windows(data[cut:], opts.seq_len, 4 * opts.batch_size)

    torch.manual_seed(1337)
    config = GPT2Config(vocab_size=256, n_positions=opts.seq_len, n_embd=64, n_layer=2, n_head=2)
    model = GPT2LMHeadModel(config)
    args = TrainingArguments(
        output_dir=cb.output_dir,
        max_steps=opts.max_steps,
        per_device_train_batch_size=opts.batch_size,
        per_device_eval_batch_size=opts.batch_size,
        learning_rate=3e-3,
        warmup_steps=10,
        lr_scheduler_type="cosine",
        logging_steps=5,
        eval_strategy="steps",
        eval_steps=opts.eval_steps,
        save_strategy="steps",
        save_steps=opts.save_steps,
        use_cpu=True,
        dataloader_num_workers=0,
        dataloader_pin_memory=False,
        report_to=opts.report_to.split(","),
        disable_tqdm=True,
        seed=1337,
        ignore_data_skip=opts.ignore_data_skip,
    )
    trainer = Trainer(model=model, args=args, train_dataset=train, eval_dataset=held_out, callbacks=[cb])
    cb.attach(trainer)
    resume = cb.resume_from_checkpoint
    print(f"hf-trainer: run {cb.worker.run_dir}, resume from {resume or 'scratch'}", flush=True)
    trainer.train(resume_from_checkpoint=resume)
    print(
        f"hf-trainer: ended at step {trainer.state.global_step} "
        f"({'stopped' if cb.worker.stop_requested else 'finished'})",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
