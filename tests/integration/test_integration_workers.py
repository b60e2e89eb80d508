"""``ans serve --workers 2``: two real worker processes on one port, one store.

An ACTIVATE acknowledged by one worker is seen by the next DISCOVER on every
worker; after a REVOKE's 200 no DISCOVER on any worker returns the agent;
SIGTERM drains both workers; a killed worker is restarted; a second ``ans
serve`` on the data directory is refused; every worker's audit log verifies.
Which worker answered is read from ``/healthz`` on the same HTTP/2 connection.
Nothing sleeps for a while: the tests wait for answers, exits and log lines."""

from __future__ import annotations

import asyncio
import hashlib
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import h2.config
import h2.connection
import h2.events
import httpx
import orjson
import pytest
from ans.governance.keys import SigningKey
from ans.governance.lifecycle import make_event
from ans.governance.signing import sign_document

from ans.client import connect
from tools.launcher import RunningServer

pytestmark = pytest.mark.integration

QUERY = {
    "agent-id": "agtp://agtp.finco.example/agents/orchestrator",
    "principal-id": "usr-1",
    "authority-scope": "discovery:query",
    "content-type": "application/agtp+json",
}
GOVERNANCE = {
    **QUERY,
    "agent-id": "agtp://gov.example/agents/platform",
    "authority-scope": "discovery:register",
}
CAPS = {"supported_methods": ["QUERY"], "modalities": ["text"], "tags": ["tide-tables"]}
INTENT = "predict ocean tide tables for a harbour"
ANS = Path(sys.executable).with_name("ans")
WAIT = 60.0  # s: a bound, not an expected duration


def manifest(label: str, key: SigningKey, job: str) -> dict[str, Any]:
    uri = f"agtp://agtp.sea.example/agents/{label}"
    doc = {
        "document_type": "agtp-manifest",
        "schema_version": "1.0",
        "manifest_uri": uri,
        "canonical_id": hashlib.sha256(uri.encode()).hexdigest(),
        "agent_label": label,
        "org_domain": "sea.example",
        "governance_zone": "zone:public",
        "trust_tier": 1,
        "package_format": "nomo",
        "package_integrity_hash": "sha256:" + "ab" * 32,
        "lifecycle_state": "Active",
        "cert_status": "Active",
        "principal_org": "Sea Corp",
        "activated_at": "2026-01-15T09:00:00Z",
        "behavioral_trust_score": 0.95,
        "authority_scope_categories": ["data:read"],
        "supported_methods": ["QUERY"],
        "job_description": job,
    }
    return sign_document(doc, key, "signature")


def body(method: str, params: dict[str, Any]) -> bytes:
    return orjson.dumps({"method": method, "task_id": "task-w", "parameters": params})


def activate(client: httpx.Client, m: dict[str, Any]) -> None:
    r = client.request(
        "ACTIVATE",
        "/",
        headers=GOVERNANCE,
        content=body("ACTIVATE", {"manifest": m, "capabilities": CAPS}),
    )
    assert r.status_code == 200, r.text


@pytest.fixture
def workers(
    tmp_path: Path, server_factory: Callable[..., Any], test_gov_key: tuple[SigningKey, Path]
) -> RunningServer:
    cfg = tmp_path / "ans.toml"
    cfg.write_text("[server]\ngraceful_timeout = 60\n\n[rate_limit]\nenabled = false\n")
    srv: RunningServer = server_factory(
        tmp_path / "data",
        "--demo",
        "--workers",
        "2",
        "--native-listen",
        "127.0.0.1:0",
        "--governance-jwks",
        str(test_gov_key[1]),
        "--config",
        str(cfg),
    )
    return srv


def worker_of(client: httpx.Client) -> int:
    r = client.get("/healthz")
    assert r.status_code == 200
    w = r.json()["worker"]
    assert isinstance(w, int)
    return w


