"""Inverted postings from a key (a word, a tag) to slots, sized for a million agents.

Three layers, so that a bulk import, a cold start and a single ACTIVATE are
all cheap:

* **base** - compressed sparse rows: for key id ``k`` the slots
  ``slots[indptr[k]:indptr[k+1]]`` (int32, ascending) and an optional
  per-posting payload row (uint8, e.g. a term frequency per facet). Built in
  one sort, never edited in place; a slot whose document left the base is
  masked by ``live`` (so replacing or removing an agent is O(1) here).
* **pending** - postings added in bulk (:meth:`add_many`), merged into the
  base in one sort before the next read.
* **delta** - postings of documents added one at a time (:meth:`put`): small
  dicts, with a cached NumPy view per key. Merged into the base by
  :meth:`compact` (at snapshot time, or when it grows large).

A slot holds at most one live document; :meth:`put` and :meth:`add_many`
replace what the slot held. Not thread-safe; the capability index holds its
lock around every call.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import numpy.typing as npt

Ints = npt.NDArray[np.int32]
Payload = npt.NDArray[np.uint8]

# Merge the delta into the base when it holds this many postings.
DELTA_COMPACT = 2_000_000
# New postings at most 1/MERGE_RATIO of the base are inserted into it (one
# copy) instead of the whole being sorted again.
MERGE_RATIO = 8


class SlotPostings:
    def __init__(self, width: int = 0) -> None:
        self.width = width  # payload bytes per posting (0: none)
        self.key_id: dict[str, int] = {}
        self.keys: list[str] = []
        self._indptr = np.zeros(1, dtype=np.int64)
        self._slots = np.zeros(0, dtype=np.int32)
        self._payload = np.zeros((0, width), dtype=np.uint8)
        self._live = np.zeros(0, dtype=bool)  # slot -> its postings in the base are current
        self._pending: list[tuple[Ints, Ints, Payload]] = []  # (key ids, slots, payload)
        self._pending_slots: set[int] = set()
        self._delta: dict[int, dict[int, bytes]] = {}  # key id -> slot -> payload bytes
        self._delta_keys: dict[int, tuple[int, ...]] = {}  # slot -> its delta key ids
        self._delta_size = 0
        self._views: dict[int, tuple[Ints, Payload]] = {}

    # -- keys ------------------------------------------------------------------------
    def intern(self, key: str) -> int:
        kid = self.key_id.get(key)
        if kid is None:
            kid = self.key_id[key] = len(self.keys)
            self.keys.append(key)
        return kid

    def __contains__(self, key: str) -> bool:
        kid = self.key_id.get(key)
        if kid is None:
            return False
        ids, _ = self.postings(kid)
        return len(ids) > 0

    # -- writes ----------------------------------------------------------------------
    def _ensure(self, slot: int) -> None:
        if slot >= len(self._live):
            grown = np.zeros(max(64, 2 * len(self._live), slot + 1), dtype=bool)
            grown[: len(self._live)] = self._live
            self._live = grown

    def remove(self, slot: int) -> None:
        """Forget the slot's document (base, pending and delta)."""
        if slot < len(self._live):
            if self._live[slot]:
                # its base postings may sit in any cached view (a key's base plus
                # delta): which keys is not known here, so none is kept
                self._views.clear()
            self._live[slot] = False
        if slot in self._pending_slots:
            self.settle()
            if slot < len(self._live):
                self._live[slot] = False
        for kid in self._delta_keys.pop(slot, ()):
            holders = self._delta.get(kid)
            if holders is not None and holders.pop(slot, None) is not None:
                self._delta_size -= 1
                self._views.pop(kid, None)
                if not holders:
                    del self._delta[kid]

    def put(self, slot: int, postings: dict[int, bytes]) -> None:
        """The slot's document, one at a time: key id -> payload bytes."""
        self.remove(slot)
        for kid, payload in postings.items():
            self._delta.setdefault(kid, {})[slot] = payload
            self._views.pop(kid, None)
        self._delta_keys[slot] = tuple(postings)
        self._delta_size += len(postings)
        if self._delta_size > DELTA_COMPACT:
            self.compact()

    def add_many(self, slots: Sequence[int], postings: Sequence[dict[int, bytes]]) -> None:
        """Many documents at once (bulk import, cold start); merged before the next read."""
        for slot in slots:
            self.remove(slot)
        sizes = np.fromiter((len(p) for p in postings), dtype=np.int64, count=len(postings))
        total = int(sizes.sum())
        kids = np.fromiter((k for p in postings for k in p), dtype=np.int32, count=total)
        owner = np.repeat(np.asarray(slots, dtype=np.int32), sizes)
        if self.width:
            blob = b"".join(v for p in postings for v in p.values())
            payload = np.frombuffer(blob, dtype=np.uint8).reshape(total, self.width).copy()
        else:
            payload = np.zeros((total, 0), dtype=np.uint8)
        self._pending.append((kids, owner, payload))
        self._pending_slots.update(slots)

    # -- merging ---------------------------------------------------------------------
    def _rebuild(self, parts: Iterable[tuple[Ints, Ints, Payload]]) -> None:
        parts = list(parts)
        added = sum(len(k) for k, _, _ in parts)
        if added and added * MERGE_RATIO <= len(self._slots):
            self._merge_into_base(parts)
        else:
            self._rebuild_sorted(parts)

    def _rebuild_sorted(self, parts: list[tuple[Ints, Ints, Payload]]) -> None:
        """The base's live postings and ``parts`` sorted by (key, slot) anew."""
        kids_l, slots_l, pay_l = [], [], []
        counts = np.diff(self._indptr)
        live_base = self._live[self._slots] if len(self._slots) else np.zeros(0, dtype=bool)
        kids_l.append(np.repeat(np.arange(len(counts), dtype=np.int32), counts)[live_base])
        slots_l.append(self._slots[live_base])
        pay_l.append(self._payload[live_base])
        for kids, slots, payload in parts:
            kids_l.append(kids)
            slots_l.append(slots)
            pay_l.append(payload)
        kids = np.concatenate(kids_l)
        slots = np.concatenate(slots_l)
        payload = np.concatenate(pay_l) if pay_l else np.zeros((0, self.width), np.uint8)
        order = np.lexsort((slots, kids))
        kids, self._slots, self._payload = kids[order], slots[order], payload[order]
        self._indptr = np.zeros(len(self.keys) + 1, dtype=np.int64)
        np.cumsum(np.bincount(kids, minlength=len(self.keys)), out=self._indptr[1:])
        if len(self._slots):
            self._ensure(int(self._slots.max()))
            self._live[self._slots] = True
        self._views.clear()

    def _merge_into_base(self, parts: list[tuple[Ints, Ints, Payload]]) -> None:
        """:meth:`_rebuild` for a few postings against a large base: the base is
        already sorted by (key, slot), so the new postings, sorted, are inserted
        where they belong (one copy of the base) instead of sorting it all again
        (a 1M-agent index holds ~55M postings: the full sort took seconds and
        ~3x their memory). The same arrays as the full path."""
        n_keys = len(self.keys)
        counts = np.zeros(n_keys, dtype=np.int64)
        counts[: len(self._indptr) - 1] = np.diff(self._indptr)
        slots, payload = self._slots, self._payload
        live = self._live[slots]
        if not live.all():  # postings of slots removed or replaced since the last merge
            before = np.zeros(len(live) + 1, dtype=np.int64)
            np.cumsum(live, out=before[1:])
            ends = self._indptr
            counts[: len(ends) - 1] = before[ends[1:]] - before[ends[:-1]]
            slots, payload = slots[live], payload[live]
        starts = np.zeros(n_keys + 1, dtype=np.int64)
        np.cumsum(counts, out=starts[1:])
        kids = np.concatenate([k for k, _, _ in parts]).astype(np.int64)
        new_slots = np.concatenate([s for _, s, _ in parts]).astype(np.int32)
        new_pay = np.concatenate([p for _, _, p in parts])
        order = np.lexsort((new_slots, kids))
        kids, new_slots, new_pay = kids[order], new_slots[order], new_pay[order]
        at = np.empty(len(kids), dtype=np.int64)
        bounds = np.flatnonzero(np.diff(kids)) + 1
        for lo, hi in zip([0, *bounds.tolist()], [*bounds.tolist(), len(kids)], strict=True):
            k = int(kids[lo])
            a, b = int(starts[k]), int(starts[k + 1])
            at[lo:hi] = a + np.searchsorted(slots[a:b], new_slots[lo:hi])
        self._slots = np.insert(slots, at, new_slots)
        self._payload = np.insert(payload, at, new_pay, axis=0)
        counts += np.bincount(kids, minlength=n_keys)
        self._indptr = np.zeros(n_keys + 1, dtype=np.int64)
        np.cumsum(counts, out=self._indptr[1:])
        self._ensure(int(new_slots.max()))
        self._live[new_slots] = True
        self._views.clear()

    @property
    def pending(self) -> int:
        """Documents added in bulk and not merged yet (the next read merges them)."""
        return len(self._pending_slots)

    def settle(self) -> None:
        """Merge the postings added in bulk (:meth:`add_many`) now."""
        if not self._pending:
            return
        parts, self._pending = self._pending, []
        self._pending_slots.clear()
        self._rebuild(parts)

    def compact(self) -> None:
        """Merge pending and delta postings into the base (one sort)."""
        delta: list[tuple[Ints, Ints, Payload]] = []
        if self._delta:
            kids, slots, pays = [], [], []
            for kid, holders in self._delta.items():
                for slot, payload in holders.items():
                    kids.append(kid)
                    slots.append(slot)
                    pays.append(payload)
            rows = (
                np.frombuffer(b"".join(pays), dtype=np.uint8).reshape(len(pays), self.width)
                if self.width
                else np.zeros((len(pays), 0), dtype=np.uint8)
            )
            delta.append(
                (np.array(kids, dtype=np.int32), np.array(slots, dtype=np.int32), rows.copy())
            )
        if not delta and not self._pending:
            return
        parts, self._pending = [*self._pending, *delta], []
        self._pending_slots.clear()
        self._delta.clear()
        self._delta_keys.clear()
        self._delta_size = 0
        self._rebuild(parts)

    # -- reads -----------------------------------------------------------------------
    def postings(self, kid: int) -> tuple[Ints, Payload]:
        """(slots, payload rows) of the live documents holding key ``kid``."""
        self.settle()
        view = self._views.get(kid)
        if view is not None:
            return view
        if kid + 1 < len(self._indptr):
            a, b = int(self._indptr[kid]), int(self._indptr[kid + 1])
            slots, payload = self._slots[a:b], self._payload[a:b]
            keep = self._live[slots]
            if not keep.all():
                slots, payload = slots[keep], payload[keep]
        else:
            slots, payload = self._slots[:0], self._payload[:0]
        holders = self._delta.get(kid)
        if holders:
            d_slots = np.fromiter(holders.keys(), dtype=np.int32, count=len(holders))
            d_pay = (
                np.frombuffer(b"".join(holders.values()), dtype=np.uint8).reshape(
                    len(holders), self.width
                )
                if self.width
                else np.zeros((len(holders), 0), dtype=np.uint8)
            )
            slots = np.concatenate([slots, d_slots])
            payload = np.concatenate([payload, d_pay])
        view = (slots, payload)
        if holders:  # base-only views are cheap slices; cache the merged ones
            self._views[kid] = view
        return view

    def count(self, key: str) -> int:
        kid = self.key_id.get(key)
        return 0 if kid is None else len(self.postings(kid)[0])

    # -- snapshot --------------------------------------------------------------------
    def state(self) -> dict[str, npt.NDArray[np.generic]]:
        self.compact()
        missing = len(self.keys) + 1 - len(self._indptr)
        if missing > 0:
            # keys interned for documents removed before any merge (an agent
            # ACTIVATEd with a new tag, then revoked): no postings, but each key
            # needs its empty range, or restore() refuses the snapshot
            tail = np.full(missing, self._indptr[-1], dtype=np.int64)
            self._indptr = np.concatenate([self._indptr, tail])
        return {
            "indptr": self._indptr,
            "slots": self._slots,
            "payload": self._payload,
            "live": self._live,
        }

    @classmethod
    def restore(
        cls, width: int, keys: list[str], arrays: dict[str, npt.NDArray[np.generic]]
    ) -> SlotPostings:
        p = cls(width)
        p.keys = list(keys)
        p.key_id = {k: i for i, k in enumerate(p.keys)}
        p._indptr = np.asarray(arrays["indptr"], dtype=np.int64)
        p._slots = np.asarray(arrays["slots"], dtype=np.int32)
        if len(arrays["payload"]) != len(p._slots):
            raise ValueError("postings snapshot is inconsistent")
        p._payload = np.asarray(arrays["payload"], dtype=np.uint8).reshape(len(p._slots), width)
        p._live = np.asarray(arrays["live"], dtype=bool)
        if len(p._indptr) != len(p.keys) + 1 or int(p._indptr[-1]) != len(p._slots):
            raise ValueError("postings snapshot is inconsistent")
        return p
