"""ES256 keys: the ANS signing key (generated once, stored 0600, stable kid)
and sets of trusted public keys loaded from JWKS documents.

The ``kid`` of a key we generate is its RFC 7638 JWK thumbprint, so it is
stable for as long as the key file exists. Each key carries its joserfc
``ECKey`` (``.jose``), built once, through which every signature is made and
checked (``ans.governance.jose``).
"""

from __future__ import annotations

import base64
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from ans.protocol import jsonstrict
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from joserfc.jwa import JWSAlgModel
from joserfc.jwk import ECKey
from joserfc.jwk import thumbprint as jwk_thumbprint

from .jose import (
    ES256,
    ES256_DETERMINISTIC,
    ec_key,
    protected_header,
)

_CURVE_BYTES = 32
_ORDER = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551


class KeyFileError(ValueError):
    """A key or JWKS document is unusable (configuration error, not a request error)."""


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def b64url_decode(text: str) -> bytes:
    if not isinstance(text, str) or len(text) % 4 == 1 or _B64URL.fullmatch(text) is None:
        raise ValueError("not base64url")
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


_B64URL = re.compile(r"[A-Za-z0-9_-]*")


def _int_bytes(n: int) -> bytes:
    return n.to_bytes(_CURVE_BYTES, "big")


def public_jwk(pub: ec.EllipticCurvePublicKey) -> dict[str, str]:
    nums = pub.public_numbers()
    return {
        "kty": "EC",
        "crv": "P-256",
        "x": b64url(_int_bytes(nums.x)),
        "y": b64url(_int_bytes(nums.y)),
    }


def thumbprint(jwk: Mapping[str, Any]) -> str:
    """RFC 7638 SHA-256 thumbprint of an EC public JWK."""
    return jwk_thumbprint({k: jwk[k] for k in ("crv", "kty", "x", "y")})


@dataclass(frozen=True, slots=True)
class PublicKey:
    kid: str
    key: ec.EllipticCurvePublicKey
    # The same key for joserfc (kid, alg ES256, use sig), built once.
    jose: ECKey = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "jose", ec_key(self.key, self.kid))

    def jwk(self) -> dict[str, str]:
        return {**public_jwk(self.key), "kid": self.kid, "alg": "ES256", "use": "sig"}

    def verify_raw(self, signature: bytes, data: bytes) -> bool:
        """Verify an IEEE P1363 r||s ES256 signature (joserfc's ES256; scalars
        outside [1, n-1] are refused before it is asked)."""
        if len(signature) != 2 * _CURVE_BYTES:
            return False
        r = int.from_bytes(signature[:_CURVE_BYTES], "big")
        s = int.from_bytes(signature[_CURVE_BYTES:], "big")
        if not (0 < r < _ORDER and 0 < s < _ORDER):
            return False
        return ES256.verify(data, signature, self.jose)


