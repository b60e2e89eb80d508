"""A lean HTTP/2 transport for peer requests (DISCOVER, and the key fetches).

Why it exists: measured on a 2-core machine against a local ``ans serve --demo``
(7 KB answers), httpx costs about 3.2 ms of client CPU per request, a plain
``asyncio.Protocol`` driving the sans-IO ``h2`` library about 0.9 ms. A
federated DISCOVER asks two peers, so httpx alone added ~4.6 ms of CPU to a
request whose local-only version takes ~4 ms, against a target of federated
p50 <= 2x local p50. ``bench/peer_transport.py`` measures it beside httpx and
the native framing (``bench/results/peer_transport.json``: 1,500 sequential
DISCOVERs each, 1.43 ms of client CPU per request with httpx, 0.40 ms with
this one, 0.14 ms native -- the kernel's loopback work included). httpx stays for every
other outbound call (freshness DESCRIBEs, ``/status`` polls, webhooks: those
may need HTTP/1.1).

:class:`H2PeerTransport` implements :class:`~.transport.PeerTransport` with the
same errors as :class:`~.transport.HttpxTransport`, so the federator needs no
change:

* one connection per origin (scheme, host, port, cacert, client certificate), many concurrent
  streams on it, never more than the server's SETTINGS_MAX_CONCURRENT_STREAMS
  (further requests queue for a free stream); reopened on demand after a
  GOAWAY or a lost connection; at most ``max_origins`` origins (LRU: an
  evicted connection finishes its streams, then closes);
* ``http://`` is h2c with prior knowledge, ``https://`` is TLS with ALPN
  ``h2`` only (a server that does not select h2 is :class:`PeerUnreachable`),
  verified against ``peer.cacert`` or the system store, SNI = host, with
  ``peer.client_cert`` presented when the peer requires one;
* the answer is bounded by ``max_response_bytes`` (declared or streamed): the
  stream is reset with CANCEL and the connection stays usable;
* ``timeout`` covers connecting, TLS and the whole answer; a timed-out stream
  is reset (CANCEL) and the connection kept;
* a request the server did not answer at all (no response headers) when its
  connection went away (GOAWAY, loss, protocol error, REFUSED_STREAM) is sent
  once more on a fresh connection, as HttpxTransport does: DISCOVER, DESCRIBE
  and GET are idempotent. The ``h2`` library accepts no frame after a GOAWAY,
  so a stream the server accepted before its GOAWAY cannot be answered on that
  connection either -- and hypercorn, which our peers run, does not answer
  those (its own state machine is closed once it sent GOAWAY).

Key fetches: :class:`~.keys.PeerKeyCache` only calls ``send`` (GET of the
peer's JWKS, or DESCRIBE on the peer), so those go over the same h2
connection -- the key fetch opens the connection the first DISCOVER then
reuses. A ``jwks_url`` on another origin may be an ordinary web server that
speaks only HTTP/1.1: requests outside the peer's own URL go to
``other_origins`` (the server passes an :class:`~.transport.HttpxTransport`),
so nothing that worked with httpx stops working.

CPU per request is kept low: header tuples that do not change (method, path,
scheme, authority) are built once per method/URL, names are lower-cased and
checked once, h2 does no outbound header validation (done here, once), and no
task is created per request (the timeout is ``asyncio.timeout``; streams are
futures resolved by the protocol).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import ssl
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import NamedTuple
from urllib.parse import urlsplit

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings
from hpack import NeverIndexedHeaderTuple

from .peers import Peer
from .transport import (
    PeerBadResponse,
    PeerError,
    PeerReply,
    PeerTimeout,
    PeerTransport,
    PeerUnreachable,
)

WINDOW = 16 * 1024 * 1024  # receive window, connection and stream
# Streams open before the server's SETTINGS arrive. RFC 9113 5.1.2 would allow
# 100, but hypercorn enforces its own limit from its first frame, and h2 makes
# a stream over it a connection error that kills every stream: so one, and the
# others wait the one round trip the server's preface takes.
FIRST_STREAMS = 1
MAX_STREAMS = 256  # per connection, whatever the server allows
MAX_TRIES = 3  # connections one request may try (at most 2 of them with the request sent)
CLOSE_WAIT = 1.0  # aclose() waits this long for sockets to close, then aborts them
_CACHE_MAX = 512  # bound of the small parse caches (URLs, header names, methods)

# Header names h2 forbids (connection-specific) or that we set ourselves.
_DROPPED = frozenset(
    {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "te"}
    | {"host", "content-length"}
)
_SENSITIVE = frozenset({b"authorization", b"proxy-authorization", b"cookie"})
_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9a-z-]+")
_METHOD = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_BAD_VALUE = re.compile(r"[\r\n\x00]")

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


class _Retry(Exception):
    """The request got no answer and may be sent again on a fresh connection.
    Raised by :meth:`_Conn.start` when it never left (that costs no attempt),
    set on a stream's future when the connection went away unanswered."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _Target(NamedTuple):
    """What one URL means: its origin key and its prebuilt pseudo-headers."""

    scheme: str
    host: str
    port: int
    pseudo: tuple[Header, ...]  # :path, :scheme, :authority


