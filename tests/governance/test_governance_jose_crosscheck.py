"""The joserfc-backed signing code against the hand-written code it replaced
(issue 24 item 4): same wire bytes, and each side verifies the other's output.

``legacy_*`` below is a frozen copy of the hand-written JWS code as it was
before joserfc (governance/keys.py, signing.py, auth.py at feff310), kept as
an outside verifier/signer. Fixed P-256 keys (a constant ``d``) make the
comparisons repeatable; with RFC 6979 nonces the signatures themselves must be
byte-identical, and ``GOLDEN`` pins values produced by the old code itself.
"""

from __future__ import annotations

import base64
import copy
import re
from typing import Any

import orjson
import pytest
from ans.governance.auth import verify_compact_jws
from ans.governance.keys import PublicKey, SigningKey, TrustedKeys, b64url
from ans.governance.signing import (
    sign_document,
    signature_object,
    verify_detached,
    verify_document,
)
from ans.protocol import jsonstrict
from ans.protocol.errors import AuthenticationFailed, SignatureInvalid
from ans.protocol.jcs import canonicalize
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import (
    decode_dss_signature,
    encode_dss_signature,
)
from joserfc import jws
from joserfc.jwk import ECKey, KeySet

D = 0x3F6C1B8A2D9E4F5061728394A5B6C7D8E9F00112233445566778899AABBCCDD
D2 = 0x1D2C3B4A59687786950A1B2C3D4E5F60718293A4B5C6D7E8F90A1B2C3D4E5F6
DOC: dict[str, Any] = {
    "agent_id": "agtp://fixed.example/agents/a",
    "lifecycle": "Active",
    "note": "€",
}
# Produced by the pre-joserfc code (feff310) with RFC 6979 nonces, key D: the
# thumbprint kid, then kid "gov-2026-01"; the signed object is DOC.
GOLDEN = {
    "go3ExrpJQvl0O5bGbRlAuxN_5RpQbpLrI7UcMkGuAJ0": (
        "eyJhbGciOiJFUzI1NiIsImtpZCI6ImdvM0V4cnBKUXZsME81YkdiUmxBdXhOXzVScFFicExySTdVY01rR3VBSjAifQ"
        "..TAdPOkBEmIcffQmLVnt3M6jFxkm5pDq_4QI0JHgKIqRG1ju7ZIxZUeEpPz_spmXqWCO03Rx2P-R8388R5dKRMg"
    ),
    "gov-2026-01": (
        "eyJhbGciOiJFUzI1NiIsImtpZCI6Imdvdi0yMDI2LTAxIn0"
        "..LkjbbamTpdYqadBjS67FtpKv27-AgqxyodSpYziMfIgBeNgRw2L5TOkdP59Uf0-Vr2gjta8Vfn3hJFMnFjHVdw"
    ),
}

# -- the hand-written code before joserfc (frozen) ---------------------------------------

_ORDER = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551
_B64URL = re.compile(r"[A-Za-z0-9_-]*")


def legacy_b64url_decode(text: str) -> bytes:
    if len(text) % 4 == 1 or _B64URL.fullmatch(text) is None:
        raise ValueError("not base64url")
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def legacy_sign_raw(private: ec.EllipticCurvePrivateKey, data: bytes, det: bool = False) -> bytes:
    der = private.sign(data, ec.ECDSA(hashes.SHA256(), deterministic_signing=det))
    r, s = decode_dss_signature(der)
    return r.to_bytes(32, "big") + s.to_bytes(32, "big")


def legacy_verify_raw(public: ec.EllipticCurvePublicKey, signature: bytes, data: bytes) -> bool:
    if len(signature) != 64:
        return False
    r = int.from_bytes(signature[:32], "big")
    s = int.from_bytes(signature[32:], "big")
    if not (0 < r < _ORDER and 0 < s < _ORDER):
        return False
    try:
        public.verify(encode_dss_signature(r, s), data, ec.ECDSA(hashes.SHA256()))
    except InvalidSignature:
        return False
    return True


