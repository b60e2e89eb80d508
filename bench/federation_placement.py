"""Where the peers run: the federated/local ratio with the peers sharing A's
cores, and with the peers kept off them.

    OPENBLAS_NUM_THREADS=1 .venv/bin/python bench/federation_placement.py
    # writes bench/results/federation_placement.json

A diagnostic beside ``bench/federation_latency.py`` (which measures the
issue's configuration: two healthy peers, every process free to use both
cores). On a 2-core machine the two peers, the forwarding server and the
client cannot each have a core, so the federated critical path holds A's
local match and a whole peer answer queued behind each other. This script
measures how much of the ratio that placement is, with real ``ans serve``
processes on loopback:

* fronts (50 demo agents each, the client asks these): ``A_local`` (no
  peers), ``N1`` / ``N2`` (one / two native peers), ``H1`` / ``H2`` (one /
  two HTTP/2 peers);
* peers: a MetaTool half (~100 agents) each, a fresh set per front (``N1``
  asks Bn1; ``N2`` asks Bn2 and Cn2; ``H1`` asks B1; ``H2`` asks B2 and C2),
  so that no peer has seen a timed query before.

Two phases, each with queries of its own (MetaTool intents, ``limit`` 10,
zone:public, so every front forwards every query to all its peers):

* ``shared``: no pinning (as in ``federation_latency.py``);
* ``pinned``: the fronts and this client on CPU 0, every peer on CPU 1
  (``sched_setaffinity`` on every thread). One peer then has a core of its
  own; two peers share one, so they still queue behind each other, but no
  longer behind A.

Reported per phase: p50 per front and its ratio to ``A_local`` (same phase,
queries interleaved in rotating order), and each server's CPU per query.
The JSON also gives an **estimate** for two peers with a core each, which
this machine cannot run: the pinned one-peer p50 plus the forwarding
server's extra CPU per query for the second peer (pinned ``N2`` minus
``N1``, from /proc). It is labelled as an estimate; the measured figures
are the others.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ans.governance.keys import SigningKey
from federation_latency import (  # bench/ is on sys.path when run as a script
    ASKER,
    DEFAULT_DATA,
    ROOT,
    WARMUP,
    Answer,
    activate_all,
    check_federated,
    demo_agents,
    kid_of,
    metatool_agents,
    summary,
    timed_pass,
    verify_all,
)

from ans.client import AgtpClient
from tools.launcher import RunningServer, cpu_ms, start_server, stop_server

A_AGENTS = 50
TARGET = 2.0
# front -> (how it reaches its peers, its peers as (name, MetaTool half))
FRONTS: dict[str, tuple[str, tuple[tuple[str, int], ...]]] = {
    "A_local": ("", ()),
    "N1": ("native_url", (("Bn1", 0),)),
    "N2": ("native_url", (("Bn2", 0), ("Cn2", 1))),
    "H1": ("url", (("B1", 0),)),
    "H2": ("url", (("B2", 0), ("C2", 1))),
}
PHASES = ("shared", "pinned")
SETTLE = 10  # untimed queries after a placement change


def pin(pid: int, cpus: set[int]) -> None:
    """Every thread of the process onto these CPUs."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        os.sched_setaffinity(int(tid), cpus)


