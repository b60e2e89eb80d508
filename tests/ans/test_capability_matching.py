"""Capability matching: example-level matching, domains, evidence, tags,
compound intents, and the index structures under churn (real wordllama)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from ans.governance.signing import verify_document
from ans.protocol.errors import InvalidParameter
from ans.protocol.messages import (
    ActivateRequest,
    DiscoverRequest,
    Identity,
    Limits,
    parse_discover_params,
    query_digest,
)
from ans.protocol.scope import parse_authority_scope

from ans.config import Config
from ans.examples_index import ExampleBlocks
from ans.index.embedder import normalize_rows
from ans.index.int8_rows import quantize
from ans.lexical import K1, B, LexicalIndex
from ans.matcher import CapabilityIndex, profile_from
from ans.text import candidate_tags, normalize_tag, segments, split_label, words
from ans.wiring import build_service

UNRELATED = [
    "Translate this paragraph from English into German.",
    "Plan a three-day hiking trip in the Alps.",
    "Suggest a vegetarian dinner recipe for four people.",
    "Write a birthday poem for my grandmother.",
    "Find cheap flights from Paris to Lisbon next week.",
    "Summarize the plot of a classic novel.",
    "Recommend a workout routine for beginners.",
]


def agent(cid: str, label: str, description: str, **caps: Any) -> Any:
    manifest = {"canonical_id": cid, "agent_label": label, "job_description": description}
    return profile_from(manifest, {"supported_methods": ["QUERY"], **caps})


def examples(*texts: str) -> list[dict[str, str]]:
    return [{"id": f"ex-{i + 1}", "text": t} for i, t in enumerate(texts)]


@pytest.fixture
def index(embedder: Any) -> CapabilityIndex:
    idx = CapabilityIndex(embedder)
    # a multi-purpose agent: one Solidity example among many unrelated ones
    idx.upsert(
        agent(
            "a" * 64,
            "general-helper",
            "A general assistant for everyday tasks.",
            examples=examples(*UNRELATED, "Audit my Solidity smart contract for reentrancy bugs."),
        )
    )
    # a vaguely related description, no example of the task
    idx.upsert(
        agent(
            "b" * 64,
            "code-helper",
            "Helps with software code and programming questions.",
            examples=examples("Explain what a Python decorator does.", "Fix my CSS layout."),
        )
    )
    idx.upsert(
        agent(
            "c" * 64,
            "tax-advisor",
            "Prepares tax returns and explains deductions.",
            tags=["Tax Returns", "finance"],
        )
    )
    return idx


INTENT = "Please audit my Solidity contract for reentrancy vulnerabilities"


def test_one_matching_example_outranks_a_vaguely_related_description(
    index: CapabilityIndex,
) -> None:
    scores = index.scores(INTENT, None, 0.0)
    assert scores["a" * 64] > scores["b" * 64]


def test_the_example_score_is_the_best_example_not_an_average(index: CapabilityIndex) -> None:
    ev = index.query(INTENT, None, evidence=True).evidence("a" * 64)
    best = ev["matched_examples"][0]
    assert best["id"] == "ex-8"
    assert "Solidity" in best["text"]
    # the example component equals the best single example's similarity
    assert ev["score_components"]["example"] == best["score"]  # the same scan, exactly
    assert best["score"] > 0.5


def test_excluding_examples_removes_the_example_signal(index: CapabilityIndex) -> None:
    with_ex = index.query(INTENT, None, evidence=True).evidence("a" * 64)
    without = index.query(INTENT, ("tools",), evidence=True)
    ev = without.evidence("a" * 64)
    assert "example" in with_ex["score_components"]
    assert "example" not in ev["score_components"]
    assert ev["matched_examples"] == []
    assert without.above(0.0)["a" * 64] < index.scores(INTENT, None, 0.0)["a" * 64]


def test_unknown_capability_domain_is_422() -> None:
    with pytest.raises(InvalidParameter) as exc:
        parse_discover_params({"intent": "x", "capability_domains": ["telepathy"]}, Limits())
    assert exc.value.status == 422
    assert exc.value.code == "invalid_capability_domains"


def test_include_evidence_must_be_boolean() -> None:
    with pytest.raises(InvalidParameter) as exc:
        parse_discover_params({"intent": "x", "include_evidence": "yes"}, Limits())
    assert exc.value.code == "invalid_include_evidence"


def test_tags_are_matched_from_the_intent_and_reported(index: CapabilityIndex) -> None:
    q = index.query("I need help with my tax returns this year", None, evidence=True)
    ev = q.evidence("c" * 64)
    assert ev["matched_tags"] == ["tax-returns"]
    assert ev["score_components"]["tag"] == pytest.approx(1.0)
    assert "tag" not in q.evidence("a" * 64)["score_components"]  # it has no tags
    # excluding the tags domain switches the tag signal off
    assert (
        "tag"
        not in index.query("tax returns", ("examples",), evidence=True).evidence("c" * 64)[
            "score_components"
        ]
    )


def test_reupsert_replaces_examples_and_remove_forgets(index: CapabilityIndex) -> None:
    before = index.scores(INTENT, None, 0.0)["a" * 64]
    index.upsert(
        agent("a" * 64, "general-helper", "A general assistant.", examples=examples(*UNRELATED))
    )
    after = index.scores(INTENT, None, 0.0)["a" * 64]
    assert after < before
    index.remove("a" * 64)
    assert "a" * 64 not in index.scores(INTENT, None, 0.0)
    assert len(index) == 2


def test_scores_are_deterministic_and_bounded(index: CapabilityIndex) -> None:
    one = index.scores(INTENT, None, 0.0)
    two = index.scores(INTENT, None, 0.0)
    assert one == two
    assert all(0.0 <= s <= 1.0 for s in one.values())


def test_compound_intent_scores_each_part(embedder: Any) -> None:
    idx = CapabilityIndex(embedder)
    idx.upsert(agent("1" * 64, "stock-quotes", "Real-time stock prices and market data."))
    idx.upsert(agent("2" * 64, "news-digest", "Latest news headlines and articles."))
    idx.upsert(agent("3" * 64, "recipe-finder", "Finds cooking recipes."))
    q = idx.query(
        "Show me the current stock price of Apple and the latest news about it", None, evidence=True
    )
    assert q.part_best is not None
    top2 = sorted(q.above(0.0).items(), key=lambda kv: -kv[1])[:2]
    assert {cid for cid, _ in top2} == {"1" * 64, "2" * 64}
    assert "segment" in q.evidence("1" * 64)["score_components"]


def test_text_helpers() -> None:
    assert split_label("HousePurchasingTool") == "House Purchasing Tool"
    assert split_label("solidity-auditor") == "solidity auditor"
    assert normalize_tag(" Invoice_Processing ") == "invoice-processing"
    assert "question-and-answer" in candidate_tags("a question and answer bot")
    assert segments("Find the weather") == []
    assert segments("Find the weather in Oslo and book a table for two") == [
        "Find the weather in Oslo",
        "book a table for two",
    ]


def test_example_blocks_match_brute_force_under_churn() -> None:
    """Best example per slot equals the documented formula written out (exact
    int8 dot products of the stored and the query codes, x both scales, max
    over the slot's examples), for every slot and for a candidate set alike."""
    rng = np.random.default_rng(1)
    blocks = ExampleBlocks(dims=8)
    truth: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for step in range(400):
        slot = int(rng.integers(0, 30))
        if rng.random() < 0.3:
            blocks.drop(slot)
            truth.pop(slot, None)
        else:
            v = rng.standard_normal((int(rng.integers(1, 6)), 8)).astype(np.float32)
            blocks.put(slot, v)
            truth[slot] = quantize(blocks.project(v))  # rows are stored int8-coded
        if step % 50 == 0:
            q = rng.standard_normal((2, 8)).astype(np.float32)
            best = blocks.best_of(q, np.arange(30, dtype=np.int64))
            q8, qs = quantize(blocks.project(q))
            some = np.array(sorted(rng.choice(30, 12, replace=False)))
            assert np.array_equal(blocks.best_of(q, some), best[some])
            for s in range(30):
                if s in truth:
                    codes, scale = truth[s]
                    raw = (codes.astype(np.int64) @ q8.astype(np.int64).T).astype(np.float32)
                    raw *= scale[:, None]
                    raw *= qs[None, :]
                    assert np.array_equal(best[s], raw.max(axis=0))
                else:
                    assert np.all(best[s] == 0)
    assert blocks.total == sum(len(c) for c, _ in truth.values())


def test_lexical_scores_are_normalized_and_facet_restricted() -> None:
    lex = LexicalIndex(2)
    lex.upsert(0, ["solidity audit", "cooking"])
    lex.upsert(1, ["cooking recipes", "solidity"])
    both, _ = lex.scores("solidity audit", np.array([1, 1], np.float32), 2)
    first, _ = lex.scores("solidity audit", np.array([1, 0], np.float32), 2)
    assert 0 < both[1] < both[0] <= 1.0
    assert first[1] == 0.0
    lex.remove(0)
    assert lex.scores("audit", np.array([1, 1], np.float32), 2)[0][0] == 0.0


def bm25_reference(
    docs: dict[int, list[str]], query: str, mask: list[int], n_slots: int
) -> np.ndarray:
    """Textbook BM25 (Robertson idf, k1 1.2, b 0.75) over the masked facets,
    divided by its maximum for the query -- written out, no index."""
    qwords = sorted(set(words(query)))
    text = {s: [w for f, t in enumerate(d) if mask[f] for w in words(t)] for s, d in docs.items()}
    n = len(docs)
    avg = max(sum(len(t) for t in text.values()) / n, 1e-9)
    df = {
        w: sum(1 for s in docs if w in set(w for f, t in enumerate(docs[s]) for w in words(t)))
        for w in qwords
    }
    idf = {w: np.log(1.0 + (n - df[w] + 0.5) / (df[w] + 0.5)) for w in qwords}
    out = np.zeros(n_slots)
    for s, t in text.items():
        for w in qwords:
            f = t.count(w)
            if f:
                out[s] += idf[w] * f * (K1 + 1) / (f + K1 * (1 - B + B * len(t) / avg))
    return out / (sum(idf.values()) * (K1 + 1)) if qwords else out


def test_lexical_scores_equal_a_reference_bm25_under_churn_and_restore() -> None:
    rng = np.random.default_rng(3)
    vocab = "audit solidity contract invoice ledger flight hotel tax payroll review".split()
    lex = LexicalIndex(3)
    docs: dict[int, list[str]] = {}

    def text() -> str:
        return " ".join(rng.choice(vocab, size=int(rng.integers(0, 6))).tolist())

    for round_ in range(4):
        for s in rng.choice(40, size=25, replace=False).tolist():
            docs[s] = [text(), text(), text()]
            lex.upsert(s, docs[s])
        for s in rng.choice(sorted(docs), size=5, replace=False).tolist():
            del docs[s]
            lex.remove(s)
        if round_ == 2:  # a snapshot restores to the same scores
            state = lex.state()
            lex = LexicalIndex.restore(3, list(lex.postings.keys), state)
        for query in ("audit the solidity contract", "tax payroll tax", "flight hotel review"):
            for mask in ([1, 1, 1], [1, 0, 1], [0, 1, 0]):
                got, _ = lex.scores(query, np.array(mask, np.float32), 40)
                want = bm25_reference(docs, query, mask, 40)
                np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_evidence_is_inside_the_signed_result(
    tmp_path: Path, embedder: Any, make_manifest: Any, gov_key: Any
) -> None:
    jwks = tmp_path / "gov.jwks.json"
    jwks.write_text(json.dumps({"keys": [gov_key.public.jwk()]}))
    service = build_service(
        Config(data_dir=tmp_path / "data", governance_jwks=(jwks,)), embedder=embedder
    ).service
    gov = Identity("agtp://gov.example/agents/p", "op", parse_authority_scope("discovery:register"))
    for label, desc, caps in [
        (
            "chain-auditor",
            "Reviews blockchain code.",
            {"examples": examples("Audit a Solidity contract for reentrancy.")},
        ),
        ("poet", "Writes poems.", {"tags": ["poetry"]}),
    ]:
        service.activate(
            ActivateRequest(gov, "t", make_manifest(label, job_description=desc), caps)
        )
    params = {"intent": INTENT, "include_evidence": True, "limit": 5}
    asker = Identity("agtp://x/agents/o", "p", parse_authority_scope("discovery:query"))
    result = service.discover(
        DiscoverRequest(
            asker, "t", parse_discover_params(params, service.limits), query_digest(params), params
        )
    )
    top = result["results"][0]
    assert top["agent_label"] == "chain-auditor"
    assert top["matched_examples"][0]["id"] == "ex-1"
    assert set(top["score_components"]) >= {"context", "capability", "example", "lexical"}
    assert top["capability_match_score"] > 0
    verify_document(
        result, service.governance_keys.__class__.from_jwks(service.jwks()), "ans_signature"
    )
    tampered = {**result, "results": [{**top, "matched_examples": []}, *result["results"][1:]]}
    with pytest.raises(Exception):
        verify_document(
            tampered, service.governance_keys.__class__.from_jwks(service.jwks()), "ans_signature"
        )
    service.store.close()


def test_the_pooled_tokens_are_the_tokenizers_own_ids(embedder: Any) -> None:
    """The batch call the embedder uses for speed (ids only) pools exactly the
    tokens the tokenizer's plain ``encode`` gives, for accented, CJK, emoji,
    punctuation-heavy and empty texts: each text's sum is its token rows added
    in order, bit for bit the same as a gather of ``encode``'s ids."""
    texts = [
        "Réserve un vol Paris → Zürich, demain 7h",
        "日本語のテキストを翻訳する",
        "deploy 🚀 the k8s cluster!!! (prod/eu-west-1)",
        "",
        "a" * 3000,
        "audit Solidity smart-contracts; re-entrancy & overflow?",
    ]
    sums, counts = embedder.embed_sums(texts)
    table = embedder._table
    for i, text in enumerate(texts):
        ids = embedder._tok.encode(text, add_special_tokens=False).ids
        assert counts[i] == len(ids)
        if ids:
            rows = np.ascontiguousarray(table[np.minimum(ids, len(table) - 1)].T)
            assert np.array_equal(sums[i], np.add.reduceat(rows, [0], axis=1)[:, 0])


def test_normalize_rows_is_linalg_norm_bit_for_bit() -> None:
    rng = np.random.default_rng(7)
    for scale in (1e-9, 1.0, 1e4):
        v = (rng.standard_normal((9, 256)) * scale).astype(np.float32)
        v[3] = 0.0  # a zero row stays zero
        expected = np.zeros_like(v)
        norms = np.linalg.norm(v, axis=-1, keepdims=True)
        np.divide(v, norms, out=expected, where=norms > 1e-12)
        assert normalize_rows(v).tobytes() == expected.tobytes()


def test_embedding_a_text_alone_or_in_a_batch_gives_the_same_bits(embedder: Any) -> None:
    """Pooling sums each text's token vectors in token order, whatever else is in
    the batch (so an agent ACTIVATEd alone and one bulk-imported get identical
    vectors), and equals the plain sum of the token rows up to float rounding."""
    texts = [
        "Audit Solidity smart contracts for reentrancy",
        "",
        "translate documents between English and French " * 40,  # a long text
        "x",
    ] + [f"agent number {i} books flights and hotels" for i in range(300)]  # > one chunk
    sums, counts = embedder.embed_sums(texts)
    for i in (0, 1, 2, 3, 299, 302):
        alone, n = embedder.embed_sums([texts[i]])
        assert np.array_equal(alone[0], sums[i]) and n[0] == counts[i]
    assert counts[1] == 0 and not sums[1].any()
    ids = embedder._tok.encode(texts[0], add_special_tokens=False).ids
    table = embedder._table
    np.testing.assert_allclose(sums[0], table[ids].sum(axis=0), rtol=0, atol=1e-5)
