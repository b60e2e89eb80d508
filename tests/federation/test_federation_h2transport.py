"""H2PeerTransport against real servers on loopback: a real ``ans serve
--demo`` (answers compared with what httpx gets), and small hypercorn HTTP/2
servers in a thread for the misbehaving cases (slow, oversized, recycling
connections, restarting, TLS, no h2 in ALPN), plus raw TCP servers that hang
up or speak garbage."""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qs

import orjson
import pytest
from ans.federation.h2transport import H2PeerTransport
from ans.federation.peers import Peer
from ans.federation.transport import (
    HttpxTransport,
    PeerBadResponse,
    PeerReply,
    PeerTimeout,
    PeerUnreachable,
)
from hypercorn.asyncio import serve
from hypercorn.config import Config as HypercornConfig

from ans.client import verify_discover_result
from tools.launcher import RunningServer, start_server, stop_server

pytestmark = pytest.mark.integration

T = TypeVar("T")
MAX = 64 * 1024
IDENTITY = {
    "agtp-version": "AGTP/1.0",
    "content-type": "application/agtp+json",
    "agent-id": "agtp://o.example/agents/orch",
    "principal-id": "usr-1",
    "authority-scope": "discovery:query",
}
INTENTS = [
    "book a flight",
    "translate a contract into German",
    "summarize quarterly sales",
    "schedule a meeting with the team",
    "check invoices for fraud",
]


def run(coro: Awaitable[T]) -> T:
    """Run on a fresh loop; an exception reaching the loop's handler fails the test."""
    errors: list[dict[str, Any]] = []

    async def main() -> T:
        asyncio.get_running_loop().set_exception_handler(lambda _loop, ctx: errors.append(ctx))
        return await coro

    result = asyncio.run(main())
    assert errors == []
    return result


def discover_body(intent: str, task_id: str | None = None) -> bytes:
    doc: dict[str, Any] = {"method": "DISCOVER", "parameters": {"intent": intent}}
    if task_id is not None:
        doc["task_id"] = task_id
    return orjson.dumps(doc)


# -- a real ANS ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ans(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    cfg = tmp_path_factory.mktemp("h2t-config") / "ans.toml"
    cfg.write_text("[rate_limit]\nenabled = false\n")
    srv = start_server(tmp_path_factory.mktemp("h2t-data"), "--demo", "--config", str(cfg))
    yield srv
    stop_server(srv)


def volatile_out(body: bytes) -> bytes:
    """The answer without what differs per request (query id, time, signature)."""
    result = orjson.loads(body)["result"]
    for value in (
        result["query_id"],
        result["generated_at"],
        result["ans_signature"]["value"],
    ):
        body = body.replace(value.encode(), b"~")
    return body


def test_discover_same_bytes_as_httpx(ans: RunningServer) -> None:
    peer = Peer(url=ans.url, tier=2)

    async def go() -> tuple[PeerReply, PeerReply, PeerReply, PeerReply]:
        h2t, hx = H2PeerTransport(4 * 1024 * 1024), HttpxTransport(4 * 1024 * 1024)
        try:
            body = discover_body("summarize a pdf report")  # several matches in the demo
            lean = await h2t.send(peer, "DISCOVER", ans.url + "/", IDENTITY, body, 10)
            ref = await hx.send(peer, "DISCOVER", ans.url + "/", IDENTITY, body, 10)
            jwks = await h2t.send(peer, "GET", peer.key_url, {}, b"", 10)
            jwks_ref = await hx.send(peer, "GET", peer.key_url, {}, b"", 10)
            assert h2t.connection_count() == 1  # the GET reused the DISCOVER's connection
            return lean, ref, jwks, jwks_ref
        finally:
            await h2t.aclose()
            await hx.aclose()

    lean, ref, jwks, jwks_ref = run(go())
    assert lean.status == ref.status == 200
    assert len(lean.body) > 1500  # a real answer with several signed results
    assert volatile_out(lean.body) == volatile_out(ref.body)
    assert jwks.status == 200 and jwks.body == jwks_ref.body
    verify_discover_result(
        orjson.loads(lean.body)["result"], orjson.loads(jwks.body), {"intent": "summarize a pdf report"}
    )


