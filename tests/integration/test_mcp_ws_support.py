"""Helpers for the MCP WebSocket / mDNS integration tests: the server's
config, a real ``websockets`` client speaking the 1-byte-type frames, and a
raw wsproto client (one that never answers pings, or never reads)."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from websockets.sync.client import ClientConnection, connect
from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Ping,
    RejectConnection,
    Request,
)

from ans.mcp import ws_frames as wf

SUBPROTOCOL = "agent-discovery"
READ_WRITE = "discover:read discover:write"
ORCH = {"agent-id": "agtp://o.example/agents/orch", "principal-id": "usr-1"}


def mcp_config(path: Path, **extra: Any) -> Path:
    """An ans.toml with [mcp] on for any agent id, fast TTL and pings."""
    mcp = {
        "enabled": "true",
        "allow_list": '["*"]',
        "ttl_seconds": "3",
        "sweep_interval": "0.2",
        "ws_ping_interval": "0.5",
        "ws_queue": "4",
        **{k: v for k, v in extra.items()},
    }
    lines = ["[rate_limit]", "enabled = false", "[mcp]"]
    lines += [f"{k} = {v}" for k, v in mcp.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def ws_url(http_url: str, path: str = "/mcp/v1/ws") -> str:
    return "ws" + http_url[len("http") :] + path


def open_ws(http_url: str, scope: str = READ_WRITE, **kw: Any) -> ClientConnection:
    headers = {**ORCH, "authority-scope": scope} if scope else {}
    return connect(
        ws_url(http_url),
        subprotocols=[SUBPROTOCOL],  # type: ignore[list-item]
        additional_headers=headers,
        open_timeout=10,
        **kw,
    )


def send(ws: ClientConnection, kind: int, message: dict[str, Any]) -> None:
    ws.send(wf.client_frame(kind, message))


def recv(ws: ClientConnection, timeout: float = 10) -> dict[str, Any]:
    data = ws.recv(timeout=timeout)
    assert isinstance(data, bytes), data
    return wf.decode_response(data)


def ask(ws: ClientConnection, kind: int, message: dict[str, Any]) -> dict[str, Any]:
    """Send one frame and return its answer (events that arrive first are skipped)."""
    rid = f"r{time.monotonic_ns()}"
    send(ws, kind, {**message, "request_id": rid})
    while True:
        body = recv(ws)
        if body.get("request_id") == rid:
            return body


def events(ws: ClientConnection, n: int, timeout: float = 15) -> Iterator[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    got = 0
    while got < n:
        body = recv(ws, max(0.1, deadline - time.monotonic()))
        if "event" in body:
            got += 1
            yield body


class RawClient:
    """A wsproto client on a plain socket: answers no ping unless told,
    reads only when asked (``rcvbuf`` shrinks its receive buffer)."""

    def __init__(
        self,
        http_url: str,
        path: str = "/mcp/v1/ws",
        scope: str = READ_WRITE,
        rcvbuf: int | None = None,
    ) -> None:
        host, port = http_url.split("://", 1)[1].rsplit(":", 1)
        self.sock = socket.socket()
        if rcvbuf is not None:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.connect((host, int(port)))
        self.sock.settimeout(10)
        self.ws = WSConnection(ConnectionType.CLIENT)
        extra = [(k.encode(), v.encode()) for k, v in {**ORCH, "authority-scope": scope}.items()]
        self.sock.sendall(
            self.ws.send(
                Request(host=host, target=path, subprotocols=[SUBPROTOCOL], extra_headers=extra)
            )
        )
        self.accepted = False
        self.rejected: int | None = None
        self.messages: list[dict[str, Any]] = []
        self.pings = 0
        self.closed: CloseConnection | None = None
        self._partial = b""
        while not self.accepted and self.rejected is None:
            self.pump()

    def pump(self, answer_pings: bool = False) -> bool:
        """Read once; False at EOF."""
        try:
            data = self.sock.recv(65536)
        except (ConnectionResetError, TimeoutError):
            data = b""
        if not data:
            self.ws.receive_data(None)
            return False
        self.ws.receive_data(data)
        for event in self.ws.events():
            if isinstance(event, AcceptConnection):
                self.accepted = True
            elif isinstance(event, RejectConnection):
                self.rejected = event.status_code
            elif isinstance(event, Ping):
                self.pings += 1
                if answer_pings:
                    self.sock.sendall(self.ws.send(event.response()))
            elif isinstance(event, BytesMessage):
                self._partial += bytes(event.data)
                if event.message_finished:
                    self.messages.append(wf.decode_response(self._partial))
                    self._partial = b""
            elif isinstance(event, CloseConnection):
                self.closed = event
        return True

    def send(self, kind: int, message: dict[str, Any]) -> None:
        self.sock.sendall(self.ws.send(BytesMessage(data=wf.client_frame(kind, message))))

    def read_until_closed(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while self.closed is None and time.monotonic() < deadline:
            if not self.pump():
                return

    def close(self) -> None:
        self.sock.close()
