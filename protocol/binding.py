"""The HTTP/2 (and HTTP/1.1) binding of AGTP as pure functions.

An AGTP method arrives either as the request method itself (``:method
DISCOVER`` on any path) or as ``POST /agtp`` with an ``AGTP-Method`` header.
Response headers carry ``agtp-version``, ``agtp-status``, ``task-id`` (only a
valid Task-ID, see :func:`~.messages.is_task_id`) and ``server-agent-id``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from .errors import ErrorCode, HeaderTooLarge, InvalidHeader, MissingHeader
from .messages import AGTP_VERSION, CONTENT_TYPE, is_task_id, task_id_hint

MAX_HEADER_BYTES = 16 * 1024
MAX_HEADER_COUNT = 100
POST_ENDPOINT = "/agtp"
_METHOD_RE = re.compile(r"[A-Z][A-Z0-9_-]{0,31}")
HTTP_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
# Headers a request may carry once only (400 ``duplicate_header``), in every
# framing: joined with ", " they would change who is asking or what is asked.
UNIQUE_HEADERS = frozenset(
    {"agent-id", "principal-id", "authority-scope", "task-id", "agtp-method"}
)


def header_map(raw: Iterable[tuple[bytes, bytes]]) -> dict[str, str]:
    """Lowercase-keyed header dict from raw pairs; bounded in size and count.

    A repeated header is joined with ", " (RFC 9110 list semantics), except
    that :data:`UNIQUE_HEADERS` may not repeat.
    """
    out: dict[str, str] = {}
    total = 0
    count = 0
    for name_b, value_b in raw:
        count += 1
        total += len(name_b) + len(value_b)
        if count > MAX_HEADER_COUNT or total > MAX_HEADER_BYTES:
            raise HeaderTooLarge(
                f"request headers exceed {MAX_HEADER_COUNT} fields or {MAX_HEADER_BYTES} bytes"
            )
        name = name_b.decode("latin-1").lower()
        value = value_b.decode("latin-1")
        if name in out:
            if name in UNIQUE_HEADERS:
                raise duplicate_header(name)
            out[name] = f"{out[name]}, {value}"
        else:
            out[name] = value
    return out


def duplicate_header(name: str) -> InvalidHeader:
    """The 400 for a repeated :data:`UNIQUE_HEADERS` field (lowercase ``name``)."""
    return InvalidHeader(f"header {name} must not repeat", code=ErrorCode.DUPLICATE_HEADER)


def refused_headers_task_id(raw: Iterable[tuple[bytes, bytes]]) -> str | None:
    """The Task-ID to echo when :func:`header_map` refused the headers (a
    repeated identity header, too many or too large): the ``task-id`` header if
    it was sent exactly once and is a valid Task-ID, else None. Reads at most
    ``MAX_HEADER_COUNT`` fields."""
    found: list[str] = []
    for i, (name_b, value_b) in enumerate(raw):
        if i >= MAX_HEADER_COUNT:
            break
        if name_b.lower() == b"task-id":
            found.append(value_b.decode("latin-1"))
    return task_id_hint({"task-id": found[0]}) if len(found) == 1 else None


def agtp_method(http_method: str, path: str, headers: Mapping[str, str]) -> str | None:
    """The AGTP method a request carries, or None for plain HTTP (GET etc.)."""
    method = http_method.upper()
    if method == "POST" and path.rstrip("/") == POST_ENDPOINT:
        value = headers.get("agtp-method")
        if value is None or not value.strip():
            raise MissingHeader(
                "POST /agtp requires the AGTP-Method header", code=ErrorCode.MISSING_AGTP_METHOD
            )
        value = value.strip().upper()
        if _METHOD_RE.fullmatch(value) is None:
            raise InvalidHeader(
                "AGTP-Method is not a method name", code=ErrorCode.INVALID_AGTP_METHOD
            )
        return value
    if method in HTTP_METHODS:
        return None
    return method


def response_headers(
    status: int, task_id: str | None, server_agent_id: str, *, body: bool = True
) -> list[tuple[bytes, bytes]]:
    headers = [
        (b"agtp-version", AGTP_VERSION.encode()),
        (b"agtp-status", str(status).encode()),
        (b"server-agent-id", server_agent_id.encode("latin-1", "replace")),
    ]
    # Whatever the caller passes, a task id that breaks the Task-ID rule (CR,
    # LF, NUL, non-ASCII, ...) is never sent: it could split or forge header
    # lines. The answer goes out without a task-id header instead.
    if task_id is not None and is_task_id(task_id):
        headers.append((b"task-id", task_id.encode("ascii")))
    if body:
        headers.append((b"content-type", CONTENT_TYPE.encode()))
    return headers
