"""Stand-in synthetic catalog for the load benchmark, used only while
``ans.synth`` has not landed (bench/load.py prefers ``ans.synth``).

    python bench/_standin_catalog.py --agents 10000 --seed 1 --out DIR

Same formats as ``ans.synth``: ``DIR/agents.jsonl`` (ACTIVATE parameters,
``{"manifest", "capabilities"}`` per line, manifests signed ES256 by the
catalog's governance key), ``DIR/queries.jsonl`` (DISCOVER parameter
objects), ``DIR/governance.jwks.json`` (the public key) and
``DIR/governance.key.json`` (the private key, PEM inside JSON). Library API:
``load_or_create_key(dir)`` and ``unique_agent(i, key) -> (params, intent)``.
Manifests are built like tests/conftest.py ``base_manifest``; text comes from
small vocabularies (domain x task x object x tool), 3 example tasks each,
mixed tiers (1-3), behavioral scores and zones. Deterministic for a seed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

from ans.governance.keys import SigningKey
from ans.governance.signing import sign_document

ZONES = ["zone:public", "zone:public", "zone:partner", "zone:internal", "zone:finance",
         "zone:healthcare"]
DOMAINS: dict[str, dict[str, list[str]]] = {
    "security": {
        "verbs": ["audit", "scan", "triage", "harden", "review"],
        "objects": ["Solidity smart contracts", "container images", "web applications",
                    "IAM policies", "firewall rules", "dependency manifests"],
        "tools": ["slither", "trivy", "burp", "semgrep", "nmap"],
        "scopes": ["audit:read", "code:analyze"],
    },
    "finance": {
        "verbs": ["reconcile", "forecast", "categorize", "audit", "summarize"],
        "objects": ["bank statements", "invoices", "expense reports", "ledger entries",
                    "quarterly earnings", "payroll runs"],
        "tools": ["quickbooks", "xero", "sap", "excel"],
        "scopes": ["finance:read", "ledger:write"],
    },
    "health": {
        "verbs": ["code", "triage", "summarize", "schedule", "transcribe"],
        "objects": ["discharge summaries", "radiology reports", "patient intake forms",
                    "clinical trial protocols", "lab results"],
        "tools": ["fhir", "hl7", "icd10"],
        "scopes": ["phi:read", "records:query"],
    },
    "language": {
        "verbs": ["translate", "proofread", "localize", "summarize", "transcribe"],
        "objects": ["legal contracts", "product manuals", "marketing copy",
                    "subtitle files", "customer emails", "technical documentation"],
        "tools": ["deepl", "xliff", "whisper"],
        "scopes": ["documents:query", "documents:write"],
    },
    "data": {
        "verbs": ["clean", "join", "visualize", "profile", "deduplicate", "migrate"],
        "objects": ["CSV exports", "SQL tables", "event logs", "CRM records",
                    "sensor time series", "parquet datasets"],
        "tools": ["pandas", "dbt", "spark", "duckdb", "superset"],
        "scopes": ["data:read", "data:write"],
    },
    "devops": {
        "verbs": ["deploy", "monitor", "roll back", "scale", "debug"],
        "objects": ["Kubernetes workloads", "Terraform stacks", "CI pipelines",
                    "database replicas", "CDN configurations"],
        "tools": ["kubectl", "terraform", "github-actions", "prometheus", "helm"],
        "scopes": ["infra:operate", "deploy:write"],
    },
    "travel": {
        "verbs": ["book", "compare", "rebook", "plan", "cancel"],
        "objects": ["business flights", "hotel stays", "rail journeys", "rental cars",
                    "conference trips"],
        "tools": ["amadeus", "sabre", "ndc"],
        "scopes": ["travel:book", "calendar:read"],
    },
    "legal": {
        "verbs": ["review", "draft", "redline", "compare", "summarize"],
        "objects": ["NDAs", "employment agreements", "supplier contracts",
                    "privacy policies", "court filings"],
        "tools": ["docusign", "clause-library"],
        "scopes": ["documents:query", "legal:review"],
    },
    "support": {
        "verbs": ["answer", "route", "escalate", "summarize", "tag"],
        "objects": ["customer tickets", "chat transcripts", "refund requests",
                    "product reviews", "bug reports"],
        "tools": ["zendesk", "intercom", "jira"],
        "scopes": ["tickets:read", "tickets:write"],
    },
    "research": {
        "verbs": ["summarize", "search", "cite", "compare", "extract"],
        "objects": ["research papers", "patent filings", "market reports",
                    "survey results", "preprints"],
        "tools": ["arxiv", "pubmed", "scholar"],
        "scopes": ["web:fetch", "documents:query"],
    },
}
QUALIFIERS = ["for small teams", "at enterprise scale", "under strict compliance rules",
              "in real time", "in batch overnight", "across regions", "with human review",
              "for regulated industries", "with audit trails", "in several languages"]
ORG_WORDS = ["acme", "northwind", "contoso", "globex", "initech", "umbrella", "stark",
             "wayne", "tyrell", "cyberdyne", "hooli", "vandelay", "wonka", "soylent"]
METHODS = ["QUERY", "ANALYZE", "REPORT", "SUMMARIZE", "EXECUTE", "VALIDATE", "FETCH", "BOOK"]
# Rare words for unique agents: their intents must find exactly them.
RARE_A = ["heliostat", "glacier", "obsidian", "marimba", "quasar", "saffron", "tundra",
          "zeppelin", "lichen", "basalt", "falconry", "origami", "nebula", "cobalt", "walrus",
          "sextant", "juniper", "magnolia", "tapestry", "volcano"]
RARE_B = ["calibration", "cartography", "apiculture", "embroidery", "horology", "luthiery",
          "taxidermy", "cryptozoology", "speleology", "vexillology", "oenology", "campanology",
          "philately", "numismatics", "topiary", "glassblowing", "beekeeping", "falconry",
          "bookbinding", "lacquerware"]
KEY_FILE = "governance.key.json"
JWKS_FILE = "governance.jwks.json"
ACTIVATED_AT = "2026-01-15T09:00:00Z"


def load_or_create_key(directory: Path) -> SigningKey:
    """The catalog's governance key (``governance.key.json``), made on first use."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / KEY_FILE
    if path.is_file():
        doc = json.loads(path.read_text(encoding="utf-8"))
        return SigningKey.from_pem(doc["private_pem"].encode())
    key = SigningKey.generate()
    path.write_text(
        json.dumps({"kid": key.kid, "private_pem": key.private_pem().decode()}),
        encoding="utf-8",
    )
    path.chmod(0o600)
    (directory / JWKS_FILE).write_text(json.dumps({"keys": [key.public.jwk()]}), encoding="utf-8")
    return key


