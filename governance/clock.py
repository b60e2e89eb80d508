"""The one clock type: time is passed in explicitly (DESIGN.md conventions).

Every component that needs the wall clock takes a :data:`Clock` (tests pass
a fixed or stepping one); :func:`utc_now` is the real one."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

Clock = Callable[[], datetime]


def utc_now() -> datetime:
    """The current time, timezone-aware UTC."""
    return datetime.now(UTC)
