"""A worker that saves every 20 steps and raises the same RuntimeError at the same
late step on every attempt (driven by lavenderd's supervision tests): each attempt
resumes from step 120 and runs longer than a short `restart_reset_after_s`."""

import json
import sys
import time

from lavender_protocol import Worker

FAIL_AT = 137
w = Worker.from_argv(total_steps=200, heartbeat_min_interval_s=0)
start = w.resume.step if w.resume else 0
w.start(step=start)
for step in range(start + 1, w.total_steps + 1):
    time.sleep(0.08)
    w.step(step, loss=1.0 / step, lr=0.1)
    if step == FAIL_AT:
        # Outside `with w:`: the excepthook reports it as a crash; Python exits 1.
        raise RuntimeError(f"the batch of step {step} holds a token id out of range")
    if step % 20 == 0:
        w.save(step, lambda d: (d / "model.json").write_text(json.dumps({"step": step})))
sys.exit(w.finished())