def legacy_sign_detached(
    payload: bytes, private: ec.EllipticCurvePrivateKey, kid: str, det: bool = False
) -> str:
    header = b64url(orjson.dumps({"alg": "ES256", "kid": kid}))
    signing_input = f"{header}.{b64url(payload)}".encode("ascii")
    return f"{header}..{b64url(legacy_sign_raw(private, signing_input, det))}"


def legacy_verify_detached(
    value: str, payload: bytes, keys: dict[str, ec.EllipticCurvePublicKey]
) -> str:
    """The old verify_detached; ValueError stands for every refusal."""
    if len(value) > 2048:
        raise ValueError("too long")
    parts = value.split(".")
    if len(parts) != 3 or parts[1]:
        raise ValueError("not a detached compact JWS")
    header_b64, _, sig_b64 = parts
    header = orjson.loads(legacy_b64url_decode(header_b64))
    signature = legacy_b64url_decode(sig_b64)
    if not isinstance(header, dict) or header.get("alg") != "ES256":
        raise ValueError("alg")
    if "crit" in header or header.get("b64") is False:
        raise ValueError("extensions")
    kid = header.get("kid")
    if not isinstance(kid, str) or not kid or kid not in keys:
        raise ValueError("kid")
    signing_input = f"{header_b64}.{b64url(payload)}".encode("ascii")
    if not legacy_verify_raw(keys[kid], signature, signing_input):
        raise ValueError("does not verify")
    return kid


def legacy_verify_document(
    doc: dict[str, Any], keys: dict[str, ec.EllipticCurvePublicKey], field: str
) -> str:
    sig = doc[field]
    if sig.get("algorithm") != "ES256":
        raise ValueError("algorithm")
    body = {k: v for k, v in doc.items() if k != field}
    kid = legacy_verify_detached(sig["value"], canonicalize(body), keys)
    if kid != sig["key_id"]:
        raise ValueError("key_id")
    return kid


def legacy_verify_token(token: str, keys: dict[str, ec.EllipticCurvePublicKey]) -> bytes:
    header_b64, payload_b64, sig_b64 = token.split(".")
    header = jsonstrict.loads(legacy_b64url_decode(header_b64))
    if header.get("alg") != "ES256" or any(h in header for h in ("crit", "b64", "zip")):
        raise ValueError("header")
    public = keys[header["kid"]]
    signature = legacy_b64url_decode(sig_b64)
    if not legacy_verify_raw(public, signature, f"{header_b64}.{payload_b64}".encode("ascii")):
        raise ValueError("does not verify")
    return legacy_b64url_decode(payload_b64)


# -- fixtures --------------------------------------------------------------------------------


class _Rfc6979Key(SigningKey):  # type: ignore[misc]
    deterministic = True


PRIVATE = ec.derive_private_key(D, ec.SECP256R1())
PRIVATE2 = ec.derive_private_key(D2, ec.SECP256R1())
KEYS = {
    "thumbprint": SigningKey(PRIVATE),
    "configured": SigningKey(PRIVATE, kid="gov-2026-01"),
    "other-key": SigningKey(PRIVATE2),
}


def _legacy_keys(key: SigningKey) -> dict[str, ec.EllipticCurvePublicKey]:
    return {key.kid: key.public.key}


