"""bench/h2raw.py's HPACK and framing, checked against the ``hpack`` library: what
it encodes decodes to the headers it was given (its dynamic-table references
included, request after request on one connection), and ``:status`` is read
right from blocks that ``hpack``'s encoder wrote with no dynamic table, the
way a server answers a client whose SETTINGS_HEADER_TABLE_SIZE is 0. No server:
tests/integration/test_integration_loadbench.py runs the client against one."""

from __future__ import annotations

import asyncio
import struct
import sys
from pathlib import Path

import hpack
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import h2raw  # noqa: E402


@pytest.mark.parametrize("value", [0, 1, 30, 31, 126, 127, 128, 255, 1337, 70_000])
@pytest.mark.parametrize("bits", [4, 5, 7])
def test_hpack_int_round_trips(value, bits):
    encoded = h2raw.hpack_int(value, bits, 0)
    assert h2raw.read_int(encoded, 0, bits) == (value, len(encoded))
    # RFC 7541 C.1.2: 1337 with a 5-bit prefix is 1f 9a 0a
    assert h2raw.hpack_int(1337, 5, 0) == bytes.fromhex("1f9a0a")


class _Transport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.written: list[bytes] = []

    def write(self, data: bytes) -> None:  # type: ignore[override]
        self.written.append(bytes(data))

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass


def _frames(data: bytes) -> list[tuple[int, int, int, bytes]]:
    out, pos = [], 0
    while pos < len(data):
        length = int.from_bytes(data[pos : pos + 3], "big")
        kind, flags = data[pos + 3], data[pos + 4]
        sid = struct.unpack(">I", data[pos + 5 : pos + 9])[0] & 0x7FFFFFFF
        out.append((kind, flags, sid, data[pos + 9 : pos + 9 + length]))
        pos += 9 + length
    return out


def _headers(i: int) -> list[tuple[bytes, bytes]]:
    return [
        (b":method", b"DISCOVER"), (b":path", b"/"), (b":scheme", b"http"),
        (b":authority", b"127.0.0.1:4480"), (b"agtp-version", b"AGTP/1.0"),
        (b"agent-id", b"agtp://bench.example/agents/loadgen-0"),
        (b"authority-scope", b"discovery:query zone:%d" % (i % 3)),
        (b"task-id", b"t-dis-%d" % i), (b"content-type", b"application/agtp+json"),
        (b"content-length", b"%d" % (40 + i)),
    ]  # fmt: skip


def test_requests_decode_to_their_headers_on_one_connection():
    async def run() -> None:
        conn = h2raw.RawH2Conn()
        transport = _Transport()
        conn.connection_made(transport)
        preface = transport.written[0]
        assert preface.startswith(h2raw.PREFACE)
        settings = _frames(preface[len(h2raw.PREFACE) :])
        assert settings[0][0] == h2raw.SETTINGS and settings[1][0] == h2raw.WINDOW_UPDATE
        decoder = hpack.Decoder()  # the server's: it keeps the dynamic table we fill
        for i in range(6):
            body = b"x" * (40 + i)
            conn.request(_headers(i), body)
            frames = _frames(transport.written[-1])
            (kind, flags, sid, block), (dkind, dflags, dsid, data) = frames
            assert (kind, sid, dkind, dsid) == (h2raw.HEADERS, 2 * i + 1, h2raw.DATA, 2 * i + 1)
            assert flags & h2raw.END_HEADERS and not flags & h2raw.END_STREAM
            assert dflags & h2raw.END_STREAM and data == body
            assert decoder.decode(block, raw=True) == _headers(i)
            if i:  # the fixed headers are one-byte indexes after the first request
                assert len(block) < 120
        conn.close()

    asyncio.run(run())


@pytest.mark.parametrize("status", [200, 204, 404, 422, 429, 451, 500, 503])
def test_status_read_from_a_block_without_dynamic_table(status):
    enc = hpack.Encoder()
    enc.header_table_size = 0  # what a server does on SETTINGS_HEADER_TABLE_SIZE 0
    headers = [(b":status", b"%d" % status), (b"agtp-version", b"AGTP/1.0"),
               (b"content-type", b"application/agtp+json")]
    first = enc.encode(headers, huffman=True)
    assert first[0] & 0xE0 == 0x20  # the block opens with the table size update
    assert h2raw.status_of(first) == status
    assert h2raw.status_of(enc.encode(headers, huffman=True)) == status


def test_a_response_completes_its_request_and_flow_control_is_returned():
    async def run() -> None:
        conn = h2raw.RawH2Conn()
        transport = _Transport()
        conn.connection_made(transport)
        fut = conn.request(_headers(0), b"{}")
        enc = hpack.Encoder()
        enc.header_table_size = 0
        block = enc.encode([(b":status", b"451"), (b"content-type", b"application/json")])
        body = b"y" * (h2raw.WINDOW // 2 + 10)
        wire = h2raw.frame(h2raw.SETTINGS, 0, 0, b"") + h2raw.frame(
            h2raw.HEADERS, h2raw.END_HEADERS, 1, block)
        for start in range(0, len(body), 16_384):
            chunk = body[start : start + 16_384]
            last = start + 16_384 >= len(body)
            wire += h2raw.frame(h2raw.DATA, h2raw.END_STREAM if last else 0, 1, chunk)
        for start in range(0, len(wire), 1000):  # split anywhere, as TCP may
            conn.data_received(wire[start : start + 1000])
        assert fut.done() and fut.result() == (451, body)
        sent = [f for w in transport.written[1:] for f in _frames(w)]
        assert (h2raw.SETTINGS, h2raw.ACK, 0, b"") in sent
        updates = [struct.unpack(">I", f[3])[0] for f in sent if f[0] == h2raw.WINDOW_UPDATE]
        assert sum(updates) >= h2raw.WINDOW // 2
        conn.close()

    asyncio.run(run())


def test_trailers_end_the_stream_without_changing_the_status():
    async def run() -> None:
        conn = h2raw.RawH2Conn()
        conn.connection_made(_Transport())
        fut = conn.request(_headers(0), b"{}")
        enc = hpack.Encoder()
        enc.header_table_size = 0
        head = h2raw.frame(h2raw.HEADERS, h2raw.END_HEADERS, 1, enc.encode([(b":status", b"200")]))
        data = h2raw.frame(h2raw.DATA, 0, 1, b"answer")
        trailers = h2raw.frame(
            h2raw.HEADERS, h2raw.END_HEADERS | h2raw.END_STREAM, 1, enc.encode([(b"x-t", b"1")])
        )
        conn.data_received(head + data)
        assert not fut.done()
        conn.data_received(trailers)
        assert fut.result() == (200, b"answer")
        conn.close()

    asyncio.run(run())
