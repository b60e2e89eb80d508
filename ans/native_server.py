"""The native AGTP/1.0 listener: the protocol's own framing over TCP or TLS.

AGTP's drafts write requests as ``AGTP/1.0 DISCOVER`` + headers + body and
require TCP/TLS support; the HTTP/2 binding (hypercorn) is one way to carry
them, this listener is the other. Each connection feeds a sans-IO
:class:`~ans.protocol.native.NativeParser`; every complete request goes
through :meth:`AnsApp.answer`, exactly the parse -> authenticate -> rate
limit -> scope/zone -> method path of the HTTP/2 binding, so both framings
give the same typed answers, signatures and audit records.

Per connection, requests are answered one at a time in arrival order (the
framing has no stream ids; a client may pipeline). Bounds:

* header section and body sizes: the parser (16 KiB, ``max_body_bytes``);
* reading pauses once ``MAX_PIPELINE`` requests are waiting on a connection;
* answers wait while the client does not read them (the transport's write
  buffer is over its high-water mark), and so does reading; a client that
  reads nothing for ``WRITE_TIMEOUT`` seconds is disconnected;
* a request must arrive whole within ``REQUEST_TIMEOUT`` seconds of its first
  byte, a connection must start its first request within ``REQUEST_TIMEOUT``
  seconds, and an idle connection is closed after ``keep_alive_timeout``;
* at most ``MAX_CONNECTIONS`` connections, and ``MAX_PER_CLIENT`` from one
  client address (more are answered 503 and closed).

Bad framing is answered with its typed 400 and the connection is closed (the
stream cannot be resynchronised): half-closed first, on cleartext, while what
the client still sends is dropped (``LINGER_SECONDS``, ``LINGER_BYTES``), so
that closing with unread input does not reset the connection under the 400.
With ``tls_certfile`` the listener is TLS 1.3 only (the AGTP draft's minimum);
in auth mode ``mtls`` it requires a client certificate from ``tls_client_ca``
and hands the verified leaf to the gate as the HTTP/2 listener does. Without a
certificate it is cleartext, like h2c: for loopback and development.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import time
from collections import deque
from typing import Any

import structlog

from ans.protocol.binding import response_headers
from ans.protocol.errors import AgtpError, Unavailable
from ans.protocol.native import NativeParser, NativeRequest, encode_response

from .app import AnsApp, Answer
from .config import Config
from .gate import Credentials
from .http2_defences import client_key
from .mtls import tls_extension
from .request_log import NOTE

log = structlog.get_logger("ans.native")

MAX_PIPELINE = 32
REQUEST_TIMEOUT = 10.0
WRITE_TIMEOUT = 30.0
MAX_CONNECTIONS = 1024
MAX_PER_CLIENT = 64
# After a framing error's 400: our side is half-closed and what the client is
# still sending is read and dropped, up to this long and this much, before the
# close (closing with unread input resets the connection, and a client still
# sending could lose the 400 it was answered).
LINGER_SECONDS = 2.0
LINGER_BYTES = 1 << 20
SCHEME_TLS = "agtp"
SCHEME_CLEARTEXT = "agtp+cleartext"


def native_ssl_context(config: Config) -> ssl.SSLContext | None:
    """TLS 1.3 with the server's certificate (client certificates in mtls mode)."""
    if config.tls_certfile is None or config.tls_keyfile is None:
        return None
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    ctx.load_cert_chain(str(config.tls_certfile), str(config.tls_keyfile))
    if config.auth_mode == "mtls":
        assert config.tls_client_ca is not None  # Config.validate
        ctx.load_verify_locations(cafile=str(config.tls_client_ca))
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


class NativeListener:
    """The connections of one native listener, with their shared bounds."""

    def __init__(
        self,
        app: AnsApp,
        *,
        keep_alive_timeout: float,
        request_timeout: float = REQUEST_TIMEOUT,
        write_timeout: float = WRITE_TIMEOUT,
        max_connections: int = MAX_CONNECTIONS,
        max_per_client: int = MAX_PER_CLIENT,
        max_pipeline: int = MAX_PIPELINE,
    ) -> None:
        self.app = app
        self.keep_alive_timeout = keep_alive_timeout
        self.request_timeout = request_timeout
        self.write_timeout = write_timeout
        self.max_connections = max_connections
        self.max_per_client = max_per_client
        self.max_pipeline = max_pipeline
        self.connections: set[NativeConnection] = set()
        self.per_client: dict[str, int] = {}  # open connections per client address
        self.server: asyncio.Server | None = None
        self.all_closed: asyncio.Event | None = None  # once stopping: set when none is left

    def protocol(self) -> NativeConnection:
        return NativeConnection(self)

    async def start(
        self, host: str, port: int, tls: ssl.SSLContext | None, sock: socket.socket | None = None
    ) -> tuple[str, int]:
        """Listen on (host, port), or on ``sock`` when given (a worker of ``ans
        serve --workers N``: bound by the supervisor)."""
        loop = asyncio.get_running_loop()
        where: dict[str, Any] = {"sock": sock} if sock is not None else {"host": host, "port": port}
        self.server = await loop.create_server(
            self.protocol,
            **where,
            ssl=tls,
            backlog=1024,
            reuse_address=sock is None,
            # A TLS handshake gets no longer than a request to arrive.
            ssl_handshake_timeout=self.request_timeout if tls is not None else None,
        )
        bound = self.server.sockets[0].getsockname()
        return str(bound[0]), int(bound[1])

    async def stop(self, grace: float = 10.0) -> None:
        """Stop accepting; each connection answers every request it has
        received (those still in its socket buffer too), then closes; after
        ``grace`` seconds the ones left are cut."""
        if self.server is not None:
            self.server.close()
        self.all_closed = asyncio.Event()
        if not self.connections:
            self.all_closed.set()
        for conn in list(self.connections):
            conn.drain()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.all_closed.wait(), grace)
        for conn in list(self.connections):
            log.warning("native connection cut at the end of the grace period")
            conn.abort()

    def forget(self, conn: NativeConnection) -> None:
        self.connections.discard(conn)
        if not self.connections and self.all_closed is not None:
            self.all_closed.set()


