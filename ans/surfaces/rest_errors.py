"""What every REST surface's error object shares (the profile's, HAIDIP's,
the MCP registry's): the answer's shape (:class:`RestError`), the bound on a
message, which of the core's response headers reach the client, the
``Retry-After`` a 503 always carries, and picking a surface code from the
core's :class:`~ans.protocol.errors.AgtpError` (its code first, then its
status). Each surface keeps its own codes, statuses and body fields."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from ans.protocol.errors import AgtpError

# A message on the wire is at most this many characters: an AGTP message can
# quote a parameter, the answer stays bounded whatever it quotes.
MAX_MESSAGE_CHARS = 300
KEPT_HEADERS = frozenset({"retry-after", "www-authenticate", "allow"})
UNAVAILABLE_RETRY_AFTER = 1  # s: a 503 without the core's own Retry-After

Code = TypeVar("Code")


@dataclass(frozen=True, slots=True)
class RestAnswer:
    """One answer of a REST surface: HTTP status, body object, headers."""

    status: int
    body: dict[str, Any]
    headers: tuple[tuple[str, str], ...] = ()


RestError = RestAnswer  # an error answer has the same shape


def bounded_message(message: str) -> str:
    """The core's message, cut to :data:`MAX_MESSAGE_CHARS` (with ``...``)."""
    if len(message) > MAX_MESSAGE_CHARS:
        return message[: MAX_MESSAGE_CHARS - 3] + "..."
    return message


def kept_headers(exc: AgtpError) -> tuple[tuple[str, str], ...]:
    """The core's response headers a REST client sees (:data:`KEPT_HEADERS`)."""
    return tuple((n, v) for n, v in exc.headers if n in KEPT_HEADERS)


def with_retry_after(
    headers: tuple[tuple[str, str], ...], seconds: int = UNAVAILABLE_RETRY_AFTER
) -> tuple[tuple[str, str], ...]:
    """``headers`` with a ``Retry-After`` (``seconds``) unless they have one."""
    if any(n == "retry-after" for n, _ in headers):
        return headers
    return (*headers, ("retry-after", str(seconds)))


def code_of(
    exc: AgtpError,
    by_code: Mapping[str, Code],
    by_status: Mapping[int, Code],
    client: Code,
    server: Code,
) -> Code:
    """A surface's code for ``exc``: by the core's code, else by its status,
    else ``client`` for a 4xx and ``server`` for anything else."""
    found = by_code.get(str(exc.code))
    if found is not None:
        return found
    if exc.status in by_status:
        return by_status[exc.status]
    return client if exc.status < 500 else server
