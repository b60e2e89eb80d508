"""The persisted outbox of governance notices, and its webhook delivery.

A notice (e.g. ``agent_removed``) is written to ``outbox.sqlite3`` (WAL,
``synchronous=FULL``) *before* the change it announces is made, then POSTed
to ``[freshness] webhook_url`` by :class:`WebhookDelivery`: a 2xx marks it
delivered; anything else is retried with exponential backoff (attempts and
the next attempt time are persisted, so a restart resumes where it stopped);
after ``webhook_max_attempts`` it is marked dead. Delivery is at-least-once:
receivers dedupe by ``event_id``. Without a webhook URL notices are kept
pending (and audited) until one is configured.

Times here are wall-clock POSIX seconds, because they outlive the process.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import structlog

from ans.federation.transport import PeerError, RequestTransport
from ans.governance.audit import AuditLog

from .freshness_policy import FreshnessSettings, origin_of, short_error

log = structlog.get_logger("ans.outbox")
SCHEMA_VERSION = 1
PENDING, DELIVERED, DEAD = "pending", "delivered", "dead"
BATCH = 32
DELIVERED_RETENTION = 30 * 86400.0  # delivered rows are pruned after this long


@dataclass(frozen=True, slots=True)
class OutboxRow:
    event_id: str
    event_type: str
    body: bytes
    created_at: float
    attempts: int
    next_attempt_at: float
    state: str
    last_error: str | None


def backoff(attempts: int, initial: float, cap: float) -> float:
    """Delay before the next attempt after ``attempts`` failed ones:
    initial, 2x, 4x, ... capped."""
    return float(min(cap, initial * 2 ** min(max(attempts - 1, 0), 62)))


class Outbox:
    """Thread-safe SQLite outbox (one connection, serialized by a lock)."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute("PRAGMA busy_timeout=5000")
        version = self._db.execute("PRAGMA user_version").fetchone()[0]
        if version not in (0, SCHEMA_VERSION):
            raise RuntimeError(f"outbox schema version {version} is newer than this ANS")
        self._db.execute(
            """CREATE TABLE IF NOT EXISTS outbox (
                   event_id        TEXT PRIMARY KEY,
                   event_type      TEXT NOT NULL,
                   body            BLOB NOT NULL,
                   created_at      REAL NOT NULL,
                   attempts        INTEGER NOT NULL DEFAULT 0,
                   next_attempt_at REAL NOT NULL,
                   state           TEXT NOT NULL,
                   last_error      TEXT,
                   finished_at     REAL)"""
        )
        self._db.execute("CREATE INDEX IF NOT EXISTS outbox_due ON outbox (state, next_attempt_at)")
        self._db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")

    def add(self, event_id: str, event_type: str, body: bytes, now: float) -> None:
        """Durably record a notice (on disk when this returns)."""
        with self._lock:
            self._db.execute(
                "INSERT INTO outbox (event_id, event_type, body, created_at, next_attempt_at,"
                " state) VALUES (?, ?, ?, ?, ?, ?)",
                (event_id, event_type, body, now, now, PENDING),
            )

    def due(self, now: float, limit: int = BATCH) -> list[OutboxRow]:
        with self._lock:
            rows = self._db.execute(
                "SELECT event_id, event_type, body, created_at, attempts, next_attempt_at, state,"
                " last_error FROM outbox WHERE state = ? AND next_attempt_at <= ?"
                " ORDER BY next_attempt_at, created_at LIMIT ?",
                (PENDING, now, limit),
            ).fetchall()
        return [OutboxRow(*r) for r in rows]

    def get(self, event_id: str) -> OutboxRow | None:
        with self._lock:
            r = self._db.execute(
                "SELECT event_id, event_type, body, created_at, attempts, next_attempt_at, state,"
                " last_error FROM outbox WHERE event_id = ?",
                (event_id,),
            ).fetchone()
        return OutboxRow(*r) if r else None

    def next_attempt_at(self) -> float | None:
        with self._lock:
            r = self._db.execute(
                "SELECT MIN(next_attempt_at) FROM outbox WHERE state = ?", (PENDING,)
            ).fetchone()
        return float(r[0]) if r and r[0] is not None else None

    def count(self, state: str = PENDING) -> int:
        with self._lock:
            r = self._db.execute("SELECT COUNT(*) FROM outbox WHERE state = ?", (state,)).fetchone()
        return int(r[0])

    def delivered(self, event_id: str, now: float) -> None:
        with self._lock:
            self._db.execute(
                "UPDATE outbox SET state = ?, attempts = attempts + 1, finished_at = ?,"
                " last_error = NULL WHERE event_id = ?",
                (DELIVERED, now, event_id),
            )

    def failed(self, event_id: str, error: str, next_attempt_at: float | None, now: float) -> None:
        """One more failed attempt; ``next_attempt_at`` None means give up (dead)."""
        with self._lock:
            if next_attempt_at is None:
                self._db.execute(
                    "UPDATE outbox SET state = ?, attempts = attempts + 1, last_error = ?,"
                    " finished_at = ? WHERE event_id = ?",
                    (DEAD, error, now, event_id),
                )
            else:
                self._db.execute(
                    "UPDATE outbox SET attempts = attempts + 1, last_error = ?,"
                    " next_attempt_at = ? WHERE event_id = ?",
                    (error, next_attempt_at, event_id),
                )

    def prune(self, now: float, retention: float = DELIVERED_RETENTION) -> int:
        with self._lock:
            cur = self._db.execute(
                "DELETE FROM outbox WHERE state = ? AND finished_at < ?",
                (DELIVERED, now - retention),
            )
        return int(cur.rowcount)

    def close(self) -> None:
        with self._lock:
            self._db.close()


