"""Each HTTP/2 defence against plain hypercorn: every test runs one probe
twice on an in-process hypercorn server with a toy app, once defended and
once with the wrapped hypercorn method put back as it ships (``plain``), and
asserts that the probe passes only when defended. So each defence shows what
it changes, and a hypercorn that fixed the bug would show up here as a
plain run that passes (see docs/http2-defences.md)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import h2.config
import h2.connection
import h2.errors
import h2.events
import pytest
from hypercorn.asyncio import serve
from hypercorn.asyncio.tcp_server import TCPServer
from hypercorn.config import Config as HypercornConfig
from hypercorn.protocol import ProtocolWrapper
from hypercorn.protocol.h2 import H2Protocol
from hypercorn.protocol.h11 import H11Protocol
from hyperframe.frame import PriorityFrame

from ans import drain, http2_defences
from ans.http2_defences import hooks
from ans.http2_defences.control_frames import ControlBudget

HEADERS = [(":method", "POST"), (":path", "/"), (":scheme", "http"), (":authority", "localhost")]
BIG = 256 * 1024  # more than the client's initial window (64 KB): the answer waits for it


class ToyApp:
    """/early answers 400 before reading its body; /big answers BIG bytes;
    /slow waits for the client to go; anything else reads and answers."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.big_done = threading.Event()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        path = scope["path"]
        self.started.append(path)
        if path == "/slow":
            while (await receive())["type"] != "http.disconnect":
                pass
            return
        if path != "/early":
            while (await receive()).get("more_body"):
                pass
        status, body = (
            (400, b"no") if path == "/early" else (200, b"x" * BIG if path == "/big" else b"ok")
        )
        await send({"type": "http.response.start", "status": status, "headers": []})
        try:
            await send({"type": "http.response.body", "body": body})
        finally:
            if path == "/big":
                self.big_done.set()


@contextlib.contextmanager
def serving(
    plain: tuple[tuple[type, str], ...] = (),
    defences: http2_defences.Http2Defences = http2_defences.Http2Defences(),
    keep_alive: float = 30.0,
) -> Iterator[tuple[int, ToyApp, Callable[[], None]]]:
    """A server on loopback; the methods in ``plain`` as hypercorn ships them."""
    drain.install()
    saved = {(owner, name): getattr(owner, name) for owner, name in plain}
    for owner, name in plain:
        setattr(owner, name, hooks.plain(owner, name))
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    port = sock.getsockname()[1]
    hc = HypercornConfig()
    hc.bind = [f"fd://{sock.detach()}"]
    hc.keep_alive_timeout = keep_alive
    hc.keep_alive_max_requests = 100_000  # as ANS: long-lived sessions
    hc.graceful_timeout = 2.0
    hc.accesslog = hc.errorlog = None
    http2_defences.attach(hc, defences)
    app = ToyApp()
    ready = threading.Event()
    loop_and_stop: list[Any] = []

    async def main() -> None:
        stop = asyncio.Event()
        loop_and_stop.extend([asyncio.get_running_loop(), stop])
        ready.set()
        # Plain hypercorn may end a connection (or the server) with an error
        # or hang its shutdown: that is what some probes show, not a failure.
        with contextlib.suppress(Exception):
            await serve(app, hc, shutdown_trigger=stop.wait)  # type: ignore[arg-type]

    thread = threading.Thread(target=asyncio.run, args=(main(),), daemon=True)
    thread.start()
    ready.wait(5)
    loop, stop = loop_and_stop

    def stop_server() -> None:
        # Called again on the way out: by then a quick stop may have ended
        # the server's thread and closed its loop (seen under CPU load).
        with contextlib.suppress(RuntimeError):  # "Event loop is closed"
            loop.call_soon_threadsafe(stop.set)

    try:
        yield port, app, stop_server
    finally:
        stop_server()
        thread.join(10)
        for (owner, name), fn in saved.items():
            setattr(owner, name, fn)


