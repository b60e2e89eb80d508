"""Detached ES256 JWS over JCS bytes (``ans.governance.signing``) and the key
helpers it relies on (``ans.governance.keys``), including interop with
joserfc in both directions."""

from __future__ import annotations

import copy
import os
import stat
from pathlib import Path
from typing import Any

import orjson
import pytest
from ans.governance.keys import (
    KeyFileError,
    SigningKey,
    TrustedKeys,
    b64url,
    b64url_decode,
    public_jwk,
    public_key_from_jwk,
    thumbprint,
)
from ans.governance.signing import (
    sign_detached,
    sign_document,
    verify_detached,
    verify_document,
)
from ans.protocol.errors import SignatureInvalid, UnknownSigningKey
from ans.protocol.jcs import canonicalize
from joserfc import jws
from joserfc.errors import BadSignatureError
from joserfc.jwk import ECKey

DOC: dict[str, Any] = {
    "result_set": [{"canonical_id": "abc", "score": 0.875}, {"canonical_id": "def", "score": 0.5}],
    "query_digest": "0" * 64,
    "issued_at": "2026-01-01T00:00:00.000Z",
    "note": "\u20ac \U0001f600",
}


@pytest.fixture(scope="module")
def key() -> SigningKey:
    return SigningKey.generate()


@pytest.fixture(scope="module")
def trusted(key: SigningKey) -> TrustedKeys:
    return TrustedKeys([key.public])


def _signed(key: SigningKey) -> dict[str, Any]:
    return sign_document(DOC, key, "signature")


def _forge(header: dict[str, Any], payload: bytes, key: SigningKey) -> str:
    """A detached JWS with an arbitrary protected header, correctly signed."""
    return sign_detached(payload, key, b64url(orjson.dumps(header)))


# -- round trip ---------------------------------------------------------------------------


def test_round_trip(key: SigningKey, trusted: TrustedKeys) -> None:
    signed = _signed(key)
    assert set(signed) == set(DOC) | {"signature"}
    sig = signed["signature"]
    assert sig["algorithm"] == "ES256"
    assert sig["key_id"] == key.kid
    header_b64, empty, sig_b64 = sig["value"].split(".")
    assert empty == ""
    assert orjson.loads(b64url_decode(header_b64)) == {"alg": "ES256", "kid": key.kid}
    assert len(b64url_decode(sig_b64)) == 64
    assert verify_document(signed, trusted, "signature") == key.kid


def test_sign_document_does_not_mutate_input(key: SigningKey) -> None:
    original = copy.deepcopy(DOC)
    _signed(key)
    assert DOC == original


def test_signature_covers_jcs_not_key_order(key: SigningKey, trusted: TrustedKeys) -> None:
    signed = _signed(key)
    reordered = dict(reversed(list(signed.items())))
    assert verify_document(reordered, trusted, "signature") == key.kid


def test_resigning_replaces_old_signature(key: SigningKey, trusted: TrustedKeys) -> None:
    other = SigningKey.generate()
    twice = sign_document(sign_document(DOC, other, "signature"), key, "signature")
    assert twice["signature"]["key_id"] == key.kid
    assert verify_document(twice, trusted, "signature") == key.kid


@pytest.mark.parametrize(
    "tamper",
    [
        lambda d: d.__setitem__("query_digest", "1" * 64),
        lambda d: d["result_set"][0].__setitem__("score", 0.876),
        lambda d: d["result_set"].reverse(),
        lambda d: d.__setitem__("extra", None),
        lambda d: d.pop("note"),
        lambda d: d.__setitem__("note", "\u20ac \U0001f601"),
    ],
    ids=["top-field", "nested-number", "array-order", "added-field", "removed-field", "unicode"],
)
def test_tampered_document_rejected(key: SigningKey, trusted: TrustedKeys, tamper: Any) -> None:
    signed = copy.deepcopy(_signed(key))
    tamper(signed)
    with pytest.raises(SignatureInvalid) as info:
        verify_document(signed, trusted, "signature")
    assert info.value.code == "signature_invalid"
    assert info.value.status == 401