class WebhookDelivery:
    """POST due outbox rows to the webhook; record the outcome of each attempt."""

    def __init__(
        self,
        outbox: Outbox,
        settings: FreshnessSettings,
        transport: RequestTransport,
        audit: AuditLog,
        wall_clock: Callable[[], float],
    ) -> None:
        self.outbox = outbox
        self.settings = settings
        self.transport = transport
        self.audit = audit
        self.wall_clock = wall_clock

    async def deliver_due(self) -> int:
        """Try every due notice once; return how many were delivered."""
        url = self.settings.webhook_url
        if url is None:
            return 0
        delivered = 0
        for row in self.outbox.due(self.wall_clock()):
            if await self._attempt(url, row):
                delivered += 1
        return delivered

    async def _attempt(self, url: str, row: OutboxRow) -> bool:
        s = self.settings
        headers = {
            "content-type": "application/json",
            "ans-event-id": row.event_id,
            "ans-event-type": row.event_type,
        }
        error: str
        try:
            reply = await self.transport.request(
                origin_of(url),
                "POST",
                url,
                headers,
                row.body,
                s.webhook_timeout,
                prior_knowledge=False,
            )
        except PeerError as exc:
            error = f"{exc.code}: {exc.message}"
        else:
            if 200 <= reply.status < 300:
                now = self.wall_clock()
                self.outbox.delivered(row.event_id, now)
                self.audit.record(
                    "webhook_delivered",
                    event_id=row.event_id,
                    event_type=row.event_type,
                    attempts=row.attempts + 1,
                    status=reply.status,
                )
                log.info("governance notice delivered", event_id=row.event_id)
                return True
            error = f"webhook answered {reply.status}"
        error = short_error(error)
        attempts = row.attempts + 1
        now = self.wall_clock()
        if attempts >= s.webhook_max_attempts:
            self.outbox.failed(row.event_id, error, None, now)
            self.audit.record(
                "webhook_dead",
                event_id=row.event_id,
                event_type=row.event_type,
                attempts=attempts,
                last_error=error,
            )
            log.error("governance notice undeliverable", event_id=row.event_id, error=error)
            return False
        delay = backoff(attempts, s.webhook_backoff_initial, s.webhook_backoff_max)
        self.outbox.failed(row.event_id, error, now + delay, now)
        log.warning(
            "governance notice not delivered; will retry",
            event_id=row.event_id,
            attempts=attempts,
            retry_in=round(delay, 3),
            error=error,
        )
        return False
