"""What one ES256 signature and one verification cost: the hand-written JWS
code this project had before issue 24 (a frozen copy below, ``legacy_*``)
against the joserfc-backed ``ans.governance.signing`` / ``auth``, in one run.

    .venv/bin/python bench/sign_cost.py [--n 2000] [--rounds 7] [--out FILE]

Operations, each on the same fixed P-256 key and the same bytes:

* ``sign_<size>``: ``signature_object(payload, key)``, the detached compact
  JWS of a DISCOVER answer (``result``: 10 agents, ~8 KB of JCS) and of a
  refusal (``refusal``: ~250 B); JCS is done once outside the timing, it is
  the same code before and after;
* ``verify_<size>``: ``verify_detached(value, payload, keys)`` of that value;
* ``verify_token``: the JWS layer of a bearer token (``verify_compact_jws``).

Per operation, ``--rounds`` rounds alternate legacy and joserfc batches of
``--n`` calls; the median per-call CPU time of this thread
(``time.thread_time``) is reported with the ratio joserfc/legacy. Writes
bench/results/sign_cost.json.
"""

from __future__ import annotations

import argparse
import base64
import json
import platform
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
from ans.governance.auth import verify_compact_jws
from ans.governance.keys import SigningKey, TrustedKeys
from ans.governance.signing import signature_object, verify_detached
from ans.protocol import jsonstrict
from ans.protocol.jcs import canonicalize
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import (
    decode_dss_signature,
    encode_dss_signature,
)

ROOT = Path(__file__).resolve().parent.parent

# -- the hand-written code before issue 24 (governance/keys.py, signing.py, auth.py
#    at 354e9ed), kept verbatim in substance: the "before" of this benchmark ----------

_ORDER = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551
_B64URL = re.compile(r"[A-Za-z0-9_-]*")


def legacy_b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def legacy_b64url_decode(text: str) -> bytes:
    if not isinstance(text, str) or len(text) % 4 == 1 or _B64URL.fullmatch(text) is None:
        raise ValueError("not base64url")
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def legacy_sign_raw(private: ec.EllipticCurvePrivateKey, data: bytes) -> bytes:
    r, s = decode_dss_signature(private.sign(data, ec.ECDSA(hashes.SHA256())))
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


def legacy_signature_object(
    payload: bytes, private: ec.EllipticCurvePrivateKey, kid: str
) -> dict[str, str]:
    header = legacy_b64url(orjson.dumps({"alg": "ES256", "kid": kid}))
    signing_input = f"{header}.{legacy_b64url(payload)}".encode("ascii")
    value = f"{header}..{legacy_b64url(legacy_sign_raw(private, signing_input))}"
    return {"algorithm": "ES256", "key_id": kid, "value": value}


def legacy_verify_detached(
    value: str, payload: bytes, keys: dict[str, ec.EllipticCurvePublicKey]
) -> str:
    if len(value) > 2048:
        raise ValueError("too long")
    header_b64, embedded, sig_b64 = value.split(".")
    if embedded:
        raise ValueError("attached")
    header = orjson.loads(legacy_b64url_decode(header_b64))
    signature = legacy_b64url_decode(sig_b64)
    if not isinstance(header, dict) or header.get("alg") != "ES256":
        raise ValueError("alg")
    if "crit" in header or header.get("b64") is False:
        raise ValueError("extensions")
    kid = header.get("kid")
    if not isinstance(kid, str) or not kid:
        raise ValueError("kid")
    public = keys.get(kid)
    if public is None:
        raise ValueError("unknown key")
    signing_input = f"{header_b64}.{legacy_b64url(payload)}".encode("ascii")
    if not legacy_verify_raw(public, signature, signing_input):
        raise ValueError("does not verify")
    return kid


def legacy_verify_token(token: str, keys: dict[str, ec.EllipticCurvePublicKey]) -> str:
    parts = token.split(".")
    if len(token) > 8192 or not token.isascii() or len(parts) != 3 or not all(parts):
        raise ValueError("malformed")
    header_b64, payload_b64, sig_b64 = parts
    header = jsonstrict.loads(legacy_b64url_decode(header_b64), max_bytes=8192, max_depth=8)
    if not isinstance(header, dict) or header.get("alg") != "ES256":
        raise ValueError("alg")
    if any(h in header for h in ("crit", "b64", "zip", "enc")):
        raise ValueError("extensions")
    kid = header.get("kid")
    if not isinstance(kid, str) or not kid or len(kid) > 256:
        raise ValueError("kid")
    public = keys.get(kid)
    if public is None:
        raise ValueError("unknown key")
    signature = legacy_b64url_decode(sig_b64)
    legacy_b64url_decode(payload_b64)
    if not legacy_verify_raw(public, signature, f"{header_b64}.{payload_b64}".encode("ascii")):
        raise ValueError("does not verify")
    return kid


# -- inputs --------------------------------------------------------------------------------

# A fixed key (d chosen once), so runs compare the same curve point.
FIXED_D = 0x3F6C1B8A2D9E4F5061728394A5B6C7D8E9F00112233445566778899AABBCCDD


