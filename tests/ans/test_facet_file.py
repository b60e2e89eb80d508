"""The facet-sums file: a ``capability_domains`` query reads its candidates'
facet sums instead of re-embedding their profiles (issue 26), and never uses a
row of another version of an agent, another embedder, or a damaged file."""

from __future__ import annotations

import multiprocessing
import sqlite3
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ans.index import snapshot
from ans.index.embedder import embedder_fingerprint
from ans.index.facet_file import FacetFile, decode, decode_rows, encode
from ans.index.profiles import FACETS, CapabilityProfile, profile_digest
from ans.matcher import CapabilityIndex, profile_from

DIM = 256


def agent(n: int, description: str, tools: str = "", examples: Sequence[str] = ()) -> Any:
    manifest = {
        "canonical_id": f"{n:064x}",
        "agent_label": f"agent-{n}",
        "job_description": description,
    }
    caps: dict[str, Any] = {"supported_methods": ["QUERY"]}
    if tools:
        caps["tools"] = [{"name": t, "description": t} for t in tools.split(",")]
    if examples:
        caps["examples"] = [{"id": f"ex-{i}", "text": t} for i, t in enumerate(examples)]
    return profile_from(manifest, caps)


CATALOG = [
    agent(1, "Audits Solidity smart contracts.", "slither,mythril", ["Find reentrancy bugs"]),
    agent(2, "Prepares tax returns.", "tax calculator", ["File my 1040"]),
    agent(3, "Books flights and hotels.", "flight search,hotel search"),
    agent(4, "Reviews code for security bugs.", "static analyzer", ["Review my pull request"]),
    agent(5, "Translates documents.", "translation memory"),
]
DOMAINS = ("tools",)


class CountingSource:
    """The index's profile source, counting what a query asked it for."""

    def __init__(self, profiles: Sequence[CapabilityProfile]) -> None:
        self.profiles = {p.canonical_id: p for p in profiles}
        self.asked: list[str] = []

    def __call__(self, ids: Sequence[str]) -> Mapping[str, CapabilityProfile]:
        self.asked.extend(ids)
        return {c: self.profiles[c] for c in ids if c in self.profiles}


def indexed(
    embedder: Any, tmp_path: Path, file: bool = True
) -> tuple[CapabilityIndex, CountingSource]:
    source = CountingSource(CATALOG)
    idx = CapabilityIndex(embedder, profile_source=source)
    if file:
        idx.facet_file = FacetFile(tmp_path / "facets.sqlite", embedder_fingerprint(embedder), DIM)
    idx.upsert_many([(p, idx.embed_profile(p)) for p in CATALOG])
    return idx, source


def ranking(idx: CapabilityIndex, intent: str) -> list[tuple[str, float]]:
    scores = idx.scores(intent, DOMAINS, 0.0)
    return sorted(scores.items(), key=lambda kv: -kv[1])


def sums(seed: int) -> Any:
    rng = np.random.default_rng(seed)
    return rng.normal(0, 3, (len(FACETS), DIM)).astype(np.float32)


def test_rows_round_trip_within_the_int16_bound_and_only_for_their_digest(tmp_path: Path) -> None:
    f = FacetFile(tmp_path / "f.sqlite", "model-a", DIM)
    a, b = sums(1), sums(2)
    b[3] = 0.0  # an empty facet stays exactly 0
    f.put([(11, a), (22, b)])
    got = f.get({"a": 11, "b": 22, "c": 33, "a-twin": 11})  # same text, same row
    assert sorted(got) == ["a", "a-twin", "b"]
    for want, row in ((a, got["a"]), (b, got["b"])):
        bound = np.abs(want).max(axis=1, keepdims=True) / 32767 * 0.5 + 1e-7
        assert np.all(np.abs(row - want) <= bound)
    assert not got["b"][3].any()
    assert f.get({"a": 12}) == {}  # another version of the agent: never its row
    f.forget([11])
    assert sorted(f.get({"a": 11, "b": 22})) == ["b"]
    np.testing.assert_array_equal(decode(encode(got["b"]), got["b"].shape), got["b"])


