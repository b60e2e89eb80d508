"""Shared fixtures: the real wordllama embedder, governance keys, and a
factory for complete, signed Agent Manifest Documents."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from ans.governance.keys import SigningKey
from ans.governance.signing import sign_document

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