class _Stream:
    __slots__ = ("chunks", "fut", "out", "size", "status")

    def __init__(self, fut: asyncio.Future[PeerReply], out: bytes) -> None:
        self.fut = fut
        self.out = out  # request body not yet sent (flow control)
        self.status = 0  # 0 until the response headers arrive
        self.size = 0
        self.chunks: list[bytes] = []


class _Conn(asyncio.Protocol):
    """One client HTTP/2 connection: streams in, :class:`PeerReply` futures out."""

    def __init__(self, limit: int, on_lost: Callable[[_Conn], None]) -> None:
        self.h2 = h2.connection.H2Connection(config=_H2_CONFIG)
        self.limit = limit
        self.on_lost = on_lost
        self.transport: asyncio.Transport | None = None
        self.streams: dict[int, _Stream] = {}
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

    def _response(self, sid: int, s: _Stream, headers: list[Header]) -> None:
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
                s.fut.set_exception(_Retry("stream refused"))
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
    async def start(self, head: list[Header], body: bytes) -> tuple[int, _Stream]:
        """Open a stream (waiting for a free one if the server's limit is
        reached) and send the request. Raises :class:`_Retry` (not sent) when
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
            raise _Retry(self.reason or "connection closed before the request was sent")
        h = self.h2
        try:
            sid = h.get_next_available_stream_id()
            h.send_headers(sid, head, end_stream=not body)
        except h2.exceptions.ProtocolError as exc:
            # Out of stream ids, or the state machine closed under us.
            self.retire()
            raise _Retry(f"cannot open a stream: {exc}") from None
        s = _Stream(asyncio.get_running_loop().create_future(), body)
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

    def _send_body(self, sid: int, s: _Stream) -> None:
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
                s.fut.set_exception(_Retry(reason))
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


class _Origin:
    __slots__ = ("conn", "lock", "ssl")

    def __init__(self, ctx: ssl.SSLContext | None) -> None:
        self.ssl = ctx
        self.conn: _Conn | None = None
        self.lock = asyncio.Lock()


# (scheme, host, port, cacert, our client certificate + key)
OriginKey = tuple[str, str, int, Path | None, tuple[str, str] | None]
ContextKey = tuple[Path | None, tuple[str, str] | None]


class H2PeerTransport:
    """:class:`~.transport.PeerTransport` over asyncio + sans-IO ``h2``.

    ``other_origins``, when given, takes the requests whose URL is not under
    the peer's own URL (a ``jwks_url`` elsewhere); without it, those go over
    h2 as well."""

    def __init__(
        self,
        max_response_bytes: int,
        max_origins: int = 64,
        other_origins: PeerTransport | None = None,
    ) -> None:
        self._max = max_response_bytes
        self._max_origins = max(1, max_origins)
        self._other = other_origins
        self._origins: OrderedDict[OriginKey, _Origin] = OrderedDict()
        self._conns: set[_Conn] = set()  # every open connection, current or retired
        self._targets: dict[str, _Target] = {}
        self._methods: dict[str, Header] = {}
        self._names: dict[str, bytes] = {}
        self._contexts: dict[ContextKey, ssl.SSLContext] = {}
        self._epoch = 0  # counts aclose() calls: a connect that spans one is dropped

    def connection_count(self) -> int:
        """Open connections (current and retired); 0 after :meth:`aclose`."""
        return len(self._conns)

    async def send(
        self,
        peer: Peer,
        method: str,
        url: str,
        headers: Mapping[str, str],
        body: bytes,
        timeout: float,
    ) -> PeerReply:
        if self._other is not None and not _under(url, peer.url):
            return await self._other.send(peer, method, url, headers, body, timeout)
        if timeout <= 0:
            raise PeerTimeout(f"no answer within {timeout:.3f}s")
        target = self._target(url)
        head = self._head(method, target, headers, body)
        key = (target.scheme, target.host, target.port, peer.cacert, peer.tls_client)
        try:
            async with asyncio.timeout(timeout):
                return await self._exchange(key, head, body)
        except TimeoutError:
            raise PeerTimeout(f"no answer within {timeout:.3f}s") from None

    async def _exchange(self, key: OriginKey, head: list[Header], body: bytes) -> PeerReply:
        sent = tries = 0
        while True:
            tries += 1
            conn = await self._connection(key)
            try:
                sid, stream = await conn.start(head, body)
            except _Retry as exc:  # never sent: try the next connection, within reason
                if tries >= MAX_TRIES:
                    raise PeerUnreachable(f"connection closed: {exc.reason}") from None
                continue
            try:
                return await stream.fut
            except _Retry as exc:
                sent += 1
                if sent >= 2:
                    raise PeerUnreachable(f"connection closed: {exc.reason}") from None
            finally:
                if not stream.fut.done() or stream.fut.cancelled():
                    conn.abandon(sid)

    # -- connections -----------------------------------------------------------------
    async def _connection(self, key: OriginKey) -> _Conn:
        origin = self._origins.get(key)
        if origin is None:
            origin = self._new_origin(key)
        else:
            self._origins.move_to_end(key)
        conn = origin.conn
        if conn is not None and conn.usable:
            return conn
        async with origin.lock:  # one connect per origin at a time
            conn = origin.conn
            if conn is None or not conn.usable:
                epoch = self._epoch
                conn = await self._connect(key, origin.ssl)
                if epoch != self._epoch:
                    conn.close("transport closed")
                    raise PeerUnreachable("transport closed")
                if self._origins.get(key) is not origin:
                    conn.retiring = True  # evicted meanwhile: close once this request is done
                origin.conn = conn
            return conn

    def _new_origin(self, key: OriginKey) -> _Origin:
        scheme, _, _, cacert, client = key
        origin = _Origin(self._context((cacert, client)) if scheme == "https" else None)
        self._origins[key] = origin
        while len(self._origins) > self._max_origins:
            _, old = self._origins.popitem(last=False)
            if old.conn is not None:
                old.conn.retire()
        return origin

    def _context(self, key: ContextKey) -> ssl.SSLContext:
        ctx = self._contexts.get(key)
        if ctx is None:
            cacert, client = key
            try:
                ctx = ssl.create_default_context(cafile=str(cacert) if cacert is not None else None)
            except (OSError, ValueError) as exc:
                raise PeerUnreachable(f"cannot load cacert {cacert}: {exc}") from None
            if client is not None:
                try:
                    ctx.load_cert_chain(*client)
                except (OSError, ssl.SSLError) as exc:
                    raise PeerUnreachable(f"cannot load client certificate: {exc}") from None
            ctx.set_alpn_protocols(["h2"])
            if len(self._contexts) >= _CACHE_MAX:
                self._contexts.clear()
            self._contexts[key] = ctx
        return ctx

    async def _connect(self, key: OriginKey, ctx: ssl.SSLContext | None) -> _Conn:
        _, host, port, _, _ = key
        loop = asyncio.get_running_loop()
        try:
            _, conn = await loop.create_connection(
                lambda: _Conn(self._max, self._conns.discard),
                host,
                port,
                ssl=ctx,
                server_hostname=host if ctx is not None else None,
            )
        except ssl.SSLError as exc:  # certificate not trusted, handshake failure
            raise PeerUnreachable(f"TLS with {host}:{port} failed: {exc}") from None
        except OSError as exc:
            raise PeerUnreachable(f"cannot connect: {exc}") from None
        self._conns.add(conn)
        if ctx is not None:
            assert conn.transport is not None
            tls = conn.transport.get_extra_info("ssl_object")
            chosen = tls.selected_alpn_protocol() if tls is not None else None
            if chosen != "h2":
                conn.close("no h2")
                raise PeerUnreachable(f"{host}:{port} did not select h2 by ALPN (got {chosen})")
        return conn

    async def aclose(self) -> None:
        """Close every connection (streams still waiting fail); idempotent."""
        self._epoch += 1
        conns = list(self._conns)
        self._origins.clear()
        for conn in conns:
            conn.close("transport closed")
        if conns:
            _, late = await asyncio.wait([c.closed for c in conns], timeout=CLOSE_WAIT)
            for conn in conns:
                if not conn.closed.done():
                    conn.abort()
            if late:
                await asyncio.wait(late, timeout=CLOSE_WAIT)
        self._conns.clear()
        if self._other is not None:
            await self._other.aclose()

    # -- request headers -------------------------------------------------------------
    def _target(self, url: str) -> _Target:
        target = self._targets.get(url)
        if target is not None:
            return target
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError as exc:
            raise PeerUnreachable(f"invalid URL {url[:200]!r}: {exc}") from None
        host = parts.hostname
        if parts.scheme not in ("http", "https") or not host or parts.username is not None:
            raise PeerUnreachable(f"not an http(s) URL without credentials: {url[:200]!r}")
        path = parts.path or "/"
        if parts.query:
            path += "?" + parts.query
        if _BAD_VALUE.search(url) or " " in path:
            raise PeerUnreachable(f"invalid URL {url[:200]!r}")
        if port is None:
            port = 443 if parts.scheme == "https" else 80
        if not url.isascii():
            raise PeerUnreachable(f"URL is not ASCII (use the IDNA form): {url[:200]!r}")
        pseudo = (
            (b":path", path.encode()),
            (b":scheme", parts.scheme.encode()),
            (b":authority", parts.netloc.encode()),
        )
        target = _Target(parts.scheme, host, port, pseudo)
        if len(self._targets) >= _CACHE_MAX:
            self._targets.clear()
        self._targets[url] = target
        return target

    def _head(
        self, method: str, target: _Target, headers: Mapping[str, str], body: bytes
    ) -> list[Header]:
        m = self._methods.get(method)
        if m is None:
            if not _METHOD.fullmatch(method):
                raise PeerUnreachable(f"invalid method {method[:40]!r}")
            m = (b":method", method.encode())
            if len(self._methods) < _CACHE_MAX:
                self._methods[method] = m
        head: list[Header] = [m, *target.pseudo]
        names = self._names
        for name, value in headers.items():
            n = names.get(name)
            if n is None:
                n = self._name(name)
            if not n:
                continue  # dropped (connection-specific, or set here)
            if _BAD_VALUE.search(value):
                raise PeerUnreachable(f"invalid value of request header {name!r}")
            v = value.encode()
            head.append(NeverIndexedHeaderTuple(n, v) if n in _SENSITIVE else (n, v))
        if body:
            head.append((b"content-length", b"%d" % len(body)))
        return head

    def _name(self, name: str) -> bytes:
        lower = name.lower()
        if not _NAME.fullmatch(lower):
            raise PeerUnreachable(f"invalid request header name {name[:40]!r}")
        n = b"" if lower in _DROPPED else lower.encode()
        if len(self._names) < _CACHE_MAX:
            self._names[name] = n
        return n


def _under(url: str, base: str) -> bool:
    """``url`` is ``base`` or below it (same origin, as peer URLs carry no query)."""
    return url.startswith(base) and (len(url) == len(base) or url[len(base)] in "/?")
