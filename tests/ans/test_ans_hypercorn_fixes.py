"""ans.hypercorn_fixes patches hypercorn's connection handling once per process."""

from __future__ import annotations

import asyncio
from typing import Any

import structlog.testing
from hypercorn.asyncio.tcp_server import TCPServer
from hypercorn.protocol import ProtocolWrapper
from hypercorn.protocol.h2 import H2Protocol
from hyperframe.frame import (
    DataFrame,
    GoAwayFrame,
    HeadersFrame,
    PingFrame,
    PriorityFrame,
    RstStreamFrame,
    SettingsFrame,
    WindowUpdateFrame,
)

from ans import hypercorn_fixes


def test_install_patches_once() -> None:
    hypercorn_fixes.install()

    def current() -> tuple[object, ...]:
        return (
            H2Protocol._handle_events,
            H2Protocol.handle,
            H2Protocol._create_stream,
            TCPServer.run,
            TCPServer._read_data,
            TCPServer._idle_timeout,
            ProtocolWrapper.handle,
        )

    patched = current()
    assert all(getattr(fn, "_ans_hypercorn_fixes", False) for fn in patched)
    hypercorn_fixes.install()
    assert current() == patched


class _Proto:
    """Just what the control-frame budget reads and writes on a connection."""


PING = PingFrame(0, opaque_data=b"12345678").serialize()


def _frames(*frames: Any) -> bytes:
    return b"".join(f.serialize() for f in frames)


def test_the_counter_counts_control_frames_but_not_requests() -> None:
    headers = HeadersFrame(1, data=b"\x82", flags={"END_HEADERS"})
    counter = hypercorn_fixes.FrameCounter()
    assert counter.feed(hypercorn_fixes.PREFACE + SettingsFrame(0).serialize()) == 1
    assert counter.feed(_frames(headers, DataFrame(1, data=b"{}" * 40, flags={"END_STREAM"}))) == 0
    assert counter.feed(PING * 3) == 3
    assert counter.feed(_frames(RstStreamFrame(1), WindowUpdateFrame(1, window_increment=1))) == 2
    assert counter.feed(_frames(PriorityFrame(3), GoAwayFrame(0))) == 2
    assert counter.feed(b"\x00\x00\x00\x20\x00\x00\x00\x00\x00") == 1  # an unknown type
    # DATA that carries (almost) nothing and does not end its stream
    assert counter.feed(_frames(DataFrame(1, data=b""), DataFrame(1, data=b"x"))) == 2
    assert counter.feed(_frames(DataFrame(1, data=b"", flags={"END_STREAM"}))) == 0
    assert counter.feed(_frames(DataFrame(1, data=b"x" * 64))) == 0
    # padding alone is not data
    assert counter.feed(_frames(DataFrame(1, data=b"", pad_length=200, flags={"PADDED"}))) == 1
    padded = DataFrame(1, data=b"y" * 64, pad_length=200, flags={"PADDED"})
    assert counter.feed(_frames(padded)) == 0


def test_the_counter_follows_frames_cut_anywhere() -> None:
    stream = hypercorn_fixes.PREFACE + _frames(
        SettingsFrame(0),
        HeadersFrame(1, data=b"\x82" * 30, flags={"END_HEADERS"}),
        DataFrame(1, data=b"", pad_length=100, flags={"PADDED"}),
        DataFrame(1, data=b"z" * 300, pad_length=10, flags={"PADDED", "END_STREAM"}),
        PingFrame(0),
        WindowUpdateFrame(0, window_increment=5),
    )
    for size in (1, 2, 7, 9, 10, 64, 4096):
        counter = hypercorn_fixes.FrameCounter()
        pieces = [stream[i : i + size] for i in range(0, len(stream), size)]
        assert sum(counter.feed(piece) for piece in pieces) == 4, size


def test_the_budget_is_a_burst_then_a_rate_and_answers_and_bytes_earn_more() -> None:
    async def run() -> None:
        burst = int(hypercorn_fixes.CONTROL_BURST)
        proto = _Proto()
        assert hypercorn_fixes._charge(proto, burst)
        assert not hypercorn_fixes._charge(proto, 1)  # one over

        proto = _Proto()
        assert hypercorn_fixes._charge(proto, burst - 1)
        setattr(proto, hypercorn_fixes._ANSWERED, 1)  # an answer earns CONTROL_PER_ANSWER
        assert hypercorn_fixes._charge(proto, 3)
        assert not hypercorn_fixes._charge(proto, 2)

        proto = _Proto()
        assert hypercorn_fixes._charge(proto, burst)
        await asyncio.sleep(0.2)  # ~0.2 s x CONTROL_RATE frames come back
        assert hypercorn_fixes._charge(proto, 3)

        # Bytes sent earn WINDOW_UPDATEs: 64 KB of answers, 64 more frames.
        proto = _Proto()
        assert hypercorn_fixes._charge(proto, burst)
        setattr(proto, hypercorn_fixes._SENT, 64 * 1024)
        assert hypercorn_fixes._charge(proto, 60)
        assert not hypercorn_fixes._charge(proto, 8)

    asyncio.run(run())


def test_connections_ended_in_a_flood_are_logged_once_a_second() -> None:
    async def run() -> list[dict[str, object]]:
        hypercorn_fixes._calm_log.update(at=float("-inf"), unlogged=0)
        with structlog.testing.capture_logs() as logs:
            for _ in range(50):
                hypercorn_fixes._log_calm("control-frame flood", "192.0.2.1")
            await asyncio.sleep(hypercorn_fixes.CALM_LOG_EVERY + 0.05)
            hypercorn_fixes._log_calm("control-frame flood", "192.0.2.1")
        return logs

    logs = asyncio.run(run())
    assert [entry["also_ended_since_last_line"] for entry in logs] == [0, 49]
    assert all(entry["client"] == "192.0.2.1" for entry in logs)


def test_connections_are_counted_per_ipv4_address_or_ipv6_64() -> None:
    assert hypercorn_fixes.client_key("192.0.2.7") == "192.0.2.7"
    assert hypercorn_fixes.client_key("::ffff:192.0.2.7") == "192.0.2.7"
    assert hypercorn_fixes.client_key("2001:db8:1:2::99") == "2001:db8:1:2::/64"
    assert hypercorn_fixes.client_key("2001:db8:1:2:ffff::1") == "2001:db8:1:2::/64"
    assert hypercorn_fixes.client_key("2001:db8:1:3::1") == "2001:db8:1:3::/64"
    assert hypercorn_fixes.client_key("?") == "?"
