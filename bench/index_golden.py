"""Bit-exact fingerprint of the capability index's answers, to prove a refactor
changed no ranking and no score.

    .venv/bin/python bench/index_golden.py --out /tmp/before.json
    (refactor)
    .venv/bin/python bench/index_golden.py --out /tmp/after.json
    cmp /tmp/before.json /tmp/after.json

Dumps, with every float as ``float.hex`` (no rounding hides a change), for the
demo catalog and a synthetic catalog (exact mode and forced approximate/ANN
mode, the latter also after a save/load round trip): per intent the candidate
ids and final fused scores, the ``above(0)`` map, the calibrated relevance-gate
matches, the evidence of the top agents, and ``capability_domains``-restricted
queries; plus routing equivalence for a few agents.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

from ans.ann import AnnSettings
from ans.demo import demo_capabilities, demo_manifest, load_catalog
from ans.matcher import CapabilityIndex, CapabilityProfile, WordLlamaEmbedder, profile_from
from ans.relevance import RelevanceGate
from tools.synth import generate, make_queries

DOMAIN_SETS: list[tuple[str, ...] | None] = [
    None,
    ("tags",),
    ("examples",),
    ("methods", "tools"),
    ("modalities", "zones", "version"),
]


def hx(values: Any) -> list[str]:
    return [float(v).hex() for v in np.asarray(values, dtype=np.float64).ravel().tolist()]


def dump_query(idx: CapabilityIndex, intent: str, domains: tuple[str, ...] | None) -> Any:
    # The thresholds the golden files were written with (the gate's defaults then).
    gate = RelevanceGate(min_relevance=0.04, strong_match=0.25)
    qs = idx.query(intent, domains, evidence=True)
    above = qs.above(0.0)
    m_ids, m_vals, _ = qs.matches(gate)
    order = sorted(range(len(m_ids)), key=lambda i: (-float(m_vals[i]), m_ids[i]))
    top = [m_ids[i] for i in order[:3]]
    floor_ids, floor_vals, _ = qs.matches(RelevanceGate(kind="floor"))
    out = {
        "intent": intent,
        "domains": domains,
        "exhaustive": qs.exhaustive,
        "ids": qs.ids,
        "final": hx(qs.final),
        "above": {k: v.hex() for k, v in sorted(above.items())},
        "matches": [m_ids, hx(m_vals)],
        "floor": [floor_ids, hx(floor_vals)],
        "evidence": {c: qs.evidence(c) for c in top},
        "score": {c: qs.score(c, gate) for c in top},
    }
    if top and qs.ids:
        # an agent outside the candidates, scored alone (QueryScores.score -> query(only=...))
        outside = sorted(set(idx.ids()) - {c for c in qs.ids if c is not None})[:1]
        out["score_outside"] = {c: qs.score(c, gate) for c in outside}
    return out


def dump_index(
    idx: CapabilityIndex,
    intents: list[tuple[str, tuple[str, ...] | None]],
    eq: list[CapabilityProfile],
) -> dict[str, Any]:
    return {
        "describe": idx.describe(),
        "queries": [dump_query(idx, i, d) for i, d in intents],
        "exhaustive": [
            hx(idx.query(i, None, exhaustive=True).final) for i, d in intents[:10] if d is None
        ],
        "equivalence": [{k: v.hex() for k, v in sorted(idx.equivalence(p).items())} for p in eq],
        "equivalence_among": [
            {k: v.hex() for k, v in sorted(idx.equivalence(p, among=idx.ids()[:20]).items())}
            for p in eq
        ],
    }


def build(
    emb: WordLlamaEmbedder, profiles: list[CapabilityProfile], settings: AnnSettings, store: bool
) -> CapabilityIndex:
    by_id = {p.canonical_id: p for p in profiles}
    idx = CapabilityIndex(
        emb,
        settings=settings,
        profile_source=(lambda ids: {c: by_id[c] for c in ids if c in by_id}) if store else None,
    )
    # first half in bulk, then one by one (both write paths), then remove a few
    half = len(profiles) // 2
    idx.upsert_many(list(zip(profiles[:half], idx.embed_profiles(profiles[:half]), strict=True)))
    for p in profiles[half : half + 40]:
        idx.upsert(p)
    rest = profiles[half + 40 :]
    if rest:
        idx.upsert_many(list(zip(rest, idx.embed_profiles(rest), strict=True)))
    for p in profiles[3:9]:
        idx.remove(p.canonical_id)
    idx.upsert(profiles[4])  # reuses a freed slot
    return idx


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--agents", type=int, default=10_000)
    args = ap.parse_args()
    emb = WordLlamaEmbedder()
    report: dict[str, Any] = {}

    catalog = load_catalog()
    demo = [profile_from(demo_manifest(e), demo_capabilities(e)) for e in catalog]
    demo_intents: list[str] = []
    for e in catalog[:30]:
        caps = e["capabilities"]
        ex = caps.get("examples") or []
        if ex:
            demo_intents.append(str(ex[0]["text"]))
        if caps.get("tags"):
            demo_intents.append(" ".join(caps["tags"][:2]).replace("-", " "))
    demo_intents += [
        "latest news about Tesla and how it moved the stock",
        "audit contracts",
        "",
        "zzzz qqqq",
        "translate a document and then summarize it for the board",
    ]
    demo_intents = demo_intents[:50]
    qs = [(t, d) for t in demo_intents for d in DOMAIN_SETS[:1]]
    qs += [(t, d) for t in demo_intents[:12] for d in DOMAIN_SETS[1:]]
    demo_idx = build(emb, demo, AnnSettings(), store=False)
    report["demo"] = dump_index(demo_idx, qs, demo[:5])
    print("demo done", file=sys.stderr)

    synth = [profile_from(m, c) for m, c in generate(args.agents, 1)]
    sq = [q for q in make_queries(400, 1) if q.get("intent")]
    plain = [(q["intent"], None) for q in sq if not q.get("capability_domains")][:50]
    dom = [
        (q["intent"], tuple(q["capability_domains"])) for q in sq if q.get("capability_domains")
    ][:15]
    s_intents: list[tuple[str, tuple[str, ...] | None]] = plain + dom
    exact = build(emb, synth, AnnSettings(), store=True)
    report["synth_exact"] = dump_index(exact, s_intents, synth[:3])
    print("synth exact done", file=sys.stderr)
    ann = build(emb, synth, AnnSettings(exact_max=2000, candidates=128), store=True)
    report["synth_ann"] = dump_index(ann, s_intents, synth[:3])
    print("synth ann done", file=sys.stderr)
    by_id = {p.canonical_id: p for p in synth}
    with tempfile.TemporaryDirectory() as tmp:
        ann.save(Path(tmp) / "index", {"k": 1})
        loaded = CapabilityIndex.load(
            Path(tmp) / "index",
            emb,
            settings=AnnSettings(exact_max=2000, candidates=128),
            profile_source=lambda ids: {c: by_id[c] for c in ids if c in by_id},
        )
        assert loaded is not None
        report["synth_ann_loaded"] = dump_index(loaded[0], s_intents[:20] + dom[:5], synth[:2])
        report["synth_ann_loaded_meta"] = loaded[1]
        # exact snapshot loaded with a small exact_max: rebuilds the ANN on load
        exact.save(Path(tmp) / "exact", {})
        reloaded = CapabilityIndex.load(
            Path(tmp) / "exact",
            emb,
            settings=AnnSettings(exact_max=2000, candidates=128),
            profile_source=lambda ids: {c: by_id[c] for c in ids if c in by_id},
        )
        assert reloaded is not None
        report["synth_exact_reloaded_ann"] = dump_index(reloaded[0], s_intents[:10], [])
    text = json.dumps(report, indent=1, sort_keys=True, default=str)
    args.out.write_text(text)
    print(hashlib.sha256(text.encode()).hexdigest(), args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
