"""The registry's slot link (matcher slot -> registry slot) stays exact under
any interleaving of matcher and registry writes, incremental or rebuilt."""

from __future__ import annotations

import random

import numpy as np

from ans.config import RankingWeights
from ans.index.slots import SlotTable
from ans.registry import AgentEntry, Registry


def entry(cid: str) -> AgentEntry:
    return AgentEntry(cid, "Active", 2, 0.8, "zone:public", "example.org", "", "kid")


def expected(table: SlotTable, registry: Registry) -> list[int]:
    return [
        -1 if c is None or c not in registry else registry.slots_of([c])[0].item()
        for c in table.id_of
    ]


def link(table: SlotTable, registry: Registry, token: object) -> list[int]:
    slots = np.arange(len(table.id_of), dtype=np.int64)
    out = registry.linked(slots, table.id_of, table.slot_of, table.take_changes(), token)
    return out.tolist()


def test_link_follows_every_write() -> None:
    rng = random.Random(7)
    table = SlotTable(8, 8, keep_profiles=False)
    registry = Registry(RankingWeights())
    ids = [f"agtp://a{i}.example/agents/x" for i in range(60)]
    for step in range(3000):
        cid = rng.choice(ids)
        op = rng.random()
        if op < 0.3:
            table.claim(cid)
        elif op < 0.45:
            table.release(cid)
        elif op < 0.75:
            registry.put(entry(cid))
        else:
            registry.remove(cid)
        if step % rng.choice((1, 3, 17)) == 0:
            assert link(table, registry, table) == expected(table, registry), step
    # a new table (a snapshot loaded): the link is rebuilt, not patched
    other = SlotTable(8, 8, keep_profiles=False)
    for cid in ids[:10]:
        other.claim(cid)
    assert link(other, registry, other) == expected(other, registry)


def test_link_unknown_slots_and_overflowed_log() -> None:
    table = SlotTable(8, 8, keep_profiles=False)
    registry = Registry(RankingWeights())
    table.claim("agtp://only-matcher.example/agents/a")
    registry.put(entry("agtp://only-registry.example/agents/b"))
    assert link(table, registry, table) == [-1]
    registry._link_log = None  # as after more than LINK_LOG_MAX writes
    registry.put(entry("agtp://only-matcher.example/agents/a"))
    assert link(table, registry, table) == expected(table, registry) == [1]
