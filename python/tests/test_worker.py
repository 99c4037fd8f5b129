import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lavender_protocol import Worker, parse_args, protocol
from lavender_protocol import checkpoints as ck
from lavender_protocol import dist
from bounds import HANG_S

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"


def test_parse_args_takes_lavenders_and_leaves_the_rest():
    a = parse_args(
        [
            "train",
            "--config",
            "/c.yaml",
            "--data-root",
            "/d",
            "--run-dir",
            "/d/checkpoints/run-x",
            "--scale",
            "tiny",
            "--chunk",
            "2",
            "--resume",
            "latest",
            "--lr",
            "3e-4",
        ]
    )
    assert a.step == "train" and a.chunk == 2 and a.resume == "latest"
    assert str(a.run_dir) == "/d/checkpoints/run-x" and str(a.data_root) == "/d"
    assert a.rest == ["--lr", "3e-4"]
    assert parse_args(["--run-dir", "/r"]).step is None
    # worker.command may carry the script's own options before lavender's.
    b = parse_args(["--max-steps", "150", "train", "--config", "/c.yaml", "--data-root", "/d"])
    assert (b.step, b.rest, str(b.config)) == ("train", ["--max-steps", "150"], "/c.yaml")


def test_rank_comes_from_torchrun_then_slurm():
    assert dist.rank({}) == 0
    assert dist.rank({"SLURM_PROCID": "3"}) == 3
    assert dist.rank({"RANK": "1", "SLURM_PROCID": "0"}) == 1
    with pytest.raises(ValueError, match="RANK"):
        dist.rank({"RANK": "one"})


def test_a_save_is_complete_named_and_announced(tmp_path):
    run = tmp_path / "checkpoints" / "run-2026-01-01_00-00-00"
    w = Worker(run, total_steps=10, handle_signals=False)
    w.start(step=0)
    w.step(5, loss=2.0, lr=1e-3)
    seen_during_save = []

    def write(d):
        (d / "model.bin").write_bytes(b"w")
        seen_during_save.append([c.name for c in ck.list_run_checkpoints(run)])
        seen_during_save.append(protocol.read_heartbeat(run)["state"])

    path = w.save(5, write, val_loss=1.25)
    assert seen_during_save == [[], "saving"]
    assert ck.latest_complete(run).path == path
    state = json.loads((path / "trainer_state.json").read_text())
    assert (state["step"], state["val_loss"], state["best_val_loss"]) == (5, 1.25, 1.25)
    kinds = [e["kind"] for e in protocol.read_events(run)]
    assert kinds == ["run_started", "checkpoint_saved"]
    saved = protocol.read_events(run)[-1]
    assert saved["path"] == str(path) and saved["step"] == 5 and saved["eval_loss"] == 1.25
    hb = protocol.read_heartbeat(run)
    assert hb["latest_checkpoint"] == path.name and hb["state"] == "training"
    assert protocol.saved_names(run) == [path.name]
    assert ck.next_counter(run) == 2
    manifest = json.loads((path / ck.MANIFEST_FILE).read_text())
    assert [(f["path"], f["size"]) for f in manifest["files"]] == [
        ("model.bin", 1),
        ("trainer_state.json", (path / "trainer_state.json").stat().st_size),
    ]


def test_a_failed_save_leaves_nothing(tmp_path):
    w = Worker(tmp_path, total_steps=10, handle_signals=False)

    def boom(d):
        (d / "half").write_bytes(b"x")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        w.save(1, boom)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".tmp")] == []
    assert ck.list_run_checkpoints(tmp_path) == []


def test_other_ranks_write_nothing(tmp_path):
    w = Worker(tmp_path / "run", total_steps=10, rank=1, handle_signals=False)
    w.start(step=0)
    w.step(1, loss=1.0)
    assert w.save(1, lambda d: (d / "x").write_bytes(b"x")) is None
    w.finished()
    assert not (tmp_path / "run").exists()


def test_an_exception_leaving_the_block_is_a_failed_heartbeat_event_and_exit_code(tmp_path):
    with pytest.raises(SystemExit) as ended:
        with Worker(tmp_path, total_steps=10, handle_signals=False, handle_failures=False) as w:
            w.start(step=0)
            w.step(3, loss=1.0)
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
    assert ended.value.code == 81
    failed = protocol.read_events(tmp_path)[-1]
    assert failed["kind"] == "failed" and "CUDA out of memory" in failed["message"]
    assert failed["failure"]["kind"] == "out_of_memory" and "Traceback" in failed["traceback"]
    hb = protocol.read_heartbeat(tmp_path)
    assert hb["state"] == "failed" and hb["failure"] == failed["failure"]
    # A crash propagates as it is (Python's exit code 1 says `crash`).
    run = tmp_path / "crash"
    with pytest.raises(KeyError):
        with Worker(run, total_steps=10, handle_signals=False, handle_failures=False):
            raise KeyError("tokenizer")
    hb = protocol.read_heartbeat(run)
    assert hb["failure"] == {"kind": "crash", "message": "KeyError: 'tokenizer'"}


