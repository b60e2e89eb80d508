"""The invocation gateway's side towards agents: which endpoint an agent is
called at, whether the gateway may call it, the headers that go each way,
and the httpx client (HTTP/1.1 and HTTP/2, gateway TLS client certificate,
CA bundle).

* :func:`select_target` — the first declared binding (by priority, as the
  profile's ``bindings``) whose ``endpoint`` is an http(s) URL, else the
  capability document's ``endpoint``; https only unless ``allow_http``; no
  user info in the URL. Otherwise 422 ``not_invocable``.
* :func:`check_address` — the target's addresses (DNS resolved here) must be
  global unicast unless ``allow_private_targets``: no loopback, private,
  link-local, shared or reserved address (422 ``not_invocable``), so a
  registered endpoint cannot turn the gateway against the operator's own
  network. It runs before the body is read; :class:`GuardedBackend` runs the
  same check again where the connection is opened and connects to the
  addresses it checked, so a name that changes its answer in between (DNS
  rebinding) is refused too. TLS still verifies the agent's host name (SNI).
* :func:`upstream_headers` / :func:`downstream_headers` — an allow-list
  towards the agent (Content-Type, Accept, Accept-Language, Accept-Encoding,
  the request id, the gateway's own credential; the caller's Authorization,
  Cookie and X-API-Key only with ``forward_credentials``), and the agent's
  answer headers minus hop-by-hop ones, Content-Length, Set-Cookie, Date and Server.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import ssl
import typing
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from http.cookiejar import Cookie, CookieJar
from typing import Any
from urllib.parse import urlsplit

import httpcore
import httpx

from ans.governance.profile_metadata import bindings_of
from ans.protocol.errors import ErrorCode, NotInvocable, UpstreamTimeout, UpstreamUnreachable

from .. import __version__
from ..invoke_config import InvokeSettings

MAX_URL_CHARS = 2048
# Hop-by-hop (RFC 9110 7.6.1) and framing headers: never relayed either way.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)
CREDENTIAL_HEADERS = ("authorization", "cookie", "x-api-key")
PASSED_HEADERS = ("content-type", "accept", "accept-language", "accept-encoding")
# The agent's answer: at most this many headers of at most this many bytes each are relayed.
MAX_RELAYED_HEADERS = 64
MAX_RELAYED_HEADER_BYTES = 8 * 1024
# The ASGI server writes its own Date; Server would name the agent's software.
DROPPED_ANSWER_HEADERS = HOP_BY_HOP | {"set-cookie", "set-cookie2", "date", "server"}
USER_AGENT = f"ans-invoke-gateway/{__version__}"


@dataclass(frozen=True, slots=True)
class Target:
    """Where an agent is invoked."""

    url: str
    scheme: str
    host: str
    port: int

    @property
    def origin(self) -> str:
        """scheme://host:port: what the audit log names (no path, no query)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"


def _endpoints(manifest: Mapping[str, Any], caps: Mapping[str, Any]) -> list[str]:
    out = []
    for binding in bindings_of(manifest, caps):
        for name in ("endpoint", "url"):
            value = binding.get(name)
            if isinstance(value, str):
                out.append(value)
                break
    endpoint = caps.get("endpoint")
    if isinstance(endpoint, str):
        out.append(endpoint)
    return out


def _parsed(url: str) -> Target | None:
    if len(url) > MAX_URL_CHARS or any(c.isspace() for c in url):
        return None
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not parts.hostname or "@" in parts.netloc:
        return None
    return Target(url, scheme, parts.hostname, port or (443 if scheme == "https" else 80))


def select_target(
    manifest: Mapping[str, Any], caps: Mapping[str, Any], settings: InvokeSettings
) -> Target:
    """The URL the gateway POSTs to (422 ``not_invocable`` when there is none)."""
    plain: Target | None = None
    for url in _endpoints(manifest, caps):
        target = _parsed(url)
        if target is None:
            continue
        if target.scheme == "https" or settings.allow_http:
            return target
        plain = plain or target
    if plain is not None:
        raise NotInvocable(
            "the agent's endpoint is plain http and this gateway calls https only "
            "([haidip.invoke] allow_http)"
        )
    raise NotInvocable("the agent declares no http(s) endpoint this gateway can call")


# (host, port) -> the addresses the name resolves to; the DNS seam of the gateway.
Resolver = Callable[[str, int], Awaitable[list[str]]]


