"""Project Wycheproof vectors against the ES256 verification path.

1. ecdsa_secp256r1_sha256_p1363_test.json -> ``PublicKey.verify_raw``
   (one case per tcId).
2. json_web_signature_test.json, P-256 groups -> ``verify_detached`` via a
   helper that turns an attached compact JWS ``h.p.s`` into our detached form
   ``h..s`` plus the decoded payload.

How each JWS category is treated (see ``_jws_outcome``):
* the group's public JWK is loaded with ``public_key_from_jwk``; if our key
  loader refuses it (e.g. ``use: enc``) the case counts as "rejected";
* a token that is not three dot-separated parts is passed to
  ``verify_detached`` unchanged (it must reject it itself);
* a payload part that is not base64url cannot be turned into detached form;
  such a token counts as "rejected" by the helper (none occur in P-256 groups);
* a header without ``kid`` is rejected by our verifier by design (we require
  a kid); a "valid" vector without a kid could not be exercised. In the
  stored vectors every P-256 "valid" case has ``kid: kid-ec-sign`` matching
  its key, so zero valid cases are lost to that rule
  (asserted in ``test_jws_valid_cases_all_have_matching_kid``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from ans.governance.keys import (
    KeyFileError,
    PublicKey,
    TrustedKeys,
    b64url,
    b64url_decode,
    public_key_from_jwk,
)
from ans.governance.signing import verify_detached
from ans.protocol.errors import AgtpError, SignatureInvalid


def _find_vectors() -> Path | None:
    for parent in Path(__file__).resolve().parents:
        candidate = parent / "shared" / "vectors"
        if candidate.is_dir():
            return candidate
    return None


VECTORS = _find_vectors()
ABSENT = "shared/vectors is absent (clone outside the workspace); Wycheproof tests need it"
ECDSA_FILE = "ecdsa_secp256r1_sha256_p1363_test.json"
JWS_FILE = "json_web_signature_test.json"


def _load(name: str) -> dict[str, Any] | None:
    if VECTORS is None:
        return None
    return json.loads((VECTORS / "wycheproof" / name).read_text())


ECDSA = _load(ECDSA_FILE)
JWS = _load(JWS_FILE)
ABSENT_PARAM = [pytest.param(None, None, id="vectors-absent")]


# -- ECDSA P-256 / SHA-256 / P1363 -------------------------------------------------------


def _group_jwk(group: dict[str, Any]) -> dict[str, Any]:
    """The group's public JWK, or one built from the uncompressed point."""
    if "publicKeyJwk" in group:
        return group["publicKeyJwk"]
    point = bytes.fromhex(group["publicKey"]["uncompressed"])
    assert point[0] == 4 and len(point) == 65
    return {"kty": "EC", "crv": "P-256", "x": b64url(point[1:33]), "y": b64url(point[33:])}


def _ecdsa_cases() -> list[Any]:
    if ECDSA is None:
        return ABSENT_PARAM
    return [
        pytest.param(group, test, id=f"tc{test['tcId']}")
        for group in ECDSA["testGroups"]
        for test in group["tests"]
    ]


def test_ecdsa_vector_file_shape() -> None:
    if ECDSA is None:
        pytest.skip(ABSENT)
    assert ECDSA["algorithm"] == "ECDSA"
    cases = [t for g in ECDSA["testGroups"] for t in g["tests"]]
    assert len(cases) == ECDSA["numberOfTests"] > 0
    for g in ECDSA["testGroups"]:
        assert g["type"] == "EcdsaP1363Verify"
        assert g["sha"] == "SHA-256"
        assert g["publicKey"]["curve"] == "secp256r1"


@pytest.mark.parametrize(("group", "test"), _ecdsa_cases())
def test_ecdsa_p1363_verify_raw(group: dict[str, Any] | None, test: dict[str, Any] | None) -> None:
    if group is None or test is None:
        pytest.skip(ABSENT)
    key = public_key_from_jwk(_group_jwk(group))
    ok = key.verify_raw(bytes.fromhex(test["sig"]), bytes.fromhex(test["msg"]))
    assert isinstance(ok, bool)
    if test["result"] == "valid":
        assert ok is True, test["comment"]
    elif test["result"] == "invalid":
        assert ok is False, test["comment"]
    # "acceptable": either outcome is allowed


def test_jwk_and_uncompressed_point_give_the_same_key() -> None:
    if ECDSA is None:
        pytest.skip(ABSENT)
    group = next(g for g in ECDSA["testGroups"] if "publicKeyJwk" in g)
    from_jwk = public_key_from_jwk(group["publicKeyJwk"])
    from_point = public_key_from_jwk(_group_jwk({"publicKey": group["publicKey"]}))
    assert from_jwk.key.public_numbers() == from_point.key.public_numbers()


