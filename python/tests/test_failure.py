import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lavender_protocol import Worker, failure, protocol
from lavender_protocol.divergence import SpikeDetector
from bounds import HANG_S

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"


def test_kinds_and_exit_codes_are_lavenders():
    assert failure.EXIT_CODES == {
        "crash": 1,
        "data": 65,
        "config": 78,
        "incompatible_checkpoint": 79,
        "diverged": 80,
        "out_of_memory": 81,
        "damaged_checkpoint": 82,
        "disk_full": 83,
        "missing_run_file": 84,
    }
    assert failure.exit_code("meteor") == 1
    with pytest.raises(ValueError, match="not one of"):
        failure.WorkerFailure("meteor", "x")


def test_exceptions_are_classified():
    import torch

    assert failure.classify(torch.cuda.OutOfMemoryError("CUDA out of memory"))[0] == "out_of_memory"
    cpu = RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory")
    assert failure.classify(cpu)[0] == "out_of_memory"
    assert failure.classify(MemoryError())[0] == "out_of_memory"
    assert failure.classify(RuntimeError("expected a tensor"))[0] == "crash"
    assert failure.classify(failure.WorkerFailure("data", "shard\n3 is bad")) == ("data", "shard 3 is bad")
    kind, message = failure.classify(ValueError("bad\nvalue"))
    assert (kind, message) == ("crash", "ValueError: bad value")


def test_no_space_and_a_used_up_quota_are_a_full_disk():
    import errno

    for code in (errno.ENOSPC, errno.EDQUOT):
        kind, message = failure.classify(OSError(code, os.strerror(code), "model.safetensors"))
        assert kind == "disk_full", message
    # Raised from the write, under the error the trainer wraps it in.
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError as e:
            raise RuntimeError("could not save the checkpoint") from e
    except RuntimeError as wrapped:
        assert failure.classify(wrapped)[0] == "disk_full"
    assert failure.classify(OSError(errno.EIO, "I/O error"))[0] == "crash"
    assert failure.exit_code("disk_full") == 83


def test_a_save_that_finds_no_space_leaves_no_partial_checkpoint(tmp_path):
    import errno

    run_dir = tmp_path / "checkpoints" / "run-2026-01-01_00-00-00"
    w = Worker(run_dir, data_root=tmp_path, total_steps=10, handle_signals=False, handle_failures=False)

    def full(d):
        (d / "model.safetensors").write_bytes(b"half")
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(OSError):
        w.save(3, full)
    assert sorted(p.name for p in run_dir.iterdir() if p.is_dir()) == []


def test_a_checkpoint_that_cannot_be_read_while_loading_is_damaged():
    import torch

    ckpt = Path("/runs/r/checkpoint-100")
    torn = RuntimeError("PytorchStreamReader failed reading zip archive: failed finding central directory")
    gone = FileNotFoundError(2, "No such file or directory", str(ckpt / "model.json"))
    for error in (torn, json.JSONDecodeError("x", "{", 1), gone, EOFError()):
        kind, message = failure.classify(error, loading=ckpt)
        assert kind == "damaged_checkpoint" and message.startswith(f"could not load checkpoint {ckpt}:"), error
        assert failure.classify(error)[0] == "crash"  # not while loading: the script's own
    # A file outside the checkpoint (a data shard) is not the checkpoint's damage, nor
    # is an error naming no file that did not come out of the loader's own calls.
    shard = FileNotFoundError(2, "No such file or directory", "/data/shards/shard-00003.jsonl")
    assert failure.classify(shard, loading=ckpt)[0] == "crash"
    wrapped = RuntimeError("the data loader failed")
    wrapped.__cause__ = shard
    assert failure.classify(wrapped, loading=ckpt, loader=False)[0] == "crash"
    assert failure.classify(json.JSONDecodeError("x", "{", 1), loading=ckpt, loader=False)[0] == "crash"
    assert failure.classify(gone, loading=ckpt, loader=False)[0] == "damaged_checkpoint"
    # A shape mismatch reads fine: not damage.
    mismatch = RuntimeError("Error(s) in loading state_dict for GPT2: size mismatch for wte.weight")
    assert failure.classify(mismatch, loading=ckpt)[0] == "crash"
    assert failure.classify(torch.cuda.OutOfMemoryError("CUDA out of memory"), loading=ckpt)[0] == "out_of_memory"


def run(tmp_path, mode):
    run_dir = tmp_path / "checkpoints" / "run-2026-01-01_00-00-00"
    proc = subprocess.run(
        [
            sys.executable,
            str(HERE / "fail_script.py"),
            mode,
            "train",
            "--data-root",
            str(tmp_path),
            "--run-dir",
            str(run_dir),
        ],
        env=dict(os.environ, PYTHONPATH=str(SRC)),
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )
    hb = protocol.read_heartbeat(run_dir)
    assert hb["state"] == "failed", proc.stderr
    failed = [e for e in protocol.read_events(run_dir) if e["kind"] == "failed"]
    assert len(failed) == 1 and failed[0]["failure"] == hb["failure"], proc.stderr
    return proc, hb["failure"]


@pytest.mark.parametrize(
    "mode, code, kind, words",
    [
        ("uncaught", 1, "crash", "KeyError: 'missing'"),
        ("explicit", 65, "data", "shard 3 is truncated"),
        ("raised", 79, "incompatible_checkpoint", "vocabulary 256"),
        ("oom", 81, "out_of_memory", "CUDA out of memory"),
        ("cpu-oom", 81, "out_of_memory", "allocate"),
    ],
)
def test_a_script_ends_with_its_failure_recorded_and_its_kinds_exit_code(tmp_path, mode, code, kind, words):
    proc, f = run(tmp_path, mode)
    assert proc.returncode == code, proc.stderr
    assert f["kind"] == kind and words in f["message"], f
    if mode != "explicit":
        assert "Traceback" in proc.stderr


