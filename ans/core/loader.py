"""Start-up and snapshots: filling the live index from the store.

:class:`IndexLoader` rebuilds the registry from the store's index rows and
the capability index either from a persisted snapshot (already loaded into
the matcher) plus the store's changes since its ``change_seq``, or from
scratch in batches. It also writes snapshots, skipping them when nothing
changed since the one we started from.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from contextlib import closing
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np
import structlog

from ans.governance.audit import rfc3339
from ans.governance.profile_metadata import attrs_of

from ..index.snapshot import SLOT_IDS
from ..matcher import profile_from
from ..profile_columns import decode_attrs
from ..profile_metadata import SELF_ASSERTED_KID
from ..store import StoredAgent
from .context import CoreContext
from .fields_cache import holds_whole
from .live_index import LiveIndex

log = structlog.get_logger("ans")
# Agents embedded and indexed per batch at start-up and by ans import.
INDEX_BATCH = 1024
# The snapshot meta keys of the profile's filter columns (ans.profile_columns).
PROFILE_VALUES = "profile_values"
PROFILE_ARRAY = "profile_col_"


def batches(items: Iterable[Any], size: int) -> Iterable[list[Any]]:
    it = iter(items)
    while chunk := list(islice(it, size)):
        yield chunk


class IndexLoader:
    def __init__(self, ctx: CoreContext, index: LiveIndex) -> None:
        self.ctx = ctx
        self.index = index
        # Where the capability index came from at start-up, and the
        # change_seq it reflects (a snapshot is written only past it).
        self.loaded_from = "empty"
        self.stats: dict[str, Any] = {}
        self._snapshot_seq: int | None = None

    def load(self, snapshot: Mapping[str, Any] | None = None, *, hold_fields: bool = True) -> int:
        """Rebuild the registry from the store, and the capability index from
        ``snapshot`` (the meta of a snapshot already loaded into the matcher)
        plus the store's changes since, or from scratch when None.
        ``hold_fields``: also read every agent's stored result fields into
        memory (a server; ``ans import`` answers no DISCOVER).

        An Active agent whose manifest was signed by a governance key that is
        no longer trusted is not indexed (it stays in the store, and comes
        back if the key is trusted again)."""
        store, matcher, index = self.ctx.store, self.ctx.matcher, self.index
        t0 = time.perf_counter()
        index.withdrawn = store.withdrawn()
        skipped = 0
        for rows in batches(store.iter_index_rows(), 65536):
            trusted = []
            for row in rows:
                if (
                    self.ctx.governance_keys.get(row.signer_kid) is None
                    and row.signer_kid != SELF_ASSERTED_KID  # signed by no key at all
                ):
                    self._deindexed(row.canonical_id, row.signer_kid)
                    skipped += 1
                else:
                    trusted.append(row)
            with index.lock:
                index.registry.put_many(trusted)
        t1 = time.perf_counter()
        registry = index.registry
        delta = dropped = embedded = 0
        if snapshot is not None:
            seq = int(snapshot["change_seq"])
            for agents in batches(store.changed_since(seq), INDEX_BATCH):
                delta += len(agents)
                fresh = [a for a in agents if a.canonical_id in registry]
                for a in agents:
                    if a.canonical_id not in registry:
                        matcher.remove(a.canonical_id)
                self.embed_and_upsert(fresh)
                self.set_profiles(fresh)  # newer than the snapshot's columns
                embedded += len(fresh)
            t2 = time.perf_counter()
            indexed = set(matcher.ids())
            for cid in indexed - registry.keys():
                matcher.remove(cid)
                dropped += 1
            missing = [cid for cid in registry if cid not in indexed]
            for chunk in batches(missing, INDEX_BATCH):
                found = store.get_many(chunk)
                got = [found[c] for c in chunk if c in found]
                self.embed_and_upsert(got)
                self.set_profiles(got)
                embedded += len(chunk)
            # The profile's filter columns: from the snapshot's meta (written
            # with it), the changed agents recomputed above; an older snapshot
            # without them: one pass over the stored documents.
            tp = time.perf_counter()
            self.restore_profiles(snapshot)
            profile_s = time.perf_counter() - tp
            self.loaded_from = "snapshot"
            self._snapshot_seq = seq if delta == 0 and dropped == 0 and not missing else None
        else:
            t2 = t1
            profile_s = 0.0  # inside index_s: done as each batch is embedded
            for agents in batches(
                (a for a in store.iter_active() if a.canonical_id in registry), INDEX_BATCH
            ):
                self.embed_and_upsert(agents)
                self.set_profiles(agents)
                embedded += len(agents)
            self.loaded_from = "rebuild"
        # Postings the batches above added in bulk are merged here, once, not by
        # the first query (with --workers: by every worker, after the fork).
        matcher.settle()
        t3 = time.perf_counter()
        # every indexed agent's result fields in memory (a catalog of at most
        # LARGE_CATALOG agents; ans.core.fields_cache): read before the fork
        held = 0
        if hold_fields and holds_whole(len(registry)):
            # streamed (hold stops reading at its byte bound); at start-up no
            # DISCOVER waits on the lock
            with closing(store.iter_result_fields()) as docs, index.lock:
                fields = ((cid, blob) for cid, blob in docs if cid in registry)
                held = index.fields_cache.hold(fields, len(registry))
        t4 = time.perf_counter()
        self.stats = {
            "index_loaded_from": self.loaded_from,
            "agents": len(registry),
            "not_indexed_untrusted_key": skipped,
            "delta_rows": delta,
            "dropped": dropped,
            "embedded": embedded,
            "registry_s": round(t1 - t0, 3),
            "delta_s": round(t2 - t1, 3),
            "index_s": round(t3 - t2, 3),
            "profile_s": round(profile_s, 3),
            "fields_held": held,
            "fields_s": round(t4 - t3, 3),
            "total_s": round(t4 - t0, 3),
        }
        log.info("cold start", **self.stats)
        return len(registry)

    def _deindexed(self, canonical_id: str, signer_kid: str) -> None:
        self.ctx.audit.record(
            "deindexed",
            reason="signing_key_removed",
            canonical_id=canonical_id,
            signer_kid=signer_kid,
        )
        log.warning(
            "agent not indexed: its governance key is no longer trusted",
            canonical_id=canonical_id,
            signer_kid=signer_kid,
        )

    def restore_profiles(self, snapshot: Mapping[str, Any]) -> None:
        """Profile attributes from a snapshot (its columns; a snapshot of an
        older version: a dict by canonical id), then the stored documents of
        every indexed agent they do not cover (all of them when the snapshot
        has none)."""
        registry = self.index.registry
        values, ids = snapshot.get(PROFILE_VALUES), snapshot.get(SLOT_IDS)
        old = snapshot.get("profile_columns")
        with self.index.lock:
            if isinstance(values, dict) and isinstance(ids, list):
                arrays = {
                    k.removeprefix(PROFILE_ARRAY): v
                    for k, v in snapshot.items()
                    if k.startswith(PROFILE_ARRAY) and isinstance(v, np.ndarray)
                }
                try:
                    registry.restore_profiles(ids, arrays, values)
                except (KeyError, ValueError, IndexError, TypeError) as exc:
                    log.warning("snapshot profile columns unreadable", error=str(exc)[:200])
            elif isinstance(old, dict):
                items = [
                    (cid, attrs)
                    for cid, raw in old.items()
                    if (attrs := decode_attrs(raw)) is not None and not registry.has_profile(cid)
                ]
                registry.set_profiles(items)
            missing = [cid for cid in registry if not registry.has_profile(cid)]
        if len(missing) > len(registry) // 2:  # cheaper as one scan
            for agents in batches(self.ctx.store.iter_active(), INDEX_BATCH):
                self.set_profiles(agents)
            return
        for chunk in batches(missing, INDEX_BATCH):
            self.set_profiles(list(self.ctx.store.get_many(chunk).values()))

    def set_profiles(self, agents: Sequence[StoredAgent]) -> None:
        """The profile's filter attributes (tags, protocols, regions, expiry,
        metadata age) of stored agents already in the registry."""
        attrs = [
            (a.canonical_id, attrs_of(a.manifest, a.capabilities, a.updated_at)) for a in agents
        ]
        with self.index.lock:
            self.index.registry.set_profiles(attrs)

    def embed_and_upsert(self, agents: Sequence[StoredAgent]) -> None:
        """Embed a batch of stored agents (outside any lock) and put them in the
        capability index."""
        if not agents:
            return
        matcher = self.ctx.matcher
        profiles = [profile_from(a.manifest, a.capabilities) for a in agents]
        vectors = matcher.embed_profiles(profiles)
        with self.index.lock:
            matcher.upsert_many(list(zip(profiles, vectors, strict=True)))

    def save_snapshot(self, directory: Path, *, force: bool = False) -> bool:
        """Persist the capability index (``CapabilityIndex.save``) with the
        store's change_seq, under the write lock so both agree. Skipped when
        nothing changed since the snapshot we started from (unless ``force``)."""
        index = self.index
        with index.write_lock:
            seq = self.ctx.store.max_seq()
            if not force and seq == self._snapshot_seq:
                return False
            t0 = time.perf_counter()
            with index.lock:
                meta = {
                    "change_seq": seq,
                    "count": len(self.ctx.matcher),
                    "signer_kids": index.registry.signer_kids(),
                    "written_at": rfc3339(self.ctx.clock()),
                }
                # the profile's filter attributes (ans.profile_columns), by slot
                # of the snapshot: arrays (in its arrays file) and value tables
                arrays, values = index.registry.profile_state(self.ctx.matcher.slot_ids())
                meta[PROFILE_VALUES] = values
                meta.update({PROFILE_ARRAY + k: v for k, v in arrays.items()})
                self.ctx.matcher.save(directory, meta)
            self._snapshot_seq = seq
        log.info(
            "index snapshot written",
            directory=str(directory),
            change_seq=seq,
            count=meta["count"],
            seconds=round(time.perf_counter() - t0, 3),
        )
        return True
