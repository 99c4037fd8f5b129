"""The worker's checkpoint saves as the worker timed them: each `checkpoint_saved`
event carries `stall_s` (how long training stood still for the save, of which
`wait_s` waiting for the previous save and `copy_s` copying the tensors to host
memory) and `durable_s` (from the start of the copy until its files were written,
fsynced and committed on the background writer; `write_s` of it writing them). Waits until process PID exits,
then prints JSON.
Usage: save_times.py DATA_ROOT PID"""

import glob
import json
import os
import sys
import time


def main():
    root, pid = sys.argv[1], int(sys.argv[2])
    while os.path.exists(f"/proc/{pid}") and "Z" not in open(f"/proc/{pid}/stat").read().split()[2]:
        time.sleep(0.05)
    (run,) = glob.glob(os.path.join(root, "checkpoints", "run-*"))
    saved = [e for e in map(json.loads, open(os.path.join(run, "events.jsonl"))) if e["kind"] == "checkpoint_saved"]
    saves = [
        {
            "name": e["name"],
            "path": e["path"],
            "stage": e["stage"],
            "seconds": round(e["durable_s"], 3),
            "stall_seconds": round(e["stall_s"], 3),
            "wait_seconds": round(e["wait_s"], 3),
            "copy_seconds": round(e["copy_s"], 3),
            "write_seconds": round(e["write_s"], 3),
        }
        for e in saved
    ]
    # Every save of one model has the same size; retention removed the older ones.
    kept = next(s["path"] for s in reversed(saves) if os.path.isdir(s["path"]))
    files = {os.path.basename(f): os.path.getsize(f) for f in glob.glob(os.path.join(kept, "*"))}
    print(json.dumps({"run": run, "saves": saves, "checkpoint": kept, "files": files, "bytes": sum(files.values())}))


if __name__ == "__main__":
    main()
