"""The native AGTP/1.0 framing as sans-IO incremental parsers and encoders.

A request is a start line ``AGTP/1.0 METHOD``, header lines ``Name: value``,
a blank line, then ``Content-Length`` bytes of body (CRLF or bare LF line
endings). :class:`NativeParser` turns fed bytes into :class:`NativeRequest`
frames whose (method, headers, body) go through the same ``parse_*``
functions as the HTTP/2 binding, so both produce identical typed requests.
:func:`encode_response` writes ``AGTP/1.0 200 OK`` responses.

The client side mirrors it: :func:`encode_request` writes a request (names
and values checked, so nothing a caller passes can split a header line) and
:class:`NativeResponseParser` reads ``AGTP/1.0 <status> <reason>`` answers,
each bounded in header and body size. Answers come back in request order
(there are no stream ids), which is what lets one connection carry a
pipeline. No sockets here.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from .binding import MAX_HEADER_BYTES, MAX_HEADER_COUNT, UNIQUE_HEADERS, duplicate_header
from .errors import AgtpError, BadRequest, BodyTooLarge, ErrorCode, HeaderTooLarge
from .messages import AGTP_VERSION, CONTENT_TYPE
from .status import REASON

# The request line: version, method and (newer drafts, -09 "Request Line
# Grammar") an optional request-target: path-absolute [ "?" query ], no "#".
_START_RE = re.compile(
    rb"(AGTP/1(?:\.\d{1,3})?) ([A-Z][A-Z0-9_-]{0,31})(?: (/[\x21-\x22\x24-\x7e]{0,2047}))?"
)
_STATUS_RE = re.compile(rb"(AGTP/1(?:\.\d{1,3})?) ([1-5]\d\d)(?: [\x20-\x7e]{0,128})?")
_HEADER_NAME = r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,64}"
# One header line: name, colon, value without surrounding blanks (or trailing CRs).
_HEADER_LINE_RE = re.compile(rb"^(" + _HEADER_NAME.encode() + rb"):[ \t]*(.*?)[ \t]*\r*$", re.M)
_NAME_RE = re.compile(_HEADER_NAME)
_TARGET_RE = re.compile(r"/[\x21-\x22\x24-\x7e]{0,2047}")
_METHOD_RE = re.compile(r"[A-Z][A-Z0-9_-]{0,31}")
# What a header value may not hold on the wire: CR, LF and other controls.
_BAD_VALUE_RE = re.compile(r"[^\x20-\x7e\x80-\xff\t]")


@dataclass(frozen=True, slots=True)
class NativeRequest:
    version: str
    method: str
    headers: dict[str, str]
    body: bytes
    # The request-line target (path and query) when the line had one (newer dialect).
    target: str | None = None


@dataclass(frozen=True, slots=True)
class NativeResponse:
    status: int
    headers: dict[str, str]
    body: bytes


class _FrameReader:
    """Start line + header lines + blank line + ``Content-Length`` body, fed
    incrementally; subclasses say what a start line is and which header
    fields may not repeat (others are joined with ", ")."""

    unique_headers: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, max_body_bytes: int) -> None:
        self._buf = bytearray()
        self._max_body = max_body_bytes
        self._pending: tuple[re.Match[bytes], dict[str, str]] | None = None
        self._need = 0
        # Set once the stream is broken; every later feed raises it.
        self.failed: AgtpError | None = None

    @property
    def buffered(self) -> int:
        """Bytes received but not yet part of a complete frame."""
        return len(self._buf)

    def _frames(self, data: bytes) -> list[tuple[re.Match[bytes], dict[str, str], bytes]]:
        if self.failed is not None:
            raise self.failed
        self._buf += data
        out: list[tuple[re.Match[bytes], dict[str, str], bytes]] = []
        while True:
            if self._pending is None:
                if not self._buf:
                    break
                try:
                    head = self._take_head()
                    if head is not None:
                        self._need = self._content_length(head[1])
                except AgtpError as exc:
                    # The frames before the bad one are still good: hand them
                    # out now and raise on the next feed (see ``failed``).
                    self.failed = exc
                    if not out:
                        raise
                    break
                if head is None:
                    break
                self._pending = head
            if len(self._buf) < self._need:
                break
            start, headers = self._pending
            body = bytes(self._buf[: self._need])
            del self._buf[: self._need]
            self._pending = None
            out.append((start, headers, body))
        return out

    def _start(self, line: bytes) -> re.Match[bytes]:
        raise NotImplementedError

    def _take_head(self) -> tuple[re.Match[bytes], dict[str, str]] | None:
        end = self._buf.find(b"\n\r\n")
        end_lf = self._buf.find(b"\n\n")
        cut = [e for e in (end, end_lf) if e >= 0]
        if not cut:
            if len(self._buf) > MAX_HEADER_BYTES:
                raise HeaderTooLarge(f"header section exceeds {MAX_HEADER_BYTES} bytes")
            return None
        stop = min(cut)
        sep = 3 if stop == end else 2
        if stop > MAX_HEADER_BYTES:
            raise HeaderTooLarge(f"header section exceeds {MAX_HEADER_BYTES} bytes")
        raw = bytes(self._buf[:stop])
        del self._buf[: stop + sep]
        first, newline, rest = raw.partition(b"\n")
        start = self._start(first.rstrip(b"\r"))
        headers: dict[str, str] = {}
        if not newline:
            return start, headers
        count = rest.count(b"\n") + 1
        if count > MAX_HEADER_COUNT:
            raise HeaderTooLarge(f"more than {MAX_HEADER_COUNT} header fields")
        # One scan for the whole block: each line matches at most once, so
        # every line is well formed exactly when there are as many matches.
        found = _HEADER_LINE_RE.findall(rest)
        if len(found) != count:
            raise BadRequest("malformed header line", code=ErrorCode.INVALID_HEADER_LINE)
        for raw_name, raw_value in found:
            name = raw_name.decode("ascii").lower()
            value = raw_value.decode("latin-1")
            if name in headers:
                if name in self.unique_headers:
                    raise duplicate_header(name)
                headers[name] = f"{headers[name]}, {value}"
            else:
                headers[name] = value
        return start, headers

    def _content_length(self, headers: dict[str, str]) -> int:
        value = headers.get("content-length")
        if value is None:
            return 0
        if not value.isdigit() or len(value) > 12:
            raise BadRequest(
                "Content-Length must be a decimal byte count", code=ErrorCode.INVALID_CONTENT_LENGTH
            )
        n = int(value)
        if n > self._max_body:
            raise BodyTooLarge(f"body is {n} bytes; the limit is {self._max_body}")
        return n


class NativeParser(_FrameReader):
    """Feed bytes, get complete requests; raises a 400-class AgtpError on bad
    framing, and on a repeated identity header (``duplicate_header``, as the
    HTTP/2 binding answers it)."""

    unique_headers = UNIQUE_HEADERS

    def __init__(self, max_body_bytes: int = 256 * 1024) -> None:
        super().__init__(max_body_bytes)

    def feed(self, data: bytes) -> list[NativeRequest]:
        return [
            NativeRequest(
                m.group(1).decode(),
                m.group(2).decode(),
                headers,
                body,
                m.group(3).decode("ascii") if m.group(3) is not None else None,
            )
            for m, headers, body in self._frames(data)
        ]

    def _start(self, line: bytes) -> re.Match[bytes]:
        m = _START_RE.fullmatch(line)
        if m is None:
            raise BadRequest(
                "start line must be 'AGTP/1.0 METHOD' or 'AGTP/1.0 METHOD /path' (no '#')",
                code=ErrorCode.INVALID_START_LINE,
            )
        return m


class NativeResponseParser(_FrameReader):
    """Feed a server's bytes, get complete answers in order. Bad framing or an
    answer over ``max_body_bytes`` raises the same typed errors as requests."""

    def feed(self, data: bytes) -> list[NativeResponse]:
        return [
            NativeResponse(int(m.group(2)), headers, body)
            for m, headers, body in self._frames(data)
        ]

    def _start(self, line: bytes) -> re.Match[bytes]:
        m = _STATUS_RE.fullmatch(line)
        if m is None:
            raise BadRequest(
                "status line must be 'AGTP/1.0 <status> <reason>'",
                code=ErrorCode.INVALID_START_LINE,
            )
        return m


def encode_request(
    method: str, headers: Mapping[str, str], body: bytes = b"", *, target: str | None = None
) -> bytes:
    """``AGTP/1.0 METHOD [target]`` + headers + ``Content-Length`` + blank
    line + body. ValueError for a method, target, name or value that would
    break the framing."""
    if not _sendable_method(method):
        raise ValueError(f"not an AGTP method: {method[:40]!r}")
    line = f"{AGTP_VERSION} {method}"
    if target is not None:
        if _TARGET_RE.fullmatch(target) is None:
            raise ValueError(f"not a request target: {target[:40]!r}")
        line = f"{line} {target}"
    lines = [line]
    for name, value in headers.items():
        if not _sendable_name(name):
            raise ValueError(f"header name {name[:40]!r} cannot be sent")
        lines.append(f"{name}: {value}")
    values = "\t".join(headers.values())  # a tab may be in a value, so it hides nothing
    if _BAD_VALUE_RE.search(values) is not None:
        bad = next(n for n, v in headers.items() if _BAD_VALUE_RE.search(v) is not None)
        raise ValueError(f"header {bad[:40]} has a value that cannot be sent")
    if len(values) > MAX_HEADER_BYTES:  # a peer would refuse the header section anyway
        long = [n for n, v in headers.items() if len(v) > MAX_HEADER_BYTES]
        what = f"header {long[0][:40]} has a value" if long else "the header values are"
        raise ValueError(f"{what} over {MAX_HEADER_BYTES} bytes")
    lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


@functools.lru_cache(maxsize=64)
def _sendable_method(method: str) -> bool:
    return _METHOD_RE.fullmatch(method) is not None


@functools.lru_cache(maxsize=256)
def _sendable_name(name: str) -> bool:
    return _NAME_RE.fullmatch(name) is not None and name.lower() != "content-length"


def encode_response(status: int, headers: list[tuple[str, str]], body: bytes = b"") -> bytes:
    """``AGTP/1.0 <status> <reason>`` + headers + blank line + body.

    A header whose name is not a token or whose value holds CR, LF, another
    control character or a character beyond Latin-1 is left out: nothing a
    caller passes can split a line or forge a header (or a second answer)."""
    lines = [f"{AGTP_VERSION} {status} {REASON.get(status, 'Unknown')}"]
    if _BAD_VALUE_RE.search("\t".join(v for _, v in headers)) is not None or not all(
        _sendable_name(n) for n, _ in headers
    ):
        headers = [
            (n, v) for n, v in headers if _sendable_name(n) and _BAD_VALUE_RE.search(v) is None
        ]
    names = {n.lower() for n, _ in headers}
    extra = list(headers)
    if body and "content-type" not in names:
        extra.append(("Content-Type", CONTENT_TYPE))
    if body or status != 204:
        extra.append(("Content-Length", str(len(body))))
    lines += [f"{n}: {v}" for n, v in extra]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body
