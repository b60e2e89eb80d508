"""The efficient-discovery profile's hard filters, by registry slot.

Per indexed agent (:class:`ans.governance.profile_metadata.ProfileAttrs`):
its normalized tags, binding protocols and declared regions as value codes
by slot and postings by value (:class:`MultiColumn`: int32 arrays, no Python
object per agent), its ``expires_at`` and its metadata's ``updated_at``
as float64 epoch columns. :meth:`ProfileColumns.apply` narrows the registry's
gate mask, vectorized, so that these filters act with the other hard gates —
before the relevance shortlist, which is taken among the agents every hard
gate let through:

* expiry, always: an agent whose ``expires_at`` has passed is not served and
  not counted (the record stays stored; a newer ACTIVATE brings it back);
* ``required_tags``: every one; ``excluded_tags``: none of them;
* ``protocols``: at least one binding with one of them;
* ``constraints.region``: at least one declared region among them (an agent
  declaring none is left out);
* ``constraints.max_results_age_seconds``: metadata updated at most that
  many seconds ago (an agent whose age is unknown is left out).

Not thread-safe by itself: the registry's caller holds the index lock.
"""

from __future__ import annotations

import math
import sys
from typing import Any

import numpy as np
import numpy.typing as npt

from ans.governance.profile_metadata import ProfileAttrs
from ans.protocol.request_types import ProfileParams

from .codes import Codes

Slots = npt.NDArray[np.int32]


