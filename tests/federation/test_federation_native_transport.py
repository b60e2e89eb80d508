"""NativePeerTransport against real native AGTP/1.0 servers on loopback: small
asyncio servers in this process that parse requests with ``NativeParser``
and answer with ``encode_response`` (or misbehave: stay silent, hang up,
answer too much or garbage), plus SchemeRouter picking a transport by scheme."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import orjson
import pytest
from ans.federation.native_transport import NativePeerTransport, native_origin
from ans.federation.peers import Peer
from ans.federation.transport import (
    PeerBadResponse,
    PeerError,
    PeerReply,
    PeerTimeout,
    PeerUnreachable,
    SchemeRouter,
)
from ans.protocol.native import NativeParser, NativeRequest, encode_response

pytestmark = pytest.mark.integration

T = TypeVar("T")
MAX = 64 * 1024
HEADERS = {"Agent-ID": "agtp://o.example/agents/orch", "Principal-ID": "usr-1"}


def run(coro: Awaitable[T]) -> T:
    """Run on a fresh loop; an exception reaching the loop's handler fails the test."""
    errors: list[dict[str, Any]] = []

    async def main() -> T:
        asyncio.get_running_loop().set_exception_handler(lambda _loop, ctx: errors.append(ctx))
        return await asyncio.wait_for(coro, 20)  # a hung test fails instead of hanging

    result = asyncio.run(main())
    assert errors == []
    return result


@contextlib.asynccontextmanager
async def transport(**kw: Any) -> AsyncIterator[NativePeerTransport]:
    """A NativePeerTransport that is closed afterwards, whatever the test did."""
    t = NativePeerTransport(MAX, **kw)
    try:
        yield t
    finally:
        await t.aclose()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class Reply:
    """What the server does with one request: write ``data`` (None: nothing,
    the client waits), then hang up if ``close``."""

    data: bytes | None
    close: bool = False


def ok(body: dict[str, Any], task_id: str | None = None) -> bytes:
    headers = [("Task-ID", task_id)] if task_id else []
    return encode_response(200, headers, orjson.dumps(body))


@dataclass
class Seen:
    conn: int  # which accepted connection (0, 1, ...)
    n: int  # which request on that connection (0, 1, ...)
    request: NativeRequest


Handler = Callable[[Seen], Awaitable[Reply]]


async def echo(seen: Seen) -> Reply:
    """200 with where the request arrived and what it carried."""
    req = seen.request
    doc = {
        "conn": seen.conn,
        "n": seen.n,
        "method": req.method,
        "headers": req.headers,
        "body": req.body.decode(),
    }
    return Reply(ok(doc, req.headers.get("task-id")))


@dataclass
class NativeServer:
    """A native AGTP server on 127.0.0.1 that counts connections."""

    handler: Handler = echo
    tls: ssl.SSLContext | None = None
    accepted: int = 0
    open: int = 0
    peak: int = 0
    client_closed: int = 0  # connections the client hung up on (we read EOF)
    seen: list[Seen] = field(default_factory=list)
    url: str = ""
    _server: asyncio.Server | None = None
    _writers: set[asyncio.StreamWriter] = field(default_factory=set)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        self._writers.add(writer)
        conn = self.accepted
        self.accepted += 1
        self.open += 1
        self.peak = max(self.peak, self.open)
        parser = NativeParser()
        n = 0
        try:
            while True:
                try:
                    data = await reader.read(65536)
                except ConnectionError:
                    data = b""
                if not data:
                    self.client_closed += 1
                    return
                for req in parser.feed(data):
                    seen = Seen(conn, n, req)
                    n += 1
                    self.seen.append(seen)
                    reply = await self.handler(seen)
                    if reply.data is not None:
                        writer.write(reply.data)
                        await writer.drain()
                    if reply.close:
                        return
        finally:
            self.open -= 1
            self._writers.discard(writer)
            writer.close()

    async def __aenter__(self) -> NativeServer:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0, ssl=self.tls)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"{'agtp' if self.tls else 'agtp+cleartext'}://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for writer in list(self._writers):
            writer.close()  # the handlers read EOF and return
        if self._tasks:
            _, stuck = await asyncio.wait(self._tasks, timeout=2)
            assert not stuck, "a server handler did not finish"
        await self._server.wait_closed()

    async def until(self, check: Callable[[], bool], within: float = 2.0) -> None:
        """Wait (bounded) until ``check()`` holds."""
        end = time.monotonic() + within
        while not check():
            assert time.monotonic() < end, "condition not reached in time"
            await asyncio.sleep(0.01)

    @property
    def peer(self) -> Peer:
        return Peer(url=self.url, tier=2)


