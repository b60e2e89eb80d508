"""How deep each part of a compound intent searches for candidates, measured by
the answers users get (issue 26, item 1; docs/query-profile.md, seventeenth round).

    OPENBLAS_NUM_THREADS=1 .venv/bin/python bench/part_candidates.py --agents 100000 \\
        [--depths 512,64,0] [--rounds 2] [--cache /tmp/ans-bench] [--data-dir DIR]

An intent of several parts (``ans.text.segments``) is scored as a whole and
part by part; above ``[index] exact_max`` agents only candidates are scored:
each source's (FAISS, BM25, tags) best ``candidates_at(n)`` for the whole
intent and ``part_candidates_at(n)`` for each part. This script asks whether
the parts' own search changes what a user is answered, and what it costs:

1. A copy of the benchmark's imported data dir (``bench/query_profile.py``'s
   synthetic catalog of ``--agents``, or ``--data-dir``) gets MetaTool's 199
   tools ACTIVATEd (their published examples, the seeded mixed trust of
   bench/metatool_eval.py) through the in-process service.
2. Every depth of ``--depths`` (the first is the reference) answers, through
   ``AnsService.discover`` (gates, relevance gate, ranking, signing), the
   2,000 single-tool and 497 multi-tool MetaTool queries (``limit`` 10,
   ``trust_tier_min`` 2) and the synthetic catalog's own DISCOVERs (their
   limits, zones, trust filters, ``capability_domains``).
3. Per depth: MetaTool recall@1/@5 and nDCG@10 of the gold tools, how many
   answers are identical (same agents, same order) to the reference depth's,
   and the thread CPU of a DISCOVER, the depths alternated over ``--rounds``.

Needs ../shared/data/metatool (exits with a message without it). Writes
bench/results/part_candidates-<label>.json and prints the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import metatool_eval as me  # bench/ is on sys.path
from query_profile import prepare

ROOT = Path(__file__).resolve().parent.parent
SPLIT = ROOT.parent / "shared" / "data" / "metatool"


def set_depth(service: Any, depth: str) -> None:
    """Every part searches ``depth`` deep (the whole intent keeps its own)."""
    if depth == "configured":
        return
    index = service.index.matcher
    settings = replace(index.settings, part_candidates=int(depth))
    index.settings = settings
    index._ann.settings = settings


def answer(service: Any, params: dict[str, Any]) -> tuple[list[str], int, float]:
    from ans.protocol.messages import DiscoverRequest, parse_discover_params, query_digest

    req = DiscoverRequest(
        me.ASKER,
        "bench",
        parse_discover_params(params, service.limits),
        query_digest(params),
        params,
    )
    t = time.thread_time()
    result = service.discover(req)
    cpu = time.thread_time() - t
    return [r["canonical_id"] for r in result["results"]], result["total_matches"], cpu


def identical(got: list[list[str]], other: list[list[str]], n_mt: int) -> dict[str, int]:
    """How many answers are the same agents in the same order: MetaTool's
    (the first ``n_mt``), then the catalog's."""
    same = [a == b for a, b in zip(got, other, strict=True)]
    return {"metatool": sum(same[:n_mt]), "catalog": sum(same[n_mt:])}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--agents", type=int, default=100_000)
    ap.add_argument(
        "--depths",
        default="512,64,0",
        help="part depths ('configured': leave the index as built); the first is the reference",
    )
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "ans-bench")
    ap.add_argument("--data-dir", type=Path, help="an imported data dir instead of the cache's")
    ap.add_argument("--queries-file", type=Path, help="the catalog's DISCOVERs (with --data-dir)")
    ap.add_argument(
        "--governance-jwks",
        type=Path,
        help="the key that signed the data dir's agents (with --data-dir; untrusted ones are "
        "not loaded)",
    )
    ap.add_argument("--label", help="names the results file (default: --agents)")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--answers-out", type=Path, help="write the first depth's answers here")
    ap.add_argument(
        "--reference",
        type=Path,
        help="answers written by --answers-out (e.g. by an older commit): count identical ones",
    )
    args = ap.parse_args(argv)
    if not (SPLIT / "split.json").is_file():
        sys.exit(f"part_candidates: needs MetaTool's split in {SPLIT}")
    depths = [d.strip() for d in args.depths.split(",")]
    if args.data_dir is not None:
        source, queries_file, catalog_jwks = args.data_dir, args.queries_file, args.governance_jwks
        if catalog_jwks is None:
            ap.error("--data-dir needs --governance-jwks")
    else:
        catalog, source, _ = prepare(args.agents, args.cache)
        queries_file = catalog / "queries.jsonl"
        catalog_jwks = catalog / "governance.jwks.json"

    from ans.governance.keys import SigningKey
    from ans.governance.signing import sign_document
    from ans.protocol.messages import ActivateRequest

    from ans.config import Config
    from ans.server import configure_logging
    from ans.wiring import build_service

    configure_logging("error")
    data = json.loads((SPLIT / "split.json").read_text(encoding="utf-8"))
    descriptions = json.loads((SPLIT / "plugin_des.json").read_text(encoding="utf-8"))
    metatool = [(q, [t]) for q, t in data["eval_single"]] + [
        (q, list(ts)) for q, ts in data["eval_multi"]
    ]
    catalog_queries: list[dict[str, Any]] = []
    if queries_file is not None and queries_file.is_file():
        for line in queries_file.read_text(encoding="utf-8").splitlines():
            params = json.loads(line)
            if params.get("intent"):
                catalog_queries.append(params)
    report: dict[str, Any] = {
        "command": "bench/part_candidates.py "
        + " ".join(argv if argv is not None else sys.argv[1:]),
        "depths": depths,
        "queries": {"metatool": len(metatool), "catalog": len(catalog_queries)},
    }
    with tempfile.TemporaryDirectory(prefix="ans-parts-", dir=args.cache) as tmp:
        work = Path(tmp)
        print(f"[parts] copying {source}", file=sys.stderr, flush=True)
        shutil.copytree(source, work / "data")
        gov = SigningKey.generate()
        jwks = work / "gov.jwks.json"
        jwks.write_text(json.dumps({"keys": [gov.public.jwk()]}), encoding="utf-8")
        service = build_service(
            Config(data_dir=work / "data", governance_jwks=(jwks, catalog_jwks), log_level="error")
        ).service
        loaded = len(service.index.matcher)
        if loaded < 1000:
            sys.exit(f"part_candidates: only {loaded} agents loaded from {source}")
        tools = sorted(data["examples"])
        docs = me.agent_docs(data, descriptions, True, me.mixed_trust(tools))
        tool_of: dict[str, str] = {}
        for i, (tool, manifest, caps) in enumerate(docs):
            signed = sign_document(manifest, gov, "signature")
            service.activate(ActivateRequest(me.GOV, f"act-{i}", signed, caps))
            tool_of[manifest["canonical_id"]] = tool
        report["agents"] = len(service.index.matcher)
        report["candidates"] = service.index.matcher.settings.candidates_at(report["agents"])
        requests = [
            {"intent": q, "limit": me.K, "trust_tier_min": me.TRUST_TIER_MIN} for q, _ in metatool
        ] + catalog_queries
        n_mt = len(metatool)
        answers: dict[str, list[list[str]]] = {}
        totals: dict[str, list[int]] = {}  # total_matches, first round
        # thread CPU a DISCOVER: MetaTool's queries; the catalog's (some with
        # capability_domains, which read facet rows) apart
        cpu: dict[str, list[float]] = {d: [] for d in depths}
        cpu_catalog: dict[str, list[float]] = {d: [] for d in depths}
        for r in range(args.rounds):
            for depth in depths if r % 2 == 0 else depths[::-1]:
                set_depth(service, depth)
                got, tot, spent = [], [], []
                for params in requests:
                    ids, total, c = answer(service, params)
                    got.append(ids)
                    tot.append(total)
                    spent.append(c)
                answers.setdefault(depth, got)
                totals.setdefault(depth, tot)
                cpu[depth].append(1e6 * sum(spent[:n_mt]) / n_mt)
                cpu_catalog[depth].append(1e6 * sum(spent[n_mt:]) / max(1, len(catalog_queries)))
                print(
                    f"[parts] round {r + 1} depth {depth}: {cpu[depth][-1]:,.0f} us MetaTool, "
                    f"{cpu_catalog[depth][-1]:,.0f} us catalog",
                    file=sys.stderr,
                    flush=True,
                )
        service.store.close()
    ref = answers[depths[0]]
    if args.answers_out is not None:
        args.answers_out.write_text(json.dumps(ref) + "\n", encoding="utf-8")
    older = None
    if args.reference is not None:
        older = json.loads(args.reference.read_text(encoding="utf-8"))
        report["reference"] = str(args.reference)
    singles = len(data["eval_single"])
    rows = {}
    for depth in depths:
        got = answers[depth]
        named = [[tool_of.get(c, "") for c in ids] for ids in got[:n_mt]]
        golds = [g for _, g in metatool]
        rows[depth] = {
            "part_candidates_at_n": None
            if depth == "configured"
            else replace(
                service.index.matcher.settings, part_candidates=int(depth)
            ).part_candidates_at(report["agents"]),
            "cpu_us_per_discover": [round(x) for x in cpu[depth]],
            "cpu_us_mean": round(statistics.fmean(cpu[depth])),
            "catalog_cpu_us_per_discover": [round(x) for x in cpu_catalog[depth]],
            "metatool_single": me.metrics(named[:singles], golds[:singles]),
            "metatool_multi": me.metrics(named[singles:], golds[singles:]),
            "identical_to_reference": identical(got, ref, n_mt),
            "mean_answer_size": round(statistics.fmean(len(a) for a in got), 2),
            "mean_total_matches": round(statistics.fmean(totals[depth]), 2),
        }
        if older is not None:
            rows[depth]["identical_to_file"] = identical(got, older, n_mt)
        row = rows[depth]
        print(
            f"depth {depth:>10}: {row['cpu_us_mean']:,} us a MetaTool DISCOVER  "
            f"MetaTool R@5 {row['metatool_single']['recall@5']:.4f} / multi "
            f"{row['metatool_multi']['recall@5']:.4f}  identical answers "
            f"{row['identical_to_reference']['metatool']}/{n_mt} MetaTool, "
            f"{row['identical_to_reference']['catalog']}/{len(catalog_queries)} catalog"
            + (
                f"; to {args.reference.name}: {row['identical_to_file']['metatool']} + "
                f"{row['identical_to_file']['catalog']}"
                if older is not None
                else ""
            )
        )
    report["by_depth"] = rows
    label = args.label or str(args.agents)
    out = args.out or ROOT / "bench" / "results" / f"part_candidates-{label}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
