"""Bulk import and the compact registry, in-process with real parts: schema v3
and its migration from a v2 file, change_seq, ``ans import`` verification and
admissibility (same answers as sequential ACTIVATEs), audit records, the
data-directory lock, and the vectorized filter-only DISCOVER against a
brute-force reference."""

from __future__ import annotations

import json
import random
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from ans.governance.audit import verify_chain
from ans.governance.keys import SigningKey
from ans.governance.lifecycle import make_event
from ans.governance.policy import passes_gates
from ans.protocol.messages import (
    ActivateRequest,
    Identity,
    LifecycleRequest,
    Limits,
    parse_discover,
)
from ans.protocol.scope import parse_authority_scope

from ans.ann import AnnSettings
from ans.cli import main as cli_main
from ans.config import Config
from ans.datadir_lock import DataDirBusy, DataDirLock
from ans.importer import import_files
from ans.matcher import CapabilityIndex
from ans.ranking import rank_score, sort_key
from ans.registry import AgentEntry
from ans.service import AnsService
from ans.store import SCHEMA_VERSION, SQLiteStore, StoredAgent
from ans.wiring import profile_source

NOW = datetime(2026, 11, 21, 12, 0, 0, tzinfo=UTC)
GOV = Identity(
    "agtp://gov.example/agents/platform", "gov-op", parse_authority_scope("discovery:register")
)
ZONES = ["zone:public", "zone:finance", "zone:partner", "zone:secret"]
TOPICS = [
    "Audits Solidity smart contracts for reentrancy bugs.",
    "Translates legal contracts between German and English.",
    "Assigns ICD-10 codes to clinical notes.",
    "Reconciles invoices against purchase orders.",
    "Summarizes research papers with citations.",
]


def spec(i: int, rnd: random.Random) -> dict[str, Any]:
    return {
        "trust_tier": rnd.choice([1, 2, 3]),
        # few distinct scores: many ties, so canonical_id tie-breaking matters
        "behavioral_trust_score": rnd.choice([0.7, 0.8, 0.85, 0.9]),
        "governance_zone": rnd.choice(ZONES),
        "org_domain": f"org{i % 7}.example",
        "job_description": f"{rnd.choice(TOPICS)} Agent {i}.",
    }


def caps(i: int) -> dict[str, Any]:
    c: dict[str, Any] = {"supported_methods": ["QUERY"], "modalities": ["text"]}
    if i % 3 == 0:
        c["required_scope"] = "documents:read"
    if i % 4 == 0:
        c["examples"] = [{"id": "e1", "text": f"Example task number {i}"}]
    return c



def discover(svc: AnsService, scope: str = "discovery:query", **params: Any) -> dict[str, Any]:
    headers = {
        "agent-id": "agtp://o.example/agents/o",
        "principal-id": "u",
        "authority-scope": scope,
    }
    body = orjson.dumps({"method": "DISCOVER", "task_id": "t", "parameters": params})
    return svc.discover(parse_discover(headers, body, Limits()))


def comparable(result: dict[str, Any]) -> dict[str, Any]:
    out = {
        k: v for k, v in result.items() if k not in ("query_id", "generated_at", "ans_signature")
    }
    # when each server stored the agent (freshness.indexed_at, and the age) differs
    out["results"] = [
        {k: v for k, v in item.items() if k != "freshness"} for item in out["results"]
    ]
    return out


def audit_records(data: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (data / "audit.jsonl").read_text().splitlines()]


def test_an_import_puts_every_agent_into_the_approximate_lists_before_its_snapshot(
    tmp_path: Path,
    embedder: Any,
    gov_key: SigningKey,
    catalog: list[dict[str, Any]],
) -> None:
    """A served index keeps new agents outside FAISS's lists (each worker would
    copy a list per agent); ``ans import`` has no workers, so the snapshot it
    writes holds every agent in the lists and none waiting."""
    src = write_jsonl(tmp_path / "agents.jsonl", catalog)
    settings = AnnSettings(exact_max=60, candidates=16, nprobe=4, train_size=60)
    cfg = Config(
        data_dir=tmp_path / "imp", index=settings, governance_jwks=(jwks_file(tmp_path, gov_key),)
    )
    report = import_files(cfg, [src], batch=20, workers=1)
    assert report.imported == len(catalog) > 2 * settings.exact_max
    doc = json.loads((cfg.data_dir / "index" / "index.json").read_text())
    assert doc["approximate"] is True and doc["ann_pending"] == []
    loaded = CapabilityIndex.load(cfg.data_dir / "index", embedder, settings=settings)
    assert loaded is not None
    cap = loaded[0]._ann.cap
    assert cap is not None and len(cap) == len(catalog)