# -- JWS (attached compact) through verify_detached ----------------------------------------


def _p256_groups() -> list[dict[str, Any]]:
    if JWS is None:
        return []
    return [
        g
        for g in JWS["testGroups"]
        if g.get("public", {}).get("kty") == "EC" and g["public"].get("crv") == "P-256"
    ]


def _header(token: str) -> dict[str, Any] | None:
    try:
        value = json.loads(b64url_decode(token.split(".")[0]))
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _jws_outcome(token: str, jwk: dict[str, Any]) -> str:
    """'verified' or 'rejected' for an attached compact JWS under ``jwk``."""
    try:
        keys = TrustedKeys([public_key_from_jwk(jwk)])
    except KeyFileError:
        return "rejected"  # our key loader refuses the key itself
    parts = token.split(".")
    if len(parts) == 3:
        header_b64, payload_b64, sig_b64 = parts
        try:
            payload = b64url_decode(payload_b64)
        except ValueError:
            return "rejected"  # cannot express as detached JWS
        detached = f"{header_b64}..{sig_b64}"
    else:
        payload, detached = b"", token  # verify_detached must refuse the shape
    try:
        verify_detached(detached, payload, keys)
    except SignatureInvalid:
        return "rejected"
    except AgtpError:
        return "rejected"
    return "verified"


def _jws_cases() -> list[Any]:
    if JWS is None:
        return ABSENT_PARAM
    return [
        pytest.param(group, test, id=f"tc{test['tcId']}-{test['comment']}")
        for group in _p256_groups()
        for test in group["tests"]
    ]


def test_jws_valid_cases_all_have_matching_kid() -> None:
    if JWS is None:
        pytest.skip(ABSENT)
    valid = [(g, t) for g in _p256_groups() for t in g["tests"] if t["result"] == "valid"]
    assert valid, "expected at least one valid P-256 JWS vector"
    unexercisable = [
        t["tcId"]
        for g, t in valid
        if (_header(t["jws"]) or {}).get("kid") != g["public"].get("kid")
    ]
    assert unexercisable == []


@pytest.mark.parametrize(("group", "test"), _jws_cases())
def test_jws_p256_vector(group: dict[str, Any] | None, test: dict[str, Any] | None) -> None:
    if group is None or test is None:
        pytest.skip(ABSENT)
    token = test["jws"]
    assert isinstance(token, str), "P-256 vectors are compact serializations"
    outcome = _jws_outcome(token, group["public"])
    if test["result"] == "invalid":
        assert outcome == "rejected", test["comment"]
    elif test["result"] == "valid":
        header = _header(token)
        assert header is not None and header.get("alg") == "ES256"
        assert header.get("kid") == group["public"]["kid"]
        assert outcome == "verified", test["comment"]


def _foreign_cases() -> list[Any]:
    if JWS is None:
        return ABSENT_PARAM
    p256 = {id(g) for g in _p256_groups()}
    return [
        pytest.param(group, test, id=f"tc{test['tcId']}-{group['comment']}")
        for group in JWS["testGroups"]
        if id(group) not in p256
        for test in group["tests"]
        if isinstance(test["jws"], str)
    ]


@pytest.mark.parametrize(("group", "test"), _foreign_cases())
def test_non_es256_vectors_rejected_even_when_kid_is_trusted(
    group: dict[str, Any] | None, test: dict[str, Any] | None
) -> None:
    """HS/RS/PS/ES512/none tokens (valid or not under their own alg) must never
    verify: ES256 is pinned. The token's kid is mapped to the P-256 test key so
    that rejection comes from the algorithm pin, not an unknown kid."""
    if group is None or test is None:
        pytest.skip(ABSENT)
    ec_jwk = dict(_p256_groups()[0]["public"])
    header = _header(test["jws"]) or {}
    kid = header.get("kid")
    ec_key = public_key_from_jwk(ec_jwk)
    keys = TrustedKeys([PublicKey(kid if isinstance(kid, str) and kid else ec_key.kid, ec_key.key)])
    parts = test["jws"].split(".")
    detached = f"{parts[0]}..{parts[-1]}" if len(parts) == 3 else test["jws"]
    try:
        payload = b64url_decode(parts[1]) if len(parts) == 3 else b""
    except ValueError:
        payload = b""
    with pytest.raises(SignatureInvalid):
        verify_detached(detached, payload, keys)
