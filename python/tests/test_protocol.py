import json
import math
import os
import threading

import pytest

from lavender_protocol import protocol, _fs


def test_heartbeat_has_every_key_and_is_replaced_atomically(tmp_path):
    doc = protocol.heartbeat_document(
        step=12, total_steps=100, stage="train", state="training", loss=1.5, lr=1e-3, eta_seconds=33.4
    )
    assert set(doc) == {
        "step",
        "total_steps",
        "stage",
        "epoch",
        "epochs",
        "loss",
        "loss_smooth",
        "lr",
        "grad_norm",
        "steps_per_sec",
        "eta_seconds",
        "timestamp",
        "pid",
        "state",
        "latest_checkpoint",
    }
    assert doc["eta_seconds"] == 33
    assert doc["pid"] == os.getpid()
    assert doc["timestamp"].endswith("Z") and len(doc["timestamp"]) == len("2026-04-24T16:08:45.123Z")
    protocol.write_heartbeat(tmp_path, doc)
    protocol.write_heartbeat(tmp_path, dict(doc, step=13))
    assert protocol.read_heartbeat(tmp_path)["step"] == 13
    assert os.listdir(tmp_path) == ["heartbeat.json"], "no temporary file is left behind"


def test_non_finite_numbers_become_null(tmp_path):
    doc = protocol.heartbeat_document(
        step=1, total_steps=2, stage="train", state="training", loss=math.nan, grad_norm=math.inf
    )
    assert doc["loss"] is None and doc["grad_norm"] is None
    protocol.write_heartbeat(tmp_path, doc)
    json.loads((tmp_path / "heartbeat.json").read_text())


def test_bad_state_and_negative_step_are_refused():
    with pytest.raises(ValueError, match="dancing"):
        protocol.heartbeat_document(step=1, total_steps=2, stage="train", state="dancing")
    with pytest.raises(ValueError, match="negative"):
        protocol.heartbeat_document(step=-1, total_steps=2, stage="train", state="training")


def test_readers_never_see_half_a_heartbeat(tmp_path):
    stop = threading.Event()
    seen = []

    def read():
        while not stop.is_set():
            try:
                seen.append(json.loads((tmp_path / "heartbeat.json").read_text())["step"])
            except FileNotFoundError:
                pass

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for step in range(300):
            protocol.write_heartbeat(
                tmp_path, protocol.heartbeat_document(step=step, total_steps=300, stage="train", state="training")
            )
    finally:
        stop.set()
        reader.join()
    assert seen, "the reader read something"
    assert seen == sorted(seen)


def test_events_are_one_line_each_and_keep_reserved_keys(tmp_path):
    protocol.append_event(tmp_path, protocol.Kind.RUN_STARTED, "run started", step=0, ts="ignored")
    protocol.append_event(tmp_path, protocol.Kind.CHECKPOINT_SAVED, "saved\nx", path="/a", eval_loss=math.nan)
    lines = (tmp_path / "events.jsonl").read_text().splitlines()
    assert len(lines) == 2
    first, second = (json.loads(line) for line in lines)
    assert first["kind"] == "run_started" and first["step"] == 0
    assert second["message"] == "saved\nx" and second["eval_loss"] is None
    assert first["ts"].endswith("Z"), "a field cannot replace ts"


def test_concurrent_appenders_do_not_interleave(tmp_path):
    def write(t):
        for i in range(50):
            protocol.append_event(tmp_path, "retention", "x" * 3000, thread=t, i=i)

    threads = [threading.Thread(target=write, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(protocol.read_events(tmp_path)) == 200


def test_write_bytes_into_a_missing_directory_names_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing"):
        _fs.write_bytes(tmp_path / "missing" / "a.json", b"x")
    assert os.listdir(tmp_path) == []


def test_train_log_save_lines(tmp_path):
    protocol.log_run_dir(tmp_path)
    protocol.log_save(tmp_path, "train-10-00-00-0001")
    protocol.log_save(tmp_path, "checkpoint-20")
    assert protocol.saved_names(tmp_path) == ["train-10-00-00-0001", "checkpoint-20"]
    text = (tmp_path / "train.log").read_text().splitlines()
    assert text[0] == f"CKPT run-dir {tmp_path}"
    assert text[1].startswith("SAVE train-10-00-00-0001 @ ")
