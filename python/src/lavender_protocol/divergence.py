"""`SpikeDetector`: the divergence rule lavender-worker applies (`training.spike`),
for a Python loop.

A non-finite loss or gradient norm diverges at once; a loss above `factor` × the
median of the last `window` steps (from the second step on) for `patience` steps in
a row diverges too, `since_step` being the spike's first step. Feed it every step,
in order, before any save (a diverged state must not be saved), then report:

    d = SpikeDetector()
    ...
    div = d.observe(step, loss.item(), grad_norm.item())
    if div:
        sys.exit(worker.diverged(div))   # `failed` heartbeat and event, exit 80
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Any, Dict, Optional


@dataclass(frozen=True)
class Divergence:
    step: int
    since_step: int
    message: str


class SpikeDetector:
    def __init__(self, factor: float = 3.0, window: int = 100, patience: int = 3) -> None:
        if not (factor > 1 and math.isfinite(factor)):
            raise ValueError(f"factor {factor!r} must be a finite number greater than 1")
        if int(window) < 1 or int(patience) < 1:
            raise ValueError(f"window ({window}) and patience ({patience}) must be at least 1")
        self.factor = float(factor)
        self.window = int(window)
        self.patience = int(patience)
        self._recent: deque = deque(maxlen=self.window)
        self._since: Optional[int] = None
        self._count = 0

    def reset(self) -> None:
        """A new stage (another loss): judge it afresh."""
        self._recent.clear()
        self._since = None
        self._count = 0

    def state(self) -> Dict[str, Any]:
        """What a checkpoint keeps (e.g. in `save(..., extra={"divergence": d.state()})`)."""
        doc: Dict[str, Any] = {"recent": list(self._recent), "spike_steps": self._count}
        if self._since is not None:
            doc["spike_since"] = self._since
        return doc

    def restore(self, state: Dict[str, Any]) -> None:
        self.reset()
        self._recent.extend(float(x) for x in state.get("recent", [])[-self.window :])
        self._since = state.get("spike_since")
        self._count = int(state.get("spike_steps", 0))

    def _median(self) -> Optional[float]:
        if not self._recent:
            return None
        v = sorted(self._recent)
        n = len(v)
        return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2

    def observe(self, step: int, loss: float, grad_norm: Optional[float] = None) -> Optional[Divergence]:
        """Judges step `step`; a `Divergence` once the run has diverged."""
        step = int(step)
        for what, value in (("loss", loss), ("gradient norm", grad_norm)):
            if value is not None and not math.isfinite(float(value)):
                since = self._since if self._since is not None else step
                return Divergence(step, since, f"the {what} became {float(value)} at step {step}")
        loss = float(loss)
        median = self._median()
        self._recent.append(loss)
        if median is None or not loss > self.factor * median:
            self._since = None
            self._count = 0
            return None
        if self._since is None:
            self._since = step
        self._count += 1
        if self._count < self.patience:
            return None
        return Divergence(
            step,
            self._since,
            f"loss {loss:.4f} > {self.factor:g} × median {median:.4f} of the previous "
            f"{len(self._recent) - 1} step(s) for {self._count} step(s) in a row "
            f"(since step {self._since}) at step {step}",
        )
