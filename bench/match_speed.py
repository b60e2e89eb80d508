"""Capability-matching speed: one query against N agents with 5 example tasks each.

    .venv/bin/python bench/match_speed.py            # writes bench/results/match_speed.json

Agents are synthesized from the MetaTool descriptions and example tasks
(mixed across tools so that no two agents are alike); queries are MetaTool
evaluation queries. Timed in-process, single thread, the query-vector cache
disabled (every query is embedded), after a warm-up. The floor measured in
the same run is one dense NumPy mat-vec over the N context vectors -- the
least any exact semantic scan must do -- so the ratio is comparable across
noisy machines.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import faiss
import numpy as np

from ans.matcher import (
    CapabilityIndex,
    CapabilityProfile,
    WordLlamaEmbedder,
    profile_from,
)
from ans.text import segments

ROOT = Path(__file__).resolve().parent.parent


def find_data() -> Path:
    for parent in [ROOT, *ROOT.parents]:
        cand = parent / "shared" / "data" / "metatool"
        if (cand / "split.json").is_file():
            return cand
    sys.exit("match_speed: ../shared/data/metatool not found")


def synth_profiles(n: int, data: dict[str, Any], desc: dict[str, str]) -> list[CapabilityProfile]:
    rng = random.Random(7)
    tools = sorted(data["examples"])
    pool = [e for t in tools for e in data["examples"][t]]
    out = []
    for i in range(n):
        a, b = rng.choice(tools), rng.choice(tools)
        manifest = {
            "canonical_id": f"{i:064x}",
            "agent_label": f"{a}-{i}",
            "job_description": f"{desc[a]} Also: {desc[b]}",
        }
        caps = {
            "supported_methods": ["QUERY"],
            "tags": [a.lower(), b.lower()],
            "examples": [{"id": f"ex-{k}", "text": rng.choice(pool)} for k in range(5)],
        }
        out.append(profile_from(manifest, caps))
    return out


def timed(fn: Any, reps: int) -> list[float]:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000.0)
    return times


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--agents", type=int, default=10_000)
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "match_speed.json")
    args = ap.parse_args()
    faiss.omp_set_num_threads(1)
    folder = find_data()
    data = json.loads((folder / "split.json").read_text(encoding="utf-8"))
    desc = json.loads((folder / "plugin_des.json").read_text(encoding="utf-8"))
    embedder = WordLlamaEmbedder()
    index = CapabilityIndex(embedder, query_cache=0)
    t0 = time.perf_counter()
    for p in synth_profiles(args.agents, data, desc):
        index.upsert(p)
    build_s = time.perf_counter() - t0
    queries = [q for q, _ in data["eval_single"][: args.queries]]
    for q in queries[:20]:
        index.query(q, None)  # warm-up
    per_query = [timed(lambda q=q: index.query(q, None), 1)[0] for q in queries]
    evidence = [
        timed(lambda q=q: index.query(q, None, evidence=True).above(0.05), 1)[0]
        for q in queries[:100]
    ]
    single_part = [q for q in queries if not segments(q)]
    single_times = [timed(lambda q=q: index.query(q, None), 1)[0] for q in single_part]
    embed_times = [timed(lambda q=q: embedder.embed([q]), 1)[0] for q in queries]
    ctx = np.random.default_rng(0).standard_normal((args.agents, embedder.dim)).astype(np.float32)
    qv = ctx[0].copy()
    floor = timed(lambda: ctx @ qv, len(queries))
    med = statistics.median(per_query)
    result = {
        "command": "python bench/match_speed.py",
        "machine": f"{platform.machine()} {os.cpu_count()} cpu, Python {platform.python_version()}",
        "agents": args.agents,
        "examples_per_agent": 5,
        "queries": len(queries),
        "build_seconds": round(build_s, 2),
        "median_ms_per_query": round(med, 3),
        "p90_ms_per_query": round(float(np.percentile(per_query, 90)), 3),
        "median_ms_one_part_queries": round(statistics.median(single_times), 3),
        "one_part_queries": len(single_part),
        "median_ms_with_evidence": round(statistics.median(evidence), 3),
        "median_ms_query_embedding": round(statistics.median(embed_times), 3),
        "floor_median_ms_dense_matvec": round(statistics.median(floor), 3),
        "ratio_to_floor": round(med / max(statistics.median(floor), 1e-9), 2),
        "target_median_ms": 2.0,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    for k, v in result.items():
        print(f"{k:32s} {v}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
