"""A lean HTTP/2 client connection for bench/h2client.py: frames written and read
by hand, no ``h2`` state machine.

On a 2-core machine the load client shares the cores with the server it
measures. ``h2client.H2Conn`` (the ``h2`` library: HPACK with Huffman coding,
events, a validated state machine) spent 170-340 µs of CPU a request at c=16
(`bench/results/load.json`: 0.31 cores while ANS served 912 DISCOVERs/s with two
workers), so ANS's two workers could never have both cores. This connection
does the least a correct HTTP/2 client must (RFC 9113):

* the preface, SETTINGS (HEADER_TABLE_SIZE 0, ENABLE_PUSH 0, a 16 MiB stream
  window) and a 16 MiB connection WINDOW_UPDATE; SETTINGS and PING are
  acknowledged; received DATA is given back to the connection window in
  WINDOW_UPDATEs of at least half of it;
* requests: HPACK without Huffman coding. The headers that are the same on
  every request of the connection (``:method``, ``:path``, ``:scheme``,
  ``:authority``, the identity headers, ``content-type``) are inserted into the
  server's dynamic table by the first request and sent as one-byte indexes
  after that, as ``h2``'s encoder does; the rest (``task-id``,
  ``content-length``, ``authority-scope``) are literals that are never indexed,
  so this side's table never changes after the first request. Bodies respect
  the server's connection and stream windows and its MAX_FRAME_SIZE;
* responses: HEADERS (and CONTINUATION) blocks, DATA, RST_STREAM, GOAWAY,
  WINDOW_UPDATE. With HEADER_TABLE_SIZE 0 the server's encoder keeps no dynamic
  table, so ``:status`` is read from the block's first field (an index into
  HPACK's static table for 200, 204, 206, 304, 400, 404, 500); any other first
  field is decoded with ``hpack`` (a decoder with no table state to keep).

The interface is ``h2client.H2Conn``'s: ``request(headers, body)`` returns a
future of (status, body); ``Retry`` when the connection went away first.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from dataclasses import dataclass, field
from typing import Any

import hpack

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
WINDOW = 16 * 1024 * 1024
DEFAULT_WINDOW = 65_535
TABLE_MAX = 4_096  # the server's HPACK table (its SETTINGS_HEADER_TABLE_SIZE default)
GOAWAY_GRACE = 0.05  # s to wait for answers to accepted streams after a GOAWAY

DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = (
    0x0, 0x1, 0x3, 0x4, 0x6, 0x7, 0x8, 0x9,
)
END_STREAM, ACK, END_HEADERS, PADDED, PRIORITY = 0x1, 0x1, 0x4, 0x8, 0x20
S_HEADER_TABLE_SIZE, S_ENABLE_PUSH, S_INITIAL_WINDOW, S_MAX_FRAME = 0x1, 0x2, 0x4, 0x5
STATIC_STATUS = {8: 200, 9: 204, 10: 206, 11: 304, 12: 400, 13: 404, 14: 500}
# Names sent as literals on every request (their values change), never indexed.
VARYING = frozenset({b"task-id", b"content-length", b"authority-scope"})
_FRAME = struct.Struct(">I")


class Retry(Exception):
    """The connection went away before the stream was answered; send it again."""


def frame(kind: int, flags: int, stream: int, payload: bytes) -> bytes:
    return (_FRAME.pack(len(payload))[1:] + bytes((kind, flags))
            + _FRAME.pack(stream & 0x7FFFFFFF) + payload)


def hpack_int(value: int, prefix_bits: int, first: int) -> bytes:
    """RFC 7541 5.1: ``value`` with an N-bit prefix; ``first`` holds the high bits."""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes((first | value,))
    out = bytearray((first | limit,))
    value -= limit
    while value >= 128:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def hpack_string(raw: bytes) -> bytes:
    return hpack_int(len(raw), 7, 0x00) + raw  # H = 0: no Huffman coding


def literal(name: bytes, value: bytes, indexing: bool) -> bytes:
    """A literal field with a new name: with incremental indexing (0x40) or never (0x10)."""
    return (b"\x40" if indexing else b"\x10") + hpack_string(name) + hpack_string(value)


def read_int(block: bytes, pos: int, prefix_bits: int) -> tuple[int, int]:
    limit = (1 << prefix_bits) - 1
    value = block[pos] & limit
    pos += 1
    if value < limit:
        return value, pos
    shift = 0
    while True:
        b = block[pos]
        pos += 1
        value += (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return value, pos


def status_of(block: bytes) -> int:
    """``:status`` of a response header block sent with no dynamic table."""
    pos = 0
    while pos < len(block) and block[pos] & 0xE0 == 0x20:  # dynamic table size updates
        _, pos = read_int(block, pos, 5)
    if pos < len(block) and block[pos] & 0x80:
        index, _ = read_int(block, pos, 7)
        if index in STATIC_STATUS:
            return STATIC_STATUS[index]
    for name, value in hpack.Decoder().decode(block, raw=True):
        if name == b":status":
            return int(value)
    raise Retry("response without :status")


@dataclass
class Pending:
    fut: asyncio.Future[tuple[int, bytes]]
    status: int = 0
    body: list[bytes] = field(default_factory=list)
    out: bytes = b""  # request body bytes not yet sent (flow control)
    window: int = DEFAULT_WINDOW  # the server's window for this stream


class ClientConn(asyncio.Protocol):
    """What both engines' connections share: the streams awaiting an answer, and
    the end of the connection (``close`` says goodbye with :meth:`_goodbye`)."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.pending: dict[int, Pending] = {}
        self.usable = True  # False after GOAWAY or connection loss: open a new one
        self.goaway = False

    def connection_lost(self, exc: Exception | None) -> None:
        self.usable = False
        self._fail_all()

    def _fail_all(self) -> None:
        pending, self.pending = self.pending, {}
        for p in pending.values():
            if not p.fut.done():
                p.fut.set_exception(Retry("connection lost"))

    def _goodbye(self) -> None:
        """Write this engine's GOAWAY (errors are ignored: the socket closes next)."""

    def close(self) -> None:
        self.usable = False
        self._fail_all()
        if self.transport is not None and not self.transport.is_closing():
            with contextlib.suppress(Exception):
                self._goodbye()
            self.transport.close()


