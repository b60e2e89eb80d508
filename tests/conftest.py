"""Shared fixtures: the real wordllama embedder, governance keys, a factory
for complete, signed Agent Manifest Documents, and one for in-process
AnsService instances over a real SQLite store and audit log."""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import ipaddress
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from ans.governance.keys import SigningKey
from ans.governance.signing import sign_document
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

SHARED = Path(__file__).resolve().parents[2] / "shared"
FIXED_NOW = datetime(2026, 11, 21, 12, 0, 0, tzinfo=UTC)


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    if not SHARED.is_dir():
        pytest.skip(f"../shared is absent ({SHARED}); vector tests need the workspace's shared/")
    return SHARED


@pytest.fixture(scope="session")
def embedder() -> Any:
    from ans.matcher import WordLlamaEmbedder

    return WordLlamaEmbedder()


@pytest.fixture(scope="session")
def gov_key() -> SigningKey:
    return SigningKey.generate()


def base_manifest(label: str, **overrides: Any) -> dict[str, Any]:
    org = overrides.pop("org_domain", "acme.example")
    uri = f"agtp://agtp.{org}/agents/{label}"
    manifest: dict[str, Any] = {
        "document_type": "agtp-manifest",
        "schema_version": "1.0",
        "manifest_uri": uri,
        "canonical_id": hashlib.sha256(uri.encode()).hexdigest(),
        "agent_label": label,
        "org_domain": org,
        "governance_zone": "zone:public",
        "trust_tier": 1,
        "package_format": "nomo",
        "package_integrity_hash": "sha256:" + "ab" * 32,
        "lifecycle_state": "Active",
        "cert_status": "Active",
        "principal_org": "Acme Corporation",
        "activated_at": "2026-01-15T09:00:00Z",
        "behavioral_trust_score": 0.9,
        "authority_scope_categories": ["documents:query"],
        "supported_methods": ["QUERY", "REPORT"],
        "job_description": f"The {label} agent.",
    }
    manifest.update(overrides)
    if manifest["trust_tier"] == 2:
        manifest.setdefault("trust_warning", "org-label-unverified")
        manifest.setdefault("trust_tier_explanation", "Org label not DNS-verified.")
    return manifest


@pytest.fixture
def make_manifest(gov_key: SigningKey) -> Callable[..., dict[str, Any]]:
    """make_manifest(label, key=gov_key, **fields) -> signed manifest."""

    def make(label: str, key: SigningKey | None = None, **overrides: Any) -> dict[str, Any]:
        return sign_document(base_manifest(label, **overrides), key or gov_key, "signature")

    return make


@pytest.fixture
def make_ans(embedder: Any, gov_key: SigningKey) -> Iterator[Callable[..., Any]]:
    """make_ans(config, keys=[gov_key], clock=FIXED_NOW, fixed_ids=False, load=False)
    -> an AnsService on ``config.data_dir`` (SQLite store, audit log, signing
    key there), trusting ``keys``; closed at teardown if the test did not."""
    from ans.governance.audit import AuditLog
    from ans.governance.keys import TrustedKeys

    from ans.matcher import CapabilityIndex
    from ans.service import AnsService
    from ans.store import SQLiteStore

    made: list[Any] = []

    def make(
        config: Any,
        *,
        keys: Sequence[SigningKey] | None = None,
        clock: Callable[[], datetime] = lambda: FIXED_NOW,
        fixed_ids: bool = False,
        load: bool = False,
    ) -> Any:
        data = config.data_dir
        extra: dict[str, Any] = {"new_id": lambda: "fixed"} if fixed_ids else {}
        svc = AnsService(
            config=config,
            store=SQLiteStore(data / "registry.sqlite3"),
            matcher=CapabilityIndex(embedder),
            signing_key=SigningKey.load_or_create(data / "ans-signing-key.pem"),
            governance_keys=TrustedKeys([k.public for k in (keys or [gov_key])]),
            audit=AuditLog(data / "audit.jsonl", clock),
            clock=clock,
            **extra,
        )
        if load:
            svc.load()
        made.append(svc)
        return svc

    yield make
    for svc in made:
        with contextlib.suppress(Exception):
            svc.audit.close()
        with contextlib.suppress(Exception):
            svc.store.close()


def client_cert_pem(uris: str | Sequence[str], now: dt.datetime) -> str:
    """A self-signed P-256 client certificate whose SAN URIs are ``uris`` (an
    agent id, for mTLS mode; none: no SAN), valid a day either side of ``now``,
    as PEM."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "client")])
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now - dt.timedelta(days=1))
        .not_valid_after(now + dt.timedelta(days=1))
    )
    listed = [uris] if isinstance(uris, str) else list(uris)
    if listed:
        san = x509.SubjectAlternativeName([x509.UniformResourceIdentifier(u) for u in listed])
        builder = builder.add_extension(san, critical=False)
    cert = builder.sign(key, hashes.SHA256())
    return cert.public_bytes(serialization.Encoding.PEM).decode()


def write_self_signed(directory: Path, stem: str = "") -> tuple[Path, Path]:
    """A self-signed P-256 certificate for 127.0.0.1 (also its own CA) and its
    key, written as PEM files into ``directory``: (cert path, key path)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / f"{stem}cert.pem", directory / f"{stem}key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


@pytest.fixture
def tls_cert(tmp_path: Path) -> tuple[Path, Path]:
    """A self-signed P-256 certificate for 127.0.0.1 and its key (:func:`write_self_signed`)."""
    return write_self_signed(tmp_path)


@pytest.fixture(scope="session")
def self_signed() -> Callable[[Path, str], tuple[Path, Path]]:
    """:func:`write_self_signed`, for fixtures wider than one test."""
    return write_self_signed
