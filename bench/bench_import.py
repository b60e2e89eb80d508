"""Benchmark: ``ans import`` throughput, cold start with and without the
index snapshot, and server RSS, on a generated signed catalog.

    OPENBLAS_NUM_THREADS=1 .venv/bin/python bench/bench_import.py --agents 10000

Generates N agents (signed before any timing; cached under bench/cache/),
imports them into a fresh data directory with ``ans import`` (timed, as a
subprocess), starts ``ans serve`` from the snapshot, kills it (-9), deletes
the snapshot and starts it again (full rebuild). Prints the figures and
writes bench/results/import-N.json. The server runs with the rate limit off.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ans.governance.keys import SigningKey  # noqa: E402
from ans.governance.signing import sign_document  # noqa: E402

from tools.launcher import start_server  # noqa: E402

VERBS = [
    "Audits",
    "Translates",
    "Summarizes",
    "Classifies",
    "Forecasts",
    "Reconciles",
    "Monitors",
    "Drafts",
    "Extracts",
    "Validates",
    "Schedules",
    "Optimizes",
]
OBJECTS = [
    "Solidity smart contracts",
    "legal contracts",
    "clinical notes",
    "invoices",
    "shipping manifests",
    "sales pipelines",
    "server logs",
    "tax filings",
    "research papers",
    "customer tickets",
    "satellite images",
    "energy usage",
]
QUALIFIERS = [
    "for reentrancy bugs",
    "between German and English",
    "into ICD-10 codes",
    "against purchase orders",
    "for anomalies",
    "for compliance gaps",
    "with citations",
    "by priority",
    "for fraud signals",
    "weekly",
]
ZONES = ["zone:public", "zone:finance", "zone:legal", "zone:partner", "zone:research"]


def agent(i: int, rnd: random.Random) -> tuple[dict[str, Any], dict[str, Any]]:
    org = f"org{i % 997}.example"
    label = f"agent-{i:07d}"
    uri = f"agtp://agtp.{org}/agents/{label}"
    tier = rnd.choice([1, 2, 2, 3])
    desc = f"{rnd.choice(VERBS)} {rnd.choice(OBJECTS)} {rnd.choice(QUALIFIERS)}."
    m: dict[str, Any] = {
        "document_type": "agtp-manifest",
        "schema_version": "1.0",
        "manifest_uri": uri,
        "canonical_id": hashlib.sha256(uri.encode()).hexdigest(),
        "agent_label": label,
        "org_domain": org,
        "governance_zone": rnd.choice(ZONES),
        "trust_tier": tier,
        "package_format": "nomo",
        "package_integrity_hash": "sha256:" + "ab" * 32,
        "lifecycle_state": "Active",
        "cert_status": "Active",
        "principal_org": "Bench Org",
        "activated_at": "2026-01-15T09:00:00Z",
        "behavioral_trust_score": round(rnd.uniform(0.5, 1.0), 2),
        "authority_scope_categories": ["documents:query"],
        "supported_methods": ["QUERY", "REPORT"],
        "job_description": desc,
    }
    if tier == 2:
        m["trust_warning"] = "org-label-unverified"
        m["trust_tier_explanation"] = "Org label not DNS-verified."
    caps = {
        "supported_methods": ["QUERY", "REPORT"],
        "modalities": ["text"],
        "tags": [rnd.choice(OBJECTS).split()[-1]],
        "examples": [
            {"id": f"ex-{k}", "text": f"{rnd.choice(VERBS)} these {rnd.choice(OBJECTS)}"}
            for k in range(3)
        ],
    }
    return m, caps


def generate(n: int, out: Path, key: SigningKey) -> None:
    rnd = random.Random(n)
    with open(out, "wb") as fh:
        for i in range(n):
            m, caps = agent(i, rnd)
            fh.write(
                orjson.dumps({"manifest": sign_document(m, key, "signature"), "capabilities": caps})
                + b"\n"
            )


def rss_kb(pid: int) -> tuple[int, int]:
    status = Path(f"/proc/{pid}/status").read_text()
    vals = {
        ln.split(":")[0]: int(ln.split()[1])
        for ln in status.splitlines()
        if ln.startswith(("VmRSS", "VmHWM"))
    }
    return vals.get("VmRSS", 0), vals.get("VmHWM", 0)


def timed_start(data: Path, cfg: Path, jwks: Path) -> tuple[float, Any, dict[str, Any]]:
    t0 = time.perf_counter()
    srv = start_server(data, "--config", str(cfg), "--governance-jwks", str(jwks))
    took = time.perf_counter() - t0
    import httpx

    health = httpx.get(srv.url + "/healthz").json()
    return took, srv, health


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--agents", type=int, default=10_000)
    ap.add_argument("--workers", type=int)
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()
    cache = ROOT / "bench" / "cache"
    cache.mkdir(parents=True, exist_ok=True)
    keyfile, jwks = cache / "bench-gov.pem", cache / "bench-gov.jwks.json"
    key = SigningKey.load_or_create(keyfile)
    jwks.write_text(json.dumps({"keys": [key.public.jwk()]}))
    catalog = cache / f"catalog-{a.agents}.jsonl"
    if not catalog.exists():
        t = time.perf_counter()
        generate(a.agents, catalog, key)
        print(f"generated {a.agents} signed agents in {time.perf_counter() - t:.1f} s (not timed)")
    work = Path(tempfile.mkdtemp(prefix="ans-bench-import-"))
    data = work / "data"
    cfg = work / "ans.toml"
    cfg.write_text("[rate_limit]\nenabled = false\n")
    ans = Path(sys.executable).with_name("ans")
    cmd = [
        str(ans),
        "import",
        str(catalog),
        "--data-dir",
        str(data),
        "--config",
        str(cfg),
        "--governance-jwks",
        str(jwks),
    ]
    if a.workers:
        cmd += ["--workers", str(a.workers)]
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    import_s = time.perf_counter() - t0
    print(out.stdout.strip(), out.stderr.strip()[-500:], sep="\n")
    if out.returncode != 0:
        return 1
    res: dict[str, Any] = {
        "agents": a.agents,
        "import_s": round(import_s, 2),
        "import_agents_per_s": round(a.agents / import_s, 1),
        "machine": f"{os.cpu_count()} cores",
    }
    took, srv, health = timed_start(data, cfg, jwks)
    res["cold_start_snapshot_s"] = round(took, 2)
    res["health_snapshot"] = health
    res["rss_kb"], res["peak_rss_kb"] = rss_kb(srv.proc.pid)
    srv.proc.kill()
    srv.proc.wait()
    shutil.rmtree(data / "index", ignore_errors=True)
    took, srv, health = timed_start(data, cfg, jwks)
    res["cold_start_rebuild_s"] = round(took, 2)
    res["health_rebuild"] = health
    res["rebuild_peak_rss_kb"] = rss_kb(srv.proc.pid)[1]
    srv.proc.kill()
    srv.proc.wait()
    print(json.dumps(res, indent=2))
    outdir = ROOT / "bench" / "results"
    outdir.mkdir(parents=True, exist_ok=True)
    (outdir / f"import-{a.agents}.json").write_text(json.dumps(res, indent=2) + "\n")
    if not a.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
