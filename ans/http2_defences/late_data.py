"""Request data that arrives after its answer, and requests reset as they
arrive (HTTP/2).

**Request data after the response.** ANS answers some bad requests before
it reads their body (a missing AGTP-Method, a duplicate or oversized header,
a body on GET, a body over the size limit), as RFC 9113 section 8.1 allows.
hypercorn forgets a stream as soon as its response is complete; when the
client then sends the rest of the body, it looks the stream up, raises
``KeyError`` and drops the whole connection: every other request in flight
on it got an empty 500. Every event still goes to hypercorn, one at a time,
except DATA and END_STREAM for a stream it has closed: those are dropped,
the DATA's bytes go back to the connection's flow-control window, and the
client is asked to stop sending that body (RST_STREAM NO_ERROR).

**Rapid reset** (CVE-2023-44487). A request the client resets in the same
read as it began is never started: no task, no priority-tree entry. hypercorn
started each one, so a client opening and resetting streams as fast as it
could write took the CPU and about 160 MB, and a SIGTERM in the middle made
hypercorn reset an already reset stream: h2 raised and ``ans serve`` exited
with a traceback.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import h2.errors
import h2.events
import h2.exceptions
from hypercorn.protocol.h2 import H2Protocol

from .hooks import patch


def _guarded(handle_events: Callable[..., Any]) -> Callable[..., Any]:
    async def handle_events_guarded(self: Any, events: list[h2.events.Event]) -> None:
        reset = {e.stream_id for e in events if isinstance(e, h2.events.StreamReset)}
        handed = False
        for event in events:
            if reset and _started_and_reset(event, reset):
                continue
            if _after_response(self, event):
                await _drop(self, event)
            else:
                await handle_events(self, [event])  # which flushes what h2 has queued
                handed = True
        if not handed:
            # h2 answers some frames itself, with no event: DATA on a stream
            # closed by END_STREAM gets RST_STREAM STREAM_CLOSED (h2spec
            # http2/5.1/11). hypercorn flushes that at the end of every batch,
            # even an empty one; so must we, or it waits in the buffer.
            await self._flush()

    return handle_events_guarded


def _started_and_reset(event: h2.events.Event, reset: set[int]) -> bool:
    return (
        isinstance(event, (h2.events.RequestReceived, h2.events.PriorityUpdated))
        and event.stream_id in reset
    )


def _after_response(proto: Any, event: h2.events.Event) -> bool:
    """Body data or end of body for a stream hypercorn has closed."""
    return (
        isinstance(event, (h2.events.DataReceived, h2.events.StreamEnded))
        and event.stream_id not in proto.streams
    )


async def _drop(proto: Any, event: h2.events.Event) -> None:
    if not isinstance(event, h2.events.DataReceived):
        return  # END_STREAM alone: nothing was held back
    stream_id = event.stream_id
    assert stream_id is not None
    proto.connection.acknowledge_received_data(event.flow_controlled_length or 0, stream_id)
    if event.stream_ended is None:
        try:
            proto.connection.reset_stream(stream_id, h2.errors.ErrorCodes.NO_ERROR)
        except (h2.exceptions.StreamClosedError, h2.exceptions.ProtocolError):
            pass  # already reset or closed: nothing more to ask
    await proto._flush()


def install() -> None:
    patch(H2Protocol, "_handle_events", _guarded)
