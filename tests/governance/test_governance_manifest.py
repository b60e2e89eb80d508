"""Agent Manifest Document validation and governance-signature verification,
and DESCRIBE Capability Document validation (``ans.governance.manifest``)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from ans.governance.keys import SigningKey, TrustedKeys
from ans.governance.manifest import (
    REQUIRED_FIELDS,
    VerifiedManifest,
    validate_capabilities,
    validate_manifest_fields,
    verify_manifest,
)
from ans.governance.signing import sign_document
from ans.protocol.errors import (
    AgentNotActive,
    InvalidCapabilities,
    InvalidManifest,
    SignatureInvalid,
    UnknownSigningKey,
)


@pytest.fixture(scope="module")
def gov_key() -> SigningKey:
    return SigningKey.generate()


@pytest.fixture(scope="module")
def trusted(gov_key: SigningKey) -> TrustedKeys:
    return TrustedKeys([gov_key.public])


def unsigned_manifest(**overrides: Any) -> dict[str, Any]:
    manifest: dict[str, Any] = {
        "document_type": "agtp-manifest",
        "schema_version": "1.0",
        "manifest_uri": "agtp://agtp.acme.example/agents/auditor",
        "canonical_id": "acme.example:auditor-01",
        "agent_label": "auditor",
        "org_domain": "acme.example",
        "governance_zone": "zone:finance",
        "trust_tier": 1,
        "package_format": "nomo",
        "package_integrity_hash": "sha256:" + "ab" * 32,
        "lifecycle_state": "Active",
        "cert_status": "Active",
        "principal_org": "Acme Corporation",
        "activated_at": "2026-01-15T09:00:00Z",
        "behavioral_trust_score": 0.9,
        "authority_scope_categories": ["documents:query", "audit:*"],
        "supported_methods": ["QUERY", "REPORT"],
        "job_description": "Audits Solidity smart contracts.",
    }
    manifest.update(overrides)
    return manifest


def signed(key: SigningKey, **overrides: Any) -> dict[str, Any]:
    return sign_document(unsigned_manifest(**overrides), key, "signature")


def test_required_fields_cover_the_fixture() -> None:
    # the fixture plus the signature is exactly the required set
    assert set(unsigned_manifest()) | {"signature"} == set(REQUIRED_FIELDS)


def test_valid_manifest_verifies(gov_key: SigningKey, trusted: TrustedKeys) -> None:
    manifest = signed(gov_key)
    result = verify_manifest(manifest, trusted)
    assert isinstance(result, VerifiedManifest)
    assert result.signer_kid == gov_key.kid
    assert result.manifest is manifest


def test_unknown_fields_are_kept_and_signed(gov_key: SigningKey, trusted: TrustedKeys) -> None:
    manifest = signed(gov_key, x_vendor={"note": "kept"})
    assert verify_manifest(manifest, trusted).manifest["x_vendor"] == {"note": "kept"}


@pytest.mark.parametrize("field", list(REQUIRED_FIELDS))
def test_missing_required_field(gov_key: SigningKey, trusted: TrustedKeys, field: str) -> None:
    if field == "signature":
        manifest = unsigned_manifest()  # never signed: the signature is what is missing
    else:
        manifest = unsigned_manifest()
        del manifest[field]
        manifest = sign_document(manifest, gov_key, "signature")  # re-sign without it
    with pytest.raises(InvalidManifest) as info:
        verify_manifest(manifest, trusted)
    err = info.value
    assert err.code == "manifest_missing_field"
    assert err.status == 422
    assert repr(field) in err.message


WRONG_TYPES = [
    ("document_type", "manifest"),
    ("schema_version", ""),
    ("schema_version", 1),
    ("manifest_uri", "https://acme.example/agents/auditor"),
    ("canonical_id", "has space"),
    ("canonical_id", 5),
    ("agent_label", "Auditor"),
    ("agent_label", "-auditor"),
    ("org_domain", "Acme.Example"),
    ("org_domain", "acme example"),
    ("governance_zone", "finance"),
    ("trust_tier", "1"),
    ("trust_tier", True),
    ("trust_tier", 4),
    ("trust_tier", 1.0),
    ("package_format", None),
    ("package_integrity_hash", "x" * 257),
    ("lifecycle_state", ""),
    ("cert_status", ["Active"]),
    ("principal_org", 42),
    ("activated_at", "yesterday"),
    ("activated_at", 1767225600),
    ("behavioral_trust_score", 1.5),
    ("behavioral_trust_score", -0.01),
    ("behavioral_trust_score", True),
    ("behavioral_trust_score", "0.9"),
    ("authority_scope_categories", ["Documents:Query"]),
    ("authority_scope_categories", "documents:query"),
    ("supported_methods", ["query"]),
    ("supported_methods", "QUERY"),
    ("job_description", ""),
    ("job_description", "x" * 4001),
    ("signature", "not-an-object"),
]


@pytest.mark.parametrize(
    ("field", "value"), WRONG_TYPES, ids=[f"{f}={str(v)[:16]!r}" for f, v in WRONG_TYPES]
)
def test_wrong_field_type(
    gov_key: SigningKey, trusted: TrustedKeys, field: str, value: Any
) -> None:
    if field == "signature":
        manifest = {**unsigned_manifest(), "signature": value}
    else:
        manifest = signed(gov_key, **{field: value})
    with pytest.raises(InvalidManifest) as info:
        verify_manifest(manifest, trusted)
    assert info.value.code == "manifest_field_type"
    assert repr(field) in info.value.message


@pytest.mark.parametrize(
    ("field", "value"),
    [("version", ""), ("version", 3), ("last_updated", "not a date")],
)
def test_malformed_optional_field(
    gov_key: SigningKey, trusted: TrustedKeys, field: str, value: Any
) -> None:
    with pytest.raises(InvalidManifest) as info:
        verify_manifest(signed(gov_key, **{field: value}), trusted)
    assert info.value.code == "manifest_field_type"


def test_tier2_requires_trust_warning(gov_key: SigningKey, trusted: TrustedKeys) -> None:
    manifest = signed(gov_key, trust_tier=2, trust_tier_explanation="Org label not verified.")
    with pytest.raises(InvalidManifest) as info:
        verify_manifest(manifest, trusted)
    assert info.value.code == "manifest_missing_field"
    assert "'trust_warning'" in info.value.message


def test_tier2_requires_explanation(gov_key: SigningKey, trusted: TrustedKeys) -> None:
    manifest = signed(gov_key, trust_tier=2, trust_warning="org-label-unverified")
    with pytest.raises(InvalidManifest) as info:
        verify_manifest(manifest, trusted)
    assert info.value.code == "manifest_missing_field"
    assert "'trust_tier_explanation'" in info.value.message


def test_tier2_with_both_fields_verifies(gov_key: SigningKey, trusted: TrustedKeys) -> None:
    manifest = signed(
        gov_key,
        trust_tier=2,
        trust_warning="org-label-unverified",
        trust_tier_explanation="Org label not verified.",
    )
    assert verify_manifest(manifest, trusted).signer_kid == gov_key.kid


@pytest.mark.parametrize("state", ["Suspended", "Revoked", "Deprecated", "active"])
def test_lifecycle_not_active(gov_key: SigningKey, trusted: TrustedKeys, state: str) -> None:
    with pytest.raises(AgentNotActive) as info:
        verify_manifest(signed(gov_key, lifecycle_state=state), trusted)
    assert info.value.code == "lifecycle_not_active"
    assert info.value.status == 422


def test_signature_checked_before_lifecycle(gov_key: SigningKey, trusted: TrustedKeys) -> None:
    # an unsigned-by-us Suspended manifest reports the signature, not the state
    stranger = SigningKey.generate()
    with pytest.raises(UnknownSigningKey):
        verify_manifest(signed(stranger, lifecycle_state="Suspended"), trusted)


def test_untrusted_signer(trusted: TrustedKeys) -> None:
    with pytest.raises(UnknownSigningKey) as info:
        verify_manifest(signed(SigningKey.generate()), trusted)
    assert info.value.code == "unknown_signing_key"
    assert info.value.status == 401


def test_edited_after_signing(gov_key: SigningKey, trusted: TrustedKeys) -> None:
    manifest = signed(gov_key)
    manifest["behavioral_trust_score"] = 0.99
    with pytest.raises(SignatureInvalid) as info:
        verify_manifest(manifest, trusted)
    assert info.value.code == "signature_invalid"


def test_lifecycle_edited_to_active_after_signing(
    gov_key: SigningKey, trusted: TrustedKeys
) -> None:
    manifest = signed(gov_key, lifecycle_state="Suspended")
    manifest["lifecycle_state"] = "Active"
    with pytest.raises(SignatureInvalid):
        verify_manifest(manifest, trusted)


def test_validate_fields_ignores_signature_validity() -> None:
    # field validation alone does not verify anything cryptographic
    validate_manifest_fields({**unsigned_manifest(), "signature": {}})


# -- Capability Document --------------------------------------------------------------------

GOOD_CAPS: dict[str, Any] = {
    "supported_methods": ["QUERY", "REPORT"],
    "modalities": ["text", "application/json"],
    "tools": ["slither", {"name": "mythril", "description": "symbolic execution"}],
    "zones_accepted": ["zone:finance", "zone:public"],
    "version": "2.1.0",
    "tags": ["solidity", "security"],
    "required_scope": "documents:query audit:*",
    "examples": [
        {"id": "ex-a", "text": "audit this ERC-20 contract"},
        {"text": "find reentrancy bugs"},
    ],
}


def test_good_capabilities_pass() -> None:
    validate_capabilities(GOOD_CAPS)
    validate_capabilities({})


def _with(**changes: Any) -> dict[str, Any]:
    caps = copy.deepcopy(GOOD_CAPS)
    caps.update(changes)
    return caps


BAD_CAPS = {
    "example-without-text": _with(examples=[{"id": "a"}]),
    "example-empty-text": _with(examples=[{"text": ""}]),
    "example-not-object": _with(examples=["audit this"]),
    "duplicate-example-ids": _with(examples=[{"id": "a", "text": "x"}, {"id": "a", "text": "y"}]),
    "explicit-id-clashes-with-default": _with(
        examples=[{"id": "ex-2", "text": "x"}, {"text": "y"}]
    ),
    "examples-not-list": _with(examples={"text": "x"}),
    "zone-without-prefix": _with(zones_accepted=["finance"]),
    "tools-not-list": _with(tools="slither"),
    "tool-object-without-name": _with(tools=[{"description": "d"}]),
    "lowercase-method": _with(supported_methods=["query"]),
    "bad-required-scope": _with(required_scope="Documents:Query"),
    "required-scope-not-string": _with(required_scope=["documents:query"]),
    "version-not-string": _with(version=2),
    "tags-not-strings": _with(tags=[1, 2]),
}


@pytest.mark.parametrize("caps", list(BAD_CAPS.values()), ids=list(BAD_CAPS))
def test_bad_capabilities(caps: dict[str, Any]) -> None:
    with pytest.raises(InvalidCapabilities) as info:
        validate_capabilities(caps)
    assert info.value.status == 422
    assert info.value.code == "invalid_capabilities"