def discover_ids(client: httpx.Client) -> set[str]:
    r = client.request(
        "DISCOVER", "/", headers=QUERY, content=body("DISCOVER", {"intent": INTENT, "limit": 10})
    )
    assert r.status_code == 200, r.text
    return {x["canonical_id"] for x in r.json()["result"]["results"]}


def client(url: str) -> httpx.Client:
    return httpx.Client(base_url=url, http1=False, http2=True, timeout=WAIT)


def test_activate_on_one_worker_is_seen_by_the_next_discover_on_every_worker(
    workers: RunningServer, test_gov_key: tuple[SigningKey, Path]
) -> None:
    key = test_gov_key[0]
    seen_by: dict[int, int] = {0: 0, 1: 0}
    with client(workers.url) as writer:
        for n in range(3):
            m = manifest(f"tide-{n}", key, "Predicts ocean tide tables for harbours and ports.")
            activate(writer, m)  # the 200 is in hand: every worker must now serve it
            for _ in range(12):  # new connections: the kernel spreads them over the workers
                with client(workers.url) as c:
                    assert m["canonical_id"] in discover_ids(c)
                    seen_by[worker_of(c)] += 1
    assert seen_by[0] > 0 and seen_by[1] > 0, seen_by  # both workers answered


def test_the_native_listener_is_served_by_every_worker(
    workers: RunningServer, test_gov_key: tuple[SigningKey, Path]
) -> None:
    """Native DISCOVERs on new connections (spread over both workers' sockets:
    one that no worker served would leave its connections unanswered) see an
    agent ACTIVATEd through HTTP/2 just before."""
    assert workers.native_url is not None
    m = manifest("tide-native", test_gov_key[0], "Predicts ocean tide tables for harbours.")
    with client(workers.url) as c:
        activate(c, m)
    for _ in range(16):
        with connect(
            workers.native_url,
            agent_id=QUERY["agent-id"],
            principal_id="usr-1",
            scope="discovery:query",
            timeout=WAIT,
        ) as nc:
            r = nc.discover({"intent": INTENT, "limit": 10})
            assert r.status == 200, r.body
            ids = {x["canonical_id"] for x in r.result["results"]}
            assert m["canonical_id"] in ids


async def _revoke_under_load(url: str, target: str, event: dict[str, Any]) -> dict[str, Any]:
    """DISCOVERs on 8 connections (both workers) while one REVOKE is sent."""
    seen: list[tuple[float, bool, int]] = []
    revoked_at: list[float] = []
    stop = asyncio.Event()
    q = body("DISCOVER", {"intent": INTENT, "limit": 10})

    async def on_worker(want: int) -> httpx.AsyncClient:
        """A connection the kernel gave to worker ``want`` (SO_REUSEPORT spreads
        connections by hash: 8 could all land on one worker, 1 run in 128)."""
        for _ in range(64):
            c = httpx.AsyncClient(base_url=url, http1=False, http2=True, timeout=WAIT)
            if (await c.get("/healthz")).json()["worker"] == want:
                return c
            await c.aclose()
        raise AssertionError(f"no connection reached worker {want} in 64 tries")

    async def loop(worker: int) -> None:
        c = await on_worker(worker)
        try:
            for _ in range(600):  # bounded; normally stopped long before
                if stop.is_set():
                    return
                started = time.monotonic()
                r = await c.request("DISCOVER", "/", headers=QUERY, content=q)
                assert r.status_code == 200, r.text
                cids = {x["canonical_id"] for x in r.json()["result"]["results"]}
                seen.append((started, target in cids, worker))
        finally:
            await c.aclose()

    async def revoker() -> None:
        async with httpx.AsyncClient(base_url=url, http1=False, http2=True, timeout=WAIT) as c:
            while len(seen) < 40:
                await asyncio.sleep(0.01)
            r = await c.request(
                "LIFECYCLE", "/", headers=GOVERNANCE, content=body("LIFECYCLE", {"event": event})
            )
            revoked_at.append(time.monotonic())
            assert r.status_code == 200, r.text
            n = len(seen)
            while len(seen) < n + 200:
                await asyncio.sleep(0.01)
            stop.set()

    await asyncio.wait_for(asyncio.gather(revoker(), *(loop(i % 2) for i in range(8))), 180)
    return {"seen": seen, "revoked_at": revoked_at[0]}


