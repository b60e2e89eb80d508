"""MCP announcement keys and signatures (DESIGN.md "002 signatures"): EC
P-256 (DER and raw r||s) and RSA >= 2048 PKCS#1 v1.5, SPKI or certificate
PEM; everything else refused with a typed error."""

from __future__ import annotations

import base64
import datetime as dt

import pytest
from ans.governance.mcp_signature import (
    decode_signature,
    load_agent_key,
    require_signature,
    verify,
)
from ans.protocol.errors import SignatureInvalid
from ans.protocol.mcp_errors import McpMalformed
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from cryptography.x509.oid import NameOID

MSG = b'{"agent_id":"x"}'


def spki(key: object) -> str:
    return (
        key.public_key()
        .public_bytes(  # type: ignore[attr-defined,no-any-return]
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        .decode()
    )


def test_ec_der_and_raw() -> None:
    k = ec.generate_private_key(ec.SECP256R1())
    loaded = load_agent_key(spki(k))
    assert loaded.algorithm == "ES256" and len(loaded.key_id) == 64
    der = k.sign(MSG, ec.ECDSA(hashes.SHA256()))
    r, s = decode_dss_signature(der)
    raw = r.to_bytes(32, "big") + s.to_bytes(32, "big")
    assert verify(loaded, MSG, der) and verify(loaded, MSG, raw)
    assert not verify(loaded, MSG + b" ", der) and not verify(loaded, MSG + b" ", raw)
    assert not verify(loaded, MSG, b"\x00" * 64) and not verify(loaded, MSG, b"junk")
    require_signature(loaded, MSG, base64.b64encode(der).decode(), "signature")
    require_signature(loaded, MSG, base64.urlsafe_b64encode(raw).decode().rstrip("="), "s")
    with pytest.raises(SignatureInvalid):
        require_signature(loaded, MSG, None, "signature")
    with pytest.raises(SignatureInvalid):
        require_signature(loaded, b"other", base64.b64encode(der).decode(), "signature")
    with pytest.raises(SignatureInvalid):
        decode_signature("***")


def test_rsa_and_certificate() -> None:
    k = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    loaded = load_agent_key(spki(k))
    assert loaded.algorithm == "RS256"
    sig = k.sign(MSG, padding.PKCS1v15(), hashes.SHA256())
    assert verify(loaded, MSG, sig) and not verify(loaded, MSG + b"x", sig)
    # a PSS signature is not PKCS#1 v1.5
    pss = k.sign(MSG, padding.PSS(padding.MGF1(hashes.SHA256()), 32), hashes.SHA256())
    assert not verify(loaded, MSG, pss)
    ec_key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "agent")])
    now = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(ec_key.public_key())
        .serial_number(1)
        .not_valid_before(now)
        .not_valid_after(now + dt.timedelta(days=365))
        .sign(ec_key, hashes.SHA256())
    )
    pem = cert.public_bytes(serialization.Encoding.PEM).decode()
    assert load_agent_key(pem).key_id == load_agent_key(spki(ec_key)).key_id


@pytest.mark.parametrize(
    "key",
    [
        lambda: rsa.generate_private_key(public_exponent=65537, key_size=1024),
        lambda: ec.generate_private_key(ec.SECP384R1()),
        lambda: ed25519.Ed25519PrivateKey.generate(),
    ],
)
def test_weak_or_other_keys_are_refused(key: object) -> None:
    with pytest.raises(McpMalformed):
        load_agent_key(spki(key()))  # type: ignore[operator]


def test_garbage_pem() -> None:
    with pytest.raises(McpMalformed):
        load_agent_key("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n")
