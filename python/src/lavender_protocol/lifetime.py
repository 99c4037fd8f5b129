"""A rank dies with its launcher.

torchrun starts each rank in a session of its own, so a launcher killed at once
(SIGKILL, the OOM killer) leaves its ranks training, and saving, into the same run
as the next generation lavenderd starts. On Linux a rank asks the kernel to SIGKILL
it when its parent dies (`prctl(PR_SET_PDEATHSIG)`); elsewhere, nothing.

Only a rank under a launcher asks it (torchrun sets `TORCHELASTIC_RUN_ID`): a worker
lavenderd starts directly keeps training when the daemon dies, for the next daemon
to re-adopt."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys
from typing import Mapping, Optional

#: `<linux/prctl.h>`
PR_SET_PDEATHSIG = 1

#: The variables a launcher sets in the environment of the ranks it starts.
LAUNCHER_VARS = ("TORCHELASTIC_RUN_ID",)


def under_launcher(env: Optional[Mapping[str, str]] = None) -> bool:
    """This process is a rank started by a launcher such as torchrun."""
    env = os.environ if env is None else env
    return any(env.get(var) for var in LAUNCHER_VARS)


def die_with_parent(sig: int = signal.SIGKILL) -> bool:
    """Ask to receive `sig` when the parent dies. Returns whether it was set: on Linux
    only. If the parent died already (this process was re-parented before asking),
    `sig` is sent now."""
    if not sys.platform.startswith("linux"):
        return False
    parent = os.getppid()
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, ctypes.c_ulong(int(sig)), 0, 0, 0) != 0:
        return False
    # The parent may have died between the fork and the prctl: nothing would tell us.
    if os.getppid() != parent or parent == 1:
        os.kill(os.getpid(), sig)
    return True


def die_with_launcher(env: Optional[Mapping[str, str]] = None) -> bool:
    """`die_with_parent()` for a rank under a launcher; nothing otherwise."""
    return under_launcher(env) and die_with_parent()
