"""Checks a lavender export against torch and bergson 2.5.1 (run by
worker/tests/attribution_bergson.rs with the project's .venv).

    check_export.py FRAGMENT.yaml CHECKPOINT...

FRAGMENT.yaml is `lavenderd resolve`'s output for CHECKPOINT...; prints one JSON
object with what the Rust test asserts on.
"""

import json
import logging
import sys
from importlib.metadata import version

import torch
import yaml
from safetensors.torch import load_file
from transformers import AutoConfig, AutoModelForCausalLM

from bergson.approx_unrolling.approx_unrolling_math import (
    compute_lr_times_steps_per_segment,
)
from bergson.approx_unrolling.train_cfg_io import (
    infer_trainer_run,
    load_training_config,
    lr_history_path,
    resolve,
)
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


class Records(logging.Handler):
    def __init__(self):
        super().__init__()
        self.messages = []

    def emit(self, record):
        self.messages.append(f"{record.levelname}: {record.getMessage()}")


def bergson_segments(cfg):
    """bergson's own resolve() and lr×steps, with what resolve() logged."""
    records = Records()
    log = logging.getLogger("bergson.approx_unrolling.train_cfg_io")
    log.addHandler(records)
    try:
        cfg = resolve(cfg)
    finally:
        log.removeHandler(records)
    return {
        "momentum": cfg.momentum,
        "use_adam_preconditioner": cfg.use_adam_preconditioner,
        "model_path": cfg.model_path,
        "lr_times_steps": compute_lr_times_steps_per_segment(cfg),
        "log": records.messages,
    }


def bergson_reads_the_run(checkpoints):
    """What bergson's run reader takes from the run directory itself."""
    run = infer_trainer_run(checkpoints)
    training = load_training_config(run)
    return {
        "run": run,
        "optimizer": training.optimizer,
        "model": training.model,
        "adam_beta1": training.adam_beta1,
        "adam_beta2": training.adam_beta2,
        "run_path": training.run_path,
        "lr_history": str(lr_history_path(checkpoints)),
    }


def main(fragment_path, checkpoints):
    with open(fragment_path) as f:
        fragment = yaml.safe_load(f)["approx_unrolling_cfg"]
    # bergson on its own: only the checkpoints and the segment count, everything
    # else derived by its resolve() and the run's log_history.json.
    own = bergson_segments(ApproxUnrollingConfig(checkpoints=checkpoints, segments=fragment["segments"]))
    # The same, with the Adam-preconditioned variant asked for (bergson 2.5.1's
    # resolve() never sets the flag itself; it warns when an AdamW run lacks it).
    own_adam = bergson_segments(
        ApproxUnrollingConfig(
            checkpoints=checkpoints,
            segments=fragment["segments"],
            use_adam_preconditioner=True,
        )
    )
    # bergson given lavender's fragment as it is.
    given = bergson_segments(ApproxUnrollingConfig.from_dict(fragment))
    print(
        json.dumps(
            {
                "versions": {
                    "bergson": version("bergson"),
                    "torch": torch.__version__,
                    "transformers": version("transformers"),
                },
                "fragment": fragment,
                "bergson_run": bergson_reads_the_run(checkpoints),
                "bergson_own": own,
                "bergson_own_adam": own_adam,
                "bergson_given": given,
                "optimizer_pt": {c: check_optimizer_pt(c) for c in checkpoints},
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
