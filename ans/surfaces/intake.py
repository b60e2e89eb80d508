"""How every REST surface takes a request in (the profile, HAIDIP, the MCP
registry): the client's address, the correlation id (the caller's Task-ID
when it sent one, else a fresh ``req-...``), the headers, then the bounded
body and the caller's credentials. Each surface routes and checks what is
its own in between; whatever fails on the way is answered with the surface's
own error object under :attr:`Intake.correlation`. Also the JSON body checks
they share (:func:`check_json_type`, :func:`json_object`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ans.protocol import jsonstrict
from ans.protocol.binding import header_map
from ans.protocol.errors import InvalidBody, UnsupportedContentType
from ans.protocol.messages import task_id_hint

from ..asgi_types import ReadBody, Receive, Scope
from ..gate import Credentials


@dataclass(slots=True)
class Intake:
    """One REST request on its way in."""

    address: str | None
    correlation: str
    headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def begin(cls, scope: Scope, new_id: Callable[[], str]) -> Intake:
        """Before anything can fail: the address and a fresh correlation id."""
        client = scope.get("client")
        return cls(str(client[0]) if client else None, f"req-{new_id()}")

    def read_headers(self, scope: Scope) -> dict[str, str]:
        """The request's headers (the caller's Task-ID becomes the correlation id)."""
        self.headers = header_map(scope["headers"])
        self.correlation = task_id_hint(self.headers) or self.correlation
        return self.headers

    async def body_and_credentials(
        self, scope: Scope, receive: Receive, read_body: ReadBody
    ) -> tuple[bytes, Credentials]:
        """The bounded body, then who is asking (token, API key or certificate)."""
        body = await read_body(receive, self.headers)
        creds = Credentials.from_request(
            self.headers, scope.get("extensions"), client_address=self.address
        )
        return body, creds


def check_json_type(headers: Mapping[str, str], hint: str = "use application/json") -> None:
    """415 unless the Content-Type, when sent, is JSON (application/json or +json)."""
    ctype = headers.get("content-type")
    if ctype is None:
        return
    base = ctype.split(";", 1)[0].strip().lower()
    if base and base != "application/json" and not base.endswith("+json"):
        raise UnsupportedContentType(f"Content-Type {base[:60]!r} is not supported; {hint}")


def json_object(
    headers: Mapping[str, str], body: bytes, what: str, max_bytes: int
) -> dict[str, Any]:
    """The body as a strict JSON object (Content-Type JSON when sent; no
    duplicate keys, NaN, or nesting beyond the bound): 400/415 otherwise."""
    check_json_type(headers)
    if not body.strip():
        raise InvalidBody(f"the request body must be {what} (a JSON object)")
    doc = jsonstrict.loads(body, max_bytes=max_bytes)
    if not isinstance(doc, dict):
        raise InvalidBody(f"the request body must be {what} (a JSON object)")
    return doc