def test_rows_read_are_kept_in_memory_bounded_and_dropped_when_forgotten(tmp_path: Path) -> None:
    path = tmp_path / "f.sqlite"
    row = len(FACETS) * (4 + 2 * DIM)
    f = FacetFile(path, "model-a", DIM, cache_bytes=2 * row)  # two rows in memory
    f.put([(11, sums(1)), (22, sums(2)), (33, sums(3))])
    first = f.get({"a": 11, "b": 22})

    def behind_its_back(digest: int) -> None:  # another process's delete: no forget()
        with sqlite3.connect(path) as db:
            db.execute("DELETE FROM by_digest WHERE digest = ?", (digest,))

    behind_its_back(11)
    behind_its_back(22)
    again = f.get({"a": 11, "b": 22})  # from memory, no read: the same numbers
    assert sorted(again) == ["a", "b"]
    for k in ("a", "b"):
        assert again[k].tobytes() == first[k].tobytes()
    assert sorted(f.get({"c": 33, "b": 22})) == ["b", "c"]  # 33 read: 11 leaves memory
    assert f.get({"a": 11}) == {}
    f.forget([22])  # forgotten: gone from memory too, whatever the file holds
    f.put([(22, sums(2))])
    behind_its_back(22)
    assert f.get({"b": 22}) == {}
    assert sorted(f.get({"c": 33})) == ["c"]


def test_fewer_rows_are_kept_in_memory_for_a_large_catalog(tmp_path: Path) -> None:
    from ans.index.facet_file import LARGE_CATALOG

    path = tmp_path / "f.sqlite"
    row = len(FACETS) * (4 + 2 * DIM)
    f = FacetFile(path, "model-a", DIM, cache_bytes=8 * row)
    f.put([(d, sums(d)) for d in range(1, 10)])
    wanted = {f"a{d}": d for d in range(1, 9)}
    assert len(f.get(wanted, agents=LARGE_CATALOG)) == 8
    assert len(f._rows) == 8
    wanted["a9"] = 9  # the catalog grew; the next read trims what is kept
    assert len(f.get(wanted, agents=LARGE_CATALOG + 1)) == 9  # served all the same
    assert list(f._rows) == [8, 9]  # a quarter kept, the most recent


def test_rows_decoded_together_are_each_row_decoded_alone_bit_for_bit() -> None:
    rng = np.random.default_rng(3)
    rows = [encode(rng.normal(size=(len(FACETS), DIM)).astype(np.float32) * 10.0 ** k)
            for k in range(-3, 4)]
    rows.append(encode(np.zeros((len(FACETS), DIM), dtype=np.float32)))  # scale 0
    together = decode_rows(rows, (len(FACETS), DIM))
    assert together.shape == (len(rows), len(FACETS), DIM) and together.dtype == np.float32
    for row, got in zip(rows, together, strict=True):
        alone = decode(row, (len(FACETS), DIM))
        assert got.tobytes() == alone.tobytes()


def test_another_embedder_empties_the_file(tmp_path: Path) -> None:
    path = tmp_path / "f.sqlite"
    FacetFile(path, "model-a", DIM).put([(11, sums(1))])
    assert FacetFile(path, "model-a", DIM).get({"a": 11})
    assert FacetFile(path, "model-b", DIM).get({"a": 11}) == {}
    assert FacetFile(path, "model-a", DIM).get({"a": 11}) == {}  # emptied, not hidden


def test_a_damaged_file_is_replaced_and_an_unusable_one_tried_again_later(
    tmp_path: Path,
) -> None:
    path = tmp_path / "f.sqlite"
    path.write_bytes(b"not a database" * 1000)
    f = FacetFile(path, "model-a", DIM)
    f.put([(11, sums(1))])  # the damaged file is a cache lost: a new one takes the row
    assert sorted(f.get({"a": 11})) == ["a"]
    assert path.read_bytes()[:15] == b"SQLite format 3"
    # a directory that is not there (as a disk that refuses writes): no error, no
    # row, and no new attempt before RETRY_S
    gone = FacetFile(tmp_path / "not-yet" / "f.sqlite", "model-a", DIM)
    gone.put([(11, sums(1))])
    assert gone.get({"a": 11}) == {}
    (tmp_path / "not-yet").mkdir()
    gone.put([(11, sums(1))])
    assert not (tmp_path / "not-yet" / "f.sqlite").exists()  # still waiting
    gone._retry_at = 0.0  # RETRY_S later
    gone.put([(11, sums(1))])
    assert sorted(gone.get({"a": 11})) == ["a"]


