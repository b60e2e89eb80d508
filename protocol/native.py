"""The native AGTP/1.0 framing as a sans-IO incremental parser.

A request is a start line ``AGTP/1.0 METHOD``, header lines ``Name: value``,
a blank line, then ``Content-Length`` bytes of body (CRLF or bare LF line
endings). :class:`NativeParser` turns fed bytes into :class:`NativeRequest`
frames whose (method, headers, body) go through the same ``parse_*``
functions as the HTTP/2 binding, so both produce identical typed requests.
:func:`encode_response` writes ``AGTP/1.0 200 OK`` responses. No sockets here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .binding import MAX_HEADER_BYTES, MAX_HEADER_COUNT
from .errors import BadRequest, BodyTooLarge, HeaderTooLarge
from .messages import AGTP_VERSION, CONTENT_TYPE
from .status import REASON

_START_RE = re.compile(rb"(AGTP/1(?:\.\d{1,3})?) ([A-Z][A-Z0-9_-]{0,31})")
_HEADER_RE = re.compile(rb"([!#$%&'*+.^_`|~0-9A-Za-z-]{1,64}):[ \t]*(.*?)[ \t]*")


@dataclass(frozen=True, slots=True)
class NativeRequest:
    version: str
    method: str
    headers: dict[str, str]
    body: bytes


class NativeParser:
    """Feed bytes, get complete requests; raises a 400-class AgtpError on bad framing."""

    def __init__(self, max_body_bytes: int = 256 * 1024) -> None:
        self._buf = bytearray()
        self._max_body = max_body_bytes
        self._pending: tuple[str, str, dict[str, str]] | None = None
        self._need = 0

    def feed(self, data: bytes) -> list[NativeRequest]:
        self._buf += data
        out: list[NativeRequest] = []
        while True:
            if self._pending is None:
                head = self._take_head()
                if head is None:
                    break
                self._pending = head
                self._need = self._content_length(head[2])
            if len(self._buf) < self._need:
                break
            version, method, headers = self._pending
            body = bytes(self._buf[: self._need])
            del self._buf[: self._need]
            self._pending = None
            out.append(NativeRequest(version, method, headers, body))
        return out

    def _take_head(self) -> tuple[str, str, dict[str, str]] | None:
        end = self._buf.find(b"\n\r\n")
        end_lf = self._buf.find(b"\n\n")
        cut = [e for e in (end, end_lf) if e >= 0]
        if not cut:
            if len(self._buf) > MAX_HEADER_BYTES:
                raise HeaderTooLarge(f"header section exceeds {MAX_HEADER_BYTES} bytes")
            return None
        stop = min(cut)
        sep = 3 if stop == end else 2
        raw = bytes(self._buf[:stop])
        del self._buf[: stop + sep]
        if len(raw) > MAX_HEADER_BYTES:
            raise HeaderTooLarge(f"header section exceeds {MAX_HEADER_BYTES} bytes")
        lines = [ln.rstrip(b"\r") for ln in raw.split(b"\n")]
        m = _START_RE.fullmatch(lines[0])
        if m is None:
            raise BadRequest("start line must be 'AGTP/1.0 METHOD'", code="invalid_start_line")
        if len(lines) - 1 > MAX_HEADER_COUNT:
            raise HeaderTooLarge(f"more than {MAX_HEADER_COUNT} header fields")
        headers: dict[str, str] = {}
        for line in lines[1:]:
            hm = _HEADER_RE.fullmatch(line)
            if hm is None:
                raise BadRequest("malformed header line", code="invalid_header_line")
            name = hm.group(1).decode("ascii").lower()
            value = hm.group(2).decode("latin-1")
            headers[name] = f"{headers[name]}, {value}" if name in headers else value
        return m.group(1).decode(), m.group(2).decode(), headers

    def _content_length(self, headers: dict[str, str]) -> int:
        value = headers.get("content-length")
        if value is None:
            return 0
        if not value.isdigit() or len(value) > 12:
            raise BadRequest(
                "Content-Length must be a decimal byte count", code="invalid_content_length"
            )
        n = int(value)
        if n > self._max_body:
            raise BodyTooLarge(f"body is {n} bytes; the limit is {self._max_body}")
        return n


def encode_response(status: int, headers: list[tuple[str, str]], body: bytes = b"") -> bytes:
    """``AGTP/1.0 <status> <reason>`` + headers + blank line + body."""
    lines = [f"{AGTP_VERSION} {status} {REASON.get(status, 'Unknown')}"]
    names = {n.lower() for n, _ in headers}
    extra = list(headers)
    if body and "content-type" not in names:
        extra.append(("Content-Type", CONTENT_TYPE))
    if body or status != 204:
        extra.append(("Content-Length", str(len(body))))
    lines += [f"{n}: {v}" for n, v in extra]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body
