"""Latency cost of the DISCOVER relevance gate at 10k agents, through the real HTTP/2 server.

    OPENBLAS_NUM_THREADS=1 .venv/bin/python bench/relevance_latency.py

``[discovery] relevance_gate`` selects what counts as a match (ans.relevance):
``"calibrated"`` (the default: a logistic capability_match_score over the
matcher's evidence) or ``"floor"`` (the gate before it: the raw fused score
against ``min_capability_match``). One run:

1. catalog: the 10k synthetic catalog of ``bench/load.py --quick`` (``tools.synth``,
   seed 1, cached under /tmp/ans-bench), ``ans import``-ed once into one data dir;
2. intents: distinct intents from ``tools.synth.make_queries`` (the synthetic
   vocabulary, paraphrased), each sent as ``{"intent", "limit": 10}``;
3. rounds: ``ans serve`` on that data dir with one gate, warm-up, then every
   intent once at c=1 over HTTP/2 (the bench/h2client.py connection, in this
   process), stop; then the other gate. Gates alternate A/B, B/A, A/B, ... so
   drift cancels; each round shuffles the intents (same order for both gates).

Every answer must be 200 and report the gate asked for; a sample of each
round's answers is verified (``ans.client.verify_discover_result`` against
the server's JWKS, query_digest included). Exit 1 on any such error, never on
timing. Prints a table; writes bench/results/relevance_latency.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

from h2client import Pool, RequestMaker, percentiles, scope_for  # bench/ is on sys.path
from load import ANS, SERVER_CONFIG, ensure_catalog, machine, start_ans

from ans.client import AgtpClient, verify_discover_result
from tools import synth
from tools.launcher import stop_server

ROOT = Path(__file__).resolve().parent.parent
COMMAND = "OPENBLAS_NUM_THREADS=1 .venv/bin/python bench/relevance_latency.py"
GATES = ("calibrated", "floor")
TARGET_RATIO = 1.10


def log(msg: str) -> None:
    print(f"[relevance] {msg}", file=sys.stderr, flush=True)


def distinct_intents(n: int, seed: int) -> list[str]:
    seen: dict[str, None] = {}
    for p in synth.make_queries(2 * n + 200, seed):
        if isinstance(p.get("intent"), str):
            seen.setdefault(p["intent"], None)
    if len(seen) < n:
        raise SystemExit(f"only {len(seen)} distinct intents, {n} asked")
    return list(seen)[:n]


async def measure(url: str, params: list[dict[str, Any]], warm: list[dict[str, Any]],
                  sample_every: int) -> dict[str, Any]:
    """c=1: one connection, one DISCOVER at a time; latencies of ``params`` only."""
    u = urlsplit(url)
    host, port = u.hostname or "127.0.0.1", u.port or 80
    pool = Pool(host, port, 1)
    maker = RequestMaker(f"{host}:{port}", post=False)
    lat: list[int] = []
    returned: list[int] = []
    gates: dict[str, int] = {}
    bad: list[str] = []
    samples: list[tuple[dict[str, Any], dict[str, Any]]] = []
    await pool.get(0)
    try:
        for timed, batch in ((False, warm), (True, params)):
            for k, p in enumerate(batch):
                raw = json.dumps(p, separators=(",", ":")).encode()
                headers, body = maker.make("DISCOVER", raw, scope_for("DISCOVER", p), 0)
                t0 = time.perf_counter_ns()
                status, resp = await pool.send(0, headers, body)
                t1 = time.perf_counter_ns()
                if status != 200:
                    bad.append(f"{status}: {resp[:200]!r}")
                    continue
                if not timed:
                    continue
                lat.append(t1 - t0)
                result = json.loads(resp)["result"]
                returned.append(int(result["returned"]))
                g = str(result.get("relevance", {}).get("gate"))
                gates[g] = gates.get(g, 0) + 1
                if k % sample_every == 0:
                    samples.append((result, p))
    finally:
        pool.close()
    return {"lat": lat, "returned": returned, "gates": gates, "bad": bad, "samples": samples}


def summary(lat: list[int], returned: list[int]) -> dict[str, Any]:
    pct = percentiles(lat)
    return {"n": len(lat), **pct,
            "mean_results": round(sum(returned) / len(returned), 3) if returned else None,
            "zero_result_share": round(sum(r == 0 for r in returned) / len(returned), 4)
            if returned else None}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--agents", type=int, default=10_000)
    ap.add_argument("--intents", type=int, default=1200, help="distinct timed intents per round")
    ap.add_argument("--warmup", type=int, default=60, help="warm-up DISCOVERs per server")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds per gate")
    ap.add_argument("--sample-every", type=int, default=40, help="verify every k-th answer")
    ap.add_argument("--seed", type=int, default=1, help="catalog seed (as bench/load.py)")
    ap.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "ans-bench")
    ap.add_argument("--out", type=Path, default=ROOT / "bench/results/relevance_latency.json")
    args = ap.parse_args(argv)
    args.cache.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()
    problems: list[str] = []

    catalog, _ = ensure_catalog(args.agents, args.seed, args.cache, "tools.synth")
    jwks_path = catalog / "governance.jwks.json"
    run = args.cache / f"relevance-{args.agents}"
    data = run / "data"
    if data.exists():
        shutil.rmtree(data)
    run.mkdir(parents=True, exist_ok=True)
    configs = {}
    for g in GATES:
        configs[g] = run / f"ans-{g}.toml"
        configs[g].write_text(SERVER_CONFIG + f'\n[discovery]\nrelevance_gate = "{g}"\n')
    log(f"importing {args.agents} agents into {data}")
    t0 = time.perf_counter()
    r = subprocess.run([ANS, "import", "--data-dir", str(data), "--governance-jwks",
                        str(jwks_path), str(catalog / "agents.jsonl")],
                       stdout=subprocess.PIPE, text=True)
    if r.returncode != 0:
        raise SystemExit(f"ans import failed ({r.returncode}): {r.stdout[-500:]}")
    import_s = time.perf_counter() - t0

    texts = distinct_intents(args.intents + args.warmup, seed=args.seed + 1000)
    warm = [{"intent": t, "limit": 10} for t in texts[args.intents:]]
    timed = [{"intent": t, "limit": 10} for t in texts[: args.intents]]

    per_gate: dict[str, dict[str, list[int]]] = {g: {"lat": [], "returned": []} for g in GATES}
    rounds: list[dict[str, Any]] = []
    verified = {g: 0 for g in GATES}
    for rnd in range(args.rounds):
        order = GATES if rnd % 2 == 0 else GATES[::-1]
        shuffled = timed[:]
        random.Random(f"relevance-latency:{rnd}").shuffle(shuffled)
        row: dict[str, Any] = {"round": rnd, "order": list(order)}
        for g in order:
            srv, cold, health = start_ans(data, jwks_path, configs[g])
            try:
                if health.get("agents") != args.agents:
                    problems.append(f"{g}: server reports {health.get('agents')} agents")
                with AgtpClient(srv.url, agent_id="agtp://bench.example/agents/rel",
                                principal_id="bench", scope="discovery:query") as c:
                    jwks = c.jwks()
                m = asyncio.run(measure(srv.url, shuffled, warm, args.sample_every))
                if srv.proc.poll() is not None:
                    problems.append(f"{g} round {rnd}: server exited {srv.proc.returncode}")
            finally:
                stop_server(srv)
            if m["bad"]:
                problems.append(f"{g} round {rnd}: {len(m['bad'])} non-200, e.g. {m['bad'][0]}")
            if set(m["gates"]) != {g}:
                problems.append(f"{g} round {rnd}: answers report gates {m['gates']}")
            for result, p in m["samples"]:
                try:
                    verify_discover_result(result, jwks, p)
                    verified[g] += 1
                except Exception as exc:
                    problems.append(f"{g} round {rnd}: signature: {type(exc).__name__}: {exc}")
            per_gate[g]["lat"] += m["lat"]
            per_gate[g]["returned"] += m["returned"]
            row[g] = {"cold_start_s": round(cold, 2), **summary(m["lat"], m["returned"])}
            log(f"round {rnd} {g}: p50 {row[g]['p50_ms']} ms, p99 {row[g]['p99_ms']} ms, "
                f"mean results {row[g]['mean_results']}")
        a, b = row["calibrated"]["p50_ms"], row["floor"]["p50_ms"]
        row["p50_ratio"] = round(a / b, 4) if a and b else None
        rounds.append(row)

    gates = {g: {**summary(per_gate[g]["lat"], per_gate[g]["returned"]),
                 "signatures_verified": verified[g]} for g in GATES}
    for g in GATES:
        if verified[g] == 0:
            problems.append(f"{g}: no answer was verified")
    cal, flo = gates["calibrated"]["p50_ms"], gates["floor"]["p50_ms"]
    ratio = round(cal / flo, 4) if cal and flo else None
    results = {
        "benchmark": "DISCOVER relevance gate latency (bench/relevance_latency.py)",
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": COMMAND + (" " + " ".join(argv if argv is not None else sys.argv[1:])).rstrip(),
        "machine": {**machine(), "loadavg_at_end": os.getloadavg()},
        "sizes": {"agents": args.agents, "distinct_intents": len(timed), "warmup": len(warm),
                  "rounds_per_gate": args.rounds, "limit": 10, "concurrency": 1,
                  "requests_per_gate": len(timed) * args.rounds},
        "settings": {"catalog": str(catalog), "data_dir": str(data),
                     "import_s": round(import_s, 2),
                     "server_config": SERVER_CONFIG.strip() + "\n[discovery] relevance_gate",
                     "client": "bench/h2client.py Pool, raw engine (h2c, 1 connection, in-process)",
                     "transport": "DISCOVER / over HTTP/2"},
        "gates": gates,
        "rounds": rounds,
        "p50_ratio_calibrated_over_floor": ratio,
        "target_ratio": TARGET_RATIO,
        "target_met": None if ratio is None else ratio <= TARGET_RATIO,
        "wall_s": round(time.perf_counter() - t_start, 1),
        "problems": problems,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")

    print(f"{args.agents} agents, {len(timed)} distinct intents x {args.rounds} rounds, c=1, "
          "limit 10")
    print("gate         p50 ms  p90 ms  p99 ms  mean results  verified")
    for g in GATES:
        s = gates[g]
        print(f"{g:<11} {s['p50_ms']:>7} {s['p90_ms']:>7} {s['p99_ms']:>7} "
              f"{s['mean_results']:>13} {s['signatures_verified']:>9}")
    print(f"p50 calibrated/floor: {ratio} (target <= {TARGET_RATIO}); per round: "
          f"{[r['p50_ratio'] for r in rounds]}")
    print(f"results: {args.out}")
    if problems:
        print("\nERRORS:", *problems, sep="\n  - ", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