class MultiColumn:
    """One multi-valued attribute (tags, protocols or regions) of every slot.

    A million agents hold these, so nothing is a Python object per agent: the
    values are interned once (value <-> int32 code); each slot's codes are a
    row of a ``width``-wide int32 matrix (-1: empty; a slot with more values
    than ``width`` keeps its codes in a small spill dict), and each value's
    slots a sorted int32 posting array. A single write updates the postings in
    place; a bulk write (:meth:`set_many`, start-up) marks them stale and they
    are rebuilt from the matrix, in one sort, before the next read."""

    def __init__(self, width: int) -> None:
        self.width = width
        self._codes = Codes()
        self.values = self._codes.values
        self.code_of = self._codes.code_of
        self._mat = np.full((0, width), -1, dtype=np.int32)
        self._spill: dict[int, tuple[int, ...]] = {}
        self._post: list[Slots] = []
        self._stale = False

    def grow(self, size: int) -> None:
        cap = self._mat.shape[0]
        if size > cap:
            mat = np.full((size, self.width), -1, dtype=np.int32)
            mat[:cap] = self._mat
            self._mat = mat

    def _code(self, value: str) -> int:
        c = self._codes.code(value)
        if c == len(self._post):  # a new value: its (empty) postings
            self._post.append(np.zeros(0, dtype=np.int32))
        return c

    def codes(self, slot: int) -> tuple[int, ...]:
        spilled = self._spill.get(slot)
        if spilled is not None:
            return spilled
        if slot >= self._mat.shape[0]:
            return ()
        return tuple(c for c in self._mat[slot].tolist() if c >= 0)

    def get(self, slot: int) -> tuple[str, ...]:
        return tuple(self.values[c] for c in self.codes(slot))

    def _write(self, slot: int, codes: tuple[int, ...]) -> None:
        self._spill.pop(slot, None)
        row = self._mat[slot]
        row[:] = -1
        if len(codes) > self.width:
            self._spill[slot] = codes
        else:
            row[: len(codes)] = codes

    def set(self, slot: int, values: tuple[str, ...]) -> None:
        """The slot's values (in order; () to clear); its postings follow."""
        self.grow(slot + 1)
        old = self.codes(slot)
        new = tuple(self._code(v) for v in values)
        self._write(slot, new)
        if self._stale or old == new:
            return
        for c in set(old) - set(new):
            post = self._post[c]
            at = int(np.searchsorted(post, slot))
            if at < len(post) and post[at] == slot:
                self._post[c] = np.delete(post, at)
        for c in set(new) - set(old):
            post = self._post[c]
            at = int(np.searchsorted(post, slot))
            if at == len(post) or post[at] != slot:
                self._post[c] = np.insert(post, at, slot)

    def set_many(self, slots: list[int], values: list[tuple[str, ...]]) -> None:
        """Many distinct slots at once: rows written now (vectorized), postings
        rebuilt on next read."""
        if not slots:
            return
        codes = [[self._code(v) for v in vals] for vals in values]
        lens = np.fromiter(map(len, codes), dtype=np.int64, count=len(codes))
        flat = np.fromiter((c for cs in codes for c in cs), dtype=np.int32, count=int(lens.sum()))
        self._write_many(np.asarray(slots, dtype=np.int64), lens, flat)

    def _write_many(
        self, at: npt.NDArray[np.int64], lens: npt.NDArray[np.int64], flat: Slots
    ) -> None:
        """Rows of distinct slots ``at``: slot i holds the next ``lens[i]`` codes of ``flat``."""
        if not len(at):
            return
        self.grow(int(at.max()) + 1)
        if self._spill:
            for slot in at.tolist():
                self._spill.pop(slot, None)
        self._mat[at] = -1
        fit = lens <= self.width
        ends = np.cumsum(lens)
        starts = ends - lens
        rows = np.repeat(at[fit], lens[fit])
        cols = np.arange(len(rows)) - np.repeat(np.cumsum(lens[fit]) - lens[fit], lens[fit])
        self._mat[rows, cols] = flat[np.repeat(fit, lens)]
        for i in np.flatnonzero(~fit).tolist():
            self._spill[int(at[i])] = tuple(flat[starts[i] : ends[i]].tolist())
        self._stale = True

    def state(self, slots: npt.NDArray[np.int64]) -> tuple[list[str], Slots, Slots]:
        """(values, per-entry value count, codes) of ``slots`` (-1: none), in order."""
        codes = [self.codes(int(s)) if s >= 0 else () for s in slots.tolist()]
        lens = np.fromiter(map(len, codes), dtype=np.int32, count=len(codes))
        flat = np.fromiter((c for cs in codes for c in cs), dtype=np.int32, count=int(lens.sum()))
        return list(self.values), lens, flat

    def restore(
        self, at: npt.NDArray[np.int64], pick: npt.NDArray[np.bool_], saved: tuple[Any, Any, Any]
    ) -> None:
        """:meth:`state` written back for the entries ``pick`` into slots ``at``
        (saved codes renumbered into this column's)."""
        values, lens, flat = saved
        lens = np.asarray(lens, dtype=np.int64)
        remap = np.fromiter((self._code(str(v)) for v in values), np.int32, len(values))
        flat = remap[np.asarray(flat, dtype=np.int64)] if len(flat) else flat.astype(np.int32)
        self._write_many(at[pick], lens[pick], flat[np.repeat(pick, lens)])

    def _rebuild(self) -> None:
        """Every value's postings from the matrix and the spill, in one sort."""
        rows, cols = np.nonzero(self._mat >= 0)
        codes = self._mat[rows, cols]
        if self._spill:
            extra = [(s, c) for s, cs in self._spill.items() for c in cs]
            rows = np.concatenate([rows, np.array([s for s, _ in extra], dtype=rows.dtype)])
            codes = np.concatenate([codes, np.array([c for _, c in extra], dtype=np.int32)])
        self._stale = False
        if not self.values:
            self._post = []
            return
        order = np.lexsort((rows, codes))
        slots = rows[order].astype(np.int32)
        bounds = np.cumsum(np.bincount(codes, minlength=len(self.values)))[:-1]
        self._post = list(np.split(slots, bounds))

    def settle(self) -> None:
        if self._stale:
            self._rebuild()

    def any_of(self, values: tuple[str, ...], n: int) -> npt.NDArray[np.bool_]:
        """For each of the first ``n`` slots: does it hold one of ``values``?"""
        self.settle()
        hit = np.zeros(n, dtype=bool)
        for v in values:
            c = self.code_of.get(v)
            if c is not None:
                post = self._post[c]
                hit[post[: int(np.searchsorted(post, n))]] = True
        return hit


