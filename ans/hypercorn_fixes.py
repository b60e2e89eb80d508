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

**Connections per client address, and in all.** hypercorn has no such
caps, so one address (or a few) could hold connections until the process
ran out of file descriptors; asyncio's accept loop then failed on every
connection, for every client of both listeners. With :func:`cap_connections`
set on the hypercorn config, a connection over the per-client cap is closed
as soon as it is accepted; at the cap in all, the connection idle the
longest is closed to make room (as nginx reuses keep-alive connections),
and only when none is idle is the new one refused. Clients are counted by
:func:`client_key`: an IPv6 client by its /64, as for the rate limit.

**Answers to a closed connection** (HTTP/2). When a connection closes,
hypercorn's sender stops, but a request still running goes on writing its
answer into the stream's buffer and then waits for the sender to drain it:
forever. Each such request held its task, its answer and so its whole
connection in memory (about 60-100 KB per connection whose client asked and
left without reading), and on shutdown the cancelled tasks waited the same
way, so one request whose body never came kept ``ans serve`` from stopping.
On close (and on cancellation, which is now turned into a close first) every
stream buffer is closed, so those writers return at once.

**A deadline for the first request.** hypercorn gives a new connection the
whole keep-alive timeout (300 s) to send its first request, so connections
that never ask anything (idle, or with a request line or header block sent
half) held a file descriptor each for minutes. With
:func:`deadline_for_first_request` set, a connection that has not started a
request within that many seconds of being accepted is closed. After its first
request, an idle connection lasts ``keep_alive_timeout`` as before. An
HTTP/2 connection with prior knowledge (h2c) had no timer at all until its
first request ended: hypercorn reads the HTTP/2 preface as an HTTP/1.1
request, stops the idle timer for it and hands over to HTTP/2 without
starting it again, so such a connection that never asked lasted for good.
The timer now starts again when HTTP/2 takes over an idle connection.

**Control-frame floods** (HTTP/2). h2 answers every PING and handles every
SETTINGS, PRIORITY, RST_STREAM, WINDOW_UPDATE, unknown frame and empty DATA
frame, however many a client sends (some, on a closed stream, inside h2
without an event), so one connection flooding them (CVE-2019-9512 and -9518
in other servers) took the CPU from every other client. Each connection now
has a budget of such frames, counted by :class:`FrameCounter` in the bytes
the client sends, before h2 parses them: ``CONTROL_BURST`` at first,
``CONTROL_RATE`` more per second, ``CONTROL_PER_ANSWER`` more per answer
sent (for clients that send a PRIORITY frame or a reset per request) and one
more per KB sent (for the WINDOW_UPDATEs that acknowledge what the client
read). A connection over its budget ends with GOAWAY ENHANCE_YOUR_CALM. The
bytes go to h2 in pieces of ``READ_PIECE``, so the budget is checked before
h2 has parsed (and answered) a whole 64 KB read of PINGs; and the warning for
an ended connection is logged at most once a second with a count, since a
logger blocked on a slow output would otherwise stall the server.

**Rapid reset** (HTTP/2, CVE-2023-44487). A request the client resets in the
same read as it began is never started: no task, no entry in the priority
tree. hypercorn started each one, so a client that opened and reset streams
as fast as it could write took the CPU and about 160 MB of memory, and a
SIGTERM in the middle made hypercorn reset an already reset stream: h2
raised, and ``ans serve`` exited with status 1 and a traceback. Resets count
against the control-frame budget too, and earn nothing, so a flood of them
ends its connection after ``CONTROL_BURST``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import h2.errors
import h2.events
import h2.exceptions
import structlog
from hypercorn.asyncio.tcp_server import TCPServer
from hypercorn.events import Closed, RawData, Updated
from hypercorn.protocol import ProtocolWrapper
from hypercorn.protocol.events import Body, EndBody
from hypercorn.protocol.h2 import H2Protocol
from priority.priority import MissingStreamError, TooManyStreamsError

from ans.governance.ratelimit import address_key, client_ip

