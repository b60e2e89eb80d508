"""The capability index at catalog scale: build rate, query latency of the real
query path, and recall of the approximate (FAISS) path against exhaustive
scoring at k=50.

    .venv/bin/python bench/index_scale.py --agents 100000 --queries 200
    .venv/bin/python bench/index_scale.py --data-dir DATA --queries-file CAT/queries.jsonl

The second form reads the index snapshot and registry an ``ans import`` wrote
(no rebuild), which is how the 1M figures are taken.

Builds the index in-process from ``tools.synth`` agents (no server, no
signatures: those are the load benchmark's business), then for every query of
``tools.synth.make_queries`` that has an intent runs the default path and the
exhaustive one (``exhaustive=True``: every agent scored) and compares their
top 50 by capability_match_score (ties by canonical_id). Writes
bench/results/index_scale-<N>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

from ans.ann import AnnSettings
from ans.matcher import CapabilityIndex, WordLlamaEmbedder, profile_from
from tools.synth import generate, make_queries

K = 50


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def top(scores: dict[str, float], k: int) -> list[str]:
    return [c for c, _ in sorted(scores.items(), key=lambda t: (-t[1], t[0]))[:k]]


def pct(xs: list[float], p: float) -> float:
    return float(np.percentile(np.array(xs), p)) if xs else 0.0


def write(report: dict[str, Any], out: Path | None, agents: int) -> int:
    print(json.dumps(report, indent=2))
    out = out or Path(__file__).parent / "results" / f"index_scale-{agents}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    return 0


def measure(
    idx: CapabilityIndex, queries: list[dict[str, Any]], exhaustive: bool
) -> dict[str, Any]:
    lat: list[float] = []
    lat_dom: list[float] = []
    recalls: list[float] = []
    for q in queries:
        domains = tuple(q["capability_domains"]) if q.get("capability_domains") else None
        t = time.perf_counter()
        got = top(idx.query(q["intent"], domains).above(0.0), K)
        (lat_dom if domains else lat).append((time.perf_counter() - t) * 1000)
        if not exhaustive or domains:
            continue  # exhaustive capability_domains would re-embed every agent
        want = top(idx.query(q["intent"], domains, exhaustive=True).above(0.0), K)
        if want:
            recalls.append(len(set(got) & set(want)) / len(want))
    return {
        "query_ms": {
            "n": len(lat),
            "p50": round(pct(lat, 50), 2),
            "p90": round(pct(lat, 90), 2),
            "p99": round(pct(lat, 99), 2),
        },
        "query_ms_capability_domains": {
            "n": len(lat_dom),
            "p50": round(pct(lat_dom, 50), 2),
            "p99": round(pct(lat_dom, 99), 2),
        },
        "recall_at_50": {
            "n": len(recalls),
            "mean": round(float(np.mean(recalls)), 4) if recalls else None,
            "min": round(float(np.min(recalls)), 4) if recalls else None,
            "share_at_least_0.9": round(float(np.mean(np.array(recalls) >= 0.9)), 4)
            if recalls
            else None,
        },
    }


def from_snapshot(args: argparse.Namespace, argv: list[str] | None) -> int:
    from ans.store import SQLiteStore
    from ans.wiring import profile_source

    store = SQLiteStore(args.data_dir / "registry.sqlite3")
    settings = AnnSettings(exact_max=args.exact_max, nprobe=args.nprobe, candidates=args.candidates)
    emb = WordLlamaEmbedder()
    t = time.perf_counter()
    loaded = CapabilityIndex.load(
        args.data_dir / "index", emb, settings=settings, profile_source=profile_source(store)
    )
    load_s = time.perf_counter() - t
    if loaded is None:
        print(f"no usable snapshot in {args.data_dir / 'index'}", file=sys.stderr)
        return 1
    idx = loaded[0]
    rss_loaded = rss_mb()
    lines = args.queries_file.read_text().splitlines() if args.queries_file else []
    queries = [q for q in map(json.loads, lines) if q.get("intent")][: args.queries]
    idx.query("warm up", None)
    report = {
        "agents": len(idx),
        "index": idx.describe(),
        "snapshot_load_s": round(load_s, 2),
        "rss_mb_after_load": round(rss_loaded),
        **measure(idx, queries, not args.no_exhaustive),
        "peak_rss_mb_incl_exhaustive_copies": round(peak_mb()),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "command": "bench/index_scale.py " + " ".join(argv if argv is not None else sys.argv[1:]),
    }
    return write(report, args.out, len(idx))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--agents", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--batch", type=int, default=5000)
    ap.add_argument("--exact-max", type=int, default=AnnSettings().exact_max)
    ap.add_argument("--nprobe", type=int, default=AnnSettings().nprobe)
    ap.add_argument("--candidates", type=int, default=AnnSettings().candidates)
    ap.add_argument("--no-exhaustive", action="store_true", help="skip the recall comparison")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--data-dir", type=Path, help="use DATA/index + DATA/registry.sqlite3")
    ap.add_argument("--queries-file", type=Path, help="DISCOVER parameters, one per line")
    args = ap.parse_args(argv)
    if args.data_dir is not None:
        return from_snapshot(args, argv)

    settings = AnnSettings(exact_max=args.exact_max, nprobe=args.nprobe, candidates=args.candidates)
    emb = WordLlamaEmbedder()
    profiles: dict[str, Any] = {}
    idx = CapabilityIndex(
        emb,
        query_cache=0,
        settings=settings,
        profile_source=lambda ids: {c: profiles[c] for c in ids if c in profiles},
    )
    t0 = time.perf_counter()
    embed_s = 0.0
    batch = []
    for manifest, caps in generate(args.agents, args.seed):
        p = profile_from(manifest, caps)
        batch.append(p)
        if len(batch) == args.batch:
            t = time.perf_counter()
            idx.upsert_many(list(zip(batch, idx.embed_profiles(batch), strict=True)))
            embed_s += time.perf_counter() - t
            for q in batch:
                profiles[q.canonical_id] = q
            batch = []
            print(f"\r  indexed {len(idx):,}", end="", file=sys.stderr)
    if batch:
        t = time.perf_counter()
        idx.upsert_many(list(zip(batch, idx.embed_profiles(batch), strict=True)))
        embed_s += time.perf_counter() - t
        for q in batch:
            profiles[q.canonical_id] = q
    build_s = time.perf_counter() - t0
    print(f"\r  indexed {len(idx):,} in {build_s:.1f} s", file=sys.stderr)
    t = time.perf_counter()
    idx.query("warm up the postings", None)
    first_query_s = time.perf_counter() - t
    rss_after_build = rss_mb()

    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        idx.save(Path(tmp) / "index", {})
        save_s = time.perf_counter() - t
        size = sum(f.stat().st_size for f in (Path(tmp) / "index").iterdir())
        t = time.perf_counter()
        loaded = CapabilityIndex.load(
            Path(tmp) / "index", emb, settings=settings, profile_source=idx._source
        )
        load_s = time.perf_counter() - t
        assert loaded is not None
        del loaded

    queries = [q for q in make_queries(args.queries, args.seed + 1000) if q.get("intent")]
    report = {
        "agents": len(idx),
        "index": idx.describe(),
        "build_s": round(build_s, 2),
        "embed_index_agents_per_s": round(len(idx) / max(embed_s, 1e-9)),
        "first_query_s": round(first_query_s, 3),
        "snapshot": {"save_s": round(save_s, 2), "load_s": round(load_s, 2), "bytes": size},
        **measure(idx, queries, not args.no_exhaustive),
        "rss_mb_after_build": round(rss_after_build),
        "peak_rss_mb": round(peak_mb()),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "command": "bench/index_scale.py " + " ".join(argv if argv is not None else sys.argv[1:]),
    }
    return write(report, args.out, len(idx))


if __name__ == "__main__":
    raise SystemExit(main())
