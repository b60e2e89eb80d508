"""The result fields of recently returned agents, kept in two tiers so that a
DISCOVER seldom reads the store for them.

* **Decoded** (``dict_entries``): the fields as the item builder reads them,
  for the agents returned most recently; a hit costs a dict lookup.
* **Stored bytes** (``blob_bytes``): the row's ``result_fields`` document
  (``[FIELDS_FORMAT, fields]``, ~0.9 KB) for many more agents; a hit costs
  one ``orjson.loads`` (~2.5 us) instead of a store read (~10-20 us an agent at
  100k agents: the row's page is seldom in SQLite's cache).

At the same memory the bytes hold ~4x more agents than decoded dicts (a
decoded entry's dicts and lists take ~3.5 KB). The load benchmark's 2,000
queries return 15,628 distinct agents at 100k agents (13.7 MB of documents):
the 4,096 decoded entries this replaced held a quarter of them, and a
DISCOVER's result fields cost ~245 us (store reads); from the bytes tier,
~75 us (lookup, ~2.5 us a decode, the decoded tier's upkeep).

The decoded tier holds 8,192 agents (~23 MB: a decoded entry is ~2.9 KB)
while the catalog has at most 250,000 agents, 1,024 above. At 10k agents the
load's answers fall within 8,192 agents, so every hit is decoded already
(1,024 entries held 28% of them; the other 72% cost a decode, and the churn
the deallocation of an evicted entry: ~5% of a DISCOVER in process); at a
million agents the answers spread over far more agents than either size
holds, and two workers' 46 MB count against the memory target.

Not thread-safe: the live index calls it under its lock, and decodes and
reads the store outside it. Every re-index of an agent drops both of its
entries (:meth:`forget`) and bumps ``generation``, so that a read that raced
a write is served but not kept.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

# the catalog size above which a worker's caches shrink (the facet file's too),
# named here as well for the callers that size this cache
from ..index.facet_file import LARGE_CATALOG as LARGE_CATALOG
from ..index.facet_file import catalog_sized

DICT_ENTRIES = 8192
DICT_ENTRIES_LARGE = 1024  # decoded entries above LARGE_CATALOG agents
BLOB_BYTES = 16 << 20
# At start-up a catalog of at most LARGE_CATALOG agents has every stored
# document put in the bytes tier (:meth:`FieldsCache.hold`), up to this many
# bytes: then an agent never returned before costs a decode, not a store read
# (100k agents: 85 MB, read in 0.3-0.65 s; a DISCOVER of an intent never
# answered before spent ~310 us in result fields, ~45 held: docs/query-profile.md,
# eighteenth round). The tier then keeps a quarter more room, for the agents
# that arrive later.
HOLD_BYTES = 384 << 20


def holds_whole(agents: int) -> bool:
    """Whether a catalog of ``agents`` has its stored documents held at start-up."""
    return agents <= LARGE_CATALOG


class FieldsCache:
    def __init__(
        self,
        dict_entries: int = DICT_ENTRIES,
        blob_bytes: int = BLOB_BYTES,
        dict_entries_large: int = DICT_ENTRIES_LARGE,
    ) -> None:
        self.dict_entries = dict_entries
        self.dict_entries_large = dict_entries_large
        self.blob_bytes = blob_bytes
        self._dicts: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._blobs: OrderedDict[str, bytes] = OrderedDict()
        self._held = 0  # bytes in _blobs
        self.generation = 0

    def hold(self, rows: Iterable[tuple[str, bytes]], agents: int) -> int:
        """Put the stored documents ``rows`` (every Active agent's, at start-up)
        in the bytes tier when the catalog (``agents``) is at most
        LARGE_CATALOG, until HOLD_BYTES; returns how many are held."""
        if not holds_whole(agents):
            return 0
        stored, held = self._blobs, 0
        for cid, blob in rows:
            if self._held + len(blob) > HOLD_BYTES:
                break
            old = stored.get(cid)
            if old is not None:
                self._held -= len(old)
            stored[cid] = blob
            self._held += len(blob)
            held += 1
        self.blob_bytes = max(self.blob_bytes, min(HOLD_BYTES, self._held + self._held // 4))
        return held

    def forget(self, canonical_id: str) -> None:
        self._dicts.pop(canonical_id, None)
        blob = self._blobs.pop(canonical_id, None)
        if blob is not None:
            self._held -= len(blob)
        self.generation += 1

    def lookup(
        self, canonical_ids: list[str]
    ) -> tuple[dict[str, dict[str, Any]], list[tuple[str, bytes]], list[str]]:
        """(decoded hits, stored-bytes hits to decode, misses)."""
        found: dict[str, dict[str, Any]] = {}
        blobs: list[tuple[str, bytes]] = []
        missing: list[str] = []
        dicts, stored = self._dicts, self._blobs
        for cid in canonical_ids:
            hit = dicts.get(cid)
            if hit is not None:
                dicts.move_to_end(cid)
                found[cid] = hit
                continue
            blob = stored.get(cid)
            if blob is not None:
                stored.move_to_end(cid)
                blobs.append((cid, blob))
            else:
                missing.append(cid)
        return found, blobs, missing

    def keep(
        self,
        decoded: dict[str, dict[str, Any]],
        blobs: dict[str, bytes],
        generation: int,
        agents: int = 0,
    ) -> None:
        """Keep what a lookup's caller decoded and read, unless an agent was
        re-indexed since the lookup (``generation`` moved); ``agents``: the
        catalog's size, which sizes the decoded tier."""
        if generation != self.generation:
            return
        dicts, stored = self._dicts, self._blobs
        dicts.update(decoded)
        cap = catalog_sized(self.dict_entries, self.dict_entries_large, agents)
        while len(dicts) > cap:
            dicts.popitem(last=False)
        for cid, blob in blobs.items():
            old = stored.get(cid)
            if old is not None:
                self._held -= len(old)
            stored[cid] = blob
            self._held += len(blob)
        while self._held > self.blob_bytes and stored:
            _, old = stored.popitem(last=False)
            self._held -= len(old)
