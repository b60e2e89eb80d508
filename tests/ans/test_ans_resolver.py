"""ans.resolver: the serve loop's getaddrinfo answers like asyncio's and
frees its slot when a lookup ends (exit not waiting for a lookup:
tests/integration/test_integration_freshness.py)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import pytest

from ans import resolver

T = TypeVar("T")


def run(coro_fn: Callable[[], Coroutine[Any, Any, T]]) -> T:
    with asyncio.Runner(loop_factory=resolver.new_event_loop) as runner:
        return runner.run(coro_fn())


def test_lookups_answer_like_socket_getaddrinfo() -> None:
    async def main() -> object:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, resolver.ResolvingEventLoop)
        return await loop.getaddrinfo("127.0.0.1", 80, type=socket.SOCK_STREAM)

    assert run(main) == socket.getaddrinfo("127.0.0.1", 80, type=socket.SOCK_STREAM)


def test_a_failed_lookup_raises_and_frees_its_slot() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        for _ in range(resolver.MAX_LOOKUPS + 2):  # more than the slots: each was freed
            with pytest.raises(socket.gaierror):
                await loop.getaddrinfo("bad host name", 80, flags=socket.AI_NUMERICHOST)

    run(main)
