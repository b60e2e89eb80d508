"""Host name lookups that neither delay the exit of ``ans serve`` nor starve
its worker threads: the event loop :func:`new_event_loop` makes for it.

asyncio resolves a host name (httpx/anyio and ``asyncio.open_connection``
call ``loop.getaddrinfo``) with ``socket.getaddrinfo`` in the loop's default
executor. A lookup cannot be cancelled: the awaiting task is, its thread goes
on until the resolver answers or times out (5 s a try by default, longer when
the name server is unreachable). Two costs follow. ``asyncio.run`` joins the
default executor at exit, so stopping during an index-freshness poll of an
agent whose name does not resolve promptly waited for that lookup (issue 23:
6.6 s). And the stuck threads are the ones ACTIVATE and LIFECYCLE run on
(``asyncio.to_thread``).

Here each lookup runs on a daemon thread of its own, at most
:data:`MAX_LOOKUPS` at once per loop (a slot is freed when its thread ends,
not when its caller gives up, so a resolver that never answers holds at
most that many threads). Exit does not wait for daemon threads.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from typing import Literal

MAX_LOOKUPS = 16

# What socket.getaddrinfo returns (typeshed's spelling).
_V4 = tuple[Literal[socket.AddressFamily.AF_INET], socket.SocketKind, int, str, tuple[str, int]]
_V6 = tuple[
    Literal[socket.AddressFamily.AF_INET6],
    socket.SocketKind,
    int,
    str,
    tuple[str, int, int, int] | tuple[int, bytes],
]
AddrInfo = list[_V4 | _V6]


class ResolvingEventLoop(asyncio.SelectorEventLoop):
    """The default event loop, with :meth:`getaddrinfo` on daemon threads."""

    def __init__(self) -> None:
        super().__init__()
        self._lookups = asyncio.Semaphore(MAX_LOOKUPS)

    async def getaddrinfo(
        self,
        host: bytes | str | None,
        port: bytes | str | int | None,
        *,
        family: int = 0,
        type: int = 0,
        proto: int = 0,
        flags: int = 0,
    ) -> AddrInfo:
        await self._lookups.acquire()
        done: asyncio.Future[AddrInfo] = self.create_future()

        def settle(result: AddrInfo | None, error: BaseException | None) -> None:
            self._lookups.release()
            if done.cancelled():
                return
            if error is not None:
                done.set_exception(error)
            else:
                assert result is not None
                done.set_result(result)

        def lookup() -> None:
            result: AddrInfo | None = None
            error: BaseException | None = None
            try:
                result = socket.getaddrinfo(host, port, family, type, proto, flags)
            except BaseException as exc:  # handed to the caller
                error = exc
            try:
                self.call_soon_threadsafe(settle, result, error)
            except RuntimeError:  # the loop has closed: nobody is waiting
                pass

        try:
            threading.Thread(target=lookup, name="ans-getaddrinfo", daemon=True).start()
        except BaseException:
            self._lookups.release()
            raise
        return await done


def new_event_loop() -> asyncio.AbstractEventLoop:
    """An event loop for ``asyncio.Runner(loop_factory=...)``."""
    return ResolvingEventLoop()
