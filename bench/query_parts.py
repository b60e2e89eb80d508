"""Parts of a DISCOVER measured alone on the load's queries (issue 26, item 1).

    OPENBLAS_NUM_THREADS=1 .venv/bin/python bench/query_parts.py --agents 10000,100000 \\
        [--rounds 5] [--draws 3000] [--cache /tmp/ans-bench]

bench/load_mix_profile.py times whole DISCOVERs; a change worth a few percent
drowns there in this machine kind's drift. This script answers the 2,000
queries bench/load.py sends through the in-process service path
(``AnsApp.answer``, the cached data dirs of bench/query_profile.py), then
measures, alternated in the same process:

1. **The relevance gate** (``QueryScores._gated``) on every gated query of the
   load, replayed from the captured scores: with its float32 estimate of who
   can reach the threshold (``relevance.reachable``, from ``REACH_MIN``
   candidates) and without it (every candidate past the raw floor calibrated).
   The matches and their scores are compared bit for bit each round; the rows
   calibrated either way are counted.
2. **The decoded tier of the result-fields cache** (``fields_cache``): the
   share of result fields found decoded, as bytes or read from the store, and
   the thread CPU of a DISCOVER (``--draws`` queries drawn at random from the
   load's) with the tier at 1,024 and at 8,192 entries.
3. **The facet rows kept in memory** (``facet_file``): for the load's
   ``capability_domains`` queries, the share of candidates' rows found in
   memory with 4, 8 and 16 MB kept.

Writes bench/results/query_parts.json and prints the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np
from load import load_params, synth_module
from load_mix_profile import kind_of, request
from query_profile import log, prepare

ROOT = Path(__file__).resolve().parent.parent


def service(data: Path, config: Path, jwks: Path) -> Any:
    from ans.config import load
    from ans.wiring import build_service

    return build_service(load(config, data_dir=data, governance_jwks=(jwks,)))


def gate_cost(app: Any, creds: Any, reqs: list[Any], rounds: int) -> dict[str, Any]:
    from ans import relevance
    from ans.index import scoring

    captured: list[tuple[Any, Any]] = []
    real_gated = scoring.QueryScores._gated
    real_reach = relevance.RelevanceGate.reachable

    def capture(self: Any, gate: Any) -> Any:
        captured.append((self, gate))
        return real_gated(self, gate)

    scoring.QueryScores._gated = capture  # type: ignore[method-assign]
    try:
        asyncio.run(answer_all(app, creds, reqs))
    finally:
        scoring.QueryScores._gated = real_gated  # type: ignore[method-assign]

    def run(estimate: bool) -> tuple[float, list[Any]]:
        relevance.RelevanceGate.reachable = (  # type: ignore[method-assign]
            real_reach if estimate else (lambda *a, **k: None)
        )
        out = []
        t = time.thread_time_ns()
        for scores, gate in captured:
            scores._cms = None
            keep, cms, _ = real_gated(scores, gate)
            out.append((keep, cms))
        return (time.thread_time_ns() - t) / len(captured) / 1000, out

    times: dict[str, list[float]] = {"with_estimate": [], "without": []}
    same = True
    try:
        for _ in range(rounds):
            without, a = run(False)
            with_, b = run(True)
            times["without"].append(round(without, 1))
            times["with_estimate"].append(round(with_, 1))
            same = same and all(
                np.array_equal(ka, kb) and ca[ka].tobytes() == cb[kb].tobytes()
                for (ka, ca), (kb, cb) in zip(a, b, strict=True)
            )
    finally:
        relevance.RelevanceGate.reachable = real_reach  # type: ignore[method-assign]
    calibrated = {"without": 0, "with_estimate": 0}
    for scores, gate in captured:
        raw = np.clip(scores.final, 0.0, 1.0).astype(np.float64)
        floor = scoring.at_least(raw, gate.min_capability_match)
        calibrated["without"] += int(floor.sum())
        best = scores.reference
        if best is None:
            best = relevance.whole_maxima(raw, scores.whole)
        reach = (
            gate.reachable(raw, scores.whole, scores.parts, best)
            if len(raw) >= scoring.REACH_MIN
            else None
        )
        calibrated["with_estimate"] += int((floor if reach is None else floor & reach).sum())
    return {
        "gated_queries": len(captured),
        "us_per_gate": times,
        "median_us": {k: statistics.median(v) for k, v in times.items()},
        "rows_calibrated": calibrated,
        "same_matches_bit_for_bit": same,
    }


async def answer_all(app: Any, creds: Any, reqs: list[Any]) -> float:
    t = time.thread_time_ns()
    for _, headers, body in reqs:
        answer = await app.answer("DISCOVER", headers, body, creds)
        if answer.status != 200:
            raise RuntimeError(f"a query answered {answer.status}: {body[:200]!r}")
    return (time.thread_time_ns() - t) / len(reqs) / 1000


def fields_tier(app: Any, creds: Any, reqs: list[Any], built: Any, rounds: int,
                draws: int) -> dict[str, Any]:
    cache = built.service.index.fields_cache
    rng = random.Random(2)
    drawn = [rng.choice(reqs) for _ in range(draws)]
    counts = [0, 0, 0]
    real_lookup = cache.lookup

    def counting(ids: list[str]) -> Any:
        found, held, missing = real_lookup(ids)
        counts[0] += len(found)
        counts[1] += len(held)
        counts[2] += len(missing)
        return found, held, missing

    out: dict[str, Any] = {"draws": draws, "us_per_discover": {}, "found": {}}
    sizes = (1024, 8192)
    for size in sizes:
        out["us_per_discover"][str(size)] = []
    for r in range(rounds):
        for size in sizes:
            cache.dict_entries = size
            cache.keep({}, {}, cache.generation)  # trimmed to this size now
            asyncio.run(answer_all(app, creds, drawn))  # settle into this size
            if r == 0:
                counts[:] = [0, 0, 0]
                cache.lookup = counting
            us = asyncio.run(answer_all(app, creds, drawn))
            if r == 0:
                cache.lookup = real_lookup
                total = max(1, sum(counts))
                out["found"][str(size)] = {
                    "decoded": round(counts[0] / total, 3),
                    "as_bytes": round(counts[1] / total, 3),
                    "read": round(counts[2] / total, 3),
                }
            out["us_per_discover"][str(size)].append(round(us, 1))
    out["median_us"] = {k: statistics.median(v) for k, v in out["us_per_discover"].items()}
    return out


def facet_rows(app: Any, creds: Any, reqs: list[Any], draws: int) -> dict[str, Any]:
    from ans.index import facet_file

    domains = [r for r in reqs if r[0] == "domains"]
    if not domains:
        return {}
    rng = random.Random(3)
    drawn = [rng.choice(domains) for _ in range(draws)]
    real_get = facet_file.FacetFile.get
    counts = [0, 0]
    out: dict[str, Any] = {"draws": draws}
    for mb in (4, 8, 16):

        def get(self: Any, wanted: Any, agents: int = 0, mb: int = mb) -> Any:
            self._rows_max = (mb << 20) // self._row_bytes
            digests = {d for d in wanted.values() if d}
            counts[0] += sum(1 for d in digests if d in self._rows)
            counts[1] += len(digests)
            return real_get(self, wanted, agents)

        facet_file.FacetFile.get = get  # type: ignore[method-assign]
        try:
            asyncio.run(answer_all(app, creds, drawn))
            counts[:] = [0, 0]
            asyncio.run(answer_all(app, creds, drawn))
        finally:
            facet_file.FacetFile.get = real_get  # type: ignore[method-assign]
        out[f"{mb}_mb_found_in_memory"] = round(counts[0] / max(1, counts[1]), 3)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--agents", default="10000,100000")
    ap.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "ans-bench")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--draws", type=int, default=3000)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "query_parts.json")
    args = ap.parse_args(argv)
    from ans.app import AnsApp
    from ans.gate import Credentials

    synth, _ = synth_module()
    report: dict[str, Any] = {"when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                              "sizes": {}}
    for n in [int(x) for x in args.agents.split(",") if x]:
        catalog, data, config = prepare(n, args.cache)
        rows = [json.loads(x) for x in load_params(catalog, 1, synth).read_text().splitlines()
                if x]
        built = service(data, config, catalog / "governance.jwks.json")
        try:
            app = AnsApp(built.service, built.gate)
            creds = Credentials(client_address="127.0.0.1")
            reqs = [(kind_of(p), *request(i, p)) for i, p in enumerate(rows)]
            asyncio.run(answer_all(app, creds, reqs))  # warm-up
            log(f"N={n}: the relevance gate, {args.rounds} rounds")
            size: dict[str, Any] = {"agents": n, "queries": len(reqs)}
            size["relevance_gate"] = gate_cost(app, creds, reqs, args.rounds)
            log(f"N={n}: the result-fields cache's decoded tier")
            size["fields_decoded_tier"] = fields_tier(app, creds, reqs, built, args.rounds,
                                                      args.draws)
            log(f"N={n}: facet rows in memory")
            size["facet_rows"] = facet_rows(app, creds, reqs, args.draws)
        finally:
            if built.lock is not None:
                built.lock.release()
            built.service.store.close()
        report["sizes"][str(n)] = size
        print(json.dumps(size, indent=1))
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
