"""The WebSocket heartbeat (ans.mcp.ws_heartbeat) against plain hypercorn:
an in-process server with a toy WebSocket app pings every 0.2 s; a client
that never answers is closed 1011 only with the heartbeat installed (plain
hypercorn pings for ever and keeps it), and a client that answers stays open
either way. Like tests/ans/test_ans_http2_defences_vs_plain.py, the plain arm
puts hypercorn's own methods back (``hooks.plain``) for its duration."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from hypercorn.asyncio import serve
from hypercorn.config import Config as HypercornConfig
from hypercorn.protocol.ws_stream import WSStream
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, CloseConnection, Ping, Request

from ans.http2_defences import hooks
from ans.mcp import ws_heartbeat

INTERVAL = 0.2


async def toy(scope: Any, receive: Any, send: Any) -> None:
    """Accepts every WebSocket and waits for it to go."""
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    if scope["type"] != "websocket":
        return
    await receive()
    await send({"type": "websocket.accept"})
    while (await receive())["type"] != "websocket.disconnect":
        pass


@contextlib.contextmanager
def serving(plain: bool) -> Iterator[int]:
    ws_heartbeat.install()
    names = ("_accept", "_send_pings")
    saved = {name: getattr(WSStream, name) for name in names}
    if plain:
        for name in names:
            setattr(WSStream, name, hooks.plain(WSStream, name))
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    port = sock.getsockname()[1]
    hc = HypercornConfig()
    hc.bind = [f"fd://{sock.detach()}"]
    hc.websocket_ping_interval = INTERVAL
    hc.graceful_timeout = 1.0
    hc.accesslog = hc.errorlog = None
    loop_and_stop: list[Any] = []
    ready = threading.Event()

    async def main() -> None:
        stop = asyncio.Event()
        loop_and_stop.extend([asyncio.get_running_loop(), stop])
        ready.set()
        with contextlib.suppress(Exception):
            await serve(toy, hc, shutdown_trigger=stop.wait)  # type: ignore[arg-type]

    thread = threading.Thread(target=asyncio.run, args=(main(),), daemon=True)
    thread.start()
    ready.wait(5)
    try:
        yield port
    finally:
        loop, stop = loop_and_stop
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(stop.set)
        thread.join(10)
        for name, fn in saved.items():
            setattr(WSStream, name, fn)


def client(port: int, answer_pings: bool, seconds: float) -> tuple[int, CloseConnection | None]:
    """Connect, then read for ``seconds`` (or until closed): (pings, close)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=1)
    ws = WSConnection(ConnectionType.CLIENT)
    sock.sendall(ws.send(Request(host="localhost", target="/ws")))
    pings, closed, accepted = 0, None, False
    deadline = time.monotonic() + seconds
    try:
        while closed is None and time.monotonic() < deadline:
            try:
                data = sock.recv(65536)
            except TimeoutError:
                continue
            if not data:
                break
            ws.receive_data(data)
            for event in ws.events():
                if isinstance(event, AcceptConnection):
                    accepted = True
                elif isinstance(event, Ping):
                    pings += 1
                    if answer_pings:
                        sock.sendall(ws.send(event.response()))
                elif isinstance(event, CloseConnection):
                    closed = event
    finally:
        sock.close()
    assert accepted
    return pings, closed


ARMS = pytest.mark.parametrize("plain", [False, True], ids=["heartbeat", "plain-hypercorn"])


@ARMS
def test_a_client_that_never_answers_a_ping_is_closed(plain: bool) -> None:
    with serving(plain) as port:
        pings, closed = client(port, answer_pings=False, seconds=3.0)
    assert pings >= 1
    if plain:
        assert closed is None and pings >= 5  # pinged for ever, never closed
    else:
        assert closed is not None and closed.code == ws_heartbeat.KEEPALIVE_TIMEOUT
        assert closed.reason == ws_heartbeat.KEEPALIVE_REASON


@ARMS
def test_a_client_that_answers_stays_open(plain: bool) -> None:
    with serving(plain) as port:
        pings, closed = client(port, answer_pings=True, seconds=1.5)
    assert closed is None and pings >= 3
