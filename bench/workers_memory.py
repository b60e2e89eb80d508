"""Memory of ``ans serve --workers N``: RSS and PSS per process, at start, after
a DISCOVER load, and after an ACTIVATE every worker has applied.

    .venv/bin/python bench/workers_memory.py --data DATA_DIR --catalog CATALOG_DIR
        [--workers 1,2] [--out bench/results/workers-memory.json]

``DATA_DIR`` is an imported registry (``ans import``; the catalog's
governance JWKS is trusted). PSS (proportional set size, from
``/proc/PID/smaps_rollup``) splits each shared page between the processes
that map it, so the PSS summed over the supervisor and its workers is the
memory the server really holds; RSS counts shared pages once per process.
The workers share the supervisor's index pages copy-on-write; what each
worker writes (its heap, the index arrays it grows) is its own.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import httpx
import orjson
from load import process_tree_memory  # bench/ is on sys.path when run as a script

from tools import synth
from tools.launcher import start_server, stop_server

ROOT = Path(__file__).resolve().parent.parent
CONFIG = "[rate_limit]\nenabled = false\n\n[freshness]\nenabled = false\n"
QUERY = {
    "agent-id": "agtp://agtp.bench.example/agents/orchestrator",
    "principal-id": "usr-bench",
    "authority-scope": "discovery:query",
    "content-type": "application/agtp+json",
}
REGISTER = {**QUERY, "authority-scope": "discovery:register"}


def log(msg: str) -> None:
    print(f"[memory] {msg}", file=sys.stderr, flush=True)


def body(method: str, params: dict[str, Any]) -> bytes:
    return orjson.dumps({"method": method, "task_id": "mem", "parameters": params})


async def load(url: str, queries: list[dict[str, Any]], n: int, conns: int = 8) -> None:
    clients = [
        httpx.AsyncClient(base_url=url, http1=False, http2=True, timeout=60) for _ in range(conns)
    ]

    async def run(c: httpx.AsyncClient, k: int) -> None:
        for i in range(k, n, conns):
            q = body("DISCOVER", queries[i % len(queries)])
            r = await c.request("DISCOVER", "/", headers=QUERY, content=q)
            assert r.status_code == 200, r.text

    try:
        await asyncio.gather(*(run(c, k) for k, c in enumerate(clients)))
    finally:
        for c in clients:
            await c.aclose()


async def activate_everywhere(url: str, params: dict[str, Any], intent: str) -> None:
    """ACTIVATE one agent, then DISCOVER it on fresh connections until every
    worker has answered with it (each applied the change)."""
    async with httpx.AsyncClient(base_url=url, http1=False, http2=True, timeout=60) as c:
        r = await c.request("ACTIVATE", "/", headers=REGISTER, content=body("ACTIVATE", params))
        assert r.status_code == 200, r.text
    cid = params["manifest"]["canonical_id"]
    seen: set[Any] = set()
    for _ in range(200):
        async with httpx.AsyncClient(base_url=url, http1=False, http2=True, timeout=60) as c:
            r = await c.request(
                "DISCOVER", "/", headers=QUERY, content=body("DISCOVER", {"intent": intent})
            )
            assert cid in {x["canonical_id"] for x in r.json()["result"]["results"]}
            seen.add((await c.get("/healthz")).json().get("worker"))
        if len(seen) >= 2 or None in seen:
            return


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--catalog", type=Path, required=True)
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--discovers", type=int, default=2000)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "workers-memory.json")
    args = ap.parse_args(argv)
    queries = [orjson.loads(x) for x in (args.catalog / "queries.jsonl").read_bytes().splitlines()]
    key = synth.load_or_create_key(args.catalog)
    config = Path(tempfile.mkdtemp()) / "ans.toml"
    config.write_text(CONFIG)
    runs = []
    for w in (int(x) for x in args.workers.split(",")):
        log(f"workers {w}: starting")
        t0 = time.perf_counter()
        srv = start_server(
            args.data,
            "--governance-jwks",
            str(args.catalog / "governance.jwks.json"),
            "--config",
            str(config),
            "--workers",
            str(w),
        )
        try:
            started = round(time.perf_counter() - t0, 2)
            agents = httpx.get(srv.url + "/healthz", timeout=30).json()["agents"]
            at_start = process_tree_memory(srv.proc.pid)
            log(f"workers {w}: {agents} agents, PSS {at_start['pss_total_mb']} MB at start")
            asyncio.run(load(srv.url, queries, args.discovers))
            after_load = process_tree_memory(srv.proc.pid)
            log(
                f"workers {w}: PSS {after_load['pss_total_mb']} MB after {args.discovers} DISCOVERs"
            )
            params, intent = synth.unique_agent(40_000_000 + int(time.time()) % 100_000, key)
            asyncio.run(activate_everywhere(srv.url, params, intent))
            after_write = process_tree_memory(srv.proc.pid)
            log(f"workers {w}: PSS {after_write['pss_total_mb']} MB after an ACTIVATE")
        finally:
            stop_server(srv)
        runs.append(
            {
                "workers": w,
                "agents": agents,
                "start_s": started,
                "at_start": at_start,
                "after_discovers": after_load,
                "after_activate": after_write,
            }
        )
    result = {
        "benchmark": "memory per worker (bench/workers_memory.py)",
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": "bench/workers_memory.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "runs": runs,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    for r in runs:
        procs = r["after_activate"]["processes"]
        print(
            f"workers {r['workers']} ({r['agents']} agents): PSS total MB start "
            f"{r['at_start']['pss_total_mb']}, after DISCOVERs "
            f"{r['after_discovers']['pss_total_mb']}"
            f", after an ACTIVATE {r['after_activate']['pss_total_mb']}; per process "
            "(RSS/PSS MB): " + ", ".join(f"{p.get('rss_mb')}/{p.get('pss_mb')}" for p in procs)
        )
    print(f"results: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
