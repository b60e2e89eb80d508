"""Throughput from 1 to 2 workers, in alternated rounds (issue 26: "throughput
from 1 to 2 workers >= 1.8x").

    OPENBLAS_NUM_THREADS=1 .venv/bin/python bench/workers_scaling.py \\
        [--agents 10000] [--rounds 5] [--duration 10] [--workers 2] [--cache /tmp/ans-bench-scale]

One run of bench/load.py measures ``--workers 1`` and ``--workers N`` minutes
apart, and on this machine kind the speed of the machine drifts by 20% within
an hour: a single pair cannot tell 1.75x from 2.0x. Here every round measures
both, back to back, in alternating order (1 then N, then N then 1), each
against a fresh ``ans serve`` on the same imported catalog (bench/load.py's
import, reused), with the load's varied intents (drawn at random per request,
c=16, 16 connections). The floor (bench/floor_app.py with 1 and N processes,
answering a real ANS answer) is measured the same way: what the machine
allows when the load client shares its cores.

Prints each round and the median ratio; writes bench/results/workers_scaling.json.
Timing never fails the script; errors (non-200 answers, a crashed server) do.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

from load import (  # bench/ is on sys.path when run as a script
    client_problems,
    discover_once,
    ensure_catalog,
    import_catalog,
    load_params,
    log,
    machine,
    run_client,
    start_ans,
    start_floor,
    stop_proc,
    synth_module,
    tree_cpu_ms,
)

from tools.launcher import stop_server

ROOT = Path(__file__).resolve().parent.parent
CONCURRENCY = 16


def drive(pid: int, url: str, params: Path, args: argparse.Namespace,
          concurrency: int = CONCURRENCY) -> dict[str, Any]:
    """One timed run (c=16 unless told) and the server tree's cores busy over it."""
    cpu0, t0 = tree_cpu_ms(pid), time.monotonic()
    r = run_client(url, params, concurrency=concurrency, connections=concurrency,
                   warmup=args.warmup, duration=args.duration)
    r["server_cores_busy"] = round((tree_cpu_ms(pid) - cpu0) / 1000.0 / (time.monotonic() - t0), 3)
    return r


def ans_run(data: Path, jwks: Path, config: Path, params: Path, workers: int,
            args: argparse.Namespace, problems: list[str]) -> tuple[dict[str, Any], bytes]:
    srv, _, _ = start_ans(data, jwks, config, workers)
    try:
        first = json.loads(params.read_text().splitlines()[0])
        status, body = discover_once(srv.url, first)
        if status != 200:
            raise RuntimeError(f"DISCOVER answered {status}: {body[:300]!r}")
        r = drive(srv.proc.pid, srv.url, params, args)
        problems += client_problems(f"ans workers={workers}", r)
        if srv.proc.poll() is not None:
            problems.append(f"ans workers={workers} exited ({srv.proc.returncode})")
    finally:
        stop_server(srv)
    log(f"ans   workers={workers}: {r['rps']} req/s ({r['server_cores_busy']} cores busy, "
        f"client {r.get('client_cores_busy')})")
    return r, body


def floor_run(body: Path, config: Path, params: Path, workers: int,
              args: argparse.Namespace, problems: list[str]) -> dict[str, Any]:
    proc, url = start_floor(body, config, workers)
    try:
        r = drive(proc.pid, url, params, args)
        problems += client_problems(f"floor workers={workers}", r)
    finally:
        stop_proc(proc)
    log(f"floor workers={workers}: {r['rps']} req/s ({r['server_cores_busy']} cores busy, "
        f"client {r.get('client_cores_busy')})")
    return r


