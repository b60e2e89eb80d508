"""The HTTP/2 drain when the server stops in the same instant as a request
starts on an idle connection: the request must cancel the drain (the
connection is busy again), and every request the client sent is answered
before the GOAWAY.

The race, made deterministic: a test hook around hypercorn's
``H2Protocol._create_stream`` sets the worker's ``terminated`` event (what
hypercorn does on SIGTERM) as the connection's first request starts, and
lets the idle timer's wait for that event complete before hypercorn cancels
the timer for the request. On Python 3.11, ``asyncio.wait_for`` returned the
completed wait and dropped that cancellation: the drain ran in full while the
connection's read task waited for it to end, holding the batch of requests
it had read; the GOAWAY then came with none of them started, and the rest
of the batch hit a closed h2 connection (``ProtocolError`` in hypercorn's
task group). A real server loses the same race under CPU load
(``tests/integration/test_integration_shutdown.py``)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import h2.config
import h2.connection
import h2.errors
import h2.events
import pytest
from hypercorn.asyncio import serve
from hypercorn.config import Config as HypercornConfig
from hypercorn.protocol.h2 import H2Protocol

from ans import drain, http2_defences

WAIT = 30.0  # s: a bound on the client's reads, not an expected duration
BATCH = 20


async def toy_app(scope: Any, receive: Any, send: Any) -> None:
    """Reads the request, answers 200 with the path."""
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    while (await receive()).get("more_body"):
        pass
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": scope["path"].encode()})


@contextlib.contextmanager
def serving() -> Iterator[tuple[int, list[BaseException]]]:
    """hypercorn with the drain on loopback; yields the port and the
    exceptions the server raised (serve's own, and any the loop reported)."""
    drain.install()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    port = sock.getsockname()[1]
    hc = HypercornConfig()
    hc.bind = [f"fd://{sock.detach()}"]
    hc.keep_alive_max_requests = 100_000
    hc.graceful_timeout = WAIT
    hc.accesslog = hc.errorlog = None
    http2_defences.attach(
        hc, http2_defences.Http2Defences(before_shutdown_close=drain.finish_http2)
    )
    errors: list[BaseException] = []
    ready = threading.Event()
    stop: list[Any] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _, ctx: errors.append(ctx.get("exception") or
                                                               RuntimeError(ctx["message"])))  # fmt: skip
        stopping = asyncio.Event()
        stop.extend([loop, stopping])
        ready.set()
        try:
            await serve(toy_app, hc, shutdown_trigger=stopping.wait)  # type: ignore[arg-type]
        except BaseException as exc:  # recorded: the test asserts there are none
            errors.append(exc)

    thread = threading.Thread(target=asyncio.run, args=(main(),), daemon=True)
    thread.start()
    assert ready.wait(WAIT)
    try:
        yield port, errors
    finally:
        loop, stopping = stop
        loop.call_soon_threadsafe(stopping.set)
        thread.join(WAIT)
        assert not thread.is_alive(), "the server did not stop"


def stop_as_the_request_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    """The hook: a request for /stop sets the worker's ``terminated`` (the
    server is stopping) as hypercorn starts it, and yields once, so the idle
    timer's wait for that event completes before hypercorn stops the timer
    because the connection is busy."""
    drain.install()  # first: monkeypatch puts back what it found, the defences included
    create = H2Protocol._create_stream

    async def create_stream(self: Any, request: h2.events.RequestReceived) -> None:
        if (b":path", b"/stop") in request.headers:
            await self.context.worker.terminated.set()
            await asyncio.sleep(0)
        await create(self, request)

    monkeypatch.setattr(H2Protocol, "_create_stream", create_stream)


def test_a_request_starting_as_the_server_stops_is_answered_before_the_goaway(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stop_as_the_request_starts(monkeypatch)
    with serving() as (port, errors):
        sock = socket.create_connection(("127.0.0.1", port), timeout=WAIT)
        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        conn.initiate_connection()
        sock.sendall(conn.data_to_send())
        # The server has taken the connection over (its SETTINGS came): it is idle.
        events: list[h2.events.Event] = []
        while not any(isinstance(e, h2.events.RemoteSettingsChanged) for e in events):
            events += conn.receive_data(sock.recv(65536))
        sids = []
        for i in range(BATCH):  # one write: /stop first, then the rest of the batch
            sid = conn.get_next_available_stream_id()
            path = "/stop" if i == 0 else f"/r{i}"
            conn.send_headers(
                sid,
                [(":method", "GET"), (":path", path), (":scheme", "http"),
                 (":authority", "localhost")],
                end_stream=True,
            )  # fmt: skip
            sids.append(sid)
        sock.sendall(conn.data_to_send())
        answered: dict[int, bytes] = {}
        ended: set[int] = set()
        resets: dict[int, int] = {}
        goaways: list[tuple[int, int]] = []
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            try:
                data = sock.recv(65536)
            except ConnectionResetError:
                data = b""
            if not data:
                break
            for event in conn.receive_data(data):
                if isinstance(event, h2.events.DataReceived):
                    answered[event.stream_id] = answered.get(event.stream_id, b"") + event.data
                    conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                elif isinstance(event, h2.events.StreamEnded):
                    ended.add(event.stream_id)
                elif isinstance(event, h2.events.StreamReset):
                    resets[event.stream_id] = event.error_code
                elif isinstance(event, h2.events.ConnectionTerminated):
                    goaways.append((event.last_stream_id, event.error_code))
            with contextlib.suppress(OSError):
                sock.sendall(conn.data_to_send())  # the PING's ACK among it
            if goaways:
                break  # h2 takes no frame after a GOAWAY
        sock.close()
    assert resets == {}
    assert ended == set(sids), f"not answered: {sorted(set(sids) - ended)}"
    assert answered[sids[0]] == b"/stop" and answered[sids[-1]] == f"/r{BATCH - 1}".encode()
    assert goaways == [(max(sids), 0)]  # NO_ERROR, naming the last request
    assert errors == []


def test_requests_read_after_the_goaway_are_refused_not_processed() -> None:
    """refuse_after_goaway, on real h2 connections: in a batch read after the
    GOAWAY named stream 1, the requests above it (3, and 5 with a body) are
    reset REFUSED_STREAM and none of their events goes on to hypercorn; the
    rest of stream 1's request does."""
    client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    server = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
    client.initiate_connection()
    server.initiate_connection()
    server.receive_data(client.data_to_send())
    client.receive_data(server.data_to_send())
    server.receive_data(client.data_to_send())
    head = [(":method", "POST"), (":path", "/"), (":scheme", "http"), (":authority", "localhost")]
    client.send_headers(1, head)
    server.receive_data(client.data_to_send())  # stream 1 started before the GOAWAY
    client.send_data(1, b"{}", end_stream=True)
    client.send_headers(3, head, end_stream=True)
    client.send_headers(5, head)
    client.send_data(5, b"x" * 1000, end_stream=True)
    events = server.receive_data(client.data_to_send())
    kept = drain.refuse_after_goaway(SimpleNamespace(connection=server), 1, events)
    assert {getattr(e, "stream_id", None) for e in kept} == {1}
    assert [type(e) for e in kept] == [h2.events.DataReceived, h2.events.StreamEnded]
    resets = {
        e.stream_id: e.error_code
        for e in client.receive_data(server.data_to_send())
        if isinstance(e, h2.events.StreamReset)
    }
    assert resets == {3: h2.errors.ErrorCodes.REFUSED_STREAM, 5: h2.errors.ErrorCodes.REFUSED_STREAM}
