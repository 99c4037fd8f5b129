"""Checks a lavender export against torch and bergson 2.5.1 (run by
worker/tests/attribution_bergson.rs with the project's .venv).

    check_export.py FRAGMENT.yaml CHECKPOINT...

FRAGMENT.yaml is `lavenderd resolve`'s output for CHECKPOINT...; prints one JSON
object with what the Rust test asserts on.
"""

import json
import sys
from importlib.metadata import version

import torch
import yaml
from safetensors.torch import load_file
from transformers import AutoConfig, AutoModelForCausalLM

from bergson.approx_unrolling.approx_unrolling_math import (
    compute_lr_times_steps_per_segment,
)
from bergson.approx_unrolling.train_cfg_io import resolve
from bergson.config import ApproxUnrollingConfig
from bergson.utils.load_from_optimizer import optimizer_param_index_to_name


def check_optimizer_pt(ckpt):
    """optimizer.pt loads with weights_only=True in torch.optim's layout, its
    indices follow named_parameters(), and it holds optimizer.safetensors' moments."""
    state = torch.load(f"{ckpt}/optimizer.pt", weights_only=True)
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(ckpt))
    names = [n for n, _ in model.named_parameters()]
    flat = load_file(f"{ckpt}/optimizer.safetensors")
    group = state["param_groups"][0]
    reference = torch.optim.AdamW(model.parameters()).state_dict()["param_groups"][0]
    mismatched = []
    for i, name in enumerate(names):
        entry = state["state"][i]
        for moment in ("exp_avg", "exp_avg_sq"):
            if not torch.equal(entry[moment], flat[f"{name}.{moment}"]):
                mismatched.append(f"{i} {name}.{moment}")
    # A real torch.optim.AdamW takes the state as its own.
    optimizer = torch.optim.AdamW(model.parameters())
    optimizer.load_state_dict(state)
    # bergson's own index -> name mapping checks every shape against the model.
    mapping = optimizer_param_index_to_name(state, model)
    return {
        "top_keys": sorted(state),
        "entries": len(state["state"]),
        "parameters": len(names),
        "entry_keys": sorted(state["state"][0]),
        "step": float(state["state"][0]["step"]),
        "step_is_tensor": torch.is_tensor(state["state"][0]["step"]),
        "params": group["params"],
        "group_keys": sorted(group),
        "reference_group_keys": sorted(reference),
        "betas": list(group["betas"]),
        "eps": group["eps"],
        "weight_decay": group["weight_decay"],
        "lr": group["lr"],
        "mismatched_moments": mismatched,
        "bergson_mapping_matches": [mapping[i] for i in range(len(names))] == names,
        "loaded_into_adamw": len(optimizer.state_dict()["state"]) == len(names),
    }


def bergson_segments(cfg):
    cfg = resolve(cfg)
    return cfg.momentum, cfg.use_adam_preconditioner, compute_lr_times_steps_per_segment(cfg)


def main(fragment_path, checkpoints):
    with open(fragment_path) as f:
        fragment = yaml.safe_load(f)["approx_unrolling_cfg"]
    # bergson on its own: only the checkpoints and the segment count, everything
    # else derived by its resolve() and the run's log_history.json.
    own_momentum, own_adam, own = bergson_segments(
        ApproxUnrollingConfig(checkpoints=checkpoints, segments=fragment["segments"])
    )
    # bergson given lavender's fragment as it is.
    given_momentum, given_adam, given = bergson_segments(
        ApproxUnrollingConfig.from_dict(fragment)
    )
    print(
        json.dumps(
            {
                "versions": {
                    "bergson": version("bergson"),
                    "torch": torch.__version__,
                    "transformers": version("transformers"),
                },
                "fragment": fragment,
                "bergson_own": {
                    "momentum": own_momentum,
                    "use_adam_preconditioner": own_adam,
                    "lr_times_steps": own,
                },
                "bergson_given": {
                    "momentum": given_momentum,
                    "use_adam_preconditioner": given_adam,
                    "lr_times_steps": given,
                },
                "optimizer_pt": {c: check_optimizer_pt(c) for c in checkpoints},
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
