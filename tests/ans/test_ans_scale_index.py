"""The capability index at scale: CSR postings under churn, bulk equals one-by-one,
approximate (FAISS) mode against the exhaustive path, snapshots."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ans.ann import CANDIDATE_BASE, MAX_CANDIDATES, AnnIndex, AnnSettings
from ans.matcher import CapabilityIndex, CapabilityProfile, Example, profile_from
from ans.postings import SlotPostings

DOMAINS = {
    "audit": "audit solidity smart contracts reentrancy overflow security findings report",
    "invoice": "invoice processing accounts payable vendor payments reconciliation ledger",
    "legal": "contract law review clauses liability indemnity jurisdiction counsel",
    "radiology": "radiology report triage imaging scans findings urgent clinicians",
    "travel": "travel booking flights hotels itinerary visas airline loyalty",
    "translate": "translation localization languages glossary subtitles documents",
    "forecast": "supply chain demand forecasting inventory warehouses logistics",
    "support": "customer support tickets triage chatbot refunds escalation",
    "tax": "tax filing returns deductions payroll compliance deadlines",
    "fraud": "fraud detection transactions anomalies chargebacks risk scoring",
}


def make_profiles(n: int, seed: int = 7) -> list[CapabilityProfile]:
    rng = np.random.default_rng(seed)
    names = sorted(DOMAINS)
    out = []
    for i in range(n):
        d = names[int(rng.integers(len(names)))]
        words = DOMAINS[d].split()
        pick = lambda k: " ".join(rng.choice(words, size=k, replace=True).tolist())  # noqa: E731
        manifest = {
            "canonical_id": f"{i:064x}",
            "agent_label": f"{d.title()}Agent{i}",
            "job_description": f"{pick(8)}. Also {pick(5)}.",
            "supported_methods": ["QUERY"],
        }
        caps: dict[str, Any] = {
            "tags": [d, words[int(rng.integers(len(words)))]],
            "tools": [{"name": pick(2)}],
            "examples": [{"id": f"ex-{k}", "text": f"please {pick(6)}"} for k in range(3)],
        }
        out.append(profile_from(manifest, caps))
    return out


QUERIES = [
    "audit my solidity contract for reentrancy",
    "reconcile vendor invoices with the ledger",
    "review indemnity clauses in a contract",
    "triage urgent radiology scans",
    "book flights and hotels for a trip",
    "translate documents and subtitles",
    "forecast warehouse inventory demand",
    "escalate customer refund tickets",
    "file payroll tax returns before deadlines",
    "score transactions for fraud risk and chargebacks",
]


def top(idx: CapabilityIndex, q: str, k: int, **kw: Any) -> list[str]:
    got = idx.query(q, None, **kw).above(0.0)
    return [c for c, _ in sorted(got.items(), key=lambda t: (-t[1], t[0]))][:k]


# -- postings -----------------------------------------------------------------------


@pytest.mark.parametrize("width", [0, 2])
@pytest.mark.parametrize("seed", [3, 4, 7])
def test_slot_postings_match_a_dict_under_churn(width: int, seed: int) -> None:
    # Reads every 10 steps: a cached view (a key's base plus its delta) must not
    # keep the base posting of a slot replaced since (seed 4, width 0 did).
    rng = np.random.default_rng(seed)
    p = SlotPostings(width=width)
    truth: dict[int, dict[int, bytes]] = {}
    keys = [p.intern(f"w{i}") for i in range(12)]
    for step in range(800):
        op = rng.random()
        slot = int(rng.integers(0, 60))
        doc = {
            k: bytes(rng.integers(1, 9, width).tolist())
            for k in rng.choice(keys, size=int(rng.integers(1, 6)), replace=False).tolist()
        }
        if op < 0.2:
            p.remove(slot)
            truth.pop(slot, None)
        elif op < 0.5:
            p.put(slot, doc)
            truth[slot] = doc
        elif op < 0.9:
            slots = sorted({slot, int(rng.integers(0, 60))})
            docs = [doc, {keys[int(rng.integers(0, 12))]: bytes([1] * width)}][: len(slots)]
            p.add_many(slots, docs)
            truth.update(dict(zip(slots, docs, strict=True)))
        else:
            p.compact()
        if step % 10 == 0:
            for k in keys:
                slots, payload = p.postings(k)
                got = {int(s): bytes(row.tolist()) for s, row in zip(slots, payload, strict=True)}
                want = {s: d[k] for s, d in truth.items() if k in d}
                assert got == want, (step, k)


@pytest.mark.parametrize("width", [0, 3])
def test_few_bulk_postings_are_inserted_into_the_sorted_base(width: int) -> None:
    # A few postings against a large base are inserted where they belong
    # (MERGE_RATIO) instead of the base being sorted again: the same lists.
    calls: list[int] = []

    class Counting(SlotPostings):
        def _merge_into_base(self, parts: list[Any]) -> None:
            calls.append(len(parts))
            super()._merge_into_base(parts)

    rng = np.random.default_rng(5)
    names = [f"w{i}" for i in range(60)]

    def doc(p: SlotPostings, mark: int) -> dict[int, bytes]:
        return {p.intern(k): bytes([mark] * width) for k in rng.choice(names, 5, replace=False)}

    merged, resorted = Counting(width), SlotPostings(width)
    for k in names:  # the same key ids in both
        resorted.intern(k)
    first = [doc(merged, 1) for _ in range(600)]
    for p in (merged, resorted):
        p.add_many(list(range(600)), first)
        p.settle()
    calls.clear()
    for r in range(15):
        slots = sorted(set(rng.integers(0, 800, 6).tolist()))
        docs = [doc(merged, 2 + r % 7) for _ in slots]
        for p in (merged, resorted):
            p.remove(slots[0])
            p.add_many(slots, docs)
        merged.settle()
        pending, resorted._pending = resorted._pending, []
        resorted._pending_slots.clear()
        resorted._rebuild_sorted(pending)
        for attr in ("_indptr", "_slots", "_payload"):
            assert np.array_equal(getattr(merged, attr), getattr(resorted, attr)), (r, attr)
        assert merged.pending == 0
    assert len(calls) == 15  # every round took the insert path


# -- bulk and one by one ------------------------------------------------------------


def test_upsert_many_scores_like_one_by_one(embedder: Any) -> None:
    profiles = make_profiles(120)
    one = CapabilityIndex(embedder)
    for p in profiles:
        one.upsert(p)
    bulk = CapabilityIndex(embedder)
    bulk.upsert_many(list(zip(profiles, bulk.embed_profiles(profiles), strict=True)))
    for q in QUERIES[:4]:
        a, b = one.query(q, None), bulk.query(q, None)
        assert a.above(0.0) == b.above(0.0)


def test_a_small_batch_goes_to_the_delta_and_a_bulk_one_is_merged_once(embedder: Any) -> None:
    # A cold start's or a follower's handful of changes must not leave every
    # posting list to be rebuilt by the next query (by each worker, after a fork).
    from ans.index.slots import SMALL_BATCH

    profiles = make_profiles(SMALL_BATCH + 40)
    bulk, few = profiles[:40], profiles[40:]
    one = CapabilityIndex(embedder)
    for p in profiles:
        one.upsert(p)
    idx = CapabilityIndex(embedder)
    postings = [idx._table.lexical.postings, idx._table.tags]
    idx.upsert_many(list(zip(few, idx.embed_profiles(few), strict=True)))
    assert [p.pending for p in postings] == [0, 0]  # len(few) == SMALL_BATCH: the delta
    idx.upsert_many(list(zip(bulk, idx.embed_profiles(bulk), strict=True)))
    assert [p.pending for p in postings] == [0, 0]
    more = [replace(p, canonical_id=f"b{i:063x}")
            for i, p in enumerate(make_profiles(2 * SMALL_BATCH, seed=11))]
    idx.upsert_many(list(zip(more, idx.embed_profiles(more), strict=True)))
    assert [p.pending for p in postings] == [len(more)] * 2  # bulk: merged later, in one sort
    idx.settle()
    assert [p.pending for p in postings] == [0, 0]
    for p in more:
        one.upsert(p)
    for q in QUERIES[:4]:
        assert idx.query(q, None).above(0.0) == one.query(q, None).above(0.0)


# -- approximate mode -----------------------------------------------------------------


@pytest.fixture(scope="module")
def big(embedder: Any) -> tuple[CapabilityIndex, list[CapabilityProfile]]:
    profiles = make_profiles(1500)
    idx = CapabilityIndex(embedder, settings=AnnSettings(exact_max=400, candidates=64, nprobe=8))
    idx.upsert_many(list(zip(profiles, idx.embed_profiles(profiles), strict=True)))
    return idx, profiles


def test_above_exact_max_the_index_goes_approximate(
    big: tuple[CapabilityIndex, list[CapabilityProfile]], embedder: Any
) -> None:
    idx, _ = big
    assert idx.approximate and idx.describe()["mode"] == "approximate"
    small = CapabilityIndex(embedder, settings=AnnSettings(exact_max=400))
    small.upsert_many(
        list(zip(make_profiles(50), small.embed_profiles(make_profiles(50)), strict=True))
    )
    assert not small.approximate and small.describe()["mode"] == "exact"


def test_candidates_grow_with_the_catalog_beyond_the_base_size() -> None:
    settings = AnnSettings(candidates=512)
    assert settings.candidates_at(20_000) == 512
    assert settings.candidates_at(CANDIDATE_BASE) == 512
    # sqrt growth: 4x the agents, twice the candidates; 10x, sqrt(10)x
    assert settings.candidates_at(4 * CANDIDATE_BASE) == 1024
    assert settings.candidates_at(10 * CANDIDATE_BASE) == round(512 * 10**0.5)
    assert settings.candidates_at(10**10) == MAX_CANDIDATES


def _clustered(n: int, dim: int = 32, seed: int = 3) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(20, dim))
    vecs = (centres[rng.integers(0, 20, n)] + 0.5 * rng.normal(size=(n, dim))).astype("f4")
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    return vecs


def test_search_keeps_faiss_own_k_best_and_the_floor_of_what_it_cut() -> None:
    vecs = _clustered(3000)
    ann = AnnIndex.build(32, vecs, np.arange(3000, dtype=np.int64) * 7, AnnSettings(nprobe=4))
    assert ann.layout_current
    queries = vecs[:5] + 0.1
    sizes = set()
    for k in (10, 63, 150, 300):
        dist, heap = ann._index.search(queries, k)
        for i in range(5):
            want = heap[i][heap[i] >= 0]
            sizes.add((k, len(want)))
            assert sorted(ann.search(queries[i : i + 1], k).tolist()) == sorted(want.tolist())
            # the floor: the k-th best score when k were found, else -inf
            _, (floor,) = ann.search_floors(queries[i : i + 1], k)
            if len(want) == k:
                assert floor == pytest.approx(dist[i, -1], abs=1e-6)
            else:
                assert floor == -np.inf
        assert len(ann.search(queries, k)) == int((heap >= 0).sum())
    assert any(n == k for k, n in sizes)  # the cut at k was exercised
    assert any(n < k for k, n in sizes)  # and a query with fewer hits than k
    assert set(ann.search(queries[:1], 10**4).tolist()) <= set(range(0, 3000 * 7, 7))


def test_a_removed_id_is_never_found_and_leaves_the_lists_in_one_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("ans.ann.STALE_MAX", 50)
    vecs = _clustered(2000, seed=5)
    # more probes than lists: every list (fast scan scored garbage beyond them)
    ann = AnnIndex.build(32, vecs, np.arange(2000, dtype=np.int64), AnnSettings(nprobe=10**3))
    assert ann.nprobe == 45
    for i in range(5):
        assert ann.search(vecs[i : i + 1], 1).tolist() == [i]
    gone = np.arange(0, 40, dtype=np.int64)
    ann.remove(gone)
    assert ann._index.ntotal == 2000 and len(ann) == 1960  # marked, still in the lists
    for i in gone[:10]:
        hits = ann.search(vecs[i : i + 1], 50)
        assert len(hits) and not set(hits.tolist()) & set(gone.tolist())
    # an id that comes back is added once, after its stale entry left
    ann.add(vecs[:1], np.array([0], dtype=np.int64))
    assert ann._index.ntotal == 1961 and len(ann) == 1961
    assert 0 in ann.search(vecs[:1], 50).tolist()
    # more than STALE_MAX marked: removed together
    ann.remove(np.arange(100, 151, dtype=np.int64))
    assert ann._index.ntotal == 1910 == len(ann)
    # a save writes no stale entry
    ann.remove(np.array([500], dtype=np.int64))
    ann.save(tmp_path / "cap.faiss")
    back = AnnIndex.load(tmp_path / "cap.faiss", 10**3)
    assert back._index.ntotal == 1909 and back.layout_current
    assert 500 not in back.search(vecs[500:501], 50).tolist()


def test_describe_reports_the_candidate_count_in_use(
    embedder: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A small base size, so that 30 agents already scale the configured 8.
    monkeypatch.setattr("ans.ann.CANDIDATE_BASE", 10)
    idx = CapabilityIndex(embedder, settings=AnnSettings(exact_max=10, candidates=8))
    profiles = make_profiles(30)
    idx.upsert_many(list(zip(profiles, idx.embed_profiles(profiles), strict=True)))
    assert idx.describe()["candidates"] == idx.settings.candidates_at(30) == round(8 * 3**0.5)


def test_approximate_top_results_agree_with_exhaustive(
    big: tuple[CapabilityIndex, list[CapabilityProfile]],
) -> None:
    idx, _ = big
    overlap = []
    for q in QUERIES:
        approx = idx.query(q, None)
        exact = idx.query(q, None, exhaustive=True)
        assert not approx.exhaustive and exact.exhaustive
        assert len(approx.ids) < len(exact.ids)  # only candidates were scored
        a = top(idx, q, 20)
        e = top(idx, q, 20, exhaustive=True)
        overlap.append(len(set(a) & set(e)) / 20)
        # a candidate's score is the same number on both paths
        for cid in a[:5]:
            assert approx.score(cid) == exact.score(cid)
    assert np.mean(overlap) >= 0.9, overlap


def test_each_part_of_a_compound_intent_adds_only_its_own_best_few_candidates(
    big: tuple[CapabilityIndex, list[CapabilityProfile]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The whole intent searches every source ``candidates_at`` deep; each of
    its parts (``ans.text.segments``) adds only its ``part_candidates_at``
    nearest by vector: enough to bring in an agent that does one part alone
    (here: travel, drowned out in the whole intent by its audit words),
    without a full search per part (the part's words are the intent's)."""
    idx, profiles = big
    intent = "audit my solidity contract for reentrancy and overflow, then book flights and hotels"
    travel = {p.canonical_id for p in profiles if p.tags[0] == "travel"}

    def scored(part_candidates: int) -> set[str]:
        settings = replace(idx.settings, part_candidates=part_candidates)
        monkeypatch.setattr(idx._ann, "settings", settings)
        ids = idx.query(intent, None).ids
        assert None not in ids
        return set(ids)  # type: ignore[arg-type]

    whole, few, deep = scored(0), scored(8), scored(64)
    assert whole < few < deep
    # two parts, at most 8 nearest each
    assert len(few - whole) <= 2 * 8
    assert len(few & travel) > len(whole & travel)
    assert len(deep & travel) > len(few & travel)
    default = AnnSettings()
    assert default.part_candidates_at(CANDIDATE_BASE) == default.part_candidates == 64
    assert default.part_candidates_at(4 * CANDIDATE_BASE) == 128  # grows like sqrt(n)
    assert replace(default, part_candidates=0).part_candidates_at(10**6) == 0
    # never deeper than the whole intent's search
    assert replace(default, part_candidates=900).part_candidates_at(1000) == 512


