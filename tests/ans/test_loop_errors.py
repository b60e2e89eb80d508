"""An exception nothing in the event loop handled is logged without the
messages of the exceptions it was raised while handling (hypercorn chains one
whose message is a connection's first bytes)."""

from __future__ import annotations

import asyncio

from structlog.testing import capture_logs

from ans.loop_errors import unhandled_in_loop


class Preface(Exception):
    """Stands in for hypercorn's H2ProtocolAssumedError: its message is the data."""


def _raised() -> BaseException:
    try:
        try:
            raise Preface(b'PRI * HTTP/2.0\r\n\r\nSM{"client_context":{"token":"s3cr3t"}}')
        except Preface:
            b"/x\xe9".decode("ascii")
    except UnicodeDecodeError as exc:
        return exc
    raise AssertionError("not raised")


def test_a_chained_exception_message_never_reaches_the_log() -> None:
    exc = _raised()
    loop = asyncio.new_event_loop()
    try:
        with capture_logs() as logs:
            loop.set_exception_handler(unhandled_in_loop)
            loop.call_exception_handler(
                {"message": "Unhandled exception in client_connected_cb", "exception": exc}
            )
    finally:
        loop.close()
    (entry,) = logs
    assert entry["event"] == "unhandled exception in the event loop"
    assert entry["error"] == "UnicodeDecodeError"
    assert entry["while_handling"] == "Preface"
    assert "can't decode byte 0xe9" in entry["detail"]
    assert any("_raised" in where for where in entry["raised_at"])
    assert "s3cr3t" not in repr(entry)


def test_a_message_that_may_quote_the_request_is_not_logged() -> None:
    exc = ValueError("Received header value surrounded by whitespace b' Bearer s3cr3t'")
    with capture_logs() as logs:
        unhandled_in_loop(None, {"message": "Task exception was never retrieved", "exception": exc})
    (entry,) = logs
    assert entry["error"] == "ValueError" and "detail" not in entry
    assert "s3cr3t" not in repr(entry)


def test_a_context_without_an_exception_is_logged_bounded() -> None:
    loop = asyncio.new_event_loop()
    try:
        with capture_logs() as logs:
            unhandled_in_loop(loop, {"message": "x" * 10_000})
    finally:
        loop.close()
    (entry,) = logs
    assert entry["context"] == "x" * 200 and "error" not in entry
