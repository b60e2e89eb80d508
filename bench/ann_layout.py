"""The approximate index's inverted lists: which code layout keeps a query text's
best candidates for the least scan (docs/query-profile.md, fifteenth round).

    OPENBLAS_NUM_THREADS=1 .venv/bin/python bench/ann_layout.py \\
        --data-dir /tmp/ans-bench-scale/profile-100000/data [--texts 900] [--nprobe 16,24,32]

Reads the capability rows of an ``ans import``'s index snapshot (``DATA/index/
arrays.npz``: the int8 rows a DISCOVER rescores its candidates from), and
embeds MetaTool's evaluation queries and their segments (the query texts a
DISCOVER searches; the catalog's own intents when ``../shared`` is absent).
For each layout, over the same rows, one thread, one text per search as
served, keeping ``k`` = the candidates a catalog of this size keeps a text
(:meth:`ans.ann.AnnSettings.candidates_at`):

* ``SQ8``: 8-bit scalar codes (``IndexIVFScalarQuantizer``, the layout until
  2026-11-27), probed as the index did (``nprobe`` 16);
* ``PQ{dim/2}x4fsr``: 4-bit codes of 2-d sub-vectors of the residual, SIMD
  fast scan (``IndexIVFPQFastScan``, by residual: the layout now), per
  ``--nprobe``;
* ``PQ{dim/2}x4fs``: the same codes of the vector itself (not the residual).

Per layout: µs a text (best of two passes), recall@50 (how many of each
text's exact top 50 by similarity to the rows are among its k hits), and the
gap between the k-th score the layout kept and the exact k-th best (the floor
a pending agent's exact similarity is held to, :mod:`ans.index.approximate`).
Writes bench/results/ann_layout-<N>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import faiss
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ans.ann import AnnSettings, nlist_for, sub_quantizers  # noqa: E402
from ans.index.embedder import WordLlamaEmbedder  # noqa: E402
from ans.text import segments  # noqa: E402

RESULTS = ROOT / "bench" / "results"
METATOOL = ROOT.parent / "shared" / "data" / "metatool" / "split.json"
TOP = 50


def rows(data: Path) -> np.ndarray:
    """The unit capability vectors the snapshot's int8 rows stand for."""
    with np.load(data / "index" / "arrays.npz", allow_pickle=False) as z:
        x = z["cap_codes"].astype(np.float32) * z["cap_scale"][:, None]
    x /= np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-9)
    return x


def texts(count: int) -> list[str]:
    if METATOOL.is_file():
        split = json.loads(METATOOL.read_text(encoding="utf-8"))
        intents = list(dict.fromkeys(q for q, _ in split["eval_single"]))
    else:
        from tools.synth import make_queries

        intents = list(
            dict.fromkeys(q["intent"] for q in make_queries(4 * count, 1) if q.get("intent"))
        )
    out: list[str] = []
    for q in intents:
        out += [q, *segments(q)]
        if len(out) >= count:
            break
    return out[:count]


def measure(
    search: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]],
    queries: np.ndarray,
    truth: np.ndarray,
    kth: np.ndarray,
    exact: np.ndarray,
) -> dict[str, float]:
    search(queries[:20])
    best, got = float("inf"), []
    for _ in range(2):
        t0 = time.perf_counter()
        got = [search(queries[i : i + 1]) for i in range(len(queries))]
        best = min(best, time.perf_counter() - t0)
    recall = np.mean([len(set(truth[i]) & set(ids[0])) / TOP for i, (_, ids) in enumerate(got)])
    gap = np.array([d[0, -1] for d, _ in got]) - kth
    err = np.concatenate([d[0] - exact[i, ids[0]] for i, (d, ids) in enumerate(got)])
    return {
        "us_per_text": round(best / len(queries) * 1e6, 1),
        "recall_at_50": round(float(recall), 4),
        "floor_minus_exact_kth_mean": round(float(gap.mean()), 4),
        "floor_minus_exact_kth_p99": round(float(np.percentile(gap, 99)), 4),
        "score_error_p1": round(float(np.percentile(err, 1)), 4),
        "score_error_p99": round(float(np.percentile(err, 99)), 4),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data-dir", type=Path, required=True, help="an ans import's data dir")
    ap.add_argument("--texts", type=int, default=900)
    ap.add_argument("--nprobe", default="16,24,32", help="for the fast-scan layouts")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    faiss.omp_set_num_threads(1)
    x = rows(args.data_dir)
    n, dim = x.shape
    k = AnnSettings().candidates_at(n)
    qt = texts(args.texts)
    q = WordLlamaEmbedder().embed(qt).astype(np.float32)
    q = np.ascontiguousarray(q[np.abs(q).sum(axis=1) > 0])
    exact = q @ x.T
    truth = np.argpartition(-exact, TOP, axis=1)[:, :TOP]
    kth = -np.partition(-exact, k - 1, axis=1)[:, k - 1]
    nlist = nlist_for(n)
    rng = np.random.default_rng(1)
    train = x[np.sort(rng.choice(n, min(n, max(40_000, 40 * nlist)), replace=False))]
    ids = np.arange(n, dtype=np.int64)
    layouts: list[tuple[str, list[int]]] = [("SQ8", [16])]
    probes = [int(p) for p in args.nprobe.split(",")]
    layouts += [(f"PQ{sub_quantizers(dim)}x4fsr", probes), (f"PQ{sub_quantizers(dim)}x4fs", probes)]
    print(f"{n} rows, {len(q)} query texts, k {k}, nlist {nlist}", flush=True)
    out: list[dict[str, Any]] = []
    for spec, nprobes in layouts:
        index = faiss.index_factory(dim, f"IVF{nlist},{spec}", faiss.METRIC_INNER_PRODUCT)
        t0 = time.perf_counter()
        index.train(train)
        index.add_with_ids(x, ids)
        built = time.perf_counter() - t0
        for nprobe in nprobes:
            faiss.extract_index_ivf(index).nprobe = nprobe
            row = {
                "layout": spec,
                "nprobe": nprobe,
                "build_s": round(built, 1),
                "code_bytes": int(faiss.extract_index_ivf(index).code_size),
            }
            row.update(measure(lambda v, ix=index: ix.search(v, k), q, truth, kth, exact))
            out.append(row)
            print(
                f"{spec:14s} nprobe {nprobe:3d}  {row['us_per_text']:7.1f} µs/text  "
                f"recall@50 {row['recall_at_50']:.4f}  floor-exact k-th mean "
                f"{row['floor_minus_exact_kth_mean']:+.4f} "
                f"p99 {row['floor_minus_exact_kth_p99']:+.4f}  "
                f"code {row['code_bytes']} B",
                flush=True,
            )
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = args.out or RESULTS / f"ann_layout-{n}.json"
    doc = {
        "agents": n,
        "texts": len(q),
        "k": k,
        "nlist": nlist,
        "machine": platform.processor() or platform.machine(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "layouts": out,
    }
    path.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"results: {path}")


if __name__ == "__main__":
    main()