def test_twenty_concurrent_requests_share_one_connection(ans: RunningServer) -> None:
    peer = Peer(url=ans.url, tier=2)

    async def go() -> tuple[list[PeerReply], list[PeerReply], int]:
        t = H2PeerTransport(4 * 1024 * 1024)
        try:
            sequential = [
                await t.send(peer, "DISCOVER", ans.url + "/", IDENTITY, discover_body(i), 10)
                for i in INTENTS
            ]
            replies = await asyncio.gather(
                *(
                    t.send(
                        peer,
                        "DISCOVER",
                        ans.url + "/",
                        {**IDENTITY, "task-id": f"task-{n}"},
                        discover_body(INTENTS[n % len(INTENTS)], f"task-{n}"),
                        10,
                    )
                    for n in range(20)
                )
            )
            return sequential, replies, t.connection_count()
        finally:
            await t.aclose()

    sequential, replies, conns = run(go())
    assert conns == 1
    expected = [orjson.loads(r.body)["result"]["results"] for r in sequential]
    for n, reply in enumerate(replies):
        assert reply.status == 200
        doc = orjson.loads(reply.body)
        assert doc["task_id"] == f"task-{n}"  # each answer on its own stream
        assert doc["result"]["results"] == expected[n % len(INTENTS)]


def test_aclose_leaves_no_task_and_no_socket(ans: RunningServer) -> None:
    peer = Peer(url=ans.url, tier=2)

    async def go() -> None:
        fds_before = len(os.listdir("/proc/self/fd"))
        t = H2PeerTransport(MAX * 16)
        replies = await asyncio.gather(
            *(
                t.send(peer, "DISCOVER", ans.url + "/", IDENTITY, discover_body(i), 10)
                for i in INTENTS
            )
        )
        assert [r.status for r in replies] == [200] * len(INTENTS)
        conns = list(t._conns)
        assert len(conns) == 1
        await t.aclose()
        await t.aclose()  # idempotent
        assert t.connection_count() == 0
        assert all(c.closed.done() and c.transport is None for c in conns)
        assert asyncio.all_tasks() == {asyncio.current_task()}
        assert len(os.listdir("/proc/self/fd")) <= fds_before

    run(go())


# -- small misbehaving servers -----------------------------------------------------------