@pytest.fixture
def catalog(make_manifest: Callable[..., dict[str, Any]]) -> list[dict[str, Any]]:
    rnd = random.Random(7)
    return [
        {"manifest": make_manifest(f"agent-{i:03d}", **spec(i, rnd)), "capabilities": caps(i)}
        for i in range(240)
    ]


def write_jsonl(path: Path, lines: list[Any]) -> Path:
    with open(path, "wb") as fh:
        for line in lines:
            fh.write(line if isinstance(line, bytes) else orjson.dumps(line))
            fh.write(b"\n")
    return path


def jwks_file(tmp: Path, key: SigningKey) -> Path:
    p = tmp / "gov.jwks.json"
    p.write_text(json.dumps({"keys": [key.public.jwk()]}))
    return p


# -- store -------------------------------------------------------------------------


V2_AGENTS = """CREATE TABLE agents (
    canonical_id TEXT PRIMARY KEY, manifest BLOB NOT NULL, capabilities BLOB NOT NULL,
    lifecycle_state TEXT NOT NULL, signer_kid TEXT NOT NULL, registered_at TEXT NOT NULL,
    updated_at TEXT NOT NULL)"""


def test_v2_database_is_migrated_in_place(
    tmp_path: Path, make_manifest: Callable[..., dict[str, Any]]
) -> None:
    path = tmp_path / "registry.sqlite3"
    db = sqlite3.connect(path)
    db.execute(V2_AGENTS)
    db.execute(
        "CREATE TABLE tombstones (canonical_id TEXT PRIMARY KEY, state TEXT NOT NULL, "
        "event_id TEXT NOT NULL, issued_at TEXT NOT NULL, reason TEXT, recorded_at TEXT NOT NULL)"
    )
    a = make_manifest("alpha", org_domain="Mixed.Example", trust_tier=2, behavioral_trust_score=0.8)
    b = make_manifest("beta", governance_zone="zone:finance")
    rows = [
        (a, {"required_scope": "audit:read"}, "Active"),
        (b, {}, "Suspended"),
    ]
    for m, c, state in rows:
        db.execute(
            "INSERT INTO agents VALUES (?, ?, ?, ?, ?, ?, ?)",
            (m["canonical_id"], orjson.dumps(m), orjson.dumps(c), state, "kid-1", "t0", "t0"),
        )
    db.execute("PRAGMA user_version=2")
    db.commit()
    db.close()

    store = SQLiteStore(path)
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert store.max_seq() == 2
    (row,) = list(store.iter_index_rows())  # Active only
    assert row.canonical_id == a["canonical_id"]
    assert (row.trust_tier, row.behavioral_trust_score) == (2, 0.8)
    assert row.org_domain == "mixed.example" and row.required_scope == "audit:read"
    assert row.governance_zone == "zone:public" and row.signer_kid == "kid-1"
    # the JSON is still there and untouched
    assert store.get(b["canonical_id"]).manifest == b  # type: ignore[union-attr]
    assert [x.canonical_id for x in store.changed_since(1)] == [b["canonical_id"]]
    store.close()
    # opening again does not migrate twice
    again = SQLiteStore(path)
    assert again.max_seq() == 2
    again.close()