def test_tampered_signature_bytes_rejected(key: SigningKey, trusted: TrustedKeys) -> None:
    signed = _signed(key)
    header_b64, _, sig_b64 = signed["signature"]["value"].split(".")
    raw = bytearray(b64url_decode(sig_b64))
    raw[10] ^= 0x01
    signed["signature"] = {**signed["signature"], "value": f"{header_b64}..{b64url(bytes(raw))}"}
    with pytest.raises(SignatureInvalid):
        verify_document(signed, trusted, "signature")


def test_unknown_signing_key(key: SigningKey) -> None:
    stranger = SigningKey.generate()
    signed = _signed(stranger)
    with pytest.raises(UnknownSigningKey) as info:
        verify_document(signed, TrustedKeys([key.public]), "signature")
    assert info.value.code == "unknown_signing_key"
    assert info.value.status == 401


def test_same_kid_different_key_rejected(key: SigningKey) -> None:
    impostor = SigningKey.generate(kid=key.kid)
    with pytest.raises(SignatureInvalid) as info:
        verify_document(_signed(impostor), TrustedKeys([key.public]), "signature")
    assert not isinstance(info.value, UnknownSigningKey)


@pytest.mark.parametrize(
    "header",
    [
        {"alg": "none"},
        {"alg": "none", "kid": "K"},
        {"alg": "HS256", "kid": "K"},
        {"alg": "ES384", "kid": "K"},
        {"alg": "es256", "kid": "K"},
        {"alg": "ES256"},
        {"alg": "ES256", "kid": ""},
        {"alg": "ES256", "kid": 7},
        {"alg": "ES256", "kid": "K", "crit": ["b64"], "b64": False},
        {"alg": "ES256", "kid": "K", "b64": False},
        {"alg": "ES256", "kid": "K", "crit": ["exp"]},
    ],
    ids=[
        "none-no-kid",
        "none",
        "hs256",
        "es384",
        "lowercase-alg",
        "no-kid",
        "empty-kid",
        "int-kid",
        "b64-false-crit",
        "b64-false",
        "crit",
    ],
)
def test_bad_protected_header_rejected(key: SigningKey, header: dict[str, Any]) -> None:
    kid_key = SigningKey(key._private, kid="K")  # same key, kid "K"
    payload = canonicalize(DOC)
    value = _forge(header, payload, kid_key)
    with pytest.raises(SignatureInvalid):
        verify_detached(value, payload, TrustedKeys([kid_key.public]))


def test_forged_header_control_verifies(key: SigningKey) -> None:
    """Control for the test above: the forging helper itself produces valid JWS."""
    kid_key = SigningKey(key._private, kid="K")
    payload = canonicalize(DOC)
    value = _forge({"alg": "ES256", "kid": "K", "typ": "JOSE"}, payload, kid_key)
    assert verify_detached(value, payload, TrustedKeys([kid_key.public])) == "K"


def test_alg_none_with_empty_signature_rejected(key: SigningKey, trusted: TrustedKeys) -> None:
    header = b64url(orjson.dumps({"alg": "none", "kid": key.kid}))
    with pytest.raises(SignatureInvalid):
        verify_detached(f"{header}..", canonicalize(DOC), trusted)


def test_embedded_payload_rejected(key: SigningKey, trusted: TrustedKeys) -> None:
    payload = canonicalize(DOC)
    header_b64, _, sig_b64 = sign_detached(payload, key).split(".")
    attached = f"{header_b64}.{b64url(payload)}.{sig_b64}"
    with pytest.raises(SignatureInvalid):
        verify_detached(attached, payload, trusted)


