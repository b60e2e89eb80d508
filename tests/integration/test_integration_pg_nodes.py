"""Two ANS nodes over one PostgreSQL registry (issue 26.4): separate
processes, ports and data directories (keys, audit logs), the same
``--store postgresql://...`` (a fresh schema per test). An ACTIVATE on one is
served by the other's next DISCOVER; while DISCOVERs loop on one node, a
REVOKE on the other leaks nothing once its 200 is in hand; kill -9 of a node
in an ACTIVATE burst loses no acknowledged write (the other node and the
restarted one serve them all, and the restarted node's audit log is
completed from its own outbox rows)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from ans.governance.keys import SigningKey
from ans.governance.lifecycle import make_event

from ans.store_open import open_store
from tools import pgtest
from tools.launcher import RunningServer, start_server, stop_server

pytestmark = pytest.mark.integration

ANS = Path(sys.executable).with_name("ans")
GOVERNANCE = {
    "agent-id": "agtp://gov.example/agents/platform",
    "principal-id": "gov-operator",
    "authority-scope": "discovery:register",
    "content-type": "application/agtp+json",
}
QUERY = {**GOVERNANCE, "authority-scope": "discovery:query"}
CAPS = {"supported_methods": ["QUERY"], "modalities": ["text"], "tags": ["smart-contracts"]}
INTENT = "audit smart contracts for security bugs"
JOBS = (
    "Audits Solidity smart contracts for reentrancy and overflow bugs.",
    "Audits Vyper smart contracts for security vulnerabilities.",
    "Reviews DeFi protocol smart contracts for economic exploits.",
)


def body(method: str, params: dict[str, Any]) -> bytes:
    return orjson.dumps({"method": method, "task_id": "task-nodes", "parameters": params})


class Nodes:
    def __init__(self, url: str, schema: str, args: tuple[str, ...], tmp: Path) -> None:
        self.url, self.schema, self.args, self.tmp = url, schema, args, tmp
        self.running: dict[str, RunningServer] = {}

    def start(self, name: str, workers: int = 2) -> RunningServer:
        srv = start_server(
            self.tmp / name, "--store", self.url, "--workers", str(workers), *self.args
        )
        self.running[name] = srv
        return srv

    def stop_all(self) -> None:
        for srv in self.running.values():
            if srv.proc.poll() is None:
                stop_server(srv)


@pytest.fixture
def nodes(tmp_path: Path, test_gov_key: tuple[SigningKey, Path]) -> Iterator[Nodes]:
    reason = pgtest.unreachable()
    if reason is not None:
        pytest.skip(reason)
    if (
        "--workers"
        not in subprocess.run(
            [str(ANS), "serve", "--help"], capture_output=True, text=True, timeout=60
        ).stdout
    ):
        pytest.skip(
            "ans serve has no --workers here: the change-feed follower (issue 26.2) is absent"
        )
    schema = pgtest.create_schema("ans_nodes")
    cfg = tmp_path / "ans.toml"
    cfg.write_text("[rate_limit]\nenabled = false\n")  # the loops below flood on purpose
    n = Nodes(
        pgtest.schema_url(schema),
        schema,
        ("--governance-jwks", str(test_gov_key[1]), "--config", str(cfg)),
        tmp_path,
    )
    try:
        n.start("a")
        n.start("b")
        yield n
    finally:
        n.stop_all()
        pgtest.drop_schema(schema)


def activate(client: httpx.Client, m: dict[str, Any]) -> None:
    r = client.request(
        "ACTIVATE",
        "/",
        headers=GOVERNANCE,
        content=body("ACTIVATE", {"manifest": m, "capabilities": CAPS}),
    )
    assert r.status_code == 200, r.text


def discover_ids(client: httpx.Client, intent: str = INTENT) -> set[str]:
    r = client.request(
        "DISCOVER", "/", headers=QUERY, content=body("DISCOVER", {"intent": intent, "limit": 20})
    )
    assert r.status_code == 200, r.text
    return {x["canonical_id"] for x in r.json()["result"]["results"]}


def client(srv: RunningServer) -> httpx.Client:
    return httpx.Client(base_url=srv.url, http1=False, http2=True, timeout=30)


def test_activate_on_one_node_is_served_by_the_others_next_discover(
    nodes: Nodes,
    make_manifest: Callable[..., dict[str, Any]],
    test_gov_key: tuple[SigningKey, Path],
) -> None:
    key = test_gov_key[0]
    a, b = nodes.running["a"], nodes.running["b"]
    with client(a) as ca, client(b) as cb:
        for i, job in enumerate(JOBS):
            m = make_manifest(f"auditor-{i}", key, org_domain="chain.example", job_description=job)
            activate(ca, m)  # on A ...
            assert m["canonical_id"] in discover_ids(cb)  # ... B's very next DISCOVER has it
            r = cb.request(
                "DESCRIBE",
                "/",
                headers=QUERY,
                content=body("DESCRIBE", {"canonical_id": m["canonical_id"]}),
            )
            assert r.status_code == 200, r.text
        # and the other way round
        m = make_manifest("auditor-b", key, org_domain="chain.example", job_description=JOBS[0])
        activate(cb, m)
        assert m["canonical_id"] in discover_ids(ca)


def test_a_single_process_node_follows_the_feed_too(
    nodes: Nodes,
    make_manifest: Callable[..., dict[str, Any]],
    test_gov_key: tuple[SigningKey, Path],
) -> None:
    """--workers 1 (one core) over PostgreSQL: other nodes write the store, so
    the node still follows its change feed."""
    key = test_gov_key[0]
    c = nodes.start("c", workers=1)
    with client(nodes.running["a"]) as ca, client(c) as cc:
        m = make_manifest("single", key, org_domain="chain.example", job_description=JOBS[1])
        activate(ca, m)
        assert m["canonical_id"] in discover_ids(cc)
        event = make_event(
            "REVOKE", m["canonical_id"], key, datetime.now(UTC), event_id=f"evt-{uuid.uuid4().hex}"
        )
        r = cc.request(
            "LIFECYCLE", "/", headers=GOVERNANCE, content=body("LIFECYCLE", {"event": event})
        )
        assert r.status_code == 200, r.text  # C writes, A follows
        assert m["canonical_id"] not in discover_ids(ca)


async def _activate_many(url: str, manifests: list[dict[str, Any]]) -> None:
    """ACTIVATE ``manifests`` from six connections at once, one request at a
    time on each."""
    todo = list(manifests)

    async def worker() -> None:
        async with httpx.AsyncClient(base_url=url, http1=False, http2=True, timeout=60) as c:
            while todo:
                params = {"manifest": todo.pop(), "capabilities": CAPS}
                r = await c.request(
                    "ACTIVATE", "/", headers=GOVERNANCE, content=body("ACTIVATE", params)
                )
                assert r.status_code == 200, r.text

    await asyncio.gather(*(worker() for _ in range(6)))


def test_concurrent_writes_on_both_nodes_are_served_by_both(
    nodes: Nodes,
    make_manifest: Callable[..., dict[str, Any]],
    test_gov_key: tuple[SigningKey, Path],
) -> None:
    """ACTIVATE bursts on A and B at once: a node that applies its own writes
    must not step over the other's commits in the feed; afterwards every
    acknowledged agent is served by both nodes."""
    key = test_gov_key[0]
    a, b = nodes.running["a"], nodes.running["b"]
    batch = {
        name: [
            make_manifest(
                f"{name}-{n}", key, org_domain="both.example", job_description=f"{JOBS[n % 3]} #{n}"
            )
            for n in range(60)
        ]
        for name in ("a", "b")
    }

    async def both() -> None:
        await asyncio.gather(_activate_many(a.url, batch["a"]), _activate_many(b.url, batch["b"]))

    asyncio.run(both())
    every = [m["canonical_id"] for ms in batch.values() for m in ms]
    assert unserved(a, every) == []
    assert unserved(b, every) == []


async def _revoke_while_other_discovers(
    a_url: str, b_url: str, target: str, event: dict[str, Any]
) -> dict[str, Any]:
    """DISCOVERs on B from six connections; one REVOKE on A once 30 have
    answered. Each DISCOVER's start time and whether it returned ``target``."""
    seen: list[tuple[float, bool]] = []
    revoked_at: list[float] = []
    stop = asyncio.Event()
    q = body("DISCOVER", {"intent": INTENT, "limit": 20})

    async def discoverer() -> None:
        async with httpx.AsyncClient(base_url=b_url, http1=False, http2=True, timeout=30) as c:
            for _ in range(600):
                if stop.is_set():
                    return
                started = time.monotonic()
                r = await c.request("DISCOVER", "/", headers=QUERY, content=q)
                assert r.status_code == 200, r.text
                cids = {x["canonical_id"] for x in r.json()["result"]["results"]}
                seen.append((started, target in cids))

    async def revoker() -> None:
        async with httpx.AsyncClient(base_url=a_url, http1=False, http2=True, timeout=30) as c:
            while len(seen) < 30:
                await asyncio.sleep(0.01)
            r = await c.request(
                "LIFECYCLE", "/", headers=GOVERNANCE, content=body("LIFECYCLE", {"event": event})
            )
            revoked_at.append(time.monotonic())  # the REVOKE's 200 is in hand
            assert r.status_code == 200, r.text
            n = len(seen)
            while len(seen) < n + 150:
                await asyncio.sleep(0.01)
            stop.set()

    await asyncio.wait_for(asyncio.gather(revoker(), *(discoverer() for _ in range(6))), 180)
    return {"seen": seen, "revoked_at": revoked_at[0]}


