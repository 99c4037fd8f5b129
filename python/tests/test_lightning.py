"""`lavender_protocol.lightning.LavenderCallback` with a real PyTorch Lightning
`Trainer` (lightning_script.py's tiny network with dropout, on CPU): the step record
and heartbeat, saves with manifests, a stop that Lightning's own SIGTERM handling
would have ended without a save, resumes that train what the uninterrupted run
trained, and what a checkpoint that cannot be loaded ends with."""

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

# The test environment has torch and Lightning: a missing one fails here, never skips.
import lightning as L
import pytest
import torch
from bounds import HANG_S
from lightning_script import Tiny, loader, trainer

from lavender_protocol import Worker, failure, protocol
from lavender_protocol import checkpoints as ck
from lavender_protocol import lightning as lavender_lightning
from lavender_protocol.lightning import CHECKPOINT_FILE, STATE_KEY, LavenderCallback

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"
RUN = "run-2026-01-01_00-00-00"


def make_worker(tmp_path, resume=None, **options):
    options.setdefault("handle_signals", False)
    return Worker(
        tmp_path / "checkpoints" / RUN,
        data_root=tmp_path,
        resume=resume,
        handle_failures=False,
        heartbeat_min_interval_s=0,
        **options,
    )


class Hook(L.Callback):
    """Calls `fn(trainer, *args)` on the Trainer hook `name` (before the lavender
    callback's, which the Trainer runs last)."""

    def __init__(self, name, fn):
        setattr(self, name, lambda trainer, *args: fn(trainer, *args))


def stop_at(w, step):
    """What SIGTERM does to the worker, at the end of optimizer step `step`."""

    def maybe(trainer, *args):
        if trainer.global_step == step:
            w.request_stop()

    return Hook("on_train_batch_end", maybe)


def fit(tmp_path, steps, *, resume=None, save_steps=None, callbacks=(), val=False, worker=None, **options):
    """A fit of `Tiny` on 4 batches an epoch (validation every 2 steps with `val`);
    returns (model, trainer, worker)."""
    w = worker or make_worker(tmp_path, resume=resume)
    cb = LavenderCallback(w, save_steps=save_steps)
    torch.manual_seed(0)
    model = Tiny()
    if val:
        options.update(limit_val_batches=1, val_check_interval=2, check_val_every_n_epoch=None)
    t = trainer(cb, steps, callbacks=callbacks, **options)
    held_out = torch.utils.data.DataLoader(loader(2).dataset, batch_size=4) if val else None
    t.fit(model, loader(4), held_out, ckpt_path=cb.ckpt_path)
    return model, t, w


def record(run):
    path = run / protocol.STEP_RECORD_FILE
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def saves(run):
    return [
        (e["kind"], e["step"]) for e in protocol.read_events(run) if e["kind"] in ("checkpoint_saved", "final_saved")
    ]


def test_a_fit_records_every_step_and_saves_complete_checkpoints_with_manifests(tmp_path, monkeypatch):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    model, t, w = fit(tmp_path, 6, save_steps=2, val=True)
    run = w.run_dir
    # One line an optimizer step: the loss it trained on, the learning rate and the
    # gradient norm it stepped with.
    lines = record(run)
    assert [e["step"] for e in lines] == [1, 2, 3, 4, 5, 6]
    assert [e["loss"] for e in lines] == pytest.approx(model.losses, rel=1e-6)
    assert [e["grad_norm"] for e in lines] == pytest.approx(model.norms, rel=1e-5)
    assert [e["learning_rate"] for e in lines] == pytest.approx([0.05 / (1 + k) for k in range(6)])
    assert [e["epoch"] for e in lines] == [0.25, 0.5, 0.75, 1.0, 1.25, 1.5]
    assert {e["stage"] for e in lines} == {"train"}
    # A save every 2 steps; the last step's is the final one, with the validation
    # that ran at its step; the others come before their step's validation.
    assert model.validated == [2, 4, 6]
    assert saves(run) == [("checkpoint_saved", 2), ("checkpoint_saved", 4), ("final_saved", 6)]
    complete = ck.list_run_checkpoints(run)
    assert [c.step for c in complete] == [2, 4, 6]
    for c in complete:
        assert c.state[STATE_KEY] == CHECKPOINT_FILE
        manifest = json.loads((c.path / ck.MANIFEST_FILE).read_text())
        assert [(f["path"], f["size"]) for f in manifest["files"]] == [
            (CHECKPOINT_FILE, (c.path / CHECKPOINT_FILE).stat().st_size),
            (ck.TRAINER_STATE_FILE, (c.path / ck.TRAINER_STATE_FILE).stat().st_size),
        ]
        assert torch.load(c.path / CHECKPOINT_FILE, weights_only=True)["global_step"] == c.step
    assert [c.state["val_loss"] for c in complete][:2] == [None, None]
    final_val = complete[-1].state["val_loss"]
    assert final_val == pytest.approx(float(t.callback_metrics["val_loss"]))
    assert protocol.read_events(run)[-1]["eval_loss"] == final_val
    hb = protocol.read_heartbeat(run)
    assert (hb["state"], hb["step"], hb["total_steps"]) == ("finished", 6, 6)
    assert hb["latest_checkpoint"] == complete[-1].name
    # The callback is the Trainer's checkpointer: no ModelCheckpoint of Lightning's,
    # nothing written into the working directory.
    assert t.checkpoint_callbacks == [c for c in t.callbacks if isinstance(c, LavenderCallback)]
    assert list(cwd.iterdir()) == []


