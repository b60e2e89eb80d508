"""ANS's settings for the HTTP/2 defences of one server: a frozen
:class:`Http2Defences`, held by the hypercorn config it serves with under a
single attribute (:func:`attach`), read back by the defences with
:func:`defences_of`. A hypercorn config without one gets the defaults: no
connection caps, no first-request deadline, :data:`WRITE_TIMEOUT`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

WRITE_TIMEOUT = 30.0  # s an answer may wait for the client to read it (as on the native listener)
_ATTRIBUTE = "ans_http2_defences"


@dataclass(frozen=True)
class Http2Defences:
    """What the defences enforce on the connections of one server (0: off)."""

    max_connections_per_client: int = 0  # per IPv4 address or IPv6 /64 (client_key)
    max_connections: int = 0  # in all; at the cap the longest idle one makes room
    first_request_timeout: float = 0.0  # s from accept to the first request
    write_timeout: float = WRITE_TIMEOUT  # s an answer may wait for the client's window
    # Awaited before closing a connection that is idle when the server stops
    # (with hypercorn's TCPServer); ans.drain sends PING, then GOAWAY.
    before_shutdown_close: Callable[[Any], Awaitable[None]] | None = None


DEFAULTS = Http2Defences()


def attach(hc: Any, defences: Http2Defences) -> None:
    """Serve with ``defences`` on servers run with the hypercorn config ``hc``."""
    setattr(hc, _ATTRIBUTE, defences)


def defences_of(hc: Any) -> Http2Defences:
    found = getattr(hc, _ATTRIBUTE, None)
    return found if isinstance(found, Http2Defences) else DEFAULTS
