"""Peer verification keys, fetched on demand and cached with expiry.

A peer's key comes from its JWKS URL (default ``URL/.well-known/jwks.json``),
a JWKS file, or its own Agent Manifest via DESCRIBE (the manifest must carry
the key and be signed by it). Keys live for ``key_ttl`` seconds; a failed
fetch is remembered for ``key_retry`` seconds so a dead peer costs nothing
per request; an unknown ``kid`` in a peer answer may force one refetch
(key rotation), at most once per ``key_retry``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson
from ans.governance.keys import KeyFileError, TrustedKeys
from ans.governance.signing import verify_document
from ans.protocol import jsonstrict
from ans.protocol.errors import AgtpError
from ans.protocol.messages import AGTP_VERSION, CONTENT_TYPE

from .peers import FederationSettings, Peer
from .transport import PeerError, PeerTransport

MAX_KEY_DOC_BYTES = 256 * 1024
Monotonic = Callable[[], float]


class PeerKeyUnavailable(PeerError):
    code = "peer_key_unavailable"


@dataclass
class _Entry:
    keys: TrustedKeys | None
    fetched_at: float
    error: str = ""


class PeerKeyCache:
    def __init__(
        self, transport: PeerTransport, settings: FederationSettings, monotonic: Monotonic
    ) -> None:
        self._transport = transport
        self._settings = settings
        self._now = monotonic
        self._entries: dict[str, _Entry] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    def cached_kids(self, peer: Peer) -> list[str]:
        """Kids of a peer's currently cached keys (for loop avoidance)."""
        entry = self._entries.get(peer.url)
        return entry.keys.kids() if entry is not None and entry.keys is not None else []

    async def get(self, peer: Peer, timeout: float, *, refresh: bool = False) -> TrustedKeys:
        """The peer's keys; raises PeerKeyUnavailable. ``refresh`` asks for a
        refetch (honoured at most once per ``key_retry``)."""
        lock = self._locks.setdefault(peer.url, asyncio.Lock())
        async with lock:
            now = self._now()
            entry = self._entries.get(peer.url)
            if entry is not None:
                age = now - entry.fetched_at
                if entry.keys is None:
                    if age < self._settings.key_retry:
                        raise PeerKeyUnavailable(f"peer key unavailable: {entry.error}")
                elif age < self._settings.key_ttl and not (
                    refresh and age >= self._settings.key_retry
                ):
                    return entry.keys
            try:
                keys = await self._fetch(peer, timeout)
            except PeerError as exc:
                self._entries[peer.url] = _Entry(None, now, exc.message)
                raise PeerKeyUnavailable(f"peer key unavailable: {exc.message}") from None
            self._entries[peer.url] = _Entry(keys, now)
            return keys

    async def _fetch(self, peer: Peer, timeout: float) -> TrustedKeys:
        if peer.key_source == "jwks_file":
            assert peer.jwks_file is not None
            try:
                return TrustedKeys.load_jwks_file(peer.jwks_file)
            except KeyFileError as exc:
                raise PeerError(str(exc)) from None
        if peer.key_source == "describe":
            return await self._from_manifest(peer, timeout)
        reply = await self._transport.send(peer, "GET", peer.key_url, {}, b"", timeout)
        if reply.status != 200:
            raise PeerError(f"GET {peer.key_url} answered {reply.status}")
        return _keys_from(_json(reply.body), "JWKS")

    async def _from_manifest(self, peer: Peer, timeout: float) -> TrustedKeys:
        body = orjson.dumps({"method": "DESCRIBE", "parameters": {}})
        headers = {"agtp-version": AGTP_VERSION, "content-type": CONTENT_TYPE}
        reply = await self._transport.send(peer, "DESCRIBE", peer.url + "/", headers, body, timeout)
        doc = _json(reply.body)
        if reply.status != 200 or not isinstance(doc.get("result"), dict):
            raise PeerError(f"DESCRIBE answered {reply.status}")
        return _keys_from(manifest_jwks(doc["result"]), "manifest jwks")


def manifest_jwks(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """The JWKS an ANS publishes in its own Agent Manifest (``jwks``, or a
    single ``public_key``), once the manifest is shown to be signed by it.
    PeerError otherwise."""
    if isinstance(manifest.get("jwks"), dict):
        jwks: dict[str, Any] = manifest["jwks"]
    elif isinstance(manifest.get("public_key"), dict):
        jwks = {"keys": [manifest["public_key"]]}
    else:
        raise PeerError("the manifest carries no jwks or public_key")
    try:
        public = TrustedKeys.from_jwks(jwks)
    except KeyFileError as exc:
        raise PeerError(f"manifest key: {exc}") from None
    try:
        verify_document(manifest, public, "signature")
    except AgtpError as exc:
        raise PeerError(f"the manifest is not signed by its own key: {exc}") from None
    return jwks


def _json(body: bytes) -> dict[str, Any]:
    try:
        doc = jsonstrict.loads(body, max_bytes=MAX_KEY_DOC_BYTES)
    except AgtpError as exc:
        raise PeerError(f"not JSON: {exc.message}") from None
    if not isinstance(doc, dict):
        raise PeerError("not a JSON object")
    return doc


def _keys_from(doc: Any, what: str) -> TrustedKeys:
    try:
        keys = TrustedKeys.from_jwks(doc)
    except KeyFileError as exc:
        raise PeerError(f"{what}: {exc}") from None
    if len(keys) == 0:
        raise PeerError(f"{what} holds no usable ES256 key")
    return keys