def test_with_gradient_accumulation_a_step_is_an_optimizer_step_and_its_loss_the_batches_mean(tmp_path):
    model, _, w = fit(tmp_path, 3, accumulate_grad_batches=2)
    lines = record(w.run_dir)
    assert [e["step"] for e in lines] == [1, 2, 3]
    pairs = [sum(model.losses[i : i + 2]) / 2 for i in (0, 2, 4)]
    assert [e["loss"] for e in lines] == pytest.approx(pairs, rel=1e-6)
    assert [e["grad_norm"] for e in lines] == pytest.approx(model.norms, rel=1e-5)


def test_a_stop_saves_once_at_its_step_and_ends_fit_past_min_steps_without_validating(tmp_path):
    w = make_worker(tmp_path)
    model, t, _ = fit(tmp_path, 100, save_steps=5, callbacks=[stop_at(w, 3)], worker=w, val=True, min_steps=50)
    run = w.run_dir
    assert t.global_step == 3 and t.should_stop
    assert model.validated == [2], "a stop runs no validation on its way out"
    assert saves(run) == [("final_saved", 3)]
    hb = protocol.read_heartbeat(run)
    assert (hb["state"], hb["step"]) == ("stopping", 3)
    assert hb["latest_checkpoint"] == ck.latest_complete(run).name


@pytest.mark.parametrize("stop", [4, 6], ids=["at-an-epochs-end", "mid-epoch"])
def test_a_resume_from_a_stop_trains_what_the_uninterrupted_run_trained(tmp_path, stop):
    # Dropout draws from the RNG every step: the states in the checkpoint come back.
    alone, _, w_alone = fit(tmp_path / "alone", 10, val=True)
    w = make_worker(tmp_path / "stopped")
    first, _, _ = fit(tmp_path / "stopped", 10, callbacks=[stop_at(w, stop)], worker=w, val=True)
    assert len(first.losses) == stop
    phases = []

    def seen(trainer, *args):
        phases.append(protocol.read_heartbeat(w.run_dir)["state"])

    resumed, _, w2 = fit(
        tmp_path / "stopped",
        10,
        resume="latest",
        val=True,
        callbacks=[Hook("on_fit_start", seen), Hook("on_validation_batch_start", seen)],
    )
    assert first.losses + resumed.losses == alone.losses
    assert record(w2.run_dir) == record(w_alone.run_dir)
    assert phases[0] == "loading" and set(phases[1:]) == {"evaluating"} and len(phases) > 1, phases
    kinds = [e["kind"] for e in protocol.read_events(w2.run_dir)]
    assert kinds == ["run_started", "final_saved", "run_started", "checkpoint_loaded", "final_saved"], kinds
    loaded = [e for e in protocol.read_events(w2.run_dir) if e["kind"] == "checkpoint_loaded"]
    assert [e["step"] for e in loaded] == [stop]


@pytest.fixture
def sigterm_restored():
    before = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, before)


def sigterm_self(trainer, *args):
    os.kill(os.getpid(), signal.SIGTERM)


def test_sigterm_in_training_is_the_workers_stop_not_lightnings_exit(tmp_path, sigterm_restored):
    """Lightning's handler would raise SIGTERMException at the end of the batch,
    without a save; the worker's flag saves at that step and `fit` returns."""
    w = make_worker(tmp_path, handle_signals=True)
    handlers = []

    def at_step_3(trainer, *args):
        handlers.append(signal.getsignal(signal.SIGTERM))
        if trainer.global_step == 3:
            sigterm_self(trainer)

    _, t, _ = fit(tmp_path, 100, callbacks=[Hook("on_train_batch_end", at_step_3)], worker=w)
    assert set(handlers) == {w._on_sigterm}
    assert t.global_step == 3 and not t.received_sigterm
    assert saves(w.run_dir) == [("final_saved", 3)]
    assert protocol.read_heartbeat(w.run_dir)["state"] == "stopping"
    assert signal.getsignal(signal.SIGTERM) == w._on_sigterm


