"""Token authentication: the JWS layer against Wycheproof, the claims layer
against hand-made tokens (real ES256 signatures), and the mTLS SAN rule.

Which Wycheproof cases run through ``verify_compact_jws`` (one test each):
every case of every group whose public key is an EC P-256 JWK — ``es256``,
``SpecialCaseEs256`` and the two ``ec_key_for_encryption`` groups (a P-256
key marked ``use: enc`` / ``key_ops: [encrypt]``, which our key loader refuses
as a token-issuer key, so those tokens are rejected). Groups with other key
types (HMAC, RSA, P-521) do not target ES256 verification; their compact
tokens are run separately with their kid mapped to the trusted P-256 key to
show the alg pin rejects them (``token_algorithm_not_allowed``).
"""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest
from ans.governance.auth import (
    MAX_TOKEN_BYTES,
    TokenPolicy,
    authenticate_certificate,
    authenticate_token,
    verify_compact_jws,
)
from ans.governance.keys import (
    KeyFileError,
    PublicKey,
    SigningKey,
    TrustedKeys,
    b64url,
    b64url_decode,
    public_key_from_jwk,
)
from ans.protocol.errors import ERROR_CODES, AuthenticationFailed
from ans.protocol.messages import Identity
from ans.protocol.scope import parse_authority_scope

from tests.conftest import client_cert_pem


def _find_vectors() -> Path | None:
    for parent in Path(__file__).resolve().parents:
        candidate = parent / "shared" / "vectors" / "wycheproof" / "json_web_signature_test.json"
        if candidate.is_file():
            return candidate
    return None


VECTORS = _find_vectors()
ABSENT = "shared/vectors is absent (clone outside the workspace); Wycheproof tests need it"
JWS = json.loads(VECTORS.read_text()) if VECTORS else None


def _is_p256(group: dict[str, Any]) -> bool:
    pub = group.get("public", {})
    return pub.get("kty") == "EC" and pub.get("crv") == "P-256"


def _p256_cases() -> list[Any]:
    if JWS is None:
        return [pytest.param(None, None, id="vectors-absent")]
    return [
        pytest.param(g, t, id=str(t["tcId"]))
        for g in JWS["testGroups"]
        if _is_p256(g)
        for t in g["tests"]
    ]


def _foreign_cases() -> list[Any]:
    if JWS is None:
        return [pytest.param(None, None, id="vectors-absent")]
    return [
        pytest.param(g, t, id=str(t["tcId"]))
        for g in JWS["testGroups"]
        if not _is_p256(g)
        for t in g["tests"]
        if isinstance(t["jws"], str)
    ]


def test_p256_vector_selection() -> None:
    if JWS is None:
        pytest.skip(ABSENT)
    cases = [t for g in JWS["testGroups"] if _is_p256(g) for t in g["tests"]]
    assert len(cases) == 41
    assert sum(t["result"] == "valid" for t in cases) == 2


@pytest.mark.parametrize(("group", "test"), _p256_cases())
def test_wycheproof_p256_jws(group: dict[str, Any] | None, test: dict[str, Any] | None) -> None:
    if group is None or test is None:
        pytest.skip(ABSENT)
    token = test["jws"]
    try:
        keys: TrustedKeys | None = TrustedKeys([public_key_from_jwk(group["public"])])
    except KeyFileError:
        keys = None  # not usable as a token-issuer key (use: enc / key_ops: encrypt)
    if test["result"] == "valid":
        assert keys is not None
        verified = verify_compact_jws(token, keys)
        assert verified.kid == group["public"]["kid"]
        assert verified.header["alg"] == "ES256"
        return
    assert test["result"] == "invalid"
    if keys is None:
        return
    with pytest.raises(AuthenticationFailed) as info:
        verify_compact_jws(token, keys)
    assert info.value.status == 401 and info.value.code in ERROR_CODES


@pytest.mark.parametrize(("group", "test"), _foreign_cases())
def test_wycheproof_other_algorithms_never_verify(
    group: dict[str, Any] | None, test: dict[str, Any] | None
) -> None:
    if group is None or test is None:
        pytest.skip(ABSENT)
    ec = next(g for g in JWS["testGroups"] if _is_p256(g))["public"]  # type: ignore[index]
    header = _header(test["jws"])
    kid = header.get("kid") if isinstance(header.get("kid"), str) and header["kid"] else "k"
    keys = TrustedKeys([PublicKey(kid, public_key_from_jwk(ec).key)])
    with pytest.raises(AuthenticationFailed) as info:
        verify_compact_jws(test["jws"], keys)
    parts = test["jws"].split(".")
    if len(parts) == 3 and all(parts) and header:
        # Well-formed shape: refused by the alg pin itself, before any key use.
        assert info.value.code == "token_algorithm_not_allowed"
    else:
        assert info.value.code == "token_malformed"


def _header(token: str) -> dict[str, Any]:
    """The protected header under strict base64url ({} if it does not decode)."""
    try:
        value = json.loads(b64url_decode(token.split(".")[0]))
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


