"""The efficient-discovery profile's hard filters, by registry slot.

Per indexed agent (:class:`ans.governance.profile_metadata.ProfileAttrs`):
its normalized tags, binding protocols and declared regions as postings
(value -> set of slots), its ``expires_at`` and its metadata's ``updated_at``
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

Postings = dict[str, set[int]]


def _add(postings: Postings, values: tuple[str, ...], slot: int) -> None:
    for v in values:
        postings.setdefault(v, set()).add(slot)


def _drop(postings: Postings, values: tuple[str, ...], slot: int) -> None:
    for v in values:
        held = postings.get(v)
        if held is not None:
            held.discard(slot)
            if not held:
                del postings[v]


class ProfileColumns:
    def __init__(self) -> None:
        self.tags: Postings = {}
        self.protocols: Postings = {}
        self.regions: Postings = {}
        self._attrs: dict[int, ProfileAttrs] = {}
        self._expires = np.full(0, np.inf, dtype=np.float64)
        self._updated = np.full(0, np.nan, dtype=np.float64)
        self._expiring = 0  # slots with a finite expires_at

    def grow(self, size: int) -> None:
        cap = self._expires.shape[0]
        if size <= cap:
            return

        def grown(a: npt.NDArray[Any], fill: float) -> npt.NDArray[Any]:
            out = np.full(size, fill, dtype=a.dtype)
            out[:cap] = a
            return out

        self._expires = grown(self._expires, np.inf)
        self._updated = grown(self._updated, np.nan)

    def attrs(self, slot: int) -> ProfileAttrs | None:
        return self._attrs.get(slot)

    def set(self, slot: int, attrs: ProfileAttrs | None) -> None:
        """The slot's attributes (None: none known, e.g. a freed slot)."""
        old = self._attrs.pop(slot, None)
        if old is not None:
            _drop(self.tags, old.tags, slot)
            _drop(self.protocols, old.protocols, slot)
            _drop(self.regions, old.regions, slot)
            if math.isfinite(old.expires_at):
                self._expiring -= 1
        self.grow(slot + 1)
        if attrs is None:
            self._expires[slot] = np.inf
            self._updated[slot] = np.nan
            return
        self._attrs[slot] = attrs
        _add(self.tags, attrs.tags, slot)
        _add(self.protocols, attrs.protocols, slot)
        _add(self.regions, attrs.regions, slot)
        self._expires[slot] = attrs.expires_at
        self._updated[slot] = attrs.updated_at
        if math.isfinite(attrs.expires_at):
            self._expiring += 1

    def _any_of(self, postings: Postings, values: tuple[str, ...], n: int) -> npt.NDArray[np.bool_]:
        hit = np.zeros(n, dtype=bool)
        for v in values:
            held = postings.get(v)
            if held:
                idx = np.fromiter(held, dtype=np.int64, count=len(held))
                hit[idx[idx < n]] = True
        return hit

    def share_of(
        self, slots: npt.NDArray[np.int64], tags: tuple[str, ...]
    ) -> npt.NDArray[np.float64]:
        """For each slot, the share of ``tags`` its agent holds (0..1)."""
        held = np.zeros(len(slots), dtype=np.float64)
        if not tags or not len(slots):
            return held
        n = int(slots.max()) + 1
        for tag in tags:
            held += self._any_of(self.tags, (tag,), n)[slots]
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
            mask &= self._any_of(self.tags, (tag,), n)
        if p.excluded_tags:
            mask &= ~self._any_of(self.tags, p.excluded_tags, n)
        if p.protocols:
            mask &= self._any_of(self.protocols, p.protocols, n)
        if p.regions:
            mask &= self._any_of(self.regions, p.regions, n)
        if p.max_results_age_seconds is not None:
            with np.errstate(invalid="ignore"):
                mask &= (now - self._updated[:n]) <= p.max_results_age_seconds


def encode_attrs(attrs: ProfileAttrs) -> list[Any]:
    """The snapshot form of one agent's attributes (JSON: no inf, no NaN)."""
    return [
        list(attrs.tags),
        list(attrs.protocols),
        list(attrs.regions),
        attrs.expires_at if math.isfinite(attrs.expires_at) else None,
        None if math.isnan(attrs.updated_at) else attrs.updated_at,
    ]


def decode_attrs(raw: Any) -> ProfileAttrs | None:
    """:func:`encode_attrs` reversed (None when malformed)."""
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