def test_sigterm_before_the_callback_takes_it_back_from_lightning_still_stops_after_the_first_step(
    tmp_path, sigterm_restored
):
    """Between `fit` registering Lightning's handler and the loop starting, SIGTERM
    reaches Lightning's handler, which passes it on to the worker's."""
    w = make_worker(tmp_path, handle_signals=True)
    seen = []

    def term_and_wait(trainer, *args):
        assert signal.getsignal(signal.SIGTERM) != w._on_sigterm, "Lightning's handler is in place"
        sigterm_self(trainer)
        deadline = time.monotonic() + HANG_S
        while not (trainer.received_sigterm and w.stop_requested):
            assert time.monotonic() < deadline, "SIGTERM never arrived"
            time.sleep(0.01)
        seen.append(True)

    _, t, _ = fit(
        tmp_path,
        100,
        callbacks=[Hook("on_sanity_check_start", term_and_wait)],
        worker=w,
        val=True,
        num_sanity_val_steps=1,
    )
    assert seen == [True]
    assert t.global_step == 1 and not t.received_sigterm
    assert saves(w.run_dir) == [("final_saved", 1)]
    assert protocol.read_heartbeat(w.run_dir)["state"] == "stopping"


def run_script(tmp_path, *args):
    # A session of its own: SIGTERM goes to its process group, as lavenderd sends it.
    return subprocess.Popen(
        [
            sys.executable,
            str(HERE / "lightning_script.py"),
            "train",
            "--data-root",
            str(tmp_path),
            "--run-dir",
            str(tmp_path / "checkpoints" / RUN),
            *args,
        ],
        env=dict(os.environ, PYTHONPATH=str(SRC)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def wait_for_a_save(proc, run, step):
    deadline = time.monotonic() + HANG_S
    while not any(c.step >= step for c in ck.list_run_checkpoints(run)):
        if proc.poll() is not None:
            raise AssertionError(f"the script ended first ({proc.returncode}): {proc.stderr.read()}")
        assert time.monotonic() < deadline, f"no save past step {step}"
        time.sleep(0.05)


def test_sigterm_to_a_lightning_script_saves_exits_zero_and_the_resume_continues(tmp_path):
    run = tmp_path / "checkpoints" / RUN
    proc = run_script(tmp_path, "--steps", "1000000", "--save-steps", "25")
    wait_for_a_save(proc, run, 25)
    os.killpg(proc.pid, signal.SIGTERM)
    out, err = proc.communicate(timeout=HANG_S)
    assert proc.returncode == 0, err
    stopped_at = int(out.split("stopped at step ")[1].split()[0])
    assert stopped_at >= 25
    final = [e for e in protocol.read_events(run) if e["kind"] == "final_saved"]
    assert [e["step"] for e in final] == [stopped_at]
    hb = protocol.read_heartbeat(run)
    assert (hb["state"], hb["step"]) == ("stopping", stopped_at)
    assert ck.latest_complete(run).step == stopped_at

    proc = run_script(tmp_path, "--steps", str(stopped_at + 5), "--resume", "latest")
    out, err = proc.communicate(timeout=HANG_S)
    assert proc.returncode == 0, err
    assert f"finished at step {stopped_at + 5}" in out
    events = protocol.read_events(run)
    assert [e["kind"] for e in events][-3:] == ["run_started", "checkpoint_loaded", "final_saved"]
    assert events[-2]["step"] == stopped_at and events[-1]["step"] == stopped_at + 5
    assert [e["step"] for e in record(run)] == list(range(1, stopped_at + 6))


def test_two_ddp_ranks_stop_after_the_same_step_with_one_save_by_rank_0_and_resume(tmp_path):
    run = tmp_path / "checkpoints" / RUN
    proc = run_script(tmp_path, "--steps", "1000000", "--save-steps", "10", "--devices", "2")
    wait_for_a_save(proc, run, 10)
    os.killpg(proc.pid, signal.SIGTERM)
    out, err = proc.communicate(timeout=HANG_S)
    assert proc.returncode == 0, err
    ended = sorted(line for line in out.splitlines() if "stopped at step" in line)
    stopped_at = int(ended[0].rsplit(" ", 1)[1])
    assert ended == [f"rank 0: stopped at step {stopped_at}", f"rank 1: stopped at step {stopped_at}"], out
    periodic = [("checkpoint_saved", s) for s in range(10, stopped_at + 1, 10) if s != stopped_at]
    assert saves(run) == periodic + [("final_saved", stopped_at)]
    assert [e["kind"] for e in protocol.read_events(run)].count("run_started") == 1
    assert [p.name for p in run.iterdir() if p.is_file() and p.suffix == ".ckpt"] == []
    assert [e["step"] for e in record(run)] == list(range(1, stopped_at + 1))

    proc = run_script(tmp_path, "--steps", str(stopped_at + 3), "--devices", "2", "--resume", "latest")
    out, err = proc.communicate(timeout=HANG_S)
    assert proc.returncode == 0, err
    assert sorted(line for line in out.splitlines() if "at step" in line) == [
        f"rank {r}: finished at step {stopped_at + 3}" for r in (0, 1)
    ], out
    assert saves(run)[-1] == ("final_saved", stopped_at + 3)
    loaded = [e["step"] for e in protocol.read_events(run) if e["kind"] == "checkpoint_loaded"]
    assert loaded == [stopped_at]


def saved_run(tmp_path):
    fit(tmp_path, 4, save_steps=2)
    return ck.latest_complete(tmp_path / "checkpoints" / RUN).path


def resume_fails(tmp_path, **options):
    """Resumes the run's newest checkpoint; returns the failure the worker recorded."""
    w = make_worker(tmp_path, resume="latest")
    with pytest.raises(BaseException) as raised:
        fit(tmp_path, 8, worker=w, **options)
    code = w.failed(raised.value)
    f = protocol.read_heartbeat(w.run_dir)["failure"]
    assert code == failure.exit_code(f["kind"]), f
    return f


@pytest.mark.parametrize("damage", ["cut short", "deleted"])
def test_a_lightning_checkpoint_that_cannot_be_read_is_a_damaged_checkpoint(tmp_path, damage):
    newest = saved_run(tmp_path)
    path = newest / CHECKPOINT_FILE
    if damage == "cut short":
        path.write_bytes(path.read_bytes()[:100])
    else:
        path.unlink()
    f = resume_fails(tmp_path)
    assert f["kind"] == "damaged_checkpoint", f
    assert str(newest) in f["message"], f


@dataclass
class Shape:
    width: int


class WithHyperparameters(Tiny):
    def __init__(self):
        super().__init__()
        self.save_hyperparameters({"shape": Shape(3)})


def test_a_type_that_weights_only_loading_refuses_is_the_scripts_error_not_damage(tmp_path):
    # The checkpoint's bytes are intact: setting it aside would lose every one.
    w = make_worker(tmp_path)
    cb = LavenderCallback(w)
    trainer(cb, 2).fit(WithHyperparameters(), loader(4))
    w = make_worker(tmp_path, resume="latest")
    cb = LavenderCallback(w)
    with pytest.raises(Exception, match="not an allowed global") as raised:
        trainer(cb, 4).fit(WithHyperparameters(), loader(4), ckpt_path=cb.ckpt_path, weights_only=True)
    assert w.failed(raised.value) == failure.exit_code("crash")
    assert protocol.read_heartbeat(w.run_dir)["failure"]["kind"] == "crash"


def test_a_checkpoint_the_callback_did_not_save_is_refused_as_config(tmp_path):
    run = tmp_path / "checkpoints" / RUN
    Worker(run, handle_signals=False).save(5, lambda d: (d / "model.pt").write_bytes(b"w"))
    cb = LavenderCallback(make_worker(tmp_path, resume="latest"))
    with pytest.raises(ck.ResumeError, match="not a checkpoint of lavender_protocol.lightning") as raised:
        _ = cb.ckpt_path
    assert failure.classify(raised.value)[0] == failure.CONFIG


def test_the_package_imports_without_lightning_and_names_it_when_the_callback_is_asked_for():
    code = (
        "import sys; sys.modules['lightning'] = None\n"
        "import lavender_protocol, lavender_protocol.lightning as m\n"
        "try:\n    m.LavenderCallback\nexcept ImportError as e:\n    print('refused:', e)\n"
    )
    env = dict(os.environ, PYTHONPATH=str(SRC))
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=HANG_S, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("refused:") and "lightning" in out.stdout, out.stdout


def test_another_lightning_version_is_refused_with_the_one_it_is_written_for(monkeypatch):
    monkeypatch.setattr(L, "__version__", "2.7.0")
    with pytest.raises(ImportError, match=r"Lightning 2\.6\.x .* this environment has 2\.7\.0"):
        lavender_lightning._require_lightning()
