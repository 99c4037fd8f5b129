import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lavender_protocol import lifetime
from bounds import HANG_S

SRC = Path(__file__).resolve().parent.parent / "src"

# A launcher that starts one rank in a session of its own (as torchrun does), prints
# the rank's pid, and waits.
LAUNCHER = """
import subprocess, sys, time
rank = subprocess.Popen([sys.executable, "-c", sys.argv[1]], start_new_session=True, stdout=subprocess.PIPE, text=True)
print(rank.stdout.readline().strip(), flush=True)
time.sleep(300)
"""
RANK = """
import os, time
from lavender_protocol import lifetime
print(os.getpid(), lifetime.die_with_launcher(), flush=True)
time.sleep(300)
"""


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False


def test_only_a_rank_under_a_launcher_asks_to_die_with_it():
    assert lifetime.under_launcher({"TORCHELASTIC_RUN_ID": "none"})
    assert not lifetime.under_launcher({"RANK": "0"})
    assert not lifetime.die_with_launcher({})


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
@pytest.mark.parametrize("launched", [True, False])
def test_a_rank_in_its_own_session_dies_when_its_launcher_is_killed(launched):
    env = dict(os.environ, PYTHONPATH=str(SRC))
    env.pop("TORCHELASTIC_RUN_ID", None)
    if launched:
        env["TORCHELASTIC_RUN_ID"] = "test"
    launcher = subprocess.Popen([sys.executable, "-c", LAUNCHER, RANK], env=env, stdout=subprocess.PIPE, text=True)
    pid, asked = launcher.stdout.readline().split()
    rank = int(pid)
    assert asked == str(launched)
    launcher.send_signal(signal.SIGKILL)
    launcher.wait(timeout=HANG_S)
    try:
        deadline = time.monotonic() + HANG_S
        while launched and alive(rank) and time.monotonic() < deadline:
            time.sleep(0.02)
        # Without a launcher the process is left alone (a worker outlives its daemon).
        assert alive(rank) != launched
    finally:
        if alive(rank):
            os.kill(rank, signal.SIGKILL)
