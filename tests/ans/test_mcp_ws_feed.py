"""The MCP subscriptions' feed hub (ans.mcp.feed): new / updated / removed
from the store's change feed, heartbeats are no event, filters, and the
bounded queue: a subscriber that does not drain is dropped, never grown."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from typing import Any

from ans.mcp.feed import NEW, REMOVED, UPDATED, AgentState, FeedHub
from ans.store_records import Change


class Feed:
    """An in-memory change feed with the store's feed methods."""

    def __init__(self) -> None:
        self.changes: list[Change] = []
        self.cond = threading.Condition()

    def append(self, cid: str) -> None:
        with self.cond:
            self.changes.append(Change(len(self.changes) + 1, cid, "Active"))
            self.cond.notify_all()

    def max_seq(self) -> int:
        return len(self.changes)

    def changes_since(self, seq: int, limit: int | None = None) -> list[Change]:
        out = [c for c in self.changes if c.seq > seq]
        return out[:limit] if limit else out

    def wait_for_change(self, seq: int, timeout: float) -> int:
        with self.cond:
            self.cond.wait_for(lambda: len(self.changes) > seq, timeout)
            return len(self.changes)


class Agents:
    """The registry's side: agent_id -> agent (None: removed)."""

    def __init__(self) -> None:
        self.now: dict[str, dict[str, Any] | None] = {}
        self.first: dict[str, float] = {}

    def states(self, changes: Sequence[Change]) -> list[AgentState]:
        return [
            AgentState(c.canonical_id, self.now.get(c.canonical_id), self.first.get(c.canonical_id))
            for c in changes
            if c.canonical_id in self.now
        ]


def agent(aid: str, caps: dict[str, str], name: str = "a") -> dict[str, Any]:
    return {"agent_id": aid, "agent_name": name, "capabilities": caps}


async def next_event(sub: Any) -> Any:
    return await asyncio.wait_for(sub.queue.get(), 10)


def test_new_updated_removed_from_the_feed_with_filters() -> None:
    async def run() -> None:
        feed, agents = Feed(), Agents()
        clock = [100.0]
        hub = FeedHub(feed, agents, 16, clock=lambda: clock[0], wait=0.05)  # type: ignore[arg-type]
        agents.now["old"], agents.first["old"] = agent("old", {"metrics": "1"}), 50.0
        feed.append("old")  # before anyone subscribed: not streamed
        every = await hub.subscribe(None, None)
        metrics = await hub.subscribe("metrics", None)
        one = await hub.subscribe(None, "n1")
        agents.now["n1"], agents.first["n1"] = agent("n1", {"store": "1"}), 101.0
        feed.append("n1")
        ev = await next_event(every)
        assert (ev.kind, ev.agent_id, ev.agent["capabilities"]) == (NEW, "n1", {"store": "1"})
        assert (await next_event(one)).kind == NEW
        feed.append("n1")  # a heartbeat: same announcement, no event
        agents.now["old"] = agent("old", {"metrics": "2"})
        feed.append("old")  # announced before the hub started: updated
        ev = await next_event(every)
        assert (ev.kind, ev.agent_id) == (UPDATED, "old")
        assert (await next_event(metrics)).agent_id == "old"
        agents.now["old"] = None
        feed.append("old")
        ev = await next_event(every)
        assert (ev.kind, ev.agent_id) == (REMOVED, "old")
        assert ev.agent["capabilities"] == {"metrics": "2"}  # the last one known
        assert (await next_event(metrics)).kind == REMOVED  # filtered on the known caps
        assert one.queue.empty() and metrics.queue.empty() and every.queue.empty()
        assert hub.dropped == 0
        for s in (every, metrics, one):
            hub.unsubscribe(s)
        hub.close()

    asyncio.run(run())


def test_a_subscriber_that_does_not_drain_is_dropped_and_its_queue_stays_bounded() -> None:
    async def run() -> None:
        feed, agents = Feed(), Agents()
        hub = FeedHub(feed, agents, 4, clock=lambda: 0.0, wait=0.05)  # type: ignore[arg-type]
        dropped: list[str] = []
        slow = await hub.subscribe(None, None, on_drop=lambda s: dropped.append(s.id))
        fast = await hub.subscribe(None, None)
        got = 0
        for i in range(40):
            agents.now[f"a{i}"] = agent(f"a{i}", {"c": str(i)})
            feed.append(f"a{i}")
            await next_event(fast)  # the fast one keeps up
            got += 1
        assert got == 40
        assert dropped == [slow.id] and slow.dropped and hub.dropped == 1
        assert slow.high_water <= 4 and slow.queue.qsize() <= 4  # never past its bound
        assert slow.id not in hub.subscribers and fast.id in hub.subscribers
        hub.close()

    asyncio.run(run())


def test_the_reader_runs_only_while_someone_subscribes() -> None:
    async def run() -> None:
        feed, agents = Feed(), Agents()
        hub = FeedHub(feed, agents, 4, clock=lambda: 0.0, wait=0.05)  # type: ignore[arg-type]
        assert hub._thread is None
        sub = await hub.subscribe(None, None)
        assert hub._thread is not None and hub._thread.is_alive()
        thread = hub._thread
        hub.unsubscribe(sub)
        await asyncio.to_thread(thread.join, 5)
        assert not thread.is_alive()

    asyncio.run(run())
