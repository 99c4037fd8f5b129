"""The same GPT-2 training step as lavender-worker, in PyTorch eager, for speed comparison.

Hugging Face layout (Conv1D weights [in, out], tanh GELU, causal SDPA, lm_head tied to
wte), torch.optim.AdamW with PyTorch's defaults for the device, weight decay on the
projection matrices only, global grad-norm clipping. `--precision bf16` (or fp16, with
torch.amp.GradScaler) runs forward and loss under torch.autocast, as PyTorch's mixed
precision recipe does; `--device cuda` trains on the GPU. Prints steps/sec as JSON.

Also writes the synthetic token arrays that the worker benchmark trains on
(`--write-tokens DIR`), in the precompute format of worker/src/tokens.rs.
"""

import argparse
import json
import math
import os
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


class Conv1D(nn.Module):
    def __init__(self, n_in, n_out, std):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n_in, n_out) * std)
        self.bias = nn.Parameter(torch.zeros(n_out))

    def forward(self, x):
        shape = x.shape[:-1] + (self.weight.shape[1],)
        return torch.addmm(self.bias, x.reshape(-1, x.shape[-1]), self.weight).view(shape)


class Block(nn.Module):
    def __init__(self, e, h, layers, p):
        super().__init__()
        self.n_head, self.p = h, p
        self.ln_1 = nn.LayerNorm(e, eps=1e-5)
        self.attn = nn.Module()
        self.attn.c_attn = Conv1D(e, 3 * e, 0.02)
        self.attn.c_proj = Conv1D(e, e, 0.02 / math.sqrt(2 * layers))
        self.ln_2 = nn.LayerNorm(e, eps=1e-5)
        self.mlp = nn.Module()
        self.mlp.c_fc = Conv1D(e, 4 * e, 0.02)
        self.mlp.c_proj = Conv1D(4 * e, e, 0.02 / math.sqrt(2 * layers))

    def forward(self, x):
        b, t, e = x.shape
        q, k, v = self.attn.c_attn(self.ln_1(x)).split(e, dim=2)
        heads = lambda z: z.view(b, t, self.n_head, e // self.n_head).transpose(1, 2)
        y = F.scaled_dot_product_attention(
            heads(q), heads(k), heads(v), dropout_p=self.p if self.training else 0.0, is_causal=True
        )
        y = y.transpose(1, 2).contiguous().view(b, t, e)
        x = x + F.dropout(self.attn.c_proj(y), self.p, self.training)
        h = F.gelu(self.mlp.c_fc(self.ln_2(x)), approximate="tanh")
        return x + F.dropout(self.mlp.c_proj(h), self.p, self.training)


class GPT2(nn.Module):
    def __init__(self, vocab, positions, e, layers, heads, p):
        super().__init__()
        self.transformer = nn.Module()
        self.transformer.wte = nn.Embedding(vocab, e)
        self.transformer.wpe = nn.Embedding(positions, e)
        nn.init.normal_(self.transformer.wte.weight, std=0.02)
        nn.init.normal_(self.transformer.wpe.weight, std=0.02)
        self.transformer.h = nn.ModuleList(Block(e, heads, layers, p) for _ in range(layers))
        self.transformer.ln_f = nn.LayerNorm(e, eps=1e-5)
        self.p = p

    def forward(self, idx):
        t = idx.shape[1]
        x = self.transformer.wte(idx) + self.transformer.wpe(torch.arange(t, device=idx.device))
        x = F.dropout(x, self.p, self.training)
        for blk in self.transformer.h:
            x = blk(x)
        return self.transformer.ln_f(x) @ self.transformer.wte.weight.t()


def write_tokens(out, vocab, tokens):
    """Random token arrays in the precompute format (enough for pretraining)."""
    os.makedirs(os.path.join(out, "pretrain"), exist_ok=True)
    rng = np.random.default_rng(0)
    shards = []
    for i in range(4):
        arr = rng.integers(1, vocab, size=tokens, dtype=np.uint16)
        name = f"pretrain/shard-{i:05d}.bin"
        arr.tofile(os.path.join(out, name))
        shards.append({"shard": f"shard-{i:05d}", "file": name, "tokens": int(arr.size)})
    val = rng.integers(1, vocab, size=tokens // 4, dtype=np.uint16)
    val.tofile(os.path.join(out, "pretrain/validation.bin"))
    empty = {}
    for kind in ("sft", "dpo"):
        os.makedirs(os.path.join(out, kind), exist_ok=True)
        empty[kind] = {}
        for split in ("train", "heldout"):
            open(os.path.join(out, kind, f"{split}.bin"), "wb").close()
            open(os.path.join(out, kind, f"{split}.idx"), "wb").close()
            empty[kind][split] = {"file": f"{kind}/{split}.bin", "index": f"{kind}/{split}.idx", "count": 0}
    index = {
        "format": 1,
        "dtype": "u16",
        "vocab_size": vocab,
        "bos_id": 0,
        "eos_id": 0,
        "pad_id": 0,
        "pretrain": {"shards": shards, "validation": {"file": "pretrain/validation.bin", "tokens": int(val.size)}},
        "sft": empty["sft"],
        "dpo": empty["dpo"],
    }
    with open(os.path.join(out, "index.json"), "w") as f:
        json.dump(index, f)
    with open(os.path.join(out, "tokenizer.json"), "w") as f:
        json.dump({"version": "1.0", "model": {"type": "BPE"}}, f)


def read_safetensors(path):
    """A .safetensors file as {name: tensor} (the format is a JSON header and raw data)."""
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", f"{name}: {info['dtype']}"
        a, b = info["data_offsets"]
        out[name] = torch.frombuffer(bytearray(data[a:b]), dtype=torch.float32).reshape(info["shape"])
    return out


def greedy(path, n_head, prompt, new_tokens):
    """Greedy continuation of `prompt` (token ids) with the weights of a lavender checkpoint,
    loaded by name and layout into this Hugging Face-shaped module (strict: every name must match)."""
    state = read_safetensors(path)
    vocab, e = state["transformer.wte.weight"].shape
    positions = state["transformer.wpe.weight"].shape[0]
    layers = len({k.split(".")[2] for k in state if k.startswith("transformer.h.")})
    model = GPT2(vocab, positions, e, layers, n_head, 0.0)
    model.load_state_dict(state, strict=True)
    model.eval()
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(new_tokens):
            logits = model(torch.tensor([ids[-positions:]]))
            ids.append(int(logits[0, -1].argmax()))
    return ids


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vocab", type=int, default=2048)
    ap.add_argument("--n-layer", type=int, default=2)
    ap.add_argument("--n-head", type=int, default=2)
    ap.add_argument("--n-embd", type=int, default=64)
    ap.add_argument("--n-positions", type=int, default=128)
    ap.add_argument("--dropout", type=float, default=0.0)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--precision", choices=["fp32", "bf16", "fp16"], default="fp32")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--write-tokens", metavar="DIR")
    ap.add_argument("--greedy", metavar="MODEL_SAFETENSORS")
    ap.add_argument("--prompt-ids", default="")
    ap.add_argument("--new-tokens", type=int, default=12)
    a = ap.parse_args()
    if a.greedy:
        prompt = [int(t) for t in a.prompt_ids.split(",") if t]
        print(json.dumps({"ids": greedy(a.greedy, a.n_head, prompt, a.new_tokens)}))
        return
    if a.write_tokens:
        write_tokens(a.write_tokens, a.vocab, 200_000)
        return

    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    device = torch.device(a.device)
    model = GPT2(a.vocab, a.n_positions, a.n_embd, a.n_layer, a.n_head, a.dropout).to(device)
    model.train()
    half = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(a.precision)
    scaler = torch.amp.GradScaler(device.type, enabled=a.precision == "fp16")
    decay = [p for n, p in model.named_parameters() if p.dim() == 2 and "wte" not in n and "wpe" not in n]
    rest = [p for n, p in model.named_parameters() if not (p.dim() == 2 and "wte" not in n and "wpe" not in n)]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
        lr=3e-3,
        betas=(0.9, 0.95),
        eps=1e-8,
    )
    data = torch.randint(1, a.vocab, (200_000,))
    pin = device.type == "cuda"

    def step():
        starts = torch.randint(0, data.numel() - a.seq_len - 1, (a.batch,))
        rows = torch.stack([data[s : s + a.seq_len + 1] for s in starts.tolist()])
        if pin:
            rows = rows.pin_memory()
        rows = rows.to(device, non_blocking=True)
        x, y = rows[:, :-1], rows[:, 1:]
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=half, enabled=half is not None):
            logits = model(x)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()
        return loss.detach()

    for _ in range(a.warmup):
        step()
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    sync()
    t0 = time.perf_counter()
    losses = [step() for _ in range(a.steps)]
    last = float(losses[-1])
    sync()
    dt = time.perf_counter() - t0
    print(
        json.dumps(
            {
                "steps_per_sec": a.steps / dt,
                "steps": a.steps,
                "seconds": dt,
                "precision": a.precision,
                "device": a.device,
                "last_loss": last,
            }
        )
    )


if __name__ == "__main__":
    main()