DOCS: dict[str, dict[str, Any]] = {
    "manifest": {
        "agent_id": "agtp://fixed.example/agents/a",
        "name": "Auditor",
        "capabilities": ["audit.contracts", "audit.po"],
        "lifecycle": "Active",
        "trust_tier": 1,
    },
    "result": {
        "generated_at": "2026-11-25T12:00:00.000Z",
        "query_digest": "ab" * 32,
        "results": [{"canonical_id": f"c{i}", "rank_score": 0.5 + i / 10} for i in range(5)],
    },
    "refusal": {
        "code": "invalid_parameter",
        "message": "limit must be an integer between 1 and 100",
        "status": 422,
        "task_id": None,
        "generated_at": "2026-11-25T12:00:00.000Z",
    },
    "lifecycle_event": {
        "agent_id": "agtp://fixed.example/agents/a",
        "state": "Suspended",
        "reason": "compromised — key rotated",
        "effective_at": "2026-11-25T12:00:00Z",
    },
}
FIELDS = {"manifest": "signature", "result": "ans_signature", "refusal": "ans_signature"}


# -- wire bytes -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(KEYS))
def test_protected_header_bytes_identical(name: str) -> None:
    key = KEYS[name]
    legacy = b64url(orjson.dumps({"alg": "ES256", "kid": key.kid}))
    assert key.jws_header == legacy
    value = signature_object(b"{}", key)["value"]
    assert value.split(".")[0] == legacy
    assert base64.urlsafe_b64decode(legacy + "==") == (
        b'{"alg":"ES256","kid":"' + key.kid.encode() + b'"}'
    )


@pytest.mark.parametrize(("kid", "value"), sorted(GOLDEN.items()))
def test_rfc6979_signature_identical_to_pre_joserfc_golden(kid: str, value: str) -> None:
    key = _Rfc6979Key(PRIVATE, kid=None if kid == KEYS["thumbprint"].kid else kid)
    assert key.kid == kid
    signed = sign_document(DOC, key, "signature")
    assert signed["signature"] == {"algorithm": "ES256", "key_id": kid, "value": value}
    assert legacy_sign_detached(canonicalize(DOC), PRIVATE, kid, det=True) == value


@pytest.mark.parametrize("doc", sorted(DOCS))
def test_rfc6979_signature_identical_to_legacy(doc: str) -> None:
    key = _Rfc6979Key(PRIVATE)
    payload = canonicalize(DOCS[doc])
    assert signature_object(payload, key)["value"] == legacy_sign_detached(
        payload, PRIVATE, key.kid, det=True
    )


# -- each side verifies the other ---------------------------------------------------------


@pytest.mark.parametrize("doc", sorted(DOCS))
@pytest.mark.parametrize("name", sorted(KEYS))
def test_joserfc_signatures_verify_with_legacy(doc: str, name: str) -> None:
    key = KEYS[name]
    field = FIELDS.get(doc, "signature")
    signed = sign_document(DOCS[doc], key, field)
    assert legacy_verify_document(signed, _legacy_keys(key), field) == key.kid
    tampered = copy.deepcopy(signed)
    tampered[next(iter(DOCS[doc]))] = "changed"
    with pytest.raises(ValueError):
        legacy_verify_document(tampered, _legacy_keys(key), field)


@pytest.mark.parametrize("doc", sorted(DOCS))
@pytest.mark.parametrize("name", sorted(KEYS))
def test_legacy_signatures_verify_with_joserfc(doc: str, name: str) -> None:
    key = KEYS[name]
    field = FIELDS.get(doc, "signature")
    body = DOCS[doc]
    value = legacy_sign_detached(
        canonicalize(body), PRIVATE if name != "other-key" else PRIVATE2, key.kid
    )
    signed = {**body, field: {"algorithm": "ES256", "key_id": key.kid, "value": value}}
    trusted = TrustedKeys([key.public])
    assert verify_document(signed, trusted, field) == key.kid
    with pytest.raises(SignatureInvalid):
        verify_document({**signed, "extra": 1}, trusted, field)
    other = KEYS["other-key"] if name != "other-key" else KEYS["thumbprint"]
    with pytest.raises(SignatureInvalid):  # same kid, another key: never verifies
        verify_document(signed, TrustedKeys([PublicKey(key.kid, other.public.key)]), field)