log = structlog.get_logger("ans.http")

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
    _budget_control_frames()
    _time_a_connection_handed_to_http2()


def _mark(fn: F) -> F:
    setattr(fn, _INSTALLED, True)
    return fn


# -- request data after the response ------------------------------------------------------


def _guard_late_request_data() -> None:
    original = H2Protocol._handle_events

    async def handle_events(self: Any, events: list[h2.events.Event]) -> None:
        # A request reset in the same read as it began is never started: no
        # task, no priority-tree entry (rapid reset costs parsing only).
        reset = {e.stream_id for e in events if isinstance(e, h2.events.StreamReset)}
        handed = False
        for event in events:
            if reset and _started_and_reset(event, reset):
                continue
            if _after_response(self, event):
                await _drop(self, event)
            else:
                await original(self, [event])  # which flushes what h2 has queued
                handed = True
        if not handed:
            # h2 answers some frames itself, with no event: DATA on a stream
            # closed by END_STREAM gets RST_STREAM STREAM_CLOSED (h2spec
            # http2/5.1/11). hypercorn flushes that at the end of every batch,
            # even an empty one; so must we, or it waits in the buffer.
            await self._flush()

    H2Protocol._handle_events = _mark(handle_events)  # type: ignore[method-assign]


def _started_and_reset(event: h2.events.Event, reset: set[int]) -> bool:
    return (
        isinstance(event, (h2.events.RequestReceived, h2.events.PriorityUpdated))
        and event.stream_id in reset
    )


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
            return
        live: dict[Any, float | None] | None = self.context.__dict__.get(_LIVE)
        if live is not None and self in live:
            live[self] = asyncio.get_running_loop().time()  # idle from now: may be evicted
        try:
            # Cancelled (idle_task.stop) as soon as a request starts.
            first = getattr(self.config, _FIRST_REQUEST, 0)
            if first and not _has_started_a_request(self):
                try:
                    await asyncio.wait_for(self.context.terminated.wait(), first)
                except TimeoutError:
                    log.info("connection closed: no request within the deadline", seconds=first)
                    await asyncio.shield(self._initiate_server_close())
                    return
            else:
                try:
                    await asyncio.wait_for(
                        self.context.terminated.wait(), self.config.keep_alive_timeout
                    )
                except TimeoutError:
                    await asyncio.shield(self._initiate_server_close())
                    return
            # The server is stopping and this connection is idle.
            finish: Callable[[Any], Awaitable[None]] | None = getattr(
                self.config, _BEFORE_SHUTDOWN_CLOSE, None
            )
            if finish is not None:
                await finish(self)  # e.g. HTTP/2: the GOAWAY (ans.drain)
            await asyncio.shield(self._initiate_server_close())
        except asyncio.CancelledError:
            if live is not None and self in live:
                live[self] = None  # a request started: busy
            raise

    TCPServer._read_data = _mark(read_until_gone)  # type: ignore[method-assign]
    TCPServer._idle_timeout = _mark(close_or_keep_alive)  # type: ignore[method-assign]


_FIRST_REQUEST = "ans_first_request_timeout"
_BEFORE_SHUTDOWN_CLOSE = "ans_before_shutdown_close"


def before_shutdown_close(hc: Any, finish: Callable[[Any], Awaitable[None]]) -> None:
    """Await ``finish(tcp_server)`` before closing a connection that is idle
    when the server stops, for servers run with this hypercorn config. A
    request starting meanwhile cancels it; it runs again at the next idle."""
    setattr(hc, _BEFORE_SHUTDOWN_CLOSE, finish)


def deadline_for_first_request(hc: Any, seconds: float) -> None:
    """Close a connection that has not started a request within ``seconds``
    of being accepted (0: no deadline but the keep-alive timeout), for
    servers run with this hypercorn config."""
    setattr(hc, _FIRST_REQUEST, seconds)


def _has_started_a_request(server: Any) -> bool:
    wrapper = getattr(server, "protocol", None)
    protocol = getattr(wrapper, "protocol", None)
    return bool(getattr(protocol, "keep_alive_requests", 1))


