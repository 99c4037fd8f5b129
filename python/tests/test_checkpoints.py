import json
import os
from datetime import datetime, timezone

import pytest

from lavender_protocol import checkpoints as ck
from lavender_protocol import protocol


def save(run, stage, counter, *, step=None, val_loss=None, mtime=None):
    name = f"{stage}-12-00-{counter % 60:02d}-{counter:04d}"
    p = ck.PendingCheckpoint.begin(run, name)
    (p.dir / "model.pt").write_bytes(b"weights")
    path = p.commit(ck.trainer_state(step=step if step is not None else counter * 10, stage=stage, val_loss=val_loss))
    if mtime is not None:
        os.utime(path / ck.TRAINER_STATE_FILE, (mtime, mtime))
    return path


def hf_checkpoint(run, step, *, mtime=None, complete=True):
    d = run / f"checkpoint-{step}"
    d.mkdir()
    (d / "model.safetensors").write_bytes(b"w")
    if complete:
        (d / "trainer_state.json").write_text(json.dumps({"global_step": step, "epoch": 1.0, "log_history": []}))
        if mtime is not None:
            os.utime(d / "trainer_state.json", (mtime, mtime))
    return d


@pytest.fixture
def run(tmp_path):
    r = tmp_path / "checkpoints" / "run-2026-04-24_16-08-45"
    r.mkdir(parents=True)
    return r


def test_names_format_and_parse():
    t = datetime(2026, 4, 24, 16, 8, 47, tzinfo=timezone.utc)
    assert ck.checkpoint_name("pretrain", t, 3) == "pretrain-16-08-47-0003"
    assert ck.parse_name("pretrain-16-08-47-0003") == ("pretrain", 3)
    assert ck.parse_name("final-23-59-59-12345") == ("final", 12345)
    for bad in ["pretrain-16-08-47-003", "pre-train-16-08-47-0003", "pretrain-25-08-47-0003", "checkpoint-100", ""]:
        assert ck.parse_name(bad) is None, bad
    with pytest.raises(ValueError, match="a-z0-9_"):
        ck.checkpoint_name("Pre-Train", t, 1)


def test_incomplete_and_temporary_are_never_listed(run):
    done = save(run, "train", 1)
    half = run / "train-12-00-02-0002"
    half.mkdir()
    (half / "model.pt").write_bytes(b"partial")
    inflight = ck.PendingCheckpoint.begin(run, "train-12-00-03-0003")
    (inflight.dir / ck.TRAINER_STATE_FILE).write_text('{"step": 1, "stage": "x"}')
    trunc = run / "train-12-00-04-0004"
    trunc.mkdir()
    (trunc / ck.TRAINER_STATE_FILE).write_text('{"step": 4, "st')
    hf_checkpoint(run, 50, complete=False)

    assert [c.path for c in ck.list_run_checkpoints(run)] == [done]
    assert ck.latest_complete(run).path == done
    assert ck.resolve_resume("latest", run.parent).path == done
    with pytest.raises(ck.ResumeError, match="interrupted"):
        ck.resolve_resume(str(half), run.parent)
    with pytest.raises(ck.ResumeError, match="does not parse"):
        ck.resolve_resume(str(trunc), run.parent)
    assert ck.next_counter(run) == 5
    inflight.abort()
    assert not inflight.dir.exists()


def test_hf_checkpoints_count_and_order_by_completion(run):
    a = save(run, "train", 1, mtime=1000)
    b = hf_checkpoint(run, 20, mtime=2000)
    c = save(run, "train", 2, mtime=3000)
    listed = ck.list_run_checkpoints(run)
    assert [x.path for x in listed] == [a, b, c]
    assert listed[1].is_hf and listed[1].step == 20
    assert ck.resolve_resume(str(run), run.parent).path == c
    assert ck.resolve_resume(str(b), run.parent).step == 20


def test_latest_is_across_runs_and_flat(tmp_path):
    root = tmp_path / "checkpoints"
    r1 = root / "run-2026-01-01_00-00-00"
    r2 = root / "run-2026-01-02_00-00-00"
    r1.mkdir(parents=True)
    r2.mkdir()
    old = save(root, "train", 1, mtime=1000)
    newest = save(r1, "train", 1, mtime=3000)
    save(r2, "train", 1, mtime=2000)
    assert [c.path for c in ck.list_checkpoints(root)][0] == old
    assert ck.resolve_resume("latest", root).path == newest


def test_counter_continues_after_retention_deleted_everything(run):
    for c in range(1, 4):
        p = save(run, "train", c)
        protocol.log_save(run, p.name)
    assert ck.next_counter(run) == 4
    for c in ck.list_run_checkpoints(run):
        import shutil

        shutil.rmtree(c.path)
    assert ck.next_counter(run) == 4


