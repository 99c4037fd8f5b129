#!/usr/bin/env python3
"""Loads a `lavenderd export` checkpoint the way attribution tools do and reports,
as JSON on stdout, what Hugging Face sees: logits on given ids, generated text,
the tokenizer's ids for a text, the trainer state's per-step learning rates and
the optimizer file's metadata. Versions go to stderr. Runs offline.

    .venv/bin/python scripts/hf_check.py --model RUN/exported/checkpoint-10 --ids 1,2,3
"""

import argparse
import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, help="an exported checkpoint-<step> directory")
    p.add_argument("--ids", required=True, help="comma-separated token ids for the logits")
    p.add_argument("--text", default="The king", help="prompt for tokenizer and generation")
    p.add_argument("--max-new-tokens", type=int, default=8)
    a = p.parse_args()

    import safetensors
    import tokenizers
    import torch
    import transformers
    from safetensors import safe_open
    from transformers import AutoTokenizer, GPT2LMHeadModel, TrainerState, pipeline

    versions = {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "tokenizers": tokenizers.__version__,
        "safetensors": safetensors.__version__,
    }
    print("hf_check versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()), file=sys.stderr)
    torch.manual_seed(0)

    model, info = GPT2LMHeadModel.from_pretrained(a.model, output_loading_info=True)
    model.eval()
    tok = AutoTokenizer.from_pretrained(a.model)

    ids = [int(x) for x in a.ids.split(",") if x.strip()]
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0]

    generator = pipeline("text-generation", model=a.model, device="cpu")
    out = generator(a.text, max_new_tokens=a.max_new_tokens, do_sample=False)

    state = TrainerState.load_from_json(os.path.join(a.model, "trainer_state.json"))
    lrs = [[e["step"], e["learning_rate"]] for e in state.log_history if "learning_rate" in e]

    with safe_open(os.path.join(a.model, "optimizer.safetensors"), "pt") as f:
        opt_meta = f.metadata()
        opt_keys = len(list(f.keys()))
    with safe_open(os.path.join(a.model, "model.safetensors"), "pt") as f:
        model_meta = f.metadata()

    # Hugging Face writes sort_keys=True; check every object's key order as written.
    unsorted = []

    def pairs(items):
        keys = [k for k, _ in items]
        if keys != sorted(keys):
            unsorted.append(keys)
        return dict(items)

    with open(os.path.join(a.model, "trainer_state.json"), encoding="utf-8") as f:
        json.load(f, object_pairs_hook=pairs)
    sorted_keys = not unsorted

    json.dump(
        {
            "versions": versions,
            "logits": logits.tolist(),
            "lm_head_tied": model.lm_head.weight.data_ptr() == model.transformer.wte.weight.data_ptr(),
            "missing_keys": sorted(info.get("missing_keys", [])),
            "unexpected_keys": sorted(info.get("unexpected_keys", [])),
            "tokenizer_class": type(tok).__name__,
            "text_ids": tok(a.text)["input_ids"],
            "decoded": tok.decode(tok(a.text)["input_ids"]),
            "generated_text": out[0]["generated_text"],
            "global_step": state.global_step,
            "learning_rates": lrs,
            "trainer_state_keys_sorted": sorted_keys,
            "optimizer_metadata": opt_meta,
            "optimizer_tensors": opt_keys,
            "model_metadata": model_meta,
        },
        sys.stdout,
    )
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
