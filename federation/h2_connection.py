"""One client HTTP/2 connection of :class:`~.h2transport.H2PeerTransport`: an
``asyncio.Protocol`` driving the sans-IO ``h2`` library, with many concurrent
streams (never more than the server's SETTINGS_MAX_CONCURRENT_STREAMS; further
requests wait for a free one), flow control of request bodies, answers bounded
by ``max_response_bytes`` (the stream is reset with CANCEL, the connection
kept), and the requests a GOAWAY or a lost connection left unanswered marked
for a retry (:class:`Retry`). Which connection a request uses, and when one
is opened or closed, is the transport's business.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings

from .transport import (
    PeerBadResponse,
    PeerError,
    PeerReply,
    PeerUnreachable,
)

WINDOW = 16 * 1024 * 1024  # receive window, connection and stream
# Streams open before the server's SETTINGS arrive. RFC 9113 5.1.2 would allow
# 100, but hypercorn enforces its own limit from its first frame, and h2 makes
# a stream over it a connection error that kills every stream: so one, and the
# others wait the one round trip the server's preface takes.
FIRST_STREAMS = 1
MAX_STREAMS = 256  # per connection, whatever the server allows

_H2_CONFIG = h2.config.H2Configuration(
    client_side=True,
    header_encoding=None,
    validate_outbound_headers=False,  # checked here once per name/value
    normalize_outbound_headers=False,
    validate_inbound_headers=True,
)
_SETTINGS = {
    h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: WINDOW,
    h2.settings.SettingCodes.ENABLE_PUSH: 0,
}
_CANCEL = h2.errors.ErrorCodes.CANCEL

Header = tuple[bytes, bytes]


class Retry(Exception):
    """The request got no answer and may be sent again on a fresh connection.
    Raised by :meth:`Connection.start` when it never left (that costs no attempt),
    set on a stream's future when the connection went away unanswered."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Stream:
    __slots__ = ("chunks", "fut", "out", "size", "status")

    def __init__(self, fut: asyncio.Future[PeerReply], out: bytes) -> None:
        self.fut = fut
        self.out = out  # request body not yet sent (flow control)
        self.status = 0  # 0 until the response headers arrive
        self.size = 0
        self.chunks: list[bytes] = []