async def send(
    t: NativePeerTransport | SchemeRouter,
    srv: NativeServer,
    task_id: str = "t-1",
    timeout: float = 2.0,
    method: str = "DISCOVER",
) -> PeerReply:
    headers = {**HEADERS, "Task-ID": task_id}
    body = orjson.dumps({"method": method, "task_id": task_id, "parameters": {"intent": "x"}})
    return await t.send(srv.peer, method, srv.url + "/", headers, body, timeout)


def where(reply: PeerReply) -> tuple[int, int]:
    """(connection, request number on it) the server saw the request on."""
    doc = orjson.loads(reply.body)
    return doc["conn"], doc["n"]


# -- the happy path ------------------------------------------------------------------------


def test_request_as_sent_and_sequential_requests_reuse_one_connection() -> None:
    async def go() -> None:
        async with NativeServer() as srv:
            async with transport() as t:
                replies = [await send(t, srv, f"t-{i}") for i in range(5)]
                assert [r.status for r in replies] == [200] * 5
                assert [where(r) for r in replies] == [(0, i) for i in range(5)]
                assert srv.accepted == 1 and srv.peak == 1
                first = orjson.loads(replies[0].body)
                assert first["method"] == "DISCOVER"
                assert first["headers"]["agent-id"] == HEADERS["Agent-ID"]
                assert first["headers"]["task-id"] == "t-0"
                assert orjson.loads(first["body"])["task_id"] == "t-0"
            await srv.until(lambda: srv.client_closed == 1)  # aclose closed the idle one

    run(go())


def test_native_origin() -> None:
    assert native_origin("agtp://ans.example") == (True, "ans.example", 8080, None, None)
    assert native_origin("agtp+cleartext://127.0.0.1:9/", "ca.pem") == (
        False,
        "127.0.0.1",
        9,
        "ca.pem",
        None,
    )
    assert native_origin("agtp://h:1", None, ("c.pem", "k.pem"))[4] == ("c.pem", "k.pem")
    for bad in ("http://127.0.0.1:9", "agtp://", "ftp://x"):
        with pytest.raises(PeerUnreachable):
            native_origin(bad)


# -- connections that go away --------------------------------------------------------------


def test_server_closing_an_idle_connection_between_requests() -> None:
    async def handler(seen: Seen) -> Reply:
        reply = await echo(seen)
        return Reply(reply.data, close=True)  # answer, then hang up (one request per conn)

    async def go() -> None:
        async with NativeServer(handler) as srv, transport() as t:
            assert where(await send(t, srv, "t-1")) == (0, 0)
            await srv.until(lambda: srv.open == 0)
            assert where(await send(t, srv, "t-2")) == (1, 0)
            assert where(await send(t, srv, "t-3")) == (2, 0)
            assert srv.accepted == 3

    run(go())


def test_reused_connection_closed_before_any_answer_is_retried_once() -> None:
    async def handler(seen: Seen) -> Reply:
        if seen.conn == 0 and seen.n == 1:
            return Reply(None, close=True)  # took the request, hung up without a byte
        return await echo(seen)

    async def go() -> None:
        async with NativeServer(handler) as srv, transport() as t:
            assert where(await send(t, srv, "t-1")) == (0, 0)
            reply = await send(t, srv, "t-2")
            assert reply.status == 200 and where(reply) == (1, 0)
            # The request reached the server twice: on the dropped one, then the fresh one.
            tasks = [(s.conn, s.request.headers["task-id"]) for s in srv.seen]
            assert tasks == [(0, "t-1"), (0, "t-2"), (1, "t-2")]
            assert where(await send(t, srv, "t-3")) == (1, 1)  # the fresh one is kept
            assert srv.accepted == 2

    run(go())