def place(phase: str, servers: dict[str, RunningServer], peers: set[str]) -> None:
    every = set(range(os.cpu_count() or 1))
    for name, srv in servers.items():
        if phase == "shared":
            pin(srv.proc.pid, every)
        else:
            pin(srv.proc.pid, {1} if name in peers else {0})
    pin(os.getpid(), every if phase == "shared" else {0})


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--data", type=Path, default=DEFAULT_DATA, help="MetaTool split.json (+ plugin_des.json)"
    )
    ap.add_argument("--queries", type=int, default=200, help="timed queries per phase")
    ap.add_argument(
        "--out", type=Path, default=ROOT / "bench" / "results" / "federation_placement.json"
    )
    args = ap.parse_args(argv)
    if not args.data.is_file():
        sys.exit(f"federation_placement: {args.data} not found (use --data)")
    if not hasattr(os, "sched_setaffinity") or (os.cpu_count() or 1) < 2:
        sys.exit("federation_placement: needs Linux sched_setaffinity and at least 2 CPUs")
    data = json.loads(args.data.read_text(encoding="utf-8"))
    descriptions = json.loads(args.data.with_name("plugin_des.json").read_text(encoding="utf-8"))
    tools = sorted(data["examples"])
    halves = [
        metatool_agents(data, descriptions, tools[0::2]),
        metatool_agents(data, descriptions, tools[1::2]),
    ]
    a_agents = demo_agents(A_AGENTS)
    pool = [q for q, _ in data["eval_single"]]
    per_phase = SETTLE + args.queries
    wanted = WARMUP + len(PHASES) * per_phase
    if args.queries < 1 or wanted > len(pool):
        sys.exit(f"federation_placement: {wanted} queries needed, {len(pool)} available")
    step = max(1, len(pool) // wanted)
    chosen = pool[::step][:wanted]
    warmup = chosen[:WARMUP]
    phase_queries = {
        ph: chosen[WARMUP + i * per_phase : WARMUP + (i + 1) * per_phase]
        for i, ph in enumerate(PHASES)
    }

    os.environ["OPENBLAS_NUM_THREADS"] = "1"  # inherited by the servers
    gov = SigningKey.generate()
    servers: dict[str, RunningServer] = {}
    clients: dict[str, AgtpClient] = {}
    peer_names = {p for _, pair in FRONTS.values() for p, _ in pair}
    started = time.perf_counter()
    results: dict[str, Any] = {}
    cpu: dict[str, dict[str, float | None]] = {}
    checks: dict[str, Any] = {}
    verified = 0
    with tempfile.TemporaryDirectory(prefix="ans-fedplace-") as tmp:
        jwks_file = Path(tmp) / "gov.jwks.json"
        jwks_file.write_text(json.dumps({"keys": [gov.public.jwk()]}), encoding="utf-8")
        no_limit = Path(tmp) / "bench.toml"
        no_limit.write_text("[rate_limit]\nenabled = false\n", encoding="utf-8")
        common = [
            *("--governance-jwks", str(jwks_file), "--log-level", "warning"),
            *("--config", str(no_limit)),
        ]
        try:
            for front, (attr, pair) in FRONTS.items():
                for name, half in pair:
                    native = ("--native-listen", "127.0.0.1:0") if attr == "native_url" else ()
                    servers[name] = start_server(Path(tmp) / name, *common, *native)
                    activate_all(servers[name].url, gov, halves[half])
                flags = [
                    f for name, _ in pair for f in ("--peer", f"2@{getattr(servers[name], attr)}")
                ]
                servers[front] = start_server(Path(tmp) / front, *common, *flags)
                activate_all(servers[front].url, gov, a_agents)
                clients[front] = AgtpClient(
                    servers[front].url,
                    agent_id=ASKER,
                    principal_id="bench",
                    scope="discovery:query",
                )
            base = {"limit": 10, "governance_zone": "zone:public"}
            timed_pass(clients, warmup, base, "warm")
            for phase in PHASES:
                place(phase, servers, peer_names)
                qs = phase_queries[phase]
                timed_pass(clients, qs[:SETTLE], base, f"settle-{phase}")
                cpu0 = {n: cpu_ms(s.proc.pid) for n, s in servers.items()}
                runs = timed_pass(clients, qs[SETTLE:], base, f"{phase}")
                cpu1 = {n: cpu_ms(s.proc.pid) for n, s in servers.items()}
                cpu[phase] = {
                    n: None if a is None or b is None else round((b - a) / args.queries, 3)
                    for n, (a, b) in ((n, (cpu0[n], cpu1[n])) for n in servers)
                }
                results[phase] = phase_figures(runs)
                local_hits = max(r["returned"] for _, _, r in runs["A_local"])
                if local_hits >= base["limit"]:
                    raise AssertionError(f"A_local returned {local_hits} >= limit results")
                for front, (_, pair) in FRONTS.items():
                    if pair:
                        ids = {kid_of(servers[p].url) for p, _ in pair}
                        checks[f"{phase}/{front}"] = check_federated(runs[front], ids)
                for front, client in clients.items():
                    verified += verify_all(runs[front], client.jwks())
        finally:
            if servers:
                place("shared", servers, set())
            for c in clients.values():
                c.close()
            for srv in servers.values():
                stop_server(srv)

    pinned = results["pinned"]
    estimate = {}
    for label, one, two in (("native", "N1", "N2"), ("http2", "H1", "H2")):
        c_one, c_two = cpu["pinned"][one], cpu["pinned"][two]
        if c_one is None or c_two is None:
            continue
        second = round(c_two - c_one, 3)
        p50 = round(pinned["p50_ms"][one] + second, 3)
        estimate[label] = {
            "second_peer_cpu_ms_on_forwarding_server": second,
            "p50_ms": p50,
            "ratio_p50": round(p50 / pinned["p50_ms"]["A_local"], 3),
        }
    report: dict[str, Any] = {
        "command": ".venv/bin/python bench/federation_placement.py",
        "machine": {
            "platform": platform.platform(),
            "cpu_count": os.cpu_count(),
            "python": platform.python_version(),
        },
        "queries": {
            "warmup": len(warmup),
            "per_phase": args.queries,
            "settle_per_phase": SETTLE,
            "limit": 10,
            "governance_zone": "zone:public",
            "concurrency": 1,
        },
        "placement": {
            "shared": "every process may run on every CPU",
            "pinned": "fronts and the client on CPU 0, every peer on CPU 1",
        },
        "target_ratio": TARGET,
        **{phase: {**results[phase], "server_cpu_ms_per_query": cpu[phase]} for phase in PHASES},
        "estimate_two_peers_a_core_each": {
            "how": "pinned one-peer p50 + the forwarding server's extra CPU per query for "
            "a second peer (pinned two-peer front minus one-peer front); not measured",
            **estimate,
        },
        "federation_checks": checks,
        "signatures_verified": verified,
        "seconds": round(time.perf_counter() - started, 1),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    for phase in PHASES:
        figs = results[phase]
        cells = ", ".join(
            f"{f} {figs['p50_ms'][f]:.2f} ms ({figs['ratio_p50'][f]:.2f}x)"
            for f in FRONTS
            if f != "A_local"
        )
        print(f"{phase}: A alone {figs['p50_ms']['A_local']:.2f} ms | {cells}")
    for label, est in estimate.items():
        print(
            f"estimate, two {label} peers with a core each: {est['p50_ms']:.2f} ms "
            f"({est['ratio_p50']:.2f}x; second peer costs the forwarding server "
            f"{est['second_peer_cpu_ms_on_forwarding_server']:.2f} ms CPU)"
        )
    print(f"{verified} signatures verified")
    print(f"written to {args.out}")
    return 0


def phase_figures(runs: dict[str, list[Answer]]) -> dict[str, Any]:
    p50 = {front: summary([a[0] for a in runs[front]])["p50"] for front in FRONTS}
    return {
        "p50_ms": p50,
        "ratio_p50": {f: round(p50[f] / p50["A_local"], 3) for f in FRONTS if f != "A_local"},
        "ms": {front: summary([a[0] for a in runs[front]]) for front in FRONTS},
    }


if __name__ == "__main__":
    raise SystemExit(main())