def test_phases_say_what_holds_training_and_end_in_training(tmp_path):
    run = tmp_path / "checkpoints" / "run-2026-01-01_00-00-00"
    w = Worker(run, total_steps=10, handle_signals=False, heartbeat_min_interval_s=0)
    w.save(2, lambda d: (d / "model.json").write_text("{}"))
    again = Worker(run, total_steps=10, resume="latest", data_root=tmp_path, handle_signals=False)
    seen = []
    again.load(lambda path: seen.append((path.name, protocol.read_heartbeat(run)["state"])))
    assert seen == [(again.resume.name, "loading")]
    assert protocol.read_heartbeat(run)["state"] == "starting"  # no step yet
    again.start(step=2)
    again.step(3, loss=1.0)
    with again.phase("evaluating"):
        assert protocol.read_heartbeat(run)["state"] == "evaluating"
    assert protocol.read_heartbeat(run)["state"] == "training"
    with pytest.raises(ValueError, match="phase"):
        with again.phase("thinking"):
            pass


def test_a_rollbacks_skipped_steps_are_given_once_and_recorded_in_checkpoints(tmp_path):
    run = tmp_path / "checkpoints" / "run-2026-01-01_00-00-00"
    w = Worker(run, total_steps=100, handle_signals=False)
    c10 = w.save(10, lambda d: None)
    ranges = [
        {"from_step": 10, "to_step": 25, "checkpoint": c10.name, "reason": "spike", "at": "2026-01-01T00:00:00Z"},
        {"from_step": 40, "to_step": 44, "checkpoint": "x", "reason": "spike", "at": "2026-01-01T00:00:00Z"},
    ]
    (run / "skipped.json").write_text(json.dumps({"ranges": ranges}))
    resumed = Worker(run, total_steps=100, resume=str(c10), handle_signals=False)
    assert resumed.skip_steps == 15
    resumed.start(step=10)
    assert [e for e in protocol.read_events(run) if e["kind"] == "data_skipped"][0]["steps"] == 15
    c12 = resumed.save(12, lambda d: None)
    assert json.loads((c12 / "trainer_state.json").read_text())["skips_applied"] == 2
    # From a checkpoint whose position includes the ranges: nothing more to skip.
    assert Worker(run, total_steps=100, resume=str(c12), handle_signals=False).skip_steps == 0
    # From the old one again (say an operator's --resume): the same skip, as before.
    assert Worker(run, total_steps=100, resume=str(c10), handle_signals=False).skip_steps == 15


def test_the_spike_detector_follows_lavenders_rule():
    d = SpikeDetector(factor=3.0, window=20, patience=2)
    calm = [2.0, 2.2, 1.9, 2.1, 2.0, 1.8, 2.05, 2.1, 1.95, 2.0]
    assert all(d.observe(i + 1, x) is None for i, x in enumerate(calm))
    assert d.observe(11, 6.5) is None
    div = d.observe(12, 7.0, 1.0)
    assert (div.step, div.since_step) == (12, 11)
    assert "> 3 × median 2.0000" in div.message
    # Restored from its state mid-spike, it judges the next step the same.
    d = SpikeDetector(factor=3.0, window=20, patience=2)
    for i, x in enumerate(calm):
        d.observe(i + 1, x)
    d.observe(11, 6.5)
    e = SpikeDetector(factor=3.0, window=20, patience=2)
    e.restore(json.loads(json.dumps(d.state())))
    assert e.observe(12, 7.0) == div
    # Non-finite: at once; an early blow-up is caught; a new stage starts afresh.
    assert SpikeDetector().observe(1, float("nan")).message == "the loss became nan at step 1"
    assert SpikeDetector().observe(1, 2.0, float("inf")).since_step == 1
    d = SpikeDetector(patience=2, window=20)
    results = [d.observe(i + 1, x) for i, x in enumerate([4.2, 3895.0, 11926.0])]
    assert (results[-1].step, results[-1].since_step) == (3, 2)
    with pytest.raises(ValueError):
        SpikeDetector(factor=1.0)


def test_hf_callback_reports_evaluating_and_saving_between_steps(tmp_path):
    from types import SimpleNamespace

    from lavender_protocol import hf

    run = tmp_path / "checkpoints" / "run-2026-01-01_00-00-00"
    out = tmp_path / "out"
    w = Worker(run, total_steps=100, handle_signals=False, heartbeat_min_interval_s=0)
    cb = hf.LavenderCallback(worker=w)
    args = SimpleNamespace(output_dir=str(out))
    state = SimpleNamespace(global_step=0, epoch=0.0, max_steps=100, num_train_epochs=1)
    control = SimpleNamespace(should_save=False, should_evaluate=False, should_training_stop=False)
    cb.on_train_begin(args, state, control)
    state.global_step = 10
    control.should_evaluate = control.should_save = True
    cb.on_step_end(args, state, control)
    assert protocol.read_heartbeat(run)["state"] == "evaluating"
    cb.on_evaluate(args, state, control, metrics={"eval_loss": 1.5})
    assert protocol.read_heartbeat(run)["state"] == "saving"
    (out / "checkpoint-10").mkdir(parents=True)
    cb.on_save(args, state, control)
    hb = protocol.read_heartbeat(run)
    assert (hb["state"], hb["latest_checkpoint"]) == ("training", "checkpoint-10")