def test_no_discover_on_any_worker_after_a_revoke_returns_the_agent(
    workers: RunningServer, test_gov_key: tuple[SigningKey, Path]
) -> None:
    key = test_gov_key[0]
    m = manifest("tide-revoked", key, "Predicts ocean tide tables for harbours and ports.")
    with client(workers.url) as c:
        activate(c, m)
    target = m["canonical_id"]
    event = make_event("REVOKE", target, key, datetime.now(UTC), event_id=f"evt-{uuid.uuid4()}")
    out = asyncio.run(_revoke_under_load(workers.url, target, event))
    before = [(hit, w) for started, hit, w in out["seen"] if started < out["revoked_at"]]
    after = [(hit, w) for started, hit, w in out["seen"] if started > out["revoked_at"]]
    assert {w for _, w in before} == {0, 1}, "the load ran on one worker only"
    assert all(hit for hit, _ in before[:8]), "the agent was not served before the REVOKE"
    assert {w for _, w in after} == {0, 1}
    leaks = [w for hit, w in after if hit]
    assert not leaks, f"{len(leaks)} DISCOVERs started after the REVOKE returned it"


class RawH2:
    """An h2c connection: requests out, answers and the close read in."""

    def __init__(self, url: str) -> None:
        host, port = url.removeprefix("http://").rsplit(":", 1)
        self.authority = f"{host}:{port}"
        self.sock = socket.create_connection((host, int(port)), timeout=WAIT)
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        self.conn.initiate_connection()
        self.status: dict[int, int] = {}
        self.bodies: dict[int, bytes] = {}
        self.ended: set[int] = set()
        self.closed = False
        self.sock.sendall(self.conn.data_to_send())

    def _send(self, method: str, headers: list[tuple[str, str]], data: bytes | None) -> int:
        sid: int = self.conn.get_next_available_stream_id()
        base = [(":method", method), (":path", "/healthz" if method == "GET" else "/")]
        base += [(":scheme", "http"), (":authority", self.authority)]
        self.conn.send_headers(sid, base + headers, end_stream=data is None)
        if data is not None:
            self.conn.send_data(sid, data, end_stream=True)
        return sid

    def worker(self) -> int:
        sid = self._send("GET", [], None)
        self.sock.sendall(self.conn.data_to_send())
        while sid not in self.ended:
            self._receive()
        w: int = orjson.loads(self.bodies[sid])["worker"]
        return w

    def discovers(self, n: int) -> list[int]:
        q = body("DISCOVER", {"intent": INTENT, "limit": 5})
        sids = [self._send("DISCOVER", list(QUERY.items()), q) for _ in range(n)]
        self.sock.sendall(self.conn.data_to_send())
        return sids

    def read_until_closed(self) -> None:
        while not self.closed:
            self._receive()

    def _receive(self) -> None:
        try:
            data = self.sock.recv(65536)
        except ConnectionResetError:
            data = b""
        if not data:
            self.closed = True
            return
        for e in self.conn.receive_data(data):
            if isinstance(e, h2.events.ResponseReceived):
                self.status[e.stream_id] = int(dict(e.headers)[b":status"])
            elif isinstance(e, h2.events.DataReceived):
                self.bodies[e.stream_id] = self.bodies.get(e.stream_id, b"") + e.data
                self.conn.acknowledge_received_data(e.flow_controlled_length, e.stream_id)
            elif isinstance(e, h2.events.StreamEnded):
                self.ended.add(e.stream_id)
        out = self.conn.data_to_send()
        if out:
            try:
                self.sock.sendall(out)
            except OSError:
                self.closed = True


