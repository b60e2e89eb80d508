"""Connections per client address, and in all.

hypercorn has no such caps, so one address (or a few) could hold
connections until the process ran out of file descriptors; asyncio's accept
loop then failed on every connection, for every client of both listeners.
With ``Http2Defences.max_connections_per_client``, a connection over the
per-client cap is closed as soon as it is accepted; at
``max_connections`` in all, the connection idle the longest is closed to
make room (as nginx reuses keep-alive connections), and only when none is
idle is the new one refused. Clients are counted by :func:`client_key`: an
IPv6 client by its /64, as for the rate limit.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hypercorn.asyncio.tcp_server import TCPServer

from ans.governance.ratelimit import address_key, client_ip

from .hooks import patch
from .settings import defences_of


def client_key(host: str) -> str:
    """What connections are counted under: the IPv4 address (an IPv4-mapped
    IPv6 one too) or the IPv6 /64, since one host usually holds a whole /64;
    anything else as it is."""
    ip = client_ip(host)
    return host if ip is None else address_key(ip)


@dataclass(eq=False)  # hashable by identity: held in a WeakSet
class ConnectionTable:
    """The open connections of one hypercorn worker."""

    per_client: dict[str, int] = field(default_factory=dict)
    live: dict[Any, float | None] = field(default_factory=dict)  # idle since, or None: busy
    closing: set[asyncio.Future[None]] = field(default_factory=set)

    def became_idle(self, server: Any, now: float) -> None:
        if server in self.live:
            self.live[server] = now  # may be evicted from now on

    def became_busy(self, server: Any) -> None:
        if server in self.live:
            self.live[server] = None

    def evict_the_longest_idle(self) -> bool:
        """Make room by closing the connection idle the longest: idle
        connections are cheap to hold and cheap to reopen, so a full server
        is never full of them."""
        idle = [(since, id(s), s) for s, since in self.live.items() if since is not None]
        if not idle:
            return False
        _, _, victim = min(idle)
        del self.live[victim]  # no longer counted; it goes as the keep-alive timeout would
        closing = asyncio.ensure_future(victim._initiate_server_close())
        self.closing.add(closing)  # a task nobody holds may be collected before it runs
        closing.add_done_callback(self.closing.discard)
        return True


_TABLE = "ans_http2_connections"
_TABLES: weakref.WeakSet[ConnectionTable] = weakref.WeakSet()


def open_connections() -> int:
    """Connections open in all tables of this process (the metrics gauge)."""
    return sum(len(t.live) for t in list(_TABLES))


def table_of(context: Any) -> ConnectionTable:
    """The table of a hypercorn WorkerContext (made on first use)."""
    table: ConnectionTable | None = context.__dict__.get(_TABLE)
    if table is None:
        table = context.__dict__[_TABLE] = ConnectionTable()
        _TABLES.add(table)
    return table


def _capped(run: Callable[..., Any]) -> Callable[..., Any]:
    async def run_capped(self: Any) -> None:
        defences = defences_of(self.config)
        cap, total_cap = defences.max_connections_per_client, defences.max_connections
        if not cap and not total_cap:
            await run(self)
            return
        peer = self.writer.get_extra_info("peername")
        client = client_key(str(peer[0])) if isinstance(peer, tuple) and peer else "?"
        table = table_of(self.context)
        counts = table.per_client
        if (cap and counts.get(client, 0) >= cap) or (
            total_cap and len(table.live) >= total_cap and not table.evict_the_longest_idle()
        ):
            self.writer.close()  # refused: hypercorn never sees it
            return
        counts[client] = counts.get(client, 0) + 1
        table.live[self] = None
        try:
            await run(self)
        finally:
            table.live.pop(self, None)
            left = counts[client] - 1
            if left:
                counts[client] = left
            else:
                del counts[client]

    return run_capped


def install() -> None:
    patch(TCPServer, "run", _capped)
