"""Peer requests over the native AGTP/1.0 framing (``agtp://``, ``agtp+cleartext://``).

Why it exists: a peer ANS that also runs the native listener (``ans serve
--native-listen``) answers a forwarded DISCOVER for less CPU than over
HTTP/2, on both ends: no HPACK, no stream state machine, no flow-control
frames, no ASGI. ``bench/federation_latency.py`` measures both transports in
one run. Answers are verified exactly as over HTTP/2 (the signature is over
the result, not the transport), so a peer's transport changes nothing about
trust.

:class:`NativePeerTransport` implements :class:`~.transport.PeerTransport`
with the same errors as the HTTP/2 transports:

* ``agtp://host[:port]`` is TLS 1.3, verified against ``peer.cacert`` or the
  system store, SNI = host (default port 8080, the AGTP draft's working
  port); ``agtp+cleartext://host:port`` is plain TCP, for loopback and
  development (as h2c is for HTTP/2);
* one request at a time per connection (the framing has no stream ids), up
  to ``max_connections`` connections per origin kept open for reuse; a
  request beyond that waits for a free one (within its timeout);
* the answer is bounded by ``max_response_bytes`` and the header limits of
  the framing; anything malformed is :class:`~.transport.PeerBadResponse`
  and that connection is closed;
* ``timeout`` covers connecting, TLS and the whole answer; a timed-out
  connection is closed (the framing cannot cancel one request);
* a kept-alive connection the peer closed before answering (idle timeout,
  restart) is retried once on a fresh one: DISCOVER and DESCRIBE are idempotent.

A request is written before the first suspension when an idle connection is
at hand, which is what the federator's "dispatched" signal relies on.
"""

from __future__ import annotations

import asyncio
import ssl
from collections import OrderedDict, deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from ans.protocol.errors import AgtpError
from ans.protocol.native import NativeResponse, NativeResponseParser, encode_request

from .peers import NATIVE_DEFAULT_PORT, NATIVE_SCHEMES, Peer
from .transport import PeerBadResponse, PeerError, PeerReply, PeerTimeout, PeerUnreachable

# (tls, host, port, cacert, our client certificate + key)
Origin = tuple[bool, str, int, str | None, tuple[str, str] | None]


def native_origin(
    url: str, cacert: str | None = None, client: tuple[str, str] | None = None
) -> Origin:
    parts = urlsplit(url)
    if parts.scheme not in NATIVE_SCHEMES or not parts.hostname:
        raise PeerUnreachable(f"not a native AGTP URL: {url[:100]!r}")
    tls = parts.scheme == "agtp"
    return tls, parts.hostname, parts.port or NATIVE_DEFAULT_PORT, cacert, client


class _Closed(PeerError):
    """The connection went away; ``answered`` says whether any answer bytes came."""

    def __init__(self, message: str, answered: bool) -> None:
        super().__init__(message, "peer_unreachable")
        self.answered = answered


class _Conn(asyncio.Protocol):
    """One connection: at most one request in flight."""

    def __init__(self, max_response_bytes: int) -> None:
        self.parser = NativeResponseParser(max_response_bytes)
        self.transport: asyncio.Transport | None = None
        self.waiter: asyncio.Future[NativeResponse] | None = None
        self.lost = False
        self.used = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        waiter = self.waiter
        if waiter is None or waiter.done():  # nothing asked: the peer is out of step
            self.close()
            return
        try:
            answers = self.parser.feed(data)
        except AgtpError as exc:
            waiter.set_exception(PeerBadResponse(f"bad AGTP framing: {exc.message}"))
            self.close()
            return
        if answers:
            if len(answers) > 1 or self.parser.buffered or self.parser.failed is not None:
                # More than was asked (another answer, a partial one, or garbage the
                # parser already refused): answer the first, drop the connection.
                self.close()
            waiter.set_result(answers[0])

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            answered = self.parser.buffered > 0
            waiter.set_exception(_Closed("the peer closed the connection", answered))

    @property
    def usable(self) -> bool:
        return (
            not self.lost
            and self.transport is not None
            and not self.transport.is_closing()
            and self.parser.buffered == 0
        )

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def ask(self, request: bytes) -> asyncio.Future[NativeResponse]:
        """Write ``request`` now; the future resolves with the answer."""
        assert self.transport is not None
        self.used = True
        self.waiter = asyncio.get_running_loop().create_future()
        self.transport.write(request)
        return self.waiter


@dataclass
class _Pool:
    """Connections to one origin: ``open`` counts idle and busy ones (and
    slots handed to a waiter that is connecting)."""

    limit: int
    idle: list[_Conn] = field(default_factory=list)
    open: int = 0
    # Requests waiting for a connection: resolved with an idle connection, or
    # with None when a slot freed up (the waiter then connects itself).
    waiters: deque[asyncio.Future[_Conn | None]] = field(default_factory=deque)
    # Evicted (least recently used origin): connections close when released.
    retired: bool = False


