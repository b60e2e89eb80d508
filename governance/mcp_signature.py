"""Signed MCP announcements (seed 002 sections 4.2 and 6.1; DESIGN.md "002
signatures").

``signature`` is standard base64 of a signature over the RFC 8785 bytes of
the ``agent`` object: ECDSA P-256 with SHA-256 (DER, as common libraries
produce it; raw ``r||s`` of 64 bytes is accepted too) or RSA (>= 2048 bits)
PKCS#1 v1.5 with SHA-256. ``public_key`` is a PEM SubjectPublicKeyInfo or an
X.509 certificate PEM (its key is used). Any other key type or size, a
malformed PEM or base64, or a signature that does not verify is a typed error
(400 for the key, 401 ``signature_invalid`` for the signature).

:func:`key_id` names a key by the SHA-256 of its DER SubjectPublicKeyInfo,
which is what the registry's trust store pins.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from dataclasses import dataclass

from ans.protocol.errors import ErrorCode, SignatureInvalid
from ans.protocol.mcp_errors import McpMalformed
from cryptography import x509
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

MIN_RSA_BITS = 2048
MAX_RSA_BITS = 8192
_P256_RAW = 64

AgentKey = ec.EllipticCurvePublicKey | rsa.RSAPublicKey


@dataclass(frozen=True, slots=True)
class LoadedKey:
    """An acceptable announcement key and its trust-store id."""

    key: AgentKey
    key_id: str  # hex SHA-256 of the DER SubjectPublicKeyInfo
    algorithm: str  # "ES256" | "RS256"


def load_agent_key(pem: str) -> LoadedKey:
    """The key of a PEM SubjectPublicKeyInfo or X.509 certificate: EC P-256
    or RSA 2048..8192 bits; anything else is 400 ``invalid_mcp_message``."""
    data = pem.strip().encode("ascii", "replace")
    key: object
    try:
        if data.startswith(b"-----BEGIN CERTIFICATE-----"):
            key = x509.load_pem_x509_certificate(data).public_key()
        else:
            key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError, UnsupportedAlgorithm):
        raise McpMalformed("agent.public_key is not a readable PEM public key") from None
    if isinstance(key, ec.EllipticCurvePublicKey):
        if not isinstance(key.curve, ec.SECP256R1):
            raise McpMalformed("agent.public_key: EC keys must be on P-256 (secp256r1)")
        algorithm = "ES256"
    elif isinstance(key, rsa.RSAPublicKey):
        if not MIN_RSA_BITS <= key.key_size <= MAX_RSA_BITS:
            raise McpMalformed(
                f"agent.public_key: RSA keys must be {MIN_RSA_BITS}..{MAX_RSA_BITS} bits"
            )
        algorithm = "RS256"
    else:
        raise McpMalformed("agent.public_key must be an EC P-256 or RSA key")
    return LoadedKey(key, key_id_of(key), algorithm)


def key_id_of(key: AgentKey) -> str:
    der = key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return hashlib.sha256(der).hexdigest()


def decode_signature(text: str, what: str = "signature") -> bytes:
    """Standard base64 (URL-safe alphabet and missing padding tolerated)."""
    cleaned = text.strip()
    padded = cleaned + "=" * (-len(cleaned) % 4)
    try:
        if "-" in cleaned or "_" in cleaned:
            return base64.urlsafe_b64decode(padded)
        return base64.b64decode(padded, validate=True)
    except (binascii.Error, ValueError):
        raise SignatureInvalid(f"{what} is not base64") from None


def verify(loaded: LoadedKey, message: bytes, signature: bytes) -> bool:
    """Whether ``signature`` over ``message`` verifies with the key."""
    key = loaded.key
    try:
        if isinstance(key, rsa.RSAPublicKey):
            key.verify(signature, message, padding.PKCS1v15(), hashes.SHA256())
            return True
        try:
            key.verify(signature, message, ec.ECDSA(hashes.SHA256()))
            return True
        except (InvalidSignature, ValueError):
            if len(signature) != _P256_RAW:
                return False
        r = int.from_bytes(signature[:32], "big")
        s = int.from_bytes(signature[32:], "big")
        key.verify(encode_dss_signature(r, s), message, ec.ECDSA(hashes.SHA256()))
        return True
    except (InvalidSignature, ValueError):
        return False


def require_signature(loaded: LoadedKey, message: bytes, signature: str | None, what: str) -> None:
    """401 ``signature_invalid`` unless ``signature`` (base64) verifies."""
    if signature is None:
        raise SignatureInvalid(
            f"the announcement is unsigned: {what} is required", code=ErrorCode.SIGNATURE_INVALID
        )
    if not verify(loaded, message, decode_signature(signature, what)):
        raise SignatureInvalid(f"{what} does not verify with the {loaded.algorithm} key")
