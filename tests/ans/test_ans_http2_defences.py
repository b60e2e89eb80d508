"""ans.http2_defences: installed once per process, only on the hypercorn it
was written for; the sans-IO parts (frame counter, budget, calm log, client
key). What each defence changes against plain hypercorn:
tests/ans/test_ans_http2_defences_vs_plain.py."""

from __future__ import annotations

import dataclasses
import importlib.metadata
from pathlib import Path
from typing import Any

import pytest
import structlog.testing
from hypercorn.config import Config as HypercornConfig
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

from ans import cli, drain, http2_defences
from ans.http2_defences import control_frames, hooks


def test_install_patches_once() -> None:
    drain.install()

    def current() -> tuple[object, ...]:
        return tuple(getattr(h.owner, h.name) for h in hooks.HOOKS)

    patched = current()
    assert all(
        getattr(getattr(h.owner, h.name), hooks.MARK, False) == h.patched for h in hooks.HOOKS
    )
    http2_defences.install()
    drain.install()
    assert current() == patched


def test_install_refuses_another_hypercorn_in_one_line() -> None:
    hooks.check_version("0.18.0")
    hooks.check_version("0.18.3rc1")
    for other in ("0.17.2", "0.19.0", "1.0", "garbage"):
        with pytest.raises(hooks.UnsupportedHypercorn) as caught:
            hooks.check_version(other)
        message = str(caught.value)
        assert "\n" not in message
        assert message.startswith("ANS's HTTP/2 defences were written for hypercorn 0.18.x")
        assert f"found {other}" in message


class _Changed:
    async def handle(self, event: object, extra: object) -> None:
        pass


def test_install_refuses_a_hypercorn_whose_methods_changed() -> None:
    hooks.verify()  # the installed hypercorn: every method as written for
    with pytest.raises(hooks.UnsupportedHypercorn, match=r"_Changed.handle takes"):
        hooks.verify((hooks.Hook(_Changed, "handle", ("self", "event")),))
    with pytest.raises(hooks.UnsupportedHypercorn, match=r"has no .*_Changed.gone"):
        hooks.verify((hooks.Hook(_Changed, "gone", ("self",)),))


def test_settings_live_in_one_ans_object_not_on_hypercorn_config() -> None:
    hc = HypercornConfig()
    assert http2_defences.defences_of(hc) == http2_defences.Http2Defences()
    before = set(vars(hc))
    defences = http2_defences.Http2Defences(max_connections_per_client=3, write_timeout=5.0)
    http2_defences.attach(hc, defences)
    assert set(vars(hc)) - before == {"ans_http2_defences"}
    assert http2_defences.defences_of(hc) is defences
    with pytest.raises(dataclasses.FrozenInstanceError):
        defences.max_connections = 1  # type: ignore[misc]


PING = PingFrame(0, opaque_data=b"12345678").serialize()


def _frames(*frames: Any) -> bytes:
    return b"".join(f.serialize() for f in frames)


def test_the_counter_counts_control_frames_but_not_requests() -> None:
    headers = HeadersFrame(1, data=b"\x82", flags={"END_HEADERS"})
    counter = http2_defences.FrameCounter()
    assert counter.feed(http2_defences.PREFACE + SettingsFrame(0).serialize()) == 1
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
    stream = http2_defences.PREFACE + _frames(
        SettingsFrame(0),
        HeadersFrame(1, data=b"\x82" * 30, flags={"END_HEADERS"}),
        DataFrame(1, data=b"", pad_length=100, flags={"PADDED"}),
        DataFrame(1, data=b"z" * 300, pad_length=10, flags={"PADDED", "END_STREAM"}),
        PingFrame(0),
        WindowUpdateFrame(0, window_increment=5),
    )
    for size in (1, 2, 7, 9, 10, 64, 4096):
        counter = http2_defences.FrameCounter()
        pieces = [stream[i : i + size] for i in range(0, len(stream), size)]
        assert sum(counter.feed(piece) for piece in pieces) == 4, size


def test_the_budget_is_a_burst_then_a_rate_and_answers_and_bytes_earn_more() -> None:
    burst = int(control_frames.CONTROL_BURST)
    budget = control_frames.ControlBudget()
    assert budget.charge(burst, now=10.0)
    assert not budget.charge(1, now=10.0)  # one over

    budget = control_frames.ControlBudget()
    assert budget.charge(burst - 1, now=10.0)
    budget.answered = 1  # an answer earns CONTROL_PER_ANSWER
    assert budget.charge(3, now=10.0)
    assert not budget.charge(2, now=10.0)

    budget = control_frames.ControlBudget()
    assert budget.charge(burst, now=10.0)
    assert budget.charge(3, now=10.2)  # ~0.2 s x CONTROL_RATE frames come back

    # Bytes sent earn WINDOW_UPDATEs: 64 KB of answers, 64 more frames.
    budget = control_frames.ControlBudget()
    assert budget.charge(burst, now=10.0)
    budget.sent = 64 * 1024
    assert budget.charge(60, now=10.0)
    assert not budget.charge(8, now=10.0)


def test_connections_ended_in_a_flood_are_logged_once_a_second() -> None:
    calm_log = control_frames.CalmLog(every=1.0)
    with structlog.testing.capture_logs() as logs:
        for _ in range(50):
            calm_log.note("control-frame flood", "192.0.2.1", now=100.0)
        calm_log.note("control-frame flood", "192.0.2.1", now=101.05)
    assert [entry["also_ended_since_last_line"] for entry in logs] == [0, 49]
    assert all(entry["client"] == "192.0.2.1" for entry in logs)


def test_connections_are_counted_per_ipv4_address_or_ipv6_64() -> None:
    assert http2_defences.client_key("192.0.2.7") == "192.0.2.7"
    assert http2_defences.client_key("::ffff:192.0.2.7") == "192.0.2.7"
    assert http2_defences.client_key("2001:db8:1:2::99") == "2001:db8:1:2::/64"
    assert http2_defences.client_key("2001:db8:1:2:ffff::1") == "2001:db8:1:2::/64"
    assert http2_defences.client_key("2001:db8:1:3::1") == "2001:db8:1:3::/64"
    assert http2_defences.client_key("?") == "?"


def test_ans_serve_refuses_another_hypercorn_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    real = importlib.metadata.version
    monkeypatch.setattr(
        importlib.metadata, "version", lambda name: "0.19.0" if name == "hypercorn" else real(name)
    )
    argv = ["serve", "--demo", "--listen", "127.0.0.1:0", "--data-dir", str(tmp_path)]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err == (
        "ans: ANS's HTTP/2 defences were written for hypercorn 0.18.x; found 0.19.0"
        " (install hypercorn>=0.18,<0.19)\n"
    )
