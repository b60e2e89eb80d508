"""Detached-JWS ES256 signatures over RFC 8785 canonical bytes.

A signature object is ``{"algorithm": "ES256", "key_id": kid, "value":
"<b64url(header)>..<b64url(sig)>"}`` where the protected header is
``{"alg":"ES256","kid":kid}`` and the (detached) payload is the JCS of the
signed object without its signature field. Verification pins ES256.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import orjson
from ans.protocol.errors import SignatureInvalid, UnknownSigningKey
from ans.protocol.jcs import canonicalize

from .keys import PublicKey, SigningKey, b64url, b64url_decode

ALGORITHM = "ES256"
# The field of a DISCOVER result that carries the ANS signature over the rest.
RESULT_SIGNATURE_FIELD = "ans_signature"
MAX_JWS_LEN = 2048


class KeyLookup(Protocol):
    def get(self, kid: str) -> PublicKey | None: ...


def protected_header(kid: str) -> str:
    return b64url(orjson.dumps({"alg": ALGORITHM, "kid": kid}))


def sign_detached(payload: bytes, key: SigningKey, header_b64: str | None = None) -> str:
    header = header_b64 or protected_header(key.kid)
    signing_input = f"{header}.{b64url(payload)}".encode("ascii")
    return f"{header}..{b64url(key.sign_raw(signing_input))}"


def signature_object(
    payload: bytes, key: SigningKey, header_b64: str | None = None
) -> dict[str, str]:
    return {
        "algorithm": ALGORITHM,
        "key_id": key.kid,
        "value": sign_detached(payload, key, header_b64),
    }


def sign_document(doc: Mapping[str, Any], key: SigningKey, field: str) -> dict[str, Any]:
    """Return a copy of ``doc`` with ``field`` set to a signature over the rest."""
    body = {k: v for k, v in doc.items() if k != field}
    return {**body, field: signature_object(canonicalize(body), key)}


def verify_detached(
    value: str, payload: bytes, keys: KeyLookup, expected_kid: str | None = None
) -> str:
    """Verify a detached compact JWS; return the kid. Raises SignatureInvalid."""
    if not isinstance(value, str) or len(value) > MAX_JWS_LEN:
        raise SignatureInvalid("signature value is not a compact JWS")
    parts = value.split(".")
    if len(parts) != 3:
        raise SignatureInvalid("signature value is not a compact JWS (three parts)")
    header_b64, embedded, sig_b64 = parts
    if embedded:
        raise SignatureInvalid("signature must be a detached JWS (empty payload part)")
    try:
        header = orjson.loads(b64url_decode(header_b64))
        signature = b64url_decode(sig_b64)
    except (ValueError, orjson.JSONDecodeError):
        raise SignatureInvalid("signature header or value is not valid base64url JSON") from None
    if not isinstance(header, dict) or header.get("alg") != ALGORITHM:
        raise SignatureInvalid("signature algorithm must be ES256")
    if "crit" in header or header.get("b64") is False:
        raise SignatureInvalid("signature header uses unsupported extensions")
    kid = header.get("kid")
    if not isinstance(kid, str) or not kid:
        raise SignatureInvalid("signature header has no kid")
    if expected_kid is not None and kid != expected_kid:
        raise SignatureInvalid("signature key_id does not match the JWS kid")
    public = keys.get(kid)
    if public is None:
        raise UnknownSigningKey(f"signing key {kid[:80]!r} is not trusted")
    signing_input = f"{header_b64}.{b64url(payload)}".encode("ascii")
    if not public.verify_raw(signature, signing_input):
        raise SignatureInvalid("signature does not verify")
    return kid


def verify_document(doc: Mapping[str, Any], keys: KeyLookup, field: str) -> str:
    """Verify ``doc[field]`` over the JCS of the rest of ``doc``; return the kid."""
    sig = doc.get(field)
    if not isinstance(sig, dict):
        raise SignatureInvalid(f"{field} must be a signature object")
    if sig.get("algorithm") != ALGORITHM:
        raise SignatureInvalid(f"{field}.algorithm must be ES256")
    kid = sig.get("key_id")
    value = sig.get("value")
    if not isinstance(kid, str) or not isinstance(value, str):
        raise SignatureInvalid(f"{field} needs string key_id and value")
    body = {k: v for k, v in doc.items() if k != field}
    try:
        payload = canonicalize(body)
    except (TypeError, ValueError) as exc:
        raise SignatureInvalid(f"document cannot be canonicalized: {exc}") from None
    return verify_detached(value, payload, keys, expected_kid=kid)