class ProfileColumns:
    def __init__(self) -> None:
        self.tags = MultiColumn(8)
        self.protocols = MultiColumn(2)
        self.regions = MultiColumn(4)
        self._known = np.zeros(0, dtype=bool)  # the slot's attributes are set
        self._expires = np.full(0, np.inf, dtype=np.float64)
        self._updated = np.full(0, np.nan, dtype=np.float64)
        self._expiring = 0  # slots with a finite expires_at

    def grow(self, size: int) -> None:
        cap = self._expires.shape[0]
        if size <= cap:
            return
        size = max(size, 2 * cap)  # amortized: one slot at a time is not a copy each

        def grown(a: npt.NDArray[Any], fill: float) -> npt.NDArray[Any]:
            out = np.full(size, fill, dtype=a.dtype)
            out[:cap] = a
            return out

        self._known = grown(self._known, False)
        self._expires = grown(self._expires, np.inf)
        self._updated = grown(self._updated, np.nan)
        for col in (self.tags, self.protocols, self.regions):
            col.grow(size)

    def settle(self) -> None:
        """Build now the postings a bulk write left to be built on next read."""
        for col in (self.tags, self.protocols, self.regions):
            col.settle()

    def known(self, slot: int) -> bool:
        return slot < len(self._known) and bool(self._known[slot])

    def attrs(self, slot: int) -> ProfileAttrs | None:
        if not self.known(slot):
            return None
        return ProfileAttrs(
            tags=self.tags.get(slot),
            protocols=self.protocols.get(slot),
            regions=self.regions.get(slot),
            expires_at=float(self._expires[slot]),
            updated_at=float(self._updated[slot]),
        )

    def _columns(self, slot: int, attrs: ProfileAttrs | None) -> None:
        if self._known[slot] and math.isfinite(self._expires[slot]):
            self._expiring -= 1
        self._known[slot] = attrs is not None
        self._expires[slot] = np.inf if attrs is None else attrs.expires_at
        self._updated[slot] = np.nan if attrs is None else attrs.updated_at
        if attrs is not None and math.isfinite(attrs.expires_at):
            self._expiring += 1

    def set(self, slot: int, attrs: ProfileAttrs | None) -> None:
        """The slot's attributes (None: none known, e.g. a freed slot)."""
        self.grow(slot + 1)
        if attrs is None and not self._known[slot]:
            return  # nothing held: an unknown slot's rows are empty
        self._columns(slot, attrs)
        self.tags.set(slot, attrs.tags if attrs else ())
        self.protocols.set(slot, attrs.protocols if attrs else ())
        self.regions.set(slot, attrs.regions if attrs else ())

    def set_many(self, slots: list[int], attrs: list[ProfileAttrs]) -> None:
        """Many slots' attributes at once (start-up): columns written
        vectorized, postings rebuilt once. A slot given twice: the last wins."""
        if len(set(slots)) != len(slots):
            last = dict(zip(slots, attrs, strict=True))
            slots, attrs = list(last), list(last.values())
        if not slots:
            return
        self.grow(max(slots) + 1)
        at = np.asarray(slots, dtype=np.int64)
        self._expiring -= int(np.count_nonzero(self._known[at] & np.isfinite(self._expires[at])))
        expires = np.fromiter((a.expires_at for a in attrs), dtype=np.float64, count=len(at))
        self._known[at] = True
        self._expires[at] = expires
        self._updated[at] = np.fromiter((a.updated_at for a in attrs), np.float64, len(at))
        self._expiring += int(np.count_nonzero(np.isfinite(expires)))
        self.tags.set_many(slots, [a.tags for a in attrs])
        self.protocols.set_many(slots, [a.protocols for a in attrs])
        self.regions.set_many(slots, [a.regions for a in attrs])

    def state(self, slots: npt.NDArray[np.int64]) -> tuple[dict[str, Any], dict[str, list[str]]]:
        """The attributes of ``slots`` (-1: none), in order, as arrays (snapshot
        form, :meth:`restore`) and each column's value table (JSON)."""
        held = (slots >= 0) & (slots < len(self._known))
        known = np.zeros(len(slots), dtype=bool)
        known[held] = self._known[slots[held]]
        expires = np.full(len(slots), np.inf)
        expires[known] = self._expires[slots[known]]
        updated = np.full(len(slots), np.nan)
        updated[known] = self._updated[slots[known]]
        arrays: dict[str, Any] = {"known": known, "expires": expires, "updated": updated}
        values: dict[str, list[str]] = {}
        kept = np.where(known, slots, -1)
        for name, col in self._named():
            values[name], arrays[f"{name}_lens"], arrays[f"{name}_codes"] = col.state(kept)
        return arrays, values

    def restore(
        self,
        slots: npt.NDArray[np.int64],
        arrays: dict[str, Any],
        values: dict[str, list[str]],
    ) -> None:
        """:meth:`state` written back: entry i into slot ``slots[i]``, for the
        entries known there and given a slot (>= 0) whose attributes are not
        set yet (an agent changed since the snapshot keeps its own)."""
        slots = np.asarray(slots, dtype=np.int64)
        self._check_saved(len(slots), arrays, values)  # nothing is written if this raises
        self.grow(int(slots.max(initial=-1)) + 1)
        saved_known = np.asarray(arrays["known"], dtype=bool)
        pick = saved_known & (slots >= 0)
        pick[pick] = ~self._known[slots[pick]]
        at = slots[pick]
        expires = np.asarray(arrays["expires"], dtype=np.float64)[pick]
        self._known[at] = True
        self._expires[at] = expires
        self._updated[at] = np.asarray(arrays["updated"], dtype=np.float64)[pick]
        self._expiring += int(np.count_nonzero(np.isfinite(expires)))
        for name, col in self._named():
            saved = (values[name], arrays[f"{name}_lens"], arrays[f"{name}_codes"])
            col.restore(slots, pick, saved)

    def _check_saved(self, n: int, arrays: dict[str, Any], values: dict[str, list[str]]) -> None:
        """ValueError unless the saved columns are whole and consistent: one
        entry per slot, counts adding up to the codes, codes within the tables."""
        for key in ("known", "expires", "updated"):
            if np.shape(arrays[key]) != (n,):
                raise ValueError(f"profile column {key!r}: {np.shape(arrays[key])}, not ({n},)")
        for name, _ in self._named():
            lens, codes = np.asarray(arrays[f"{name}_lens"]), np.asarray(arrays[f"{name}_codes"])
            table = values[name]
            if not isinstance(table, list) or lens.shape != (n,) or lens.min(initial=0) < 0:
                raise ValueError(f"profile column {name!r}: bad counts")
            if codes.ndim != 1 or int(lens.sum()) != len(codes):
                raise ValueError(f"profile column {name!r}: counts and codes disagree")
            if len(codes) and not (0 <= int(codes.min()) and int(codes.max()) < len(table)):
                raise ValueError(f"profile column {name!r}: a code outside its table")

    def _named(self) -> tuple[tuple[str, MultiColumn], ...]:
        return (("tags", self.tags), ("protocols", self.protocols), ("regions", self.regions))

    def share_of(
        self, slots: npt.NDArray[np.int64], tags: tuple[str, ...]
    ) -> npt.NDArray[np.float64]:
        """For each slot, the share of ``tags`` its agent holds (0..1)."""
        held = np.zeros(len(slots), dtype=np.float64)
        if not tags or not len(slots):
            return held
        n = int(slots.max()) + 1
        for tag in tags:
            held += self.tags.any_of((tag,), n)[slots]
        return held / len(tags)

    def apply(self, mask: npt.NDArray[np.bool_], p: ProfileParams, now: float) -> None:
        """Narrow ``mask`` (one entry per slot, in place) to the slots that pass
        expiry and the request's profile filters."""
        n = len(mask)
        if self._expiring:
            mask &= self._expires[:n] > now
        if not p.filters:
            return
        for tag in p.required_tags:
            mask &= self.tags.any_of((tag,), n)
        if p.excluded_tags:
            mask &= ~self.tags.any_of(p.excluded_tags, n)
        if p.protocols:
            mask &= self.protocols.any_of(p.protocols, n)
        if p.regions:
            mask &= self.regions.any_of(p.regions, n)
        if p.max_results_age_seconds is not None:
            with np.errstate(invalid="ignore"):
                mask &= (now - self._updated[:n]) <= p.max_results_age_seconds