class NativeConnection(asyncio.Protocol):
    def __init__(self, listener: NativeListener) -> None:
        self.listener = listener
        self.app = listener.app
        self.parser = NativeParser(self.app.service.limits.max_body_bytes)
        self.queue: deque[NativeRequest | AgtpError] = deque()
        self.transport: asyncio.Transport | None = None
        self.tls: dict[str, Any] | None = None
        self.worker: asyncio.Task[None] | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.partial_since: float | None = None
        self.idle_since = 0.0  # set when the connection is made and after each answer
        self.paused = False
        self.closing = False
        self.draining = False  # the listener is stopping: close once nothing is left to answer
        self.client: str | None = None  # the peer's address
        self.slot: str | None = None  # what it is counted under in listener.per_client
        self.fresh = True  # no request yet: it must come within request_timeout
        self.lingering = False  # the 400 sent, our side half-closed: input is dropped
        self.lingered = 0
        self.writable = asyncio.Event()  # the client reads what we write
        self.writable.set()

    # -- asyncio.Protocol ------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        ext = tls_extension(transport.get_extra_info("ssl_object"))
        self.tls = {"tls": ext} if ext is not None else None
        peer = transport.get_extra_info("peername")
        client = str(peer[0]) if isinstance(peer, tuple) and peer else "?"
        slot = client_key(client)  # an IPv6 client counts by its /64
        listener = self.listener
        if len(listener.connections) >= listener.max_connections:
            self._refuse("too many connections; try again later")
            return
        if listener.per_client.get(slot, 0) >= listener.max_per_client:
            self._refuse("too many connections from this address; try again later")
            return
        listener.connections.add(self)
        self.client = client
        self.slot = slot
        listener.per_client[slot] = listener.per_client.get(slot, 0) + 1
        self.idle_since = asyncio.get_running_loop().time()
        self._arm()

    def _refuse(self, message: str) -> None:
        assert self.transport is not None
        self._write_error(Unavailable(message))
        self.closing = True
        self.transport.close()

    def pause_writing(self) -> None:
        self.writable.clear()

    def resume_writing(self) -> None:
        self.writable.set()

    def data_received(self, data: bytes) -> None:
        if self.lingering:
            self.lingered += len(data)
            if self.lingered > LINGER_BYTES:
                self.abort()
            return
        if self.closing:
            return
        try:
            requests: list[NativeRequest | AgtpError] = list(self.parser.feed(data))
        except AgtpError as exc:
            requests = [exc]
        if self.parser.failed is not None and requests[-1] is not self.parser.failed:
            requests.append(self.parser.failed)  # answered after the good ones before it
        self.queue.extend(requests)
        if requests:
            self.fresh = False
        if self.parser.failed is not None:
            # The stream cannot be resynchronised: read no more; the worker
            # answers what came before, then the typed 400, then closes.
            log.info("native framing error", code=self.parser.failed.code)
            assert self.transport is not None
            self.transport.pause_reading()
            self.closing = True
        elif self.parser.buffered == 0:
            self.partial_since = None
        elif self.partial_since is None or requests:
            self.partial_since = asyncio.get_running_loop().time()
        if len(self.queue) >= self.listener.max_pipeline and not self.paused:
            assert self.transport is not None
            self.transport.pause_reading()
            self.paused = True
        if self.queue and self.worker is None:
            self.worker = asyncio.ensure_future(self._work())
        self._arm()

    def eof_received(self) -> bool:
        if self.lingering:  # the client has read the 400 and is done
            return False
        # Answer what was asked, then close (True keeps our side writable).
        self.close_when_done()
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        self.listener.forget(self)
        if self.slot is not None:
            left = self.listener.per_client.get(self.slot, 1) - 1
            if left:
                self.listener.per_client[self.slot] = left
            else:
                self.listener.per_client.pop(self.slot, None)
            self.slot = None
        self.writable.set()
        if self.timer is not None:
            self.timer.cancel()
        if self.worker is not None:
            self.worker.cancel()
        self.queue.clear()

    # -- answering -------------------------------------------------------------------
    async def _work(self) -> None:
        try:
            while self.queue:
                item = self.queue.popleft()
                if isinstance(item, AgtpError):
                    self._write_error(item)
                    self.queue.clear()
                    break
                if not self.writable.is_set():
                    # The client is not reading: answer (and read) no more until it does.
                    try:
                        await asyncio.wait_for(self.writable.wait(), self.listener.write_timeout)
                    except TimeoutError:
                        log.info("native client not reading; closing")
                        self.queue.clear()
                        self.closing = True
                        self.abort()
                        break
                if self.paused and len(self.queue) < self.listener.max_pipeline // 2:
                    assert self.transport is not None
                    self.transport.resume_reading()
                    self.paused = False
                creds = Credentials.from_request(item.headers, self.tls, client_address=self.client)
                facts: dict[str, Any] = {"method": item.method, "framing": "native"}
                token = NOTE.set(facts)
                started = time.perf_counter()
                try:
                    answer = await self.app.answer(
                        item.method, item.headers, item.body, creds, item.target
                    )
                finally:
                    NOTE.reset(token)
                self._write(answer)
                seconds = time.perf_counter() - started
                self.app.requests.observe(
                    "agtp", item.method, answer.status, seconds, self.client, facts
                )
        finally:
            self.worker = None
            if self.closing and self.transport is not None:
                if self.parser.failed is not None:
                    self._linger()
                else:
                    self.transport.close()
            else:
                self.idle_since = asyncio.get_running_loop().time()
                self._arm()
                if self.draining:
                    self._close_when_nothing_came()

    def _linger(self) -> None:
        """Close after a framing error's 400 without resetting the connection:
        half-close, drop what the client still sends (bounded), then close."""
        t = self.transport
        if t is None or t.is_closing():
            return
        if not t.can_write_eof():  # TLS: no half-close; close as before
            t.close()
            return
        self.lingering = True
        t.write_eof()  # after the 400 already written
        t.resume_reading()
        asyncio.get_running_loop().call_later(LINGER_SECONDS, self.abort)

    def _write(self, answer: Answer) -> None:
        if self.transport is None or self.transport.is_closing():
            return
        if answer.own_headers:  # a newer-dialect answer carries its whole header set
            self.transport.write(encode_response(answer.status, list(answer.extra), answer.body))
            return
        headers = [
            (k.decode("latin-1"), v.decode("latin-1"))
            for k, v in response_headers(answer.status, answer.task_id, self.app.server_agent_id)
        ]
        headers.extend(answer.extra)
        self.transport.write(encode_response(answer.status, headers, answer.body))

    def _write_error(self, exc: AgtpError) -> None:
        self._write(AnsApp.failure(exc, None, None, None))

    # -- closing and timers ----------------------------------------------------------
    def drain(self) -> None:
        """The listener is stopping: go on reading and answering (requests
        already in the socket buffer are answered too), close once idle."""
        self.draining = True
        if self.worker is None:
            self._close_when_nothing_came()

    def _close_when_nothing_came(self) -> None:
        """Close if still idle once the event loop has polled the socket
        again: data already received is read (data_received) by then. A
        callback scheduled now runs before that poll's reads, so hop twice."""
        loop = asyncio.get_running_loop()
        loop.call_soon(loop.call_soon, self._close_if_idle)

    def _close_if_idle(self) -> None:
        if self.worker is None and not self.queue and self.parser.buffered == 0:
            self.close_when_done()
        # else: the worker closes it when done, or the request deadline does.

    def close_when_done(self) -> None:
        self.closing = True
        if self.worker is None and self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    def _deadline(self) -> float | None:
        """When this connection must close if nothing changes: a request must
        be complete within request_timeout of its first byte, an idle
        connection lasts keep_alive_timeout; none while answering."""
        if self.closing or self.worker is not None:
            return None
        if self.partial_since is not None:
            return self.partial_since + self.listener.request_timeout
        idle = self.listener.keep_alive_timeout
        if self.fresh:  # a connection that has asked nothing yet
            idle = min(idle, self.listener.request_timeout)
        return self.idle_since + idle

    def _arm(self) -> None:
        """Make sure a timer fires no later than the deadline. A timer that
        fires earlier is kept (it re-checks), so a busy connection does not
        reschedule one per request."""
        deadline = self._deadline()
        if deadline is None:
            return  # answering (the worker re-arms when done) or closing
        if self.timer is not None:
            if self.timer.when() <= deadline:
                return
            self.timer.cancel()
        self.timer = asyncio.get_running_loop().call_at(deadline, self._expire)

    def _expire(self) -> None:
        self.timer = None
        deadline = self._deadline()
        if deadline is None:
            return
        if asyncio.get_running_loop().time() < deadline:
            self._arm()  # something happened since: wait for the new deadline
            return
        why = "request not complete in time" if self.partial_since is not None else "idle"
        log.debug("native connection closed", reason=why)
        self.close_when_done()