def _manifest(label: str, org: str, rng: random.Random, **fields: Any) -> dict[str, Any]:
    uri = f"agtp://agtp.{org}/agents/{label}"
    tier = fields.pop("trust_tier", rng.choices([1, 2, 3], weights=[5, 4, 1])[0])
    manifest: dict[str, Any] = {
        "document_type": "agtp-manifest",
        "schema_version": "1.0",
        "manifest_uri": uri,
        "canonical_id": hashlib.sha256(uri.encode()).hexdigest(),
        "agent_label": label,
        "org_domain": org,
        "governance_zone": rng.choice(ZONES),
        "trust_tier": tier,
        "package_format": "nomo" if tier == 1 else "agent",
        "package_integrity_hash": "sha256:" + hashlib.sha256(f"pkg:{uri}".encode()).hexdigest(),
        "lifecycle_state": "Active",
        "cert_status": "Active",
        "principal_org": f"{org.split('.')[0].title()} Ltd",
        "activated_at": ACTIVATED_AT,
        "behavioral_trust_score": round(rng.uniform(0.55, 0.99), 2),
        "authority_scope_categories": [],
        "supported_methods": sorted(rng.sample(METHODS, 3)),
        "job_description": "",
        "version": "1.0.0",
        "last_updated": ACTIVATED_AT,
    }
    manifest.update(fields)
    if manifest["trust_tier"] == 2:
        manifest["trust_warning"] = "org-label-unverified"
        manifest["trust_tier_explanation"] = "Org label not DNS-verified."
    return manifest


