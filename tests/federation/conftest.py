"""Shared by the federation tests: a PeerTransport double that records."""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from ans.federation.peers import Peer
from ans.federation.transport import PeerReply


class Recorder:
    """A PeerTransport that answers ``status`` with ``body`` and records the
    URLs it was asked and how often it was closed."""

    def __init__(self, status: int = 200, body: bytes = b"{}") -> None:
        self.status = status
        self.body = body
        self.urls: list[str] = []
        self.closed = 0

    async def send(
        self,
        peer: Peer,
        method: str,
        url: str,
        headers: Mapping[str, str],
        body: bytes,
        timeout: float,
    ) -> PeerReply:
        self.urls.append(url)
        return PeerReply(self.status, self.body)

    async def aclose(self) -> None:
        self.closed += 1


@pytest.fixture
def recorder() -> type[Recorder]:
    return Recorder
