"""Concurrent DISCOVERs share one exhaustive scan (ans/core/scan_batch.py,
ans/index/prefetch.py): the answers are the same bit for bit as each query
scanning alone, a batch is never used once the rows changed, and a batch that
fails or does not apply leaves every DISCOVER to scan on its own."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from ans.protocol.messages import DiscoverRequest, Identity, parse_discover_params, query_digest
from ans.protocol.scope import parse_authority_scope

from ans.ann import AnnSettings
from ans.config import Config
from ans.core.scan_batch import ScanBatch
from ans.index.capability import CapabilityIndex
from ans.wiring import build_service

ASKER = Identity(
    "agtp://batch.example/agents/asker", "batch", parse_authority_scope("discovery:query")
)


def _catalog(n: int, queries: int) -> tuple[list[tuple[dict[str, Any], dict[str, Any]]], list[str]]:
    from tools.synth import generate, make_queries

    agents = list(generate(n, 11))
    intents = [q["intent"] for q in make_queries(4 * queries, 11) if q.get("intent")]
    return agents, list(dict.fromkeys(intents))[:queries]


def _request(service: Any, params: dict[str, Any]) -> DiscoverRequest:
    return DiscoverRequest(
        ASKER, "batch", parse_discover_params(params, service.limits), query_digest(params), params
    )


def _top(answer: dict[str, Any]) -> list[tuple[str, float, float]]:
    return [
        (r["canonical_id"], r["rank_score"], r["capability_match_score"])
        for r in answer["results"]
    ] + [("total", answer["total_matches"], 0.0)]


@pytest.fixture
def service(embedder: Any, tmp_path: Path) -> Any:
    built = build_service(Config(data_dir=tmp_path / "data"), embedder=embedder)
    yield built.service
    if built.lock is not None:
        built.lock.release()
    built.service.store.close()


def test_concurrent_discovers_share_a_scan_and_answer_as_alone(service: Any) -> None:
    agents, intents = _catalog(240, 40)
    first, later = agents[:200], agents[200:]
    service.activate_many([(m, c, "batch-kid") for m, c in first])
    discovery = service.discovery
    assert service.matcher.batches_scans
    observed: list[int] = []
    discovery.scans.observers.append(observed.append)

    def params_of(i: int, intent: str) -> dict[str, Any]:
        p: dict[str, Any] = {"intent": intent, "limit": 10}
        if i % 5 == 1:
            p["trust_tier_min"] = 2
        if i % 7 == 3:  # restricted: scanned alone, in the same gathering
            p["capability_domains"] = ["tags", "examples"]
        return p

    async def concurrently(batch: list[dict[str, Any]]) -> list[Any]:
        return await asyncio.gather(
            *(discovery.discover_async(_request(service, p)) for p in batch)
        )

    for _round in range(2):
        batch = [params_of(i, t) for i, t in enumerate(intents)]
        batch += batch[:5]  # the same intent twice in one gathering
        alone = [_top(service.discover(_request(service, p))) for p in batch]
        before = discovery.scans.batches, discovery.scans.batched
        together = [_top(a) for a in asyncio.run(concurrently(batch))]
        assert together == alone
        assert discovery.scans.batches == before[0] + 1
        # every plain intent waited for the one scan; restricted ones did not
        plain = sum(1 for p in batch if "capability_domains" not in p)
        assert discovery.scans.batched == before[1] + plain
        # the metric's observer saw one scan of all of them
        assert observed == [plain]
        observed.clear()
        # writes between the rounds: removals (freed slots), new and changed agents
        for m, _ in first[:15]:
            with service.index.lock:
                service.index.remove(m["canonical_id"])
        changed = [({**m, "job_description": m["job_description"] + " Also audits invoices.",
                     "version": "9.9.9"}, c) for m, c in first[50:60]]
        service.activate_many([(m, c, "batch-kid") for m, c in later + changed])
        later = []


def _index(embedder: Any, n: int, settings: AnnSettings | None = None) -> CapabilityIndex:
    from ans.matcher import profile_from

    agents, _ = _catalog(n, 1)
    idx = CapabilityIndex(embedder, settings=settings)
    profiles = [profile_from(m, c) for m, c in agents]
    idx.upsert_many(list(zip(profiles, idx.embed_profiles(profiles), strict=True)))
    return idx


def _counting(idx: CapabilityIndex, monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    calls: list[bool] = []
    real = idx._similarities

    def counted(*args: Any) -> Any:
        calls.append(True)
        return real(*args)

    monkeypatch.setattr(idx, "_similarities", counted)
    return calls


def test_a_prefetched_scan_is_used_only_while_the_rows_are_unchanged(
    embedder: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    idx = _index(embedder, 120)
    fresh = _index(embedder, 120)  # the same agents, never prefetched
    intents = [
        "audit smart contracts for reentrancy",
        "translate documents into German and summarize them",  # a compound intent
        "book flights",
    ]
    calls = _counting(idx, monkeypatch)
    assert idx.prefetch(intents + intents[:1]) == 3
    for intent in intents:
        got, want = idx.query(intent, None), fresh.query(intent, None)
        assert np.array_equal(got.final, want.final)
    assert calls == []  # all three took their columns of the batch
    # a restricted query is not exhaustive: it scans on its own
    idx.query(intents[0], ("tags",))
    assert len(calls) == 1
    # an intent the batch did not hold scans on its own
    idx.query("forecast the weather", None)
    assert len(calls) == 2

    # a write to the rows: the batch is stale, the query scans again and sees the write
    victim = idx.ids()[0]
    idx.remove(victim)
    fresh.remove(victim)
    got, want = idx.query(intents[0], None), fresh.query(intents[0], None)
    assert len(calls) == 3
    assert np.array_equal(got.final, want.final)

    # a single intent is no batch
    assert idx.prefetch(intents[:1]) == 0


def test_no_prefetch_where_queries_take_candidates(embedder: Any) -> None:
    idx = _index(embedder, 120, AnnSettings(exact_max=50, candidates=16, nprobe=4, train_size=100))
    assert not idx.batches_scans
    assert idx.prefetch(["audit smart contracts", "book flights"]) == 0


class FakeMatcher:
    def __init__(self, fail: bool = False, applies: bool = True) -> None:
        self.calls: list[list[str]] = []
        self.fail = fail
        self.batches_scans = applies

    def prefetch(self, intents: list[str]) -> int:
        self.calls.append(intents)
        if self.fail:
            raise RuntimeError("boom")
        return len(intents)


def test_scan_batch_gathers_one_loop_turn() -> None:
    matcher = FakeMatcher()
    batch = ScanBatch(lambda: matcher)  # type: ignore[arg-type, return-value]

    async def run() -> None:
        await asyncio.gather(batch.join("a", None), batch.join("b", None), batch.join("c", None))
        await batch.join("alone", None)  # nobody else this turn: no batch
        await batch.join(None, None)  # no intent: does not wait
        await batch.join("restricted", ("tags",))  # restricted: does not wait

    asyncio.run(run())
    assert matcher.calls == [["a", "b", "c"]]
    assert (batch.batches, batch.batched) == (1, 3)


@pytest.mark.parametrize("matcher", [FakeMatcher(fail=True), FakeMatcher(applies=False)])
def test_scan_batch_never_holds_a_discover_back(matcher: FakeMatcher) -> None:
    batch = ScanBatch(lambda: matcher)  # type: ignore[arg-type, return-value]

    async def run() -> list[None]:
        return await asyncio.wait_for(
            asyncio.gather(*(batch.join(f"i{k}", None) for k in range(4))), 5
        )

    assert asyncio.run(run()) == [None] * 4
    assert batch.batches == 0
    assert matcher.calls == ([[f"i{k}" for k in range(4)]] if matcher.batches_scans else [])
