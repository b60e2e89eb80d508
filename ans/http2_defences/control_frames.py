"""The control-frame budget of an HTTP/2 connection, and GOAWAY
ENHANCE_YOUR_CALM for a connection that overdraws it or piles up streams.

**Control-frame floods** (CVE-2019-9512, -9515, -9518 in other servers). h2
answers every PING and handles every SETTINGS, PRIORITY, RST_STREAM,
WINDOW_UPDATE, unknown frame and empty DATA frame, however many a client
sends (some, on a closed stream, inside h2 without an event), so one
connection flooding them took the CPU from every other client. Each
connection has a :class:`ControlBudget`, charged with the frames
:class:`FrameCounter` finds in the bytes the client sends, before h2 parses
them: ``CONTROL_BURST`` at first, ``CONTROL_RATE`` more per second,
``CONTROL_PER_ANSWER`` per answer sent (for clients that send a PRIORITY
frame or a reset per request) and one per KB of answers sent (for the
WINDOW_UPDATEs that acknowledge them). Over budget, the connection ends with
GOAWAY ENHANCE_YOUR_CALM. The bytes go to h2 in pieces of ``READ_PIECE`` so
the budget is checked before h2 has answered a whole 64 KB read of PINGs.
Resets count too and earn nothing, so a rapid-reset flood (CVE-2023-44487)
ends its connection after ``CONTROL_BURST``.

**Too many streams.** hypercorn never takes a stream the client reset before
its answer out of its priority tree; after 1,000 the next request raised
``TooManyStreamsError`` and killed the connection with a traceback. It now
ends with GOAWAY ENHANCE_YOUR_CALM, and the client reconnects.

**A request whose :method or :path is not ASCII** (RFC 9113 8.3.1: a
request-target is ASCII; such a request is malformed) made hypercorn raise
while it built the stream and dropped the whole connection, with every
request in flight on it, and the traceback logged the client's first bytes
(request bodies included). Such a stream is now reset (PROTOCOL_ERROR, RFC
9113 8.1.1) before hypercorn sees it; the connection and its other streams go
on, and the log line names the header only.

A flood ends many connections: :class:`CalmLog` writes one line a second at
most, with a count, since a logger blocked on a slow output stalls the server.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import h2.errors
import h2.events
import h2.exceptions
import structlog
from hypercorn.events import Closed, RawData
from hypercorn.protocol.h2 import H2Protocol
from priority.priority import TooManyStreamsError

from .hooks import patch

log = structlog.get_logger("ans.http")

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
_DATA, _CONTINUATION = 0x0, 0x9
_END_STREAM, _PADDED = 0x1, 0x8
_CONTROL_TYPES = frozenset({0x2, 0x3, 0x4, 0x6, 0x7, 0x8})  # PRIORITY RST SETTINGS PING GOAWAY WU


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


@dataclass
class ControlBudget:
    """A token bucket of control frames; ``sent`` and ``answered`` are what
    the connection sent since the last charge (they earn more)."""

    tokens: float = CONTROL_BURST
    since: float | None = None
    sent: int = 0  # bytes of answers
    answered: int = 0

    def charge(self, frames: int, now: float) -> bool:
        """Take ``frames``, after adding what was earned since the last
        charge; False when the budget is overdrawn."""
        since = now if self.since is None else self.since
        earned = (
            (now - since) * CONTROL_RATE
            + self.sent * CONTROL_PER_BYTE_SENT
            + self.answered * CONTROL_PER_ANSWER
        )
        self.sent = self.answered = 0
        self.tokens = min(CONTROL_BURST, self.tokens + earned) - frames
        self.since = now
        return self.tokens >= 0.0


@dataclass
class ConnectionState:
    """What the defences keep for one HTTP/2 connection (H2Protocol)."""

    counter: FrameCounter = field(default_factory=FrameCounter)
    budget: ControlBudget = field(default_factory=ControlBudget)
    calmed: bool = False
    pending: dict[int, int] = field(default_factory=dict)  # answer bytes not yet sent, by stream


_STATE = "ans_http2_state"


def state_of(proto: Any) -> ConnectionState:
    state: ConnectionState | None = proto.__dict__.get(_STATE)
    if state is None:
        state = proto.__dict__[_STATE] = ConnectionState()
    return state


CALM_LOG_EVERY = 1.0  # s between two log lines about ended connections, at most


class CalmLog:
    """One warning per ``every`` seconds at most, with the number of
    connections ended since the last one."""

    def __init__(self, every: float = CALM_LOG_EVERY) -> None:
        self.every = every
        self.at = float("-inf")
        self.unlogged = 0

    def note(self, reason: str, client: str | None, now: float) -> None:
        if now - self.at < self.every:
            self.unlogged += 1
            return
        log.warning(
            "http2 connection ended: enhance your calm",
            reason=reason,
            client=client,
            also_ended_since_last_line=self.unlogged,
        )
        self.at, self.unlogged = now, 0


CALM_LOG = CalmLog()


async def calm(proto: Any, reason: str) -> None:
    """End the connection with GOAWAY ENHANCE_YOUR_CALM (once)."""
    state = state_of(proto)
    if state.calmed:
        return
    state.calmed = True
    client = proto.client[0] if isinstance(proto.client, tuple) and proto.client else None
    CALM_LOG.note(reason, client, asyncio.get_running_loop().time())
    try:
        proto.connection.close_connection(h2.errors.ErrorCodes.ENHANCE_YOUR_CALM)
    except h2.exceptions.ProtocolError:
        pass  # already closing
    await proto._flush()
    await proto.send(Closed())


def _handle_within_budget(handle: Callable[..., Any]) -> Callable[..., Any]:
    async def handle_within_budget(self: Any, event: Any) -> None:
        # In pieces: h2 parses (and answers every PING in) all it is given at
        # once, so a 64 KB read of PINGs would be answered before any check.
        if not isinstance(event, RawData):
            await handle(self, event)
            return
        state = state_of(self)
        data = memoryview(event.data)
        for start in range(0, len(data), READ_PIECE):
            if state.calmed or self.closed:
                return
            piece = bytes(data[start : start + READ_PIECE])
            now = asyncio.get_running_loop().time()
            if not state.budget.charge(state.counter.feed(piece), now):
                await calm(self, "control-frame flood (PING, SETTINGS, RST_STREAM, ...)")
                return
            await handle(self, RawData(data=piece))

    return handle_within_budget


_ASCII_ONLY = (b":method", b":path")


def malformed_pseudo_header(headers: Any) -> str | None:
    """The first of ``:method`` and ``:path`` whose value is not ASCII, if any."""
    for name, value in headers or ():
        if name in _ASCII_ONLY and isinstance(value, bytes) and not value.isascii():
            return str(name.decode("ascii"))
    return None


def _create_or_calm(create_stream: Callable[..., Any]) -> Callable[..., Any]:
    async def create_or_calm(self: Any, request: h2.events.RequestReceived) -> None:
        bad = malformed_pseudo_header(request.headers)
        if bad is not None:
            log.warning("http2 stream reset: pseudo-header not ASCII", header=bad)
            self.connection.reset_stream(
                request.stream_id, error_code=h2.errors.ErrorCodes.PROTOCOL_ERROR
            )
            await self._flush()
            return
        try:
            await create_stream(self, request)
        except TooManyStreamsError:
            self.streams.pop(request.stream_id, None)
            self.stream_buffers.pop(request.stream_id, None)
            await calm(self, "too many streams reset before their answers")

    return create_or_calm


def install_budget() -> None:
    patch(H2Protocol, "handle", _handle_within_budget)


def install_stream_cap() -> None:
    patch(H2Protocol, "_create_stream", _create_or_calm)