def test_every_agent_write_bumps_change_seq(make_ans: Any,
    tmp_path: Path, embedder: Any, gov_key: SigningKey, make_manifest: Any
) -> None:
    svc = make_ans(Config(data_dir=tmp_path, restricted_zones=("zone:secret",)), fixed_ids=True, load=True)
    m1, m2 = make_manifest("one"), make_manifest("two")
    svc.activate(ActivateRequest(GOV, "t", m1, {}))
    assert svc.store.max_seq() == 1
    svc.activate(ActivateRequest(GOV, "t", m2, {}))
    seq = svc.store.max_seq()
    assert seq == 2
    ev = make_event(
        "SUSPEND", m1["canonical_id"], gov_key, NOW - timedelta(seconds=30), event_id="e1"
    )
    svc.lifecycle(LifecycleRequest(GOV, "t", ev))
    assert svc.store.max_seq() == seq + 1
    assert [a.canonical_id for a in svc.store.changed_since(seq)] == [m1["canonical_id"]]
    assert svc.remove_for_freshness(m2["canonical_id"], "unreachable", 3, "timeout")
    assert [a.lifecycle_state for a in svc.store.changed_since(seq)] == ["Suspended", "Removed"]
    # get_many skips absent ids; upsert_many writes in one go with distinct seqs
    got = svc.store.get_many([m1["canonical_id"], "nope"])
    assert list(got) == [m1["canonical_id"]]
    svc.store.upsert_many(
        [
            StoredAgent("x1", m1, {}, "Removed", "k", "t", "t"),
            StoredAgent("x2", m2, {}, "Removed", "k", "t", "t"),
        ]
    )
    assert svc.store.max_seq() == seq + 4
    svc.audit.close()
    svc.store.close()


# -- import == sequential ACTIVATE ---------------------------------------------------


def test_import_answers_like_sequential_activates(make_ans: Any,
    tmp_path: Path,
    embedder: Any,
    gov_key: SigningKey,
    make_manifest: Callable[..., dict[str, Any]],
    catalog: list[dict[str, Any]],
) -> None:
    # Sequential ACTIVATEs on one service ...
    seq_svc = make_ans(Config(data_dir=tmp_path / "seq", restricted_zones=("zone:secret",)), fixed_ids=True, load=True)
    for line in catalog:
        seq_svc.activate(ActivateRequest(GOV, "t", line["manifest"], line["capabilities"]))
    # ... and `ans import` of the same lines (in small batches, 2 workers) on another.
    src = write_jsonl(tmp_path / "agents.jsonl", catalog)
    data = tmp_path / "imp"
    cfg = Config(
        data_dir=data,
        restricted_zones=("zone:secret",),
        governance_jwks=(jwks_file(tmp_path, gov_key),),
    )
    report = import_files(cfg, [src], batch=50, workers=2)
    assert (report.imported, report.unchanged, report.refused) == (len(catalog), 0, [])
    imp_svc = make_ans(Config(data_dir=data, restricted_zones=("zone:secret",)), fixed_ids=True, load=True)
    assert len(imp_svc) == len(seq_svc) == len(catalog)
    queries: list[dict[str, Any]] = [
        {},
        {"trust_tier_min": 3, "limit": 50},
        {"trust_tier_min": 3, "behavioral_trust_min": 0.85, "limit": 7},
        {"governance_zone": "zone:finance", "trust_tier_min": 3},
        {"org_domain": "org3.example", "limit": 20, "scope_negotiate": True},
        {"intent": "audit smart contracts for reentrancy", "trust_tier_min": 3, "limit": 15},
        {"intent": "translate a German contract", "include_evidence": True},
    ]
    for q in queries:
        for scope in ("discovery:query", "discovery:query zone:secret"):
            a, b = discover(seq_svc, scope, **q), discover(imp_svc, scope, **q)
            assert comparable(a) == comparable(b), q
            assert a["results"], q
    # The snapshot `ans import` wrote (what `ans serve` starts from) scores
    # every agent as the sequential service's own index does.
    loaded = CapabilityIndex.load(
        data / "index", embedder, profile_source=profile_source(imp_svc.store)
    )
    assert loaded is not None
    snap = loaded[0]
    assert sorted(snap.ids()) == sorted(seq_svc.matcher.ids())
    for intent in ("audit smart contracts for reentrancy", "translate a German contract"):
        want = seq_svc.matcher.query(intent, None).above(0.0)
        got = snap.query(intent, None).above(0.0)
        assert want and got.keys() == want.keys()
        assert max(abs(got[c] - want[c]) for c in want) <= 1e-6, intent
    for s in (seq_svc, imp_svc):
        s.audit.close()
        s.store.close()


