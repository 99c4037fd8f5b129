"""Recovery of a large checkpoint, for bench/recovery/big.sh: one round.

lavenderd supervises lavender-worker on a model whose checkpoint is large (the
489 MB of bench/checkpoint by default); once its first checkpoint is saved the
worker is frozen (SIGSTOP, so that checkpoint is the newest and nothing is in
flight), optionally padded to PAD_MB more with a file its manifest lists and the
loader never opens (the size of a far larger model's checkpoint without training
one), and read back (`lavenderd verify` after the padding). Then the page cache is dropped (DROP=1), the
worker killed (SIGKILL) and the time taken from the kill to the first heartbeat of
the restarted worker past the step it was killed at; then the limit: the worker
started by hand from the same checkpoint (cache dropped again), to the same step.
`--reread` sets supervisor.verdict_max_age_s: 0, the relaunch then reads every
byte again (as before the verdict was reused).

Prints JSON: {mode, checkpoint_bytes, kill_step, seconds, limit_seconds}.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import blake3

here = Path(__file__).resolve().parent
sys.path.insert(0, str(here))
import measure


def sh(*args, **kw):
    return subprocess.run([str(a) for a in args], check=True, **kw)


def drop_caches() -> None:
    os.sync()
    Path("/proc/sys/vm/drop_caches").write_text("3\n")


def events(run: Path):
    try:
        lines = (run / "events.jsonl").read_text().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return out


def until(what: str, timeout: float, check):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.01)
    sys.exit(f"big: timed out after {timeout:.0f} s waiting for {what}")


def pad(ckpt: Path, mb: int) -> None:
    """A file of `mb` MiB the manifest lists (BLAKE3, as the worker's) and the
    loader skips, and the manifest written again."""
    block = os.urandom(1 << 20)
    h = blake3.blake3()
    with open(ckpt / "padding.bin", "wb") as f:
        for _ in range(mb):
            f.write(block)
            h.update(block)
        f.flush()
        os.fsync(f.fileno())
    manifest = json.loads((ckpt / "manifest.json").read_text())
    manifest["files"].append({"path": "padding.bin", "size": mb << 20, "hash": h.hexdigest()})
    manifest["files"].sort(key=lambda e: e["path"])
    tmp = ckpt / ".manifest.json.tmp"
    tmp.write_text(json.dumps(manifest, indent=2) + "\n")
    os.replace(tmp, ckpt / "manifest.json")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--dir", type=Path, required=True)
    p.add_argument("--lavenderd", required=True)
    p.add_argument("--worker", required=True)
    p.add_argument("--tokens", type=Path, required=True)
    p.add_argument("--reread", action="store_true")
    p.add_argument("--pad-mb", type=int, default=0)
    p.add_argument("--drop", action="store_true")
    p.add_argument("--model", default="{n_layer: 8, n_head: 10, n_embd: 640, n_positions: 128, dropout: 0.0}")
    a = p.parse_args()

    d, data = a.dir, a.dir / "data"
    data.mkdir(parents=True)
    (data / "tokens").symlink_to(a.tokens)
    max_age = 0 if a.reread else 86400
    (d / "lavender.yaml").write_text(f"""steps: [train]
device: cpu
threads: 2
worker:
  command: ["{a.worker}"]
model: {a.model}
training:
  batch_size: 2
  seq_len: 32
  log_every: 1
  eval_every: 1000000
  eval_batches: 1
  keep_checkpoints: 3
  save_optimizer_state: all
  stages:
    - {{name: pretrain, steps: 100000, lr: 1.0e-4, checkpoint_every: 3}}
supervisor:
  listen: 127.0.0.1:0
  stop_timeout_s: 30
  max_restarts: 1000
  stale_after_s: 3600
  startup_grace_s: 900
  loading_grace_s: 900
  verdict_max_age_s: {max_age}
notify:
  desktop: false
  milestones: false
""")
    cli = [a.lavenderd, "--config", d / "lavender.yaml", "--data-root", data]
    log = open(d / "daemon.log", "w")  # noqa: SIM115 (the daemon writes it until it is stopped below)
    daemon = subprocess.Popen([str(c) for c in cli + ["serve"]], stdout=log, stderr=subprocess.STDOUT)
    try:
        until("the daemon", 30, lambda: (data / "state" / "lavenderd.sock").exists())
        sh(*cli, "start", stdout=subprocess.DEVNULL)
        run = until("the run", 60, lambda: next((p for p in (data / "checkpoints").glob("run-*")), None))
        saved = until(
            "the first save", 600, lambda: next((e for e in events(run) if e.get("kind") == "checkpoint_saved"), None)
        )
        hb = measure.heartbeat(run)
        pid = hb["pid"]
        os.kill(pid, signal.SIGSTOP)
        ckpt = Path(saved["path"])
        if a.pad_mb:
            pad(ckpt, a.pad_mb)
            # The daemon read it back before the padding was listed (a save is what
            # makes it read a run again): `lavenderd verify` reads it now and records
            # the verdict, as an operator would.
            sh(*cli, "verify", "--run", run.name, stdout=subprocess.DEVNULL)
        size = sum(f.stat().st_size for f in ckpt.rglob("*") if f.is_file())
        verdict = run / f".verdict.{ckpt.name}.json"
        t_pad = time.time()

        def read_back():
            try:
                v = json.loads(verdict.read_text())
            except (OSError, ValueError):
                return None
            return v.get("verdict") == "verified" and verdict.stat().st_mtime >= t_pad - 1

        until("the daemon's read-back", 900, read_back)
        step = measure.heartbeat(run)["step"]
        if a.drop:
            drop_caches()
        os.kill(pid, signal.SIGKILL)
        t0 = time.monotonic()
        measure.wait(
            run, f"a restarted worker past step {step}", 900, lambda h: h.get("pid") != pid and h.get("step", 0) > step
        )
        seconds = time.monotonic() - t0
        loaded = [e for e in events(run) if e.get("kind") == "checkpoint_loaded"][-1]["path"]
        assert Path(loaded).name == ckpt.name, (loaded, ckpt)
    finally:
        subprocess.run(
            [str(c) for c in cli + ["stop"]], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False
        )
        daemon.terminate()
        daemon.wait()
        log.close()
    if a.drop:
        drop_caches()
    limit = measure.cold(
        argparse.Namespace(
            run_dir=d / "limit",
            past=step,
            timeout=900,
            command=[
                a.worker,
                "train",
                "--config",
                str(data / "state" / "pipeline-config.yaml"),
                "--data-root",
                str(data),
                "--run-dir",
                str(d / "limit"),
                "--scale",
                "tiny",
                "--chunk",
                "1",
                "--resume",
                str(ckpt),
            ],
        )
    )
    print(
        json.dumps(
            {
                "mode": "reread" if a.reread else "reuse",
                "checkpoint_bytes": size,
                "page_cache_dropped": a.drop,
                "kill_step": step,
                "seconds": round(seconds, 3),
                "limit_seconds": round(limit["seconds"], 3),
            }
        )
    )


if __name__ == "__main__":
    main()