def test_revoke_on_one_node_leaks_nothing_on_the_other(
    nodes: Nodes,
    make_manifest: Callable[..., dict[str, Any]],
    test_gov_key: tuple[SigningKey, Path],
) -> None:
    key = test_gov_key[0]
    a, b = nodes.running["a"], nodes.running["b"]
    ids = []
    with client(a) as ca:
        for i, job in enumerate(JOBS):
            m = make_manifest(f"rev-{i}", key, org_domain="chain.example", job_description=job)
            activate(ca, m)
            ids.append(m["canonical_id"])
    target = ids[0]
    event = make_event("REVOKE", target, key, datetime.now(UTC), event_id=f"evt-{uuid.uuid4().hex}")
    out = asyncio.run(_revoke_while_other_discovers(a.url, b.url, target, event))
    before = [hit for started, hit in out["seen"] if started < out["revoked_at"]]
    after = [hit for started, hit in out["seen"] if started > out["revoked_at"]]
    assert any(before), "B served the agent before the REVOKE (else the test proves nothing)"
    assert len(after) >= 150
    leaks = sum(after)
    print(f"REVOKE on A, DISCOVERs on B: {len(before)} before, {len(after)} after, {leaks} leaks")
    assert leaks == 0
    with client(b) as cb:
        r = cb.request(
            "DESCRIBE", "/", headers=QUERY, content=body("DESCRIBE", {"canonical_id": target})
        )
        assert r.status_code == 410, r.text


