"""DISCOVERs that reach the matcher in one turn of the event loop share one exhaustive scan.

Under concurrent load ``ans serve`` starts the requests that arrived together
in one turn of its event loop, and each then matches on its own. Each waits
here for one loop turn instead: the DISCOVERs gathered meanwhile have their
query texts scanned against every agent's rows in one pass
(:meth:`ans.index.capability.CapabilityIndex.prefetch`, :mod:`ans.index.prefetch`),
then each matches as before and takes its columns of that scan. A DISCOVER
alone goes on after the one turn, and scans on its own. Only plain intents of
a catalog scored exhaustively wait (up to ``exact_max`` agents, no
``capability_domains``); the answers are the same bit for bit.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import structlog

from ..index.capability import CapabilityMatcher

log = structlog.get_logger("ans.scan_batch")


class ScanBatch:
    """One event loop's gathering of DISCOVER intents (single-threaded: the loop's)."""

    def __init__(self, matcher: Callable[[], CapabilityMatcher]) -> None:
        self._matcher = matcher
        self._pending: list[tuple[str, asyncio.Future[None]]] = []
        self.batches = 0  # batches of two or more scanned together
        self.batched = 0  # DISCOVERs in them
        # Called with the number of DISCOVERs of each scan: the gathered ones
        # when they shared it, else 1 for each (``ans_discover_scan_batch``).
        self.observers: list[Callable[[int], None]] = []

    async def join(self, intent: str | None, domains: tuple[str, ...] | None) -> None:
        """Wait one loop turn with the other DISCOVERs that reach this point in it."""
        if intent is None or domains is not None or not self._matcher().batches_scans:
            return
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        self._pending.append((intent, done))
        if len(self._pending) == 1:
            loop.call_soon(self._flush)
        await done

    def _flush(self) -> None:
        pending, self._pending = self._pending, []
        shared = False
        try:
            if len(pending) > 1:
                covered = self._matcher().prefetch([intent for intent, _ in pending])
                if covered:
                    shared = True
                    self.batches += 1
                    self.batched += len(pending)
        except Exception:  # each DISCOVER then scans on its own
            log.exception("batched scan failed")
        finally:
            for _, done in pending:
                if not done.done():
                    done.set_result(None)
        sizes = [len(pending)] if shared else [1] * len(pending)
        try:
            for observe in self.observers:
                for size in sizes:
                    observe(size)
        except Exception:  # a metric never holds up an answer
            log.exception("scan batch observer failed")
