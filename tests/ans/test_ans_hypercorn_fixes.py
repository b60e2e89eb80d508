"""ans.hypercorn_fixes patches hypercorn's connection handling once per process."""

from __future__ import annotations

from hypercorn.asyncio.tcp_server import TCPServer
from hypercorn.protocol.h2 import H2Protocol

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
        )

    patched = current()
    assert all(getattr(fn, "_ans_hypercorn_fixes", False) for fn in patched)
    hypercorn_fixes.install()
    assert current() == patched