def test_new_agents_wait_outside_the_inverted_lists_and_rank_as_exhaustive_scoring_does(
    tmp_path: Path, embedder: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An agent added to the approximate index is kept out of FAISS's lists
    (adding one copies its whole list, in every worker) and found by an exact
    scan of the pending rows instead, until more than ``pending_max`` wait;
    removal, re-activation, snapshots and the merge keep the two apart."""
    monkeypatch.setattr("ans.index.approximate.PENDING_MIN", 40)
    profiles = make_profiles(1560, seed=11)
    settings = AnnSettings(exact_max=400, candidates=64, nprobe=8)
    idx = CapabilityIndex(embedder, settings=settings)
    idx.upsert_many(list(zip(profiles[:1500], idx.embed_profiles(profiles[:1500]), strict=True)))
    ann = idx._ann
    assert ann.cap is not None and len(ann.cap) == 1500 and not ann.pending
    new = profiles[1500:1530]
    for p in new:
        idx.upsert(p)
    assert len(ann.cap) == 1500 and len(ann.pending) == 30
    # from the vectors alone (no BM25, no tags): every pending agent in a query
    # text's exact top k is among its candidates
    t = idx._table
    n = len(t.id_of)
    qv = idx.query_vectors([*QUERIES, *(p.facets["description"] for p in new[:10])])
    cand = set(ann.candidates(t, qv, [], [], n).tolist())
    sims = t.cap.scan(qv, n)
    waiting = np.array(sorted(ann.pending), dtype=np.int64)
    k = settings.candidates_at(len(t))
    reached = 0
    for j in range(len(qv)):
        kth = np.sort(sims[t.alive[:n], j])[-k]
        want = waiting[sims[waiting, j] >= kth]
        assert set(want.tolist()) <= cand, j
        reached += len(want)
    assert reached >= 10
    new_ids = {p.canonical_id for p in new}
    found = 0
    for q in [*QUERIES, *(p.facets["description"] for p in new[:10])]:
        want = set(top(idx, q, 20, exhaustive=True)) & new_ids
        assert want <= set(top(idx, q, 20)), q
        found += len(want)
    assert found >= 10  # the new agents do rank
    # a pending agent removed is gone; one from the lists re-activated moves out of them
    gone = new[0].canonical_id
    idx.remove(gone)
    assert len(ann.pending) == 29 and gone not in idx.query(new[0].facets["description"], None).ids
    idx.upsert(profiles[0])
    assert len(ann.cap) == 1499 and len(ann.pending) == 30
    # the snapshot keeps which agents wait
    before = {q: top(idx, q, 20) for q in QUERIES}
    idx.save(tmp_path / "ix", {})
    by_id = {p.canonical_id: p for p in profiles}
    loaded = CapabilityIndex.load(
        tmp_path / "ix",
        embedder,
        settings=settings,
        profile_source=lambda ids: {c: by_id[c] for c in ids if c in by_id},
    )
    assert loaded is not None
    again = loaded[0]
    assert again._ann.cap is not None and len(again._ann.cap) == 1499
    assert sorted(again._ann.pending) == sorted(ann.pending)
    assert {q: top(again, q, 20) for q in QUERIES} == before
    # past the bound, every waiting agent is merged into the lists at once
    for p in profiles[1530:1541]:
        again.upsert(p)
    assert len(again._ann.cap) == 1499 + 41 and not again._ann.pending
    assert len(again) == 1540


def test_removed_agents_leave_the_approximate_index(
    big: tuple[CapabilityIndex, list[CapabilityProfile]],
) -> None:
    idx, profiles = big
    q = QUERIES[0]
    first = top(idx, q, 5)
    for cid in first:
        idx.remove(cid)
    try:
        again = top(idx, q, 50)
        assert not set(first) & set(again)
        assert len(again) == 50
    finally:
        by_id = {p.canonical_id: p for p in profiles}
        for cid in first:
            idx.upsert(by_id[cid])
    assert top(idx, q, 5) == first  # back, with the same scores


def test_score_of_a_non_candidate_is_computed(
    big: tuple[CapabilityIndex, list[CapabilityProfile]],
) -> None:
    idx, _ = big
    res = idx.query(QUERIES[0], None)
    outsider = next(c for c in idx.ids() if c not in set(res.ids))
    exact = idx.query(QUERIES[0], None, exhaustive=True)
    assert res.score(outsider) == exact.score(outsider)


def test_capability_domains_rescore_candidates_from_profiles(embedder: Any) -> None:
    profiles = make_profiles(300)
    by_id = {p.canonical_id: p for p in profiles}
    asked: list[int] = []

    def source(ids: Any) -> dict[str, CapabilityProfile]:
        asked.append(len(ids))
        return {c: by_id[c] for c in ids if c in by_id}

    idx = CapabilityIndex(embedder, profile_source=source, settings=AnnSettings(candidates=40))
    idx.upsert_many(list(zip(profiles, idx.embed_profiles(profiles), strict=True)))
    ref = CapabilityIndex(embedder)  # keeps profiles: exhaustive per-facet reference
    ref.upsert_many(list(zip(profiles, ref.embed_profiles(profiles), strict=True)))
    got = idx.query(QUERIES[0], ("tools",))
    assert asked and max(asked) < len(profiles)  # only candidates were re-embedded
    want = ref.query(QUERIES[0], ("tools",), exhaustive=True)
    best = sorted(got.above(0.0).items(), key=lambda t: (-t[1], t[0]))[:5]
    for cid, s in best:
        assert s == pytest.approx(want.score(cid), abs=1e-6)


# -- snapshots --------------------------------------------------------------------------


def test_snapshot_round_trip_gives_identical_scores(
    tmp_path: Path, big: tuple[CapabilityIndex, list[CapabilityProfile]], embedder: Any
) -> None:
    idx, profiles = big
    by_id = {p.canonical_id: p for p in profiles}
    marks = np.arange(len(idx.slot_ids()), dtype=np.int32) * 3  # a caller's per-slot array
    idx.save(tmp_path / "index", {"change_seq": 42, "marks": marks})
    loaded = CapabilityIndex.load(
        tmp_path / "index",
        embedder,
        settings=idx.settings,
        profile_source=lambda ids: {c: by_id[c] for c in ids if c in by_id},
    )
    assert loaded is not None
    again, meta = loaded
    # the caller's meta comes back, its arrays too, with each slot's id as saved
    slot_ids = meta.pop("slot_ids")
    np.testing.assert_array_equal(meta.pop("marks"), marks)
    assert meta == {"change_seq": 42}
    assert slot_ids == idx.slot_ids() == again.slot_ids()
    assert again.approximate and len(again) == len(idx)
    for q in QUERIES[:5]:
        a, b = idx.query(q, None, evidence=True), again.query(q, None, evidence=True)
        assert a.above(0.0) == b.above(0.0)
        cid = top(idx, q, 1)[0]
        assert a.evidence(cid) == b.evidence(cid)
    # a loaded index keeps taking changes
    new = make_profiles(1, seed=99)[0]
    new = CapabilityProfile(f"{'f' * 64}", new.facets, new.tags, new.examples)
    again.upsert(new)
    assert again.query(QUERIES[0], None, only=[new.canonical_id]).ids == [new.canonical_id]


def test_a_snapshot_with_the_old_example_index_loads_and_the_next_save_drops_it(
    tmp_path: Path, big: tuple[CapabilityIndex, list[CapabilityProfile]], embedder: Any
) -> None:
    """Snapshots written before the example component became evidence also hold
    ``examples.faiss``: they load, answer as the saving index does, and the
    next save writes a snapshot without it."""
    idx, profiles = big
    by_id = {p.canonical_id: p for p in profiles}
    directory = tmp_path / "index"
    idx.save(directory, {"change_seq": 7})
    assert not (directory / "examples.faiss").exists()
    (directory / "examples.faiss").write_bytes((directory / "capability.faiss").read_bytes())
    loaded = CapabilityIndex.load(
        directory,
        embedder,
        settings=idx.settings,
        profile_source=lambda ids: {c: by_id[c] for c in ids if c in by_id},
    )
    assert loaded is not None
    again, _ = loaded
    for q in QUERIES[:3]:
        assert again.query(q, None).above(0.0) == idx.query(q, None).above(0.0)
    again.save(directory, {"change_seq": 8})
    assert sorted(p.name for p in directory.iterdir()) == sorted(
        ["arrays.npz", "capability.faiss", "index.json"]
    )


def test_exact_snapshot_round_trip(tmp_path: Path, embedder: Any) -> None:
    profiles = make_profiles(80)
    idx = CapabilityIndex(embedder)
    idx.upsert_many(list(zip(profiles, idx.embed_profiles(profiles), strict=True)))
    idx.remove(profiles[3].canonical_id)
    idx.save(tmp_path / "ix", {})
    loaded = CapabilityIndex.load(tmp_path / "ix", embedder)
    assert loaded is not None
    again = loaded[0]
    assert not again.approximate and sorted(again.ids()) == sorted(idx.ids())
    assert again.query(QUERIES[1], None).above(0.0) == idx.query(QUERIES[1], None).above(0.0)
    # the freed slot is reused, not confused with the removed agent
    again.upsert(profiles[3])
    assert profiles[3].canonical_id in again.query(QUERIES[1], None).above(0.0)


def test_a_tag_whose_only_agent_left_before_a_merge_keeps_the_snapshot_loadable(
    tmp_path: Path, embedder: Any
) -> None:
    """An agent ACTIVATEd with a tag no other agent has, then removed before its
    postings were merged, left the tag interned with no range in the saved
    postings: the next start-up refused the snapshot as inconsistent and
    rebuilt the index from the store (minutes at 1M agents)."""
    profiles = make_profiles(40)
    idx = CapabilityIndex(embedder)
    idx.upsert_many(list(zip(profiles, idx.embed_profiles(profiles), strict=True)))
    idx.save(tmp_path / "first", {})
    odd = make_profiles(1, seed=7)[0]
    odd = CapabilityProfile("e" * 64, odd.facets, ("a-tag-only-it-has",), odd.examples)
    idx.upsert(odd)  # one at a time: its postings wait in the delta
    idx.remove(odd.canonical_id)  # ... and leave it before any merge
    idx.save(tmp_path / "ix", {})
    loaded = CapabilityIndex.load(tmp_path / "ix", embedder)
    assert loaded is not None, "the snapshot was refused"
    again = loaded[0]
    assert sorted(again.ids()) == sorted(idx.ids())
    assert again.query(QUERIES[1], None).above(0.0) == idx.query(QUERIES[1], None).above(0.0)
    again.upsert(odd)  # the tag is usable again after the load
    assert odd.canonical_id in again.ids()


def test_slot_postings_state_covers_every_interned_key() -> None:
    p = SlotPostings(width=0)
    p.put(0, {p.intern("kept"): b""})
    p.compact()
    p.put(1, {p.intern("gone"): b""})
    p.remove(1)
    state = p.state()
    assert len(state["indptr"]) == len(p.keys) + 1 == 3
    again = SlotPostings.restore(0, p.keys, state)
    assert again.count("kept") == 1 and again.count("gone") == 0


def test_a_loaded_index_takes_new_agents_into_its_room_without_copying_its_rows(
    tmp_path: Path, embedder: Any
) -> None:
    """The rows are restored with room for as many again (before a fork they
    are then shared): the first new agents are written into that room, the
    restored rows are never copied into a larger array, and what is saved
    after is the rows in use only."""
    profiles = make_profiles(60)
    idx = CapabilityIndex(embedder)
    idx.upsert_many(list(zip(profiles[:50], idx.embed_profiles(profiles[:50]), strict=True)))
    idx.save(tmp_path / "ix", {})
    loaded = CapabilityIndex.load(tmp_path / "ix", embedder)
    assert loaded is not None
    again = loaded[0]
    table = again._table
    held = {
        "ctx": table.ctx.codes, "cap": table.cap.codes, "ex": table.examples.rows.codes,
    }
    assert len(table.ctx) >= 2 * 50 and len(table.cap) >= 2 * 50
    before = again.query(QUERIES[1], None).above(0.0)
    for p in profiles[50:]:
        again.upsert(p)
    assert table.ctx.codes is held["ctx"] and table.cap.codes is held["cap"]
    assert table.examples.rows.codes is held["ex"]
    want = CapabilityIndex(embedder)
    want.upsert_many(list(zip(profiles, want.embed_profiles(profiles), strict=True)))
    got = again.query(QUERIES[1], None).above(0.0)
    assert got == want.query(QUERIES[1], None).above(0.0)
    assert set(before) <= set(got) | {p.canonical_id for p in profiles[50:]}
    again.save(tmp_path / "ix2", {})
    with np.load(tmp_path / "ix2" / "arrays.npz") as npz:
        assert len(npz["ctx_scale"]) == len(npz["ctx_codes"]) == 60
    reloaded = CapabilityIndex.load(tmp_path / "ix2", embedder)
    assert reloaded is not None
    assert reloaded[0].query(QUERIES[1], None).above(0.0) == got


def test_a_format_1_snapshot_loads_with_no_agent_waiting_and_a_newer_one_is_refused(
    tmp_path: Path, big: tuple[CapabilityIndex, list[CapabilityProfile]], embedder: Any
) -> None:
    """Format 2 added the agents waiting outside the FAISS lists; a format-1
    snapshot (written before) has none and still loads; an unknown format is
    refused (rebuilt from the store)."""
    idx, profiles = big
    by_id = {p.canonical_id: p for p in profiles}
    directory = tmp_path / "index"
    idx.save(directory, {})
    doc = json.loads((directory / "index.json").read_text())
    assert doc["format"] == 2
    old = {k: v for k, v in doc.items() if k != "ann_pending"} | {"format": 1}
    (directory / "index.json").write_text(json.dumps(old))
    source = lambda ids: {c: by_id[c] for c in ids if c in by_id}  # noqa: E731
    loaded = CapabilityIndex.load(directory, embedder, settings=idx.settings, profile_source=source)
    assert loaded is not None and loaded[0].approximate and loaded[0]._ann.pending == {}
    (directory / "index.json").write_text(json.dumps(doc | {"format": 3}))
    assert CapabilityIndex.load(directory, embedder, settings=idx.settings) is None


def test_unusable_snapshots_are_refused(tmp_path: Path, embedder: Any) -> None:
    assert CapabilityIndex.load(tmp_path / "absent", embedder) is None
    idx = CapabilityIndex(embedder)
    idx.upsert(CapabilityProfile("a" * 64, {"description": "x"}, (), (Example("e", "audit code"),)))
    idx.save(tmp_path / "ix", {})
    (tmp_path / "ix" / "arrays.npz").write_bytes(b"not a zip")
    assert CapabilityIndex.load(tmp_path / "ix", embedder) is None
    idx.save(tmp_path / "iy", {})

    class Other:
        dim = embedder.dim
        fingerprint = "another-model"

    assert CapabilityIndex.load(tmp_path / "iy", Other()) is None  # type: ignore[arg-type]


# -- configuration ------------------------------------------------------------------


def test_index_section_of_the_config(tmp_path: Path) -> None:
    from ans.config import ConfigError, load

    cfg = tmp_path / "ans.toml"
    cfg.write_text(
        "[index]\nexact_max = 5000\nnprobe = 32\ncandidates = 128\npart_candidates = 0\n"
        "embedding_dims = 128\n"
    )
    got = load(cfg).index
    assert (got.exact_max, got.nprobe, got.candidates, got.part_candidates) == (5000, 32, 128, 0)
    assert got.embedding_dims == 128
    assert load(None).index == AnnSettings() and AnnSettings().embedding_dims == 256
    for body, needle in (
        ("[index]\nflat = true\n", "unknown key"),
        ('[index]\nnprobe = "8"\n', "integer"),
        ("[index]\ncandidates = 1\n", "must be in"),
        ("[index]\npart_candidates = -1\n", "must be in"),
        ('[index]\nscan_layout = "tiled"\n', "scan_layout must be one of auto, packed, streamed"),
        ("[index]\nscan_layout = 1\n", "scan_layout must be one of"),
        ("[index]\nembedding_dims = 200\n", "embedding_dims must be one of 128, 256"),
        ('[index]\nembedding_dims = "128"\n', "embedding_dims must be one of"),
        ("[index]\nembedding_dims = true\n", "embedding_dims must be one of"),
        ("[index]\nembedding_dims = 128.0\n", "embedding_dims must be one of"),
        ("index = 3\n", "must be a table"),
    ):
        cfg.write_text(body)
        with pytest.raises(ConfigError, match=needle):
            load(cfg)


def test_scan_layout_pinned_by_the_config(tmp_path: Path, embedder: Any) -> None:
    """``[index] scan_layout`` pins the exhaustive scan's layout instead of the
    start-up measurement; "auto" (the default) leaves it to the measurement."""
    from ans.config import load
    from ans.index import layout

    cfg = tmp_path / "ans.toml"
    assert load(None).index.scan_layout == "auto"
    try:
        for pinned in ("streamed", "packed"):
            cfg.write_text(f'[index]\nscan_layout = "{pinned}"\n')
            settings = load(cfg).index
            assert settings.scan_layout == pinned
            layout.force_layout(None)
            CapabilityIndex(embedder, settings=settings)
            described = layout.describe()
            assert described == {
                "scan_layout": pinned,
                "scan_layout_pinned": True,
                "scan_layout_us": {},
            }
            assert layout.scan_layout() == pinned  # nothing measured
        layout.force_layout(None)
        CapabilityIndex(embedder, settings=AnnSettings())  # auto: not pinned
        assert layout.describe()["scan_layout"] is None
        assert layout.scan_layout() in ("packed", "streamed")
        assert layout.describe()["scan_layout_pinned"] is False
    finally:
        layout.force_layout(None)
