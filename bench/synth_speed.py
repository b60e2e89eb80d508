"""Synthetic-catalog generation speed (tools.synth): agents per second at 10k and
100k (add 1000000 with --sizes; it writes ~2 GB), beside a floor measured in the
same run.

    .venv/bin/python bench/synth_speed.py                 # writes bench/results/synth.json
    .venv/bin/python bench/synth_speed.py --sizes 10000 100000 1000000 --root /tmp/synth

Catalogs are written under --root (default: a temporary directory under /tmp,
removed afterwards unless --keep). For each size it reports wall time,
agents/s, CPU seconds (parent + workers) and agents per CPU-second, the
parent's peak RSS, and the file size. The floor is the cost that no generator
can avoid: one ES256 signature over the JCS bytes of a typical manifest,
timed single-threaded in the same run; ``ratio_to_floor`` is agents/s divided
by (workers x signatures/s), and ``cpu_ratio_to_floor`` is agents per
CPU-second divided by signatures/s (robust against other load). The machine
is shared, so the load average at the start of each size is recorded too.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from ans.governance.signing import sign_document
from ans.protocol.jcs import canonicalize

from tools.synth import DeterministicSigningKey, generate, write_catalog

RESULTS = Path(__file__).resolve().parent / "results" / "synth.json"


def _cpu_seconds() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def sign_floor(n: int = 3000) -> float:
    """Signatures per second (JCS + deterministic ES256) over typical manifests."""
    key = DeterministicSigningKey.generate()
    manifests = [m for m, _ in generate(200, 12345)]
    t0 = time.perf_counter()
    for i in range(n):
        sign_document(manifests[i % len(manifests)], key, "signature")
    return n / (time.perf_counter() - t0)


def jcs_only(n: int = 3000) -> float:
    manifests = [m for m, _ in generate(200, 12345)]
    t0 = time.perf_counter()
    for i in range(n):
        canonicalize(manifests[i % len(manifests)])
    return n / (time.perf_counter() - t0)


def run(sizes: list[int], root: Path, workers: int, keep: bool) -> dict[str, Any]:
    floor = sign_floor()
    rows = []
    for n in sizes:
        out = root / f"catalog-{n}"
        load = os.getloadavg()[0]
        cpu0 = _cpu_seconds()
        t0 = time.perf_counter()
        meta = write_catalog(out, n, 1, workers=workers, queries=500)
        wall = time.perf_counter() - t0
        cpu = _cpu_seconds() - cpu0
        row = {
            "agents": n,
            "workers": workers,
            "wall_s": round(wall, 2),
            "agents_per_s": round(n / wall),
            "cpu_s": round(cpu, 2),
            "agents_per_cpu_s": round(n / cpu) if cpu else None,
            "ratio_to_floor": round(n / wall / (workers * floor), 3),
            # contention-robust: CPU cost per agent against the per-core floor
            "cpu_ratio_to_floor": round(n / cpu / floor, 3) if cpu else None,
            "bytes": meta["agents"]["bytes"],
            "bytes_per_agent": round(meta["agents"]["bytes"] / max(n, 1)),
            "parent_peak_rss_mb": round(
                resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1
            ),
            "load_avg_1m_at_start": round(load, 2),
        }
        rows.append(row)
        print(
            f"{n:>9,} agents  {wall:7.1f} s  {row['agents_per_s']:>7,}/s  "
            f"{row['agents_per_cpu_s']:>6,}/CPU-s  x{row['ratio_to_floor']:.2f} of floor "
            f"(CPU x{row['cpu_ratio_to_floor']:.2f})  "
            f"{row['bytes'] / 1e6:8.0f} MB  parent RSS {row['parent_peak_rss_mb']} MB  "
            f"load {load:.1f}",
            flush=True,
        )
        if not keep:
            shutil.rmtree(out, ignore_errors=True)
    return {
        "benchmark": "synth_speed",
        "command": "python " + " ".join(sys.argv),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "floor": {
            "what": "JCS + deterministic ES256 signature of one manifest, single thread",
            "signatures_per_s": round(floor),
            "jcs_per_s": round(jcs_only()),
        },
        "results": rows,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    p.add_argument("--root", type=Path, default=None, help="where catalogs are written")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    p.add_argument("--keep", action="store_true", help="keep the catalogs")
    p.add_argument("--out", type=Path, default=RESULTS, help="results JSON")
    args = p.parse_args(argv)
    root = args.root or Path(tempfile.mkdtemp(prefix="ans-synth-bench-", dir="/tmp"))
    root.mkdir(parents=True, exist_ok=True)
    try:
        doc = run(args.sizes, root, args.workers, args.keep)
    finally:
        if args.root is None and not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    print(f"floor: {doc['floor']['signatures_per_s']:,} signatures/s per core")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