def test_commit_writes_the_marker_last_and_renames(run):
    p = ck.PendingCheckpoint.begin(run, "train-01-02-03-0007")
    assert p.dir.name.startswith(".tmp-train-01-02-03-0007-")
    (p.dir / "sub").mkdir()
    (p.dir / "sub" / "opt.pt").write_bytes(b"o")
    assert not (p.dir / ck.TRAINER_STATE_FILE).exists()
    assert ck.list_run_checkpoints(run) == []
    path = p.commit(ck.trainer_state(step=70, stage="train", lr=None))
    assert path == run / "train-01-02-03-0007"
    state = json.loads((path / ck.TRAINER_STATE_FILE).read_text())
    # lavender's TrainerState needs numbers, never null, for these keys.
    for key in ("step", "total_steps", "epoch", "stage_step", "lr", "wall_time_s"):
        assert isinstance(state[key], (int, float)), key
    assert state["stage"] == "train" and state["saved_at"].endswith("Z")
    assert [x for x in os.listdir(run) if x.startswith(".")] == []
    with pytest.raises(FileExistsError, match="counters must not be reused"):
        ck.PendingCheckpoint.begin(run, "train-01-02-03-0007")


def test_commit_directory_makes_a_staged_save_appear_whole(run):
    staging = run / ".tmp-hf-staging"
    staged = staging / "checkpoint-5"
    staged.mkdir(parents=True)
    (staged / "trainer_state.json").write_text('{"global_step": 5}')
    ck.commit_directory(staged, run / "checkpoint-5")
    assert [c.name for c in ck.list_run_checkpoints(run)] == ["checkpoint-5"]
    with pytest.raises(FileExistsError):
        ck.commit_directory(staged, run / "checkpoint-5")


def test_resume_errors_say_what_to_do(tmp_path):
    with pytest.raises(ck.ResumeError, match="start without --resume"):
        ck.resolve_resume("latest", tmp_path)
    with pytest.raises(ck.ResumeError, match="/no/such/ckpt"):
        ck.resolve_resume("/no/such/ckpt", tmp_path)


def test_create_run_moves_to_the_next_second_on_a_clash(tmp_path):
    t = datetime(2026, 4, 24, 16, 8, 45, tzinfo=timezone.utc)
    a = ck.create_run(tmp_path, t)
    b = ck.create_run(tmp_path, t)
    assert (a.name, b.name) == ("run-2026-04-24_16-08-45", "run-2026-04-24_16-08-46")


def _sha256(path):
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_commit_writes_the_manifest_before_the_marker(run, monkeypatch):
    from lavender_protocol import _fs

    written = []
    real = _fs.write_bytes
    monkeypatch.setattr(_fs, "write_bytes", lambda path, data: (written.append(path.name), real(path, data)))
    p = ck.PendingCheckpoint.begin(run, "train-01-02-03-0001")
    (p.dir / "model.safetensors").write_bytes(b"weights" * 1000)
    (p.dir / "sub").mkdir()
    (p.dir / "sub" / "opt.pt").write_bytes(b"")
    path = p.commit(ck.trainer_state(step=1, stage="train"))
    assert written == [ck.MANIFEST_FILE, ck.TRAINER_STATE_FILE]
    manifest = json.loads((path / ck.MANIFEST_FILE).read_text())
    assert (manifest["format"], manifest["version"], manifest["algorithm"]) == (
        "lavender.checkpoint-manifest",
        1,
        "sha256",
    )
    # The commit marker is covered: hashed from the bytes then written.
    state = path / ck.TRAINER_STATE_FILE
    assert manifest["files"] == [
        {"path": "model.safetensors", "size": 7000, "hash": _sha256(path / "model.safetensors")},
        {"path": "sub/opt.pt", "size": 0, "hash": _sha256(path / "sub" / "opt.pt")},
        {"path": "trainer_state.json", "size": state.stat().st_size, "hash": _sha256(state)},
    ]


def test_commit_directory_writes_the_manifest_of_a_trainer_save(run):
    staged = run / ".tmp-hf-staging" / "checkpoint-7"
    staged.mkdir(parents=True)
    (staged / "trainer_state.json").write_text('{"global_step": 7}')
    (staged / "model.safetensors").write_bytes(b"m" * 3000)
    (staged / "rng_state.pth").write_bytes(b"r")
    target = ck.commit_directory(staged, run / "checkpoint-7")
    manifest = json.loads((target / ck.MANIFEST_FILE).read_text())
    # The Trainer's own trainer_state.json, the marker, is covered too.
    assert [(f["path"], f["size"]) for f in manifest["files"]] == [
        ("model.safetensors", 3000),
        ("rng_state.pth", 1),
        ("trainer_state.json", 18),
    ]
    assert manifest["files"][0]["hash"] == _sha256(target / "model.safetensors")
