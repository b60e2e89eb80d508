"""The load client (bench/h2client.py, both connection engines: bench/h2raw.py's
frames and the h2 library's) in its own process against a real server: it
reports 200s and sane percentiles, the answers it samples carry verifiable
signatures, and it survives hypercorn ending connections after
``keep_alive_max_requests`` (GOAWAY -> reconnect, the request is retried)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from ans.governance.keys import TrustedKeys
from ans.governance.signing import verify_document

pytestmark = pytest.mark.integration

CLIENT = Path(__file__).resolve().parents[2] / "bench" / "h2client.py"
QUERIES = [
    {"intent": "audit Solidity smart contracts for reentrancy", "limit": 5},
    {"intent": "translate legal documents", "trust_tier_min": 3},
    {"intent": "reconcile bank statements", "governance_zone": "zone:finance", "limit": 3},
]


ENGINES = pytest.mark.parametrize("engine", ["raw", "h2"])


@ENGINES
def test_h2client_reports_200s_and_survives_connection_recycling(server_factory, tmp_path, engine):
    cfg = tmp_path / "ans.toml"
    # Small keep_alive_max_requests: hypercorn sends GOAWAY every 25 requests.
    cfg.write_text("[rate_limit]\nenabled = false\n[server]\nkeep_alive_max_requests = 25\n")
    srv = server_factory(tmp_path / "data", "--config", str(cfg))
    params = tmp_path / "queries.jsonl"
    params.write_text("".join(json.dumps(q) + "\n" for q in QUERIES))
    samples = tmp_path / "samples.jsonl"
    proc = subprocess.run(
        [sys.executable, str(CLIENT), "--url", srv.url, "--params", str(params),
         "--concurrency", "4", "--connections", "2", "--warmup", "0.2", "--duration", "1.0",
         "--sample", "3", "--sample-out", str(samples), "--engine", engine],
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["n"] > 25 and report["engine"] == engine
    assert report["statuses"] == {"200": report["n"]}
    assert report["non_200"] == {} and report["errors"] == {}
    assert 0 < report["p50_ms"] <= report["p90_ms"] <= report["p99_ms"] <= report["max_ms"]
    assert report["rps"] > 0
    # Connections were recycled under load and nothing was lost.
    assert report["reconnects"] >= 1 and report["goaways"] >= 1
    assert report["retries"] >= 1

    keys = TrustedKeys.from_jwks(httpx.get(f"{srv.url}/.well-known/jwks.json").json())
    rows = [json.loads(x) for x in samples.read_text().splitlines()]
    assert len(rows) == 3
    for row in rows:
        body = json.loads(row["body"])
        assert body["status"] == 200
        verify_document(body["result"], keys, "ans_signature")


@ENGINES
def test_h2client_counts_refusals_and_fails(server_factory, tmp_path, engine):
    """A refused request (here 422: limit out of range) is counted by status and the
    client exits non-zero: the benchmark can never report an error as speed."""
    cfg = tmp_path / "ans.toml"
    cfg.write_text("[rate_limit]\nenabled = false\n")
    srv = server_factory(tmp_path / "data", "--config", str(cfg))
    params = tmp_path / "bad.jsonl"
    params.write_text(json.dumps({"intent": "x", "limit": 100000}) + "\n")
    proc = subprocess.run(
        [sys.executable, str(CLIENT), "--url", srv.url, "--params", str(params),
         "--concurrency", "1", "--warmup", "0", "--duration", "0.3", "--post",
         "--engine", engine],
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 1
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["n"] > 0
    assert set(report["non_200"]) == {"422"} and report["non_200"]["422"] == report["n"]
    assert report["bad_samples"][0]["status"] == 422
