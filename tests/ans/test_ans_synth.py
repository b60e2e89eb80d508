"""tools.synth: synthetic catalogs are deterministic, unique, varied, verify as
ACTIVATE parameters, their queries parse as DISCOVER requests, and a sample
registers and is found on a real loopback server."""

from __future__ import annotations

import shutil
import statistics
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest
from ans.governance.keys import KeyFileError, TrustedKeys
from ans.governance.manifest import validate_capabilities, verify_manifest
from ans.protocol.errors import SignatureInvalid
from ans.protocol.messages import Limits, parse_discover

from ans.client import AgtpClient, verify_discover_result
from tools.launcher import start_server, stop_server
from tools.synth import (
    AGENTS_FILE,
    CATALOG_FILE,
    JWKS_FILE,
    KEY_FILE,
    PEM_FILE,
    QUERIES_FILE,
    QUERIES_META_FILE,
    generate,
    load_or_create_key,
    main,
    make_agent,
    make_queries,
    make_queries_with_meta,
    marker_word,
    sign_agent,
    unique_agent,
    write_catalog,
)
from tools.synth_vocab import DOMAINS, ZONES

SEED = 11
N_SAMPLE = 2000


def _lines(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(x) for x in path.read_bytes().splitlines()]


def _discover_headers() -> dict[str, str]:
    return {
        "agtp-version": "AGTP/1.0",
        "agent-id": "agtp://load.example/agents/driver",
        "principal-id": "bench",
        "authority-scope": "discovery:query",
        "content-type": "application/agtp+json",
        "task-id": "t-1",
    }


