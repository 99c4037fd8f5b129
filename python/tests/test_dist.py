"""Stop agreement across ranks with a real gloo process group (torch from the venv)."""

import os
import socket

import torch.distributed as td
import torch.multiprocessing as mp

from lavender_protocol import Worker


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_main(rank, port, run_dir, results):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE="2")
    td.init_process_group("gloo", rank=rank, world_size=2)
    w = Worker(run_dir, total_steps=100, handle_signals=False)
    stopped_at = None
    for step in range(1, 101):
        if rank == 1 and step == 7:
            w.request_stop()  # as if only this rank had seen SIGTERM yet
        if w.should_stop():
            stopped_at = step
            w.save(step, lambda d: (d / "weights").write_bytes(b"w"), final=True)
            break
    results[rank] = (stopped_at, w.writes)
    td.destroy_process_group()


def test_one_ranks_stop_stops_every_rank_at_the_same_step_and_rank0_saves_once(tmp_path):
    run = tmp_path / "run"
    with mp.Manager() as m:
        results = m.dict()
        mp.spawn(rank_main, args=(free_port(), run, results), nprocs=2, join=True)
        got = dict(results)
    assert got == {0: (7, True), 1: (7, False)}
    saved = [p.name for p in run.iterdir() if not p.name.startswith(".") and p.is_dir()]
    assert len(saved) == 1
