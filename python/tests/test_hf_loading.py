"""What a resumed Hugging Face `Trainer` run ends with when something fails while
it loads: a real `Trainer` (a tiny GPT-2 on CPU) with `LavenderCallback`. Only the
checkpoint's own files, or an error out of the Trainer's own loaders, are
`damaged_checkpoint` (lavenderd sets the checkpoint aside); a data file that is
missing while the resume loads, or at its first step, is the data's: `crash`, or
`data` when the script says so."""

import errno

import pytest

# The test environment has torch and transformers (scripts/python-setup.sh): a
# missing one fails here, never skips.
import torch
import transformers

from lavender_protocol import Worker, checkpoints, failure, hf, protocol

SHARD = "/data/shards/shard-00003.jsonl"


class Data(torch.utils.data.Dataset):
    """Random byte windows; `broken_len` / `broken_item`: reading the data's length
    or an item fails as a data shard that is gone does."""

    def __init__(self):
        self.broken_len = self.broken_item = False
        self.data = torch.randint(0, 256, (64, 8))

    def _gone(self):
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", SHARD)

    def __len__(self):
        if self.broken_len:
            self._gone()
        return len(self.data)

    def __getitem__(self, i):
        if self.broken_item:
            self._gone()
        return {"input_ids": self.data[i], "labels": self.data[i].clone()}


def trainer(tmp_path, max_steps, resume=None):
    run = tmp_path / "checkpoints" / "run-2026-01-01_00-00-00"
    w = Worker(
        run,
        data_root=tmp_path,
        resume=resume,
        handle_signals=False,
        handle_failures=False,
        heartbeat_min_interval_s=0,
    )
    cb = hf.LavenderCallback(worker=w)
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=256, n_positions=8, n_embd=16, n_layer=1, n_head=2)
    args = transformers.TrainingArguments(
        output_dir=cb.output_dir,
        max_steps=max_steps,
        per_device_train_batch_size=4,
        save_strategy="steps",
        save_steps=2,
        use_cpu=True,
        dataloader_num_workers=0,
        report_to="none",
        disable_tqdm=True,
    )
    data = Data()
    t = transformers.Trainer(model=transformers.GPT2LMHeadModel(config), args=args, train_dataset=data, callbacks=[cb])
    return t, cb, data, run


def saved_run(tmp_path):
    t, cb, _, run = trainer(tmp_path, 4)
    t.train()
    assert checkpoints.latest_complete(run).path.name == "checkpoint-4"
    return run


def resume_fails(tmp_path, damage=lambda ckpt: None, break_data=lambda d: None):
    """Resumes the saved run after `damage` to its newest checkpoint and `break_data`
    to the data set; returns the failure the worker recorded."""
    run = saved_run(tmp_path)
    damage(checkpoints.latest_complete(run).path)
    t, cb, data, _ = trainer(tmp_path, 8, resume="latest")
    break_data(data)
    with pytest.raises(BaseException) as raised:
        t.train(resume_from_checkpoint=cb.resume_from_checkpoint)
    code = cb.worker.failed(raised.value)
    f = protocol.read_heartbeat(run)["failure"]
    assert code == failure.exit_code(f["kind"]), f
    return f


def test_a_data_file_missing_while_the_resume_loads_is_a_crash(tmp_path):
    # The Trainer reads the data set's length before on_train_begin, with the
    # checkpoint's weights loaded and its optimizer not yet.
    f = resume_fails(tmp_path, break_data=lambda d: setattr(d, "broken_len", True))
    assert f["kind"] == "crash" and SHARD in f["message"], f


def test_a_data_file_missing_at_the_first_step_after_a_resume_is_a_crash(tmp_path):
    f = resume_fails(tmp_path, break_data=lambda d: setattr(d, "broken_item", True))
    assert f["kind"] == "crash" and SHARD in f["message"], f


def test_a_data_failure_the_script_names_stays_data(tmp_path):
    run = saved_run(tmp_path)
    t, cb, data, _ = trainer(tmp_path, 8, resume="latest")
    data.broken_item = True
    with pytest.raises(FileNotFoundError) as raised:
        t.train(resume_from_checkpoint=cb.resume_from_checkpoint)
    error = failure.WorkerFailure("data", f"shard gone: {raised.value}")
    assert cb.worker.failed(error) == 65
    assert protocol.read_heartbeat(run)["failure"]["kind"] == "data"


@pytest.mark.parametrize("gone", ["model.safetensors", "rng_state.pth"])
def test_a_file_of_the_checkpoint_cut_short_is_a_damaged_checkpoint(tmp_path, gone):
    # Its weights are read before on_train_begin, its RNG state at the first step.
    def cut(ckpt):
        path = ckpt / gone
        path.write_bytes(path.read_bytes()[:40])

    f = resume_fails(tmp_path, damage=cut)
    assert f["kind"] == "damaged_checkpoint", f
    assert "checkpoint-4" in f["message"], f


def test_a_checkpoint_file_missing_for_the_scripts_own_load_is_a_damaged_checkpoint(tmp_path):
    run = saved_run(tmp_path)
    w = Worker(run, data_root=tmp_path, resume="latest", handle_signals=False, handle_failures=False)
    with pytest.raises(FileNotFoundError) as raised:
        w.load(lambda ckpt: open(ckpt / "extra_state.pt", "rb"))
    assert w.failed(raised.value) == failure.exit_code("damaged_checkpoint")
    # A data file its load reads is not the checkpoint's.
    w = Worker(run, data_root=tmp_path, resume="latest", handle_signals=False, handle_failures=False)
    with pytest.raises(FileNotFoundError) as raised:
        w.load(lambda ckpt: open(tmp_path / "shards" / "shard-00003.jsonl", "rb"))
    assert w.failed(raised.value) == failure.exit_code("crash")
