"""Where a served DISCOVER's CPU goes, by component, against the floor (issue 26).

    OPENBLAS_NUM_THREADS=1 .venv/bin/python bench/served_profile.py [--agents 10000] \\
        [--duration 12] [--rate 500] [--cache /tmp/ans-bench-scale]

``bench/query_profile.py`` times the stages of a DISCOVER in process; this
script looks at the served process. ``ans serve --workers 1`` on the
profile's data dir (``--cache``, as query_profile prepares it) is driven at
c=16 by bench/h2client.py with the load's mix (bench/load.py's
``queries-load-2000.jsonl``: 2,000 parameter objects, ~1,900 distinct
intents, drawn at random per request) while py-spy samples it
(``py-spy record --nonblocking``, ``--rate`` Hz, raw collapsed stacks); then
the floor (bench/floor_app.py answering a real ANS answer, one process) the
same way. Each sample is charged to the component of its innermost frame
that belongs to a known one (the index, BM25, the relevance gate, the
registry, the discovery core, parsing and JCS, signing, the app's request
path, the HTTP/2 defences, hypercorn, h2, hpack, asyncio), numpy and C
calls to their caller; the share of samples times the process's CPU per
request (from /proc) gives microseconds per request by component.

py-spy comes from PyPI (the ``dev`` extra); without it the script says so
and exits 2. Writes bench/results/served_profile-AGENTS.json and prints the table.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import query_profile as qp  # bench/ is on sys.path when run as a script
from load import (
    discover_once,
    load_params,
    run_client,
    start_floor,
    stop_proc,
    synth_module,
    wait_healthy,
)

from tools.launcher import cpu_ms, start_server, stop_server

ROOT = Path(__file__).resolve().parent.parent

# (component, a substring of py-spy's "function (file:line)" frame), innermost match wins
COMPONENTS: tuple[tuple[str, str], ...] = (
    ("index: vectors, candidates, fusion", "(ans/index/"),
    ("index: vectors, candidates, fusion", "(ans/ann.py"),
    ("index: vectors, candidates, fusion", "(ans/examples_index.py"),
    ("BM25", "(ans/lexical.py"),
    ("BM25", "(ans/postings.py"),
    ("query text: words, tags, parts", "(ans/text.py"),
    ("relevance gate", "(ans/relevance.py"),
    ("registry: gates, ranking", "(ans/registry.py"),
    ("registry: gates, ranking", "(ans/profile_columns.py"),
    ("registry: gates, ranking", "(ans/ranking.py"),
    ("discovery core: items, result fields", "(ans/core/"),
    ("discovery core: items, result fields", "(ans/result_fields.py"),
    ("discovery core: items, result fields", "(ans/store.py"),
    ("parsing, JCS", "(protocol/"),
    ("signing (ES256)", "(governance/signing.py"),
    ("signing (ES256)", "(governance/keys.py"),
    ("signing (ES256)", "(joserfc/"),
    ("gates, limits", "(governance/"),
    ("gates, limits", "(ans/gate.py"),
    ("HTTP/2 defences, drain", "(ans/http2_defences/"),
    ("HTTP/2 defences, drain", "(ans/drain.py"),
    ("ANS request path: app, request log, metrics", "(ans/"),
    ("hpack", "(hpack/"),
    ("h2", "(h2/"),
    ("hypercorn", "(hypercorn/"),
    ("asyncio", "(asyncio/"),
)
HTTP_STACK = {
    "hpack",
    "h2",
    "hypercorn",
    "asyncio",
    "HTTP/2 defences, drain",
    "ANS request path: app, request log, metrics",
    "gates, limits",
}


def log(msg: str) -> None:
    print(f"[served] {msg}", file=sys.stderr, flush=True)


def component(stack: str) -> str:
    """The component of a collapsed stack's innermost known frame."""
    for frame in reversed(stack.split(";")):
        for name, mark in COMPONENTS:
            if mark in frame:
                return name
    return "other (interpreter, idle)"


def shares(raw: Path) -> tuple[Counter[str], int]:
    """Samples per component in a py-spy raw (collapsed) file, and their total."""
    counts: Counter[str] = Counter()
    total = 0
    for line in raw.read_text(encoding="utf-8", errors="replace").splitlines():
        stack, _, n = line.rpartition(" ")
        if not n.isdigit():
            continue
        counts[component(stack)] += int(n)
        total += int(n)
    return counts, total


