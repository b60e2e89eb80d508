"""What the HTTP path of ``ans serve`` adds per request outside AnsApp.answer
(issue 26, item 1a): the pieces ANS itself runs there, each measured alone.

    OPENBLAS_NUM_THREADS=1 .venv/bin/python bench/http_path_cost.py [--agents 10000] \\
        [--rounds 3] [--duration 6]

1. **Request log and metrics**, in process (thread CPU, ``--lines`` calls):
   :meth:`ans.request_log.RequestLog.observe` with structlog configured as
   ``ans serve`` configures it (console renderer; stderr to /dev/null) and
   every line admitted; the same with the request log off (metrics only).
2. **The HTTP/2 defences and the drain** (``ans.drain.install``, which
   patches hypercorn as ``ans serve`` does), over HTTP/2 at c=1: the floor
   (bench/floor_app.py, a fixed real ANS answer) with and without them,
   alternated ``--rounds`` times, the server process's CPU per request from
   /proc.

The catalog and data dir are bench/query_profile.py's (``--cache``). Writes
bench/results/http_path_cost.json and prints the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import query_profile as qp
from load import discover_once, floor_process, stop_proc, wait_healthy

from tools.launcher import start_server, stop_server

ROOT = Path(__file__).resolve().parent.parent
FLOOR = ROOT / "bench" / "floor_app.py"


def observe_cost(lines: int) -> dict[str, float]:
    """µs of thread CPU per RequestLog.observe (log on, every line; log off)."""
    from ans.metrics import Metrics
    from ans.request_log import RequestLog, RequestLogSettings
    from ans.server import configure_logging

    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
        configure_logging("info", "console")
        facts = {"method": "DISCOVER", "task_id": "t-1", "results": 10,
                 "agent_id": "agtp://bench.example/agents/profile"}
        out = {}
        for name, settings in (("log_and_metrics_us", RequestLogSettings(per_second=1e6)),
                               ("metrics_only_us", RequestLogSettings(enabled=False))):
            rl = RequestLog(settings, Metrics())
            t0 = time.thread_time()
            for _ in range(lines):
                rl.observe("agtp", "DISCOVER", 200, 0.004, "127.0.0.1", facts)
            out[name] = round((time.thread_time() - t0) / lines * 1e6, 1)
        return out
    finally:
        os.dup2(saved, 2)
        os.close(devnull)
        os.close(saved)


def start_floor(body: Path, config: Path, defences: bool) -> tuple[subprocess.Popen[str], str]:
    """bench/floor_app.py, with ans.drain installed first when ``defences``."""
    code = (
        ("from ans import drain; drain.install()\n" if defences else "")
        + "import runpy, sys\n"
        + f"sys.argv = [{str(FLOOR)!r}, '--body', {str(body)!r}, '--config', {str(config)!r}]\n"
        + f"runpy.run_path({str(FLOOR)!r}, run_name='__main__')\n"
    )
    return floor_process([sys.executable, "-c", code])


def defences_cost(n: int, cache: Path, rounds: int, duration: float) -> dict[str, Any]:
    catalog, data, config = qp.prepare(n, cache)
    jwks = catalog / "governance.jwks.json"
    _, queries = qp.intents(catalog, 500)
    tmp = Path(tempfile.mkdtemp(prefix="ans-http-path-"))
    params = tmp / "params.jsonl"
    params.write_text("".join(json.dumps(qp.params_of(q)) + "\n" for q in queries))
    srv = start_server(data, "--governance-jwks", str(jwks), "--config", str(config))
    try:
        wait_healthy(srv.url)
        status, body = discover_once(srv.url, qp.params_of(queries[0]))
    finally:
        stop_server(srv)
    if status != 200:
        raise RuntimeError(f"capture DISCOVER answered {status}")
    (tmp / "body.json").write_bytes(body)
    plain, plain_url = start_floor(tmp / "body.json", config, defences=False)
    guarded, guarded_url = start_floor(tmp / "body.json", config, defences=True)
    runs: dict[str, list[float]] = {"floor_us": [], "floor_with_defences_us": []}
    try:
        for _ in range(rounds):
            for name, proc, url in (("floor_us", plain, plain_url),
                                    ("floor_with_defences_us", guarded, guarded_url)):
                r = qp.cpu_per_request(proc.pid, url, params, duration)
                if r["cpu_us_per_request"] is not None:
                    runs[name].append(r["cpu_us_per_request"])
    finally:
        stop_proc(plain)
        stop_proc(guarded)
    out: dict[str, Any] = {k: v for k, v in runs.items()}
    for k, v in runs.items():
        out[k.replace("_us", "_median_us")] = statistics.median(v) if v else None
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--agents", type=int, default=10000)
    ap.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "ans-bench")
    ap.add_argument("--lines", type=int, default=5000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=float, default=6.0)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "http_path_cost.json")
    args = ap.parse_args(argv)
    report: dict[str, Any] = {"observe": observe_cost(args.lines)}
    report["defences"] = defences_cost(args.agents, args.cache, args.rounds, args.duration)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
