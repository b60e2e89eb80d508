"""The MCP trust store (:mod:`.trust_store`) in the SQLite registry file:
table ``mcp_agents`` (schema v5, ``store_sqlite_schema``), written on the
store's one writer connection under its lock, so every write is serialised
with the registry's own and durable (WAL, ``synchronous=FULL``) when it
returns. Other processes over the same file see it at their next read.
"""

from __future__ import annotations

from typing import Any

from ..store import SQLiteStore
from .trust_store import COLUMNS, McpTrust, from_row, row_of

_INSERT = f"INSERT INTO mcp_agents ({COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"  # noqa: S608


class SqliteMcpTrust:
    """A friend of :class:`SQLiteStore`: it uses the store's writer
    connection, lock and transaction (one registry, one writer)."""

    def __init__(self, store: SQLiteStore) -> None:
        self.store = store

    def _query(self, sql: str, params: tuple[Any, ...]) -> list[Any]:
        s = self.store
        with s._reading(s._lock):
            return s._db.execute(sql, params).fetchall()

    def _write(self, sql: str, params: tuple[Any, ...]) -> int:
        s = self.store
        with s._lock, s._transaction():
            return s._db.execute(sql, params).rowcount

    def get(self, agent_id: str) -> McpTrust | None:
        rows = self._query(
            f"SELECT {COLUMNS} FROM mcp_agents WHERE agent_id = ?",  # noqa: S608
            (agent_id,),
        )
        return from_row(rows[0]) if rows else None

    def pin(self, rec: McpTrust) -> McpTrust:
        s = self.store
        with s._lock, s._transaction():
            s._db.execute(_INSERT.replace("INSERT", "INSERT OR IGNORE", 1), row_of(rec))
            row = s._db.execute(
                f"SELECT {COLUMNS} FROM mcp_agents WHERE agent_id = ?",  # noqa: S608
                (rec.agent_id,),
            ).fetchone()
        return from_row(row)

    def replace(self, rec: McpTrust, expect_key_id: str) -> bool:
        names = [c.strip() for c in COLUMNS.split(",")][1:]
        sets = ", ".join(f"{n} = ?" for n in names)
        return (
            self._write(
                f"UPDATE mcp_agents SET {sets} WHERE agent_id = ? AND key_id = ?",  # noqa: S608
                (*row_of(rec)[1:], rec.agent_id, expect_key_id),
            )
            == 1
        )

    def touch(self, agent_id: str, last_seen: float) -> bool:
        return (
            self._write(
                "UPDATE mcp_agents SET last_seen = MAX(last_seen, ?) "
                "WHERE agent_id = ? AND removed_at IS NULL",
                (last_seen, agent_id),
            )
            == 1
        )

    def page(self, after: str, limit: int, cutoff: float) -> list[McpTrust]:
        rows = self._query(
            f"SELECT {COLUMNS} FROM mcp_agents WHERE agent_id > ? AND last_seen > ? "  # noqa: S608
            "AND removed_at IS NULL ORDER BY agent_id LIMIT ?",
            (after, cutoff, limit),
        )
        return [from_row(r) for r in rows]

    def count_live(self, cutoff: float) -> int:
        rows = self._query(
            "SELECT COUNT(*) FROM mcp_agents WHERE last_seen > ? AND removed_at IS NULL",
            (cutoff,),
        )
        return int(rows[0][0])

    def stale(self, cutoff: float, limit: int) -> list[McpTrust]:
        rows = self._query(
            f"SELECT {COLUMNS} FROM mcp_agents WHERE last_seen <= ? "  # noqa: S608
            "AND removed_at IS NULL ORDER BY last_seen LIMIT ?",
            (cutoff, limit),
        )
        return [from_row(r) for r in rows]

    def mark_removed(self, agent_id: str, last_seen: float, at: float) -> bool:
        return (
            self._write(
                "UPDATE mcp_agents SET removed_at = ? "
                "WHERE agent_id = ? AND last_seen = ? AND removed_at IS NULL",
                (at, agent_id, last_seen),
            )
            == 1
        )

    def forget(self, agent_id: str) -> bool:
        return self._write("DELETE FROM mcp_agents WHERE agent_id = ?", (agent_id,)) == 1
