"""How long an idle connection lasts (HTTP/1.1 and HTTP/2).

**A connection the client has closed.** When the client closes its end,
hypercorn stops reading but keeps the socket until the keep-alive timer runs
out (``keep_alive_timeout``, 300 s for long-lived AGTP sessions), so each
connection a client opened and closed held a file descriptor in CLOSE-WAIT
for minutes. Once reading has ended (end of stream, a read error or the read
timeout; hypercorn has then closed the connection's streams), the socket is
closed at once. A cancelled read (shutdown) closes the protocol first, so
answers being written stop waiting for a sender that is cancelled too.

**A deadline for the first request.** hypercorn gives a new connection the
whole keep-alive timeout to send its first request, so connections that
never asked anything held a file descriptor each for minutes. A connection
that has not started a request within ``Http2Defences.first_request_timeout``
of being accepted is closed; after its first request, an idle connection
lasts ``keep_alive_timeout`` as before. An HTTP/2 connection with prior
knowledge (h2c) had no timer at all until its first request ended: hypercorn
reads the preface as an HTTP/1.1 request, stops the idle timer for it and
hands over to HTTP/2 without starting it again. The timer now starts again
when HTTP/2 takes over an idle connection.

**Idle when the server stops.** ``Http2Defences.before_shutdown_close`` (the
HTTP/2 drain of :mod:`ans.drain`) is awaited before such a connection is
closed. A request that starts meanwhile cancels the timer, and with it the
drain, even in the instant the server begins to stop (the wait for the stop
uses ``asyncio.timeout``: ``asyncio.wait_for`` on Python 3.11 loses a
cancellation that arrives as the awaited event is set). The idle timer also
tells the connection table (:mod:`.connections`) when a connection becomes
idle or busy, for eviction at the cap.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import structlog
from hypercorn.asyncio.tcp_server import TCPServer
from hypercorn.events import Closed, Updated
from hypercorn.protocol import ProtocolWrapper
from hypercorn.protocol.h2 import H2Protocol

from .connections import table_of
from .hooks import patch
from .settings import defences_of

log = structlog.get_logger("ans.http")

_GONE = "ans_http2_client_gone"


def _read_until_gone(read_data: Callable[..., Any]) -> Callable[..., Any]:
    async def read_until_gone(self: Any) -> None:
        try:
            await read_data(self)
        except asyncio.CancelledError:
            # Shutdown (or a cancelled connection): close the protocol first,
            # so that requests still running see their streams closed and
            # answers being written stop waiting for a sender that is being
            # cancelled too; otherwise the cancellation never completes.
            await self.protocol.handle(Closed())
            raise
        finally:
            self.__dict__[_GONE] = True
        # Restart the idle timer: with the client gone it closes at once.
        await self.idle_task.restart(self._task_group, self._idle_timeout)

    return read_until_gone


def _has_started_a_request(server: Any) -> bool:
    wrapper = getattr(server, "protocol", None)
    protocol = getattr(wrapper, "protocol", None)
    return bool(getattr(protocol, "keep_alive_requests", 1))


def _close_or_keep_alive(_idle_timeout: Callable[..., Any]) -> Callable[..., Any]:
    # Replaces hypercorn's timer (wait keep_alive_timeout, then close), whose
    # body is these two lines; it is not called.
    async def close_or_keep_alive(self: Any) -> None:
        if self.__dict__.get(_GONE, False):
            await asyncio.shield(self._initiate_server_close())
            return
        table = table_of(self.context)
        table.became_idle(self, asyncio.get_running_loop().time())
        defences = defences_of(self.config)
        first = defences.first_request_timeout
        try:
            # Cancelled (idle_task.stop) as soon as a request starts.
            if first and not _has_started_a_request(self):
                wait, why = first, "no request within the deadline"
            else:
                wait, why = self.config.keep_alive_timeout, ""
            try:
                # Not asyncio.wait_for: on Python 3.11 it drops a cancellation
                # that comes as the wait completes (the server stops as a
                # request starts), and the drain ran while the request's read
                # task waited for this task to end.
                async with asyncio.timeout(wait):
                    await self.context.terminated.wait()
            except TimeoutError:
                if why:
                    log.info(f"connection closed: {why}", seconds=first)
                await asyncio.shield(self._initiate_server_close())
                return
            # The server is stopping and this connection is idle.
            if defences.before_shutdown_close is not None:
                await defences.before_shutdown_close(self)  # HTTP/2: the GOAWAY (ans.drain)
            await asyncio.shield(self._initiate_server_close())
        except asyncio.CancelledError:
            table.became_busy(self)  # a request started
            raise

    return close_or_keep_alive


def _handle_then_time(handle: Callable[..., Any]) -> Callable[..., Any]:
    async def handle_then_time(self: Any, event: Any) -> None:
        before = self.protocol
        await handle(self, event)
        if self.protocol is not before and isinstance(self.protocol, H2Protocol):
            if self.protocol.idle:  # no request yet: the idle timer runs again
                await self.send(Updated(idle=True))

    return handle_then_time


def install() -> None:
    patch(TCPServer, "_read_data", _read_until_gone)
    patch(TCPServer, "_idle_timeout", _close_or_keep_alive)
    patch(ProtocolWrapper, "handle", _handle_then_time)
