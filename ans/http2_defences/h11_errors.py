"""HTTP/1.1 requests hypercorn cannot parse get ANS's error object.

hypercorn answers an HTTP/1.1 request h11 refuses (a bad chunk size, two
different Content-Lengths, a space before a header's colon, a request line
too long) with the status h11 hints and an empty body, before the request
reaches the app. Every other refusal ANS makes carries the AGTP error object
(``{"status", "task_id", "error": {"code", "message"}}``, docs/wire-contract.md),
so a client reading ``code`` and ``message`` found nothing here. These answers
carry it too, with the same status and ``connection: close``; no method was
read, so none is signed (as for the other refusals before parsing).
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import chain
from typing import Any

import h11
from hypercorn.protocol.h11 import H11Protocol

from ans.protocol.envelope import encode_error
from ans.protocol.request_types import CONTENT_TYPE

from .hooks import patch

# (code, message) by the status h11 hints; any other status: the first
MESSAGES: dict[int, tuple[str, str]] = {
    400: ("bad_request", "the HTTP/1.1 request could not be parsed (its framing, a header "
          "line or its length is malformed)"),
    413: ("body_too_large", "the HTTP/1.1 request is too large"),
    431: ("headers_too_large", "the HTTP/1.1 request's header block is too large"),
}  # fmt: skip


def error_body(status: int) -> bytes:
    """The AGTP error object of an HTTP/1.1 request refused before the app."""
    code, message = MESSAGES.get(status, MESSAGES[400])
    body: bytes = encode_error(status, None, code, message)
    return body


def install_error_bodies() -> None:
    """``H11Protocol._send_error_response`` sends :func:`error_body`."""

    def make(original: Callable[..., Any]) -> Callable[..., Any]:
        async def send_error_response(self: H11Protocol, status_code: int) -> None:
            body = error_body(status_code)
            headers = chain(
                [
                    (b"content-type", CONTENT_TYPE.encode()),
                    (b"content-length", str(len(body)).encode()),
                    (b"connection", b"close"),
                ],
                self.config.response_headers("h11"),
            )
            await self._send_h11_event(h11.Response(status_code=status_code, headers=list(headers)))
            await self._send_h11_event(h11.Data(data=body))
            await self._send_h11_event(h11.EndOfMessage())

        return send_error_response

    patch(H11Protocol, "_send_error_response", make)