def decode_attrs(raw: Any) -> ProfileAttrs | None:
    """One agent's attributes as snapshots before the columnar form held them
    ([tags, protocols, regions, expires_at or None, updated_at or None]); None
    when malformed."""
    try:
        tags, protocols, regions, expires, updated = raw
        return ProfileAttrs(
            tags=tuple(sys.intern(str(t)) for t in tags),
            protocols=tuple(sys.intern(str(t)) for t in protocols),
            regions=tuple(sys.intern(str(t)) for t in regions),
            expires_at=math.inf if expires is None else float(expires),
            updated_at=math.nan if updated is None else float(updated),
        )
    except (TypeError, ValueError):
        return None


def passes(attrs: ProfileAttrs | None, p: ProfileParams, now: float) -> bool:
    """:meth:`ProfileColumns.apply` for one agent (routing, the preferred agent)."""
    if attrs is None:
        return not p.filters
    if attrs.expires_at <= now:
        return False
    tags = set(attrs.tags)
    if not tags.issuperset(p.required_tags) or tags.intersection(p.excluded_tags):
        return False
    if p.protocols and not set(attrs.protocols).intersection(p.protocols):
        return False
    if p.regions and not set(attrs.regions).intersection(p.regions):
        return False
    age = p.max_results_age_seconds
    return age is None or (not math.isnan(attrs.updated_at) and now - attrs.updated_at <= age)