def test_a_forked_worker_uses_its_own_connection(tmp_path: Path) -> None:
    f = FacetFile(tmp_path / "f.sqlite", "model-a", DIM)
    f.put([(5, sums(4))])  # the parent's connection is open before the fork

    def child() -> None:
        f.put([(7, sums(3))])  # through the inherited object

    proc = multiprocessing.get_context("fork").Process(target=child)
    proc.start()
    proc.join(30)
    assert proc.exitcode == 0
    assert sorted(f.get({"parent": 5, "child": 7})) == ["child", "parent"]


def test_a_restricted_query_reads_the_file_instead_of_re_embedding(
    embedder: Any, tmp_path: Path
) -> None:
    idx, source = indexed(embedder, tmp_path)
    plain, _ = indexed(embedder, tmp_path / "none", file=False)
    got = ranking(idx, "static analysis of smart contracts")
    assert source.asked == []  # every candidate's sums came from the file
    want = ranking(plain, "static analysis of smart contracts")
    assert [c for c, _ in got] == [c for c, _ in want]
    assert max(abs(a - b) for (_, a), (_, b) in zip(got, want, strict=True)) < 1e-4


def test_a_changed_agent_is_never_scored_with_its_old_sums(embedder: Any, tmp_path: Path) -> None:
    idx, source = indexed(embedder, tmp_path)
    assert idx.facet_file is not None
    before = dict(ranking(idx, "hotel booking"))
    old = CATALOG[4]
    new = agent(5, "Translates documents.", "hotel search,hotel booking")
    source.profiles[new.canonical_id] = new
    idx.upsert(new)  # the writer: the new version's row, the old one dropped
    assert idx.facet_file.get({"x": profile_digest(old)}) == {}
    assert idx.facet_file.get({"x": profile_digest(new)})
    after = dict(ranking(idx, "hotel booking"))
    assert after[new.canonical_id] > before[new.canonical_id] + 0.05
    assert source.asked == []
    # the old version's row written late (a slow worker) is never read for the new one
    idx.facet_file.put([(profile_digest(old), idx.embed_profile(old).facet_sums)])
    idx._facets._sums.clear()
    again = dict(ranking(idx, "hotel booking"))
    assert again[new.canonical_id] == pytest.approx(after[new.canonical_id], abs=1e-6)
    # a lost row is re-embedded once, then read
    idx.facet_file.forget([profile_digest(new)])
    idx._facets._sums.clear()
    assert dict(ranking(idx, "hotel booking")) == again
    assert source.asked == [new.canonical_id]
    idx._facets._sums.clear()
    ranking(idx, "hotel booking")
    assert source.asked == [new.canonical_id]
    idx.remove(new.canonical_id)  # an agent that leaves takes its row along
    assert idx.facet_file.get({"x": profile_digest(new)}) == {}


def test_slots_of_an_older_snapshot_are_embedded_once_then_read(
    embedder: Any, tmp_path: Path
) -> None:
    idx, source = indexed(embedder, tmp_path)
    idx.save(tmp_path / "snap", {})
    arrays = dict(np.load(tmp_path / "snap" / "arrays.npz"))
    assert sorted(arrays["digest"].tolist()) == sorted(profile_digest(p) for p in CATALOG)
    del arrays["digest"]  # as written before the facet-sums file existed
    np.savez(tmp_path / "snap" / "arrays.npz", **arrays)
    snap = snapshot.read(tmp_path / "snap", embedder)
    assert snap is not None and not snap.table.digest.any()
    loaded = CapabilityIndex.load(tmp_path / "snap", embedder, profile_source=source)
    assert loaded is not None
    old = loaded[0]
    old.facet_file = FacetFile(tmp_path / "fresh.sqlite", embedder_fingerprint(embedder), DIM)
    first = ranking(old, "static analysis of smart contracts")
    assert sorted(source.asked) == sorted(p.canonical_id for p in CATALOG)
    source.asked.clear()
    old._facets._sums.clear()
    assert ranking(old, "static analysis of smart contracts") == first
    assert source.asked == []


def test_the_file_is_shared_by_the_data_dir_and_survives_a_restart(
    embedder: Any, tmp_path: Path
) -> None:
    indexed(embedder, tmp_path)
    rows = sqlite3.connect(tmp_path / "facets.sqlite").execute("SELECT count(*) FROM by_digest")
    assert rows.fetchone()[0] == len(CATALOG)
    again = FacetFile(tmp_path / "facets.sqlite", embedder_fingerprint(embedder), DIM)
    digests = {p.canonical_id: profile_digest(p) for p in CATALOG}
    assert sorted(again.get(digests)) == sorted(digests)
