"""HAIDIP listing pages: the opaque cursor and the ETag.

A cursor names the last canonical id of the page it follows (the listing
is in canonical-id order, so agents added before that position never move
the next page) and the digest of the filters it was made for; it is
base64url JSON with an HMAC-SHA-256 tag keyed from the ANS signing key (the
same in every worker and across restarts). A cursor that was altered, or
is replayed with other filters, is a 400.

The ETag of a listing covers the store's change-feed position (any
registration, lifecycle event or removal moves it), the query (filters,
``top``, ``skip``, ``cursor``) and the caller's entitlement (its effective
Authority-Scope), so one caller's cached page never answers another's.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Mapping
from typing import Any

import orjson

from ans.governance.keys import SigningKey
from ans.protocol.errors import BadRequest, ErrorCode
from ans.protocol.jcs import canonicalize

TAG_BYTES = 16
MAX_CURSOR_ID = 512


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def digest_of(value: Any) -> str:
    """SHA-256 (hex) of the RFC 8785 bytes of ``value``."""
    return hashlib.sha256(canonicalize(value)).hexdigest()


class Cursors:
    """Makes and opens listing cursors with a key derived from ``key``."""

    def __init__(self, key: SigningKey) -> None:
        self._secret = hashlib.sha256(b"ans-haidip-cursor\0" + key.private_pem()).digest()

    def _tag(self, payload: bytes) -> bytes:
        return hmac.new(self._secret, payload, hashlib.sha256).digest()[:TAG_BYTES]

    def make(self, after: str, filters_digest: str) -> str:
        payload = canonicalize({"a": after, "f": filters_digest[:32], "v": 1})
        return f"{_b64(payload)}.{_b64(self._tag(payload))}"

    def open(self, cursor: str, filters_digest: str) -> str:
        """The canonical id the cursor follows (400 when it is not one of ours,
        or was made for other filters)."""
        bad = BadRequest(
            "cursor is not one this server returned for this query; start again without it",
            code=ErrorCode.INVALID_PARAMETER,
        )
        head, _, tag = cursor.partition(".")
        try:
            payload, mac = _unb64(head), _unb64(tag)
        except (ValueError, TypeError):
            raise bad from None
        if not hmac.compare_digest(mac, self._tag(payload)):
            raise bad
        try:
            doc = orjson.loads(payload)
        except orjson.JSONDecodeError:
            raise bad from None
        after = doc.get("a") if isinstance(doc, dict) else None
        if not isinstance(after, str) or len(after) > MAX_CURSOR_ID:
            raise bad
        if doc.get("f") != filters_digest[:32]:
            raise bad
        return after


def etag_of(feed_position: int, query: Mapping[str, Any], entitlement: str) -> str:
    """A strong ETag (quoted) for one listing answer."""
    material = {"seq": feed_position, "query": dict(query), "entitlement": entitlement}
    return '"' + digest_of(material)[:40] + '"'


def matches(if_none_match: str | None, etag: str) -> bool:
    """Whether an If-None-Match header names ``etag`` (or is ``*``)."""
    if not if_none_match:
        return False
    for part in if_none_match.split(",")[:64]:
        tag = part.strip()
        if tag == "*" or tag.removeprefix("W/") == etag:
            return True
    return False