class RawH2Conn(ClientConn):
    """One h2c client connection; ``request`` returns (status, body)."""

    def __init__(self) -> None:
        super().__init__()
        self.next_sid = 1
        self.buf = b""
        self.block: bytearray | None = None  # a header block awaiting CONTINUATION
        self.block_sid = 0
        self.block_end = False
        self.consumed = 0  # DATA bytes received since the last connection WINDOW_UPDATE
        self.send_window = DEFAULT_WINDOW  # the server's connection window
        self.stream_window = DEFAULT_WINDOW  # the server's initial stream window
        self.max_frame = 16_384
        self.table: dict[tuple[bytes, bytes], int] = {}  # inserted field -> insertion order
        self.table_size = 0  # RFC 7541 4.1: name + value + 32 per entry, at most 4,096

    # -- asyncio.Protocol ----------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        settings = b"".join(
            struct.pack(">HI", k, v)
            for k, v in ((S_HEADER_TABLE_SIZE, 0), (S_ENABLE_PUSH, 0), (S_INITIAL_WINDOW, WINDOW))
        )
        transport.write(PREFACE + frame(SETTINGS, 0, 0, settings)
                        + frame(WINDOW_UPDATE, 0, 0, _FRAME.pack(WINDOW)))

    def data_received(self, data: bytes) -> None:
        buf = self.buf + data if self.buf else data
        pos, end = 0, len(buf)
        out: list[bytes] = []
        while end - pos >= 9:
            length = int.from_bytes(buf[pos : pos + 3], "big")
            if end - pos < 9 + length:
                break
            kind, flags = buf[pos + 3], buf[pos + 4]
            sid = int.from_bytes(buf[pos + 5 : pos + 9], "big") & 0x7FFFFFFF
            payload = buf[pos + 9 : pos + 9 + length]
            pos += 9 + length
            self._frame(kind, flags, sid, payload, out)
        self.buf = buf[pos:]
        if self.consumed >= WINDOW // 2:
            out.append(frame(WINDOW_UPDATE, 0, 0, _FRAME.pack(self.consumed)))
            self.consumed = 0
        if out and self.transport is not None and not self.transport.is_closing():
            self.transport.write(b"".join(out))

    def _frame(self, kind: int, flags: int, sid: int, payload: bytes, out: list[bytes]) -> None:
        if kind == DATA:
            self.consumed += len(payload)
            if flags & PADDED:
                payload = payload[1 : len(payload) - payload[0]]
            p = self.pending.get(sid)
            if p is not None:
                p.body.append(payload)
                if flags & END_STREAM:
                    self._done(sid)
        elif kind == HEADERS:
            if flags & PADDED:
                payload = payload[1 : len(payload) - payload[0]]
            if flags & PRIORITY:
                payload = payload[5:]
            if flags & END_HEADERS:
                self._headers(sid, payload, bool(flags & END_STREAM))
            else:
                self.block, self.block_sid, self.block_end = (
                    bytearray(payload), sid, bool(flags & END_STREAM))
        elif kind == CONTINUATION and self.block is not None:
            self.block += payload
            if flags & END_HEADERS:
                block, self.block = bytes(self.block), None
                self._headers(self.block_sid, block, self.block_end)
        elif kind == SETTINGS and not flags & ACK:
            for i in range(0, len(payload) - 5, 6):
                key, value = struct.unpack_from(">HI", payload, i)
                if key == S_INITIAL_WINDOW:
                    delta = value - self.stream_window
                    self.stream_window = value
                    for p in self.pending.values():
                        p.window += delta
                elif key == S_MAX_FRAME:
                    self.max_frame = value
            out.append(frame(SETTINGS, ACK, 0, b""))
            self._send_blocked(out)
        elif kind == PING and not flags & ACK:
            out.append(frame(PING, ACK, 0, payload))
        elif kind == WINDOW_UPDATE:
            inc = _FRAME.unpack(payload[:4])[0] & 0x7FFFFFFF
            if sid == 0:
                self.send_window += inc
            elif (p := self.pending.get(sid)) is not None:
                p.window += inc
            self._send_blocked(out)
        elif kind == RST_STREAM:
            p = self.pending.pop(sid, None)
            if p is not None and not p.fut.done():
                code = _FRAME.unpack(payload[:4])[0]
                p.fut.set_exception(Retry(f"stream reset ({code})"))
        elif kind == GOAWAY:
            self.usable = False
            self.goaway = True
            last = _FRAME.unpack(payload[:4])[0] & 0x7FFFFFFF
            for s in [s for s in self.pending if s > last]:
                p = self.pending.pop(s)
                if not p.fut.done():
                    p.fut.set_exception(Retry("GOAWAY"))
            # The streams the server did accept may never be answered once it
            # has sent GOAWAY (hypercorn): a short grace, then retry elsewhere.
            asyncio.get_running_loop().call_later(GOAWAY_GRACE, self.close)

    def _headers(self, sid: int, block: bytes, end_stream: bool) -> None:
        p = self.pending.get(sid)
        if p is None:
            return
        if p.status:  # trailers after the final answer: only their END_STREAM matters
            if end_stream:
                self._done(sid)
            return
        try:
            status = status_of(block)
        except (Retry, hpack.HPACKError, IndexError) as exc:
            self.pending.pop(sid, None)
            if not p.fut.done():
                p.fut.set_exception(Retry(f"unreadable response headers: {exc}"))
            return
        if 100 <= status < 200:
            return  # an informational answer: the final one follows
        p.status = status
        if end_stream:
            self._done(sid)

    def _done(self, sid: int) -> None:
        p = self.pending.pop(sid, None)
        if p is not None and not p.fut.done():
            p.fut.set_result((p.status, b"".join(p.body)))

    # -- requests -------------------------------------------------------------
    def _encode(self, headers: list[tuple[bytes, bytes]]) -> bytes:
        parts = []
        table = self.table
        for name, value in headers:
            if name in VARYING:
                parts.append(literal(name, value, indexing=False))
                continue
            key = (name, value)
            order = table.get(key)
            if order is None:
                size = len(name) + len(value) + 32
                if self.table_size + size > TABLE_MAX:  # nothing is ever evicted
                    parts.append(literal(name, value, indexing=False))
                    continue
                table[key] = len(table)
                self.table_size += size
                parts.append(literal(name, value, indexing=True))
            else:  # the newest entry is index 62 (RFC 7541 2.3.3)
                parts.append(hpack_int(62 + len(table) - 1 - order, 7, 0x80))
        return b"".join(parts)

    def request(self, headers: list[tuple[bytes, bytes]], body: bytes) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[tuple[int, bytes]] = loop.create_future()
        if not self.usable or self.transport is None or self.transport.is_closing():
            fut.set_exception(Retry("connection not usable"))
            return fut
        sid = self.next_sid
        if sid > 0x7FFFFFFF:
            self.usable = False
            fut.set_exception(Retry("stream ids exhausted"))
            return fut
        self.next_sid += 2
        block = self._encode(headers)
        if len(block) > self.max_frame:
            self.usable = False
            fut.set_exception(Retry("header block larger than one frame"))
            return fut
        p = Pending(fut, out=body, window=self.stream_window)
        self.pending[sid] = p
        out = [frame(HEADERS, END_HEADERS | (0 if body else END_STREAM), sid, block)]
        if body:
            self._send_body(sid, p, out)
        self.transport.write(b"".join(out))
        return fut

    def _send_body(self, sid: int, p: Pending, out: list[bytes]) -> None:
        while p.out:
            n = min(len(p.out), self.send_window, p.window, self.max_frame)
            if n <= 0:
                return
            chunk, p.out = p.out[:n], p.out[n:]
            self.send_window -= n
            p.window -= n
            out.append(frame(DATA, 0 if p.out else END_STREAM, sid, chunk))

    def _send_blocked(self, out: list[bytes]) -> None:
        for sid, p in list(self.pending.items()):
            if p.out:
                self._send_body(sid, p, out)

    def _goodbye(self) -> None:
        assert self.transport is not None
        # the last stream id of a client's GOAWAY names server-initiated streams: none
        self.transport.write(frame(GOAWAY, 0, 0, struct.pack(">II", 0, 0)))
