"""Peer I/O behind one small interface.

:class:`PeerTransport` sends one request to a peer and returns the status and
the (size-bounded) body. :class:`HttpxTransport` is the real one: an httpx
HTTP/2 client per peer (h2c with prior knowledge for ``http://``, ALPN for
``https://``) that keeps its connection open across requests and retries
once when a connection is closed under it. Tests use an in-memory fake.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

import httpx

from .peers import Peer


class PeerError(Exception):
    """A peer could not give us a usable answer; ``code`` goes into the warning."""

    code = "peer_error"

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code


class PeerTimeout(PeerError):
    code = "peer_timeout"


class PeerUnreachable(PeerError):
    code = "peer_unreachable"


class PeerBadResponse(PeerError):
    code = "peer_bad_response"


@dataclass(frozen=True, slots=True)
class PeerReply:
    status: int
    body: bytes


class PeerTransport(Protocol):
    async def send(
        self,
        peer: Peer,
        method: str,
        url: str,
        headers: Mapping[str, str],
        body: bytes,
        timeout: float,
    ) -> PeerReply: ...

    async def aclose(self) -> None: ...


class HttpxTransport:
    """Real AGTP over HTTP/2 to peers, one pooled client per peer."""

    def __init__(self, max_response_bytes: int) -> None:
        self._max = max_response_bytes
        self._clients: dict[str, httpx.AsyncClient] = {}

    def _client(self, peer: Peer) -> httpx.AsyncClient:
        client = self._clients.get(peer.url)
        if client is None:
            prior_knowledge = peer.url.startswith("http://")
            verify: bool | ssl.SSLContext = True
            if peer.cacert is not None:
                verify = ssl.create_default_context(cafile=str(peer.cacert))
            client = httpx.AsyncClient(
                http1=not prior_knowledge,
                http2=True,
                verify=verify,
                follow_redirects=False,
                limits=httpx.Limits(max_connections=4, max_keepalive_connections=2),
            )
            self._clients[peer.url] = client
        return client

    async def send(
        self,
        peer: Peer,
        method: str,
        url: str,
        headers: Mapping[str, str],
        body: bytes,
        timeout: float,
    ) -> PeerReply:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        attempt = 0
        while True:
            attempt += 1
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise PeerTimeout(f"no answer within {timeout:.3f}s")
            try:
                return await asyncio.wait_for(
                    self._once(peer, method, url, headers, body, remaining), remaining
                )
            except (TimeoutError, httpx.TimeoutException):
                raise PeerTimeout(f"no answer within {timeout:.3f}s") from None
            except httpx.RemoteProtocolError as exc:
                # An idle HTTP/2 connection closed under us (e.g. the peer recycled
                # it): DISCOVER, DESCRIBE and GET are idempotent, so retry once.
                if attempt >= 2:
                    raise PeerUnreachable(f"connection closed: {exc}") from None
            except httpx.ConnectError as exc:
                raise PeerUnreachable(f"cannot connect: {exc}") from None
            except (httpx.HTTPError, ssl.SSLError, OSError) as exc:
                raise PeerUnreachable(f"{type(exc).__name__}: {exc}") from None

    async def _once(
        self,
        peer: Peer,
        method: str,
        url: str,
        headers: Mapping[str, str],
        body: bytes,
        timeout: float,
    ) -> PeerReply:
        client = self._client(peer)
        request = client.build_request(
            method, url, headers=dict(headers), content=body or None, timeout=timeout
        )
        resp = await client.send(request, stream=True)
        try:
            declared = resp.headers.get("content-length")
            if declared is not None and declared.isdigit() and int(declared) > self._max:
                raise PeerBadResponse(f"answer of {declared} bytes exceeds {self._max}")
            chunks: list[bytes] = []
            size = 0
            async for chunk in resp.aiter_bytes():
                size += len(chunk)
                if size > self._max:
                    raise PeerBadResponse(f"answer exceeds {self._max} bytes")
                chunks.append(chunk)
            return PeerReply(resp.status_code, b"".join(chunks))
        finally:
            await resp.aclose()

    async def aclose(self) -> None:
        clients, self._clients = list(self._clients.values()), {}
        for c in clients:
            await c.aclose()
