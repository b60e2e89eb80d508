"""The slot table: every indexed agent's vectors, flags, tags and BM25 postings,
stored by slot (a dense integer id reused after removal).

Owns slot allocation (grow, reuse, free), what one slot holds (description
and capability vectors, example vectors, tag and lexical postings, the
has-examples flag and tag count, a generation that changes on every
re-upsert), and the slot <-> canonical id maps. No locking and no search: the
index (:mod:`ans.index.capability`) calls it under its lock.
"""

from __future__ import annotations

import operator
import sys
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from ..examples_index import ExampleBlocks
from ..lexical import LexicalIndex
from ..postings import SlotPostings
from .embedder import normalize_rows
from .int8_rows import QRows
from .profiles import FACET_INDEX, FACETS, CapabilityProfile, ProfileVectors, profile_digest

Slots = npt.NDArray[np.int64]

# At most this many examples of an agent are indexed.
MAX_EXAMPLES = 64
# Slot assignments logged for a consumer (:meth:`SlotTable.take_changes`);
# past this many the log is dropped and the consumer rebuilds from scratch.
CHANGE_LOG_MAX = 65536
# Up to this many slots placed at once go to the postings' small delta, as
# single ones do; a bigger batch is merged into the posting lists before the
# next read (or by :meth:`SlotTable.settle`): at least one copy of every list,
# ~55M postings at 1M agents, too much for a cold start's handful of changes.
SMALL_BATCH = 64


