"""The MCP registry's trust store (seed 002 section 6.1): which key each
``agent_id`` is pinned to, the key it rotated away from (accepted until
``previous_until``), and when it was last announced (the heartbeat TTL).

It lives in the registry store (table ``mcp_agents``, SQLite schema v5 /
PostgreSQL migration 2), so every worker and node over one store agrees on
the pinned keys and on who is live: nothing here depends on one process
remembering. Writes that race between replicas are compare-and-set: the
first pin wins (:meth:`McpTrustStore.pin`), a rotation replaces the key it
saw (:meth:`McpTrustStore.replace`), and only one sweeper removes a stale
agent (:meth:`McpTrustStore.mark_removed` on the ``last_seen`` it saw).

:func:`trust_store_for` picks the implementation for a registry store
(``trust_sqlite`` or ``trust_pg``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True, slots=True)
class McpTrust:
    """One ``mcp_agents`` row. Times are POSIX seconds."""

    agent_id: str  # lowercase UUIDv4
    key_pem: str
    key_id: str  # hex SHA-256 of the DER SubjectPublicKeyInfo
    announcement: bytes  # RFC 8785 bytes of the last accepted agent object
    digest: str  # hex SHA-256 of ``announcement``
    first_seen: float
    last_seen: float
    previous_key_pem: str | None = None
    previous_key_id: str | None = None
    previous_until: float | None = None
    removed_at: float | None = None  # set when the TTL sweeper removed it

    def live(self, cutoff: float) -> bool:
        return self.removed_at is None and self.last_seen > cutoff


COLUMNS = (
    "agent_id, key_pem, key_id, announcement, digest, first_seen, last_seen, "
    "previous_key_pem, previous_key_id, previous_until, removed_at"
)


def row_of(rec: McpTrust) -> tuple[Any, ...]:
    return (
        rec.agent_id,
        rec.key_pem,
        rec.key_id,
        rec.announcement,
        rec.digest,
        rec.first_seen,
        rec.last_seen,
        rec.previous_key_pem,
        rec.previous_key_id,
        rec.previous_until,
        rec.removed_at,
    )


def from_row(row: Any) -> McpTrust:
    return McpTrust(
        agent_id=row[0],
        key_pem=row[1],
        key_id=row[2],
        announcement=bytes(row[3]),
        digest=row[4],
        first_seen=float(row[5]),
        last_seen=float(row[6]),
        previous_key_pem=row[7],
        previous_key_id=row[8],
        previous_until=None if row[9] is None else float(row[9]),
        removed_at=None if row[10] is None else float(row[10]),
    )


class McpTrustStore(Protocol):
    def get(self, agent_id: str) -> McpTrust | None: ...

    def pin(self, rec: McpTrust) -> McpTrust:
        """Insert ``rec`` unless the id is pinned already; the row stored now
        (the other writer's, when it won)."""
        ...

    def replace(self, rec: McpTrust, expect_key_id: str) -> bool:
        """Overwrite the row if it is still pinned to ``expect_key_id``."""
        ...

    def touch(self, agent_id: str, last_seen: float) -> bool:
        """A heartbeat of a live agent: ``last_seen`` moves forward; False when
        the row is gone or was removed meanwhile."""
        ...

    def page(self, after: str, limit: int, cutoff: float) -> list[McpTrust]:
        """Live rows (``last_seen > cutoff``, not removed) with
        ``agent_id > after``, in agent_id order."""
        ...

    def count_live(self, cutoff: float) -> int: ...

    def stale(self, cutoff: float, limit: int) -> list[McpTrust]:
        """Rows not removed whose ``last_seen <= cutoff``, oldest first."""
        ...

    def mark_removed(self, agent_id: str, last_seen: float, at: float) -> bool:
        """Claim a stale row for removal if no heartbeat moved it since it was
        read (``last_seen`` unchanged); True for the one claimant that won."""
        ...

    def forget(self, agent_id: str) -> bool:
        """Delete the row (operator command): the id may be pinned afresh."""
        ...


def trust_store_for(store: Any) -> McpTrustStore:
    """The trust store in ``store`` (a SQLiteStore or PostgresStore, possibly
    wrapped by ``ans.metrics.TimedStore``)."""
    inner = getattr(store, "_store", store)
    from ..store import SQLiteStore

    if isinstance(inner, SQLiteStore):
        from .trust_sqlite import SqliteMcpTrust

        return SqliteMcpTrust(inner)
    try:
        from ..store_pg import PostgresStore
    except ImportError:  # the postgres extra is not installed
        PostgresStore = None  # type: ignore[assignment,misc]
    if PostgresStore is not None and isinstance(inner, PostgresStore):
        from .trust_pg import PgMcpTrust

        return PgMcpTrust(inner)
    raise TypeError(f"no MCP trust store for {type(inner).__name__}")