async def _burst(
    srv: RunningServer, manifests: Iterator[dict[str, Any]], kill_after: int
) -> list[str]:
    """ACTIVATEs from 12 connections until the node is killed (SIGKILL once
    ``kill_after`` were acknowledged, others in flight); the acknowledged ids."""
    acked: list[str] = []

    async def worker() -> None:
        async with httpx.AsyncClient(base_url=srv.url, http2=True, http1=False, timeout=30) as c:
            while True:
                m = next(manifests)
                params = {"manifest": m, "capabilities": CAPS}
                try:
                    r = await c.request(
                        "ACTIVATE", "/", headers=GOVERNANCE, content=body("ACTIVATE", params)
                    )
                except httpx.HTTPError:
                    return  # the node is gone: this one was never acknowledged
                assert r.status_code == 200, r.text
                acked.append(m["canonical_id"])
                if len(acked) == kill_after:
                    srv.proc.kill()

    await asyncio.gather(*(worker() for _ in range(12)))
    srv.proc.wait(timeout=30)
    return acked


def unserved(srv: RunningServer, cids: list[str]) -> list[str]:
    with client(srv) as c:
        return [
            cid
            for cid in cids
            if c.request(
                "DESCRIBE", "/", headers=QUERY, content=body("DESCRIBE", {"canonical_id": cid})
            ).status_code
            != 200
        ]


