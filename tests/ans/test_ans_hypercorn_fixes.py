"""ans.hypercorn_fixes patches hypercorn's connection handling once per process."""

from __future__ import annotations

import asyncio

import h2.events
import structlog.testing
from hypercorn.asyncio.tcp_server import TCPServer
from hypercorn.protocol import ProtocolWrapper
from hypercorn.protocol.h2 import H2Protocol
from hyperframe.frame import PingFrame

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


def _ping() -> h2.events.PingReceived:
    return h2.events.PingReceived(ping_data=b"12345678")


def _data(payload: bytes, *, ended: bool = False) -> h2.events.DataReceived:
    return h2.events.DataReceived(
        stream_id=1,
        data=payload,
        flow_controlled_length=len(payload),
        stream_ended=h2.events.StreamEnded(stream_id=1) if ended else None,
    )


def _request() -> h2.events.RequestReceived:
    return h2.events.RequestReceived(stream_id=1, headers=[])


def test_control_frames_are_counted_and_request_frames_are_not() -> None:
    empty_end = _data(b"", ended=True)  # END_STREAM: it finishes a request
    assert hypercorn_fixes._control_frame(_ping())
    assert hypercorn_fixes._control_frame(_data(b""))
    assert hypercorn_fixes._control_frame(h2.events.RemoteSettingsChanged())
    assert hypercorn_fixes._control_frame(h2.events.PriorityUpdated())
    assert hypercorn_fixes._control_frame(h2.events.UnknownFrameReceived(frame=PingFrame(0)))
    assert not hypercorn_fixes._control_frame(_data(b"{}"))
    assert not hypercorn_fixes._control_frame(empty_end)
    assert not hypercorn_fixes._control_frame(_request())
    assert hypercorn_fixes._control_frame(h2.events.WindowUpdated(stream_id=0, delta=1))


def test_the_budget_is_a_burst_then_a_rate_and_requests_earn_more() -> None:
    async def run() -> None:
        burst = int(hypercorn_fixes.CONTROL_BURST)
        proto = _Proto()
        assert hypercorn_fixes._within_budget(proto, [_ping()] * burst)
        assert not hypercorn_fixes._within_budget(proto, [_ping()])  # one over

        proto = _Proto()
        assert hypercorn_fixes._within_budget(proto, [_ping()] * (burst - 1))
        # a request earns CONTROL_PER_REQUEST frames, e.g. its PRIORITY frame
        assert hypercorn_fixes._within_budget(proto, [_request(), _ping(), _ping()])
        assert not hypercorn_fixes._within_budget(proto, [_ping(), _ping()])

        proto = _Proto()
        assert hypercorn_fixes._within_budget(proto, [_ping()] * burst)
        await asyncio.sleep(0.2)  # ~0.2 s x CONTROL_RATE frames come back
        assert hypercorn_fixes._within_budget(proto, [_ping()] * 3)

        # Bytes sent earn WINDOW_UPDATEs: 64 KB of answers, 64 more frames.
        proto = _Proto()
        update = h2.events.WindowUpdated(stream_id=0, delta=32768)
        assert hypercorn_fixes._within_budget(proto, [update] * burst)
        assert not hypercorn_fixes._within_budget(proto, [update] * 8)
        proto = _Proto()
        assert hypercorn_fixes._within_budget(proto, [update] * burst)
        setattr(proto, hypercorn_fixes._SENT, 64 * 1024)
        assert hypercorn_fixes._within_budget(proto, [update] * 60)

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