class Client:
    """A bare h2c client (prior knowledge) that reads only when told to."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        self.conn.initiate_connection()
        self.events: list[h2.events.Event] = []
        self.gone = False
        self.flush()

    def flush(self) -> None:
        self.sock.sendall(self.conn.data_to_send())

    def request(self, path: str, *, end: bool = True, flush: bool = True) -> int:
        sid = self.conn.get_next_available_stream_id()
        headers = [(":method", "POST"), (":path", path), *HEADERS[2:]]
        self.conn.send_headers(sid, headers, end_stream=end)
        if flush:
            self.flush()
        return sid

    def read_until(self, done: Callable[[], bool], seconds: float = 3.0, ack: bool = True) -> bool:
        deadline = time.monotonic() + seconds
        while not done():
            if self.gone or time.monotonic() > deadline:
                return False
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                return False
            except ConnectionError:
                data = b""
            if not data:
                self.gone = True
                continue
            try:
                events = self.conn.receive_data(data)
            except h2.exceptions.ProtocolError:
                self.gone = True
                continue
            for event in events:
                self.events.append(event)
                if ack and isinstance(event, h2.events.DataReceived):
                    self.conn.acknowledge_received_data(
                        event.flow_controlled_length, event.stream_id
                    )
            with contextlib.suppress(OSError):
                self.flush()
        return True

    def ended(self, sid: int) -> bool:
        return any(isinstance(e, h2.events.StreamEnded) and e.stream_id == sid for e in self.events)

    def reset_code(self, sid: int) -> int | None:
        codes = [e.error_code for e in self.events
                 if isinstance(e, h2.events.StreamReset) and e.stream_id == sid]  # fmt: skip
        return codes[0] if codes else None

    def ping_acks(self) -> int:
        return sum(isinstance(e, h2.events.PingAckReceived) for e in self.events)

    def goaway(self) -> int | None:
        codes = [e.error_code for e in self.events if isinstance(e, h2.events.ConnectionTerminated)]
        return codes[0] if codes else None


def closed_by_server(sock: socket.socket, seconds: float) -> bool:
    """Whether the server closes ``sock`` within ``seconds`` (data is drained)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            if not sock.recv(65536):
                return True
        except TimeoutError:
            return False
        except ConnectionError:
            return True
    return False


ARMS = pytest.mark.parametrize("plain", [False, True], ids=["defended", "plain-hypercorn"])


def _arm(plain: bool, *hooked: tuple[type, str]) -> tuple[tuple[type, str], ...]:
    return hooked if plain else ()


# -- H2Protocol._handle_events: late request data, rapid reset ------------------------------


@ARMS
def test_request_data_after_the_answer_costs_only_its_own_request(plain: bool) -> None:
    with serving(_arm(plain, (H2Protocol, "_handle_events"))) as (port, _, _):
        client = Client(port)
        early = client.request("/early", end=False)
        assert client.read_until(lambda: client.ended(early))
        client.conn.send_data(early, b"{}" * 100, end_stream=True)
        good = client.request("/")
        assert client.read_until(lambda: client.ended(good)) is not plain


@ARMS
def test_requests_reset_in_the_read_they_began_are_never_started(plain: bool) -> None:
    with serving(_arm(plain, (H2Protocol, "_handle_events"))) as (port, app, _):
        client = Client(port)
        for _ in range(10):
            sid = client.request("/slow", flush=False)
            client.conn.reset_stream(sid)
        client.flush()
        good = client.request("/")
        assert client.read_until(lambda: client.ended(good))
        time.sleep(0.2)
        assert ("/slow" not in app.started) is not plain


# -- TCPServer._read_data, _idle_timeout; ProtocolWrapper.handle: idle connections ---------


@ARMS
def test_a_connection_the_client_closed_is_closed_at_once(plain: bool) -> None:
    with serving(_arm(plain, (TCPServer, "_read_data"))) as (port, _, _):
        client = Client(port)
        sid = client.request("/")
        assert client.read_until(lambda: client.ended(sid))
        client.sock.shutdown(socket.SHUT_WR)
        assert closed_by_server(client.sock, 2.0) is not plain


@ARMS
def test_a_connection_must_start_a_request_within_the_deadline(plain: bool) -> None:
    defences = http2_defences.Http2Defences(first_request_timeout=0.3)
    with serving(_arm(plain, (TCPServer, "_idle_timeout")), defences) as (port, _, _):
        sock = socket.create_connection(("127.0.0.1", port))
        sock.sendall(b"GET / HT")  # half a request line
        assert closed_by_server(sock, 2.0) is not plain


@ARMS
def test_an_h2c_connection_that_never_asks_is_timed_too(plain: bool) -> None:
    defences = http2_defences.Http2Defences(first_request_timeout=0.3)
    with serving(_arm(plain, (ProtocolWrapper, "handle")), defences) as (port, _, _):
        client = Client(port)  # preface and SETTINGS, then nothing
        assert closed_by_server(client.sock, 2.0) is not plain


# -- TCPServer.run: connection caps --------------------------------------------------------


@ARMS
def test_connections_per_client_are_capped(plain: bool) -> None:
    defences = http2_defences.Http2Defences(max_connections_per_client=2)
    with serving(_arm(plain, (TCPServer, "run")), defences) as (port, _, _):
        held = [Client(port) for _ in range(2)]
        third = socket.create_connection(("127.0.0.1", port))
        assert closed_by_server(third, 1.0) is not plain
        assert not any(closed_by_server(c.sock, 0.05) for c in held)


