"""Instructions per DISCOVER, counted by valgrind's callgrind: a figure this
machine repeats however noisy it is (issue 26, item 1).

    OPENBLAS_NUM_THREADS=1 .venv/bin/python bench/instructions.py --agents 10000,100000 \\
        [--queries 40] [--label after] [--http-duration 40]   # 0: in process only

A CPU-time A/B of a change worth a few percent drowns in this machine kind's
drift: the floor's server CPU per request was 328 µs one day and 640-1,030 µs
the next, and two runs of the same code an hour apart differ by 20%. callgrind
counts the instructions executed instead; the same code and inputs give the
same count to ~0.05% whatever else the machine does (two runs of 40 queries at
10k agents: 477,903,207 and 477,913,811).

1. **In process**: bench/query_profile.py's data dir, service and intents
   (``AnsApp.answer``, ``limit`` 10). This script runs itself under callgrind
   with instrumentation off, answers every intent once (warm: caches, query
   vectors), then turns it on (``callgrind_control -i on``) for one more pass.
2. **Over HTTP/2** (``--http-duration`` > 0): ``ans serve --workers 1`` and the
   floor (bench/floor_app.py, the same answer) each under callgrind, driven at
   c=1 by bench/h2client.py; instrumentation on for the timed period only;
   instructions / requests answered.

Read the counts as a proxy, not as time: callgrind's CPU has no AVX-512, so
FAISS, numkong and numpy's float64 ``exp`` take their AVX2 paths and weigh
more here than natively, while memory stalls weigh nothing. It is the tool for
A/B pairs of Python-side changes (run it on a worktree of the parent with
PYTHONPATH, as docs/query-profile.md shows). callgrind is ~50x slower: 40
queries at 100k agents take ~3 minutes. Writes
bench/results/instructions-<label>.json and prints the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import orjson
import query_profile as qp
from load import discover_once, floor_process, run_client, stop_proc, wait_healthy

from tools.launcher import start_server, stop_server

BENCH = Path(__file__).resolve().parent
RESULTS = BENCH / "results"


def callgrind(out: Path) -> list[str]:
    return ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}"]


def instrument(pid: int, on: bool) -> None:
    subprocess.run(["callgrind_control", "-i", "on" if on else "off", str(pid)],
                   check=True, capture_output=True)


def collected(out: Path) -> int:
    """The instructions counted while instrumentation was on (``totals:``)."""
    for line in out.read_text().splitlines():
        if line.startswith("totals:"):
            return int(line.split()[1])
    raise RuntimeError(f"no totals in {out}")


def child(data: Path, config_path: Path, jwks: Path, queries: list[str]) -> None:
    """Under callgrind: one warm pass, then one counted pass of AnsApp.answer."""
    from ans.app import AnsApp
    from ans.config import load
    from ans.gate import Credentials
    from ans.wiring import build_service

    config = load(config_path, data_dir=data, governance_jwks=(jwks,))
    built = build_service(config)
    app = AnsApp(built.service, built.gate)
    creds = Credentials(client_address="127.0.0.1")
    bodies = [
        orjson.dumps({"method": "DISCOVER", "task_id": f"t-{i}", "parameters": qp.params_of(q)})
        for i, q in enumerate(queries)
    ]

    async def one_pass() -> None:
        for i, body in enumerate(bodies):
            answer = await app.answer("DISCOVER", {**qp.HEADERS, "task-id": f"t-{i}"}, body, creds)
            if answer.status != 200:
                raise RuntimeError(f"DISCOVER {queries[i]!r} answered {answer.status}")

    asyncio.run(one_pass())
    instrument(os.getpid(), True)
    asyncio.run(one_pass())
    instrument(os.getpid(), False)


def in_process(n: int, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    qp.prepare(n, args.cache)  # the catalog and data dir, imported once (not under callgrind)
    out = tmp / f"in-process-{n}.callgrind"
    cmd = [*callgrind(out), sys.executable, __file__, "--child", str(n),
           "--queries", str(args.queries), "--cache", str(args.cache)]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    total = collected(out)
    return {"queries": args.queries, "instructions": total,
            "per_query_millions": round(total / args.queries / 1e6, 3)}


def over_http(n: int, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    catalog, data, config = qp.prepare(n, args.cache)
    _, queries = qp.intents(catalog, 500)
    params = tmp / "params.jsonl"
    params.write_text("".join(json.dumps(qp.params_of(q)) + "\n" for q in queries))
    jwks = catalog / "governance.jwks.json"
    report: dict[str, Any] = {}

    def counted(pid: int, url: str) -> tuple[int, dict[str, Any]]:
        run_client(url, params, concurrency=1, warmup=0, duration=args.http_duration / 4)
        instrument(pid, True)
        r = run_client(url, params, concurrency=1, warmup=0, duration=args.http_duration)
        instrument(pid, False)
        return int(r["n"]), r.get("non_200") or {}

    out = tmp / f"ans-{n}.callgrind"
    srv = start_server(data, "--governance-jwks", str(jwks), "--config", str(config),
                       wrapper=callgrind(out))
    try:
        wait_healthy(srv.url, timeout=900)
        _, body = discover_once(srv.url, qp.params_of(queries[0]))
        requests, errors = counted(srv.proc.pid, srv.url)
    finally:
        stop_server(srv)
    report["ans"] = {"requests": requests, "non_200": errors,
                     "per_request_millions": round(collected(out) / requests / 1e6, 3)}
    floor_body = tmp / "floor-body.json"
    floor_body.write_bytes(body)
    out = tmp / f"floor-{n}.callgrind"
    floor, url = floor_process([*callgrind(out), sys.executable, str(BENCH / "floor_app.py"),
                                "--body", str(floor_body), "--config", str(config)])
    try:
        requests, errors = counted(floor.pid, url)
    finally:
        stop_proc(floor)
    report["floor"] = {"requests": requests, "non_200": errors,
                       "per_request_millions": round(collected(out) / requests / 1e6, 3)}
    return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--agents", default="10000")
    ap.add_argument("--queries", type=int, default=40)
    ap.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "ans-bench")
    ap.add_argument("--label", default="run")
    ap.add_argument("--http-duration", type=float, default=0.0, help="0: in process only")
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child is not None:  # under callgrind, started by in_process()
        catalog, data, config = qp.prepare(args.child, args.cache)
        _, queries = qp.intents(catalog, args.queries)
        child(data, config, catalog / "governance.jwks.json", queries)
        return 0
    sizes: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="ans-instr-") as tmp_name:
        tmp = Path(tmp_name)
        for n in (int(x) for x in args.agents.split(",")):
            t0 = time.perf_counter()
            row: dict[str, Any] = {"in_process": in_process(n, args, tmp)}
            if args.http_duration > 0:
                row.update(over_http(n, args, tmp))
            row["seconds"] = round(time.perf_counter() - t0, 1)
            sizes[str(n)] = row
            print(f"N={n}: {json.dumps(row)}", flush=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=BENCH.parent,
                            capture_output=True, text=True).stdout.strip()
    report = {"label": args.label, "commit": commit, "sizes": sizes,
              "command": "bench/instructions.py " + " ".join(argv or sys.argv[1:])}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"instructions-{args.label}.json").write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