class Connection(asyncio.Protocol):
    """One client HTTP/2 connection: streams in, :class:`PeerReply` futures out."""

    def __init__(self, limit: int, on_lost: Callable[[Connection], None]) -> None:
        self.h2 = h2.connection.H2Connection(config=_H2_CONFIG)
        self.limit = limit
        self.on_lost = on_lost
        self.transport: asyncio.Transport | None = None
        self.streams: dict[int, Stream] = {}
        self.waiters: deque[asyncio.Future[None]] = deque()
        self.max_streams = FIRST_STREAMS
        self.head: bytes | None = b""  # first bytes, until they show a SETTINGS frame
        self.usable = True  # False: no new streams here (GOAWAY, loss, retired)
        self.retiring = False  # close once the last stream is done
        self.reason = ""  # why it stopped taking streams
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    # -- asyncio.Protocol ------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.h2.local_settings = h2.settings.Settings(client=True, initial_values=_SETTINGS)
        self.h2.initiate_connection()
        self.h2.increment_flow_control_window(WINDOW - 65535)
        self._flush()

    def data_received(self, data: bytes) -> None:
        if self.head is not None:
            # A server's preface is a SETTINGS frame (RFC 9113 3.4). Anything
            # else (an HTTP/1.1 answer, say) would make h2 wait for a frame
            # length read from text: fail at once instead.
            data = self.head + data
            if len(data) < 4:
                self.head = data
                return
            self.head = None
            if data[3] != 0x04:
                self._die(f"the peer does not speak HTTP/2 (it sent {data[:24]!r})", retry=False)
                return
        try:
            events = self.h2.receive_data(data)
        except h2.exceptions.ProtocolError as exc:
            self._die(f"HTTP/2 protocol error from the peer: {exc}")
            return
        try:
            for ev in events:
                self._event(ev)
        except Exception as exc:  # never let a peer's frames raise into the event loop
            self._die(f"HTTP/2 error: {type(exc).__name__}: {exc}")
            return
        self._flush()

    def eof_received(self) -> bool | None:
        return None  # close the transport: connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.usable = False
        reason = "connection closed by the peer" if exc is None else f"connection lost: {exc}"
        self.reason = self.reason or reason
        self._fail_all(reason)
        self.transport = None
        if not self.closed.done():
            self.closed.set_result(None)
        self.on_lost(self)

    # -- frames in -------------------------------------------------------------------
    def _event(self, ev: h2.events.Event) -> None:
        # Most frequent first: DATA, HEADERS, END_STREAM.
        if isinstance(ev, h2.events.DataReceived):
            sid = ev.stream_id
            assert sid is not None and ev.flow_controlled_length is not None
            self.h2.acknowledge_received_data(ev.flow_controlled_length, sid)
            s = self.streams.get(sid)
            if s is not None and ev.data:
                s.size += len(ev.data)
                if s.size > self.limit:
                    self._cancel(sid, PeerBadResponse(f"answer exceeds {self.limit} bytes"))
                else:
                    s.chunks.append(ev.data)
        elif isinstance(ev, h2.events.ResponseReceived):
            assert ev.stream_id is not None and ev.headers is not None
            s = self.streams.get(ev.stream_id)
            if s is not None:
                self._response(ev.stream_id, s, ev.headers)
        elif isinstance(ev, h2.events.StreamEnded):
            assert ev.stream_id is not None
            self._ended(ev.stream_id)
        elif isinstance(ev, h2.events.WindowUpdated):
            self._send_blocked()
        elif isinstance(ev, h2.events.StreamReset):
            assert ev.stream_id is not None
            self._reset_by_peer(ev.stream_id, ev.error_code)
        elif isinstance(ev, h2.events.RemoteSettingsChanged):
            # Every SETTINGS from the server, the first (its preface) included;
            # an absent MAX_CONCURRENT_STREAMS means no limit.
            self._set_max_streams(self.h2.remote_settings.max_concurrent_streams)
            self._send_blocked()
        elif isinstance(ev, h2.events.ConnectionTerminated):
            code = ev.error_code
            name = code.name if isinstance(code, h2.errors.ErrorCodes) else str(code)
            self._die(f"GOAWAY ({name}, last stream {ev.last_stream_id})")
        # Informational responses, trailers, pings (h2 answers them), settings
        # acks, priority, unknown frames: nothing to do.

    def _response(self, sid: int, s: Stream, headers: list[Header]) -> None:
        status = b""
        declared = b""
        for name, value in headers:
            if name == b":status":
                status = value
            elif name == b"content-length":
                declared = value
        if not status.isdigit():
            self._cancel(sid, PeerBadResponse(f"invalid :status {status[:20]!r}"))
            return
        if declared.isdigit() and int(declared) > self.limit:
            self._cancel(
                sid, PeerBadResponse(f"answer of {int(declared)} bytes exceeds {self.limit}")
            )
            return
        s.status = int(status)

    def _ended(self, sid: int) -> None:
        s = self.streams.pop(sid, None)
        if s is None:
            return
        if s.out:  # answered before we finished sending: stop sending (RFC 9113 8.1)
            s.out = b""
            self._reset(sid, h2.errors.ErrorCodes.NO_ERROR)
        if not s.fut.done():
            if s.status:
                s.fut.set_result(PeerReply(s.status, b"".join(s.chunks)))
            else:
                s.fut.set_exception(PeerBadResponse("stream ended without a response"))
        self._released()

    def _reset_by_peer(self, sid: int, code: h2.errors.ErrorCodes | int | None) -> None:
        s = self.streams.pop(sid, None)
        if s is None:
            return
        if not s.fut.done():
            if code == h2.errors.ErrorCodes.REFUSED_STREAM and not s.status:
                # RFC 9113 8.7: a refused stream was not processed.
                s.fut.set_exception(Retry("stream refused"))
            else:
                name = code.name if isinstance(code, h2.errors.ErrorCodes) else str(code)
                s.fut.set_exception(PeerUnreachable(f"stream reset by the peer ({name})"))
        self._released()

    def _set_max_streams(self, value: int) -> None:
        self.max_streams = min(value, MAX_STREAMS)
        if value == 0:  # the server takes no new streams here: go elsewhere
            self.retire()
        self._wake()

    # -- requests out ----------------------------------------------------------------
    async def start(self, head: list[Header], body: bytes) -> tuple[int, Stream]:
        """Open a stream (waiting for a free one if the server's limit is
        reached) and send the request. Raises :class:`Retry` (not sent) when
        this connection stops taking streams meanwhile."""
        while self.usable and len(self.streams) >= self.max_streams:
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self.waiters.append(waiter)
            try:
                await waiter
            except BaseException:
                if waiter.done() and not waiter.cancelled():
                    self._wake()  # woken but leaving: hand the free stream on
                raise
        if not self.usable:
            raise Retry(self.reason or "connection closed before the request was sent")
        h = self.h2
        try:
            sid = h.get_next_available_stream_id()
            h.send_headers(sid, head, end_stream=not body)
        except h2.exceptions.ProtocolError as exc:
            # Out of stream ids, or the state machine closed under us.
            self.retire()
            raise Retry(f"cannot open a stream: {exc}") from None
        s = Stream(asyncio.get_running_loop().create_future(), body)
        self.streams[sid] = s
        if body:
            self._send_body(sid, s)
        self._flush()
        return sid, s

    def abandon(self, sid: int) -> None:
        """The requester gave up (timeout, cancellation): reset the stream."""
        if self.streams.pop(sid, None) is not None:
            self._reset(sid, _CANCEL)
            self._flush()
            self._released()

    def _send_body(self, sid: int, s: Stream) -> None:
        h = self.h2
        while s.out:
            n = min(h.local_flow_control_window(sid), h.max_outbound_frame_size)
            if n <= 0:
                return  # resumed by a WINDOW_UPDATE
            chunk, s.out = s.out[:n], s.out[n:]
            h.send_data(sid, chunk, end_stream=not s.out)

    def _send_blocked(self) -> None:
        for sid, s in list(self.streams.items()):
            if s.out:
                try:
                    self._send_body(sid, s)
                except h2.exceptions.ProtocolError:
                    self._cancel(sid, PeerUnreachable("stream closed while sending the request"))

    def _cancel(self, sid: int, exc: PeerError) -> None:
        s = self.streams.pop(sid, None)
        if s is None:
            return
        self._reset(sid, _CANCEL)
        if not s.fut.done():
            s.fut.set_exception(exc)
        self._released()

    def _reset(self, sid: int, code: h2.errors.ErrorCodes) -> None:
        with contextlib.suppress(h2.exceptions.ProtocolError):
            self.h2.reset_stream(sid, code)

    def _released(self) -> None:
        if self.retiring and not self.streams:
            self.close("retired")
        elif self.waiters:
            self._wake()

    def _wake(self) -> None:
        free = self.max_streams - len(self.streams) if self.usable else len(self.waiters)
        while free > 0 and self.waiters:
            waiter = self.waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                free -= 1

    def _flush(self) -> None:
        data = self.h2.data_to_send()
        if data and self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    # -- the end ---------------------------------------------------------------------
    def _fail_all(self, reason: str, retry: bool = True) -> None:
        streams, self.streams = self.streams, {}
        for s in streams.values():
            if s.fut.done():
                continue
            if retry and not s.status:
                s.fut.set_exception(Retry(reason))
            else:
                what = "connection closed mid-answer" if s.status else "connection closed"
                s.fut.set_exception(PeerUnreachable(f"{what}: {reason}"))
        self._wake()

    def _die(self, reason: str, retry: bool = True) -> None:
        """The connection is unusable (GOAWAY, protocol error): answered
        streams fail, unanswered ones may be retried elsewhere."""
        self.usable = False
        self.reason = self.reason or reason
        self._fail_all(reason, retry)
        self._flush()  # h2 may have queued a GOAWAY of its own
        if self.transport is not None:
            self.transport.close()

    def retire(self) -> None:
        """No new streams; close once the current ones are answered."""
        self.usable = False
        self.retiring = True
        self._wake()
        if not self.streams:
            self.close("retired")

    def close(self, reason: str) -> None:
        """Close now; streams still waiting fail (not retried)."""
        self.usable = False
        self.reason = self.reason or reason
        self._fail_all(reason, retry=False)
        if self.transport is not None and not self.transport.is_closing():
            with contextlib.suppress(h2.exceptions.ProtocolError):
                self.h2.close_connection()
                self._flush()
            self.transport.close()

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()