def test_refused_lines_are_reported_and_audited(make_ans: Any,
    tmp_path: Path,
    embedder: Any,
    gov_key: SigningKey,
    make_manifest: Callable[..., dict[str, Any]],
) -> None:
    data = tmp_path / "data"
    svc = make_ans(Config(data_dir=data, restricted_zones=("zone:secret",)), fixed_ids=True, load=True)
    retired = make_manifest("retired")
    svc.activate(ActivateRequest(GOV, "t", retired, {}))
    ev = make_event(
        "REVOKE", retired["canonical_id"], gov_key, NOW - timedelta(seconds=30), event_id="r1"
    )
    svc.lifecycle(LifecycleRequest(GOV, "t", ev))
    svc.audit.close()
    svc.store.close()

    stranger = SigningKey.generate()
    v1 = make_manifest("dup", last_updated="2026-02-01T00:00:00Z", job_description="First.")
    v2 = make_manifest("dup", last_updated="2026-03-01T00:00:00Z", job_description="Second.")
    good = make_manifest("good")
    lines: list[Any] = [
        {"manifest": good, "capabilities": {}},  # 1
        b"{not json",  # 2
        {"manifest": make_manifest("forged", key=stranger), "capabilities": {}},  # 3
        {"manifest": retired, "capabilities": {}},  # 4: tombstoned
        {"manifest": v2, "capabilities": {}},  # 5
        {"manifest": v1, "capabilities": {}},  # 6: older than line 5 -> stale
        b'{"manifest": {}, "manifest": {}}',  # 7: duplicate key
        {"manifest": make_manifest("badcaps"), "capabilities": {"tools": "x"}},  # 8
        b"[1, 2]",  # 9
        {"manifest": good, "capabilities": {}},  # 10: same again -> unchanged
        b'{"manifest": "' + b"x" * 300_000 + b'"}',  # 11: over-long
        {"manifest": make_manifest("inactive", lifecycle_state="Suspended")},  # 12
        # 13: an integer no signed answer can carry (RFC 8785); the stdlib writes it
        json.dumps({"manifest": make_manifest("bigint"), "capabilities": {"n": 2**80}}).encode(),
    ]
    src = write_jsonl(tmp_path / "mixed.jsonl", lines)
    cfg = Config(data_dir=data, governance_jwks=(jwks_file(tmp_path, gov_key),))
    report = import_files(cfg, [src], batch=3, workers=1)
    got = {r.line: (r.status, r.code) for r in report.refused}
    assert got == {
        2: (400, "malformed_json"),
        3: (401, "unknown_signing_key"),
        4: (410, "agent_retired"),
        6: (409, "stale_metadata"),
        7: (400, "malformed_json"),
        8: (422, "invalid_capabilities"),
        9: (400, "malformed_json"),
        11: (400, "body_too_large"),
        12: (422, "lifecycle_not_active"),
        13: (422, "invalid_capabilities"),
    }
    assert (report.imported, report.unchanged) == (2, 1)
    records = audit_records(data)
    refusals = [r for r in records if r["event"] == "activation_refused"]
    assert sorted(r["line"] for r in refusals) == sorted(got)
    assert all(r["method"] == "ACTIVATE" and r["file"] == str(src) for r in refusals)
    assert {r["code"] for r in refusals} == {c for _, c in got.values()}
    batches = [r for r in records if r["event"] == "bulk_import_batch"]
    assert sum(b["count"] for b in batches) == 2
    (summary,) = [r for r in records if r["event"] == "bulk_import"]
    assert (summary["imported"], summary["unchanged"], summary["refused"]) == (2, 1, 10)
    assert summary["lines"] == 13
    assert verify_chain((data / "audit.jsonl").read_bytes().splitlines()) is None
    # the newer duplicate won; the retired id stayed out
    svc = make_ans(Config(data_dir=data, restricted_zones=("zone:secret",)), fixed_ids=True, load=True)
    stored = svc.store.get(v2["canonical_id"])
    assert stored is not None and stored.manifest["job_description"] == "Second."
    assert retired["canonical_id"] not in svc.index.registry
    svc.audit.close()
    svc.store.close()


