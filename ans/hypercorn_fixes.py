"""Fixes to hypercorn 0.18's connection handling, installed once per process
by :func:`install` (``ans serve`` calls it before serving). Each was found by
a black-box probe of the running server and has an integration test in
``tests/integration/test_integration_connections.py``.

**Request data after the response** (HTTP/2). ANS answers some bad requests
before it reads their body (a missing AGTP-Method, a duplicate or oversized
header, a body on GET, a body over the size limit). HTTP/2 allows that
(RFC 9113, section 8.1). hypercorn forgets a stream as soon as its response is
complete, and when the client then sends the rest of the body, it looks the
stream up, raises ``KeyError`` and drops the whole connection: every other
request in flight on it gets an empty 500, and the failed connection task
could keep the server from stopping on SIGTERM. Every event still goes to
hypercorn, one at a time, except DATA and END_STREAM for a stream it has
closed: those are dropped, the DATA's bytes go back to the connection's
flow-control window, and the client is asked to stop sending that body
(RST_STREAM NO_ERROR, as section 8.1 suggests).

**A connection the client has closed.** When the client closes its end,
hypercorn stops reading but keeps the socket until the keep-alive timer runs
out (``keep_alive_timeout``, 300 s by default for long-lived AGTP sessions),
so each connection a client opens and closes holds a file descriptor in
CLOSE-WAIT for minutes, and a client that churns connections can exhaust
them. Once reading has ended (end of stream, a read error or the read
timeout; hypercorn has then already closed the connection's streams), the
socket is closed at once instead of after the keep-alive wait.

**Too many streams on one connection** (HTTP/2). hypercorn never takes a
stream the client reset before its answer out of its priority tree, so after
1,000 of them (a rapid-reset flood, or a long-lived peer connection on which
many requests timed out and were cancelled) the next request raised
``TooManyStreamsError`` and killed the connection with a logged traceback.
The connection now ends with GOAWAY ENHANCE_YOUR_CALM instead; the client
reconnects with a fresh tree.

**Connections per client address.** hypercorn has no such cap, so one
address could hold connections until the process ran out of file
descriptors. With :func:`cap_connections_per_client` set on the hypercorn
config, a connection over the cap is closed as soon as it is accepted.

**Answers to a closed connection** (HTTP/2). When a connection closes,
hypercorn's sender stops, but a request still running goes on writing its
answer into the stream's buffer and then waits for the sender to drain it:
forever. Each such request held its task, its answer and so its whole
connection in memory (about 60-100 KB per connection whose client asked and
left without reading), and on shutdown the cancelled tasks waited the same
way, so one request whose body never came kept ``ans serve`` from stopping.
On close (and on cancellation, which is now turned into a close first) every
stream buffer is closed, so those writers return at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

import h2.errors
import h2.events
import h2.exceptions
from hypercorn.asyncio.tcp_server import TCPServer
from hypercorn.events import Closed
from hypercorn.protocol.h2 import H2Protocol
from priority.priority import TooManyStreamsError

_INSTALLED = "_ans_hypercorn_fixes"
_GONE = "_ans_client_gone"
_CALMED = "_ans_calmed"
F = TypeVar("F", bound=Callable[..., Any])


def install() -> None:
    """Install the fixes (idempotent)."""
    if getattr(H2Protocol._handle_events, _INSTALLED, False):
        return
    _guard_late_request_data()
    _close_when_the_client_has_gone()
    _release_answers_to_a_closed_connection()
    _calm_a_connection_with_too_many_streams()
    _count_connections_per_client()


def _mark(fn: F) -> F:
    setattr(fn, _INSTALLED, True)
    return fn


# -- request data after the response ------------------------------------------------------


def _guard_late_request_data() -> None:
    original = H2Protocol._handle_events

    async def handle_events(self: Any, events: list[h2.events.Event]) -> None:
        for event in events:
            if _after_response(self, event):
                await _drop(self, event)
            else:
                await original(self, [event])

    H2Protocol._handle_events = _mark(handle_events)  # type: ignore[method-assign]


def _after_response(proto: Any, event: h2.events.Event) -> bool:
    """Body data or end of body for a stream hypercorn has closed."""
    return (
        isinstance(event, (h2.events.DataReceived, h2.events.StreamEnded))
        and event.stream_id not in proto.streams
    )


async def _drop(proto: Any, event: h2.events.Event) -> None:
    if not isinstance(event, h2.events.DataReceived):
        return  # END_STREAM alone: nothing was held back
    stream_id = event.stream_id
    assert stream_id is not None
    proto.connection.acknowledge_received_data(event.flow_controlled_length or 0, stream_id)
    if event.stream_ended is None:
        try:
            proto.connection.reset_stream(stream_id, h2.errors.ErrorCodes.NO_ERROR)
        except (h2.exceptions.StreamClosedError, h2.exceptions.ProtocolError):
            pass  # already reset or closed: nothing more to ask
    await proto._flush()


# -- a connection the client has closed -----------------------------------------------------


def _close_when_the_client_has_gone() -> None:
    read_data = TCPServer._read_data
    idle_timeout = TCPServer._idle_timeout

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
            setattr(self, _GONE, True)
        # Restart the idle timer: with the client gone it closes at once.
        await self.idle_task.restart(self._task_group, self._idle_timeout)

    async def close_or_keep_alive(self: Any) -> None:
        if getattr(self, _GONE, False):
            await asyncio.shield(self._initiate_server_close())
        else:
            await idle_timeout(self)

    TCPServer._read_data = _mark(read_until_gone)  # type: ignore[method-assign]
    TCPServer._idle_timeout = _mark(close_or_keep_alive)  # type: ignore[method-assign]


# -- answers to a closed connection ----------------------------------------------------------


def _release_answers_to_a_closed_connection() -> None:
    handle = H2Protocol.handle

    async def handle_then_release(self: Any, event: Any) -> None:
        await handle(self, event)
        if isinstance(event, Closed):
            # hypercorn's sender has stopped: a response still being written
            # would wait for it forever (StreamBuffer.drain / push), holding
            # its request's task and so the whole connection in memory.
            for buffer in list(self.stream_buffers.values()):
                await buffer.close()

    H2Protocol.handle = _mark(handle_then_release)  # type: ignore[method-assign]


# -- too many streams on one connection ----------------------------------------------------


def _calm_a_connection_with_too_many_streams() -> None:
    create_stream = H2Protocol._create_stream

    async def create_or_calm(self: Any, request: h2.events.RequestReceived) -> None:
        try:
            await create_stream(self, request)
        except TooManyStreamsError:
            self.streams.pop(request.stream_id, None)
            self.stream_buffers.pop(request.stream_id, None)
            if getattr(self, _CALMED, False):
                return
            setattr(self, _CALMED, True)
            try:
                self.connection.close_connection(h2.errors.ErrorCodes.ENHANCE_YOUR_CALM)
            except h2.exceptions.ProtocolError:
                pass  # already closing
            await self._flush()
            await self.send(Closed())

    H2Protocol._create_stream = _mark(create_or_calm)  # type: ignore[method-assign]


# -- connections per client address -------------------------------------------------------

_CAP = "ans_max_connections_per_client"
_COUNTS = "_ans_connections_per_client"


def cap_connections_per_client(hc: Any, cap: int) -> None:
    """At most ``cap`` open connections per client address (0: no cap) for
    servers run with this hypercorn config."""
    setattr(hc, _CAP, cap)


def _count_connections_per_client() -> None:
    run = TCPServer.run

    async def run_capped(self: Any) -> None:
        cap = getattr(self.config, _CAP, 0)
        if not cap:
            await run(self)
            return
        peer = self.writer.get_extra_info("peername")
        client = str(peer[0]) if isinstance(peer, tuple) and peer else "?"
        counts: dict[str, int] = self.context.__dict__.setdefault(_COUNTS, {})
        if counts.get(client, 0) >= cap:
            self.writer.close()  # refused: hypercorn never sees it
            return
        counts[client] = counts.get(client, 0) + 1
        try:
            await run(self)
        finally:
            left = counts[client] - 1
            if left:
                counts[client] = left
            else:
                del counts[client]

    TCPServer.run = _mark(run_capped)  # type: ignore[method-assign]
