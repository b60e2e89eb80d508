"""The exhaustive scan's two speed-ups, each against its absence, in one process:
the packed copy of the rows (ans/index/layout.py) and the batched scan of
concurrent DISCOVERs (ans/core/scan_batch.py).

    OPENBLAS_NUM_THREADS=1 .venv/bin/python bench/scan_paths.py [--agents 10000] \\
        [--passes 6] [--group 16] [--cache /tmp/ans-bench]

The 2,000 queries of bench/load.py's mix go through the real service path
(``AnsApp.answer``: parse, gates, match, ranking, result fields, JCS + ES256)
on the cached import of bench/query_profile.py, in gathers of ``--group``
concurrent requests (as ``ans serve`` starts the requests that arrived
together), one warm-up pass per variant, then ``--passes`` timed passes
alternating the variants (which goes first alternates too). Thread CPU per
DISCOVER; every pass's answers (each result's id, rank_score and
capability_match_score, and total_matches) must equal the first pass's, or
the script exits 1. Variants:

* ``streamed``: rows read as stored, each DISCOVER scanning alone;
* ``packed``: the packed copy, each scanning alone;
* ``packed+batch``: the packed copy, one scan per gather (what ``ans serve``
  does on a machine where the packed copy wins; its start-up log line
  ``exhaustive scan layout`` says which layout this machine uses).

Writes bench/results/scan_paths.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import orjson
from load import load_params, synth_module
from load_mix_profile import request
from query_profile import log, prepare

ROOT = Path(__file__).resolve().parent.parent
VARIANTS = ("streamed", "packed", "packed+batch")


def top(body: bytes) -> list[Any]:
    result = orjson.loads(body).get("result", {})
    return [
        [r["canonical_id"], r["rank_score"], r["capability_match_score"]]
        for r in result.get("results", [])
    ] + [result.get("total_matches")]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--agents", type=int, default=10000)
    ap.add_argument("--passes", type=int, default=6)
    ap.add_argument("--group", type=int, default=16)
    ap.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "ans-bench")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "scan_paths.json")
    args = ap.parse_args(argv)

    from ans.app import AnsApp
    from ans.config import load
    from ans.gate import Credentials
    from ans.index import layout
    from ans.index.capability import CapabilityIndex
    from ans.wiring import build_service

    synth, _ = synth_module()
    catalog, data, config = prepare(args.agents, args.cache)
    rows = [json.loads(x) for x in load_params(catalog, 1, synth).read_text().splitlines() if x]
    jwks = catalog / "governance.jwks.json"
    built = build_service(load(config, data_dir=data, governance_jwks=(jwks,)))
    app = AnsApp(built.service, built.gate)
    creds = Credentials(client_address="127.0.0.1")
    requests = [request(i, p) for i, p in enumerate(rows)]
    prefetch = CapabilityIndex.prefetch
    scans = built.service.discovery.scans
    log(f"N={args.agents}: {len(requests)} load queries, gathers of {args.group}")

    def use(variant: str) -> None:
        layout.force_layout("streamed" if variant == "streamed" else "packed")
        CapabilityIndex.prefetch = (  # type: ignore[method-assign]
            prefetch if variant.endswith("+batch") else (lambda self, intents: 0)
        )

    async def one_pass() -> tuple[float, list[Any]]:
        answers: list[Any] = []
        t0 = time.thread_time_ns()
        for k in range(0, len(requests), args.group):
            group = requests[k : k + args.group]
            done = await asyncio.gather(
                *(app.answer("DISCOVER", h, b, creds) for h, b in group)
            )
            answers += [top(a.body) for a in done]
        return (time.thread_time_ns() - t0) / len(requests) / 1000.0, answers

    cpu: dict[str, list[float]] = {v: [] for v in VARIANTS}
    batched: dict[str, int] = {"batches": 0, "discovers": 0}
    reference: list[Any] | None = None
    differing: dict[str, int] = {}
    try:
        for variant in VARIANTS:
            use(variant)
            asyncio.run(one_pass())  # warm-up: query vectors, caches, the packed copy
        for i in range(args.passes):
            order = VARIANTS if i % 2 == 0 else tuple(reversed(VARIANTS))
            for variant in order:
                use(variant)
                before = scans.batches, scans.batched
                us, answers = asyncio.run(one_pass())
                cpu[variant].append(round(us, 1))
                if variant.endswith("+batch"):
                    batched["batches"] += scans.batches - before[0]
                    batched["discovers"] += scans.batched - before[1]
                if reference is None:
                    reference = answers
                elif answers != reference:
                    differing[variant] = differing.get(variant, 0) + sum(
                        a != b for a, b in zip(answers, reference, strict=True)
                    )
    finally:
        CapabilityIndex.prefetch = prefetch  # type: ignore[method-assign]
        layout.force_layout(None)
        if built.lock is not None:
            built.lock.release()
        built.service.store.close()

    medians = {v: statistics.median(cpu[v]) for v in VARIANTS}
    report = {
        "command": "bench/scan_paths.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "agents": args.agents,
        "group": args.group,
        "passes": args.passes,
        "cpu_us_per_discover": cpu,
        "median_us": medians,
        "batched": batched,
        "answers_differing": differing,
        "numkong_capabilities": sorted(
            k for k, v in __import__("numkong").get_capabilities().items() if v
        ),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"{args.agents} agents, gathers of {args.group}, {args.passes} alternated passes:")
    for v in VARIANTS:
        print(f"  {v:<13} {medians[v]:>8,.0f} us a DISCOVER (median; {cpu[v]})")
    print(f"  batched: {batched['discovers']} DISCOVERs in {batched['batches']} scans")
    if differing:
        print(f"ANSWERS DIFFER: {differing}")
        return 1
    print("  answers identical in every pass")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