def agent(i: int, seed: int, key: SigningKey) -> dict[str, Any]:
    """ACTIVATE parameters for catalog agent ``i``."""
    rng = random.Random(f"{seed}:{i}")
    dname = rng.choice(sorted(DOMAINS))
    d = DOMAINS[dname]
    verbs = rng.sample(d["verbs"], 3)
    objects = rng.sample(d["objects"], 3)
    qual = rng.choice(QUALIFIERS)
    org = f"{rng.choice(ORG_WORDS)}-{dname}-{i % 997}.example"
    label = f"{dname}-{verbs[0].replace(' ', '-')}-{i}"
    job = (
        f"{verbs[0].capitalize()}s {objects[0]} and {objects[1]} {qual}. "
        f"Also helps {verbs[1]} {objects[2]}."
    )
    manifest = _manifest(
        label, org, rng,
        authority_scope_categories=d["scopes"],
        job_description=job,
    )
    examples = [
        {"id": f"ex-{k + 1}", "text": f"{verbs[k].capitalize()} these {objects[k]} {qual}."}
        for k in range(3)
    ]
    caps = {
        "supported_methods": manifest["supported_methods"],
        "modalities": ["text"],
        "tools": rng.sample(d["tools"], min(2, len(d["tools"]))),
        "zones_accepted": [manifest["governance_zone"]],
        "tags": [dname, verbs[0]],
        "examples": examples,
    }
    return {"manifest": sign_document(manifest, key, "signature"), "capabilities": caps}


def query(j: int, seed: int) -> dict[str, Any]:
    rng = random.Random(f"q{seed}:{j}")
    d = DOMAINS[rng.choice(sorted(DOMAINS))]
    q: dict[str, Any] = {
        "intent": f"{rng.choice(d['verbs'])} {rng.choice(d['objects'])} {rng.choice(QUALIFIERS)}",
        "limit": rng.choice([5, 10, 10, 20]),
    }
    r = rng.random()
    if r < 0.2:
        q["trust_tier_min"] = 1
    elif r < 0.3:
        q["trust_tier_min"] = 3
    if rng.random() < 0.3:
        q["behavioral_trust_min"] = round(rng.uniform(0.6, 0.9), 2)
    if rng.random() < 0.2:
        q["governance_zone"] = rng.choice(ZONES[2:])
    return q


def unique_agent(i: int, key: SigningKey) -> tuple[dict[str, Any], str]:
    """A distinctive agent (tier 1, high score, rare words) and an intent that finds it."""
    rng = random.Random(f"unique:{i}")
    a, b = RARE_A[i % len(RARE_A)], RARE_B[(i // len(RARE_A)) % len(RARE_B)]
    intent = f"{a} {b} specialist number {i}: {a} {b} consulting"
    manifest = _manifest(
        f"unique-{a}-{b}-{i}",
        f"unique-{i}.example",
        rng,
        trust_tier=1,
        behavioral_trust_score=0.99,
        governance_zone="zone:public",
        authority_scope_categories=["documents:query"],
        job_description=f"{a.capitalize()} {b} specialist number {i}. {a} {b} consulting.",
    )
    caps = {
        "supported_methods": manifest["supported_methods"],
        "modalities": ["text"],
        "tools": [a],
        "zones_accepted": ["zone:public"],
        "tags": [a, b],
        "examples": [{"id": "ex-1", "text": intent}],
    }
    return {"manifest": sign_document(manifest, key, "signature"), "capabilities": caps}, intent


def write_catalog(n: int, seed: int, out: Path, n_queries: int = 1000) -> None:
    out.mkdir(parents=True, exist_ok=True)
    key = load_or_create_key(out)
    t0 = time.perf_counter()
    tmp = out / "agents.jsonl.tmp"
    with tmp.open("w", encoding="utf-8") as fh:
        for i in range(n):
            fh.write(json.dumps(agent(i, seed, key), separators=(",", ":")) + "\n")
            if i and i % 10000 == 0:
                print(f"  stand-in catalog: {i}/{n} agents", file=sys.stderr, flush=True)
    tmp.rename(out / "agents.jsonl")
    with (out / "queries.jsonl").open("w", encoding="utf-8") as fh:
        for j in range(n_queries):
            fh.write(json.dumps(query(j, seed), separators=(",", ":")) + "\n")
    print(f"stand-in catalog: {n} agents in {time.perf_counter() - t0:.1f} s -> {out}",
          file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--agents", type=int, required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    write_catalog(args.agents, args.seed, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
