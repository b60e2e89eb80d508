"""The deploy topology without Docker (issue 26.5), started by its own script
``deploy/topology.py`` exactly as a user starts it: two ``ans serve --workers
2`` replicas over a fresh PostgreSQL schema and a peer ANS with its own SQLite
catalog, federated from the replicas. The tests run in order on one
topology: an ACTIVATE on replica 1 is served by replica 2; a REVOKE on
replica 2 is honoured by replica 1 once its 200 is in hand; a DISCOVER that
federates returns the peer's agent in a result re-signed by the registry key
both replicas publish; kill -9 of replica 1 in an ACTIVATE burst leaves
replica 2 answering with every acknowledged write; the script's SIGTERM
leaves no process, schema or directory behind."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from ans.governance.keys import SigningKey, TrustedKeys
from ans.governance.lifecycle import make_event
from ans.governance.signing import verify_document

from ans.demo import demo_manifest
from tools import pgtest

pytestmark = pytest.mark.integration

SCRIPT = Path(__file__).resolve().parents[2] / "deploy" / "topology.py"
PEER_CATALOG = SCRIPT.with_name("peer-catalog.json")
CAPS = {"supported_methods": ["QUERY"], "modalities": ["text"], "tags": ["smart-contracts"]}
JOB = "Audits Solidity smart contracts for reentrancy and overflow bugs."
INTENT = "audit smart contracts for security bugs"
SHIPPING = "forecast container port congestion and berth waiting times"


@dataclass
class Topo:
    proc: subprocess.Popen[str]
    output: list[str]
    info: dict[str, Any]
    key: SigningKey

    @property
    def r1(self) -> str:
        return str(self.info["replicas"][0]["url"])

    @property
    def r2(self) -> str:
        return str(self.info["replicas"][1]["url"])

    def headers(self, scope: str) -> dict[str, str]:
        return {
            "agent-id": self.info["governance_agent_id"],
            "principal-id": "topology-test",
            "authority-scope": scope,
            "content-type": "application/agtp+json",
        }


def members(pgid: int) -> list[int]:
    """Live processes of process group ``pgid``."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] != "Z" and int(fields[2]) == pgid:
                out.append(int(entry.name))
    return out