@pytest.fixture(scope="module")
def catalog(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("synth")
    write_catalog(out, 400, SEED, workers=2, queries=200, chunk=64)
    return out


@pytest.fixture(scope="module")
def sample() -> list[tuple[dict[str, Any], dict[str, Any]]]:
    return list(generate(N_SAMPLE, SEED))


# -- determinism -------------------------------------------------------------------------


def test_same_seed_same_content_and_offsets_agree() -> None:
    a = list(generate(60, SEED))
    assert a == list(generate(60, SEED))
    assert list(generate(20, SEED, start=30)) == a[30:50]
    assert list(generate(60, SEED + 1)) != a


def test_catalog_bytes_do_not_depend_on_workers_or_chunks(catalog: Path, tmp_path: Path) -> None:
    shutil.copy(catalog / KEY_FILE, tmp_path / KEY_FILE)
    write_catalog(tmp_path, 400, SEED, workers=1, queries=200, chunk=97)
    for name in (AGENTS_FILE, QUERIES_FILE, QUERIES_META_FILE, CATALOG_FILE, JWKS_FILE):
        assert (tmp_path / name).read_bytes() == (catalog / name).read_bytes(), name


def test_key_files_are_reused_and_private(tmp_path: Path) -> None:
    k1 = load_or_create_key(tmp_path)
    k2 = load_or_create_key(tmp_path)
    assert k1.kid == k2.kid
    for name in (KEY_FILE, PEM_FILE):
        assert (tmp_path / name).stat().st_mode & 0o077 == 0
    jwks = TrustedKeys.load_jwks_file(tmp_path / JWKS_FILE)
    assert jwks.kids() == [k1.kid]
    (tmp_path / KEY_FILE).write_text('{"kty": "EC", "crv": "P-256"}')
    with pytest.raises(KeyFileError):
        load_or_create_key(tmp_path)


# -- content -----------------------------------------------------------------------------


def test_canonical_ids_and_labels_are_unique(sample: list[Any]) -> None:
    manifests = [m for m, _ in sample]
    assert len({m["canonical_id"] for m in manifests}) == N_SAMPLE
    assert len({m["agent_label"] for m in manifests}) == N_SAMPLE
    assert all(len(m["canonical_id"]) == 64 for m in manifests)
    assert len({m["manifest_uri"] for m in manifests}) == N_SAMPLE


def test_distributions_are_mixed_and_plausible(sample: list[Any]) -> None:
    pairs = sample
    manifests = [m for m, _ in pairs]
    tiers = Counter(m["trust_tier"] for m in manifests)
    for tier, share in ((1, 0.2), (2, 0.5), (3, 0.3)):
        assert abs(tiers[tier] / N_SAMPLE - share) < 0.04, tiers
    zones = Counter(m["governance_zone"] for m in manifests)
    assert set(zones) == set(ZONES)
    scores = [m["behavioral_trust_score"] for m in manifests]
    assert min(scores) >= 0.5 and max(scores) < 1.0
    assert statistics.median(scores) > 0.8  # skewed high
    assert all(round(s, 3) == s for s in scores)
    assert len({m["org_domain"] for m in manifests}) > 900
    descriptions = [m["job_description"] for m in manifests]
    assert len(set(descriptions)) > N_SAMPLE * 0.97
    assert all(1 <= d.count(". ") + 1 <= 3 for d in descriptions)
    metas = [make_agent(SEED, i)[2] for i in range(N_SAMPLE)]
    assert len({primary for _, _, primary, _, _ in metas}) == len(DOMAINS)
    multi = sum(second is not None for _, _, _, second, _ in metas)
    assert 0.2 < multi / N_SAMPLE < 0.3  # about a quarter span two domains
    assert [(t, z) for t, z, *_ in metas] == [
        (m["trust_tier"], m["governance_zone"]) for m in manifests
    ]
    for _, caps in pairs:
        assert len(caps["examples"]) == 3
        assert [e["id"] for e in caps["examples"]] == ["ex-1", "ex-2", "ex-3"]
        assert 3 <= len(caps["tags"]) <= 8
        assert caps["tools"] and caps["modalities"] and caps["zones_accepted"]


def test_every_line_verifies_as_activate_parameters(catalog: Path) -> None:
    trusted = TrustedKeys.load_jwks_file(catalog / JWKS_FILE)
    rows = _lines(catalog / AGENTS_FILE)
    assert len(rows) == 400
    for row in rows:
        assert set(row) == {"manifest", "capabilities"}
        verify_manifest(row["manifest"], trusted)
        validate_capabilities(row["capabilities"])
    tampered = {
        **rows[0]["manifest"],
        "trust_tier": 1 if rows[0]["manifest"]["trust_tier"] != 1 else 3,
    }
    with pytest.raises(SignatureInvalid):
        verify_manifest(tampered, trusted)


def test_catalog_metadata_matches_the_files(catalog: Path) -> None:
    import hashlib

    meta = orjson.loads((catalog / CATALOG_FILE).read_bytes())
    data = (catalog / AGENTS_FILE).read_bytes()
    assert meta["n"] == 400 and meta["seed"] == SEED
    assert meta["agents"]["sha256"] == hashlib.sha256(data).hexdigest()
    assert meta["agents"]["bytes"] == len(data)
    assert (
        meta["queries"]["sha256"]
        == hashlib.sha256((catalog / QUERIES_FILE).read_bytes()).hexdigest()
    )
    assert sum(meta["counts"]["trust_tier"].values()) == 400
    assert sum(meta["counts"]["governance_zone"].values()) == 400
    assert sum(meta["counts"]["domain"].values()) == 400
    rows = _lines(catalog / AGENTS_FILE)
    assert meta["counts"]["trust_tier"] == {
        str(t): n for t, n in sorted(Counter(r["manifest"]["trust_tier"] for r in rows).items())
    }
    assert meta["governance_key_id"] == load_or_create_key(catalog).kid


# -- queries -----------------------------------------------------------------------------


def test_queries_parse_as_discover_requests(catalog: Path) -> None:
    queries = _lines(catalog / QUERIES_FILE)
    metas = _lines(catalog / QUERIES_META_FILE)
    assert len(queries) == len(metas) == 200
    for q in queries:
        assert not any(k.startswith("_") for k in q)
        body = orjson.dumps({"method": "DISCOVER", "task_id": "t-1", "parameters": q})
        req = parse_discover(_discover_headers(), body, Limits())
        assert req.params.limit in (10, 25, 50)
    kinds = Counter(m["kind"] for m in metas)
    assert kinds == {"intent": 100, "trust": 40, "zone": 30, "domains": 20, "filters": 10}
    for q, m in zip(queries, metas, strict=True):
        assert ("intent" in q) == (m["kind"] != "filters")
        if m["kind"] == "zone":
            assert q["governance_zone"] == m["zone"]
        if m["kind"] == "domains":
            assert q["capability_domains"]
        if m["kind"] == "trust":
            assert "trust_tier_min" in q or "behavioral_trust_min" in q
    assert Counter(q["limit"] for q in queries).most_common(1)[0][0] == 10


def test_intents_paraphrase_rather_than_copy_agent_text(sample: list[Any]) -> None:
    corpus = set()
    for manifest, caps in sample:
        corpus.add(manifest["job_description"].lower())
        corpus.update(e["text"].lower() for e in caps["examples"])
    intents = [q["intent"] for q in make_queries(300, SEED) if "intent" in q]
    assert len(set(intents)) > 280
    assert not any(i.lower() in text for i in intents for text in corpus)
    assert make_queries(50, SEED) == make_queries(50, SEED)
    assert make_queries_with_meta(50, SEED)[0][1]["domains"][0] in {d.key for d in DOMAINS}


# -- probes and CLI ----------------------------------------------------------------------


def test_marker_words_and_unique_agents(tmp_path: Path) -> None:
    words = {marker_word(i) for i in range(20000)}
    assert len(words) == 20000
    key = load_or_create_key(tmp_path)
    trusted = TrustedKeys.load_jwks_file(tmp_path / JWKS_FILE)
    a, intent_a = unique_agent(1, key)
    b, intent_b = unique_agent(2, key)
    assert a["manifest"]["canonical_id"] != b["manifest"]["canonical_id"]
    assert marker_word(1) in intent_a and marker_word(1) in a["manifest"]["job_description"]
    assert intent_a != intent_b
    verify_manifest(a["manifest"], trusted)
    validate_capabilities(a["capabilities"])
    resigned = sign_agent({k: v for k, v in a["manifest"].items() if k != "signature"}, key)
    assert resigned == a["manifest"]  # RFC 6979: same content, same signature


def test_cli_writes_a_catalog_and_rejects_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "cat"
    assert (
        main(
            [
                "--agents",
                "25",
                "--seed",
                "3",
                "--out",
                str(out),
                "--workers",
                "1",
                "--queries",
                "10",
            ]
        )
        == 0
    )
    assert len((out / AGENTS_FILE).read_bytes().splitlines()) == 25
    assert len((out / QUERIES_FILE).read_bytes().splitlines()) == 10
    assert "25 agents" in capsys.readouterr().err
    assert main(["--agents", "-1", "--out", str(out)]) == 2
    (tmp_path / "file").write_text("x")
    assert main(["--agents", "1", "--out", str(tmp_path / "file")]) == 2
    (out / KEY_FILE).write_text("not json")
    assert main(["--agents", "1", "--out", str(out), "--quiet"]) == 1


# -- a real server -----------------------------------------------------------------------


def test_sample_activates_and_probe_is_found_over_http(catalog: Path, tmp_path: Path) -> None:
    cfg = tmp_path / "ans.toml"
    cfg.write_text("[rate_limit]\nenabled = false\n[freshness]\nenabled = false\n")
    srv = start_server(
        tmp_path / "data", "--governance-jwks", str(catalog / JWKS_FILE), "--config", str(cfg)
    )
    try:
        gov = AgtpClient(
            srv.url,
            agent_id="agtp://governance.example/agents/platform",
            principal_id="synth-test",
            scope="discovery:register",
        )
        rows = _lines(catalog / AGENTS_FILE)[:40]
        for k, row in enumerate(rows):
            resp = gov.call("ACTIVATE", row, task_id=f"act-{k}")
            assert resp.status == 200, resp.body
        params, intent = unique_agent(424242, load_or_create_key(catalog))
        assert gov.call("ACTIVATE", params, task_id="probe").status == 200
        asker = AgtpClient(
            srv.url,
            agent_id="agtp://load.example/agents/driver",
            principal_id="synth-test",
            scope="discovery:query",
        )
        query = {"intent": intent, "limit": 5}
        resp = asker.discover(query)
        assert resp.status == 200, resp.body
        verify_discover_result(resp.result, asker.jwks(), query)
        top = resp.result["results"][0]
        assert top["canonical_id"] == params["manifest"]["canonical_id"]
        for q in _lines(catalog / QUERIES_FILE)[:20]:
            assert asker.discover(q).status == 200
        gov.close()
        asker.close()
    finally:
        stop_server(srv)