class NativePeerTransport:
    def __init__(
        self, max_response_bytes: int, max_connections: int = 8, max_origins: int = 64
    ) -> None:
        self._max = max_response_bytes
        self._max_connections = max(1, max_connections)
        self._max_origins = max(1, max_origins)
        self._pools: OrderedDict[Origin, _Pool] = OrderedDict()
        # parsed URLs, by (url, cacert, client certificate)
        self._origins: dict[tuple[str, str | None, tuple[str, str] | None], Origin] = {}

    async def send(
        self,
        peer: Peer,
        method: str,
        url: str,
        headers: Mapping[str, str],
        body: bytes,
        timeout: float,
    ) -> PeerReply:
        cacert = str(peer.cacert) if peer.cacert is not None else None
        client = peer.tls_client
        origin = self._origins.get((url, cacert, client))
        if origin is None:
            if len(self._origins) >= 4 * self._max_origins:
                self._origins.clear()
            origin = self._origins[(url, cacert, client)] = native_origin(url, cacert, client)
        try:
            request = encode_request(method, headers, body)
        except ValueError as exc:
            raise PeerError(f"request cannot be framed: {exc}") from None
        try:
            async with asyncio.timeout(timeout):
                return await self._send(origin, request)
        except TimeoutError:
            raise PeerTimeout(f"no answer within {timeout:.3f}s") from None

    async def _send(self, origin: Origin, request: bytes) -> PeerReply:
        pool = self._pool(origin)
        for attempt in (1, 2):
            conn = self._idle(pool)
            if conn is None:
                conn = await self._acquire(origin, pool)
            reused = conn.used
            try:
                answer = await conn.ask(request)
            except _Closed as exc:
                self._discard(pool, conn)
                if reused and not exc.answered and attempt == 1:
                    continue  # an idle connection closed under us: once more, fresh
                raise PeerUnreachable(exc.message) from None
            except BaseException:
                self._discard(pool, conn)  # timed out, cancelled or malformed: never reused
                raise
            self._release(pool, conn)
            return PeerReply(answer.status, answer.body)
        raise AssertionError("unreachable")  # pragma: no cover

    def _pool(self, origin: Origin) -> _Pool:
        pool = self._pools.get(origin)
        if pool is None:
            pool = self._pools[origin] = _Pool(self._max_connections)
            while len(self._pools) > self._max_origins:
                _, old = self._pools.popitem(last=False)
                old.retired = True
                for conn in old.idle:  # busy ones close when their request is done
                    conn.close()
                old.idle.clear()
        else:
            self._pools.move_to_end(origin)
        return pool

    def _idle(self, pool: _Pool) -> _Conn | None:
        while pool.idle:
            conn = pool.idle.pop()
            if conn.usable:
                return conn
            self._discard(pool, conn)
        return None

    async def _acquire(self, origin: Origin, pool: _Pool) -> _Conn:
        """A connection of our own: a new one when under the limit, else the
        first one released (or slot freed) while we wait."""
        while pool.open >= pool.limit:
            fut: asyncio.Future[_Conn | None] = asyncio.get_running_loop().create_future()
            pool.waiters.append(fut)
            try:
                handed = await fut
            except BaseException:
                if fut.done() and not fut.cancelled():  # handed over as we were cancelled
                    got = fut.result()
                    if got is not None:
                        self._release(pool, got)
                    else:
                        pool.open -= 1
                        self._wake(pool)
                elif fut in pool.waiters:
                    pool.waiters.remove(fut)
                raise
            if handed is not None:
                if handed.usable:
                    return handed
                self._discard(pool, handed)
                continue
            break  # a slot was freed and reserved for us (open already counts it)
        else:
            pool.open += 1
        return await self._connect(origin, pool)

    async def _connect(self, origin: Origin, pool: _Pool) -> _Conn:
        """Open a connection for a slot already counted in ``pool.open``."""
        tls, host, port, cacert, client = origin
        ctx: ssl.SSLContext | None = None
        loop = asyncio.get_running_loop()
        try:
            if tls:
                ctx = ssl.create_default_context(cafile=cacert)
                ctx.minimum_version = ssl.TLSVersion.TLSv1_3
                if client is not None:
                    ctx.load_cert_chain(*client)
            _, conn = await loop.create_connection(
                lambda: _Conn(self._max),
                host,
                port,
                ssl=ctx,
                server_hostname=host if tls else None,
            )
        except BaseException as exc:
            pool.open -= 1
            self._wake(pool)
            if isinstance(exc, (OSError, ssl.SSLError)):
                raise PeerUnreachable(f"cannot connect: {exc}") from None
            raise
        return conn

    def _release(self, pool: _Pool, conn: _Conn) -> None:
        if not conn.usable or pool.retired:
            self._discard(pool, conn)
            return
        while pool.waiters:
            fut = pool.waiters.popleft()
            if not fut.done():
                fut.set_result(conn)
                return
        pool.idle.append(conn)

    def _discard(self, pool: _Pool, conn: _Conn) -> None:
        conn.close()
        pool.open -= 1
        self._wake(pool)

    @staticmethod
    def _wake(pool: _Pool) -> None:
        """A slot is free: give it to the first live waiter (reserving it)."""
        while pool.waiters:
            fut = pool.waiters.popleft()
            if not fut.done():
                pool.open += 1
                fut.set_result(None)
                return

    async def aclose(self) -> None:
        pools, self._pools = list(self._pools.values()), OrderedDict()
        for pool in pools:
            for conn in pool.idle:
                conn.close()
            pool.idle.clear()
