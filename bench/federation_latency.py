"""Latency of a federated DISCOVER (two healthy peers) against a local-only one.

    .venv/bin/python bench/federation_latency.py     # writes bench/results/federation.json

Seven real ``ans serve`` processes on loopback, all trusting one temporary
governance key (``--governance-jwks``), every agent ACTIVATEd over the wire:

* B and C: the MetaTool tools split in two alternating halves (~100 agents
  each; tier 1, behavioral 0.9, zone:public, the published example tasks as
  ``capabilities.examples``); Bn and Cn: the same two catalogs, also serving
  the native AGTP framing (``--native-listen``);
* A_fed: 50 agents of the demo catalog (enterprise agents, another topic) and
  ``--peer 2@B --peer 2@C`` (HTTP/2, h2c: ``federation/h2transport.py``);
* A_fed_native: the same 50 agents and ``--peer 2@agtp+cleartext://Bn
  --peer 2@agtp+cleartext://Cn`` (``federation/native_transport.py``);
* A_local: the same 50 agents, no peers;
* A_all: all of them in one index -- A's 50 agents plus B's and C's -- and
  no peers: the same catalog the federation spans, held by one ANS.

Two local-only baselines, because "local-only" can mean two things, and the
JSON reports the ratio to each:

* ``A_all`` answers the *same query over the same agents* without
  federation, so its answer is the same kind of answer (a full page of
  ``limit`` results for at least 90% of the queries -- a few intents match
  fewer agents at all -- mostly the same agents; both shares are reported). The
  ratio to it is the price of spreading a catalog over three ANS servers
  instead of one: the question an operator deciding between federating and
  centralising asks.
* ``A_local`` is A without its peers: the strictest comparison. Its answer
  is smaller (at most 3 results, since only 3 of its agents are public) and its
  index holds only 50 agents, so it is cheaper than any full answer.

Each federating server has its own pair of peers, so a peer never sees a
timed query before it is timed (its query-embedding cache is cold for it, as
for A_local).

Every query is a MetaTool intent with ``limit`` 10 and ``governance_zone``
zone:public. The zone is what keeps A under ``limit``: only 3 of A's 50
agents are public (the off-topic catalog alone is not enough -- at the default
capability floor of 0.05, 10 to 36 of A's 50 agents pass for these queries).
So A_local answers with 0-3 results and both federating servers forward every
query to both peers, verify their signed answers, merge, re-rank and re-sign.
The script checks that (``federation_path`` names a peer, no ``warnings``,
each federating server's audit log has one successful forward per peer per
timed query, A_local never reaches ``limit``) and verifies the ES256
signature of every timed answer.

This script is the client process: it sends the queries one at a time
(concurrency 1) over one kept-alive HTTP/2 connection per server (the caller
always speaks HTTP/2; only the peer hop differs), each query to A_local,
A_fed and A_fed_native in an order that rotates per query so that noise hits
all alike, and records wall-clock latency per request. A warm-up of 30 queries
(not timed, not reused) precedes the timed rounds (``--rounds``, default 3,
each of ``--queries`` queries of its own). The timed queries are new to every
server, so each server embeds each query once: the realistic case for
distinct intents. The headline figures pool the rounds; the ratio of each
round is reported too (``per_round_ratios``), since one round's p50 moves by
a few percent from run to run on a shared machine. A second pass over round
1's queries (query-embedding caches hot everywhere) is reported as
``cached_pass``.

The machine this ran on is part of the measurement: with 2 cores, the
servers and the client share them, so two peers answering "concurrently" are
really time-sliced with each other and with the federating server (only one
query is in flight at a time; idle servers cost nothing). OPENBLAS_NUM_THREADS=1 is
set for the servers (one request = one core). The JSON also records each
server's CPU time per timed query (Linux /proc) and the load average, since
anything else running on the machine shows up in the latencies.
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
from ans.governance.signing import sign_document
from metatool_eval import agent_docs  # bench/ is on sys.path when run as a script

from ans.client import AgtpClient, verify_discover_result
from ans.demo import demo_capabilities, demo_manifest, load_catalog
from tools.launcher import RunningServer, cpu_ms, start_server, stop_server

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "metatool" / "split.json"
GOV_AGENT = "agtp://gov.bench.example/agents/platform"
ASKER = "agtp://bench.example/agents/orchestrator"
TARGET = 2.0
A_AGENTS = 50
FRONTS = ("A_local", "A_all", "A_fed", "A_fed_native")  # the servers the client asks
# Each federating server's peers (their own pair, so that no peer has seen a
# query before the timed pass) and how it reaches them.
PEERS = {"A_fed": ("url", ("B", "C")), "A_fed_native": ("native_url", ("Bn", "Cn"))}
WARMUP = 30


# -- agents ----------------------------------------------------------------------------


def metatool_agents(
    data: dict[str, Any], descriptions: dict[str, str], tools: Sequence[str]
) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(unsigned manifest, capability document) for the given MetaTool tools,
    built exactly as the MetaTool harness builds them (with example tasks)."""
    wanted = set(tools)
    docs = agent_docs(data, descriptions, with_examples=True)
    return [(manifest, caps) for tool, manifest, caps in docs if tool in wanted]


