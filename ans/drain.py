"""Graceful shutdown of the HTTP/2 listener: what each connection does once
``ans serve`` has been asked to stop (SIGTERM, SIGINT). Installed by
:func:`install` (``ans serve`` calls it after :func:`ans.http2_defences.install`;
the drain runs for servers whose ``Http2Defences.before_shutdown_close`` is
:func:`finish_http2`).

hypercorn 0.18 stops accepting, then closes every connection that is idle at
that moment, without a GOAWAY: requests the client had already sent but the
server had not yet read were lost, and the client could not tell that they
had not been processed. It also reset every request read after the stop
began, even on a connection whose earlier requests it was still answering.

Now, once the server is stopping, an HTTP/2 connection

1. goes on reading and answering every request, as before the stop;
2. when it has nothing in progress, sends a PING and waits (up to
   :data:`ACK_WAIT`) for its ACK: the client sent its ACK after every request
   it had sent before it read the PING, so all of those have then been read
   (and answered, when the connection is idle again). A request that starts
   meanwhile cancels the wait (hypercorn stops the idle timer it runs in);
   the drain begins again when the connection is next idle;
3. once the ACK has come (or the client has not sent it in time) and nothing
   the client sent is on its way to hypercorn (:func:`read_path_busy`),
   sends GOAWAY NO_ERROR with the highest stream id it has started, and
   closes. A request read after that is refused (RST_STREAM REFUSED_STREAM);
   its stream id is above the GOAWAY's, so the client knows it was not
   processed and may send it elsewhere.

The GOAWAY comes last, once every answer is out: the ``h2`` library (httpx,
and the federation transport of ANS) fails every stream still open on a
connection as soon as it receives a GOAWAY, even those the GOAWAY lets
complete. The whole drain is bounded by ``graceful_timeout``: hypercorn then
cancels what is left. HTTP/1.1 connections keep hypercorn's own behaviour.

The drain runs in the connection's idle timer, and the connection's read task
waits for that task to end when a request starts (``idle_task.stop()``): a
drain that ignored its cancellation held every request of the batch being
read until it had sent its GOAWAY, and the rest of the batch then hit a
closed h2 connection (``ProtocolError`` in hypercorn's task group). So the
drain waits with ``asyncio.timeout``, never ``asyncio.wait_for`` (which on
Python 3.11 drops a cancellation that comes as the awaited event is set), and
checks, each time it wakes, that it has not been asked to stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from typing import Any

import h2.errors
import h2.events
import h2.exceptions
from hypercorn.events import RawData
from hypercorn.protocol.h2 import H2Protocol
from hyperframe.frame import GoAwayFrame

from .http2_defences import install as install_defences
from .http2_defences.hooks import installed, patch

ACK_WAIT = 1.0  # s: a client that does not read (an idle pooled connection) acknowledges nothing
UNREAD_RECHECK = 0.05  # s: past ACK_WAIT, how often a connection with unread bytes is looked at
# s: the most the wait is extended for unread bytes (a connection whose reader
# has stopped would otherwise hold the drain until graceful_timeout)
UNREAD_MAX = 5.0
PING_TOKEN = b"ans-stop"


class ConnectionContext:
    """hypercorn's worker context as one HTTP/2 connection sees it:
    ``terminated`` is set once this connection has sent its GOAWAY, not when
    the server begins to stop, so hypercorn goes on serving the connection
    until then and refuses new streams after it."""

    def __init__(self, worker: Any) -> None:
        self.worker = worker
        self.terminated = worker.event_class()
        self.pinged = False
        self.acked = asyncio.Event()
        # The highest stream id whose request hypercorn has taken (a batch of
        # events h2 has parsed may still be on its way to it).
        self.started = 0
        # The GOAWAY's last stream id, once decided: requests above it are refused.
        self.goaway_last: int | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.worker, name)


def install() -> None:
    """Install the drain (idempotent), and the HTTP/2 defences it needs."""
    install_defences()
    if installed(H2Protocol, "__init__"):
        return

    def own_context(init: Any) -> Any:
        def init_with_own_context(self: Any, app: Any, config: Any, context: Any, *a: Any) -> None:
            init(self, app, config, ConnectionContext(context), *a)

        return init_with_own_context

    def noting_the_start(create_stream: Any) -> Any:
        async def create_stream_noting_the_start(self: Any, request: Any) -> None:
            ctx = self.context
            if isinstance(ctx, ConnectionContext) and request.stream_id > ctx.started:
                ctx.started = request.stream_id
            await create_stream(self, request)

        return create_stream_noting_the_start

    def noting_the_ack(handle_events: Any) -> Any:
        async def handle_events_noting_the_ack(self: Any, events: list[h2.events.Event]) -> None:
            ctx = self.context
            if isinstance(ctx, ConnectionContext) and ctx.goaway_last is not None:
                events = refuse_after_goaway(self, ctx.goaway_last, events)
            await handle_events(self, events)
            # After the batch: the requests read with the ACK have been started.
            if isinstance(ctx, ConnectionContext):
                for e in events:
                    if isinstance(e, h2.events.RequestReceived) and e.stream_id > ctx.started:
                        ctx.started = e.stream_id
            if isinstance(ctx, ConnectionContext) and ctx.pinged and any(
                isinstance(e, h2.events.PingAckReceived) and e.ping_data == PING_TOKEN
                for e in events
            ):
                ctx.acked.set()

        return handle_events_noting_the_ack

    patch(H2Protocol, "__init__", own_context)
    patch(H2Protocol, "_create_stream", noting_the_start)
    patch(H2Protocol, "_handle_events", noting_the_ack)


def refuse_after_goaway(
    proto: Any, last: int, events: list[h2.events.Event]
) -> list[h2.events.Event]:
    """The events left once every request above ``last`` (the GOAWAY's last
    stream id) is refused with RST_STREAM REFUSED_STREAM: never started, and
    the client knows it may send it again elsewhere. hypercorn would reset
    it NO_ERROR and shrink MAX_CONCURRENT_STREAMS once per request."""
    refused: set[int] = set()
    kept: list[h2.events.Event] = []
    for event in events:
        sid = getattr(event, "stream_id", None)
        if isinstance(event, h2.events.RequestReceived) and event.stream_id > last:
            refused.add(event.stream_id)
            with contextlib.suppress(h2.exceptions.ProtocolError):  # already reset or closed
                proto.connection.reset_stream(event.stream_id, h2.errors.ErrorCodes.REFUSED_STREAM)
        elif sid not in refused:
            kept.append(event)
        elif isinstance(event, h2.events.DataReceived):  # its bytes go back to the window
            with contextlib.suppress(h2.exceptions.ProtocolError):
                proto.connection.acknowledge_received_data(event.flow_controlled_length or 0, sid)
    return kept


def has_unread_bytes(server: Any) -> bool:
    """Bytes the client sent that the connection has not handled yet: in the
    stream reader's buffer, or still in the socket (peeked, not taken)."""
    reader = getattr(server, "reader", None)
    if reader is not None and len(getattr(reader, "_buffer", b"")):
        return True
    writer = getattr(server, "writer", None)
    sock = writer.get_extra_info("socket") if writer is not None else None
    if sock is None:
        return False
    try:
        # asyncio hands out a TransportSocket (no recv): peek through a duplicate of its fd
        with socket.fromfd(sock.fileno(), sock.family, sock.type) as dup:
            return bool(dup.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT))
    except OSError:  # nothing to read (BlockingIOError), or the socket is gone
        return False