@pytest.mark.parametrize(
    "value",
    [
        "",
        "a.b",
        "a..b..c",
        "!!!..abc",
        "e30..AAAA",
        "bnVsbA..AAAA",
        "x" * 3000 + "..",
        "eyJhbGciOiJFUzI1NiJ9..",
        "eyJhbGciOiJFUzI1NiJ9..%%%%",
    ],
    ids=[
        "empty",
        "two-parts",
        "five-parts",
        "bad-b64-header",
        "empty-header-obj",
        "null-header",
        "too-long",
        "no-signature",
        "bad-b64-sig",
    ],
)
def test_malformed_value_rejected(trusted: TrustedKeys, value: str) -> None:
    with pytest.raises(SignatureInvalid):
        verify_detached(value, b"{}", trusted)


def test_key_id_differing_from_header_kid_rejected(key: SigningKey, trusted: TrustedKeys) -> None:
    signed = _signed(key)
    signed["signature"] = {**signed["signature"], "key_id": "some-other-kid"}
    with pytest.raises(SignatureInvalid) as info:
        verify_document(signed, trusted, "signature")
    assert "key_id" in info.value.message


@pytest.mark.parametrize(
    "sig",
    [
        None,
        "x",
        {"algorithm": "HS256", "key_id": "k", "value": "v"},
        {"algorithm": "ES256", "key_id": 1, "value": "v"},
        {"algorithm": "ES256", "key_id": "k"},
    ],
    ids=["missing", "string", "hs256", "int-key-id", "no-value"],
)
def test_malformed_signature_object_rejected(trusted: TrustedKeys, sig: Any) -> None:
    doc = {**DOC} if sig is None else {**DOC, "signature": sig}
    with pytest.raises(SignatureInvalid):
        verify_document(doc, trusted, "signature")


def test_signature_wrong_payload_rejected(key: SigningKey, trusted: TrustedKeys) -> None:
    value = sign_detached(b'{"a":1}', key)
    assert verify_detached(value, b'{"a":1}', trusted) == key.kid
    with pytest.raises(SignatureInvalid):
        verify_detached(value, b'{"a":2}', trusted)


# -- interop with joserfc -------------------------------------------------------------------


def test_our_detached_jws_verifies_with_joserfc(key: SigningKey) -> None:
    signed = _signed(key)
    payload = canonicalize({k: v for k, v in signed.items() if k != "signature"})
    header_b64, _, sig_b64 = signed["signature"]["value"].split(".")
    token = f"{header_b64}.{b64url(payload)}.{sig_b64}"
    public = ECKey.import_key(public_jwk(key.public.key))
    obj = jws.deserialize_compact(token, public, algorithms=["ES256"])
    assert obj.payload == payload
    assert obj.protected == {"alg": "ES256", "kid": key.kid}


def test_joserfc_rejects_our_jws_over_other_payload(key: SigningKey) -> None:
    header_b64, _, sig_b64 = sign_detached(b'{"a":1}', key).split(".")
    other_payload = b64url(b'{"a":2}')
    token = f"{header_b64}.{other_payload}.{sig_b64}"
    public = ECKey.import_key(public_jwk(key.public.key))
    with pytest.raises(BadSignatureError):
        jws.deserialize_compact(token, public, algorithms=["ES256"])


def test_joserfc_jws_verifies_with_ours(key: SigningKey, trusted: TrustedKeys) -> None:
    payload = canonicalize(DOC)
    private = ECKey.import_key(key.private_pem())
    token = jws.serialize_compact({"alg": "ES256", "kid": key.kid}, payload, private)
    header_b64, payload_b64, sig_b64 = token.split(".")
    assert b64url_decode(payload_b64) == payload
    assert verify_detached(f"{header_b64}..{sig_b64}", payload, trusted) == key.kid
    with pytest.raises(SignatureInvalid):
        verify_detached(f"{header_b64}..{sig_b64}", payload + b" ", trusted)


