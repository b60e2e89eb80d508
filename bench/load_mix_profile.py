"""Server CPU of one DISCOVER over the load's query mix, by kind of query (issue 26, item 1).

    OPENBLAS_NUM_THREADS=1 .venv/bin/python bench/load_mix_profile.py --agents 10000,100000 \\
        [--label run] [--passes 1] [--stages plain,domains] [--cache /tmp/ans-bench]

bench/query_profile.py profiles MetaTool's intents with ``limit`` 10: their
answers return the same few hundred agents again and again, so per-agent work
that a cache hides there (the result fields) does not show. This script runs
the 2,000 queries bench/load.py sends (``tools.synth``'s mix: plain intents,
trust and zone filters, ``capability_domains``, ``limit`` 10 or 25, a few with
no intent) through the same in-process service path (``AnsApp.answer``: parse,
gates, match, ranking, result fields, JCS + ES256, serialisation) on the same
cached data dirs as bench/query_profile.py, and reports the thread CPU per
DISCOVER by kind (one warm-up pass, then ``--passes`` timed passes), then per
kind in ``--stages`` the stage table of bench/query_profile.py (one more pass of
only those queries, with the timers).

A before/after pair: run it from a worktree of the old commit
(``PYTHONPATH=/path/to/worktree``) and from this one, alternated, on the same
data dirs (``--data`` points both at one; only the catalog, whose queries and
governance key are used, comes from ``--cache``: give the cache that data dir
was imported from, or its agents are refused as signed by an untrusted key). Writes
bench/results/load_mix_profile-<label>.json and prints a table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import orjson
from load import ensure_catalog, load_params, synth_module
from query_profile import HEADERS, SERVER_CONFIG, Stages, instrument, log, prepare

ROOT = Path(__file__).resolve().parent.parent
KINDS = ("plain", "trust", "zone/org", "domains", "no-intent")


def kind_of(params: dict[str, Any]) -> str:
    if "capability_domains" in params:
        return "domains"
    if "intent" not in params:
        return "no-intent"
    if "governance_zone" in params or "org_domain" in params:
        return "zone/org"
    if "trust_tier_min" in params or "behavioral_trust_min" in params:
        return "trust"
    return "plain"


def request(i: int, params: dict[str, Any]) -> tuple[dict[str, str], bytes]:
    headers = {**HEADERS, "task-id": f"t-{i}"}
    zone = params.get("governance_zone")
    if isinstance(zone, str) and zone:  # as bench/h2client.py asks it
        headers["authority-scope"] = f"discovery:query {zone}"
    body = orjson.dumps({"method": "DISCOVER", "task_id": f"t-{i}", "parameters": params})
    return headers, body


def profile(data: Path, config_path: Path, jwks: Path, rows: list[dict[str, Any]],
            passes: int, staged: list[str]) -> dict[str, Any]:
    from ans.app import AnsApp
    from ans.config import load
    from ans.gate import Credentials
    from ans.wiring import build_service

    built = build_service(load(config_path, data_dir=data, governance_jwks=(jwks,)))
    try:
        app = AnsApp(built.service, built.gate)
        creds = Credentials(client_address="127.0.0.1")
        requests = [(kind_of(p), *request(i, p)) for i, p in enumerate(rows)]

        async def one_pass(only: str | None = None) -> dict[str, list[int]]:
            cpu: dict[str, list[int]] = defaultdict(list)
            for kind, headers, body in requests:
                if only is not None and kind != only:
                    continue
                t0 = time.thread_time_ns()
                answer = await app.answer("DISCOVER", headers, body, creds)
                cpu[kind].append(time.thread_time_ns() - t0)
                if answer.status != 200:
                    raise RuntimeError(f"a {kind} query answered {answer.status}: {body[:200]!r}")
            return cpu

        asyncio.run(one_pass())  # warm-up: query vectors, impacts, caches
        timed: dict[str, list[int]] = defaultdict(list)
        for _ in range(passes):
            for kind, values in asyncio.run(one_pass()).items():
                timed[kind].extend(values)
        every = [v for values in timed.values() for v in values]
        out: dict[str, Any] = {
            "agents": len(built.service.index),
            "queries": len(rows),
            "passes": passes,
            "cpu_us_mean": round(statistics.fmean(every) / 1000.0, 1),
            "cpu_us_p50": round(statistics.median(every) / 1000.0, 1),
            "kinds": {
                kind: {
                    "queries": len(timed[kind]) // passes,
                    "cpu_us_mean": round(statistics.fmean(timed[kind]) / 1000.0, 1),
                    "cpu_us_p50": round(statistics.median(timed[kind]) / 1000.0, 1),
                    "share_of_cpu": round(sum(timed[kind]) / sum(every), 3),
                }
                for kind in KINDS
                if timed.get(kind)
            },
            "stages": {},
        }
        for kind in staged:
            if not timed.get(kind):
                continue
            stages = Stages()
            instrument(stages)
            try:
                asyncio.run(one_pass(kind))
            finally:
                stages.restore()
            out["stages"][kind] = stages.rows(len(timed[kind]) // passes)
        return out
    finally:
        if built.lock is not None:
            built.lock.release()
        built.service.store.close()


def table(sizes: dict[str, Any]) -> str:
    ns = list(sizes)
    lines = ["| kind of query (share of the 2,000) | "
             + " | ".join(f"{n} agents: mean / p50 µs (share of CPU)" for n in ns) + " |",
             "|---|" + "---:|" * len(ns)]
    for kind in ("all", *KINDS):
        cells = []
        for n in ns:
            s = sizes[n] if kind == "all" else sizes[n]["kinds"].get(kind)
            if s is None:
                cells.append("")
                continue
            share = "" if kind == "all" else f" ({s['share_of_cpu']:.2f})"
            cells.append(f"{s['cpu_us_mean']:,.0f} / {s['cpu_us_p50']:,.0f}{share}")
        count = sizes[ns[0]]["queries"] if kind == "all" else \
            sizes[ns[0]]["kinds"].get(kind, {}).get("queries", 0)
        lines.append(f"| {kind} ({count}) | " + " | ".join(cells) + " |")
    for n in ns:
        for kind, rows in sizes[n]["stages"].items():
            lines += ["", f"Stages of the {kind} queries at {n} agents "
                      "(incl / self µs per query):", ""]
            lines += [f"    {r['stage']:<42} {r['incl_us']:>8.1f} {r['self_us']:>8.1f}"
                      for r in rows if r["incl_us"] >= 10.0]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--agents", default="10000,100000")
    ap.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "ans-bench")
    ap.add_argument("--data", type=Path, help="this data dir, not the cached import (one size)")
    ap.add_argument("--label", default="run")
    ap.add_argument("--passes", type=int, default=1)
    ap.add_argument("--stages", default="plain,domains", help="kinds to time stage by stage")
    args = ap.parse_args(argv)
    synth, _ = synth_module()
    report: dict[str, Any] = {"label": args.label,
                              "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                              "sizes": {}}
    for n in [int(x) for x in args.agents.split(",") if x]:
        if args.data is not None:  # the catalog only: no import of our own
            catalog, _ = ensure_catalog(n, 1, args.cache, "tools.synth")
            data = args.data
            config = data.parent / "load-mix.toml"
            config.write_text(SERVER_CONFIG)
        else:
            catalog, data, config = prepare(n, args.cache)
        rows = [json.loads(x) for x in load_params(catalog, 1, synth).read_text().splitlines() if x]
        log(f"N={n}: {len(rows)} load queries in process on {data}")
        report["sizes"][str(n)] = profile(data, config, catalog / "governance.jwks.json", rows,
                                          args.passes, [k for k in args.stages.split(",") if k])
    print(table(report["sizes"]))
    out = ROOT / "bench" / "results" / f"load_mix_profile-{args.label}.json"
    out.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