def _time_a_connection_handed_to_http2() -> None:
    handle = ProtocolWrapper.handle

    async def handle_then_time(self: Any, event: Any) -> None:
        before = self.protocol
        await handle(self, event)
        if self.protocol is not before and isinstance(self.protocol, H2Protocol):
            if self.protocol.idle:  # no request yet: the idle timer runs again
                await self.send(Updated(idle=True))

    ProtocolWrapper.handle = _mark(handle_then_time)  # type: ignore[method-assign]


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
            await _calm(self, "too many streams reset before their answers")

    H2Protocol._create_stream = _mark(create_or_calm)  # type: ignore[method-assign]


# A flood ends many connections: one log line per CALM_LOG_EVERY seconds at
# most, with the number of connections ended since the last line.
CALM_LOG_EVERY = 1.0
_calm_log = {"at": float("-inf"), "unlogged": 0}


def _log_calm(reason: str, client: str | None) -> None:
    now = asyncio.get_running_loop().time()
    if now - _calm_log["at"] < CALM_LOG_EVERY:
        _calm_log["unlogged"] += 1
        return
    log.warning(
        "http2 connection ended: enhance your calm",
        reason=reason,
        client=client,
        also_ended_since_last_line=_calm_log["unlogged"],
    )
    _calm_log["at"], _calm_log["unlogged"] = now, 0


async def _calm(proto: Any, reason: str) -> None:
    """End the connection with GOAWAY ENHANCE_YOUR_CALM (once)."""
    if getattr(proto, _CALMED, False):
        return
    setattr(proto, _CALMED, True)
    _log_calm(reason, proto.client[0] if isinstance(proto.client, tuple) and proto.client else None)
    try:
        proto.connection.close_connection(h2.errors.ErrorCodes.ENHANCE_YOUR_CALM)
    except h2.exceptions.ProtocolError:
        pass  # already closing
    await proto._flush()
    await proto.send(Closed())


# -- connections per client address -------------------------------------------------------

_CAP = "ans_max_connections_per_client"
_TOTAL_CAP = "ans_max_connections"
_COUNTS = "_ans_connections_per_client"
_LIVE = "_ans_connections"  # every open connection: when it became idle, or None
_CLOSING: set[asyncio.Future[None]] = set()


def cap_connections(hc: Any, per_client: int, total: int) -> None:
    """At most ``per_client`` open connections per client (its IPv4 address
    or IPv6 /64, as for the rate limit) and ``total`` in all (0: no cap), for
    servers run with this hypercorn config."""
    setattr(hc, _CAP, per_client)
    setattr(hc, _TOTAL_CAP, total)


def client_key(host: str) -> str:
    """What connections are counted under: the IPv4 address (an IPv4-mapped
    IPv6 one too) or the IPv6 /64, since one host usually holds a whole /64;
    anything else as it is."""
    ip = client_ip(host)
    return host if ip is None else address_key(ip)


def _evict_the_longest_idle(live: dict[Any, float | None]) -> bool:
    """Make room by closing the connection idle the longest (as nginx reuses
    keep-alive connections when it runs out): idle connections are cheap to
    hold and cheap to reopen, so a full server is never full of them."""
    idle = [(since, id(server), server) for server, since in live.items() if since is not None]
    if not idle:
        return False
    _, _, victim = min(idle)
    del live[victim]  # no longer counted; it goes as the keep-alive timeout would take it
    closing = asyncio.ensure_future(victim._initiate_server_close())
    _CLOSING.add(closing)  # a task nobody holds may be collected before it runs
    closing.add_done_callback(_CLOSING.discard)
    return True