def read_task_waiting(server: Any) -> bool:
    """Whether the connection's read task is waiting for bytes, so holds none
    it has read and not yet handed to h2 and hypercorn (between the reader
    and hypercorn a read goes through a task of ``asyncio.wait_for`` and the
    pieces the control-frame budget feeds h2, with awaits in between).
    Without an asyncio StreamReader (hypercorn's TCPServer always has one) it
    counts as waiting: the other checks of :func:`read_path_busy` decide."""
    reader = getattr(server, "reader", None)
    if not isinstance(reader, asyncio.StreamReader) or reader.at_eof():
        return True
    waiter = getattr(reader, "_waiter", None)  # set while read() waits for data
    return waiter is not None and not waiter.done()


def read_path_busy(server: Any, proto: Any, ctx: ConnectionContext) -> bool:
    """Whether something the client sent is on its way from the socket to
    hypercorn: in the socket or the stream reader (:func:`has_unread_bytes`),
    held by the read task (:func:`read_task_waiting`), or parsed by h2 and not
    yet taken by hypercorn (the rest of a batch)."""
    return (
        proto.connection.highest_inbound_stream_id > ctx.started
        or not read_task_waiting(server)
        or has_unread_bytes(server)
    )


def _stop_if_cancelled() -> None:
    """Raise CancelledError if this task has been asked to stop, even if an
    await swallowed the request: a request started (hypercorn stops the idle
    timer the drain runs in, and its read task waits for the drain to end)."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


async def finish_http2(server: Any) -> None:
    """For an idle connection of a stopping server (hypercorn's TCPServer):
    PING, wait for the ACK, then GOAWAY with the last stream started. A
    request read meanwhile cancels this (the connection is busy again); it
    runs again when the connection is next idle."""
    proto = getattr(getattr(server, "protocol", None), "protocol", None)
    if not isinstance(proto, H2Protocol) or proto.closed:
        return
    ctx = proto.context
    if not isinstance(ctx, ConnectionContext):
        return  # install() not called in this process: hypercorn's own close
    if not ctx.pinged:
        ctx.pinged = True
        proto.connection.ping(PING_TOKEN)
        await proto._flush()
    loop = asyncio.get_running_loop()
    ack_by = loop.time() + ACK_WAIT
    give_up = ack_by + UNREAD_MAX
    while True:
        _stop_if_cancelled()
        now = loop.time()
        if not ctx.acked.is_set() and now < ack_by:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(ack_by - now):  # not wait_for: see the module
                    await ctx.acked.wait()
            continue
        # The ACK, or none in time (a busy server may not have read what the
        # client sent before the stop: its requests, the ACK itself). Idle
        # once nothing is on its way to hypercorn, for UNREAD_MAX at most; a
        # request in progress cancels this, or graceful_timeout ends it.
        if proto.idle and (now >= give_up or not read_path_busy(server, proto, ctx)):
            break
        await asyncio.sleep(UNREAD_RECHECK)
    # Decided with no await in between: the GOAWAY names the last request
    # started, and every request read from now on is refused above it.
    ctx.goaway_last = last = ctx.started
    await ctx.terminated.set()  # hypercorn starts no new stream from now on
    await proto._flush()
    # A raw frame: h2's close_connection() would turn every frame the client
    # still sends (a WINDOW_UPDATE for the last answer) into a second GOAWAY,
    # PROTOCOL_ERROR.
    goaway = GoAwayFrame(0, last_stream_id=last, error_code=0)
    await proto.send(RawData(data=goaway.serialize()))
