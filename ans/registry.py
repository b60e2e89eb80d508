"""The compact in-memory registry: which agents are indexed, with the gate
attributes DISCOVER filters and ranks on.

One slot per indexed agent; the gate columns live in NumPy arrays by slot
(trust tier int8, behavioral score float64, zone / org domain / required
scope / signer kid as int32 codes into small interned tables) so a DISCOVER
without an intent filters and ranks a million agents vectorized. Nothing
else is kept per agent: result fields (job description, ...) are read from
the store for the results actually returned (:mod:`ans.core.live_index`).

It is a read-only ``Mapping[str, AgentEntry]`` (entries are built on
access) in activation order, like the dict it replaces. Not thread-safe by
itself: :class:`ans.core.live_index.LiveIndex` holds its lock around every call.
"""

from __future__ import annotations

import heapq
import sys
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ans.governance.policy import ZonePolicy, max_tier
from ans.governance.profile_metadata import (
    ProfileAttrs,
    attrs_of,
)
from ans.protocol.messages import DiscoverParams
from ans.protocol.scope import AuthorityScope

from .codes import Codes
from .config import RankingWeights
from .profile_columns import ProfileColumns
from .ranking import PRECISION, TIER_NORM, rank_score, sort_key
from .store import IndexRow, StoredAgent, gate_columns

# np.round and Python's round may differ by one unit in the last decimal on
# half-way cases: candidates within this margin of the cut are re-scored
# with ranking.rank_score, so the order and the scores are exactly Python's.
# Registry slot assignments logged for the slot link; past this many it is rebuilt.
LINK_LOG_MAX = 65536
# Past this many agents in one put_many, profile postings are rebuilt once
# instead of updated one agent at a time.
BULK_PROFILES = 256
_ROUND_MARGIN = 2.5 * 10.0**-PRECISION
_TIER_NORM = np.array([np.nan, TIER_NORM[1], TIER_NORM[2], TIER_NORM[3]], dtype=np.float64)


@dataclass(frozen=True, slots=True)
class AgentEntry:
    """One indexed agent's gate attributes (no result fields: see the store)."""

    canonical_id: str
    lifecycle_state: str
    trust_tier: int
    behavioral_trust_score: float
    governance_zone: str
    org_domain: str  # lowercased
    required_scope: str
    signer_kid: str = ""
    # The efficient-discovery profile's filter attributes (tags, protocols,
    # regions, expiry, metadata age); None: not known to this entry.
    profile: ProfileAttrs | None = None

    @classmethod
    def from_stored(cls, agent: StoredAgent) -> AgentEntry:
        tier, behavioral, zone, org, required = gate_columns(agent.manifest, agent.capabilities)
        return cls(
            canonical_id=agent.canonical_id,
            lifecycle_state=agent.lifecycle_state,
            trust_tier=tier,
            behavioral_trust_score=behavioral,
            governance_zone=zone,
            org_domain=org,
            required_scope=required,
            signer_kid=agent.signer_kid,
            profile=attrs_of(agent.manifest, agent.capabilities, agent.updated_at),
        )

    @classmethod
    def from_row(cls, row: IndexRow) -> AgentEntry:
        return cls(
            canonical_id=row.canonical_id,
            lifecycle_state="Active",
            trust_tier=int(row.trust_tier),
            behavioral_trust_score=float(row.behavioral_trust_score),
            governance_zone=row.governance_zone,
            org_domain=row.org_domain,
            required_scope=row.required_scope,
            signer_kid=row.signer_kid,
        )


@dataclass(frozen=True, slots=True)
class ScoredAgent:
    """One gate-passing local agent with its exact scores."""

    rank_score: float
    capability_match_score: float
    canonical_id: str
    slot: int = -1  # its registry slot (Registry.entry_at)