class SlotTable:
    """Per-slot storage of the capability index (not thread-safe; callers lock)."""

    def __init__(self, dim: int, example_dims: int, keep_profiles: bool) -> None:
        self.dim = dim
        # unit description and whole-document (capability) vectors; exhaustive
        # scans may read a packed copy of them (:mod:`.layout`)
        self.ctx = QRows(dim, pack=True)
        self.cap = QRows(dim, pack=True)
        self.has_examples = np.zeros(0, dtype=bool)
        self.n_tags = np.zeros(0, dtype=np.int16)
        self.alive = np.zeros(0, dtype=bool)  # slot holds an indexed agent
        # digest of the profile text each slot was embedded from (0: unknown), the
        # key of its row in the facet-sums file (:mod:`.facet_file`)
        self.digest = np.zeros(0, dtype=np.int64)
        self.slot_of: dict[str, int] = {}
        self.id_of: list[str | None] = []
        self.free: list[int] = []
        self.examples = ExampleBlocks(example_dims)
        self.tags = SlotPostings(0)
        self.lexical = LexicalIndex(len(FACETS))
        self.generation: dict[int, int] = {}
        # slots whose canonical id changed (claimed by a new id, released) since
        # the last take_changes(); None: too many, everything may have changed
        self.changes: list[int] | None = None
        # every profile, when the index has no profile source (small catalogs, tests)
        self.profiles: dict[str, CapabilityProfile] | None = {} if keep_profiles else None

    def __len__(self) -> int:
        return len(self.slot_of)

    def live_slots(self) -> Slots:
        """Every indexed agent's slot, ascending."""
        return np.array(sorted(self.slot_of.values()), dtype=np.int64)

    def slots_of(self, ids: Sequence[str]) -> Slots:
        """The slots of those of ``ids`` that are indexed, ascending."""
        return np.array(
            sorted(s for c in ids if (s := self.slot_of.get(c)) is not None), dtype=np.int64
        )

    def ids_at(self, slots: Slots, full: bool) -> list[str | None]:
        """The ids of ``slots`` (all of the first len(slots) when ``full``):
        C-level copies instead of a Python loop (10k slots cost 1.1 ms that way)."""
        table = self.id_of
        if full:
            return table[: len(slots)]
        if len(slots) > 1:
            return list(operator.itemgetter(*slots.tolist())(table))
        return [table[int(s)] for s in slots]

    def take_changes(self) -> list[int] | None:
        """The slots whose id changed since the last call (None: unknown, assume
        all), for the one consumer that keeps a map from these slots (the registry's
        slot link, :class:`ans.registry.SlotLink`); the log starts over."""
        out, self.changes = self.changes, []
        return out

    def _changed(self, slot: int) -> None:
        log = self.changes
        if log is not None:
            if len(log) >= CHANGE_LOG_MAX:
                self.changes = None
            else:
                log.append(slot)

    # -- mutation --------------------------------------------------------------------
    def claim(self, cid: str) -> int:
        """The slot of ``cid``: a free (or new) one, or its own cleared; its
        generation moves on either way."""
        slot = self.slot_of.get(cid)
        if slot is None:
            cid = sys.intern(cid) if len(cid) <= 64 else cid  # shared with the registry's
            slot = self.free.pop() if self.free else self._grow()
            self.slot_of[cid] = slot
            self.id_of[slot] = cid
            self.alive[slot] = True
            self._changed(slot)
        else:
            self.clear(slot)
        self.generation[slot] = self.generation.get(slot, 0) + 1
        return slot

    def place(self, slot: int, profile: CapabilityProfile, vecs: ProfileVectors) -> None:
        """Vectors, flags, tags and postings of one slot."""
        self.ctx.set(slot, normalize_rows(vecs.facet_sums[FACET_INDEX["description"]]))
        self.cap.set(slot, normalize_rows(vecs.facet_sums.sum(axis=0)))
        self._flags(slot, profile, vecs)
        self.digest[slot] = profile_digest(profile)
        self.tags.put(slot, self._tag_postings(profile))
        self.lexical.upsert(slot, [profile.facets.get(f, "") for f in FACETS])

    def place_many(
        self, slots: Sequence[int], items: Sequence[tuple[CapabilityProfile, ProfileVectors]]
    ) -> None:
        """Many slots at once: vectors normalized in one call, postings merged in
        one sort; up to SMALL_BATCH slots are placed one by one."""
        if len(slots) <= SMALL_BATCH:
            for slot, (profile, vecs) in zip(slots, items, strict=True):
                self.place(slot, profile, vecs)
            return
        arr = np.asarray(slots, dtype=np.int64)
        facet_sums = np.stack([v.facet_sums for _, v in items])
        self.ctx.set(arr, normalize_rows(facet_sums[:, FACET_INDEX["description"]]))
        self.cap.set(arr, normalize_rows(facet_sums.sum(axis=1)))
        for slot, (profile, vecs) in zip(slots, items, strict=True):
            self._flags(slot, profile, vecs)
            self.digest[slot] = profile_digest(profile)
        self.tags.add_many(slots, [self._tag_postings(p) for p, _ in items])
        self.lexical.upsert_many(slots, [[p.facets.get(f, "") for f in FACETS] for p, _ in items])

    def settle(self) -> None:
        """Merge the postings added in bulk now (they are otherwise merged by the
        next read): ``ans serve --workers N`` settles before it forks, so the
        workers share the merged lists instead of each building its own."""
        self.tags.settle()
        self.lexical.postings.settle()

    def _flags(self, slot: int, profile: CapabilityProfile, vecs: ProfileVectors) -> None:
        self.has_examples[slot] = len(profile.examples) > 0
        self.n_tags[slot] = min(len(profile.tags), 32767)
        self.examples.put(slot, vecs.examples[:MAX_EXAMPLES])
        if self.profiles is not None:
            self.profiles[profile.canonical_id] = profile

    def _tag_postings(self, profile: CapabilityProfile) -> dict[int, bytes]:
        return {self.tags.intern(t): b"" for t in profile.tags}

    def _grow(self) -> int:
        slot = len(self.id_of)
        if slot >= len(self.has_examples):
            cap = max(64, 2 * len(self.has_examples))
            self.ctx.reserve(cap)
            self.cap.reserve(cap)
            has = np.zeros(cap, dtype=bool)
            has[: len(self.has_examples)] = self.has_examples
            tags = np.zeros(cap, dtype=np.int16)
            tags[: len(self.n_tags)] = self.n_tags
            alive = np.zeros(cap, dtype=bool)
            alive[: len(self.alive)] = self.alive
            digest = np.zeros(cap, dtype=np.int64)
            digest[: len(self.digest)] = self.digest
            self.has_examples, self.n_tags, self.alive = has, tags, alive
            self.digest = digest
        self.id_of.append(None)
        return slot

    def clear(self, slot: int) -> None:
        """Empty one slot's contents (it stays assigned)."""
        self.examples.drop(slot)
        self.lexical.remove(slot)
        self.tags.remove(slot)
        self.ctx.clear(slot)
        self.cap.clear(slot)
        self.has_examples[slot] = False
        self.n_tags[slot] = 0
        self.digest[slot] = 0

    def release(self, cid: str) -> int | None:
        """Forget ``cid`` and free its slot (returned; None if it was not indexed)."""
        slot = self.slot_of.pop(cid, None)
        if slot is None:
            return None
        self.clear(slot)
        self.id_of[slot] = None
        self.alive[slot] = False
        self.free.append(slot)
        self._changed(slot)
        if self.profiles is not None:
            self.profiles.pop(cid, None)
        return slot
