"""ans.h2guard wraps hypercorn's HTTP/2 event handling once per process."""

from __future__ import annotations

from hypercorn.protocol.h2 import H2Protocol

from ans import h2guard


def test_install_wraps_once() -> None:
    h2guard.install()
    wrapped = H2Protocol._handle_events
    assert getattr(wrapped, "_ans_h2guard", False)
    h2guard.install()
    assert H2Protocol._handle_events is wrapped