class Registry(Mapping[str, AgentEntry]):
    """canonical_id -> slot, plus the gate columns by slot."""

    def __init__(self, weights: RankingWeights) -> None:
        self._weights = weights
        self._slot_of: dict[str, int] = {}
        self._ids: list[str | None] = []
        self._free: list[int] = []
        self._zones, self._orgs, self._scopes, self._kids = Codes(), Codes(), Codes(), Codes()
        self._tier = np.zeros(0, dtype=np.int8)
        self._behavioral = np.zeros(0, dtype=np.float64)
        self._score0 = np.zeros(0, dtype=np.float64)  # exact rank_score with no capability match
        self._zone = np.zeros(0, dtype=np.int32)
        self._org = np.zeros(0, dtype=np.int32)
        self._scope = np.zeros(0, dtype=np.int32)
        self._kid = np.zeros(0, dtype=np.int32)
        self._valid = np.zeros(0, dtype=bool)
        # The profile's filter columns (ans.profile_columns): tags, protocols,
        # regions as postings of slots; expiry and metadata update as epochs.
        self.profiles = ProfileColumns()
        # per (zone, tier): how many agents could pass the gates at most
        self.gate_counts: Counter[tuple[str, int]] = Counter()
        self._score0_cache: dict[tuple[int, float], float] = {}
        # The slot link: matcher slot -> registry slot (-1: not indexed here),
        # kept in step from both sides' logs of slot assignments (linked()).
        self._link = np.zeros(0, dtype=np.int64)
        self._link_token: object = None  # the matcher's slot table the link is for
        self._link_log: list[str] | None = None  # ids (re)assigned or removed; None: all

    # -- Mapping -------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._slot_of)

    def __iter__(self) -> Iterator[str]:
        return iter(self._slot_of)

    def __contains__(self, key: object) -> bool:
        return key in self._slot_of

    def __getitem__(self, canonical_id: str) -> AgentEntry:
        return self._entry(self._slot_of[canonical_id])

    def _entry(self, slot: int) -> AgentEntry:
        cid = self._ids[slot]
        assert cid is not None
        return AgentEntry(
            canonical_id=cid,
            lifecycle_state="Active",
            trust_tier=int(self._tier[slot]),
            behavioral_trust_score=float(self._behavioral[slot]),
            governance_zone=self._zones.values[self._zone[slot]],
            org_domain=self._orgs.values[self._org[slot]],
            required_scope=self._scopes.values[self._scope[slot]],
            signer_kid=self._kids.values[self._kid[slot]],
        )

    def ids_in_org(self, org_domain: str) -> list[str]:
        """The canonical ids indexed under ``org_domain`` (lowercase), for
        name resolution (``label.org_domain``)."""
        code = self._orgs.code_of.get(org_domain)
        if code is None:
            return []
        n = len(self._ids)
        slots = np.nonzero((self._org[:n] == code) & self._valid[:n])[0]
        return [cid for s in slots if (cid := self._ids[int(s)]) is not None]

    def ids_at(self, slots: Iterable[int]) -> list[str]:
        """The canonical ids at these slots (a listing's page: no entries built)."""
        ids = self._ids
        return [cid for s in slots if (cid := ids[int(s)]) is not None]

    def ordered(self) -> tuple[npt.NDArray[np.int64], list[str]]:
        """Every indexed slot in canonical-id order, and those ids (a listing's
        stable order; caller holds the index lock)."""
        n = len(self._ids)
        pairs = sorted(
            (cid, s) for s, cid in enumerate(self._ids[:n]) if cid is not None and self._valid[s]
        )
        slots = np.fromiter((s for _, s in pairs), dtype=np.int64, count=len(pairs))
        return slots, [cid for cid, _ in pairs]

    def signer_kids(self) -> list[str]:
        """The governance key ids that signed the indexed agents, sorted."""
        n = len(self._ids)
        used = np.unique(self._kid[:n][self._valid[:n]])
        return sorted(self._kids.values[int(c)] for c in used)

    # -- mutation --------------------------------------------------------------------
    def _grow(self, need: int) -> None:
        cap = self._tier.shape[0]
        if need <= cap:
            return
        new = max(64, cap * 2, need)

        def grow(a: npt.NDArray[Any]) -> npt.NDArray[Any]:
            out = np.zeros(new, dtype=a.dtype)
            out[:cap] = a
            return out

        self._tier, self._behavioral, self._score0 = (
            grow(self._tier),
            grow(self._behavioral),
            grow(self._score0),
        )
        self._zone, self._org = grow(self._zone), grow(self._org)
        self._scope, self._kid, self._valid = grow(self._scope), grow(self._kid), grow(self._valid)
        self.profiles.grow(new)

    def _score0_of(self, tier: int, behavioral: float) -> float:
        key = (tier, behavioral)
        s = self._score0_cache.get(key)
        if s is None:
            s = rank_score(self._weights, tier, behavioral, 0.0)
            if len(self._score0_cache) < 100_000:
                self._score0_cache[key] = s
        return s

    def put(self, entry: AgentEntry) -> None:
        self.put_many([entry])

    def put_many(self, entries: Sequence[AgentEntry | IndexRow]) -> None:
        """Index (or re-index) agents; vectorized column writes."""
        if not entries or self._put_new(entries):
            return
        if len({e.canonical_id for e in entries}) != len(entries):
            # an agent written twice in one batch: its last entry is the one kept
            entries = list({e.canonical_id: e for e in entries}.values())
        slots = np.empty(len(entries), dtype=np.int64)
        profiled: list[tuple[int, ProfileAttrs | None]] = []
        for i, e in enumerate(entries):
            cid = e.canonical_id
            slot = self._slot_of.get(cid)
            if slot is not None:
                old = (self._zones.values[self._zone[slot]], int(self._tier[slot]))
                self.gate_counts[old] -= 1
            else:
                if self._free:
                    slot = self._free.pop()
                else:
                    slot = len(self._ids)
                    self._ids.append(None)
                    self._grow(len(self._ids))
                cid = sys.intern(cid) if len(cid) <= 64 else cid
                self._slot_of[cid] = slot
                self._ids[slot] = cid
                self._logged((cid,))
            slots[i] = slot
            profiled.append((slot, e.profile if isinstance(e, AgentEntry) else None))
        self._set_profiles(profiled)
        self._write_columns(slots, entries)

    def _put_new(self, entries: Sequence[AgentEntry | IndexRow]) -> bool:
        """:meth:`put_many` of store rows none of which is indexed yet, with no
        free slot to reuse (start-up: 1M rows at ~2 µs each instead of ~8):
        the new slots follow the last one, every column is written at once.
        False, having changed nothing, when that is not the case."""
        if self._free or not all(type(e) is IndexRow for e in entries):
            return False
        get = self._slot_of.get
        ids = [e.canonical_id for e in entries]
        if len(set(ids)) != len(ids) or any(get(c) is not None for c in ids):
            return False
        k, n0 = len(ids), len(self._ids)
        ids = [sys.intern(c) if len(c) <= 64 else c for c in ids]
        self._ids.extend(ids)
        self._grow(n0 + k)
        self._slot_of.update(zip(ids, range(n0, n0 + k), strict=True))
        self._logged(ids)
        self._write_columns(slice(n0, n0 + k), entries)
        return True

    def _write_columns(
        self, at: npt.NDArray[np.int64] | slice, entries: Sequence[AgentEntry | IndexRow]
    ) -> None:
        """The gate columns of ``entries`` at their slots ``at``, each written at
        once, and their gate counts."""
        tiers = [int(e.trust_tier) for e in entries]
        behavioral = [float(e.behavioral_trust_score) for e in entries]
        self._tier[at] = tiers
        self._behavioral[at] = behavioral
        score0 = self._score0_of
        self._score0[at] = [score0(t, b) for t, b in zip(tiers, behavioral, strict=True)]
        zones = [e.governance_zone for e in entries]
        for column, codes, values in (
            (self._zone, self._zones, zones),
            (self._org, self._orgs, [e.org_domain for e in entries]),
            (self._scope, self._scopes, [e.required_scope for e in entries]),
            (self._kid, self._kids, [e.signer_kid for e in entries]),
        ):
            code = codes.code
            column[at] = [code(v) for v in values]
        self.gate_counts.update(zip(zones, tiers, strict=True))
        self._valid[at] = True

    def _set_profiles(self, profiled: list[tuple[int, ProfileAttrs | None]]) -> None:
        """Slots' profile attributes: one by one for a few (postings updated in
        place), in bulk for many (postings rebuilt once, before the next read)."""
        last = dict(profiled)  # a slot written twice: its last attributes
        known = [(s, a) for s, a in last.items() if a is not None]
        if len(known) > BULK_PROFILES:
            self.profiles.set_many([s for s, _ in known], [a for _, a in known])
            last = {s: a for s, a in last.items() if a is None}
        for slot, attrs in last.items():
            self.profiles.set(slot, attrs)

    def remove(self, canonical_id: str) -> bool:
        slot = self._slot_of.pop(canonical_id, None)
        if slot is None:
            return False
        self.gate_counts[(self._zones.values[self._zone[slot]], int(self._tier[slot]))] -= 1
        self._valid[slot] = False
        self.profiles.set(slot, None)
        self._ids[slot] = None
        self._free.append(slot)
        self._logged((canonical_id,))
        return True

    def _logged(self, canonical_ids: Sequence[str]) -> None:
        """Log slot assignments for the slot link; past LINK_LOG_MAX the log is dropped."""
        log = self._link_log
        if log is not None:
            if len(log) + len(canonical_ids) > LINK_LOG_MAX:
                self._link_log = None
            else:
                log.extend(canonical_ids)

    # -- the slot link ------------------------------------------------------------------
    def linked(
        self,
        slots: npt.NDArray[np.int64],
        ids: Sequence[str | None],
        slot_of: Mapping[str, int],
        changes: list[int] | None,
        token: object,
    ) -> npt.NDArray[np.int64]:
        """The registry slots of the capability matcher's ``slots`` (-1: not
        indexed here), through an integer map instead of a canonical id and a
        dict lookup per candidate. ``ids``/``slot_of`` are the matcher's slot
        table (slot -> id, id -> slot), ``changes`` its slots whose id changed
        since the last call (None: unknown), ``token`` the table itself (a new
        table: the map is rebuilt). The caller holds the lock under which both
        the matcher and this registry are written (LiveIndex.lock), so neither
        moves until the answer is built."""
        link = self._link
        log, self._link_log = self._link_log, []
        if token is not self._link_token or changes is None or log is None:
            get = self._slot_of.get
            link = np.fromiter(
                (-1 if c is None else get(c, -1) for c in ids), dtype=np.int64, count=len(ids)
            )
            self._link_token = token
        else:
            if len(link) < len(ids):
                grown = np.full(max(64, 2 * len(link), len(ids)), -1, dtype=np.int64)
                grown[: len(link)] = link
                link = grown
            for m in changes:
                c = ids[m] if m < len(ids) else None
                link[m] = -1 if c is None else self._slot_of.get(c, -1)
            for cid in log:
                at = slot_of.get(cid)
                if at is not None:
                    link[at] = self._slot_of.get(cid, -1)
        self._link = link
        out: npt.NDArray[np.int64] = link[slots] if len(slots) else slots.astype(np.int64)
        return out

    def entry_at(self, slot: int) -> AgentEntry:
        """The entry in registry slot ``slot`` (ScoredAgent.slot)."""
        return self._entry(slot)

    # -- DISCOVER --------------------------------------------------------------------
    def set_profiles(self, items: Sequence[tuple[str, ProfileAttrs]]) -> None:
        """The profile attributes of indexed agents (start-up fills them after
        the registry rows, in bulk; every other write comes with its entry)."""
        slots, attrs = [], []
        for cid, a in items:
            slot = self._slot_of.get(cid)
            if slot is not None:
                slots.append(slot)
                attrs.append(a)
        self.profiles.set_many(slots, attrs)

    def _slots_for(self, ids: Sequence[str | None]) -> npt.NDArray[np.int64]:
        get = self._slot_of.get
        return np.fromiter(
            (-1 if c is None else get(c, -1) for c in ids), dtype=np.int64, count=len(ids)
        )

    def profile_state(
        self, ids: Sequence[str | None]
    ) -> tuple[dict[str, npt.NDArray[Any]], dict[str, list[str]]]:
        """The profile attributes of the agents ``ids`` (a snapshot's slot
        order; None or not indexed: none), as arrays and value tables."""
        return self.profiles.state(self._slots_for(ids))

    def restore_profiles(
        self, ids: Sequence[str | None], arrays: dict[str, Any], values: dict[str, list[str]]
    ) -> None:
        """:meth:`profile_state` written back, for the agents indexed here whose
        attributes are not set yet."""
        self.profiles.restore(self._slots_for(ids), arrays, values)

    def has_profile(self, canonical_id: str) -> bool:
        slot = self._slot_of.get(canonical_id)
        return slot is not None and self.profiles.known(slot)

    def profile_of(self, canonical_id: str) -> ProfileAttrs | None:
        slot = self._slot_of.get(canonical_id)
        return None if slot is None else self.profiles.attrs(slot)

    def gate_mask(
        self,
        params: DiscoverParams,
        scope: AuthorityScope,
        zones: ZonePolicy,
        now: float | None = None,
    ) -> npt.NDArray[np.bool_]:
        """Which slots pass every hard gate: ans.governance.policy.first_failed_gate,
        vectorized (lifecycle is implied: only Active agents are indexed), then
        the profile's: expiry (``now``, epoch seconds; never served once
        expired), and the request's tag, protocol, region and age filters
        (:meth:`ans.profile_columns.ProfileColumns.mask`)."""
        n = len(self._ids)
        mask: npt.NDArray[np.bool_] = self._valid[:n] & (self._tier[:n] <= max_tier(params))
        if now is not None:
            self.profiles.apply(mask, params.profile, now)
        if params.behavioral_trust_min is not None:
            mask &= self._behavioral[:n] >= params.behavioral_trust_min
        if params.governance_zone is not None:
            code = self._zones.code_of.get(params.governance_zone)
            if code is None:
                return np.zeros(n, dtype=bool)
            mask &= self._zone[:n] == code
        if params.org_domain is not None:
            code = self._orgs.code_of.get(params.org_domain)
            if code is None:
                return np.zeros(n, dtype=bool)
            mask &= self._org[:n] == code
        granted = np.array([zones.granted(z, scope) for z in self._zones.values], dtype=bool)
        if not granted.all():
            mask &= granted[self._zone[:n]]
        return mask

    def slots_of(self, canonical_ids: Iterable[str]) -> npt.NDArray[np.int64]:
        """Slot per id (-1 for ids not indexed)."""
        get = self._slot_of.get
        return np.fromiter((get(c, -1) for c in canonical_ids), dtype=np.int64)

    def rank(
        self,
        slots: npt.NDArray[np.int64],
        cms: npt.NDArray[np.float64] | None,
        limit: int | None,
    ) -> list[ScoredAgent]:
        """The best ``limit`` (all when None) of ``slots`` by exact rank_score,
        ties by canonical_id ascending (ranking.sort_key). ``cms`` is each
        slot's capability_match_score; None means 0 for all (no intent)."""
        n = len(slots)
        if n == 0:
            return []
        if cms is None:
            approx = self._score0[slots]
            margin = 0.0
        else:
            w = self._weights
            raw = (
                w.trust_tier * _TIER_NORM[self._tier[slots]]
                + w.behavioral_trust * self._behavioral[slots]
                + w.capability_match * cms
            )
            approx = np.round(raw, PRECISION)
            # cms may be unrounded (<= 5e-7 from its 6-decimal value): still inside the margin
            margin = _ROUND_MARGIN
        if limit is not None and n > limit:
            kth = np.partition(approx, n - limit)[n - limit]
            cand = np.nonzero(approx >= kth - margin)[0]
        else:
            cand = np.arange(n)
        ids = self._ids
        out: list[ScoredAgent] = []
        if cms is None:
            for i, s in zip(cand.tolist(), approx[cand].tolist(), strict=True):
                slot = int(slots[i])
                cid = ids[slot]
                assert cid is not None
                out.append(ScoredAgent(s, 0.0, cid, slot))
        else:
            w = self._weights
            tiers = self._tier[slots[cand]].tolist()
            behav = self._behavioral[slots[cand]].tolist()
            for i, t, b in zip(cand.tolist(), tiers, behav, strict=True):
                slot = int(slots[i])
                cid = ids[slot]
                assert cid is not None
                c = round(float(cms[i]), PRECISION)
                out.append(ScoredAgent(rank_score(w, t, b, c), c, cid, slot))

        def key(r: ScoredAgent) -> tuple[float, str]:
            return sort_key(r.rank_score, r.canonical_id)

        if limit is not None and len(out) > 4 * limit:
            return heapq.nsmallest(limit, out, key=key)
        out.sort(key=key)
        return out if limit is None else out[:limit]
