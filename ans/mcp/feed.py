"""Subscriptions to the MCP registry, fed by the store's change feed: one
feed reader per process fanning out to every WebSocket subscriber of that
process.

The store is the source of truth and every write appends to its change feed
(``ans.store_records``, "The change feed"), so a subscriber on any replica
(worker or node over one PostgreSQL) sees an announcement made on any other;
nothing here listens to in-process events.

:class:`FeedHub` runs one daemon thread while at least one subscriber exists
(none otherwise: an idle registry costs nothing): it waits on the feed
(``wait_for_change``: LISTEN/NOTIFY on PostgreSQL, a poll on SQLite), reads
the changes after its position in batches, asks the :class:`AgentSource`
which of them are MCP agents and what they are now, and classifies each as

* ``new`` -- an agent this hub has not seen, first announced after its
  position started (``first_seen`` after that moment), or one it last saw
  removed;
* ``updated`` -- a known agent whose announcement changed (a heartbeat that
  changes nothing is no event: the digest is the same);
* ``removed`` -- gone from the registry (TTL expiry, lifecycle, operator).

Events go to the event loop (``call_soon_threadsafe``) and from there into
each matching subscriber's bounded queue. A subscriber whose queue is full is
*dropped*: it is marked, its connection closes it (1013), and the hub counts
it; a queue never grows past its bound, whatever a client does.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson
import structlog

from ans.protocol.jcs import canonicalize

from ..store_records import Change, RegistryStore

log = structlog.get_logger("ans.mcp.feed")

BATCH = 256  # feed changes read at a time
WAIT = 1.0  # s: one wait_for_change; the thread checks for its stop between waits
NEW, UPDATED, REMOVED = "new", "updated", "removed"


@dataclass(frozen=True, slots=True)
class AgentState:
    """What the registry holds now for the MCP agent behind a feed change:
    its ``agent`` object (None: it is gone) and when it was first seen
    (seconds since the epoch; None when unknown)."""

    agent_id: str
    agent: Mapping[str, Any] | None
    first_seen: float | None = None
    registry: Mapping[str, Any] | None = None  # what the registry says of it (tier, TTL...)


class AgentSource(Protocol):
    """The registry's side of the feed (implemented over McpRegistry's store)."""

    def states(self, changes: Sequence[Change]) -> list[AgentState]:
        """The MCP agents among ``changes`` and their state now (changes that
        are not MCP agents are left out)."""
        ...


@dataclass(frozen=True, slots=True)
class Event:
    """One change of one agent, as streamed to subscribers."""

    kind: str  # NEW | UPDATED | REMOVED
    seq: int
    agent_id: str
    agent: Mapping[str, Any] | None  # the agent object (for REMOVED: the last one known)
    capabilities: frozenset[str]
    registry: Mapping[str, Any] | None = None


@dataclass(eq=False)
class Subscriber:
    """One subscription: its filter and its bounded queue of events."""

    id: str
    capability: str | None  # None: every agent
    agent_id: str | None
    queue: asyncio.Queue[Event]
    dropped: bool = False
    delivered: int = 0
    high_water: int = 0  # the longest the queue has been
    on_drop: Callable[[Subscriber], None] | None = field(default=None, repr=False)

    def wants(self, event: Event) -> bool:
        if self.agent_id is not None and event.agent_id != self.agent_id:
            return False
        return self.capability is None or self.capability in event.capabilities


def digest_of(agent: Mapping[str, Any]) -> bytes:
    return hashlib.sha256(canonicalize(dict(agent))).digest()


def capability_names(agent: Mapping[str, Any] | None) -> frozenset[str]:
    caps = (agent or {}).get("capabilities")
    return frozenset(str(k) for k in caps) if isinstance(caps, Mapping) else frozenset()


class FeedHub:
    def __init__(
        self,
        store: RegistryStore,
        source: AgentSource,
        queue_size: int,
        *,
        clock: Callable[[], float],
        wait: float = WAIT,
        batch: int = BATCH,
        max_subscribers: int = 10_000,
    ) -> None:
        self.store = store
        self.source = source
        self.queue_size = queue_size
        self.clock = clock
        self.wait = wait
        self.batch = batch
        self.max_subscribers = max_subscribers
        self.subscribers: dict[str, Subscriber] = {}
        self.dropped = 0  # subscribers dropped for a full queue, since start
        self.events = 0  # events classified, since start
        self.position = 0  # every change up to this seq has been fanned out
        self._since = 0.0  # when the reader started: agents first seen later are new
        # agent_id -> (digest, capability names, agent) of what was last streamed
        self._known: dict[str, tuple[bytes, frozenset[str], Mapping[str, Any]]] = {}
        self._ids = itertools.count(1)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()  # the thread's start/stop
        self._stopping: list[threading.Thread] = []  # readers told to stop (joined at close)

    # -- subscribers (event loop) ----------------------------------------------------
    async def subscribe(
        self,
        capability: str | None,
        agent_id: str | None,
        on_drop: Callable[[Subscriber], None] | None = None,
    ) -> Subscriber:
        """A new subscriber, receiving every change committed after this call
        returns (the reader is started, at the feed's head, if it was idle).
        RuntimeError past ``max_subscribers``."""
        if len(self.subscribers) >= self.max_subscribers:
            raise RuntimeError(f"this process serves at most {self.max_subscribers} subscriptions")
        self._loop = asyncio.get_running_loop()
        sub = Subscriber(
            f"s{next(self._ids)}",
            capability,
            agent_id,
            asyncio.Queue(self.queue_size),
            on_drop=on_drop,
        )
        await asyncio.to_thread(self._start)
        self.subscribers[sub.id] = sub
        return sub

    def unsubscribe(self, sub: Subscriber) -> None:
        self.subscribers.pop(sub.id, None)
        if not self.subscribers:
            self._stop_reader()

    def fan_out(self, events: Sequence[Event]) -> None:
        """Queue ``events`` for every subscriber that wants them (event loop)."""
        for event in events:
            for sub in list(self.subscribers.values()):
                if sub.dropped or not sub.wants(event):
                    continue
                try:
                    sub.queue.put_nowait(event)
                except asyncio.QueueFull:
                    self._drop(sub)
                    continue
                sub.high_water = max(sub.high_water, sub.queue.qsize())

    def _drop(self, sub: Subscriber) -> None:
        sub.dropped = True
        self.dropped += 1
        self.subscribers.pop(sub.id, None)
        log.warning("slow subscriber dropped", subscription=sub.id, queued=sub.queue.qsize())
        if sub.on_drop is not None:
            sub.on_drop(sub)
        if not self.subscribers:
            self._stop_reader()

    # -- the reader (its own thread) -------------------------------------------------
    def _start(self) -> None:
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            self.position = self.store.max_seq()
            self._since = self.clock()
            self._known.clear()  # what a previous reader streamed may be stale
            self._stop = threading.Event()
            self._thread = threading.Thread(target=self._run, name="ans-mcp-feed", daemon=True)
            self._thread.start()

    def _stop_reader(self) -> None:
        with self._lock:
            self._stop.set()
            if self._thread is not None:
                self._stopping = [t for t in self._stopping if t.is_alive()]
                self._stopping.append(self._thread)
            self._thread = None

    async def start(self) -> None:
        """(a lifespan task) The reader starts with the first subscriber."""

    async def stop(self) -> None:
        """(a lifespan task) :meth:`close`, off the event loop."""
        await asyncio.to_thread(self.close)

    def close(self) -> None:
        """Stop the reader and forget every subscriber (shutdown)."""
        self.subscribers.clear()
        with self._lock:
            self._stop.set()
            threads = [*self._stopping, *([self._thread] if self._thread else [])]
            self._thread, self._stopping = None, []
        for thread in threads:  # none reads the store once it is closed
            thread.join(timeout=5)

    def _run(self) -> None:
        stop, position = self._stop, self.position  # this reader's own (a later one has its own)
        while not stop.is_set():
            try:
                head = self.store.wait_for_change(position, self.wait)
                while head > position and not stop.is_set():
                    events, position = self.read(position, head)
                    loop = self._loop
                    if events and loop is not None and not loop.is_closed() and not stop.is_set():
                        loop.call_soon_threadsafe(self.fan_out, events)
                if not stop.is_set():
                    self.position = position
            except Exception:  # the store is unreachable for now: try again after a wait
                log.exception("MCP change feed not read")
                stop.wait(self.wait)

    def read(self, position: int, head: int) -> tuple[list[Event], int]:
        """The events of the feed changes after ``position`` (one batch) and
        the position they bring the hub to."""
        changes = self.store.changes_since(position, limit=self.batch)
        if not changes:
            return [], head
        events = self.classify(changes, self.source.states(changes))
        return events, max(head if len(changes) < self.batch else 0, changes[-1].seq)

    def classify(self, changes: Sequence[Change], states: Sequence[AgentState]) -> list[Event]:
        seqs: dict[str, int] = {}
        for ch in changes:
            seqs[ch.canonical_id] = ch.seq
        seq = changes[-1].seq if changes else self.position
        out: list[Event] = []
        for st in states:
            known = self._known.get(st.agent_id)
            if st.agent is None:  # removed (whether or not this hub streamed it before)
                self._known.pop(st.agent_id, None)
                caps = known[1] if known else frozenset()
                last = known[2] if known else {"agent_id": st.agent_id}
                out.append(Event(REMOVED, seq, st.agent_id, last, caps))
                continue
            digest = digest_of(st.agent)
            if known is not None and known[0] == digest:
                continue  # a heartbeat: same announcement
            caps = capability_names(st.agent)
            self._known[st.agent_id] = (digest, caps, st.agent)
            fresh = known is None and (st.first_seen is None or st.first_seen >= self._since)
            kind = NEW if fresh else UPDATED
            out.append(Event(kind, seq, st.agent_id, st.agent, caps, st.registry))
        self.events += len(out)
        return out


def event_body(event: Event, sub: Subscriber, version: str) -> dict[str, Any]:
    """The RESPONSE frame body of ``event`` for ``sub``."""
    body: dict[str, Any] = {
        "protocol_version": version,
        "event": event.kind,
        "subscription": sub.id,
        "seq": event.seq,
        "agent": dict(event.agent) if event.agent is not None else {"agent_id": event.agent_id},
        "matched": True,
    }
    if event.registry is not None:
        body["registry"] = dict(event.registry)
    return body


def size_of(event: Event) -> int:
    """Bytes of ``event``'s agent as JSON (stats, tests)."""
    return len(orjson.dumps(dict(event.agent or {})))
