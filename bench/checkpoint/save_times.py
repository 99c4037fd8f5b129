"""Times the worker's checkpoint saves from its own clock: a save starts when the
worker writes its `saving` heartbeat (its timestamp) and ends at the matching
`checkpoint_saved` event (its ts). Polls the heartbeat every 2 ms (a 500 MB save
takes far longer) until process PID exits, then prints JSON.
Usage: save_times.py DATA_ROOT PID"""

import glob
import json
import os
import sys
import time
from datetime import datetime


def ts(s):
    return datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


def main():
    root, pid = sys.argv[1], int(sys.argv[2])
    starts = []
    while os.path.exists(f"/proc/{pid}") and "Z" not in open(f"/proc/{pid}/stat").read().split()[2]:
        for hb in glob.glob(os.path.join(root, "checkpoints", "run-*", "heartbeat.json")):
            try:
                h = json.load(open(hb))
            except (OSError, ValueError):
                continue
            if h.get("state") == "saving" and h["timestamp"] not in starts:
                starts.append(h["timestamp"])
        time.sleep(0.002)
    (run,) = glob.glob(os.path.join(root, "checkpoints", "run-*"))
    saved = [
        e for e in map(json.loads, open(os.path.join(run, "events.jsonl")))
        if e["kind"] == "checkpoint_saved"
    ]
    saves = []
    for s in starts:
        end = next((e for e in saved if ts(e["ts"]) >= ts(s)), None)
        if end:
            saves.append({"name": end["name"], "path": end["path"], "seconds": round(ts(end["ts"]) - ts(s), 3)})
    # Every save of one model has the same size; retention removed the older ones.
    kept = next(s["path"] for s in reversed(saves) if os.path.isdir(s["path"]))
    files = {os.path.basename(f): os.path.getsize(f) for f in glob.glob(os.path.join(kept, "*"))}
    print(json.dumps({"run": run, "saves": saves, "checkpoint": kept, "files": files,
                      "bytes": sum(files.values()), "saving_heartbeats_seen": len(starts)}))


if __name__ == "__main__":
    main()