def _result(agents: int) -> dict[str, Any]:
    return {
        "generated_at": "2026-11-25T12:00:00.000Z",
        "query_digest": "ab" * 32,
        "match": {"gate": "relevance", "min_score": 0.35},
        "results": [
            {
                "canonical_id": f"agtp://bench{i}.example/agents/worker-{i}",
                "agent_id": f"agtp://bench{i}.example/agents/worker-{i}",
                "trust_tier": 1 + i % 2,
                "behavioral_trust_score": 0.5 + i / 100,
                "capability_match_score": 0.9 - i / 50,
                "rank_score": 0.8 - i / 40,
                "manifest": {
                    "name": f"Worker {i}",
                    "description": "Audits purchase orders against contract terms " * 6,
                    "capabilities": [f"audit.contracts.{j}" for j in range(8)],
                    "endpoints": [f"agtp://bench{i}.example/agents/worker-{i}"],
                    "lifecycle": "Active",
                },
            }
            for i in range(agents)
        ],
    }


REFUSAL = {
    "code": "invalid_parameter",
    "message": "limit must be an integer between 1 and 100",
    "status": 422,
    "task_id": "t-bench-000001",
    "generated_at": "2026-11-25T12:00:00.000Z",
    "query_digest": "cd" * 32,
}


def _token(key: SigningKey) -> str:
    h = legacy_b64url(orjson.dumps({"alg": "ES256", "kid": key.kid, "typ": "JWT"}))
    claims = {
        "iss": "https://governance.example",
        "aud": "agtp://ans.example/agents/ans",
        "sub": "agtp://o.example/agents/orch",
        "principal": "usr-1",
        "scope": "discovery:query zone:finance",
        "exp": 1_900_000_000,
        "nbf": 1_700_000_000,
    }
    p = legacy_b64url(orjson.dumps(claims))
    return f"{h}.{p}.{legacy_b64url(legacy_sign_raw(key._private, f'{h}.{p}'.encode()))}"


# -- timing --------------------------------------------------------------------------------


def _per_call_us(fn: Callable[[], object], n: int) -> float:
    start = time.thread_time()
    for _ in range(n):
        fn()
    return (time.thread_time() - start) / n * 1e6


def _compare(
    legacy: Callable[[], object], joserfc: Callable[[], object], n: int, rounds: int
) -> dict[str, float]:
    _per_call_us(legacy, max(1, n // 10))  # warm up both (lazy key parameters, caches)
    _per_call_us(joserfc, max(1, n // 10))
    old: list[float] = []
    new: list[float] = []
    for _ in range(rounds):
        old.append(_per_call_us(legacy, n))
        new.append(_per_call_us(joserfc, n))
    before = statistics.median(old)
    after = statistics.median(new)
    return {
        "legacy_us": round(before, 2),
        "joserfc_us": round(after, 2),
        "ratio": round(after / before, 3),
    }


def _commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        )
        return out.stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=2000, help="calls per batch")
    ap.add_argument("--rounds", type=int, default=7, help="alternating batches per side")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "sign_cost.json")
    args = ap.parse_args()

    private = ec.derive_private_key(FIXED_D, ec.SECP256R1())
    key = SigningKey(private)
    trusted = TrustedKeys([key.public])
    legacy_keys = {key.kid: private.public_key()}
    payloads = {"result": canonicalize(_result(10)), "refusal": canonicalize(REFUSAL)}
    token = _token(key)

    ops: dict[str, dict[str, Any]] = {}
    for name, payload in payloads.items():
        # Wire check first: each side's signature verifies with the other side's verifier.
        new_value = signature_object(payload, key)["value"]
        old_value = legacy_signature_object(payload, private, key.kid)["value"]
        assert legacy_verify_detached(new_value, payload, legacy_keys) == key.kid
        assert verify_detached(old_value, payload, trusted) == key.kid
        assert new_value.split(".")[0] == old_value.split(".")[0], "protected header bytes"
        ops[f"sign_{name}"] = {
            "payload_bytes": len(payload),
            **_compare(
                lambda p=payload: legacy_signature_object(p, private, key.kid),
                lambda p=payload: signature_object(p, key),
                args.n,
                args.rounds,
            ),
        }
        ops[f"verify_{name}"] = {
            "payload_bytes": len(payload),
            **_compare(
                lambda v=old_value, p=payload: legacy_verify_detached(v, p, legacy_keys),
                lambda v=old_value, p=payload: verify_detached(v, p, trusted),
                args.n,
                args.rounds,
            ),
        }
    assert legacy_verify_token(token, legacy_keys) == verify_compact_jws(token, trusted).kid
    ops["verify_token"] = {
        "token_bytes": len(token),
        **_compare(
            lambda: legacy_verify_token(token, legacy_keys),
            lambda: verify_compact_jws(token, trusted),
            args.n,
            args.rounds,
        ),
    }

    report = {
        "bench": "sign_cost",
        "command": "python bench/sign_cost.py " + " ".join(sys.argv[1:]),
        "commit": _commit(),
        "date": datetime.now(UTC).date().isoformat(),
        "machine": f"{platform.machine()} {platform.python_implementation()} "
        f"{platform.python_version()}",
        "n": args.n,
        "rounds": args.rounds,
        "clock": "time.thread_time, median of rounds, microseconds per call",
        "operations": ops,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    width = max(len(k) for k in ops)
    print(f"{'operation':<{width}}  legacy_us  joserfc_us  ratio")
    for name, row in ops.items():
        print(
            f"{name:<{width}}  {row['legacy_us']:>9.1f}  {row['joserfc_us']:>10.1f}  "
            f"{row['ratio']:>5.3f}"
        )
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