def test_import_refuses_a_locked_data_dir_and_cli_exit_codes(
    tmp_path: Path, gov_key: SigningKey, make_manifest: Any
) -> None:
    # The CLI runs as a subprocess: it configures process-wide logging.
    ans = Path(sys.executable).with_name("ans")
    data = tmp_path / "data"
    jwks = jwks_file(tmp_path, gov_key)
    src = write_jsonl(tmp_path / "a.jsonl", [{"manifest": make_manifest("solo")}, b"nope"])

    def run(*extra: str) -> subprocess.CompletedProcess[str]:
        cmd = [
            str(ans),
            "import",
            str(src),
            "--data-dir",
            str(data),
            "--governance-jwks",
            str(jwks),
            "--workers",
            "1",
            *extra,
        ]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120)

    lock = DataDirLock.acquire(data, "ans serve")
    with pytest.raises(DataDirBusy):
        DataDirLock.acquire(data, "ans import")
    busy = run()
    assert busy.returncode == 2 and "in use (ans serve pid" in busy.stderr
    lock.release()
    ok = run()
    assert ok.returncode == 0, ok.stderr  # a refused line fails the run only with --strict
    assert "imported 1, unchanged 0, refused 1" in ok.stdout
    assert ":2: 400 malformed_json" in ok.stderr
    assert "ans import: 2 records" in ok.stderr  # the summary counts records (not a TTY)
    strict = run("--strict")
    assert strict.returncode == 1 and "imported 0, unchanged 1, refused 1" in strict.stdout
    assert cli_main(["import", str(tmp_path / "missing.jsonl"), "--data-dir", str(data)]) == 2


# -- compact registry: vectorized filter-only DISCOVER ---------------------------------


def test_filter_only_discover_matches_a_brute_force_reference(make_ans: Any,
    tmp_path: Path, embedder: Any, gov_key: SigningKey, catalog: list[dict[str, Any]]
) -> None:
    src = write_jsonl(tmp_path / "agents.jsonl", catalog)
    data = tmp_path / "data"
    cfg = Config(
        data_dir=data,
        restricted_zones=("zone:secret",),
        governance_jwks=(jwks_file(tmp_path, gov_key),),
    )
    import_files(cfg, [src], workers=1)
    svc = make_ans(Config(data_dir=data, restricted_zones=("zone:secret",)), fixed_ids=True, load=True)
    entries = [AgentEntry.from_stored(a) for a in svc.store.iter_active()]
    for params, scope in [
        ({"limit": 10}, "discovery:query"),
        ({"trust_tier_min": 3, "limit": 25}, "discovery:query zone:secret"),
        ({"trust_tier_min": 2, "behavioral_trust_min": 0.85, "limit": 40}, "discovery:query"),
        ({"governance_zone": "zone:partner", "trust_tier_min": 3}, "discovery:query"),
        ({"org_domain": "ORG2.example", "trust_tier_min": 3, "limit": 5}, "discovery:query"),
    ]:
        got = discover(svc, scope, **params)
        req = parse_discover(
            {"agent-id": "agtp://o/agents/o", "principal-id": "u", "authority-scope": scope},
            orjson.dumps({"method": "DISCOVER", "parameters": params}),
            Limits(),
        )
        passing = [
            (rank_score(cfg.ranking, e.trust_tier, e.behavioral_trust_score, 0.0), e.canonical_id)
            for e in entries
            if passes_gates(e, req.params, req.identity.scope, svc.zones)
        ]
        passing.sort(key=lambda t: sort_key(*t))
        want = passing[: req.params.limit]
        assert got["total_matches"] == len(passing)
        assert [(r["rank_score"], r["canonical_id"]) for r in got["results"]] == want
        assert len(want) > 0
    svc.audit.close()
    svc.store.close()