def test_resume_from_a_run_directory_picks_its_newest(tmp_path):
    run = tmp_path / "checkpoints" / "run-2026-01-01_00-00-00"
    w = Worker(run, total_steps=10, handle_signals=False)
    w.save(3, lambda d: None)
    time.sleep(0.01)
    newest = w.save(6, lambda d: None)
    again = Worker(run, total_steps=10, resume=str(run), handle_signals=False)
    assert again.resume.path == newest and again.resume.step == 6
    w2 = Worker(run, total_steps=10, data_root=tmp_path, resume="latest", handle_signals=False)
    assert w2.resume.path == newest


def run_script(tmp_path, *args, steps=100000, **env_vars):
    env = dict(os.environ, PYTHONPATH=str(SRC), **env_vars)
    return subprocess.Popen(
        [
            sys.executable,
            str(HERE / "loop_script.py"),
            "train",
            "--data-root",
            str(tmp_path),
            "--run-dir",
            str(tmp_path / "checkpoints" / "run-2026-01-01_00-00-00"),
            "--steps",
            str(steps),
            *args,
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for(cond, what, timeout=HANG_S):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def heartbeat_step(run):
    try:
        return protocol.read_heartbeat(run)["step"]
    except (FileNotFoundError, ValueError):
        return -1


def test_sigterm_saves_and_exits_zero_then_resume_continues(tmp_path):
    run = tmp_path / "checkpoints" / "run-2026-01-01_00-00-00"
    proc = run_script(tmp_path)
    wait_for(lambda: heartbeat_step(run) >= 30, "30 steps")
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=HANG_S)
    assert proc.returncode == 0, err
    stopped_at = int(out.split("stopped at step ")[1].split()[0])
    hb = protocol.read_heartbeat(run)
    assert hb["state"] == "stopping" and hb["step"] == stopped_at
    final = [e for e in protocol.read_events(run) if e["kind"] == "final_saved"]
    assert len(final) == 1 and final[0]["step"] == stopped_at
    assert hb["latest_checkpoint"] == Path(final[0]["path"]).name
    assert ck.latest_complete(run).step == stopped_at

    proc = run_script(tmp_path, "--resume", "latest", steps=stopped_at + 5)
    out, err = proc.communicate(timeout=HANG_S)
    assert proc.returncode == 0, err
    assert f"ready at step {stopped_at}" in out
    hb = protocol.read_heartbeat(run)
    assert hb["state"] == "finished" and hb["step"] == stopped_at + 5
    kinds = [e["kind"] for e in protocol.read_events(run)]
    assert kinds[-3:] == ["run_started", "checkpoint_loaded", "final_saved"]


def test_a_checkpoint_the_script_cannot_load_is_a_damaged_checkpoint(tmp_path):
    run = tmp_path / "checkpoints" / "run-2026-01-01_00-00-00"
    proc = run_script(tmp_path, steps=25)
    assert proc.wait(timeout=HANG_S) == 0, proc.stderr.read()
    saved = ck.latest_complete(run).path
    model = saved / "model.json"
    model.write_bytes(model.read_bytes()[:3])  # cut short
    proc = run_script(tmp_path, "--resume", "latest", steps=30)
    _, err = proc.communicate(timeout=HANG_S)
    assert proc.returncode == 1, err  # the excepthook's: Python's own exit code
    failed = [e for e in protocol.read_events(run) if e["kind"] == "failed"]
    assert len(failed) == 1, failed
    assert failed[0]["failure"]["kind"] == "damaged_checkpoint", failed
    message = failed[0]["failure"]["message"]
    assert str(saved) in message and "JSONDecodeError" in message, message
    assert protocol.read_heartbeat(run)["failure"]["kind"] == "damaged_checkpoint"


def test_a_resume_that_names_nothing_exits_with_the_config_code_and_a_message(tmp_path):
    proc = run_script(tmp_path, "--resume", str(tmp_path / "nope"))
    _, err = proc.communicate(timeout=HANG_S)
    assert proc.returncode == 78
    assert "cannot resume" in err and "nope" in err
    # Said in the run as well, for a launcher that turns every exit into 1.
    run = tmp_path / "checkpoints" / "run-2026-01-01_00-00-00"
    failed = [e for e in protocol.read_events(run) if e["kind"] == "failed"]
    assert len(failed) == 1
    assert failed[0]["failure"]["kind"] == "config" and "nope" in failed[0]["failure"]["message"]


def test_a_data_step_is_refused_with_what_to_configure(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(SRC))
    proc = subprocess.run(
        [sys.executable, str(HERE / "loop_script.py"), "downloads", "--data-root", str(tmp_path), "--steps", "3"],
        env=env,
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )
    assert proc.returncode == 2
    assert "steps: [train]" in proc.stderr


def test_hf_a_periodic_save_under_way_at_sigterm_is_not_the_final_one(tmp_path):
    """SIGTERM during step 30's periodic save: that save stays `checkpoint_saved`;
    the save the stop asks for, after step 31, is the one `final_saved`."""
    from types import SimpleNamespace

    from lavender_protocol import hf

    run = tmp_path / "checkpoints" / "run-2026-01-01_00-00-00"
    out = tmp_path / "out"
    w = Worker(run, total_steps=150, handle_signals=False)
    cb = hf.LavenderCallback(worker=w)
    args = SimpleNamespace(output_dir=str(out))

    def step_and_save(step, stop_before_save):
        state = SimpleNamespace(global_step=step, epoch=0.1, max_steps=150)
        control = SimpleNamespace(should_save=False, should_training_stop=False)
        cb.on_step_end(args, state, control)
        if stop_before_save:
            w.request_stop()
        (out / f"checkpoint-{step}").mkdir(parents=True)
        (out / f"checkpoint-{step}" / "model.safetensors").write_bytes(b"w")
        cb.on_save(args, state, control)
        return control

    w.start(step=0)
    step_and_save(30, stop_before_save=True)
    control = step_and_save(31, stop_before_save=False)
    assert control.should_save and control.should_training_stop
    saves = ("checkpoint_saved", "final_saved")
    saved = [(e["kind"], e["step"]) for e in protocol.read_events(run) if e["kind"] in saves]
    assert saved == [("checkpoint_saved", 30), ("final_saved", 31)]
    # on_save wrote each checkpoint's manifest into the Trainer's folder before it appeared.
    manifest = json.loads((run / "checkpoint-31" / ck.MANIFEST_FILE).read_text())
    assert [f["path"] for f in manifest["files"]] == ["model.safetensors"]


def step_record(run):
    path = run / protocol.STEP_RECORD_FILE
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_every_step_with_a_loss_is_a_line_of_the_step_record_and_a_resume_cuts_it_back(tmp_path):
    run = tmp_path / "checkpoints" / "run-2026-01-01_00-00-00"
    proc = run_script(tmp_path, steps=30)
    assert proc.wait(timeout=HANG_S) == 0, proc.stderr.read()
    lines = step_record(run)
    assert [e["step"] for e in lines] == list(range(1, 31))
    assert lines[3] == {"step": 4, "loss": 0.25, "learning_rate": 0.1, "stage": "train"}
    # The first pass's steps 26..30 (after the checkpoint at 25) as if lost with a
    # crash: a resume from 25 trains them again, once each.
    ck.latest_complete(run).path.rename(run / "final-moved-aside")
    proc = run_script(tmp_path, "--resume", "latest", steps=30)
    assert proc.wait(timeout=HANG_S) == 0, proc.stderr.read()
    assert [e["step"] for e in step_record(run)] == list(range(1, 31))


def test_a_nan_loss_is_null_in_the_step_record(tmp_path):
    run = tmp_path / "run"
    w = Worker(run, total_steps=3, handle_signals=False)
    w.start()
    w.step(1, loss=float("nan"), lr=0.1)
    w.step(2, lr=0.1)  # no loss: not a training step's record
    assert step_record(run) == [{"step": 1, "loss": None, "learning_rate": 0.1, "stage": "train"}]


def test_stop_at_step_from_the_environment_stops_as_a_sigterm_would(tmp_path, monkeypatch):
    run = tmp_path / "checkpoints" / "run-2026-01-01_00-00-00"
    proc = run_script(tmp_path, steps=30, LAVENDER_STOP_AT_STEP="7")
    out, err = proc.communicate(timeout=HANG_S)
    assert proc.returncode == 0, err
    assert "stopped at step 7" in out
    assert ck.latest_complete(run).step == 7
    monkeypatch.setenv("LAVENDER_STOP_AT_STEP", "soon")
    with pytest.raises(ValueError, match="LAVENDER_STOP_AT_STEP"):
        Worker(tmp_path / "other", handle_signals=False)


def test_a_log_recorded_but_not_reported_before_a_kill_is_reported_by_the_next_worker(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from transformers.integrations.integration_utils import INTEGRATION_TO_CALLBACK

    from lavender_protocol import hf

    reporter_type = next(iter(INTEGRATION_TO_CALLBACK.values()))

    class Reporter(reporter_type):
        """A tracker's callback: what it was given to log."""

        def __init__(self):
            self.logged = []

        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs:
                self.logged.append(state.global_step)
            return control

    run = tmp_path / "checkpoints" / "run-2026-01-01_00-00-00"
    run.mkdir(parents=True)
    args = SimpleNamespace(output_dir=str(tmp_path / "out"))
    control = SimpleNamespace()

    def worker(replay_through):
        if replay_through is None:
            monkeypatch.delenv(hf.REPLAY_THROUGH_VAR, raising=False)
        else:
            monkeypatch.setenv(hf.REPLAY_THROUGH_VAR, str(replay_through))
        w = Worker(run, total_steps=60, handle_signals=False)
        cb = hf.LavenderCallback(worker=w)
        reporter = Reporter()
        flow = TrainerCallbackStub()
        trainer = SimpleNamespace(callback_handler=SimpleNamespace(callbacks=[flow, reporter, cb]))
        cb.attach(trainer)
        callbacks = trainer.callback_handler.callbacks
        assert callbacks[:3] == [flow, cb, reporter]
        assert isinstance(callbacks[3], hf._ReportedMark)
        w.start(step=0)
        return cb, reporter, callbacks

    def log(callbacks, step, upto=None):
        state = SimpleNamespace(global_step=step, epoch=0.1, max_steps=60)
        logs = {"loss": 1.0 / step, "learning_rate": 1e-3}
        for c in callbacks[:upto]:
            c.on_log(args, state, control, logs=logs)

    # The first worker logs 5 … 25; at 30 it is killed after lavender's record,
    # before the reporters' turn.
    cb, first, callbacks = worker(None)
    for step in (5, 10, 15, 20, 25):
        log(callbacks, step)
    log(callbacks, 30, upto=2)
    assert first.logged == [5, 10, 15, 20, 25]
    assert (run / hf.REPORTED_FILE).read_text() == "25"

    # lavenderd's record says the run trained through 30: the restart from 20 keeps
    # 25 from the trackers and reports 30 (no tracker had it) and on.
    cb, second, callbacks = worker(30)
    assert cb.replay_through == 25
    for step in (25, 30, 35):
        log(callbacks, step)
    assert second.logged == [30, 35]
    assert (run / hf.REPORTED_FILE).read_text() == "35"


def test_a_resume_goes_by_what_mlflow_holds_not_by_the_mark(tmp_path, monkeypatch):
    """The Trainer logs to MLflow in the background: a kill can lose a log its reporter
    took (the mark is ahead of the server), or the server can have a log whose mark
    was never written (behind). A resume asks the server, a real MLflow store here."""
    import mlflow
    from mlflow.tracking import MlflowClient
    from types import SimpleNamespace

    from transformers.integrations.integration_utils import MLflowCallback, TensorBoardCallback

    from lavender_protocol import hf

    class Unaskable(TensorBoardCallback):
        """A reporter whose tracker lavender cannot ask."""

        def __init__(self):
            pass

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    client = MlflowClient()
    run_id = client.create_run(client.create_experiment("lavender-test")).info.run_id
    for step in (5, 10, 15, 20, 25):
        client.log_metric(run_id, "loss", 1.0 / step, step=step)
        client.log_metric(run_id, "learning_rate", 1e-3, step=step)
    # lavenderd's own keys and MLflow's system samples are not the Trainer's steps.
    client.log_metric(run_id, "lavender/event", 1.0, step=40)
    client.log_metric(run_id, "system/cpu_utilization_percentage", 50.0, step=90)
    assert hf._mlflow_through(run_id) == 25
    assert hf._mlflow_through(client.create_run("0").info.run_id) == 0
    assert hf._mlflow_through("no-such-run") is None
    assert mlflow.active_run() is None

    run = tmp_path / "run"
    run.mkdir()
    monkeypatch.setenv("MLFLOW_RUN_ID", run_id)
    monkeypatch.setenv(hf.REPLAY_THROUGH_VAR, "30")

    def attached(mark, reporter):
        (run / hf.REPORTED_FILE).write_text(str(mark))
        cb = hf.LavenderCallback(worker=Worker(run, total_steps=60, handle_signals=False))
        trainer = SimpleNamespace(callback_handler=SimpleNamespace(callbacks=[reporter, cb]))
        return cb.attach(trainer).replay_through

    # The mark says 30, MLflow lost it: 30 is sent again. The mark says 20, MLflow has
    # 25: 25 is not sent twice. A reporter that cannot be asked goes by the mark.
    assert attached(30, MLflowCallback()) == 25
    assert attached(20, MLflowCallback()) == 25
    assert attached(20, Unaskable()) == 20
    # MLflow unreachable: the mark, as for any reporter.
    monkeypatch.setenv("MLFLOW_RUN_ID", "no-such-run")
    assert attached(20, MLflowCallback()) == 20


class TrainerCallbackStub:
    """One of the Trainer's own flow callbacks: it stays first."""

    def on_log(self, args, state, control, logs=None, **kwargs):
        return control