# -- H2Protocol.handle: answers to a closed connection, control-frame budget --------------


@ARMS
def test_an_answer_to_a_closed_connection_is_released(plain: bool) -> None:
    defences = http2_defences.Http2Defences(write_timeout=60.0)
    with serving(_arm(plain, (H2Protocol, "handle")), defences) as (port, app, _):
        client = Client(port)
        client.request("/big")
        client.read_until(lambda: False, seconds=0.3, ack=False)  # the first 64 KB, unacknowledged
        client.sock.close()
        assert app.big_done.wait(2.0) is not plain


@ARMS
def test_a_control_frame_flood_gets_a_goaway(plain: bool) -> None:
    with serving(_arm(plain, (H2Protocol, "handle"))) as (port, _, _):
        client = Client(port)
        for i in range(1000):
            client.conn.ping(i.to_bytes(8, "big"))
        with contextlib.suppress(OSError):
            client.flush()
        client.read_until(lambda: client.goaway() is not None, seconds=2.0)
        calmed = client.goaway() == h2.errors.ErrorCodes.ENHANCE_YOUR_CALM
        assert calmed is not plain


# -- H2Protocol._create_stream: too many streams ---------------------------------------------


@ARMS
def test_too_many_streams_end_with_a_goaway_not_a_traceback(
    plain: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # hypercorn's priority tree holds 1,000 streams. PRIORITY frames for idle
    # streams fill it fastest (streams reset before their answers, slowly);
    # the budget would end the connection first, so it is off here.
    monkeypatch.setattr(ControlBudget, "charge", lambda self, frames, now: True)
    with serving(_arm(plain, (H2Protocol, "_create_stream"))) as (port, _, _):
        client = Client(port)
        fill = (PriorityFrame(sid, depends_on=0, stream_weight=16) for sid in range(3, 1999, 2))
        client.sock.sendall(b"".join(frame.serialize() for frame in fill))  # 998 streams
        for sid in (2001, 2003, 2005):  # the next requests overflow the tree
            client.conn.send_headers(sid, HEADERS, end_stream=True)
        client.flush()
        client.read_until(lambda: client.goaway() is not None, seconds=2.0)
        calmed = client.goaway() == h2.errors.ErrorCodes.ENHANCE_YOUR_CALM
        assert calmed is not plain


# -- H2Protocol.stream_send: the answer deadline -------------------------------------------


@ARMS
def test_an_answer_the_client_never_lets_through_is_reset(plain: bool) -> None:
    defences = http2_defences.Http2Defences(write_timeout=0.3)
    with serving(_arm(plain, (H2Protocol, "stream_send")), defences) as (port, _, _):
        client = Client(port)
        sid = client.request("/big")
        client.read_until(lambda: client.reset_code(sid) is not None, seconds=2.0, ack=False)
        assert (client.reset_code(sid) == h2.errors.ErrorCodes.CANCEL) is not plain


# -- H2Protocol.__init__ (ans.drain): a GOAWAY before closing on shutdown ----------------


@ARMS
def test_an_idle_connection_gets_a_goaway_when_the_server_stops(plain: bool) -> None:
    defences = http2_defences.Http2Defences(before_shutdown_close=drain.finish_http2)
    with serving(_arm(plain, (H2Protocol, "__init__")), defences) as (port, _, stop):
        client = Client(port)
        sid = client.request("/")
        assert client.read_until(lambda: client.ended(sid))
        stop()
        client.read_until(lambda: client.goaway() is not None, seconds=3.0)
        assert (client.goaway() == h2.errors.ErrorCodes.NO_ERROR) is not plain


# -- H11Protocol._send_error_response: HTTP/1.1 requests h11 cannot parse ------------------


@ARMS
@pytest.mark.parametrize(
    "raw",
    [
        b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",  # chunk size
        b"GET / HTTP/1.1\r\nHost : x\r\n\r\n",  # a space before the colon
        b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
    ],
    ids=["chunk-size", "header-space", "two-lengths"],
)
def test_an_http1_request_h11_refuses_gets_the_error_object(plain: bool, raw: bytes) -> None:
    with serving(_arm(plain, (H11Protocol, "_send_error_response"))) as (port, _, _):
        sock = socket.create_connection(("127.0.0.1", port), timeout=3.0)
        sock.sendall(raw)
        answer = b""
        with contextlib.suppress(TimeoutError, ConnectionError):
            while chunk := sock.recv(65536):
                answer += chunk
        sock.close()
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 400")
        if plain:
            assert body == b""
        else:
            assert b"content-type: application/agtp+json" in head.lower()
            doc = json.loads(body)
            assert doc["status"] == 400 and doc["task_id"] is None
            assert doc["error"]["code"] == "bad_request" and doc["error"]["message"]