def start_script(*args: str) -> tuple[subprocess.Popen[str], list[str], dict[str, Any]]:
    """Run deploy/topology.py ARGS until its JSON line: (process, output, endpoints)."""
    proc = subprocess.Popen(
        [
            sys.executable,
            str(SCRIPT),
            "--port",
            "0",
            "--peer-port",
            "0",
            "--json",
            "--pg",
            pgtest.PG_URL,
            *args,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    output: list[str] = []

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            output.append(line)
            lines.put(line)

    threading.Thread(target=pump, daemon=True).start()
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            line = lines.get(timeout=0.5)
        except queue.Empty:
            continue
        if line.startswith("{"):
            return proc, output, json.loads(line)
    proc.kill()
    pytest.fail("deploy/topology.py did not start:\n" + "".join(output[-60:]))


def cleanup(proc: subprocess.Popen[str], info: dict[str, Any]) -> None:
    """Whatever a failed test left: the script, its nodes, its schema."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
    for node in [*info["replicas"], info["peer"]]:
        for pid in members(node["pid"]):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    if info.get("schema"):
        pgtest.drop_schema(info["schema"])


def need_postgres() -> None:
    reason = pgtest.unreachable()
    if reason is not None:
        pytest.skip(reason)


@pytest.fixture(scope="module")
def topo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Topo]:
    need_postgres()
    cfg = tmp_path_factory.mktemp("topology-config") / "ans.toml"
    # The burst below floods on purpose; a peer slowed by a busy CI machine is
    # still a peer that answers (the first federated DISCOVER also fetches its key).
    cfg.write_text(
        "[rate_limit]\nenabled = false\n[federation]\npeer_timeout = 15.0\ndeadline = 20.0\n"
    )
    proc, output, info = start_script("--config", str(cfg))
    key = SigningKey.from_pem(Path(info["governance_key"]).read_bytes())
    try:
        yield Topo(proc, output, info, key)
    finally:
        cleanup(proc, info)


def agtp(
    c: httpx.Client, t: Topo, method: str, params: dict[str, Any], scope: str
) -> httpx.Response:
    body = orjson.dumps({"method": method, "task_id": "task-topology", "parameters": params})
    return c.request(method, "/", headers=t.headers(scope), content=body)


def client(url: str) -> httpx.Client:
    return httpx.Client(base_url=url, http1=False, http2=True, timeout=30)


def discover(t: Topo, url: str, intent: str = INTENT, limit: int = 20) -> dict[str, Any]:
    with client(url) as c:  # a new connection: another worker, as the kernel spreads them
        r = agtp(c, t, "DISCOVER", {"intent": intent, "limit": limit}, "discovery:query")
    assert r.status_code == 200, r.text
    result: dict[str, Any] = r.json()["result"]
    return result


def ids(result: dict[str, Any]) -> set[str]:
    return {x["canonical_id"] for x in result["results"]}


def activate(t: Topo, url: str, m: dict[str, Any]) -> None:
    with client(url) as c:
        r = agtp(c, t, "ACTIVATE", {"manifest": m, "capabilities": CAPS}, "discovery:register")
    assert r.status_code == 200, r.text


def test_activate_on_replica_1_is_served_by_replica_2(
    topo: Topo, make_manifest: Callable[..., dict[str, Any]]
) -> None:
    m = make_manifest("topo-auditor", topo.key, org_domain="chain.example", job_description=JOB)
    activate(topo, topo.r1, m)
    for _ in range(4):  # each on a new connection, so both workers of replica 2 answer
        assert m["canonical_id"] in ids(discover(topo, topo.r2))
    with client(topo.r2) as c:
        r = agtp(c, topo, "DESCRIBE", {"canonical_id": m["canonical_id"]}, "discovery:query")
    assert r.status_code == 200, r.text


def test_revoke_on_replica_2_is_never_served_by_replica_1_after_its_200(
    topo: Topo, make_manifest: Callable[..., dict[str, Any]]
) -> None:
    m = make_manifest("topo-revoked", topo.key, org_domain="chain.example", job_description=JOB)
    activate(topo, topo.r1, m)
    cid = m["canonical_id"]
    assert cid in ids(discover(topo, topo.r1))  # else the check below proves nothing
    event = make_event(
        "REVOKE", cid, topo.key, datetime.now(UTC), event_id=f"evt-{uuid.uuid4().hex}"
    )
    with client(topo.r2) as c:
        r = agtp(c, topo, "LIFECYCLE", {"event": event}, "discovery:register")
    assert r.status_code == 200, r.text
    leaks = sum(cid in ids(discover(topo, topo.r1)) for _ in range(20))
    assert leaks == 0
    with client(topo.r1) as c:
        r = agtp(c, topo, "DESCRIBE", {"canonical_id": cid}, "discovery:query")
    assert r.status_code == 410, r.text


def test_a_federated_discover_returns_the_peers_agent_resigned_by_the_registry(
    topo: Topo,
) -> None:
    entry = json.loads(PEER_CATALOG.read_text())["agents"][0]
    assert entry["agent_label"] == "port-congestion-forecaster"
    peer_agent = demo_manifest(entry)["canonical_id"]
    result = discover(topo, topo.r2, SHIPPING, limit=5)
    assert peer_agent in ids(result), result
    item = next(x for x in result["results"] if x["canonical_id"] == peer_agent)
    assert item["provenance"]["peer"]["url"] == topo.info["peer"]["url"]
    assert item["trust_tier"] == 2  # tier 1 on the peer, capped at the tier granted to it
    registry_kid = topo.info["replicas"][1]["kid"]
    assert result["federation_path"] == [registry_kid, topo.info["peer"]["kid"]]
    assert result.get("warnings", []) == []
    # Verified with the JWKS each replica publishes: one registry identity.
    for url in (topo.r1, topo.r2):
        jwks = httpx.get(f"{url}/.well-known/jwks.json", timeout=10).json()
        assert verify_document(result, TrustedKeys.from_jwks(jwks), "ans_signature") == registry_kid
    tampered = {**result, "results": result["results"][1:]}
    with pytest.raises(Exception, match="verify"):
        verify_document(tampered, TrustedKeys.from_jwks(jwks), "ans_signature")


async def _burst_until_killed(
    t: Topo, manifests: Iterator[dict[str, Any]], kill_after: int
) -> list[str]:
    """ACTIVATEs on replica 1 from 8 connections; once ``kill_after`` are
    acknowledged, its whole process group gets SIGKILL (a machine lost, others
    in flight). The acknowledged ids."""
    acked: list[str] = []
    pgid = t.info["replicas"][0]["pid"]
    assert pgid > 1 and os.getpgid(pgid) == pgid  # its own process group, never ours
    headers = t.headers("discovery:register")

    async def worker() -> None:
        async with httpx.AsyncClient(base_url=t.r1, http1=False, http2=True, timeout=30) as c:
            while True:
                m = next(manifests)
                body = orjson.dumps(
                    {
                        "method": "ACTIVATE",
                        "task_id": "burst",
                        "parameters": {"manifest": m, "capabilities": CAPS},
                    }
                )
                try:
                    r = await c.request("ACTIVATE", "/", headers=headers, content=body)
                except httpx.HTTPError:
                    return  # replica 1 is gone: this one was never acknowledged
                assert r.status_code == 200, r.text
                acked.append(m["canonical_id"])
                if len(acked) == kill_after:
                    os.killpg(pgid, signal.SIGKILL)

    await asyncio.gather(*(worker() for _ in range(8)))
    return acked


def test_kill_9_of_replica_1_replica_2_answers_with_every_acknowledged_write(
    topo: Topo, make_manifest: Callable[..., dict[str, Any]]
) -> None:
    manifests = (
        make_manifest(
            f"burst-{n}", topo.key, org_domain="burst.example", job_description=f"{JOB} #{n}"
        )
        for n in range(100_000)
    )
    acked = asyncio.run(_burst_until_killed(topo, manifests, kill_after=30))
    assert len(acked) >= 30
    pgid = topo.info["replicas"][0]["pid"]
    until = time.monotonic() + 10
    while members(pgid) and time.monotonic() < until:
        time.sleep(0.05)
    assert members(pgid) == []  # replica 1 is really gone
    with client(topo.r2) as c:
        missing = [
            cid
            for cid in acked
            if agtp(c, topo, "DESCRIBE", {"canonical_id": cid}, "discovery:query").status_code
            != 200
        ]
    assert missing == []
    assert ids(discover(topo, topo.r2))  # and it goes on answering DISCOVER
    # the script reports the dead node and keeps the others running
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not any(
        "replica-1" in x and "exited" in x for x in topo.output
    ):
        time.sleep(0.1)
    assert any("replica-1" in x and "status -9" in x for x in topo.output), topo.output[-5:]
    assert topo.proc.poll() is None


def test_sigterm_to_the_script_leaves_nothing_behind(topo: Topo) -> None:
    nodes = [*topo.info["replicas"], topo.info["peer"]]
    running = {pid for n in nodes for pid in members(n["pid"])}
    assert len(running) >= 4  # replica 2's supervisor + 2 workers, the peer
    topo.proc.send_signal(signal.SIGTERM)
    assert topo.proc.wait(timeout=60) == 0, "".join(topo.output[-30:])
    assert "topology stopped: no process left\n" in topo.output
    assert [pid for n in nodes for pid in members(n["pid"])] == []  # no worker orphaned either
    assert not Path(topo.info["dir"]).exists()
    import psycopg

    with psycopg.connect(pgtest.PG_URL, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM information_schema.schemata WHERE schema_name = %s",
            (topo.info["schema"],),
        ).fetchone()
    assert row is not None and row[0] == 0


def test_the_nodes_stop_when_the_script_itself_is_killed(tmp_path: Path) -> None:
    """kill -9 of the script (no teardown runs): every node gets SIGTERM from
    the kernel (PR_SET_PDEATHSIG), drains and exits; no orphan remains."""
    need_postgres()
    proc, _, info = start_script("--replicas", "1", "--workers", "2", "--dir", str(tmp_path / "t"))
    try:
        pgids = [n["pid"] for n in [*info["replicas"], info["peer"]]]
        assert all(members(g) for g in pgids)
        proc.kill()
        proc.wait(timeout=10)
        deadline = time.monotonic() + 45
        while any(members(g) for g in pgids) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert [pid for g in pgids for pid in members(g)] == []
    finally:
        cleanup(proc, info)


DEPLOY = SCRIPT.parent


def test_the_compose_node_configs_load_as_ans_reads_them() -> None:
    from ans import config

    replica = config.load(DEPLOY / "compose" / "replica.toml")
    peer = config.load(DEPLOY / "compose" / "peer.toml")
    assert replica.agent_id != peer.agent_id  # the peer is another registry
    assert [(p.url, p.tier) for p in replica.peers] == [("http://peer:4480", 2)]
    assert peer.peers == ()
    assert replica.data_dir == peer.data_dir == Path("/data")
    jwks = (Path("/material/keys/governance.jwks.json"),)
    assert replica.governance_jwks == peer.governance_jwks == jwks
    assert replica.listen == peer.listen == "0.0.0.0:4480"


def test_every_file_compose_and_the_dockerfile_name_exists() -> None:
    compose = (DEPLOY / "compose.yaml").read_text()
    mounted = re.findall(r"\./(compose/[\w.-]+):", compose)
    assert mounted and all((DEPLOY / m).is_file() for m in mounted)
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    copied = re.findall(r"deploy/[\w.-]+", dockerfile.split("COPY", 1)[1])
    root = DEPLOY.parent
    assert "deploy/material.py" in copied and all((root / c).is_file() for c in copied)
    assert "/opt/ans/material.py" in compose and "COPY deploy/material.py" in dockerfile
    assert os.access(DEPLOY / "node-start.sh", os.X_OK)
    assert "/readyz" in dockerfile.split("HEALTHCHECK", 1)[1]


def test_the_compose_file_is_valid_for_docker_compose() -> None:
    compose = str(DEPLOY / "compose.yaml")
    if shutil.which("docker-compose"):
        cmd = ["docker-compose", "-f", compose, "config", "-q"]
    elif (
        shutil.which("docker")
        and subprocess.run(
            ["docker", "compose", "version"], capture_output=True, check=False
        ).returncode
        == 0
    ):
        cmd = ["docker", "compose", "-f", compose, "config", "-q"]
    else:
        pytest.skip("neither docker-compose nor the docker compose plugin is installed")
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr


def test_material_is_made_once_and_signs_what_its_jwks_verifies(tmp_path: Path) -> None:
    run = [sys.executable, str(DEPLOY / "material.py"), str(tmp_path)]
    subprocess.run(run, check=True, capture_output=True, timeout=60)
    files = sorted(p for p in tmp_path.rglob("*") if p.is_file())
    before = {p: p.read_bytes() for p in files}
    subprocess.run(run, check=True, capture_output=True, timeout=60)
    assert {p: p.read_bytes() for p in files} == before  # kept, not remade
    for key in ("governance-key.pem", "ans-signing-key.pem"):
        assert (tmp_path / "keys" / key).stat().st_mode & 0o077 == 0
    keys = TrustedKeys.load_jwks_file(tmp_path / "keys" / "governance.jwks.json")
    for name, n in (("peer.jsonl", 4), ("demo.jsonl", 64)):
        lines = (tmp_path / "catalogs" / name).read_text().splitlines()
        assert len(lines) == n
        for line in lines:
            verify_document(json.loads(line)["manifest"], keys, "signature")
