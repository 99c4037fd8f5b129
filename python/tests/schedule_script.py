"""A stdlib-only protocol loop with a learning-rate warm-up kept in its checkpoint
(driven by lavenderd's replay tests). `--forget-schedule`: a resume that does not
restore the schedule's position (the warm-up starts over), a resume bug.
`--hang-after N`: once step N is done, the first worker of the data root hangs (a
marker file beside the runs says it did), so a test kills it at a known step."""

import json
import sys
import time

from lavender_protocol import Worker


def arg(name, default=None):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


w = Worker.from_argv(total_steps=int(arg("--steps")), heartbeat_min_interval_s=0)
hang_after = int(arg("--hang-after", "0"))
marker = w.run_dir.parent / "hung-once"
start = w.resume.step if w.resume else 0
position = 0
if w.resume:
    saved = w.load(lambda path: json.loads((path / "model.json").read_text()))
    if "--forget-schedule" not in sys.argv:
        position = saved["schedule"]
w.start(step=start)
for step in range(start + 1, w.total_steps + 1):
    position += 1
    time.sleep(0.005)
    w.step(step, loss=1.0 / step, lr=0.1 * min(1.0, position / 100))
    if step == hang_after and not marker.exists():
        marker.touch()
        while True:
            time.sleep(1)
    stop = w.should_stop()
    if stop or step % 25 == 0 or step == w.total_steps:
        state = {"step": step, "schedule": position}
        w.save(step, lambda d: (d / "model.json").write_text(json.dumps(state)), final=stop or step == w.total_steps)
    if stop:
        sys.exit(w.stopped())
sys.exit(w.finished())
