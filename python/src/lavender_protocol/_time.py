"""UTC clock formats shared with lavender (names, logs and JSON are all UTC)."""

from __future__ import annotations

from datetime import datetime, timezone


def now() -> datetime:
    return datetime.now(timezone.utc)


def rfc3339(t: datetime) -> str:
    """`2026-04-24T16:08:45.123Z`: RFC 3339, milliseconds, `Z`."""
    t = t.astimezone(timezone.utc)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


def clock(t: datetime) -> str:
    """`HH:MM:SS`, as in train.log's SAVE lines."""
    return t.astimezone(timezone.utc).strftime("%H:%M:%S")
