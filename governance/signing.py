"""Detached-JWS ES256 signatures over RFC 8785 canonical bytes, made and
checked by joserfc.

A signature object is ``{"algorithm": "ES256", "key_id": kid, "value":
"<b64url(header)>..<b64url(sig)>"}`` where the protected header is
``{"alg":"ES256","kid":kid}`` and the (detached) payload is the JCS of the
signed object without its signature field. Verification pins ES256.

The header segment is joserfc's serialization of ``{"alg":"ES256","kid":kid}``
(compact JSON, members in that order: the same bytes as before joserfc for
every ASCII kid), made once per key; joserfc parses every compact JWS
(``jws.extract_compact``: strict base64url, header JSON, detached payload per
RFC 7515 appendix F), resolves the key by ``kid`` (:func:`kid_resolver`, a
joserfc key-resolution callable over a :class:`KeyLookup`) and signs or
verifies with its ES256 model. joserfc's generic ``serialize_compact`` /
``validate_compact`` re-check the registry and key parameters on every call
(+60% per signature, +25% per verification, ``bench/sign_cost.py``), so the
ES256 model is called directly with keys prepared once. This module keeps
the policy joserfc does not decide: the size bound, the detached shape, no
``crit`` / ``b64`` extensions, a kid that must be present and match
``key_id``, and which error each refusal is.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from ans.protocol.errors import SignatureInvalid, UnknownSigningKey
from ans.protocol.jcs import canonicalize
from joserfc import jws
from joserfc.errors import JoseError
from joserfc.jwk import ECKey, GuestProtocol
from joserfc.util import urlsafe_b64decode

from .jose import ALGORITHM, REGISTRY
from .keys import PublicKey, SigningKey, b64url

# The field of a DISCOVER result that carries the ANS signature over the rest.
RESULT_SIGNATURE_FIELD = "ans_signature"
MAX_JWS_LEN = 2048


class KeyLookup(Protocol):
    def get(self, kid: str) -> PublicKey | None: ...


def kid_resolver(
    keys: KeyLookup, unknown: Callable[[str], Exception]
) -> Callable[[GuestProtocol], ECKey]:
    """joserfc key resolution: the key named by the protected header's ``kid``
    in ``keys``; ``unknown(kid)`` is raised when there is none."""

    def resolve(obj: GuestProtocol) -> ECKey:
        kid = obj.headers().get("kid")
        public = keys.get(kid) if isinstance(kid, str) else None
        if public is None:
            raise unknown(kid if isinstance(kid, str) else "")
        return public.jose

    return resolve


def _unknown_signing_key(kid: str) -> Exception:
    exc: Exception = UnknownSigningKey(f"signing key {kid[:80]!r} is not trusted")
    return exc


def es256_verify(obj: jws.CompactSignature, key: ECKey) -> bool:
    """joserfc's ES256 over a parsed compact JWS (its header and payload
    segments); the algorithm comes from the ES256-only registry, so any other
    ``alg`` raises joserfc's UnsupportedAlgorithmError. ValueError when the
    signature segment is not base64url."""
    alg = REGISTRY.get_alg(obj.headers()["alg"])
    segments = obj.segments
    signature = urlsafe_b64decode(segments["signature"])
    return alg.verify(segments["header"] + b"." + segments["payload"], signature, key)


def sign_detached(payload: bytes, key: SigningKey, header_b64: str | None = None) -> str:
    """The detached compact JWS ``header..signature`` of ``payload`` (RFC 7515
    appendix F: the signing input has the payload, the serialization not).

    ``header_b64`` (tests only: a forged header for the refusal tests) is
    signed as given instead of the key's ``{"alg":"ES256","kid":kid}``."""
    header = key.jws_header if header_b64 is None else header_b64
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
    if parts[1]:
        raise SignatureInvalid("signature must be a detached JWS (empty payload part)")
    try:
        obj = jws.extract_compact(value.encode("ascii"), payload, REGISTRY)
        header = obj.headers()
    except (JoseError, ValueError):  # ValueError: not ASCII, not base64url
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
    try:
        verified = es256_verify(obj, kid_resolver(keys, _unknown_signing_key)(obj))
    except ValueError:
        raise SignatureInvalid("signature value is not base64url") from None
    if not verified:
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