def sampled(
    pid: int, url: str, params: Path, args: argparse.Namespace, out: Path
) -> dict[str, Any]:
    """Load ``url`` at c=16 for ``--duration`` s (after a 2 s warm-up) while
    py-spy samples ``pid`` for that period; the process's CPU a request."""
    result: dict[str, Any] = {}

    def client() -> None:
        result.update(
            run_client(
                url, params, concurrency=16, connections=16, warmup=2.0, duration=args.duration
            )
        )

    t = threading.Thread(target=client)
    t.start()
    time.sleep(2.5)  # the warm-up
    cpu0, t0 = cpu_ms(pid), time.monotonic()
    spy = subprocess.run(
        [
            args.py_spy,
            "record",
            "-p",
            str(pid),
            "-r",
            str(args.rate),
            "-d",
            str(int(args.duration - 1)),
            "-f",
            "raw",
            "-o",
            str(out),
            "--nonblocking",
        ],
        capture_output=True,
        text=True,
        timeout=args.duration + 60,
    )
    cpu1, t1 = cpu_ms(pid), time.monotonic()
    t.join()
    if spy.returncode != 0 or not out.is_file():
        raise RuntimeError(f"py-spy failed ({spy.returncode}): {spy.stderr[-500:]}")
    rps = result.get("rps") or 0.0
    busy = ((cpu1 or 0.0) - (cpu0 or 0.0)) / 1000.0 / (t1 - t0)
    counts, total = shares(out)
    per_request = busy / rps * 1e6 if rps else None
    return {
        "rps": rps,
        "p50_ms": result.get("p50_ms"),
        "non_200": result.get("non_200"),
        "cores_busy": round(busy, 3),
        "cpu_us_per_request": None if per_request is None else round(per_request, 1),
        "samples": total,
        "components_us": {
            k: round(per_request * v / total, 1) if per_request and total else None
            for k, v in counts.most_common()
        },
    }


def table(report: dict[str, Any]) -> str:
    ans, floor = report["ans"], report["floor"]
    names = list(dict.fromkeys([*ans["components_us"], *floor["components_us"]]))
    lines = [
        f"{report['agents']:,} agents, c=16, one process each, the load's mix; "
        f"ANS {ans['rps']:,} req/s, floor {floor['rps']:,} req/s.",
        "",
        "| component, µs a request | ANS | floor |",
        "|---|---:|---:|",
    ]
    for group in (True, False):
        for k in names:
            if (k in HTTP_STACK) == group:
                a, f = ans["components_us"].get(k), floor["components_us"].get(k)
                lines.append(
                    f"| {k} | {a if a is not None else ''} | {f if f is not None else ''} |"
                )
    lines.append(f"| HTTP stack in all | {report['ans_http_us']} | {report['floor_http_us']} |")
    lines.append(
        f"| **CPU a request** | **{ans['cpu_us_per_request']}** | "
        f"**{floor['cpu_us_per_request']}** |"
    )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--agents", type=int, default=10_000)
    ap.add_argument("--duration", type=float, default=12.0)
    ap.add_argument("--rate", type=int, default=500, help="py-spy samples a second")
    ap.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "ans-bench")
    ap.add_argument("--out", type=Path, help="default bench/results/served_profile-AGENTS.json")
    ap.add_argument("--keep-samples", type=Path, help="also keep py-spy's raw files in this dir")
    args = ap.parse_args(argv)
    args.py_spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if importlib.util.find_spec("py_spy") is None and not Path(args.py_spy).is_file():
        print(
            "served_profile: py-spy is not installed (pip install py-spy, or the dev extra)",
            file=sys.stderr,
        )
        return 2
    catalog, data, config = qp.prepare(args.agents, args.cache)
    jwks = catalog / "governance.jwks.json"
    params = load_params(catalog, 1, synth_module()[0])
    work = Path(tempfile.mkdtemp(prefix="served-profile-"))
    report: dict[str, Any] = {
        "agents": args.agents,
        "duration_s": args.duration,
        "rate_hz": args.rate,
        "params": params.name,
    }
    srv = start_server(data, "--governance-jwks", str(jwks), "--config", str(config))
    try:
        wait_healthy(srv.url)
        status, body = discover_once(srv.url, json.loads(params.read_text().splitlines()[0]))
        if status != 200:
            raise RuntimeError(f"capture DISCOVER answered {status}")
        log(f"ANS: {args.duration:g} s at c=16, py-spy at {args.rate} Hz")
        report["ans"] = sampled(srv.proc.pid, srv.url, params, args, work / "ans.txt")
    finally:
        stop_server(srv)
    (work / "floor-body.json").write_bytes(body)
    floor, floor_url = start_floor(work / "floor-body.json", config)
    try:
        log("floor: the same")
        report["floor"] = sampled(floor.pid, floor_url, params, args, work / "floor.txt")
    finally:
        stop_proc(floor)
    for side in ("ans", "floor"):
        parts = report[side]["components_us"]
        report[f"{side}_http_us"] = round(sum(v for k, v in parts.items() if k in HTTP_STACK), 1)
    text = table(report)
    print(text)
    out = args.out or ROOT / "bench" / "results" / f"served_profile-{args.agents}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n")
    if args.keep_samples is not None:
        args.keep_samples.mkdir(parents=True, exist_ok=True)
        for side in ("ans", "floor"):
            shutil.copy(work / f"{side}.txt", args.keep_samples / f"{side}-{args.agents}.txt")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