def test_joserfc_signed_document_verifies_with_verify_document(
    key: SigningKey, trusted: TrustedKeys
) -> None:
    private = ECKey.import_key(key.private_pem())
    token = jws.serialize_compact({"alg": "ES256", "kid": key.kid}, canonicalize(DOC), private)
    h, _, s = token.split(".")
    doc = {**DOC, "signature": {"algorithm": "ES256", "key_id": key.kid, "value": f"{h}..{s}"}}
    assert verify_document(doc, trusted, "signature") == key.kid


# -- keys --------------------------------------------------------------------------------------


def test_load_or_create_creates_0600_and_is_stable(tmp_path: Path) -> None:
    path = tmp_path / "keys" / "signing.pem"
    created = SigningKey.load_or_create(path)
    assert path.exists()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert not (tmp_path / "keys" / "signing.pem.tmp").exists()
    loaded = SigningKey.load_or_create(path)
    assert loaded.kid == created.kid
    assert public_jwk(loaded.public.key) == public_jwk(created.public.key)
    # a signature made before the reload verifies with the reloaded key
    value = sign_detached(b"x", created)
    assert verify_detached(value, b"x", TrustedKeys([loaded.public])) == created.kid


def test_load_or_create_tightens_loose_permissions(tmp_path: Path) -> None:
    path = tmp_path / "signing.pem"
    created = SigningKey.load_or_create(path)
    os.chmod(path, 0o644)
    assert SigningKey.load_or_create(path).kid == created.kid
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_generated_kid_is_rfc7638_thumbprint(key: SigningKey) -> None:
    jwk = public_jwk(key.public.key)
    assert key.kid == thumbprint(jwk)
    assert thumbprint(jwk) == ECKey.import_key(jwk).thumbprint()


def test_thumbprint_ignores_extra_members(key: SigningKey) -> None:
    jwk = public_jwk(key.public.key)
    assert thumbprint({**jwk, "kid": "x", "alg": "ES256", "use": "sig"}) == thumbprint(jwk)


def test_thumbprint_matches_joserfc_for_vector_key() -> None:
    # fixed key from the Wycheproof JWS vectors
    jwk = {
        "kty": "EC",
        "crv": "P-256",
        "x": "04N0xi21hshyvBp7I167sbE_bXqyqkAPfefdklMO7wY",
        "y": "UI8exy-C06a7DUnjIdENkxeFtHM4-l_41LqEw9nVgmw",
    }
    assert thumbprint(jwk) == ECKey.import_key(jwk).thumbprint()


@pytest.mark.parametrize(
    "change",
    [
        {"kty": "RSA"},
        {"crv": "P-384"},
        {"alg": "ES384"},
        {"use": "enc"},
        {"d": "AAAA"},
        {"x": "AAAA"},
        {"x": "not base64!"},
        {"kid": ""},
    ],
    ids=["rsa", "p384", "alg", "use-enc", "private", "short-x", "bad-b64", "empty-kid"],
)
def test_public_key_from_jwk_rejects(key: SigningKey, change: dict[str, str]) -> None:
    with pytest.raises(KeyFileError):
        public_key_from_jwk({**public_jwk(key.public.key), **change})


def test_public_key_from_jwk_rejects_point_off_curve(key: SigningKey) -> None:
    jwk = public_jwk(key.public.key)
    y = bytearray(b64url_decode(jwk["y"]))
    y[-1] ^= 0x01
    with pytest.raises(KeyFileError):
        public_key_from_jwk({**jwk, "y": b64url(bytes(y))})


def test_trusted_keys_refuse_kid_collision(key: SigningKey) -> None:
    other = SigningKey.generate(kid=key.kid)
    with pytest.raises(KeyFileError):
        TrustedKeys([key.public, other.public])
    assert len(TrustedKeys([key.public, key.public])) == 1


def test_jwks_round_trip(key: SigningKey) -> None:
    keys = TrustedKeys([key.public, SigningKey.generate().public])
    again = TrustedKeys.from_jwks(orjson.loads(orjson.dumps(keys.jwks())))
    assert again.kids() == keys.kids()
    assert verify_document(_signed(key), again, "signature") == key.kid