def test_kill_9_of_one_node_loses_no_acknowledged_write(
    nodes: Nodes,
    make_manifest: Callable[..., dict[str, Any]],
    test_gov_key: tuple[SigningKey, Path],
) -> None:
    key = test_gov_key[0]
    a, b = nodes.running["a"], nodes.running["b"]
    manifests = (
        make_manifest(
            f"burst-{n}", key, org_domain="burst.example", job_description=f"{JOBS[n % 3]} #{n}"
        )
        for n in range(100_000)
    )
    acked = asyncio.run(_burst(a, manifests, kill_after=40))
    assert len(acked) >= 40
    assert unserved(b, acked) == []  # the surviving node serves every acknowledged write
    store = open_store(nodes.url)
    try:
        stored = store.get_many(acked)
        assert sorted(stored) == sorted(acked)
        assert {s.lifecycle_state for s in stored.values()} == {"Active"}
    finally:
        store.close()
    a = nodes.start("a")  # the restart: same data directory, same node id
    assert unserved(a, acked) == []
    # every audit log of the node (one per worker process, whatever they are named)
    logs = [*a.data_dir.glob("audit*.jsonl"), *a.data_dir.glob("audit/*.jsonl")]
    audited = {
        rec["canonical_id"]
        for log in logs
        for rec in map(orjson.loads, log.read_bytes().splitlines())
        if rec["event"] == "activation" and rec.get("status") == 200
    }
    assert set(acked) <= audited  # completed from A's own outbox rows, none of B's
    verify = subprocess.run(
        [str(ANS), "audit", "verify", "--data-dir", str(a.data_dir)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert verify.returncode == 0, verify.stdout + verify.stderr


@pytest.fixture
def pg_url() -> Iterator[str]:
    reason = pgtest.unreachable()
    if reason is not None:
        pytest.skip(reason)
    schema = pgtest.create_schema("ans_import")
    try:
        yield pgtest.schema_url(schema)
    finally:
        pgtest.drop_schema(schema)


def test_ans_import_into_postgresql_then_serve_from_it(
    tmp_path: Path,
    pg_url: str,
    make_manifest: Callable[..., dict[str, Any]],
    test_gov_key: tuple[SigningKey, Path],
) -> None:
    key, jwks = test_gov_key
    manifests = [
        make_manifest(
            f"imp-{i}", key, org_domain="imp.example", job_description=f"{JOBS[i % 3]} #{i}"
        )
        for i in range(50)
    ]
    src = tmp_path / "agents.jsonl"
    src.write_bytes(
        b"\n".join(orjson.dumps({"manifest": m, "capabilities": CAPS}) for m in manifests)
    )
    data = tmp_path / "data"
    common = ("--store", pg_url, "--governance-jwks", str(jwks))
    out = subprocess.run(
        [str(ANS), "import", str(src), "--data-dir", str(data), "--batch", "16", *common],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    assert "imported 50, unchanged 0, refused 0" in out.stdout
    assert not (data / "registry.sqlite3").exists()  # the registry is in PostgreSQL
    store = open_store(pg_url)
    try:
        assert store.count() == 50
        # queued audit rows (until trimmed) belong to this data directory's node id
        node = (data / "node-id").read_text().strip()
        assert node.startswith("node-") and store.audit_outbox(node="") == []
    finally:
        store.close()
    cfg = tmp_path / "ans.toml"
    cfg.write_text("[rate_limit]\nenabled = false\n")
    srv = start_server(data, *common, "--config", str(cfg))
    try:
        assert unserved(srv, [m["canonical_id"] for m in manifests]) == []
    finally:
        stop_server(srv)