def _count_connections_per_client() -> None:
    run = TCPServer.run

    async def run_capped(self: Any) -> None:
        cap = getattr(self.config, _CAP, 0)
        total_cap = getattr(self.config, _TOTAL_CAP, 0)
        if not cap and not total_cap:
            await run(self)
            return
        peer = self.writer.get_extra_info("peername")
        client = client_key(str(peer[0])) if isinstance(peer, tuple) and peer else "?"
        state = self.context.__dict__
        counts: dict[str, int] = state.setdefault(_COUNTS, {})
        live: dict[Any, float | None] = state.setdefault(_LIVE, {})
        if (cap and counts.get(client, 0) >= cap) or (
            total_cap and len(live) >= total_cap and not _evict_the_longest_idle(live)
        ):
            self.writer.close()  # refused: hypercorn never sees it
            return
        counts[client] = counts.get(client, 0) + 1
        live[self] = None
        try:
            await run(self)
        finally:
            live.pop(self, None)
            left = counts[client] - 1
            if left:
                counts[client] = left
            else:
                del counts[client]

    TCPServer.run = _mark(run_capped)  # type: ignore[method-assign]


# -- control-frame floods -----------------------------------------------------------------

CONTROL_BURST = 200.0
CONTROL_RATE = 20.0  # per second
CONTROL_PER_ANSWER = 2.0  # for clients that send a PRIORITY frame (or a reset) per request
# A client acknowledges what it reads with WINDOW_UPDATE frames (stream and
# connection), in practice one per half window of 4 KB or more: every 1 KB
# the server sends earns one more frame.
CONTROL_PER_BYTE_SENT = 1 / 1024
SMALL_DATA = 32  # a DATA frame carrying less than this, END_STREAM unset, is a control frame
READ_PIECE = 4096  # bytes handed to h2 at a time, so the budget is checked often
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_DATA, _HEADERS, _CONTINUATION = 0x0, 0x1, 0x9
_END_STREAM, _PADDED = 0x1, 0x8
_CONTROL_TYPES = frozenset({0x2, 0x3, 0x4, 0x6, 0x7, 0x8})  # PRIORITY RST SETTINGS PING GOAWAY WU
_BUDGET = "_ans_control_budget"
_COUNTER = "_ans_frame_counter"
_SENT = "_ans_bytes_sent"
_ANSWERED = "_ans_answers_sent"


class FrameCounter:
    """Counts, in the bytes a client sends on an HTTP/2 connection, the frames
    that make the server work without asking it anything: PRIORITY,
    RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE, frames of unknown
    types, and DATA frames that carry (almost) nothing and do not end their
    stream. Sans-IO; fed the connection's bytes in order, from the client
    preface on. Counting the bytes rather than h2's events also counts the
    frames h2 handles without an event (a frame on a closed stream)."""

    __slots__ = ("_head", "_pad_of", "_preface", "_skip")

    def __init__(self) -> None:
        self._preface = len(PREFACE)  # preface bytes still to pass over
        self._head = b""  # a frame header cut by the end of a piece
        self._skip = 0  # payload bytes of the current frame still to pass over
        self._pad_of: tuple[int, int] | None = None  # (length, flags) of a padded DATA

    def feed(self, data: bytes) -> int:
        """The number of control frames whose header is in ``data``."""
        count, i, n = 0, 0, len(data)
        if self._preface:
            i = min(self._preface, n)
            self._preface -= i
        while i < n:
            if self._pad_of is not None:  # the pad length is the payload's first byte
                length, flags = self._pad_of
                self._pad_of = None
                count += length - 1 - data[i] < SMALL_DATA and not flags & _END_STREAM
            if self._skip:
                step = min(self._skip, n - i)
                i += step
                self._skip -= step
                continue
            need = 9 - len(self._head)
            self._head += data[i : i + need]
            i += need
            if len(self._head) < 9:
                break
            head, self._head = self._head, b""
            length, kind, flags = int.from_bytes(head[:3], "big"), head[3], head[4]
            self._skip = length
            if kind == _DATA:
                if flags & _PADDED and length:
                    self._pad_of = (length, flags)
                else:
                    count += length < SMALL_DATA and not flags & _END_STREAM
            elif kind in _CONTROL_TYPES or kind > _CONTINUATION:
                count += 1
        return count


