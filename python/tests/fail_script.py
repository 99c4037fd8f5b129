"""A worker that fails the way its first argument says (driven by test_failure.py)."""

import sys

from lavender_protocol import Worker
from lavender_protocol.failure import WorkerFailure

mode = sys.argv.pop(1)
w = Worker.from_argv(total_steps=10)
w.start(step=0)
w.step(1, loss=2.0)
if mode == "uncaught":
    # Outside `with w:`: the excepthook reports it; Python exits 1.
    {}["missing"]
elif mode == "explicit":
    sys.exit(w.fail("data", "shard 3 is truncated; rebuild the shards", step=1))
elif mode == "raised":
    with w:
        raise WorkerFailure("incompatible_checkpoint", "vocabulary 256 != 50257")
elif mode == "oom":
    import torch

    with w:
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")
elif mode == "cpu-oom":
    import torch

    with w:
        torch.empty(1 << 62, dtype=torch.uint8)
