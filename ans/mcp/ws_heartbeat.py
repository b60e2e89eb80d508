"""The WebSocket heartbeat (seed 002 section 5.3: "every 30 s; on miss ->
close"), added to hypercorn's WebSocket stream.

hypercorn 0.18 pings every ``websocket_ping_interval`` seconds (its config;
``ans serve`` sets it from ``[mcp] ws_ping_interval``) but never looks at
the pongs: a peer that has gone away without a FIN (a dead NAT entry, a
suspended laptop) keeps its connection, its subscription and its queue for
as long as TCP takes to notice, which is many minutes. ASGI does not pass
pongs to the application either, so this cannot live in the app.

:func:`install` wraps two methods of ``hypercorn.protocol.ws_stream.WSStream``
(with the same machinery and version checks as :mod:`ans.http2_defences`):

* ``_accept``: once the handshake is accepted, pongs arriving on the
  connection are noted (wsproto hands them to hypercorn, which ignores them);
* ``_send_pings``: a ping every interval, as before (but a closed connection
  ends the task within a second, not an interval); when the next one is due
  and no pong came back since the last, the connection is closed with 1011
  ``keepalive ping timeout`` (as the ``websockets`` library does) and the
  application gets ``websocket.disconnect`` (code 1006), so the surface
  drops the connection's subscriptions.

Idempotent, process-wide, and inert when ``websocket_ping_interval`` is None.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from hypercorn.protocol.events import EndData, StreamClosed
from hypercorn.protocol.ws_stream import WSStream
from wsproto.events import CloseConnection, Event, Ping, Pong

from ..http2_defences.hooks import Hook, check_version, installed, patch, verify

KEEPALIVE_TIMEOUT = 1011
KEEPALIVE_REASON = "keepalive ping timeout"
STEP = 1.0  # s: how soon the ping task notices that its connection closed
HOOKS = (
    Hook(WSStream, "_accept", ("self", "message")),
    Hook(WSStream, "_send_pings", ("self",)),
    Hook(WSStream, "_send_wsproto_event", ("self", "event"), patched=False),
)
_PONGS = "_ans_pongs"  # pongs seen on a stream (an int on the WSStream instance)


def install() -> None:
    """Install the heartbeat (idempotent); UnsupportedHypercorn if this
    hypercorn is not the one it was written for."""
    check_version()
    if installed(WSStream, "_send_pings"):
        return
    verify(HOOKS)
    patch(WSStream, "_accept", _noting_pongs)
    patch(WSStream, "_send_pings", _closing_on_a_miss)


def _noting_pongs(accept: Callable[..., Any]) -> Callable[..., Any]:
    async def accept_noting_pongs(self: Any, message: Any) -> None:
        await accept(self, message)
        setattr(self, _PONGS, 0)
        events = self.connection.events

        def noting() -> Iterator[Event]:
            for event in events():
                if isinstance(event, Pong):
                    setattr(self, _PONGS, getattr(self, _PONGS, 0) + 1)
                yield event

        self.connection.events = noting

    return accept_noting_pongs


def _closing_on_a_miss(send_pings: Callable[..., Any]) -> Callable[..., Any]:
    async def send_pings_closing_on_a_miss(self: Any) -> None:
        interval = self.config.websocket_ping_interval
        while not self.closed:
            seen = getattr(self, _PONGS, 0)
            await self._send_wsproto_event(Ping())
            waited = 0.0
            while waited < interval and not self.closed:
                # In steps: the connection's task group waits for this task, so
                # a closed connection (or a stopping server) must not wait a
                # whole interval (hypercorn's own loop does).
                step = min(STEP, interval - waited)
                await self.context.sleep(step)
                waited += step
            if self.closed:
                return
            if getattr(self, _PONGS, 0) == seen:
                await self._send_wsproto_event(
                    CloseConnection(code=KEEPALIVE_TIMEOUT, reason=KEEPALIVE_REASON)
                )
                await self.send(EndData(stream_id=self.stream_id))
                # As when the peer goes away: the app hears websocket.disconnect.
                await self.send(StreamClosed(stream_id=self.stream_id))
                return

    return send_pings_closing_on_a_miss