def _charge(proto: Any, frames: int) -> bool:
    """Take ``frames`` from the connection's budget, after adding what it
    earned since the last charge; False when the budget is overdrawn."""
    now = asyncio.get_running_loop().time()
    tokens, since = getattr(proto, _BUDGET, (CONTROL_BURST, now))
    earned = (
        (now - since) * CONTROL_RATE
        + getattr(proto, _SENT, 0) * CONTROL_PER_BYTE_SENT
        + getattr(proto, _ANSWERED, 0) * CONTROL_PER_ANSWER
    )
    setattr(proto, _SENT, 0)
    setattr(proto, _ANSWERED, 0)
    tokens = min(CONTROL_BURST, tokens + earned) - frames
    setattr(proto, _BUDGET, (tokens, now))
    return tokens >= 0.0


WRITE_TIMEOUT = 30.0  # s an answer may wait for the client to read it (as on the native listener)
_WRITE_TIMEOUT = "ans_write_timeout"


def deadline_for_answers(hc: Any, seconds: float) -> None:
    """Reset (RST_STREAM CANCEL) an answer the client has not let through
    within ``seconds``, for servers run with this hypercorn config."""
    setattr(hc, _WRITE_TIMEOUT, seconds)


async def _give_up_answer(proto: Any, stream_id: int) -> None:
    log.debug("http2 answer not read in time; stream reset", stream_id=stream_id)
    try:
        proto.connection.reset_stream(stream_id, h2.errors.ErrorCodes.CANCEL)
    except (h2.exceptions.StreamClosedError, h2.exceptions.ProtocolError):
        pass  # already closed
    buffer = proto.stream_buffers.pop(stream_id, None)
    if buffer is not None:
        await buffer.close()
    try:
        proto.priority.remove_stream(stream_id)
    except MissingStreamError:
        pass
    await proto._flush()
    await proto._close_stream(stream_id)


def _budget_control_frames() -> None:
    handle = H2Protocol.handle
    stream_send = H2Protocol.stream_send

    async def handle_within_budget(self: Any, event: Any) -> None:
        # In pieces: h2 parses (and answers every PING in) all it is given at
        # once, so a 64 KB read of PINGs would be answered before any check.
        if not isinstance(event, RawData):
            await handle(self, event)
            return
        counter = getattr(self, _COUNTER, None)
        if counter is None:
            counter = FrameCounter()
            setattr(self, _COUNTER, counter)
        data = memoryview(event.data)
        for start in range(0, len(data), READ_PIECE):
            if getattr(self, _CALMED, False) or self.closed:
                return
            piece = bytes(data[start : start + READ_PIECE])
            if not _charge(self, counter.feed(piece)):
                await _calm(self, "control-frame flood (PING, SETTINGS, RST_STREAM, ...)")
                return
            await handle(self, RawData(data=piece))

    async def send_counting_answers(self: Any, event: Any) -> None:
        if isinstance(event, EndBody):
            setattr(self, _ANSWERED, getattr(self, _ANSWERED, 0) + 1)
        if not isinstance(event, (Body, EndBody)):
            await stream_send(self, event)
            return
        # An answer waits for the client's flow-control window; a client that
        # never opens it must not hold the answer (and its task) for good.
        try:
            async with asyncio.timeout(getattr(self.config, _WRITE_TIMEOUT, WRITE_TIMEOUT)):
                await stream_send(self, event)
        except TimeoutError:
            await _give_up_answer(self, event.stream_id)

    async def flush_counting(self: Any) -> None:
        # hypercorn's _flush, counting the bytes sent for the budget
        data = self.connection.data_to_send()
        if data:
            setattr(self, _SENT, getattr(self, _SENT, 0) + len(data))
            await self.send(RawData(data=data))

    H2Protocol.handle = _mark(handle_within_budget)  # type: ignore[method-assign]
    H2Protocol.stream_send = _mark(send_counting_answers)  # type: ignore[method-assign]
    H2Protocol._flush = _mark(flush_counting)  # type: ignore[method-assign]