def figures(r: dict[str, Any]) -> dict[str, Any]:
    """req/s, the server's cores busy and the client's, and server CPU per request."""
    rps = float(r.get("rps") or 0.0)
    busy = r.get("server_cores_busy")
    return {"rps": rps, "server_cores_busy": busy, "client_cores_busy": r.get("client_cores_busy"),
            "server_cpu_ms_per_request": round(busy / rps * 1000.0, 3) if rps and busy else None,
            "p50_ms": r.get("p50_ms")}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--agents", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--duration", type=float, default=10.0, help="timed s per run")
    ap.add_argument("--warmup", type=float, default=2.0, help="warm-up s per run")
    ap.add_argument("--workers", type=int, default=2, help="N of the 1 -> N comparison")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--cache", type=Path,
                    default=Path(tempfile.gettempdir()) / "ans-bench-scale")
    ap.add_argument("--out", type=Path, default=ROOT / "bench/results/workers_scaling.json")
    args = ap.parse_args(argv)
    synth, source = synth_module()
    catalog, _ = ensure_catalog(args.agents, args.seed, args.cache, source)
    jwks = catalog / "governance.jwks.json"
    params = load_params(catalog, args.seed, synth)
    run = args.cache / f"run-{args.agents}"
    imported, problems = import_catalog(run, catalog, args.agents, reuse_import=True)
    if problems:
        raise SystemExit("; ".join(problems))
    data, config = run / "data", run / "ans.toml"
    body_file = run / "scaling-floor-body.json"
    rounds: list[dict[str, Any]] = []
    for i in range(args.rounds):
        order = (1, args.workers) if i % 2 == 0 else (args.workers, 1)
        got: dict[str, Any] = {"order": list(order)}
        for w in order:
            r, body = ans_run(data, jwks, config, params, w, args, problems)
            got[f"ans_w{w}"] = figures(r)
            body_file.write_bytes(body)
        for w in order:
            got[f"floor_w{w}"] = figures(floor_run(body_file, config, params, w, args, problems))
        n = args.workers
        for who in ("ans", "floor"):
            one, many = got[f"{who}_w1"]["rps"], got[f"{who}_w{n}"]["rps"]
            got[f"{who}_ratio"] = round(many / one, 3) if one else None
        log(f"round {i + 1}: ans 1 -> {n} workers {got['ans_ratio']}x, "
            f"floor {got['floor_ratio']}x")
        rounds.append(got)

    def median(key: str) -> float | None:
        vals = [r[key] for r in rounds if r.get(key) is not None]
        return round(statistics.median(vals), 3) if vals else None

    result = {
        "benchmark": "workers scaling (bench/workers_scaling.py)",
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": "bench/workers_scaling.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "agents": args.agents, "workers": args.workers, "concurrency": CONCURRENCY,
        "duration_s": args.duration, "warmup_s": args.warmup, "import": imported,
        "machine": machine(), "rounds": rounds,
        "median_ans_ratio": median("ans_ratio"),
        "median_floor_ratio": median("floor_ratio"),
        "rounds_at_or_above_1_8": sum(1 for r in rounds if (r["ans_ratio"] or 0) >= 1.8),
        "problems": problems,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"1 -> {args.workers} workers at {args.agents} agents, c={CONCURRENCY}, "
          f"{args.rounds} alternated rounds:")
    for i, r in enumerate(rounds, 1):
        a1, an = r["ans_w1"], r[f"ans_w{args.workers}"]
        f1, fn = r["floor_w1"], r[f"floor_w{args.workers}"]
        print(f"  round {i}: ans {a1['rps']:.0f} -> {an['rps']:.0f} req/s ({r['ans_ratio']}x; "
              f"{a1['server_cpu_ms_per_request']} -> {an['server_cpu_ms_per_request']} ms CPU a "
              f"request); floor {f1['rps']:.0f} -> {fn['rps']:.0f} ({r['floor_ratio']}x)")
    print(f"median: ans {result['median_ans_ratio']}x (target >= 1.8x; "
          f"{result['rounds_at_or_above_1_8']} of {args.rounds} rounds at or above), "
          f"floor {result['median_floor_ratio']}x")
    if problems:
        print("problems:", *problems, sep="\n  ")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
