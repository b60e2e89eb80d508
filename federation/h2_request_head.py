"""The request side of :class:`~.h2transport.H2PeerTransport`: a URL turned
into its origin and pseudo-headers, and a request's header list, each name
lower-cased and validated once (``h2`` does no outbound validation here),
connection-specific names dropped, credentials never indexed by HPACK. The
results for a URL, a method and a header name are cached (bounded), so a
steady stream of DISCOVERs to the same peers builds almost nothing.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import NamedTuple
from urllib.parse import urlsplit

from hpack import NeverIndexedHeaderTuple

from .h2_connection import Header
from .transport import PeerUnreachable

CACHE_MAX = 512  # bound of the small parse caches (URLs, header names, methods)

# Header names h2 forbids (connection-specific) or that we set ourselves.
_DROPPED = frozenset(
    {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "te"}
    | {"host", "content-length"}
)
_SENSITIVE = frozenset({b"authorization", b"proxy-authorization", b"cookie"})
_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9a-z-]+")
_METHOD = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_BAD_VALUE = re.compile(r"[\r\n\x00]")


class Target(NamedTuple):
    """What one URL means: its origin key and its prebuilt pseudo-headers."""

    scheme: str
    host: str
    port: int
    pseudo: tuple[Header, ...]  # :path, :scheme, :authority


class RequestHeads:
    """Builds the header list of each request; holds the bounded caches."""

    def __init__(self) -> None:
        self._targets: dict[str, Target] = {}
        self._methods: dict[str, Header] = {}
        self._names: dict[str, bytes] = {}

    def target(self, url: str) -> Target:
        target = self._targets.get(url)
        if target is not None:
            return target
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError as exc:
            raise PeerUnreachable(f"invalid URL {url[:200]!r}: {exc}") from None
        host = parts.hostname
        if parts.scheme not in ("http", "https") or not host or parts.username is not None:
            raise PeerUnreachable(f"not an http(s) URL without credentials: {url[:200]!r}")
        path = parts.path or "/"
        if parts.query:
            path += "?" + parts.query
        if _BAD_VALUE.search(url) or " " in path:
            raise PeerUnreachable(f"invalid URL {url[:200]!r}")
        if port is None:
            port = 443 if parts.scheme == "https" else 80
        if not url.isascii():
            raise PeerUnreachable(f"URL is not ASCII (use the IDNA form): {url[:200]!r}")
        pseudo = (
            (b":path", path.encode()),
            (b":scheme", parts.scheme.encode()),
            (b":authority", parts.netloc.encode()),
        )
        target = Target(parts.scheme, host, port, pseudo)
        if len(self._targets) >= CACHE_MAX:
            self._targets.clear()
        self._targets[url] = target
        return target

    def head(
        self, method: str, target: Target, headers: Mapping[str, str], body: bytes
    ) -> list[Header]:
        m = self._methods.get(method)
        if m is None:
            if not _METHOD.fullmatch(method):
                raise PeerUnreachable(f"invalid method {method[:40]!r}")
            m = (b":method", method.encode())
            if len(self._methods) < CACHE_MAX:
                self._methods[method] = m
        head: list[Header] = [m, *target.pseudo]
        names = self._names
        for name, value in headers.items():
            n = names.get(name)
            if n is None:
                n = self._name(name)
            if not n:
                continue  # dropped (connection-specific, or set here)
            if _BAD_VALUE.search(value):
                raise PeerUnreachable(f"invalid value of request header {name!r}")
            v = value.encode()
            head.append(NeverIndexedHeaderTuple(n, v) if n in _SENSITIVE else (n, v))
        if body:
            head.append((b"content-length", b"%d" % len(body)))
        return head

    def _name(self, name: str) -> bytes:
        lower = name.lower()
        if not _NAME.fullmatch(lower):
            raise PeerUnreachable(f"invalid request header name {name[:40]!r}")
        n = b"" if lower in _DROPPED else lower.encode()
        if len(self._names) < CACHE_MAX:
            self._names[name] = n
        return n
