"""Waking followers of a PostgreSQL registry: one LISTEN connection in a
daemon thread turns the ``pg_notify(channel, seq)`` every write transaction
sends at commit into a condition variable that ``wait_for_change`` sleeps
on; a lost connection reconnects with back-off while waiters poll."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import psycopg
import structlog
from psycopg import sql

log = structlog.get_logger("ans.store")


class ChangeListener:
    def __init__(self, conninfo: str, channel: str, connect_timeout: float) -> None:
        self._conninfo = conninfo
        self._channel = channel
        self._timeout = connect_timeout
        self._cond = threading.Condition()
        self._notified = 0
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def wait(self, seq: int, timeout: float, poll: float, head: Callable[[], int]) -> int:
        """Block until ``head()`` > ``seq`` or ``timeout`` seconds pass; the
        last ``head()``. Woken by a notification, else every ``poll`` seconds."""
        self._start()
        deadline = time.monotonic() + timeout
        while True:
            now = head()
            left = deadline - time.monotonic()
            if now > seq or left <= 0:
                return now
            with self._cond:
                woken = self._cond.wait_for(lambda: self._notified > seq, timeout=min(left, poll))
            if woken and head() <= seq:  # never spin on a stale notification
                time.sleep(min(max(deadline - time.monotonic(), 0), 0.01))

    def _start(self) -> None:
        with self._cond:
            if self._thread is None and not self._stop.is_set():
                self._thread = threading.Thread(
                    target=self._listen, name="ans-store-listen", daemon=True
                )
                self._thread.start()

    def _wake(self, seq: int) -> None:
        with self._cond:
            self._notified = max(self._notified, seq)
            self._cond.notify_all()

    def _listen(self) -> None:
        backoff = 0.1
        while not self._stop.is_set():
            try:
                with psycopg.connect(
                    self._conninfo, autocommit=True, connect_timeout=max(1, int(self._timeout))
                ) as conn:
                    conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self._channel)))
                    backoff = 0.1
                    self._wake(0)  # anything missed while not listening: waiters re-read
                    while not self._stop.is_set():
                        for note in conn.notifies(timeout=0.25):
                            self._wake(int(note.payload))
            except (psycopg.Error, ValueError) as exc:
                if self._stop.is_set():
                    return
                log.warning("change listener lost; polling until it reconnects", error=str(exc))
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 5.0)

    def close(self) -> None:
        with self._cond:
            self._stop.set()
            thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout=5)
