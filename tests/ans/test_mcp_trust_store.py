"""The MCP trust store (``ans.mcp.trust_store``) held to one contract on
SQLite and on a fresh PostgreSQL schema (``tools.pgtest``; the PostgreSQL
half skips, saying why, where no server is reachable): pin (first writer
wins, across two store instances = two nodes), compare-and-set rotation,
heartbeat, live pages filtered by ``last_seen``, one sweeper claim, forget.
Then the registry itself over two nodes of one store: an agent announced on
one is listed on the other, and the other's sweeper removes it once."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ans.mcp.trust_store import McpTrust, McpTrustStore, trust_store_for
from ans.store_open import open_store
from ans.store_records import RegistryStore
from tests.ans.test_mcp_support import AgentKey, World, agent_object, announce, make_world_factory
from tools import pgtest


class Backend:
    def __init__(self, target: str | Path) -> None:
        self.target = target
        self.opened: list[RegistryStore] = []

    def open(self) -> RegistryStore:
        store = open_store(self.target)
        self.opened.append(store)
        return store

    def trust(self) -> McpTrustStore:
        return trust_store_for(self.open())

    def close_all(self) -> None:
        for store in self.opened:
            with contextlib.suppress(Exception):
                store.close()


@pytest.fixture(scope="session")
def pg_reason() -> str | None:
    return pgtest.unreachable()


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(
    request: pytest.FixtureRequest, tmp_path: Path, pg_reason: str | None
) -> Iterator[Backend]:
    if request.param == "sqlite":
        b = Backend(tmp_path / "registry.sqlite3")
        yield b
        b.close_all()
        return
    if pg_reason is not None:
        pytest.skip(pg_reason)
    schema = pgtest.create_schema()
    b = Backend(pgtest.schema_url(schema))
    try:
        yield b
    finally:
        b.close_all()
        pgtest.drop_schema(schema)


def rec(agent_id: str = "a1", key: str = "k1", seen: float = 100.0, **kw: Any) -> McpTrust:
    return McpTrust(agent_id, f"PEM-{key}", key, b'{"x":1}', "d-" + key, seen, seen, **kw)


def test_first_pin_wins_across_nodes(backend: Backend) -> None:
    node_a, node_b = backend.trust(), backend.trust()
    assert node_a.get("a1") is None
    assert node_a.pin(rec(key="k1")).key_id == "k1"
    # another node pinning the same id later gets the stored row back
    assert node_b.pin(rec(key="k2")).key_id == "k1"
    assert node_b.get("a1") == rec(key="k1")


def test_replace_is_compare_and_set(backend: Backend) -> None:
    t = backend.trust()
    t.pin(rec(key="k1"))
    rotated = rec(key="k2", previous_key_pem="PEM-k1", previous_key_id="k1", previous_until=500.0)
    assert t.replace(rotated, "k1") is True
    assert t.replace(rec(key="k3"), "k1") is False  # the key it expected is gone
    got = t.get("a1")
    assert got is not None and got.key_id == "k2" and got.previous_key_id == "k1"
    assert got.previous_until == 500.0


def test_heartbeat_page_stale_and_one_claim(backend: Backend) -> None:
    node_a, node_b = backend.trust(), backend.trust()
    for i, seen in enumerate((100.0, 150.0, 200.0)):
        node_a.pin(rec(f"a{i}", seen=seen))
    assert node_a.touch("a0", 180.0) is True
    assert node_a.touch("a0", 120.0) is True  # never moves back
    assert node_b.get("a0").last_seen == 180.0  # type: ignore[union-attr]
    assert [r.agent_id for r in node_b.page("", 10, cutoff=160.0)] == ["a0", "a2"]
    assert [r.agent_id for r in node_b.page("a0", 10, cutoff=160.0)] == ["a2"]
    assert node_b.count_live(160.0) == 2
    (stale,) = node_b.stale(160.0, 10)
    assert stale.agent_id == "a1"
    # two sweepers: only one claims it
    assert node_a.mark_removed("a1", stale.last_seen, 300.0) is True
    assert node_b.mark_removed("a1", stale.last_seen, 300.0) is False
    assert node_b.stale(160.0, 10) == []
    assert node_a.touch("a1", 400.0) is False  # removed: a heartbeat must re-admit
    # a heartbeat between the read and the claim wins over the sweeper
    node_a.touch("a2", 250.0)
    assert node_b.mark_removed("a2", 200.0, 300.0) is False
    assert node_a.forget("a1") is True and node_b.get("a1") is None
    assert node_a.forget("a1") is False


@pytest.fixture
def two_nodes(
    backend: Backend, tmp_path: Path, embedder: Any, gov_key: Any
) -> Iterator[Callable[[], World]]:
    gen = make_world_factory(tmp_path, embedder, gov_key)
    make = next(gen)
    yield lambda: make(store=backend.open(), ttl_seconds=90)
    with contextlib.suppress(StopIteration):
        next(gen)


def test_registry_across_two_nodes(two_nodes: Callable[[], World]) -> None:
    a, b = two_nodes(), two_nodes()
    key = AgentKey()
    agent = agent_object(key)
    assert a.post(announce(key, agent))[0] == 200
    status, _, listed = b.call("GET", "/mcp/v1/agents")
    assert status == 200 and [x["agent"] for x in listed["agents"]] == [agent]
    # the pinned key holds on the other node too
    thief = AgentKey()
    assert b.post(announce(thief, {**agent, "public_key": thief.pem}))[0] == 409
    # node b's clock passes the TTL: its sweeper removes the agent, once
    b.clock.advance(91)
    a.clock.advance(91)
    assert b.registry.sweep() == 1
    assert a.registry.sweep() == 0
    cid = "urn:uuid:" + agent["agent_id"]
    assert b.svc.store.get(cid).lifecycle_state == "Removed"  # type: ignore[union-attr]
    assert a.call("GET", "/mcp/v1/agents")[2]["agents"] == []
