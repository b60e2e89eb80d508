"""The floor: a minimal hypercorn app that answers every AGTP request with a
fixed, real signed DISCOVER answer -- what the transport alone costs.

    python bench/floor_app.py --body answer.json [--config ans.toml] [--listen 127.0.0.1:0]
        [--workers N]

It is served exactly like ANS (``ans.server.bind_socket`` +
``ans.server.hypercorn_config`` from the same TOML: h2c prior knowledge, the
same keep-alive settings, the same asyncio loop; with ``--workers N``, N
forked processes each on its own SO_REUSEPORT socket, as ``ans serve
--workers N`` runs them: ``ans.workers.reuseport_listeners``), reads the whole
request body, and sends the same response headers as ANS (``agtp-version``,
``agtp-status``, ``server-agent-id``, ``task-id``, ``content-type``,
``content-length``). ``GET /healthz`` answers 200. Prints ``FLOOR listening
on URL`` once it serves.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import sys
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

from ans.protocol.binding import response_headers
from hypercorn.asyncio import serve

from ans.config import load
from ans.server import bind_socket, hypercorn_config
from ans.workers import reuseport_listeners

Message = MutableMapping[str, Any]


class FloorApp:
    """Every non-GET request: read the body, answer 200 with the fixed body."""

    def __init__(self, body: bytes, server_agent_id: str) -> None:
        self.body = body
        self.length = str(len(body)).encode()
        self.server_agent_id = server_agent_id

    async def __call__(
        self,
        scope: MutableMapping[str, Any],
        receive: Callable[[], Awaitable[Message]],
        send: Callable[[Message], Awaitable[None]],
    ) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        task_id = None
        for name, value in scope["headers"]:
            if name == b"task-id":
                task_id = value.decode("latin-1")
        while True:  # read the request body fully, as ANS does
            message = await receive()
            if message["type"] == "http.disconnect" or not message.get("more_body", False):
                break
        if scope["method"] == "GET":
            body = b'{"status":"ok"}'
            headers = [(b"content-type", b"application/json")]
        else:
            body = self.body
            headers = response_headers(200, task_id, self.server_agent_id)
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [*headers, (b"content-length", str(len(body)).encode())],
            }
        )
        await send({"type": "http.response.body", "body": body})


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--body", type=Path, required=True, help="the fixed response body (bytes)")
    ap.add_argument("--config", type=Path, help="the ANS TOML config (keep-alive settings)")
    ap.add_argument("--listen", default="127.0.0.1:0")
    ap.add_argument("--workers", type=int, default=1, help="processes (SO_REUSEPORT sockets)")
    args = ap.parse_args(argv)
    config = load(args.config, listen=args.listen)
    app = FloorApp(args.body.read_bytes(), config.agent_id)
    if args.workers <= 1:
        sock = bind_socket(config)
        host, port = sock.getsockname()[:2]
        serve_on(app, config, sock, f"FLOOR listening on http://{host}:{port}")
        return 0
    socks = reuseport_listeners(*config.host_port, args.workers)
    host, port = socks[0].getsockname()[:2]
    pids = []
    for i, sock in enumerate(socks):
        pid = os.fork()
        if pid == 0:
            for j, other in enumerate(socks):
                if j != i:
                    other.close()
            try:
                serve_on(app, config, sock, None)
            finally:
                os._exit(0)
        pids.append(pid)
    for sock in socks:
        sock.close()

    def forward(signum: int, frame: object) -> None:
        for pid in pids:
            os.kill(pid, signal.SIGTERM)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    print(f"FLOOR listening on http://{host}:{port}", flush=True)
    for pid in pids:
        os.waitpid(pid, 0)
    return 0


def serve_on(app: FloorApp, config: Any, sock: socket.socket, banner: str | None) -> None:
    hc = hypercorn_config(config, sock)

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        server = asyncio.create_task(serve(app, hc, shutdown_trigger=stop.wait))  # type: ignore[arg-type]
        await asyncio.sleep(0)
        if banner:
            print(banner, flush=True)
        await server

    asyncio.run(run())


if __name__ == "__main__":
    sys.exit(main())
