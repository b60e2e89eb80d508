"""An MCP orchestrator and three agents using ANS as their registry (seed 002).

Three agents announce themselves (signed: two EC P-256 keys, one RSA 2048)
over REST, the orchestrator looks peers up by capability (an exact
capability name, then free text through the same relevance gate as AGTP
DISCOVER), and one agent stops announcing: after its TTL it is gone.

    .venv/bin/python examples/mcp_orchestrator.py                # starts its own ANS
    .venv/bin/python examples/mcp_orchestrator.py --server URL   # an ANS with [mcp] enabled

Without ``--server`` it starts ``ans serve`` on a free loopback port with
``[mcp] enabled = true``, ``allow_list = ["*"]`` and a 3 s TTL, in a
throw-away data directory.
"""

from __future__ import annotations

import argparse
import base64
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
from ans.protocol.jcs import canonicalize
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa

ROOT = Path(__file__).resolve().parents[1]
BASE = "/mcp/v1"
CONFIG = """[rate_limit]
enabled = false
[mcp]
enabled = true
allow_list = ["*"]
ttl_seconds = 3
sweep_interval = 0.5
"""
AGENTS = [
    (
        "3cde1b52-1fc2-4f7b-8d8c-5e3e6f5c9c1d",
        "data-processor",
        "ec",
        {"task-manager": "1.4", "metrics": "2.0", "store": "0.9"},
    ),
    (
        "8a1f6c2e-5b7d-4e3a-9c1b-2d4e6f8a0b1c",
        "doc-translator",
        "rsa",
        {"translate": "translates documents between English, German and French"},
    ),
    ("c0ffee00-1234-4abc-8def-0123456789ab", "metrics-sidecar", "ec", {"metrics": "1.2"}),
]


class Agent:
    def __init__(self, agent_id: str, name: str, kind: str, caps: dict[str, str]) -> None:
        self.key: Any = (
            ec.generate_private_key(ec.SECP256R1())
            if kind == "ec"
            else rsa.generate_private_key(public_exponent=65537, key_size=2048)
        )
        pem = self.key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        self.agent = {
            "agent_id": agent_id,
            "agent_name": name,
            "capabilities": caps,
            "public_key": pem.decode(),
            "transport": {"type": "tcp", "endpoint": f"10.0.0.{len(name)}:9000"},
            "metadata": {"__os": "linux", "__arch": "amd64"},
        }

    def announcement(self) -> dict[str, Any]:
        data = canonicalize(self.agent)
        if isinstance(self.key, rsa.RSAPrivateKey):
            sig = self.key.sign(data, padding.PKCS1v15(), hashes.SHA256())
        else:
            sig = self.key.sign(data, ec.ECDSA(hashes.SHA256()))
        return {
            "protocol_version": "v1.0",
            "agent": self.agent,
            "signature": base64.b64encode(sig).decode(),
        }


def headers(scope: str, who: str) -> dict[str, str]:
    """Open auth mode: self-asserted identity headers (token mode: a bearer)."""
    return {
        "agent-id": f"agtp://orchestrator.example/agents/{who}",
        "principal-id": "orchestrator",
        "authority-scope": scope,
    }


def announce(http: httpx.Client, agent: Agent) -> dict[str, Any]:
    r = http.post(
        f"{BASE}/agents",
        json=agent.announcement(),
        headers=headers("discover:write", agent.agent["agent_name"]),
    )
    r.raise_for_status()
    body: dict[str, Any] = r.json()
    return body


def names(responses: list[dict[str, Any]]) -> str:
    """Agent names, each with how it matched a query (by name or by relevance)."""
    return (
        ", ".join(
            r["agent"]["agent_name"] + (f" ({r['match']})" if "match" in r else "")
            for r in responses
        )
        or "(none)"
    )


def run(url: str) -> int:
    agents = [Agent(*a) for a in AGENTS]
    with httpx.Client(base_url=url, timeout=10.0) as http:
        ttl = 0.0
        outcomes = set()
        for a in agents:
            body = announce(http, a)
            reg = body["registry"]
            ttl = (
                datetime.fromisoformat(reg["expires_at"]) - datetime.fromisoformat(reg["last_seen"])
            ).total_seconds()
            governed = "governed" if reg["governed"] else "not governed"
            outcomes.add(f"{body['outcome']} (tier {reg['trust_tier']}, {governed})")
        print(f"announce all three       -> {', '.join(sorted(outcomes))}")
        read = headers("discover:read", "orchestrator")
        q = {"protocol_version": "v1.0", "query": {"capability": "metrics"}}
        r = http.post(f"{BASE}/query", json=q, headers=read)
        print(f"query metrics            -> {names(r.json()['responses'])}")
        q = {
            "protocol_version": "v1.0",
            "query": {"capability": "translate a contract into German"},
        }
        r = http.post(f"{BASE}/query", json=q, headers=read)
        print(f"query 'translate a contract into German' -> {names(r.json()['responses'])}")
        r = http.get(
            f"{BASE}/agents", params={"capability": "metrics", "version": "2"}, headers=read
        )
        print(f"list metrics version 2   -> {names(r.json()['agents'])}")
        # metrics-sidecar stops announcing; the others keep their heartbeat.
        deadline = time.monotonic() + ttl + 2.0
        while time.monotonic() < deadline:
            for a in agents[:2]:
                announce(http, a)
            time.sleep(min(1.0, ttl / 3))
        r = http.get(f"{BASE}/agents", headers=read)
        gone = http.get(f"{BASE}/agents/{AGENTS[2][0]}", headers=read)
        print(
            f"{f'list {ttl:g} s later':<24} -> {names(r.json()['agents'])} "
            f"(metrics-sidecar went silent: {gone.status_code} {gone.json()['error']['code']})"
        )
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server", help="an ANS base URL with [mcp] enabled (default: start one)")
    args = ap.parse_args(argv)
    if args.server:
        return run(args.server)
    sys.path.insert(0, str(ROOT))
    from tools.launcher import start_server, stop_server

    with tempfile.TemporaryDirectory(prefix="ans-mcp-") as tmp:
        cfg = Path(tmp) / "ans.toml"
        cfg.write_text(CONFIG, encoding="utf-8")
        server = start_server(Path(tmp) / "data", "--config", str(cfg))
        try:
            return run(server.url)
        finally:
            stop_server(server)


if __name__ == "__main__":
    raise SystemExit(main())
