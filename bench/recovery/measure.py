"""Recovery timing from a run directory's heartbeat, for bench/recovery/run.sh.

    measure.py kill --run-dir R --at N             SIGKILL the worker once its
        heartbeat reaches step N; time from the kill to the first heartbeat of another
        process past the step it was killed at. Prints JSON {kill_step, seconds}.
    measure.py cold --run-dir R --past N -- CMD…   start CMD (a worker resuming from a
        checkpoint); time from its start to its first heartbeat past step N, then kill
        its process group. Prints JSON {seconds}.

The heartbeat (`heartbeat.json`, replaced atomically by every worker that speaks the
lavender protocol) is read every millisecond; its `pid` is the process that wrote it.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

POLL_S = 0.001


def heartbeat(run_dir: Path):
    try:
        return json.loads((run_dir / "heartbeat.json").read_bytes())
    except (OSError, ValueError):
        return None


def wait(run_dir: Path, what: str, timeout: float, done):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        hb = heartbeat(run_dir)
        if hb is not None and done(hb):
            return hb
        time.sleep(POLL_S)
    sys.exit(f"measure: timed out after {timeout:.0f} s waiting for {what} in {run_dir}")


def kill(args) -> dict:
    hb = wait(args.run_dir, f"step {args.at}", args.timeout, lambda h: h.get("step", 0) >= args.at)
    pid, step = hb["pid"], hb["step"]
    os.kill(pid, signal.SIGKILL)
    t0 = time.monotonic()
    back = wait(
        args.run_dir,
        f"a restarted worker past step {step}",
        args.timeout,
        lambda h: h.get("pid") != pid and h.get("step", 0) > step,
    )
    return {"kill_step": step, "seconds": time.monotonic() - t0, "first_step": back["step"]}


def cold(args) -> dict:
    t0 = time.monotonic()
    child = subprocess.Popen(args.command, start_new_session=True, stdout=subprocess.DEVNULL)
    try:
        back = wait(
            args.run_dir,
            f"the worker past step {args.past}",
            args.timeout,
            lambda h: h.get("pid") == child.pid and h.get("step", 0) > args.past,
        )
        return {"seconds": time.monotonic() - t0, "first_step": back["step"]}
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="what", required=True)
    k = sub.add_parser("kill")
    k.add_argument("--run-dir", type=Path, required=True)
    k.add_argument("--at", type=int, required=True)
    k.add_argument("--timeout", type=float, default=120)
    c = sub.add_parser("cold")
    c.add_argument("--run-dir", type=Path, required=True)
    c.add_argument("--past", type=int, required=True)
    c.add_argument("--timeout", type=float, default=120)
    c.add_argument("command", nargs="+")
    args = p.parse_args()
    print(json.dumps(kill(args) if args.what == "kill" else cold(args)))


if __name__ == "__main__":
    main()