class SigningKey:
    """An ES256 private key with its public half and stable kid."""

    # RFC 6979 nonces (same input, same signature) instead of random ones.
    deterministic: ClassVar[bool] = False

    def __init__(self, private: ec.EllipticCurvePrivateKey, kid: str | None = None) -> None:
        if not isinstance(private.curve, ec.SECP256R1):
            raise KeyFileError("ES256 needs a P-256 key")
        self._private = private
        jwk = public_jwk(private.public_key())
        self.public = PublicKey(kid or thumbprint(jwk), private.public_key())
        self.jose = ec_key(private, self.public.kid)
        # The protected header of every signature this key makes, serialized once.
        self.jws_header = protected_header(self.public.kid)

    @property
    def kid(self) -> str:
        return self.public.kid

    @property
    def jws_algorithm(self) -> JWSAlgModel:
        return ES256_DETERMINISTIC if self.deterministic else ES256

    @classmethod
    def generate(cls, kid: str | None = None) -> SigningKey:
        return cls(ec.generate_private_key(ec.SECP256R1()), kid)

    def sign_raw(self, data: bytes) -> bytes:
        """An IEEE P1363 r||s ES256 signature of ``data`` (joserfc's ES256)."""
        return self.jws_algorithm.sign(data, self.jose)

    def private_pem(self) -> bytes:
        return self._private.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )

    @classmethod
    def from_pem(cls, data: bytes, kid: str | None = None) -> SigningKey:
        try:
            key = serialization.load_pem_private_key(data, password=None)
        except (ValueError, TypeError) as exc:
            raise KeyFileError(f"not a PEM private key: {exc}") from None
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise KeyFileError("the key is not an EC key; ES256 needs P-256")
        return cls(key, kid)

    def save(self, path: Path) -> None:
        """Write the private key with mode 0600 (atomically; never world-readable)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, self.private_pem())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)

    @classmethod
    def load_or_create(cls, path: Path) -> SigningKey:
        if path.exists():
            mode = path.stat().st_mode & 0o777
            if mode & 0o077:
                os.chmod(path, 0o600)
            return cls.from_pem(path.read_bytes())
        key = cls.generate()
        key.save(path)
        return key


def public_key_from_jwk(jwk: Mapping[str, Any]) -> PublicKey:
    """A P-256 ES256 verification key from a JWK (rejects anything else)."""
    if jwk.get("kty") != "EC" or jwk.get("crv") != "P-256":
        raise KeyFileError("only EC P-256 keys are accepted (ES256)")
    if jwk.get("alg") not in (None, "ES256"):
        raise KeyFileError(f"key alg {jwk.get('alg')!r} is not ES256")
    if jwk.get("use") not in (None, "sig"):
        raise KeyFileError("key use must be 'sig'")
    key_ops = jwk.get("key_ops")
    if key_ops is not None and (not isinstance(key_ops, list) or "verify" not in key_ops):
        raise KeyFileError("key_ops must allow 'verify' (RFC 7517 4.3)")
    if "d" in jwk:
        raise KeyFileError("a trusted-key JWKS must not contain private keys")
    try:
        x = b64url_decode(jwk["x"])
        y = b64url_decode(jwk["y"])
        if len(x) != _CURVE_BYTES or len(y) != _CURVE_BYTES:
            raise ValueError("coordinate length")
        pub = ec.EllipticCurvePublicNumbers(
            int.from_bytes(x, "big"), int.from_bytes(y, "big"), ec.SECP256R1()
        ).public_key()
    except (KeyError, ValueError, TypeError) as exc:
        raise KeyFileError(f"invalid EC public key: {exc}") from None
    kid = jwk.get("kid")
    if kid is not None and (not isinstance(kid, str) or not kid or len(kid) > 256):
        raise KeyFileError("kid must be a non-empty string")
    return PublicKey(kid or thumbprint(jwk), pub)


class TrustedKeys:
    """Public keys by kid (e.g. the trusted governance-platform keys)."""

    def __init__(self, keys: Iterable[PublicKey] = ()) -> None:
        self._by_kid: dict[str, PublicKey] = {}
        for k in keys:
            self.add(k)

    def add(self, key: PublicKey) -> None:
        existing = self._by_kid.get(key.kid)
        if existing is not None and public_jwk(existing.key) != public_jwk(key.key):
            raise KeyFileError(f"two different keys share kid {key.kid!r}")
        self._by_kid[key.kid] = key

    def get(self, kid: str) -> PublicKey | None:
        return self._by_kid.get(kid)

    def kids(self) -> list[str]:
        return sorted(self._by_kid)

    def __len__(self) -> int:
        return len(self._by_kid)

    def jwks(self) -> dict[str, list[dict[str, str]]]:
        return {"keys": [self._by_kid[k].jwk() for k in self.kids()]}

    @classmethod
    def from_jwks(cls, doc: Any) -> TrustedKeys:
        if not isinstance(doc, dict) or not isinstance(doc.get("keys"), list):
            raise KeyFileError("a JWKS is a JSON object with a 'keys' list")
        return cls(public_key_from_jwk(k) for k in doc["keys"] if isinstance(k, dict))

    @classmethod
    def load_jwks_file(cls, path: Path) -> TrustedKeys:
        try:
            doc = jsonstrict.loads(path.read_bytes(), max_bytes=1024 * 1024)
        except OSError as exc:
            raise KeyFileError(f"cannot read JWKS {path}: {exc}") from None
        except Exception as exc:  # malformed JSON is a configuration error here
            raise KeyFileError(f"JWKS {path} is not valid JSON: {exc}") from None
        return cls.from_jwks(doc)