def demo_agents(n: int) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    return [(demo_manifest(e), demo_capabilities(e)) for e in load_catalog()[:n]]


def activate_all(
    url: str, gov: SigningKey, agents: list[tuple[dict[str, Any], dict[str, Any]]]
) -> None:
    with AgtpClient(
        url, agent_id=GOV_AGENT, principal_id="bench", scope="discovery:register"
    ) as client:
        for i, (manifest, caps) in enumerate(agents):
            params = {"manifest": sign_document(manifest, gov, "signature"), "capabilities": caps}
            resp = client.call("ACTIVATE", params, task_id=f"act-{i}")
            if resp.status != 200:
                raise RuntimeError(f"ACTIVATE on {url} failed: {resp.body}")


# -- measuring -------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    s = sorted(values)
    pos = (len(s) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def summary(ms: Sequence[float]) -> dict[str, float]:
    return {
        "p50": round(percentile(ms, 0.50), 3),
        "p90": round(percentile(ms, 0.90), 3),
        "p99": round(percentile(ms, 0.99), 3),
        "mean": round(sum(ms) / len(ms), 3),
    }


Answer = tuple[float, dict[str, Any], dict[str, Any]]  # (ms, params, result)


def timed_pass(
    clients: dict[str, AgtpClient],
    queries: Sequence[str],
    base: dict[str, Any],
    tag: str,
    first: int = 0,
) -> dict[str, list[Answer]]:
    """Each query to every client, rotating which goes first; task ids are
    ``{tag}-{n}`` counting from ``first``."""
    out: dict[str, list[Answer]] = {name: [] for name in clients}
    names = list(clients)
    for i, q in enumerate(queries):
        params = {"intent": q, **base}
        k = i % len(names)
        for name in names[k:] + names[:k]:
            t0 = time.perf_counter()
            resp = clients[name].discover(params, task_id=f"{tag}-{first + i}")
            ms = (time.perf_counter() - t0) * 1000.0
            if resp.status != 200:
                raise RuntimeError(f"{name}: DISCOVER failed: {resp.body}")
            out[name].append((ms, params, resp.result))
    return out


def check_federated(answers: Sequence[Answer], peer_ids: set[str]) -> dict[str, Any]:
    """Every answer went through federation, without warnings."""
    both = 0
    from_peers = 0
    for _, params, result in answers:
        path = result.get("federation_path")
        if not path or not peer_ids.intersection(path[1:]):
            raise AssertionError(f"not federated: {params['intent']!r} -> path {path}")
        if result.get("warnings"):
            raise AssertionError(f"federation warnings: {result['warnings']}")
        both += peer_ids <= set(path)
        from_peers += sum(1 for r in result["results"] if "provenance" in r)
    return {
        "answers": len(answers),
        "path_names_both_peers": both,
        "mean_results_from_peers": round(from_peers / len(answers), 3),
    }


def audit_forwards(data_dir: Path, task_prefix: str) -> dict[str, dict[str, int]]:
    """Per peer URL: federation_forward outcomes for tasks with this prefix."""
    out: dict[str, dict[str, int]] = {}
    with open(data_dir / "audit.jsonl", "rb") as fh:
        for line in fh:
            rec = json.loads(line)
            if rec.get("event") != "federation_forward":
                continue
            if not str(rec.get("task_id", "")).startswith(task_prefix):
                continue
            per = out.setdefault(rec["peer"], {})
            per[rec["outcome"]] = per.get(rec["outcome"], 0) + 1
    return out


def kid_of(url: str) -> str:
    with AgtpClient(url, agent_id=ASKER, principal_id="bench", scope="discovery:query") as c:
        keys = c.jwks()["keys"]
    return str(keys[0]["kid"])


def verify_all(answers: Sequence[Answer], jwks: dict[str, Any]) -> int:
    for _, params, result in answers:
        verify_discover_result(result, jwks, params)
    return len(answers)


def same_agents(local: Sequence[Answer], federated: Sequence[Answer]) -> float:
    """Mean share of a federated answer's agents that the one-index answer to
    the same query also returns (the two rank alike except for the tier cap)."""
    shares = []
    for (_, _, a), (_, _, b) in zip(local, federated, strict=True):
        ids = {r["canonical_id"] for r in b["results"]}
        if ids:
            shares.append(len(ids & {r["canonical_id"] for r in a["results"]}) / len(ids))
    return round(sum(shares) / len(shares), 3)


def figures(runs: dict[str, list[Answer]]) -> dict[str, Any]:
    local = summary([a[0] for a in runs["A_local"]])
    one_index = summary([a[0] for a in runs["A_all"]])
    fed = summary([a[0] for a in runs["A_fed"]])
    native = summary([a[0] for a in runs["A_fed_native"]])
    return {
        "local_ms": local,
        "one_index_ms": one_index,
        "federated_ms": fed,
        "federated_native_ms": native,
        "ratio_p50": round(fed["p50"] / local["p50"], 3),
        "ratio_native_p50": round(native["p50"] / local["p50"], 3),
        "ratio_to_one_index_p50": round(fed["p50"] / one_index["p50"], 3),
        "ratio_native_to_one_index_p50": round(native["p50"] / one_index["p50"], 3),
    }


# -- main ------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--data", type=Path, default=DEFAULT_DATA, help="MetaTool split.json (+ plugin_des.json)"
    )
    ap.add_argument("--queries", type=int, default=200, help="timed queries per round")
    ap.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="timed rounds, each with queries of its own; the figures pool them "
        "and the per-round ratios show the spread",
    )
    ap.add_argument("--limit", type=int, default=10, help="DISCOVER limit")
    ap.add_argument("--zone", default="zone:public", help="DISCOVER governance_zone")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "federation.json")
    args = ap.parse_args(argv)
    if not args.data.is_file():
        sys.exit(f"federation_latency: {args.data} not found (use --data)")
    data = json.loads(args.data.read_text(encoding="utf-8"))
    descriptions = json.loads(args.data.with_name("plugin_des.json").read_text(encoding="utf-8"))
    tools = sorted(data["examples"])
    agents = {
        "B": metatool_agents(data, descriptions, tools[0::2]),
        "C": metatool_agents(data, descriptions, tools[1::2]),
        "A": demo_agents(A_AGENTS),
    }
    pool = [q for q, _ in data["eval_single"]]
    wanted = WARMUP + args.rounds * args.queries
    if not 1 <= args.rounds or wanted > len(pool):
        sys.exit(
            f"federation_latency: {args.rounds} rounds of {args.queries} need {wanted} "
            f"of the {len(pool)} MetaTool queries"
        )
    step = max(1, len(pool) // wanted)
    chosen = pool[::step][:wanted]
    warmup, queries = chosen[:WARMUP], chosen[WARMUP:]
    rounds = [queries[r * args.queries : (r + 1) * args.queries] for r in range(args.rounds)]

    os.environ["OPENBLAS_NUM_THREADS"] = "1"  # inherited by the servers
    gov = SigningKey.generate()
    servers: dict[str, RunningServer] = {}
    clients: dict[str, AgtpClient] = {}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ans-fedbench-") as tmp:
        jwks_file = Path(tmp) / "gov.jwks.json"
        jwks_file.write_text(json.dumps({"keys": [gov.public.jwk()]}), encoding="utf-8")
        # A benchmark floods from one Agent-ID on purpose: no per-Agent-ID rate limit.
        no_limit = Path(tmp) / "bench.toml"
        no_limit.write_text("[rate_limit]\nenabled = false\n", encoding="utf-8")
        common = (
            "--governance-jwks",
            str(jwks_file),
            "--log-level",
            "warning",
            "--config",
            str(no_limit),
        )
        try:
            for name in ("B", "C"):
                servers[name] = start_server(Path(tmp) / name, *common)
            for name in ("Bn", "Cn"):
                servers[name] = start_server(
                    Path(tmp) / name, *common, "--native-listen", "127.0.0.1:0"
                )
            for name in ("A_local", "A_all"):
                servers[name] = start_server(Path(tmp) / name, *common)
            for name, (attr, pair) in PEERS.items():
                peers = [f"2@{getattr(servers[p], attr)}" for p in pair]
                servers[name] = start_server(
                    Path(tmp) / name, *common, "--peer", peers[0], "--peer", peers[1]
                )
            catalogs = {
                name: agents["A"] + agents["B"] + agents["C"]
                if name == "A_all"
                else agents[name[0]]
                for name in servers
            }
            for name, srv in servers.items():
                activate_all(srv.url, gov, catalogs[name])
            for name in FRONTS:
                clients[name] = AgtpClient(
                    servers[name].url,
                    agent_id=ASKER,
                    principal_id="bench",
                    scope="discovery:query",
                )
            setup_s = time.perf_counter() - started

            base = {"limit": args.limit, "governance_zone": args.zone}
            timed_pass(clients, warmup, base, "warm")
            load_before = os.getloadavg()[0]
            cpu0 = {name: cpu_ms(srv.proc.pid) for name, srv in servers.items()}
            per_round = [
                timed_pass(clients, qs, base, "timed", r * args.queries)
                for r, qs in enumerate(rounds)
            ]
            cpu1 = {name: cpu_ms(srv.proc.pid) for name, srv in servers.items()}
            load_after = os.getloadavg()[0]
            first = {name: [a for run in per_round for a in run[name]] for name in FRONTS}
            cached = timed_pass(clients, rounds[0], base, "cached")

            fed_check = {
                name: check_federated(
                    first[name] + cached[name], {kid_of(servers[p].url) for p in pair}
                )
                for name, (_, pair) in PEERS.items()
            }
            forwards: dict[str, dict[str, dict[str, int]]] = {}
            for name, (attr, pair) in PEERS.items():
                seen = audit_forwards(servers[name].data_dir, "timed-")
                for p in pair:
                    ok = seen.get(str(getattr(servers[p], attr)), {})
                    if ok != {"ok": len(queries)}:  # every round's queries
                        raise AssertionError(f"{name} forwards to {p}: {ok}")
                    forwards.setdefault(name, {})[p] = ok
            local_hits = [r["returned"] for _, _, r in first["A_local"] + cached["A_local"]]
            if max(local_hits) >= args.limit:
                raise AssertionError(f"A_local returned {max(local_hits)} >= limit results")
            all_hits = [r["returned"] for _, _, r in first["A_all"] + cached["A_all"]]
            full_pages = sum(n == args.limit for n in all_hits) / len(all_hits)
            if full_pages < 0.9:  # a few intents match fewer than `limit` agents at all
                raise AssertionError(f"A_all answered a full page for only {full_pages:.0%}")
            if any("federation_path" in r for _, _, r in first["A_all"] + cached["A_all"]):
                raise AssertionError("A_all federated")
            overlap = same_agents(first["A_all"], first["A_fed_native"])
            verified = 0
            for name in FRONTS:
                jwks = clients[name].jwks()
                verified += verify_all(first[name] + cached[name], jwks)
            round_figs = [figures(run) for run in per_round]
        finally:
            for c in clients.values():
                c.close()
            for srv in servers.values():
                stop_server(srv)

    main_figs = figures(first)
    ratio_keys = [k for k in main_figs if k.startswith("ratio")]
    report: dict[str, Any] = {
        "command": ".venv/bin/python bench/federation_latency.py",
        "machine": {
            "platform": platform.platform(),
            "machine": platform.machine(),
            "cpu_count": os.cpu_count(),
            "python": platform.python_version(),
            "note": "8 servers (one query in flight at a time) and the client share these cores",
        },
        "agents": {name: len(catalog) for name, catalog in catalogs.items()},
        "peers": {
            "A_fed": "--peer 2@B --peer 2@C: HTTP/2, h2c (federation/h2transport.py)",
            "A_fed_native": "--peer 2@agtp+cleartext://Bn --peer 2@agtp+cleartext://Cn: "
            "native AGTP framing (federation/native_transport.py)",
        },
        "queries": {
            "source": f"MetaTool eval_single, every {step}th (first {WARMUP} warm-up only)",
            "warmup": len(warmup),
            "timed": len(queries),
            "rounds": args.rounds,
            "per_round": args.queries,
            "limit": args.limit,
            "governance_zone": args.zone,
            "concurrency": 1,
            "order": "interleaved per query, rotating which server goes first",
            "max_local_results_on_A": max(local_hits),
            "mean_local_results_on_A": round(sum(local_hits) / len(local_hits), 3),
            "mean_results_on_A_all": round(sum(all_hits) / len(all_hits), 3),
            "full_pages_on_A_all": round(full_pages, 3),
            "federated_agents_also_in_A_all_answer": overlap,
        },
        "figures": "pooled over the rounds' timed queries; per_round_ratios shows each round",
        **main_figs,
        "per_round_ratios": {k: [f[k] for f in round_figs] for k in ratio_keys},
        "target_ratio": TARGET,
        "met_http2_peers": main_figs["ratio_p50"] <= TARGET,
        "met_native_peers": main_figs["ratio_native_p50"] <= TARGET,
        "met_http2_peers_vs_one_index": main_figs["ratio_to_one_index_p50"] <= TARGET,
        "met_native_peers_vs_one_index": main_figs["ratio_native_to_one_index_p50"] <= TARGET,
        "cached_pass": {"queries": "round 1's, again", **figures(cached)},
        "federation": {
            name: {**fed_check[name], "forwards_per_peer_timed_pass": forwards[name]}
            for name in ("A_fed", "A_fed_native")
        },
        "signatures_verified": verified,
        "server_cpu_ms_per_query_first_pass": {
            name: None if a is None or b is None else round((b - a) / len(queries), 2)
            for name, (a, b) in ((n, (cpu0[n], cpu1[n])) for n in servers)
        },
        "load_average_1min": {"before": load_before, "after": load_after},
        "setup_seconds": round(setup_s, 1),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")

    passes = (
        *((f"round {r + 1}", figs) for r, figs in enumerate(round_figs)),
        (f"pooled ({len(queries)} queries)", main_figs),
        ("cached pass", report["cached_pass"]),
    )
    for label, figs in passes:
        lo, one = figs["local_ms"]["p50"], figs["one_index_ms"]["p50"]
        fe, na = figs["federated_ms"]["p50"], figs["federated_native_ms"]["p50"]
        print(
            f"{label}: p50 A alone {lo:.2f} ms, one index {one:.2f} ms | "
            f"HTTP/2 peers {fe:.2f} ms ({fe / lo:.2f}x A alone, {fe / one:.2f}x one index) | "
            f"native peers {na:.2f} ms ({na / lo:.2f}x A alone, {na / one:.2f}x one index)"
        )
    for hop, met in (("HTTP/2 peers", "met_http2_peers"), ("native peers", "met_native_peers")):
        for against, suffix in (("A alone", ""), ("one index", "_vs_one_index")):
            verdict = "met" if report[met + suffix] else "NOT met"
            print(f"target <= {TARGET}x, {hop}, against {against}: {verdict}")
    q = report["queries"]
    print(
        f"A alone returned {q['mean_local_results_on_A']} results per answer, one index "
        f"{q['mean_results_on_A_all']}; {q['federated_agents_also_in_A_all_answer']:.0%} of "
        "the federated answers' agents are in the one-index answer"
    )
    for name, check in fed_check.items():
        print(
            f"{name}: {check['mean_results_from_peers']} results from peers per answer, "
            f"{check['path_names_both_peers']}/{check['answers']} paths name both peers"
        )
    print(f"{verified} signatures verified")
    print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
