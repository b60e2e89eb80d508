"""Golden DISCOVER answers: a change to the query path (issue 26: slot link,
BM25 impacts, candidate union, ...) must keep every top 10 -- ids, rank_score
and capability_match_score -- of 500+ queries exactly as they were.

A synthetic catalog (tools.synth, 300 agents) is served by the real
AnsService twice: exhaustive, and approximate (FAISS candidates, forced by a
small ``exact_max``); each answers 260 intents (plain and
``capability_domains``) before and after a batch of writes (new agents,
re-activations with changed text, removals), so slot reuse and the caches'
invalidation are in the golden too. Each answer's top 10 is digested and
compared with ``data/discover_golden.json``.

Regenerate only for an intended ranking change, and say why in the commit:

    .venv/bin/python tests/ans/test_discover_golden.py --write
"""

from __future__ import annotations

import hashlib
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from ans.protocol.messages import DiscoverRequest, Identity, parse_discover_params, query_digest
from ans.protocol.scope import parse_authority_scope

from ans.ann import AnnSettings
from ans.config import Config
from ans.wiring import build_service

GOLDEN = Path(__file__).parent / "data" / "discover_golden.json"
AGENTS = 300
INTENTS = 130  # x2 (with and without capability_domains) x2 (before, after writes) x2 modes
ASKER = Identity(
    "agtp://golden.example/agents/asker", "golden", parse_authority_scope("discovery:query")
)
DOMAINS = (["tools", "examples"], ["tags"], ["examples"], ["modalities", "tools"])


def _catalog() -> tuple[list[tuple[dict[str, Any], dict[str, Any]]], list[str]]:
    from tools.synth import generate, make_queries

    agents = list(generate(AGENTS + 40, 5))
    intents = [q["intent"] for q in make_queries(4 * INTENTS, 5) if q.get("intent")]
    return agents, list(dict.fromkeys(intents))[:INTENTS]


def _answers(service: Any, intents: list[str]) -> list[str]:
    out = []
    for i, intent in enumerate(intents):
        for params in (
            {"intent": intent, "limit": 10},
            {"intent": intent, "limit": 10, "capability_domains": DOMAINS[i % len(DOMAINS)]},
        ):
            req = DiscoverRequest(
                ASKER,
                "golden",
                parse_discover_params(params, service.limits),
                query_digest(params),
                params,
            )
            top = [
                [r["canonical_id"], r["rank_score"], r["capability_match_score"]]
                for r in service.discover(req)["results"]
            ]
            out.append(hashlib.sha256(json.dumps(top).encode()).hexdigest()[:12])
    return out


def fingerprint(embedder: Any, directory: Path) -> dict[str, list[str]]:
    agents, intents = _catalog()
    first, later = agents[:AGENTS], agents[AGENTS:]
    out: dict[str, list[str]] = {}
    for mode, settings in (
        ("exact", AnnSettings()),
        ("approximate", AnnSettings(exact_max=100, candidates=48, nprobe=4, train_size=300)),
    ):
        config = Config(data_dir=directory / mode, index=settings)
        built = build_service(config, embedder=embedder)
        try:
            service = built.service
            _, _, refused = service.activate_many([(m, c, "golden-kid") for m, c in first])
            assert not refused, refused[:3]
            out[f"{mode}/before"] = _answers(service, intents)
            # writes: 40 new agents (slots reused after the removals below), 20
            # re-activated with another description, 30 removed
            for m, _ in first[:30]:
                with service.index.lock:
                    service.index.remove(m["canonical_id"])
            changed = [
                (
                    {
                        **m,
                        "job_description": m["job_description"] + " Also audits invoices.",
                        "version": "9.9.9",
                    },
                    c,
                )
                for m, c in first[100:120]
            ]
            stored, unchanged, refused = service.activate_many(
                [(m, c, "golden-kid") for m, c in later + changed]
            )
            assert not refused and not unchanged and len(stored) == 60, (refused[:3], unchanged)
            out[f"{mode}/after"] = _answers(service, intents)
        finally:
            if built.lock is not None:
                built.lock.release()
            built.service.store.close()
    return out


def test_discover_answers_match_the_golden(embedder: Any, tmp_path: Path) -> None:
    want = json.loads(GOLDEN.read_text())
    got = fingerprint(embedder, tmp_path)
    assert sorted(got) == sorted(want)
    for key in want:
        assert len(got[key]) == len(want[key]) >= 2 * INTENTS
        differ = [i for i, (a, b) in enumerate(zip(got[key], want[key], strict=True)) if a != b]
        assert not differ, f"{key}: {len(differ)} answers changed, first at query {differ[0]}"


if __name__ == "__main__":
    from ans.matcher import WordLlamaEmbedder

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tools/

    with tempfile.TemporaryDirectory() as tmp:
        result = fingerprint(WordLlamaEmbedder(), Path(tmp))
    if "--write" in sys.argv:
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(json.dumps(result, indent=0) + "\n")
    print(hashlib.sha256(json.dumps(result, sort_keys=True).encode()).hexdigest())