def test_fresh_connection_closed_without_an_answer_is_not_retried() -> None:
    async def handler(seen: Seen) -> Reply:
        return Reply(None, close=True)

    async def go() -> None:
        async with NativeServer(handler) as srv, transport() as t:
            with pytest.raises(PeerUnreachable, match="closed the connection") as exc:
                await send(t, srv)
            assert exc.value.code == "peer_unreachable"
            assert srv.accepted == 1 and len(srv.seen) == 1

    run(go())


def test_connection_closed_mid_answer_is_not_retried() -> None:
    async def handler(seen: Seen) -> Reply:
        reply = await echo(seen)
        assert reply.data is not None
        if seen.n == 1:
            return Reply(reply.data[:20], close=True)  # part of an answer, then gone
        return reply

    async def go() -> None:
        async with NativeServer(handler) as srv, transport() as t:
            await send(t, srv, "t-1")
            with pytest.raises(PeerUnreachable):
                await send(t, srv, "t-2")
            # Answer bytes had come: the request may have been acted on; not resent.
            assert [s.request.headers["task-id"] for s in srv.seen] == ["t-1", "t-2"]
            assert srv.accepted == 1

    run(go())


def test_connection_refused() -> None:
    async def go() -> None:
        t = NativePeerTransport(MAX)
        url = f"agtp+cleartext://127.0.0.1:{free_port()}"
        try:
            started = time.monotonic()
            with pytest.raises(PeerUnreachable, match="cannot connect") as exc:
                await t.send(Peer(url=url, tier=2), "DISCOVER", url + "/", HEADERS, b"{}", 2)
            assert exc.value.code == "peer_unreachable"
            assert time.monotonic() - started < 1.9  # refused at once, not the 2 s timeout
        finally:
            await t.aclose()

    run(go())


# -- slow, oversized and malformed answers -------------------------------------------------


def test_silent_server_times_out_and_the_connection_is_not_reused() -> None:
    async def handler(seen: Seen) -> Reply:
        if seen.request.headers["task-id"] == "stuck":
            return Reply(None)  # read it, never answer
        return await echo(seen)

    async def go() -> None:
        async with NativeServer(handler) as srv, transport() as t:
            assert where(await send(t, srv, "t-1")) == (0, 0)
            started = time.monotonic()
            with pytest.raises(PeerTimeout, match=r"within 0\.300s") as exc:
                await send(t, srv, "stuck", timeout=0.3)
            assert 0.3 <= time.monotonic() - started < 2.0
            assert exc.value.code == "peer_timeout"
            await srv.until(lambda: srv.client_closed == 1)  # we hung up on it
            # A late answer on that connection can never be taken for the next one.
            assert where(await send(t, srv, "t-2")) == (1, 0)
            assert srv.accepted == 2

    run(go())


def test_timeout_covers_the_wait_for_a_connection_slot() -> None:
    """max_connections=1: a request queued behind a silent one gets the slot
    once the silent one times out (its connection closed), on a new connection."""

    async def handler(seen: Seen) -> Reply:
        if seen.request.headers["task-id"] == "stuck":
            return Reply(None)
        return await echo(seen)

    async def go() -> None:
        async with NativeServer(handler) as srv, transport(max_connections=1) as t:
            stuck = asyncio.ensure_future(send(t, srv, "stuck", timeout=0.3))
            await asyncio.sleep(0.05)
            waiting_short = asyncio.ensure_future(send(t, srv, "short", timeout=0.1))
            waiting = asyncio.ensure_future(send(t, srv, "t-2", timeout=2.0))
            with pytest.raises(PeerTimeout):
                await stuck
            with pytest.raises(PeerTimeout):
                await waiting_short  # gave up while queued for the slot
            assert where(await waiting) == (1, 0)
            assert [s.request.headers["task-id"] for s in srv.seen] == ["stuck", "t-2"]
            assert srv.accepted == 2

    run(go())