class Tiny:
    """A hypercorn HTTP/2 server in its own thread. Paths:
    ``/echo`` (method, path, headers, body as JSON), ``/big?n=`` (n bytes with
    content-length), ``/stream?n=`` (n bytes in chunks, no content-length),
    ``/sleep?s=`` (answers after s seconds), ``/slow`` (50 ms; counts streams
    in flight)."""

    def __init__(
        self,
        port: int = 0,
        tls: tuple[Path, Path] | None = None,
        alpn: tuple[str, ...] = ("h2", "http/1.1"),
        max_requests: int = 1000,
        max_streams: int = 100,
    ) -> None:
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", port))
        self.sock.listen(64)
        self.port: int = self.sock.getsockname()[1]
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}"
        hc = HypercornConfig()
        hc.bind = [f"fd://{self.sock.detach()}"]
        hc.keep_alive_max_requests = max_requests
        hc.h2_max_concurrent_streams = max_streams
        hc.graceful_timeout = 0.2
        hc.accesslog = None
        if tls is not None:
            hc.certfile, hc.keyfile = str(tls[0]), str(tls[1])
            hc.alpn_protocols = list(alpn)
        self.clients: set[tuple[str, int]] = set()
        self.inflight = 0
        self.max_inflight = 0
        self.requests = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._release: asyncio.Event | None = None
        ready = threading.Event()

        def main() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            self._stop, self._release = asyncio.Event(), asyncio.Event()
            ready.set()
            loop.run_until_complete(serve(self.app, hc, shutdown_trigger=self._stop.wait))  # type: ignore[arg-type]
            loop.close()

        self._thread = threading.Thread(target=main, daemon=True)
        self._thread.start()
        assert ready.wait(10)

    async def app(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        body = b""
        while True:
            msg = await receive()
            body += msg.get("body", b"")
            if not msg.get("more_body"):
                break
        self.requests += 1
        self.clients.add(tuple(scope["client"]))
        query = {k: v[0] for k, v in parse_qs(scope["query_string"].decode()).items()}
        path = scope["path"]
        out = b"ok"
        headers = [(b"content-type", b"application/json")]
        if path == "/echo":
            out = orjson.dumps(
                {
                    "method": scope["method"],
                    "path": scope["path"],
                    "http_version": scope["http_version"],
                    "headers": [[k.decode(), v.decode()] for k, v in scope["headers"]],
                    "body": body.decode(),
                }
            )
        elif path == "/big":
            out = b"x" * int(query["n"])
            headers.append((b"content-length", str(len(out)).encode()))
        elif path == "/stream":
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            left = int(query["n"])
            while left > 0:
                chunk = min(left, 16384)
                left -= chunk
                await send({"type": "http.response.body", "body": b"y" * chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
            return
        elif path == "/sleep":
            assert self._release is not None
            try:  # let stop() cut it short so no request is left hanging
                await asyncio.wait_for(self._release.wait(), float(query["s"]))
            except TimeoutError:
                pass
        elif path == "/slow":
            self.inflight += 1
            self.max_inflight = max(self.max_inflight, self.inflight)
            try:
                await asyncio.sleep(0.05)
            finally:
                self.inflight -= 1
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": out})

    def stop(self) -> None:
        assert self._loop is not None and self._stop is not None and self._release is not None
        self._loop.call_soon_threadsafe(self._release.set)
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout=10)
        assert not self._thread.is_alive()


@pytest.fixture
def tiny() -> Iterator[Callable[..., Tiny]]:
    made: list[Tiny] = []

    def make(**kw: Any) -> Tiny:
        server = Tiny(**kw)
        made.append(server)
        return server

    yield make
    for server in made:
        if server._thread.is_alive():
            server.stop()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def get(
    t: H2PeerTransport, base: str, path: str, timeout: float = 5.0, **kw: Any
) -> PeerReply:
    return await t.send(Peer(url=base, tier=2, **kw), "GET", base + path, {}, b"", timeout)


def test_headers_as_sent(tiny: Callable[..., Tiny]) -> None:
    srv = tiny()

    async def go() -> dict[str, Any]:
        t = H2PeerTransport(MAX)
        try:
            headers = {**IDENTITY, "Task-ID": "t-1", "Connection": "close", "Host": "evil"}
            body = discover_body("x", "t-1")
            reply = await t.send(
                Peer(url=srv.url, tier=2), "DISCOVER", srv.url + "/echo", headers, body, 5
            )
            assert reply.status == 200
            doc: dict[str, Any] = orjson.loads(reply.body)
            return doc
        finally:
            await t.aclose()

    doc = run(go())
    assert (doc["method"], doc["path"], doc["http_version"]) == ("DISCOVER", "/echo", "2")
    headers = dict(doc["headers"])
    assert headers["task-id"] == "t-1" and headers["agent-id"] == IDENTITY["agent-id"]
    assert headers["content-length"] == str(len(discover_body("x", "t-1")))
    assert "connection" not in headers and headers.get("host") in (None, f"127.0.0.1:{srv.port}")
    assert doc["body"] == discover_body("x", "t-1").decode()


def test_request_body_beyond_the_send_window(tiny: Callable[..., Tiny]) -> None:
    srv = tiny()  # hypercorn grants 65,535 bytes until it acknowledges data
    payload = b"z" * 300_000

    async def go() -> dict[str, Any]:
        t = H2PeerTransport(1024 * 1024)
        try:
            peer = Peer(url=srv.url, tier=2)
            reply = await t.send(peer, "DISCOVER", srv.url + "/echo", {}, payload, 5)
            assert reply.status == 200
            doc: dict[str, Any] = orjson.loads(reply.body)
            return doc
        finally:
            await t.aclose()

    doc = run(go())
    assert doc["body"] == payload.decode()


def test_oversized_answers_reset_the_stream_not_the_connection(tiny: Callable[..., Tiny]) -> None:
    srv = tiny()

    async def go() -> None:
        big = H2PeerTransport(4 * 1024 * 1024)  # several MiB: flow-control windows are opened
        try:
            reply = await get(big, srv.url, f"/stream?n={3 * 1024 * 1024}")
            assert reply.body == b"y" * (3 * 1024 * 1024)
        finally:
            await big.aclose()
        t = H2PeerTransport(MAX)
        try:
            assert (await get(t, srv.url, f"/big?n={MAX}")).body == b"x" * MAX  # at the bound
            with pytest.raises(PeerBadResponse, match=f"{MAX + 1} bytes exceeds {MAX}"):
                await get(t, srv.url, f"/big?n={MAX + 1}")  # declared too big
            with pytest.raises(PeerBadResponse, match=f"exceeds {MAX} bytes"):
                await get(t, srv.url, f"/stream?n={4 * MAX}")  # streamed too big
            reply = await get(t, srv.url, "/echo")
            assert reply.status == 200
            assert t.connection_count() == 1 and len(srv.clients) == 2  # big's, then t's only
        finally:
            await t.aclose()

    run(go())


def test_slow_server_times_out_and_the_connection_stays(tiny: Callable[..., Tiny]) -> None:
    srv = tiny()

    async def go() -> None:
        t = H2PeerTransport(MAX)
        try:
            await get(t, srv.url, "/echo")
            started = time.monotonic()
            with pytest.raises(PeerTimeout, match=r"within 0\.300s"):
                await get(t, srv.url, "/sleep?s=5", timeout=0.3)
            # Cut off by the timeout, long before the answer due at 5 s (with
            # headroom for a loaded machine).
            assert 0.3 <= time.monotonic() - started < 2.5
            assert (await get(t, srv.url, "/echo")).status == 200
            assert t.connection_count() == 1 and len(srv.clients) == 1
            assert not next(iter(t._conns)).streams  # the timed-out stream was reset and dropped
        finally:
            await t.aclose()

    run(go())


def test_connection_refused() -> None:
    url = f"http://127.0.0.1:{free_port()}"

    async def go() -> None:
        t = H2PeerTransport(MAX)
        try:
            with pytest.raises(PeerUnreachable, match="cannot connect"):
                await get(t, url, "/")
            assert t.connection_count() == 0
        finally:
            await t.aclose()

    run(go())


def test_recycled_connections_are_reopened(tiny: Callable[..., Tiny]) -> None:
    # hypercorn sends GOAWAY on the 3rd request of a connection and answers
    # nothing more on it: that request is retried on a fresh connection.
    srv = tiny(max_requests=2)

    async def go() -> None:
        t = H2PeerTransport(MAX)
        try:
            for _ in range(7):
                assert (await get(t, srv.url, "/echo")).status == 200
            assert t.connection_count() == 1
        finally:
            await t.aclose()

    run(go())
    assert len(srv.clients) >= 3


def test_server_restart_between_requests(tiny: Callable[..., Tiny]) -> None:
    first = tiny()

    async def go() -> None:
        t = H2PeerTransport(MAX)
        try:
            assert (await get(t, first.url, "/echo")).status == 200
            await asyncio.to_thread(first.stop)
            with pytest.raises(PeerUnreachable):
                await get(t, first.url, "/echo")  # down
            second = await asyncio.to_thread(tiny, port=first.port)
            assert (await get(t, first.url, "/echo")).status == 200
            assert len(second.clients) == 1 and t.connection_count() == 1
        finally:
            await t.aclose()

    run(go())


def test_max_concurrent_streams_is_respected(tiny: Callable[..., Tiny]) -> None:
    srv = tiny(max_streams=3)

    async def go() -> None:
        t = H2PeerTransport(MAX)
        try:
            replies = await asyncio.gather(*(get(t, srv.url, "/slow") for _ in range(20)))
            assert [r.body for r in replies] == [b"ok"] * 20
            assert t.connection_count() == 1
        finally:
            await t.aclose()

    run(go())
    assert srv.max_inflight == 3 and len(srv.clients) == 1


class RawServer:
    """asyncio TCP server that reads, then answers ``reply`` (maybe nothing) and hangs up."""

    def __init__(self, reply: bytes) -> None:
        self.reply = reply
        self.connections = 0
        self.server: asyncio.Server | None = None
        self.url = ""

    async def __aenter__(self) -> RawServer:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.connections += 1
            await reader.read(100)
            writer.write(self.reply)
            await writer.drain()
            writer.close()

        self.server = await asyncio.start_server(handle, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()


SETTINGS = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"  # an empty SETTINGS frame
BAD_DATA = b"\x00\x00\x00\x00\x00\x00\x00\x00\x00"  # DATA on stream 0


@pytest.mark.parametrize(
    ("reply", "reason", "connections"),
    [
        (b"", "connection closed: connection closed by the peer", 2),
        (SETTINGS + BAD_DATA, "connection closed: HTTP/2 protocol error", 2),
        (b"HTTP/1.1 400 Bad Request\r\n\r\n", "does not speak HTTP/2", 1),
    ],
)
def test_hang_up_or_garbage(reply: bytes, reason: str, connections: int) -> None:
    """No answer at all: retried once on a fresh connection, then unreachable.
    Not HTTP/2 at all: unreachable at once."""

    async def go() -> None:
        async with RawServer(reply) as srv:
            t = H2PeerTransport(MAX)
            try:
                with pytest.raises(PeerUnreachable, match=reason):
                    await get(t, srv.url, "/")
                assert srv.connections == connections
            finally:
                await t.aclose()

    run(go())


# -- TLS -----------------------------------------------------------------------------------


def test_tls_with_and_without_the_cacert(
    tiny: Callable[..., Tiny], tls_cert: tuple[Path, Path]
) -> None:
    cert, key = tls_cert
    srv = tiny(tls=(cert, key))

    async def go() -> dict[str, Any]:
        t = H2PeerTransport(MAX)
        try:
            with pytest.raises(PeerUnreachable, match="CERTIFICATE_VERIFY_FAILED"):
                await get(t, srv.url, "/echo")  # the system store does not know it
            reply = await get(t, srv.url, "/echo", cacert=cert)
            assert reply.status == 200
            doc: dict[str, Any] = orjson.loads(reply.body)
            return doc
        finally:
            await t.aclose()

    doc = run(go())
    assert doc["http_version"] == "2"


def test_tls_server_without_h2_is_unreachable(
    tiny: Callable[..., Tiny], tls_cert: tuple[Path, Path]
) -> None:
    cert, key = tls_cert
    srv = tiny(tls=(cert, key), alpn=("http/1.1",))

    async def go() -> None:
        t = H2PeerTransport(MAX)
        try:
            with pytest.raises(PeerUnreachable, match="did not select h2"):
                await get(t, srv.url, "/echo", cacert=cert)
        finally:
            await t.aclose()
        assert t.connection_count() == 0

    run(go())


# -- routing and bounds ------------------------------------------------------------------


def test_other_origins_go_to_the_other_transport(tiny: Callable[..., Tiny], recorder: Any) -> None:
    srv = tiny()
    other = recorder()
    peer = Peer(url=srv.url, tier=2, jwks_url="https://keys.example/jwks.json")

    async def go() -> None:
        t = H2PeerTransport(MAX, other_origins=other)
        await t.send(peer, "GET", peer.key_url, {}, b"", 5)
        assert (await t.send(peer, "GET", srv.url + "/echo", {}, b"", 5)).status == 200
        assert (await t.send(peer, "GET", srv.url, {}, b"", 5)).status == 200
        await t.aclose()

    run(go())
    assert other.urls == ["https://keys.example/jwks.json"]
    assert other.closed == 1


def test_least_recently_used_origin_is_closed(tiny: Callable[..., Tiny]) -> None:
    servers = [tiny() for _ in range(3)]

    async def go() -> None:
        t = H2PeerTransport(MAX, max_origins=2)
        try:
            for srv in servers:
                assert (await get(t, srv.url, "/echo")).status == 200
            deadline = time.monotonic() + 10  # the evicted (idle) connection closes
            while t.connection_count() != 2 and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            assert t.connection_count() == 2
            assert (await get(t, servers[0].url, "/echo")).status == 200  # reopened
        finally:
            await t.aclose()

    run(go())
    assert len(servers[0].clients) == 2


def test_invalid_request_headers_are_refused_locally() -> None:
    async def go() -> None:
        t = H2PeerTransport(MAX)
        peer = Peer(url="http://127.0.0.1:9", tier=2)
        with pytest.raises(PeerUnreachable, match="invalid value"):
            await t.send(peer, "GET", peer.url + "/", {"agent-id": "a\r\nx: y"}, b"", 1)
        with pytest.raises(PeerUnreachable, match="invalid request header name"):
            await t.send(peer, "GET", peer.url + "/", {"bad name": "v"}, b"", 1)
        with pytest.raises(PeerTimeout):
            await t.send(peer, "GET", peer.url + "/", {}, b"", 0)
        assert t.connection_count() == 0
        await t.aclose()

    run(go())
