"""The in-memory index every DISCOVER reads and every write updates.

:class:`LiveIndex` owns the compact registry (:mod:`ans.registry`, gate
columns only), the capability matcher's contents, the availability marks
(discovery draft 6.2), the withdrawn ids (Suspended, Revoked, Deprecated:
never served, not even from a peer), a cache of result fields read from the
store (:mod:`.fields_cache`), and the two locks:

* ``lock`` (re-entrant) guards the registry, the marks and the matcher;
* ``write_lock`` serialises the writers (ACTIVATE, bulk import, lifecycle
  events, freshness writes, snapshots) so store and index agree. With
  ``ans serve --workers N`` it is the change-feed follower's write section
  (:meth:`follow`, :mod:`ans.follower`): the writers of every worker, one at
  a time, each having applied the others' changes first.

:meth:`catch_up` (before every DISCOVER and DESCRIBE) applies what other
workers committed; a no-op in a single process.

It does no verification and writes nothing to the store.
"""

from __future__ import annotations

import threading
from contextlib import AbstractContextManager
from typing import Any, Protocol

import orjson

from ..config import RankingWeights
from ..matcher import CapabilityMatcher
from ..registry import AgentEntry, Registry
from ..result_fields import FIELDS_FORMAT, read_stored_fields, result_fields
from ..store import RegistryStore
from .fields_cache import FieldsCache


class FeedFollower(Protocol):
    """What the index needs of a change-feed follower (:class:`ans.follower.Follower`)."""

    worker: int  # which worker of ``ans serve --workers N`` this is

    def catch_up(self) -> None: ...
    def __enter__(self) -> Any: ...
    def __exit__(self, *exc: Any) -> None: ...


class LiveIndex:
    def __init__(
        self, store: RegistryStore, matcher: CapabilityMatcher, weights: RankingWeights
    ) -> None:
        self.store = store
        self.matcher = matcher
        self.registry = Registry(weights)
        # Availability signals (discovery draft 6.2): canonical_id -> reason
        # ("suspended", "at_capacity", "not_responding", ...) for indexed
        # agents that are Active but should not be routed to right now.
        self.unavailable: dict[str, str] = {}
        # Agents that must never be served, not even from a peer: Suspended
        # ones and tombstoned (Revoked/Deprecated) canonical ids -> state.
        self.withdrawn: dict[str, str] = {}
        self.lock = threading.RLock()
        self.write_lock: AbstractContextManager[Any] = threading.Lock()
        self.follower: FeedFollower | None = None
        self.fields_cache = FieldsCache()

    def __len__(self) -> int:
        return len(self.registry)

    # -- other workers' writes ------------------------------------------------------------
    def follow(self, follower: FeedFollower) -> None:
        """Follow the store's change feed (one of several worker processes):
        :meth:`catch_up` applies it, and writers run in the follower's write
        section."""
        self.follower = follower
        self.write_lock = follower

    def catch_up(self) -> None:
        """Apply every change another worker committed and this one has not
        yet (one indexed read of the store when there is none)."""
        if self.follower is not None:
            self.follower.catch_up()

    def ids(self) -> list[str]:
        """The canonical IDs currently in the index."""
        with self.lock:
            return list(self.registry)

    # -- availability (discovery draft 6.2) -------------------------------------------
    def mark_availability(self, canonical_id: str, reason: str | None) -> None:
        """Mark an indexed agent unavailable (with a reason) or available (None)."""
        with self.lock:
            if reason is None:
                self.unavailable.pop(canonical_id, None)
            elif canonical_id in self.registry:
                self.unavailable[canonical_id] = reason

    def unavailable_reason(self, canonical_id: str) -> str | None:
        """Why an indexed agent should not be routed to now, or None if it may be."""
        return self.unavailable.get(canonical_id)

    # -- mutation (caller holds ``lock``) ---------------------------------------------
    def put(self, entry: AgentEntry) -> None:
        """Put an entry in the registry (caller holds the lock); the registry
        keeps the per-(zone, tier) counts that bound how many agents could
        pass the gates."""
        self.registry.put(entry)
        self.forget_fields(entry.canonical_id)

    def remove(self, canonical_id: str) -> AgentEntry | None:
        """Take an agent out of the registry, the gate counts, the availability
        marks and the capability index (caller holds the lock). The store row
        is the caller's business."""
        old = self.registry.get(canonical_id)
        if old is None:
            return None
        self.registry.remove(canonical_id)
        self.forget_fields(canonical_id)
        self.unavailable.pop(canonical_id, None)
        self.matcher.remove(canonical_id)
        return old

    # -- result fields ------------------------------------------------------------------
    def forget_fields(self, canonical_id: str) -> None:
        self.fields_cache.forget(canonical_id)

    def _stored_fields(self, canonical_ids: list[str]) -> dict[str, tuple[bytes, dict[str, Any]]]:
        """The fields as stored with each row (one small document an agent),
        with that document; derived from the manifest and capability document
        for the rows that predate that column or hold another format (their
        document is then the derived fields' stored form)."""
        out: dict[str, tuple[bytes, dict[str, Any]]] = {}
        derive = []
        for cid, blob in self.store.stored_result_fields(canonical_ids).items():
            fields = read_stored_fields(blob)
            if fields is None or blob is None:
                derive.append(cid)
            else:
                out[cid] = (blob, fields)
        if derive:
            for cid, a in self.store.get_many(derive).items():
                fields = result_fields(a.manifest, a.capabilities, a.updated_at)
                out[cid] = (orjson.dumps([FIELDS_FORMAT, fields]), fields)
        return out

    def result_fields(self, canonical_ids: list[str]) -> dict[str, dict[str, Any]]:
        """Result item fields of these agents, from the cache or the store
        (an agent no longer stored is left out)."""
        cache = self.fields_cache
        with self.lock:
            gen = cache.generation
            out, held, missing = cache.lookup(canonical_ids)
        if not held and not missing:
            return out
        decoded: dict[str, dict[str, Any]] = {}
        for cid, blob in held:
            fields = read_stored_fields(blob)  # only current-format documents are kept
            if fields is None:
                missing.append(cid)
            else:
                decoded[cid] = fields
        read: dict[str, bytes] = {}
        if missing:
            for cid, (blob, fields) in self._stored_fields(missing).items():
                decoded[cid] = fields
                read[cid] = blob
        out.update(decoded)
        with self.lock:
            cache.keep(decoded, read, gen, len(self.registry))
        return out
