"""The Attribution-Record every newer-dialect answer carries (-09 "Response
Headers": MUST; identifiers-02: the extended payload and the Audit-ID chain).

The record is a compact JWS (RFC 7515), ES256 with the ANS key (the same key
and ``kid`` as result signatures; verify with the ANS JWKS), over the JSON
payload::

    {"audit_record_version": "1", "server_id", "timestamp", "method",
     "request_hash", "response_status", "response_hash",
     "agent_id", "owner_id", "task_id", "session_id",
     "request_id", "response_id", "previous_audit_id"}

``request_hash`` is the SHA-256 (hex) of ``METHOD SP target LF`` in UTF-8
followed by the request body as received (target ``/`` when the request line
had none or the request was ``POST /agtp``; on HTTP/2 the percent-decoded
``:path``); ``response_hash`` the SHA-256 of the response body, so the
signature covers the answer's bytes. ``Audit-ID`` is SHA-256 of the JWS
compact serialization; each record names the previous one this server
process emitted (``previous_audit_id``, 64 zeros for the first): one chain
per server process, as the ANS is the responding agent of every record.
``Response-ID`` is a UUIDv7 (identifiers-02).
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import orjson

from ans.governance.audit import rfc3339
from ans.governance.keys import SigningKey, b64url, b64url_decode
from ans.governance.signing import KeyLookup, verify_detached
from ans.protocol.errors import SignatureInvalid
from ans.protocol.jcs import canonicalize

from .core.context import Clock

ZERO_AUDIT_ID = "0" * 64


def uuid7(now_ms: int, random: bytes) -> str:
    """A UUIDv7 (RFC 9562): 48 bits of Unix milliseconds, version, 74 random bits."""
    rand = int.from_bytes(random[:10].ljust(10, b"\0"), "big")
    value = (now_ms & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76
    value |= ((rand >> 62) & 0xFFF) << 64
    value |= 0b10 << 62
    value |= rand & ((1 << 62) - 1)
    return str(uuid.UUID(int=value))


def request_hash(method: str, target: str | None, body: bytes) -> str:
    # UTF-8: on HTTP/2 the target is the percent-decoded :path, which may hold
    # any character (the native framing's request line is ASCII).
    h = hashlib.sha256(f"{method} {target or '/'}\n".encode("utf-8", "surrogatepass"))
    h.update(body)
    return h.hexdigest()


class AttributionChain:
    """Signs one Attribution-Record per answer and keeps the Audit-ID chain."""

    def __init__(
        self,
        key: SigningKey,
        server_id: str,
        clock: Clock,
        now_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
        random: Callable[[int], bytes] = os.urandom,
    ) -> None:
        self.key = key
        self.server_id = server_id
        self.clock = clock
        self.now_ms = now_ms
        self.random = random
        self.previous = ZERO_AUDIT_ID
        self.lock = threading.Lock()

    def new_response_id(self) -> str:
        return uuid7(self.now_ms(), self.random(10))

    def record(self, fields: dict[str, Any], response_body: bytes) -> tuple[str, str]:
        """(JWS compact, Audit-ID) of a record with ``fields`` (the request
        facts; see the module docstring) for an answer whose body is
        ``response_body``."""
        payload = {
            "audit_record_version": "1",
            "server_id": self.server_id,
            "timestamp": rfc3339(self.clock()),
            **fields,
            "response_hash": hashlib.sha256(response_body).hexdigest(),
        }
        with self.lock:
            payload["previous_audit_id"] = self.previous
            signing_input = f"{self.key.jws_header}.{b64url(canonicalize(payload))}"
            jws = f"{signing_input}.{b64url(self.key.sign_raw(signing_input.encode('ascii')))}"
            audit_id = hashlib.sha256(jws.encode("ascii")).hexdigest()
            self.previous = audit_id
        return jws, audit_id


def verify_record(jws: str, keys: KeyLookup) -> dict[str, Any]:
    """Verify an Attribution-Record against the ANS keys (ES256 pinned) and
    return its payload. Raises SignatureInvalid."""
    parts = jws.split(".") if isinstance(jws, str) else []
    if len(parts) != 3 or not parts[1]:
        raise SignatureInvalid("an Attribution-Record is a three-part compact JWS")
    try:
        payload = b64url_decode(parts[1])
    except ValueError:
        raise SignatureInvalid("the Attribution-Record payload is not base64url") from None
    verify_detached(f"{parts[0]}..{parts[2]}", payload, keys)
    try:
        doc = orjson.loads(payload)
    except orjson.JSONDecodeError:
        doc = None
    if not isinstance(doc, dict):
        raise SignatureInvalid("the Attribution-Record payload is not a JSON object")
    return doc