def test_joserfc_keyset_from_our_jwks_resolves_and_verifies() -> None:
    """A plain joserfc KeySet built from our published JWKS finds the key by the
    header kid and verifies our detached signature (re-attached)."""
    key = KEYS["configured"]
    payload = canonicalize(DOCS["result"])
    header, _, sig = signature_object(payload, key)["value"].split(".")
    key_set = KeySet.import_key_set(TrustedKeys([key.public, KEYS["other-key"].public]).jwks())
    obj = jws.deserialize_compact(
        f"{header}..{sig}", key_set, algorithms=["ES256"], payload=payload
    )
    assert obj.protected == {"alg": "ES256", "kid": key.kid}
    assert obj.payload == payload


# -- bearer tokens ---------------------------------------------------------------------------

CLAIMS = {
    "iss": "https://governance.example",
    "sub": "agtp://o.example/agents/orch",
    "exp": 2_000_000_000,
}


def test_legacy_minted_token_verifies_with_joserfc() -> None:
    key = KEYS["thumbprint"]
    h = b64url(orjson.dumps({"alg": "ES256", "kid": key.kid, "typ": "JWT"}))
    p = b64url(orjson.dumps(CLAIMS))
    token = f"{h}.{p}.{b64url(legacy_sign_raw(PRIVATE, f'{h}.{p}'.encode()))}"
    verified = verify_compact_jws(token, TrustedKeys([key.public]))
    assert verified.kid == key.kid and orjson.loads(verified.payload) == CLAIMS
    bad = f"{h}.{b64url(orjson.dumps({**CLAIMS, 'exp': 2_000_000_001}))}.{token.split('.')[2]}"
    with pytest.raises(AuthenticationFailed) as info:
        verify_compact_jws(bad, TrustedKeys([key.public]))
    assert info.value.code == "token_signature_invalid"


def test_joserfc_minted_token_verifies_with_legacy_and_ours() -> None:
    key = KEYS["configured"]
    token = jws.serialize_compact(
        {"alg": "ES256", "kid": key.kid, "typ": "JWT"},
        orjson.dumps(CLAIMS),
        ECKey.import_key(key.private_pem()),
        algorithms=["ES256"],
    )
    assert orjson.loads(legacy_verify_token(token, _legacy_keys(key))) == CLAIMS
    assert verify_compact_jws(token, TrustedKeys([key.public])).kid == key.kid


def test_sign_raw_token_verifies_with_legacy() -> None:
    key = KEYS["other-key"]
    h = b64url(orjson.dumps({"alg": "ES256", "kid": key.kid}))
    p = b64url(orjson.dumps(CLAIMS))
    token = f"{h}.{p}.{b64url(key.sign_raw(f'{h}.{p}'.encode()))}"
    assert orjson.loads(legacy_verify_token(token, _legacy_keys(key))) == CLAIMS


# -- a kid outside ASCII: the one place the header bytes may differ ----------------------------


def test_non_ascii_kid_header_differs_but_both_verifiers_accept_both() -> None:
    """joserfc writes the header with ASCII escapes (``\\u00e9``), the old code
    wrote UTF-8. Our keys' kids are RFC 7638 thumbprints or configured ASCII
    names, so this never happens on the wire today; if it did, both forms
    verify with both implementations (the signature covers the header bytes
    as sent)."""
    key = SigningKey(PRIVATE, kid="clé-1")
    payload = canonicalize(DOC)
    new = signature_object(payload, key)["value"]
    old = legacy_sign_detached(payload, PRIVATE, key.kid)
    assert new.split(".")[0] != old.split(".")[0]
    assert orjson.loads(legacy_b64url_decode(new.split(".")[0])) == {"alg": "ES256", "kid": "clé-1"}
    trusted = TrustedKeys([key.public])
    for value in (new, old):
        assert verify_detached(value, payload, trusted) == key.kid
        assert legacy_verify_detached(value, payload, _legacy_keys(key)) == key.kid