# -- claims ------------------------------------------------------------------------------

NOW = datetime(2026, 11, 21, 12, 0, 0, tzinfo=UTC)
ISSUER = "https://governance.example"
AUDIENCE = "agtp://ans.example/agents/ans"
AGENT = "agtp://o.example/agents/orch"
PRINCIPAL = "usr-1"
POLICY = TokenPolicy(ISSUER, AUDIENCE, leeway=30.0)
KEY = SigningKey.generate()
KEYS = TrustedKeys([KEY.public])


def mint(key: SigningKey = KEY, header: dict[str, Any] | None = None, **claims: Any) -> str:
    body: dict[str, Any] = {
        "iss": ISSUER,
        "aud": AUDIENCE,
        "sub": AGENT,
        "principal": PRINCIPAL,
        "scope": "discovery:query zone:finance",
        "exp": int((NOW + timedelta(minutes=5)).timestamp()),
        "nbf": int((NOW - timedelta(minutes=1)).timestamp()),
    }
    body.update(claims)
    body = {k: v for k, v in body.items() if v is not None}
    h = b64url(orjson.dumps(header or {"alg": "ES256", "kid": key.kid, "typ": "JWT"}))
    p = b64url(orjson.dumps(body))
    return f"{h}.{p}.{b64url(key.sign_raw(f'{h}.{p}'.encode()))}"


def ident(scope: str = "discovery:query zone:finance") -> Identity:
    return Identity(AGENT, PRINCIPAL, parse_authority_scope(scope), scope_header=scope)


def auth(token: str | None, identity: Identity | None = None, zone: str | None = None) -> Any:
    authorization = None if token is None else f"Bearer {token}"
    return authenticate_token(identity or ident(), authorization, zone, KEYS, POLICY, NOW)


def code_of(token: str | None, **kw: Any) -> str:
    with pytest.raises(AuthenticationFailed) as info:
        auth(token, **kw)
    assert info.value.status == 401 and info.value.code in ERROR_CODES
    return info.value.code


def test_valid_token_binds_the_identity() -> None:
    out = auth(mint(zone="zone:finance"), zone="zone:finance")
    assert out.identity.agent_id == AGENT
    assert str(out.identity.scope) == "discovery:query zone:finance"
    assert out.claims.zone == "zone:finance" and out.identity.token_zone == "zone:finance"
    assert out.identity.bearer_token is not None


def test_missing_and_non_bearer() -> None:
    with pytest.raises(AuthenticationFailed) as info:
        authenticate_token(ident(), None, None, KEYS, POLICY, NOW)
    assert info.value.code == "missing_token"
    assert info.value.headers == (("www-authenticate", 'Bearer realm="ANS"'),)
    with pytest.raises(AuthenticationFailed) as info:
        authenticate_token(ident(), "Basic dXNlcjpwdw==", None, KEYS, POLICY, NOW)
    assert info.value.code == "missing_token"


def test_invalid_token_challenge() -> None:
    with pytest.raises(AuthenticationFailed) as info:
        auth(mint(exp=int((NOW - timedelta(hours=1)).timestamp())))
    assert info.value.headers == (
        ("www-authenticate", 'Bearer realm="ANS", error="invalid_token"'),
    )


def test_expired_with_leeway() -> None:
    t = NOW.timestamp()
    assert code_of(mint(exp=int(t - 31))) == "token_expired"
    assert auth(mint(exp=int(t - 29))).identity.agent_id == AGENT  # within 30 s leeway


def test_not_yet_valid_with_leeway() -> None:
    t = NOW.timestamp()
    assert code_of(mint(nbf=int(t + 31))) == "token_not_yet_valid"
    assert auth(mint(nbf=int(t + 29))).identity.agent_id == AGENT


def test_audience() -> None:
    assert code_of(mint(aud="agtp://other/agents/ans")) == "token_wrong_audience"
    assert code_of(mint(aud=["a", "b"])) == "token_wrong_audience"
    assert auth(mint(aud=["agtp://other/agents/ans", AUDIENCE])).identity.agent_id == AGENT
    assert code_of(mint(aud=None)) == "token_missing_claim"
    assert code_of(mint(aud=7)) == "token_invalid_claim"


def test_issuer_subject_principal() -> None:
    assert code_of(mint(iss="https://evil.example")) == "token_wrong_issuer"
    assert code_of(mint(sub="agtp://o.example/agents/other")) == "token_subject_mismatch"
    assert code_of(mint(principal="usr-2")) == "token_principal_mismatch"
    assert code_of(mint(principal=None)) == "token_missing_claim"
    assert code_of(mint(exp=None)) == "token_missing_claim"
    assert code_of(mint(exp="tomorrow")) == "token_invalid_claim"
    assert code_of(mint(scope="Not A Scope")) == "token_invalid_claim"


