"""The demo catalog: 64 agents across a dozen capability areas, all three
trust tiers and six zones, signed by a demo governance key (generated in the
data directory) and registered through the same ACTIVATE path as any agent.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import structlog

from ans.governance.keys import SigningKey
from ans.governance.signing import sign_document
from ans.protocol.errors import Conflict, Gone
from ans.protocol.messages import ActivateRequest, Identity
from ans.protocol.scope import parse_authority_scope

from .service import AnsService

log = structlog.get_logger("ans.demo")

DEMO_GOVERNANCE_AGENT = "agtp://governance.demo.example/agents/platform"
DEMO_ACTIVATED_AT = "2026-01-15T09:00:00Z"
CATALOG = Path(__file__).with_name("demo_catalog.json")


def load_catalog() -> list[dict[str, Any]]:
    text = CATALOG.read_text(encoding="utf-8")
    agents: list[dict[str, Any]] = json.loads(text)["agents"]
    return agents


def demo_manifest(entry: dict[str, Any]) -> dict[str, Any]:
    """An unsigned Agent Manifest Document for one catalog entry."""
    uri = f"agtp://agtp.{entry['org_domain']}/agents/{entry['agent_label']}"
    canonical = hashlib.sha256(uri.encode()).hexdigest()
    manifest: dict[str, Any] = {
        "document_type": "agtp-manifest",
        "schema_version": "1.0",
        "manifest_uri": uri,
        "canonical_id": canonical,
        "agent_label": entry["agent_label"],
        "org_domain": entry["org_domain"],
        "governance_zone": entry["governance_zone"],
        "trust_tier": entry["trust_tier"],
        "package_format": "nomo" if entry["trust_tier"] == 1 else "agent",
        "package_integrity_hash": "sha256:" + hashlib.sha256(f"pkg:{uri}".encode()).hexdigest(),
        "lifecycle_state": "Active",
        "cert_status": "Active",
        "principal_org": entry["principal_org"],
        "activated_at": DEMO_ACTIVATED_AT,
        "behavioral_trust_score": entry["behavioral_trust_score"],
        "authority_scope_categories": entry["authority_scope_categories"],
        "supported_methods": entry["supported_methods"],
        "job_description": entry["job_description"],
        "version": "1.0.0",
        "last_updated": DEMO_ACTIVATED_AT,
    }
    if entry["trust_tier"] == 2:
        manifest["trust_warning"] = "org-label-unverified"
        manifest["trust_tier_explanation"] = "Org label not DNS-verified."
    return manifest


def demo_capabilities(entry: dict[str, Any]) -> dict[str, Any]:
    return {"supported_methods": entry["supported_methods"], **entry["capabilities"]}


def activate_demo(service: AnsService, governance_key: SigningKey) -> int:
    """Sign every demo manifest and register it through ACTIVATE."""
    identity = Identity(
        agent_id=DEMO_GOVERNANCE_AGENT,
        principal_id="demo-governance-operator",
        scope=parse_authority_scope("discovery:register activation:*"),
    )
    n = 0
    for i, entry in enumerate(load_catalog(), start=1):
        manifest = sign_document(demo_manifest(entry), governance_key, "signature")
        try:
            service.activate(
                ActivateRequest(
                    identity=identity,
                    task_id=f"demo-activate-{i}",
                    manifest=manifest,
                    capabilities=demo_capabilities(entry),
                )
            )
        except (Conflict, Gone) as exc:
            # The operator registered a newer manifest for this agent, or
            # retired it: theirs stands; the demo does not overwrite it.
            log.info("demo agent left as stored", label=entry["agent_label"], reason=exc.message)
            continue
        n += 1
    return n
