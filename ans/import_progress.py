"""Progress of ``ans import``, in records (lines), never bytes.

On a terminal: a tqdm bar (count of total, rate, ETA). Otherwise (a log, a
CI job): one plain line every ``interval`` seconds. Either way one summary
line at the end. The total is the number of non-blank lines, counted before
the import starts (a fast scan of the files).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

PLAIN_INTERVAL = 5.0  # s between plain progress lines


def count_records(files: Sequence[Path]) -> int:
    """Non-blank lines in ``files`` (each is one record)."""
    total = 0
    for path in files:
        with open(path, "rb") as fh:
            pending = b""
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                lines = (pending + chunk).split(b"\n")
                pending = lines.pop()
                total += sum(1 for line in lines if line.strip())
            if pending.strip():
                total += 1
    return total


class ImportProgress:
    def __init__(
        self,
        total: int,
        stream: IO[str] | None = None,
        *,
        interval: float = PLAIN_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.total = total
        self.interval = interval
        self._clock = clock
        self.start = clock()
        self._last_line = self.start
        self.count = 0
        self._bar: Any = None
        if self.stream.isatty():
            from tqdm import tqdm

            self._bar = tqdm(
                total=total, unit="agents", file=self.stream, dynamic_ncols=True, smoothing=0.1
            )

    def update(self, count: int) -> None:
        """``count`` records done so far."""
        if self._bar is not None:
            self._bar.update(count - self.count)
            self.count = count
            return
        self.count = count
        now = self._clock()
        if now - self._last_line >= self.interval:
            self._last_line = now
            elapsed = max(now - self.start, 1e-9)
            rate = count / elapsed
            left = (self.total - count) / rate if rate > 0 else 0.0
            pct = 100.0 * count / self.total if self.total else 100.0
            self.stream.write(
                f"ans import: {count:,} of {self.total:,} records ({pct:.0f}%), "
                f"{rate:,.0f}/s, about {left:,.0f} s left\n"
            )
            self.stream.flush()

    def done(self, summary: str) -> None:
        if self._bar is not None:
            self._bar.close()
        self.stream.write(summary + "\n")
        self.stream.flush()