def test_oversized_answer_is_a_bad_response() -> None:
    async def handler(seen: Seen) -> Reply:
        size = int(seen.request.headers["task-id"].removeprefix("n-"))
        return Reply(encode_response(200, [], b"x" * size))

    async def go() -> None:
        async with NativeServer(handler) as srv:
            t = NativePeerTransport(1024)
            try:
                assert (await send(t, srv, "n-1024")).body == b"x" * 1024  # at the bound
                with pytest.raises(PeerBadResponse, match="1025 bytes; the limit is 1024") as exc:
                    await send(t, srv, "n-1025")
                assert exc.value.code == "peer_bad_response"
                await srv.until(lambda: srv.client_closed == 1)  # that connection is dropped
                assert (await send(t, srv, "n-10")).body == b"x" * 10
                assert srv.accepted == 2
            finally:
                await t.aclose()

    run(go())


@pytest.mark.parametrize(
    "garbage",
    [
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}",
        b"AGTP/1.0 200 OK\r\nContent-Length: lots\r\n\r\n",
        b"AGTP/1.0 200 OK\r\nno colon\r\n\r\n",
    ],
)
def test_malformed_answer_is_a_bad_response(garbage: bytes) -> None:
    async def handler(seen: Seen) -> Reply:
        return Reply(garbage if seen.conn == 0 else (await echo(seen)).data)

    async def go() -> None:
        async with NativeServer(handler) as srv, transport() as t:
            with pytest.raises(PeerBadResponse, match="bad AGTP framing"):
                await send(t, srv)
            await srv.until(lambda: srv.client_closed == 1)
            assert where(await send(t, srv, "t-2")) == (1, 0)

    run(go())


@pytest.mark.parametrize(
    "extra", [b"junk\r\n\r\n", b"AGTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n"]
)
def test_more_than_one_answer_drops_the_connection(extra: bytes) -> None:
    """An answer followed, in the same write, by bytes nobody asked for: the
    answer is used, and the out-of-step connection is not used again."""

    async def handler(seen: Seen) -> Reply:
        reply = await echo(seen)
        assert reply.data is not None
        return Reply(reply.data + extra if seen.conn == 0 else reply.data)

    async def go() -> None:
        async with NativeServer(handler) as srv, transport() as t:
            assert where(await send(t, srv, "t-1")) == (0, 0)
            assert where(await send(t, srv, "t-2")) == (1, 0)
            assert where(await send(t, srv, "t-3")) == (1, 1)
            assert srv.accepted == 2

    run(go())


def test_an_unframeable_request_is_refused_before_connecting() -> None:
    async def go() -> None:
        async with NativeServer() as srv, transport() as t:
            headers = {"Agent-ID": "a\r\nAuthority-Scope: discovery:admin"}
            with pytest.raises(PeerError, match="cannot be framed") as exc:
                await t.send(srv.peer, "DISCOVER", srv.url + "/", headers, b"{}", 2)
            assert exc.value.code == "peer_error"
            assert srv.accepted == 0

    run(go())


# -- concurrency bounds --------------------------------------------------------------------


@pytest.mark.parametrize(("limit", "concurrent"), [(1, 3), (2, 6)])
def test_max_connections_bounds_open_connections(limit: int, concurrent: int) -> None:
    inflight = {"now": 0, "peak": 0}

    async def handler(seen: Seen) -> Reply:
        inflight["now"] += 1
        inflight["peak"] = max(inflight["peak"], inflight["now"])
        await asyncio.sleep(0.05)
        inflight["now"] -= 1
        return await echo(seen)

    async def go() -> None:
        async with NativeServer(handler) as srv, transport(max_connections=limit) as t:
            replies = await asyncio.gather(*(send(t, srv, f"t-{i}") for i in range(concurrent)))
            assert [r.status for r in replies] == [200] * concurrent
            tasks = [orjson.loads(r.body)["headers"]["task-id"] for r in replies]
            assert tasks == [f"t-{i}" for i in range(concurrent)]  # each got its own answer
            assert srv.accepted == limit and srv.peak == limit
            assert inflight["peak"] == limit  # the limit was used, not exceeded
            per_conn = sorted(sum(1 for s in srv.seen if s.conn == c) for c in range(limit))
            assert sum(per_conn) == concurrent

    run(go())


