"""What ``ans serve`` logs of an exception nothing in the event loop handled.

asyncio's default handler logs the whole traceback with every chained
exception's message. hypercorn chains one that holds a connection's first
bytes (``H2ProtocolAssumedError``: the client's HTTP/2 preface, its first
request's headers and body), so any fault while it serves such a connection
wrote a request's ``client_context`` and bearer tokens into the operational
log. This handler logs the exception's type and where it was raised (file,
line, function of each frame). Its message only when the system wrote it
(``OSError``, ``UnicodeError``: no request bytes), bounded; never a chained
exception's message (h2's and hypercorn's quote header values).
"""

from __future__ import annotations

import traceback
from typing import Any

import structlog

log = structlog.get_logger("ans.loop")

MAX_MESSAGE = 200
MAX_FRAMES = 12


def unhandled_in_loop(loop: Any, context: dict[str, Any]) -> None:
    """An asyncio exception handler (``loop.set_exception_handler``)."""
    exc = context.get("exception")
    fields: dict[str, Any] = {"context": str(context.get("message", ""))[:MAX_MESSAGE]}
    if isinstance(exc, BaseException):
        fields["error"] = type(exc).__name__
        if isinstance(exc, (OSError, UnicodeError)):
            fields["detail"] = str(exc)[:MAX_MESSAGE]
        frames = traceback.extract_tb(exc.__traceback__)[-MAX_FRAMES:]
        fields["raised_at"] = [f"{f.filename}:{f.lineno} {f.name}" for f in frames]
        cause = exc.__cause__ or exc.__context__
        if cause is not None:
            fields["while_handling"] = type(cause).__name__  # its message may hold request bytes
    log.error("unhandled exception in the event loop", **fields)
