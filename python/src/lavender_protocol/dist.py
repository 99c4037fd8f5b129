"""Ranks under torchrun / srun, and agreeing on a stop across them.

Only rank 0 writes (heartbeat, events, checkpoints); every rank honours a stop.
A SIGTERM reaches the ranks at slightly different moments, so the ranks agree
with one all-reduce (max) of their stop flags each time they check: all of them
then stop after the same step."""

from __future__ import annotations

import os
from typing import Mapping, Optional


def rank(env: Optional[Mapping[str, str]] = None) -> int:
    """This process's global rank: `RANK` (torchrun), else `SLURM_PROCID` (srun), else 0."""
    env = os.environ if env is None else env
    for var in ("RANK", "SLURM_PROCID"):
        value = env.get(var)
        if value is not None and value.strip() != "":
            try:
                return int(value)
            except ValueError:
                raise ValueError(f"environment variable {var}={value!r} is not a rank number") from None
    return 0


def local_rank(env: Optional[Mapping[str, str]] = None) -> int:
    env = os.environ if env is None else env
    for var in ("LOCAL_RANK", "SLURM_LOCALID"):
        value = env.get(var)
        if value is not None and value.strip() != "":
            return int(value)
    return 0


def world_size(env: Optional[Mapping[str, str]] = None) -> int:
    env = os.environ if env is None else env
    for var in ("WORLD_SIZE", "SLURM_NTASKS"):
        value = env.get(var)
        if value is not None and value.strip() != "":
            return int(value)
    return 1


def _initialized_dist():
    """torch.distributed when torch is importable and a process group is up."""
    try:
        import torch.distributed as td  # noqa: PLC0415 (torch is optional)
    except ImportError:
        return None
    if not (td.is_available() and td.is_initialized()) or td.get_world_size() < 2:
        return None
    return td


def any_rank(flag: bool) -> bool:
    """True when `flag` is true on any rank. A collective: every rank must call it
    at the same point of its loop. Without a process group it is `flag` itself."""
    td = _initialized_dist()
    if td is None:
        return bool(flag)
    import torch  # noqa: PLC0415

    device = "cpu"
    if td.get_backend() == "nccl":
        device = f"cuda:{torch.cuda.current_device()}"
    t = torch.tensor([1 if flag else 0], dtype=torch.int32, device=device)
    td.all_reduce(t, op=td.ReduceOp.MAX)
    return bool(t.item())


def barrier() -> None:
    td = _initialized_dist()
    if td is not None:
        td.barrier()