# -- TLS (agtp://) -------------------------------------------------------------------------


def test_tls_with_and_without_the_cacert(tls_cert: tuple[Path, Path]) -> None:
    cert, key = tls_cert
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)

    async def go() -> None:
        async with NativeServer(tls=ctx) as srv:
            assert srv.url.startswith("agtp://127.0.0.1:")
            t = NativePeerTransport(MAX)
            try:
                trusted = Peer(url=srv.url, tier=2, cacert=cert)
                body = b'{"method":"DESCRIBE","parameters":{}}'
                reply = await t.send(trusted, "DESCRIBE", srv.url + "/", HEADERS, body, 5)
                assert reply.status == 200 and orjson.loads(reply.body)["method"] == "DESCRIBE"
                with pytest.raises(PeerUnreachable, match="cannot connect"):
                    await t.send(srv.peer, "DESCRIBE", srv.url + "/", HEADERS, body, 5)
            finally:
                await t.aclose()

    run(go())


# -- SchemeRouter --------------------------------------------------------------------------


def test_scheme_router_picks_the_transport_by_scheme(recorder: Any) -> None:
    async def go() -> None:
        async with NativeServer() as srv:
            h2 = recorder(204, b"")
            native = NativePeerTransport(MAX)
            router = SchemeRouter(
                {"http": h2, "https": h2, "agtp": native, "agtp+cleartext": native}
            )
            try:
                reply = await send(router, srv, "t-native")
                assert reply.status == 200 and where(reply) == (0, 0)
                http_peer = Peer(url="http://127.0.0.1:1", tier=2)
                got = await router.send(http_peer, "GET", "https://k.example/j", {}, b"", 1)
                assert got.status == 204
                assert h2.urls == ["https://k.example/j"] and srv.accepted == 1
                for url in ("ftp://127.0.0.1:1/", "agtp+tls://127.0.0.1:1/", "127.0.0.1:1"):
                    with pytest.raises(PeerUnreachable, match="no transport"):
                        await router.send(http_peer, "DISCOVER", url, {}, b"", 1)
                assert len(h2.urls) == 1 and len(srv.seen) == 1  # nobody was asked
            finally:
                await router.aclose()
            assert h2.closed == 1  # one transport under two schemes: closed once
            await srv.until(lambda: srv.client_closed == 1)  # and the native one closed too

    run(go())


def test_least_recently_used_origin_is_closed() -> None:
    """max_origins=1: asking a second peer closes the first one's idle
    connection, and a busy one as soon as its answer is in."""

    async def slow(seen: Seen) -> Reply:
        if seen.request.headers["task-id"] == "slow":
            await asyncio.sleep(0.2)
        return await echo(seen)

    async def go() -> None:
        async with NativeServer(slow) as a, NativeServer() as b, transport(max_origins=1) as t:
            await send(t, a, "t-1")
            await send(t, b, "t-2")  # a's pool is dropped: its idle connection closed
            await a.until(lambda: a.client_closed == 1)
            pending = asyncio.ensure_future(send(t, a, "slow"))
            await a.until(lambda: len(a.seen) == 2)
            await send(t, b, "t-3")  # a's pool dropped while its request is in flight
            assert (await pending).status == 200  # the answer still arrives
            await a.until(lambda: a.client_closed == 2)  # then that connection is closed
            assert where(await send(t, a, "t-4")) == (2, 0)
            assert a.accepted == 3 and b.accepted == 2

    run(go())
