"""examples/torchrun/train.py as an elastic script runs under torchrun's restarts:
with `--resume <run dir>` once the run has a complete checkpoint, so a restarted
worker loads its latest checkpoint at start (torchrun relaunches the same command)."""

import runpy
import sys
from pathlib import Path

from lavender_protocol import checkpoints

TRAIN = Path(__file__).resolve().parents[2] / "examples" / "torchrun" / "train.py"

args = sys.argv[1:]
run_dir = Path(args[args.index("--run-dir") + 1])
if run_dir.is_dir() and checkpoints.latest_complete(run_dir) is not None:
    args += ["--resume", str(run_dir)]
sys.argv = [str(TRAIN), *args]
runpy.run_path(str(TRAIN), run_name="__main__")
