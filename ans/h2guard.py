"""hypercorn's HTTP/2 protocol: request data that arrives after the response.

ANS answers some bad requests before it reads their body (a missing
AGTP-Method, a duplicate or oversized header, a body on GET, a body over the
size limit). HTTP/2 allows that (RFC 9113, section 8.1). hypercorn forgets a
stream as soon as its response is complete, and when the client then sends
the rest of the body, hypercorn 0.18 looks the stream up, raises ``KeyError``
and drops the whole connection: every other request in flight on it gets an
empty 500, and the failed connection task could keep the server from
stopping on SIGTERM. One bad request must not cost other callers theirs.

:func:`install` wraps ``H2Protocol._handle_events`` once per process. Every
event still goes to hypercorn, one at a time, except DATA and END_STREAM for
a stream hypercorn has already closed. Those are dropped: the DATA's bytes go
back to the connection's flow-control window, and the client is asked to
stop sending that body with RST_STREAM NO_ERROR, as section 8.1 suggests.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import h2.errors
import h2.events
import h2.exceptions
from hypercorn.protocol.h2 import H2Protocol

_GUARDED = "_ans_h2guard"

Handler = Callable[[Any, list[h2.events.Event]], Awaitable[None]]


def install() -> None:
    """Guard hypercorn's HTTP/2 event handling (idempotent)."""
    original: Handler = H2Protocol._handle_events
    if getattr(original, _GUARDED, False):
        return

    async def handle_events(self: Any, events: list[h2.events.Event]) -> None:
        for event in events:
            if _after_response(self, event):
                await _drop(self, event)
            else:
                await original(self, [event])

    setattr(handle_events, _GUARDED, True)
    H2Protocol._handle_events = handle_events  # type: ignore[method-assign]


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
