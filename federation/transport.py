"""Peer I/O behind one small interface.

:class:`PeerTransport` sends one request to a peer and returns the status and
the (size-bounded) body. :class:`HttpxTransport` is the real one: an httpx
HTTP/2 client per origin (h2c with prior knowledge for ``http://``, ALPN for
``https://``) that keeps its connection open across requests and retries
once when a connection is closed under it. Tests use an in-memory fake.

HttpxTransport serves the outbound AGTP requests that may meet any server
(:meth:`HttpxTransport.request`): the index-freshness DESCRIBEs and
``/status`` polls to indexed agents and the governance webhook, some of which
speak only HTTP/1.1. Peer ANS servers are asked through the leaner
:class:`~.h2transport.H2PeerTransport` (same interface, same errors, same
retry rule; see there for why).
"""

from __future__ import annotations

import asyncio
import ssl
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
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


class SchemeRouter:
    """A :class:`PeerTransport` that sends each request through the transport
    for its URL's scheme (HTTP/2 for ``http``/``https``, the native AGTP
    framing for ``agtp``/``agtp+cleartext``)."""

    def __init__(self, routes: Mapping[str, PeerTransport]) -> None:
        self._routes = dict(routes)

    async def send(
        self,
        peer: Peer,
        method: str,
        url: str,
        headers: Mapping[str, str],
        body: bytes,
        timeout: float,
    ) -> PeerReply:
        transport = self._routes.get(url.split("://", 1)[0])
        if transport is None:
            raise PeerUnreachable(f"no transport for {url[:100]!r}")
        return await transport.send(peer, method, url, headers, body, timeout)

    async def aclose(self) -> None:
        for transport in {id(t): t for t in self._routes.values()}.values():
            await transport.aclose()


class RequestTransport(Protocol):
    """Any-origin requests (index refresh, webhooks): what they need of :class:`HttpxTransport`."""

    async def request(
        self,
        origin: str,
        method: str,
        url: str,
        headers: Mapping[str, str],
        body: bytes,
        timeout: float,
        *,
        cacert: Path | None = None,
        prior_knowledge: bool | None = None,
    ) -> PeerReply: ...

    async def aclose(self) -> None: ...


class HttpxTransport:
    """Real AGTP over HTTP/2, one pooled client per origin.

    At most ``max_clients`` origins keep a client; the least recently used
    one is closed when another is needed (the freshness scheduler talks to
    every indexed agent, a federation to a handful of peers)."""

    def __init__(self, max_response_bytes: int, max_clients: int = 256) -> None:
        self._max = max_response_bytes
        self._max_clients = max(1, max_clients)
        self._clients: OrderedDict[tuple[str, str | None, bool], httpx.AsyncClient] = OrderedDict()
        self._retired: list[httpx.AsyncClient] = []

    def _client(self, origin: str, cacert: Path | None, prior_knowledge: bool) -> httpx.AsyncClient:
        key = (origin, str(cacert) if cacert is not None else None, prior_knowledge)
        client = self._clients.get(key)
        if client is not None:
            self._clients.move_to_end(key)
            return client
        verify: bool | ssl.SSLContext = True
        if cacert is not None:
            verify = ssl.create_default_context(cafile=str(cacert))
        client = httpx.AsyncClient(
            http1=not prior_knowledge,
            http2=True,
            verify=verify,
            follow_redirects=False,
            limits=httpx.Limits(max_connections=4, max_keepalive_connections=2),
        )
        self._clients[key] = client
        while len(self._clients) > self._max_clients:
            _, old = self._clients.popitem(last=False)
            self._retired.append(old)  # closed by the next request or aclose()
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
        return await self.request(peer.url, method, url, headers, body, timeout, cacert=peer.cacert)

    async def request(
        self,
        origin: str,
        method: str,
        url: str,
        headers: Mapping[str, str],
        body: bytes,
        timeout: float,
        *,
        cacert: Path | None = None,
        prior_knowledge: bool | None = None,
    ) -> PeerReply:
        """One request to ``url`` on the client for ``origin``. ``prior_knowledge``
        (default: ``http://`` origins) speaks h2c without negotiation; False lets
        a plain-http endpoint answer in HTTP/1.1 (webhooks)."""
        if self._retired:
            retired, self._retired = self._retired, []
            for old in retired:
                await old.aclose()
        h2c = origin.startswith("http://") if prior_knowledge is None else prior_knowledge
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        attempt = 0
        while True:
            attempt += 1
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise PeerTimeout(f"no answer within {timeout:.3f}s")
            client = self._client(origin, cacert, h2c)
            try:
                return await asyncio.wait_for(
                    self._once(client, method, url, headers, body, remaining), remaining
                )
            except (TimeoutError, httpx.TimeoutException):
                raise PeerTimeout(f"no answer within {timeout:.3f}s") from None
            except httpx.RemoteProtocolError as exc:
                # An idle HTTP/2 connection closed under us (e.g. the peer recycled
                # it): DISCOVER, DESCRIBE and GET are idempotent (webhook receivers
                # dedupe by event id), so retry once.
                if attempt >= 2:
                    raise PeerUnreachable(f"connection closed: {exc}") from None
            except httpx.ConnectError as exc:
                raise PeerUnreachable(f"cannot connect: {exc}") from None
            except (httpx.HTTPError, ssl.SSLError, OSError) as exc:
                raise PeerUnreachable(f"{type(exc).__name__}: {exc}") from None

    async def _once(
        self,
        client: httpx.AsyncClient,
        method: str,
        url: str,
        headers: Mapping[str, str],
        body: bytes,
        timeout: float,
    ) -> PeerReply:
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
        clients = [*self._clients.values(), *self._retired]
        self._clients, self._retired = OrderedDict(), []
        for c in clients:
            await c.aclose()
