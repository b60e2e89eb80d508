"""Answers on HTTP/2 connections: none waits for good.

**Answers to a closed connection.** When a connection closes, hypercorn's
sender stops, but a request still running goes on writing its answer into
the stream's buffer and then waits for the sender to drain it: forever. Each
held its task, its answer and so its whole connection in memory (60-100 KB
per client that asked and left without reading), and on shutdown the
cancelled tasks waited the same way, so one request whose body never came
kept ``ans serve`` from stopping. On close every stream buffer is closed, so
those writers return at once.

**An answer the client never lets through.** An answer waits for the
client's flow-control window; one not let through within
``Http2Defences.write_timeout`` is reset (RST_STREAM CANCEL), so a client
that never opens its window does not hold the answer (and its task) for good.

The answers sent earn control-frame budget (:mod:`.control_frames`): each
answer ``CONTROL_PER_ANSWER``, and its bytes once they have left the
stream's buffer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import h2.errors
import h2.exceptions
import structlog
from hypercorn.events import Closed
from hypercorn.protocol.events import Body, EndBody
from hypercorn.protocol.h2 import H2Protocol
from priority.priority import MissingStreamError

from .control_frames import state_of
from .hooks import patch
from .settings import defences_of

log = structlog.get_logger("ans.http")


def _handle_then_release(handle: Callable[..., Any]) -> Callable[..., Any]:
    async def handle_then_release(self: Any, event: Any) -> None:
        await handle(self, event)
        if isinstance(event, Closed):
            # hypercorn's sender has stopped: a response still being written
            # would wait for it forever (StreamBuffer.drain / push), holding
            # its request's task and so the whole connection in memory.
            for buffer in list(self.stream_buffers.values()):
                await buffer.close()

    return handle_then_release


async def _give_up_answer(proto: Any, stream_id: int) -> None:
    log.debug("http2 answer not read in time; stream reset", stream_id=stream_id)
    state_of(proto).pending.pop(stream_id, None)
    try:
        proto.connection.reset_stream(stream_id, h2.errors.ErrorCodes.CANCEL)
    except (h2.exceptions.StreamClosedError, h2.exceptions.ProtocolError):
        pass  # already closed
    buffer = proto.stream_buffers.pop(stream_id, None)
    if buffer is not None:
        await buffer.close()
    try:
        proto.priority.remove_stream(stream_id)
    except MissingStreamError:
        pass
    await proto._flush()
    await proto._close_stream(stream_id)


def _send_within_deadline(stream_send: Callable[..., Any]) -> Callable[..., Any]:
    async def send_within_deadline(self: Any, event: Any) -> None:
        if not isinstance(event, (Body, EndBody)):
            await stream_send(self, event)
            return
        state = state_of(self)
        if isinstance(event, EndBody):
            state.budget.answered += 1
        try:
            async with asyncio.timeout(defences_of(self.config).write_timeout):
                await stream_send(self, event)
        except TimeoutError:
            await _give_up_answer(self, event.stream_id)
            return
        if isinstance(event, Body):
            state.pending[event.stream_id] = state.pending.get(event.stream_id, 0) + len(event.data)
        else:  # the buffer has drained: the answer's bytes have gone to h2 and out
            state.budget.sent += state.pending.pop(event.stream_id, 0)

    return send_within_deadline


def install_release_on_close() -> None:
    patch(H2Protocol, "handle", _handle_then_release)


def install_answer_deadline() -> None:
    patch(H2Protocol, "stream_send", _send_within_deadline)