# -- embedding in the import's worker processes ----------------------------------------


def test_import_workers_embed_what_the_main_process_would(
    tmp_path: Path,
    embedder: Any,
    gov_key: SigningKey,
    make_manifest: Callable[..., dict[str, Any]],
) -> None:
    from ans.importer import _init_worker, _verify_chunk
    from ans.index.facet_file import FACET_FILE, FacetFile, stored_precision
    from ans.index.profiles import embed_profiles, profile_digest, profile_from
    from ans.matcher import embedder_fingerprint

    old = make_manifest("dup", last_updated="2026-02-01T00:00:00Z",
                        job_description="Translates legal contracts between German and English.")
    new = make_manifest("dup", last_updated="2026-03-01T00:00:00Z",
                        job_description="Audits Solidity smart contracts for reentrancy bugs.")
    examples = {"examples": [{"id": "e1", "text": "find reentrancy in this vault"},
                             {"id": "e2", "text": "check an ERC-20 token"}]}
    lines: list[Any] = [
        {"manifest": make_manifest("a", job_description=TOPICS[2]), "capabilities": examples},
        b"{not json",
        {"manifest": old, "capabilities": {}},
        {"manifest": make_manifest("b", job_description=TOPICS[3]), "capabilities": {}},
        {"manifest": new, "capabilities": examples},  # the later line for "dup" wins
    ]
    jwks = json.loads(jwks_file(tmp_path, gov_key).read_text())["keys"]

    # A worker with the index's embedder returns each verified line's vectors ...
    chunk = [(i + 1, x if isinstance(x, bytes) else orjson.dumps(x)) for i, x in enumerate(lines)]
    _init_worker(jwks, 1 << 20, embedder_fingerprint(embedder), embedder.dim)
    out = _verify_chunk(chunk)
    assert [kind for _, kind, _ in out] == ["ok", "refused", "ok", "ok", "ok"]
    for _, kind, data in out:
        if kind == "ok":
            manifest, caps, _, vecs = data
            want = embed_profiles(embedder, [profile_from(manifest, caps)])[0]
            assert np.array_equal(vecs.facet_sums, want.facet_sums)
            assert np.array_equal(vecs.facet_counts, want.facet_counts)
            assert np.array_equal(vecs.examples, want.examples)
    # ... and one with another embedder's fingerprint leaves the embedding to the main process.
    _init_worker(jwks, 1 << 20, "wordllama-other", embedder.dim)
    assert all(data[3] is None for _, kind, data in _verify_chunk(chunk) if kind == "ok")
    # (a narrower width is another embedder too)
    _init_worker(jwks, 1 << 20, embedder_fingerprint(embedder), 128)
    assert all(data[3] is None for _, kind, data in _verify_chunk(chunk) if kind == "ok")
    _init_worker(jwks, 1 << 20, None, embedder.dim)

    # Through `ans import` with 2 workers, every agent's stored facet sums are the
    # ones of its own (latest) line, as the facet file keeps them.
    data = tmp_path / "data"
    src = write_jsonl(tmp_path / "agents.jsonl", lines)
    report = import_files(Config(data_dir=data, governance_jwks=(jwks_file(tmp_path, gov_key),)),
                          [src], batch=50, workers=2)  # one batch: "dup" twice in it
    assert (report.imported, len(report.refused)) == (3, 1)
    wanted = {m["canonical_id"]: (m, c) for m, c in
              ((x["manifest"], x["capabilities"]) for x in lines if isinstance(x, dict))}
    profiles = {cid: profile_from(m, c) for cid, (m, c) in wanted.items()}
    facets = FacetFile(data / FACET_FILE, embedder_fingerprint(embedder), embedder.dim)
    got = facets.get({cid: profile_digest(p) for cid, p in profiles.items()})
    facets.close()
    assert got.keys() == profiles.keys()
    for cid, p in profiles.items():
        want_sums = stored_precision(embed_profiles(embedder, [p])[0].facet_sums)
        assert np.array_equal(got[cid], want_sums), cid
