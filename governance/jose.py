"""The joserfc configuration every ES256 signature of this project goes through.

* :data:`ES256`: joserfc's ES256 algorithm model (P-256, SHA-256, IEEE P1363
  ``r||s``), and :data:`ES256_DETERMINISTIC`, the same with RFC 6979 nonces
  (same bytes in, same signature out; reproducible synthetic catalogs);
* :data:`REGISTRY`: the joserfc JWS registry every compact JWS is parsed
  with; it knows ES256 and nothing else (``algorithms=["ES256"]`` pinned), accepts
  header parameters joserfc does not register (as RFC 7515 4 allows; the
  ones that change processing, ``crit`` and ``b64``, are refused by the
  callers) and bounds the header by ``MAX_HEADER``;
* :func:`protected_header`, :func:`ec_key`: the header and the joserfc key
  each signing or trusted key prepares once.

The registry is immutable configuration; the algorithm models are stateless.
"""

from __future__ import annotations

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from joserfc.jwa import ESAlgorithm, JWSAlgModel
from joserfc.jwk import ECKey
from joserfc.jws import JWSRegistry
from joserfc.util import json_b64encode

ALGORITHM = "ES256"
# joserfc's default header bound is 512 bytes; a token header may carry a kid of
# 256 characters and a few registered members, and the whole token is bounded by
# its caller (8 KiB), so the header bound is the caller's.
MAX_HEADER = 8 * 1024


class DeterministicES256(ESAlgorithm):
    """ES256 whose nonces follow RFC 6979: the signature is a function of the key
    and the signing input (for catalogs that must be reproducible byte for byte)."""

    def __init__(self) -> None:
        super().__init__(ALGORITHM, "P-256", 256, True)

    def sign(self, msg: bytes, key: ECKey) -> bytes:
        private = key.get_op_key("sign")
        der = private.sign(msg, ec.ECDSA(hashes.SHA256(), deterministic_signing=True))
        r, s = decode_dss_signature(der)
        return r.to_bytes(32, "big") + s.to_bytes(32, "big")


ES256: JWSAlgModel = JWSRegistry.algorithms[ALGORITHM]
ES256_DETERMINISTIC: JWSAlgModel = DeterministicES256()


REGISTRY = JWSRegistry(algorithms=[ALGORITHM], strict_check_header=False)
REGISTRY.max_header_length = MAX_HEADER


def protected_header(kid: str) -> str:
    """The base64url protected header ``{"alg":"ES256","kid":kid}`` as joserfc
    writes it (compact JSON, ASCII-escaped)."""
    return json_b64encode({"alg": ALGORITHM, "kid": kid}).decode("ascii")


def ec_key(key: ec.EllipticCurvePrivateKey | ec.EllipticCurvePublicKey, kid: str) -> ECKey:
    """A joserfc key for ES256 signatures under ``kid`` (its JWK members are
    computed once, on first use, and kept)."""
    return ECKey.import_key(key, {"kid": kid, "alg": ALGORITHM, "use": "sig"})