async def system_resolve(host: str, port: int) -> list[str]:
    """The system resolver's addresses for a TCP connection to (host, port)."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


async def checked_addresses(
    host: str, port: int, settings: InvokeSettings, timeout: float, resolve: Resolver
) -> list[str]:
    """The addresses the gateway may connect to for ``host``: all of them
    global unicast (unless ``allow_private_targets``), else 422
    ``not_invocable``; a name that does not resolve is 502, a resolution
    that takes longer than ``timeout`` 504."""
    try:
        ipaddress.ip_address(host)
        addresses = [host]
    except ValueError:
        addresses = []
    if not addresses:
        try:
            async with asyncio.timeout(timeout):
                addresses = await resolve(host, port)
        except TimeoutError:
            raise UpstreamTimeout(f"resolving {host[:100]} timed out") from None
        except OSError:
            raise UpstreamUnreachable(f"the agent's host {host[:100]} does not resolve") from None
    if not addresses:
        raise UpstreamUnreachable(f"the agent's host {host[:100]} does not resolve")
    if not settings.allow_private_targets:
        for text in addresses:
            address = ipaddress.ip_address(text.split("%", 1)[0])
            if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
                address = address.ipv4_mapped
            if not address.is_global or address.is_multicast:
                raise NotInvocable(
                    "the agent's endpoint is a loopback, private or reserved address "
                    "([haidip.invoke] allow_private_targets)"
                )
    return addresses


async def check_address(
    target: Target, settings: InvokeSettings, timeout: float, resolve: Resolver = system_resolve
) -> None:
    """Refuse a target that resolves to a non-global address (unless
    ``allow_private_targets``) before its body is read; a name that does not
    resolve is 502."""
    if not settings.allow_private_targets:
        await checked_addresses(target.host, target.port, settings, timeout, resolve)


class GuardedBackend(httpcore.AsyncNetworkBackend):
    """httpcore's network backend with the address check where the socket is
    opened: the name is resolved once, every address checked, and the
    connection made to a checked address (the first that answers), so the
    name cannot resolve to another address between the check and the connect."""

    def __init__(self, settings: InvokeSettings, resolve: Resolver = system_resolve) -> None:
        self.settings = settings
        self.resolve = resolve
        self.inner = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: typing.Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        addresses = await checked_addresses(
            host, port, self.settings, timeout or 10.0, self.resolve
        )
        failure: Exception | None = None
        for address in addresses:
            try:
                return await self.inner.connect_tcp(
                    address,
                    port,
                    timeout=timeout,
                    local_address=local_address,
                    socket_options=socket_options,
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                failure = exc
        assert failure is not None  # addresses is never empty
        raise failure

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: typing.Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("the invocation gateway opens TCP connections only")

    async def sleep(self, seconds: float) -> None:
        await self.inner.sleep(seconds)


def upstream_headers(
    caller: Mapping[str, str],
    settings: InvokeSettings,
    request_id: str,
    gateway_secret: str,
) -> dict[str, str]:
    """The headers sent to the agent (an allow-list; see the module docstring)."""
    out: dict[str, str] = {
        "content-type": "application/json",
        "accept": "*/*",
        "accept-encoding": "identity",
    }
    for name in PASSED_HEADERS:
        value = caller.get(name)
        if value:
            out[name] = value
    if settings.forward_credentials:
        for name in CREDENTIAL_HEADERS:
            value = caller.get(name)
            if value:
                out[name] = value
    out["user-agent"] = USER_AGENT
    out[settings.request_id_header.lower()] = request_id
    if settings.auth_header:
        out[settings.auth_header.lower()] = gateway_secret
    return out


def downstream_headers(
    response: httpx.Response, request_id: str, id_header: str
) -> list[tuple[bytes, bytes]]:
    """The agent's answer headers as relayed to the caller, bounded."""
    out: list[tuple[bytes, bytes]] = []
    for name, value in response.headers.raw:
        lower = name.lower()
        if lower.decode("latin-1") in DROPPED_ANSWER_HEADERS or lower == id_header.encode():
            continue
        if len(name) + len(value) > MAX_RELAYED_HEADER_BYTES or len(out) >= MAX_RELAYED_HEADERS:
            continue
        out.append((lower, value))
    out.append((id_header.lower().encode("latin-1"), request_id.encode("latin-1", "replace")))
    return out


def make_client(settings: InvokeSettings, resolve: Resolver = system_resolve) -> httpx.AsyncClient:
    """One client for every invocation: HTTP/2 when the agent offers it
    (ALPN), else HTTP/1.1; redirects not followed; no proxy from the
    environment; no cookies kept; the gateway's client certificate and CA
    bundle when set; every connection opened through :class:`GuardedBackend`.
    OSError / ssl.SSLError when a certificate file is unusable."""
    context = ssl.create_default_context(
        cafile=str(settings.ca_bundle) if settings.ca_bundle is not None else None
    )
    if settings.client_certfile is not None and settings.client_keyfile is not None:
        context.load_cert_chain(str(settings.client_certfile), str(settings.client_keyfile))
    transport = httpx.AsyncHTTPTransport(verify=context, http1=True, http2=settings.http2)
    # httpx takes no network backend; its transport's connection pool does.
    # tests/ans/test_haidip_invoke_units.py proves the guard is the one used.
    transport._pool = httpcore.AsyncConnectionPool(
        ssl_context=context,
        max_connections=512,
        max_keepalive_connections=64,
        keepalive_expiry=5.0,
        http1=True,
        http2=settings.http2,
        network_backend=GuardedBackend(settings, resolve),
    )
    return httpx.AsyncClient(
        cookies=_NoCookies(),
        transport=transport,
        follow_redirects=False,
        trust_env=False,
    )


class _NoCookies(CookieJar):
    """A cookie jar that keeps nothing: one agent's Set-Cookie must never
    ride on a later caller's request."""

    def set_cookie(self, cookie: Cookie) -> None:
        return None

    def extract_cookies(self, response: Any, request: Any) -> None:
        return None


def timeout_error(exc: httpx.TimeoutException, target: Target) -> UpstreamTimeout:
    if isinstance(exc, httpx.ConnectTimeout | httpx.PoolTimeout):
        return UpstreamTimeout(f"connecting to the agent at {target.origin} timed out")
    return UpstreamTimeout(f"the agent at {target.origin} did not answer in time")


def unreachable(exc: BaseException, target: Target) -> UpstreamUnreachable:
    """The 502 for a transport failure (message without the exception's text,
    which can carry addresses or library detail)."""
    kind = "TLS handshake failed" if _is_tls(exc) else "could not be reached"
    return UpstreamUnreachable(f"the agent at {target.origin} {kind}")


def too_large(target: Target, limit: int) -> UpstreamUnreachable:
    return UpstreamUnreachable(
        f"the agent at {target.origin} answered more than {limit} bytes",
        code=ErrorCode.UPSTREAM_TOO_LARGE,
    )


def _is_tls(exc: BaseException) -> bool:
    seen: BaseException | None = exc
    for _ in range(5):
        if seen is None:
            return False
        if isinstance(seen, ssl.SSLError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False
