"""What ``[index] embedding_dims = 128`` saves a served DISCOVER, in alternated rounds.

    OPENBLAS_NUM_THREADS=1 .venv/bin/python bench/embedding_width.py \\
        [--agents 10000] [--rounds 4] [--concurrency 1] [--workers 1] [--duration 8] \\
        [--cache /tmp/ans-bench-scale]

The same synthetic catalog (bench/load.py's, reused from ``--cache``) is
imported twice: at the default width (``run-N``, bench/load.py's own import)
and at 128 dims (``run-N-d128``, ``ans import`` with
``ANS_INDEX__EMBEDDING_DIMS=128``). Every round serves each in turn, in
alternating order (256 then 128, then 128 then 256), a fresh ``ans serve``
each time, driven by bench/h2client.py with the load's varied intents (2,000
parameter objects drawn at random per request) at ``--concurrency``; the
server's CPU per request comes from /proc. Each server's ``/healthz`` must
report the width it was started with. Quality is not measured here: that is
``bench/metatool_eval.py --embedding-dims 128`` (docs/scale.md).

Prints each round and the medians; writes
bench/results/embedding_width-N-wW-cC.json. Timing never fails the script;
errors (non-200 answers, a crashed server, a wrong width) do.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
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
    start_ans,
    synth_module,
)
from workers_scaling import drive, figures

from tools.launcher import stop_server

ROOT = Path(__file__).resolve().parent.parent
ENV = "ANS_INDEX__EMBEDDING_DIMS"
WIDTHS = (256, 128)


def set_width(dims: int) -> None:
    """The width every ``ans`` command started from here on uses (the
    environment overrides the run's ans.toml)."""
    os.environ[ENV] = str(dims)


def served(run: Path, jwks: Path, params: Path, dims: int, args: argparse.Namespace,
           problems: list[str]) -> dict[str, Any]:
    """One fresh ``ans serve`` on ``run``'s data at width ``dims``, one timed run."""
    set_width(dims)
    srv, _, health = start_ans(run / "data", jwks, run / "ans.toml", args.workers)
    try:
        if health.get("embedding_dims") != dims:
            problems.append(f"{dims}-d server reports {health.get('embedding_dims')} dims")
        status, body = discover_once(srv.url, json.loads(params.read_text().splitlines()[0]))
        if status != 200:
            raise RuntimeError(f"DISCOVER answered {status}: {body[:300]!r}")
        r = drive(srv.proc.pid, srv.url, params, args, args.concurrency)
        problems += client_problems(f"{dims}-d", r)
        if srv.proc.poll() is not None:
            problems.append(f"the {dims}-d server exited ({srv.proc.returncode})")
    finally:
        stop_server(srv)
    out = figures(r) | {"p99_ms": r.get("p99_ms")}
    log(f"{dims}-d: {out}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--agents", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--concurrency", type=int, default=1)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--duration", type=float, default=8.0, help="timed s per run")
    ap.add_argument("--warmup", type=float, default=2.0, help="warm-up s per run")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--cache", type=Path,
                    default=Path(tempfile.gettempdir()) / "ans-bench-scale")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    synth, source = synth_module()
    catalog, _ = ensure_catalog(args.agents, args.seed, args.cache, source)
    jwks = catalog / "governance.jwks.json"
    params = load_params(catalog, args.seed, synth)
    runs = {256: args.cache / f"run-{args.agents}", 128: args.cache / f"run-{args.agents}-d128"}
    imports: dict[int, Any] = {}
    for dims, run in runs.items():
        set_width(dims)
        imports[dims], problems = import_catalog(run, catalog, args.agents, reuse_import=True)
        if problems:
            raise SystemExit("; ".join(problems))
    problems = []
    rounds: list[dict[str, Any]] = []
    try:
        for i in range(args.rounds):
            order = WIDTHS if i % 2 == 0 else WIDTHS[::-1]
            got: dict[str, Any] = {"order": list(order)}
            for dims in order:
                got[f"d{dims}"] = served(runs[dims], jwks, params, dims, args, problems)
            rounds.append(got)
    finally:
        os.environ.pop(ENV, None)

    def median(dims: int, key: str) -> float | None:
        vals = [r[f"d{dims}"][key] for r in rounds if r[f"d{dims}"].get(key) is not None]
        return round(statistics.median(vals), 3) if vals else None

    medians = {f"d{d}": {k: median(d, k) for k in ("rps", "p50_ms", "server_cpu_ms_per_request")}
               for d in WIDTHS}
    cpu256, cpu128 = (medians[f"d{d}"]["server_cpu_ms_per_request"] for d in WIDTHS)
    result = {
        "benchmark": "embedding width (bench/embedding_width.py)",
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": "bench/embedding_width.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "agents": args.agents, "workers": args.workers, "concurrency": args.concurrency,
        "duration_s": args.duration, "warmup_s": args.warmup, "imports": imports,
        "machine": machine(), "rounds": rounds, "medians": medians,
        "cpu_128_over_256": round(cpu128 / cpu256, 3) if cpu256 and cpu128 else None,
        "problems": problems,
    }
    out = args.out or ROOT / "bench" / "results" / (
        f"embedding_width-{args.agents}-w{args.workers}-c{args.concurrency}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"{args.agents} agents, workers {args.workers}, c={args.concurrency}, "
          f"{args.rounds} alternated rounds:")
    for i, r in enumerate(rounds, 1):
        print("  round " + str(i) + ": " + "; ".join(
            f"{d}-d {r[f'd{d}']['rps']:.0f} req/s, {r[f'd{d}']['server_cpu_ms_per_request']} ms "
            f"CPU, p50 {r[f'd{d}']['p50_ms']} ms" for d in WIDTHS))
    print(f"median: 256-d {medians['d256']}; 128-d {medians['d128']}; "
          f"CPU 128/256 {result['cpu_128_over_256']}")
    print(f"results: {out}")
    if problems:
        print("problems:", *problems, sep="\n  ")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