def children(pid: int) -> set[int]:
    text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    return {int(x) for x in text.split()}


def wait_for(cond: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_a_killed_worker_is_restarted_and_a_second_server_is_refused(
    workers: RunningServer, tmp_path: Path
) -> None:
    pids = children(workers.proc.pid)
    assert len(pids) == 2
    # the data directory is the running server's: a second one is refused
    r = subprocess.run(
        [str(ANS), "serve", "--listen", "127.0.0.1:0", "--data-dir", str(workers.data_dir)],
        capture_output=True,
        text=True,
        timeout=WAIT,
        check=False,
    )
    assert r.returncode == 2 and "is in use" in r.stderr, r.stderr
    victim = sorted(pids)[1]
    os.kill(victim, signal.SIGKILL)
    wait_for(lambda: len(children(workers.proc.pid) - {victim}) == 2, "worker not restarted")
    wait_for(
        lambda: any("worker died; restarting it" in line for line in workers.output),
        "the restart is not logged",
    )
    answered: set[int] = set()
    deadline = time.monotonic() + WAIT
    while answered != {0, 1}:  # both workers serve again
        assert time.monotonic() < deadline, answered
        with client(workers.url) as c:
            assert discover_ids(c) is not None
            answered.add(worker_of(c))


def on_both_workers(url: str, each: int) -> list[RawH2]:
    """``each`` connections on each of the two workers: SO_REUSEPORT spreads
    connections by hash, so 8 opened blindly all land on one worker 1 run in 128."""
    kept: dict[int, list[RawH2]] = {0: [], 1: []}
    for _ in range(64):
        c = RawH2(url)
        w = c.worker()
        if len(kept[w]) < each:
            kept[w].append(c)
        else:
            c.sock.close()
        if all(len(v) == each for v in kept.values()):
            return kept[0] + kept[1]
    for v in kept.values():
        for c in v:
            c.sock.close()
    raise AssertionError(f"64 connections did not reach both workers {each} times each")


def test_sigterm_drains_every_worker_and_the_audit_logs_verify(
    workers: RunningServer, test_gov_key: tuple[SigningKey, Path]
) -> None:
    key = test_gov_key[0]
    with client(workers.url) as c:  # a state change on whichever worker this is
        activate(c, manifest("tide-audit", key, "Predicts tides."))

    # Raw HTTP/2 (h2): httpx fails the streams still being read when the
    # GOAWAY that ends a drained connection arrives with their answers.
    conns = on_both_workers(workers.url, 4)
    try:
        assert sorted(c.worker() for c in conns) == [0] * 4 + [1] * 4
        sent = {c: c.discovers(10) for c in conns}
        workers.proc.send_signal(signal.SIGTERM)
        for c, sids in sent.items():
            c.read_until_closed()
            assert [c.status.get(sid) for sid in sids] == [200] * 10
    finally:
        for c in conns:
            c.sock.close()
    assert workers.proc.wait(timeout=WAIT) == 0, "".join(workers.output[-30:])
    text = "".join(workers.output)
    assert "Traceback" not in text, text[-3000:]
    assert text.count("worker stopped") == 2
    with pytest.raises(httpx.ConnectError):
        httpx.get(workers.url + "/healthz", timeout=5)
    r = subprocess.run(
        [str(ANS), "audit", "verify", "--data-dir", str(workers.data_dir)],
        capture_output=True,
        text=True,
        timeout=WAIT,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("intact") == 2, r.stdout  # audit.jsonl and audit-worker-1.jsonl
    logs = [workers.data_dir / "audit.jsonl", workers.data_dir / "audit-worker-1.jsonl"]
    records = [orjson.loads(x) for p in logs for x in p.read_bytes().splitlines()]
    activations = [x for x in records if x["event"] == "activation" and x.get("worker") is not None]
    assert len(activations) == 1  # in the log of the worker that answered, once
