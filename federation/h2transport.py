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

This module owns the pool: origins (LRU), TLS contexts, connecting, the
retry of unanswered requests, closing. One connection and its streams are
``h2_connection.py``; the request's header list is ``h2_request_head.py``.
"""

from __future__ import annotations

import asyncio
import ssl
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path

from .h2_connection import Connection, Header, Retry
from .h2_request_head import CACHE_MAX, RequestHeads
from .peers import Peer
from .transport import (
    PeerReply,
    PeerTimeout,
    PeerTransport,
    PeerUnreachable,
)

MAX_TRIES = 3  # connections one request may try (at most 2 of them with the request sent)
CLOSE_WAIT = 1.0  # aclose() waits this long for sockets to close, then aborts them


class _Origin:
    __slots__ = ("conn", "lock", "ssl")

    def __init__(self, ctx: ssl.SSLContext | None) -> None:
        self.ssl = ctx
        self.conn: Connection | None = None
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
        self._conns: set[Connection] = set()  # every open connection, current or retired
        self._heads = RequestHeads()
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
        target = self._heads.target(url)
        head = self._heads.head(method, target, headers, body)
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
            except Retry as exc:  # never sent: try the next connection, within reason
                if tries >= MAX_TRIES:
                    raise PeerUnreachable(f"connection closed: {exc.reason}") from None
                continue
            try:
                return await stream.fut
            except Retry as exc:
                sent += 1
                if sent >= 2:
                    raise PeerUnreachable(f"connection closed: {exc.reason}") from None
            finally:
                if not stream.fut.done() or stream.fut.cancelled():
                    conn.abandon(sid)

    # -- connections -----------------------------------------------------------------
    async def _connection(self, key: OriginKey) -> Connection:
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
            if len(self._contexts) >= CACHE_MAX:
                self._contexts.clear()
            self._contexts[key] = ctx
        return ctx

    async def _connect(self, key: OriginKey, ctx: ssl.SSLContext | None) -> Connection:
        _, host, port, _, _ = key
        loop = asyncio.get_running_loop()
        try:
            _, conn = await loop.create_connection(
                lambda: Connection(self._max, self._conns.discard),
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


def _under(url: str, base: str) -> bool:
    """``url`` is ``base`` or below it (same origin, as peer URLs carry no query)."""
    return url.startswith(base) and (len(url) == len(base) or url[len(base)] in "/?")