def test_alg_none_and_unsigned() -> None:
    h = b64url(orjson.dumps({"alg": "none", "kid": KEY.kid}))
    p = b64url(orjson.dumps({"iss": ISSUER}))
    assert code_of(f"{h}.{p}.") == "token_malformed"  # no signature part
    assert code_of(f"{h}.{p}.{b64url(b'x' * 64)}") == "token_algorithm_not_allowed"


def test_hs256_with_the_ec_public_key_as_secret() -> None:
    import hashlib
    import hmac

    h = b64url(orjson.dumps({"alg": "HS256", "kid": KEY.kid}))
    p = b64url(orjson.dumps({"iss": ISSUER, "sub": AGENT}))
    secret = orjson.dumps(KEY.public.jwk())
    mac = hmac.new(secret, f"{h}.{p}".encode(), hashlib.sha256).digest()
    assert code_of(f"{h}.{p}.{b64url(mac)}") == "token_algorithm_not_allowed"


@pytest.mark.parametrize("alg", ["RS256", "ES384", "ES512", "PS256", "EdDSA", "ES256K"])
def test_other_algorithms(alg: str) -> None:
    assert code_of(mint(header={"alg": alg, "kid": KEY.kid})) == "token_algorithm_not_allowed"


def test_unknown_kid_and_wrong_key() -> None:
    other = SigningKey.generate()
    assert code_of(mint(key=other)) == "token_unknown_key"
    forged = mint(key=other, header={"alg": "ES256", "kid": KEY.kid})
    assert code_of(forged) == "token_signature_invalid"


def test_crit_jwe_oversize_and_garbage() -> None:
    crit = mint(header={"alg": "ES256", "kid": KEY.kid, "crit": ["exp"], "exp": 1})
    assert code_of(crit) == "token_unsupported_header"
    assert code_of("a.b.c.d.e") == "token_malformed"
    assert code_of("not-a-token") == "token_malformed"
    assert code_of(mint(pad="x" * MAX_TOKEN_BYTES)) == "token_too_large"
    h = b64url(b'{"alg":"ES256","alg":"none","kid":"k"}')  # duplicate keys: strict JSON
    assert code_of(f"{h}.e30.{b64url(b'x' * 64)}") == "token_malformed"


def test_scope_is_intersected() -> None:
    out = auth(mint(scope="discovery:query"), identity=ident("discovery:query zone:finance"))
    assert str(out.identity.scope) == "discovery:query"  # zone:finance dropped
    out = auth(mint(scope="zone:*"), identity=ident("discovery:query zone:finance"))
    assert str(out.identity.scope) == "zone:finance"
    out = auth(mint(scope="*:*"), identity=ident("discovery:query"))
    assert str(out.identity.scope) == "discovery:query"  # never more than the header


def test_zone_claim() -> None:
    token = mint(zone="zone:finance")
    assert code_of(token, zone="zone:health") == "token_zone_mismatch"
    assert auth(token).identity.token_zone == "zone:finance"  # no header: nothing to bind
    assert auth(mint(), zone="zone:health").identity.token_zone is None


# -- mTLS -------------------------------------------------------------------------------


def _cert(uris: list[str]) -> str:
    return client_cert_pem(uris, NOW)


def test_certificate_san_uri_binds_agent_id() -> None:
    ok = authenticate_certificate(ident(), [_cert(["spiffe://x", AGENT])])
    assert ok.certificate_uri == AGENT
    for chain in ([_cert(["agtp://o.example/agents/other"])], [_cert([])]):
        with pytest.raises(AuthenticationFailed) as info:
            authenticate_certificate(ident(), chain)
        assert info.value.code == "certificate_identity_mismatch"
    with pytest.raises(AuthenticationFailed) as info:
        authenticate_certificate(ident(), [])
    assert info.value.code == "client_certificate_required"


def test_a_trusted_forwarder_vouches_for_forwarded_requests_only() -> None:
    fwd = "agtp://ans-a.example/agents/ans"
    chain = [_cert([fwd])]
    ok = authenticate_certificate(ident(), chain, frozenset({fwd}), forwarded=True)
    assert ok.forwarded_by == fwd and ok.certificate_uri == fwd
    assert ok.identity == ident()  # the caller's identity, unchanged
    refused = (
        (frozenset({fwd}), False),  # not on a federation path: its own identity only
        (frozenset({"agtp://other.example/agents/ans"}), True),  # not a trusted forwarder
        (frozenset(), True),
    )
    for forwarders, forwarded in refused:
        with pytest.raises(AuthenticationFailed) as info:
            authenticate_certificate(ident(), chain, forwarders, forwarded=forwarded)
        assert info.value.code == "certificate_identity_mismatch"
    # A forwarder speaking for itself is an ordinary caller.
    itself = dataclasses.replace(ident(), agent_id=fwd)
    own = authenticate_certificate(itself, chain, frozenset({fwd}), forwarded=True)
    assert own.forwarded_by is None and own.certificate_uri == fwd
