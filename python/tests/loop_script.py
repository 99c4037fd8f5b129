"""A stdlib-only training loop speaking the protocol (driven by test_worker.py and
lavenderd's tests): its "model" is `model.json`, loaded back on a resume."""

import json
import sys
import time

from lavender_protocol import Worker

w = Worker.from_argv(total_steps=int(sys.argv[sys.argv.index("--steps") + 1]), heartbeat_min_interval_s=0)
start = w.resume.step if w.resume else 0
if w.resume:
    model = w.load(lambda path: json.loads((path / "model.json").read_text()))
    assert model["step"] == start, model
w.start(step=start)
print(f"ready at step {start}", flush=True)
for step in range(start + 1, w.total_steps + 1):
    time.sleep(0.01)
    w.step(step, loss=1.0 / step, lr=0.1)
    stop = w.should_stop()
    if stop or step % 25 == 0 or step == w.total_steps:
        w.save(
            step,
            lambda d: (d / "model.json").write_text(json.dumps({"step": step})),
            final=stop or step == w.total_steps,
        )
    if stop:
        print(f"stopped at step {step}", flush=True)
        sys.exit(w.stopped())
sys.exit(w.finished())
