"""Where the server CPU of one DISCOVER goes, stage by stage (issue 26, item 1).

    OPENBLAS_NUM_THREADS=1 .venv/bin/python bench/query_profile.py --agents 10000,100000 \\
        [--queries 500] [--label before] [--http-duration 8] [--golden OLD.json] [--doc]
        [--domains]   # every query also names capability_domains (the load's sets)
        [--first-seen]  # also intents never answered before (2 x --queries more intents)

Per catalog size N (``tools.synth`` catalog, ``ans import`` into a data dir,
both cached under ``--cache`` by N):

1. **In process, the real service path**: the service ``ans serve`` builds
   (:func:`ans.wiring.build_service` on the data dir, rate limit off) and its
   ASGI app's :meth:`ans.app.AnsApp.answer` -- parse, gates, match, relevance
   gate, ranking, result fields, item assembly, JCS + ES256 signature, JSON
   serialisation -- for ``--queries`` distinct intents (MetaTool's evaluation
   queries when ``../shared/data/metatool/split.json`` is there, else the
   catalog's intents), ``limit`` 10. One warm-up pass (the query-vector cache
   is then warm, as in a server under a repeating workload; the cold embedding
   cost is measured on its own), one pass without timers (the per-query total:
   the figure that counts), one pass with a thread-CPU timer
   (``time.thread_time_ns``) around each stage. Stages nest: the table shows
   per query the inclusive and the self time of each, as a tree.
2. **Over HTTP/2** (``--http-duration`` > 0): ``ans serve`` on the same data
   dir and the floor (bench/floor_app.py answering a real ANS answer of the
   same size), each driven at c=1 by bench/h2client.py through the same
   intents; the server process's CPU (``/proc/PID/stat``) per request. The
   floor is what HTTP/2 and hypercorn cost; ANS minus floor is the in-process
   part above, measured from outside.

Writes bench/results/query_profile-<label>.json (per N: the stage table, the
totals, and per query a digest of the top-10 ids with their rank and
capability scores, so ``--golden`` can prove a change kept every ranking) and prints the table;
``--doc`` also writes it to docs/query-profile.md under ``## <label>``.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import zlib
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import orjson
from load import discover_once, ensure_catalog, run_client, start_floor, stop_proc, wait_healthy

from tools.launcher import cpu_ms, start_server, stop_server

ROOT = Path(__file__).resolve().parent.parent
ANS = str(Path(sys.executable).with_name("ans"))
METATOOL = ROOT.parent / "shared" / "data" / "metatool" / "split.json"
SERVER_CONFIG = "[rate_limit]\nenabled = false\n\n[freshness]\nenabled = false\n"
HEADERS = {
    "agtp-version": "AGTP/1.0",
    "agent-id": "agtp://bench.example/agents/profile",
    "principal-id": "bench-operator",
    "authority-scope": "discovery:query",
    "content-type": "application/agtp+json",
}


def log(msg: str) -> None:
    print(f"[profile] {msg}", file=sys.stderr, flush=True)


# -- data ------------------------------------------------------------------------------


def prepare(n: int, cache: Path) -> tuple[Path, Path, Path]:
    """(catalog dir, data dir, server config) for N agents, imported once."""
    catalog, _ = ensure_catalog(n, 1, cache, "tools.synth")
    run = cache / f"profile-{n}"
    data = run / "data"
    marker = data / ".imported.json"
    if not marker.is_file():
        if run.exists():
            shutil.rmtree(run)
        run.mkdir(parents=True)
        jwks = catalog / "governance.jwks.json"
        log(f"importing {n} agents into {data}")
        cmd = [ANS, "import", "--data-dir", str(data), "--governance-jwks", str(jwks),
               str(catalog / "agents.jsonl")]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        marker.write_text(json.dumps({"agents": n}))
    config = run / "ans.toml"
    config.write_text(SERVER_CONFIG)
    return catalog, data, config


def intents(catalog: Path, count: int) -> tuple[str, list[str]]:
    """``count`` distinct intents: MetaTool's evaluation queries, else the catalog's."""
    seen: dict[str, None] = {}
    if METATOOL.is_file():
        split = json.loads(METATOOL.read_text(encoding="utf-8"))
        for q, _ in split["eval_single"]:
            seen.setdefault(q, None)
        for q, _ in split["eval_multi"]:
            seen.setdefault(q, None)
        source = "metatool eval_single + eval_multi"
    else:
        for line in (catalog / "queries.jsonl").read_text(encoding="utf-8").splitlines():
            q = json.loads(line).get("intent")
            if isinstance(q, str):
                seen.setdefault(q, None)
        source = "synthetic catalog intents"
    out = list(seen)[:count]
    if len(out) < count:
        log(f"only {len(out)} distinct intents available ({source})")
    return source, out


# --domains: each intent also names one of the load's capability_domains sets
# (tools.synth's), picked by a hash of the intent: the same in process and over HTTP
DOMAIN_SETS: tuple[list[str], ...] = ()


def params_of(intent: str) -> dict[str, Any]:
    params: dict[str, Any] = {"intent": intent, "limit": 10}
    if DOMAIN_SETS:
        pick = zlib.crc32(intent.encode()) % len(DOMAIN_SETS)
        params["capability_domains"] = DOMAIN_SETS[pick]
    return params


# -- stage timers ------------------------------------------------------------------------


class Stages:
    """Thread-CPU timers around named functions; nested calls form a path."""

    def __init__(self) -> None:
        self.stack: list[str] = []
        self.incl: defaultdict[str, int] = defaultdict(int)
        self.child: defaultdict[str, int] = defaultdict(int)
        self.calls: Counter[str] = Counter()
        self.undo: list[Callable[[], None]] = []
        self.order: list[str] = []

    def wrap(self, owner: Any, attr: str, label: str) -> None:
        """Time ``owner.attr`` as ``label`` (absent at this commit: nothing to time)."""
        if not hasattr(owner, attr):
            return
        if isinstance(owner, type):
            raw = owner.__dict__.get(attr, getattr(owner, attr))
        else:
            raw = getattr(owner, attr)
        static = isinstance(raw, staticmethod)
        fn = raw.__func__ if static else raw
        clock = time.thread_time_ns

        def timed(*a: Any, **k: Any) -> Any:
            path = f"{self.stack[-1]}/{label}" if self.stack else label
            self.stack.append(path)
            t0 = clock()
            try:
                return fn(*a, **k)
            finally:
                dt = clock() - t0
                self.stack.pop()
                if path not in self.incl:
                    self.order.append(path)
                self.incl[path] += dt
                self.calls[path] += 1
                if self.stack:
                    self.child[self.stack[-1]] += dt

        setattr(owner, attr, staticmethod(timed) if static else timed)
        self.undo.append(lambda: setattr(owner, attr, raw))

    def wrap_key(self, table: dict[str, Any], key: str, label: str) -> None:
        holder = type("Holder", (), {})()
        holder.f = table[key]
        self.wrap(holder, "f", label)
        table[key] = holder.f
        original = holder.__dict__.get("f")
        self.undo.append(lambda: table.__setitem__(key, original))

    def restore(self) -> None:
        for f in reversed(self.undo):
            f()
        self.undo.clear()

    def rows(self, queries: int) -> list[dict[str, Any]]:
        def depth_key(p: str) -> list[int]:
            parts = p.split("/")
            return [self.order.index("/".join(parts[: i + 1])) for i in range(len(parts))]

        out = []
        for path in sorted(self.incl, key=depth_key):
            incl = self.incl[path] / queries / 1000.0
            self_us = (self.incl[path] - self.child[path]) / queries / 1000.0
            out.append({
                "stage": path,
                "incl_us": round(incl, 1),
                "self_us": round(self_us, 1),
                "calls_per_query": round(self.calls[path] / queries, 2),
            })
        return out


def instrument(stages: Stages) -> None:
    """Timers around every stage of the DISCOVER path (module names as of this commit)."""
    from ans.protocol.messages import PARSERS

    import ans.app
    import ans.core.discovery as disc
    import ans.index.capability as cap
    import ans.index.scoring as scoring
    from ans.ann import AnnIndex
    from ans.core.discovery import Discovery
    from ans.core.live_index import LiveIndex
    from ans.examples_index import ExampleBlocks
    from ans.gate import RequestGate
    from ans.index import approximate
    from ans.index.approximate import AnnMode
    from ans.index.int8_rows import QRows
    from ans.index.slots import SlotTable
    from ans.lexical import LexicalIndex
    from ans.registry import Registry
    from ans.store import SQLiteStore

    w = stages.wrap
    stages.wrap_key(PARSERS, "DISCOVER", "parse")
    w(RequestGate, "limit_address", "gate.address")
    w(RequestGate, "authenticate_and_limit", "gate.authenticate")
    w(RequestGate, "settle", "gate.settle")
    w(Discovery, "check_scope_and_zone", "scope_zone")
    w(Discovery, "local", "local")
    w(Discovery, "finish", "finish")
    w(Discovery, "_local_item", "item")
    w(cap.CapabilityIndex, "query", "matcher")
    w(cap.CapabilityIndex, "query_vectors", "embed")
    w(LexicalIndex, "score_many", "lexical")
    w(LexicalIndex, "accumulate_many", "lexical")
    w(cap, "tag_scores", "tags")
    w(AnnMode, "candidates", "candidates")
    w(AnnIndex, "search_floors", "faiss")
    w(approximate, "top_touched", "topk")
    w(cap.CapabilityIndex, "_similarities", "similarities")
    w(QRows, "scan_rows", "int8_rows")
    w(QRows, "scan", "int8_scan")
    w(ExampleBlocks, "best_of", "example")
    w(ExampleBlocks, "best", "example")
    w(SlotTable, "ids_at", "slot_ids")
    w(cap, "fuse_texts", "fuse")
    w(cap, "combine", "combine")
    w(scoring.QueryScores, "matches", "relevance")
    w(scoring.QueryScores, "match_slots", "relevance")
    w(Registry, "linked", "slot_link")
    w(Registry, "gate_mask", "gate_mask")
    w(Registry, "slots_of", "id_to_slot")
    w(Registry, "rank", "rank")
    w(Registry, "_entry", "entry")
    w(LiveIndex, "result_fields", "result_fields")
    w(SQLiteStore, "get_many", "store_read")
    w(disc, "canonicalize", "jcs")
    w(disc, "signature_object", "es256")
    shim = type("OrjsonShim", (), {})()
    shim.dumps = orjson.dumps
    shim.loads = orjson.loads
    w(shim, "dumps", "serialize")
    real = ans.app.orjson
    ans.app.orjson = shim  # type: ignore[assignment]
    stages.undo.append(lambda: setattr(ans.app, "orjson", real))


# -- in process ---------------------------------------------------------------------------


def envelopes(queries: list[str]) -> list[bytes]:
    """The DISCOVER bodies of ``queries`` (Task-ID ``t-<i>``, as the headers send)."""
    return [
        orjson.dumps({"method": "DISCOVER", "task_id": f"t-{i}", "parameters": params_of(q)})
        for i, q in enumerate(queries)
    ]


def in_process(
    data: Path,
    config_path: Path,
    jwks: Path,
    queries: list[str],
    first_seen: tuple[list[str], list[str]] | None = None,
) -> dict[str, Any]:
    """The passes above over ``queries``. With ``first_seen`` (two more sets of
    intents, disjoint from ``queries`` and from each other), also what an intent
    the server has never answered costs, once the passes over ``queries`` have
    warmed it as a server that has run a while: the first set answered once
    (the per-query total), the second once with the stage timers, every intent
    for the first time -- its query vectors, the BM25 impacts of words not seen
    before and the result fields of agents not returned before are not cached,
    as for most requests of a varied load."""
    from ans.app import AnsApp
    from ans.config import load
    from ans.gate import Credentials
    from ans.wiring import build_service

    config = load(config_path, data_dir=data, governance_jwks=(jwks,))
    built = build_service(config)
    try:
        app = AnsApp(built.service, built.gate)
        bodies = envelopes(queries)
        creds = Credentials(client_address="127.0.0.1")

        async def one_pass() -> tuple[list[int], list[bytes]]:
            cpu, answers = [], []
            for i, body in enumerate(bodies):
                headers = {**HEADERS, "task-id": f"t-{i}"}
                t0 = time.thread_time_ns()
                ans_ = await app.answer("DISCOVER", headers, body, creds)
                cpu.append(time.thread_time_ns() - t0)
                if ans_.status != 200:
                    raise RuntimeError(f"DISCOVER #{i} answered {ans_.status}: {ans_.body[:200]!r}")
                answers.append(ans_.body)
            return cpu, answers

        matcher = built.service.matcher
        # the cold embedding: the query-vector cache emptied, then every intent embedded once
        from ans.text import segments

        texts = [[q, *segments(q)] for q in queries]
        cache = getattr(matcher, "_queries", None)
        if cache is not None and hasattr(cache, "_cache"):
            cache._cache.clear()
        t0 = time.thread_time_ns()
        for t in texts:
            matcher.query_vectors(t)  # type: ignore[attr-defined]
        embed_cold = (time.thread_time_ns() - t0) / len(queries) / 1000.0
        def staged_pass() -> tuple[list[int], list[dict[str, Any]]]:
            """One pass with the stage timers: (CPU per query, the stage table)."""
            stages = Stages()
            instrument(stages)
            try:
                cpu, _ = asyncio.run(one_pass())
            finally:
                stages.restore()
            return cpu, stages.rows(len(bodies))

        asyncio.run(one_pass())  # warm-up
        totals, answers = asyncio.run(one_pass())
        staged, rows = staged_pass()
        novel: dict[str, Any] | None = None
        if first_seen is not None:
            first, second = first_seen
            bodies_warm = bodies
            bodies = envelopes(first)
            fresh, _ = asyncio.run(one_pass())
            bodies = envelopes(second)
            staged_fresh, fresh_rows = staged_pass()
            bodies = bodies_warm
            ordered_fresh = sorted(fresh)
            novel = {
                "queries": len(first),
                "cpu_us_mean": round(sum(fresh) / len(fresh) / 1000.0, 1),
                "cpu_us_p50": round(ordered_fresh[len(fresh) // 2] / 1000.0, 1),
                "instrumented_us_mean": round(sum(staged_fresh) / len(staged_fresh) / 1000.0, 1),
                "stages": fresh_rows,
            }
        top = []
        for body in answers:
            result = orjson.loads(body)["result"]
            ranked = [
                [r["canonical_id"], r["rank_score"], r["capability_match_score"]]
                for r in result["results"]
            ]
            # one digest per answer: the results file stays small; equal digests, equal top 10
            digest = hashlib.sha256(json.dumps(ranked, separators=(",", ":")).encode())
            top.append(digest.hexdigest()[:16])
        ordered = sorted(totals)
        return {
            "agents": len(built.service.index),
            "index": matcher.describe() if hasattr(matcher, "describe") else None,
            "queries": len(queries),
            "cpu_us_mean": round(sum(totals) / len(totals) / 1000.0, 1),
            "cpu_us_p50": round(ordered[len(ordered) // 2] / 1000.0, 1),
            "cpu_us_p90": round(ordered[int(len(ordered) * 0.9)] / 1000.0, 1),
            "instrumented_us_mean": round(sum(staged) / len(staged) / 1000.0, 1),
            "embed_cold_us_mean": round(embed_cold, 1),
            "answer_bytes_mean": round(sum(map(len, answers)) / len(answers)),
            "stages": rows,
            "top10": top,
            **({"first_seen": novel} if novel is not None else {}),
        }
    finally:
        if built.lock is not None:
            built.lock.release()
        built.service.store.close()


# -- over HTTP/2 ----------------------------------------------------------------------------


def cpu_per_request(pid: int, url: str, params: Path, duration: float) -> dict[str, Any]:
    run_client(url, params, concurrency=1, warmup=0, duration=min(2.0, duration))  # warm
    before = cpu_ms(pid)
    r = run_client(url, params, concurrency=1, warmup=0, duration=duration)
    after = cpu_ms(pid)
    n = int(r.get("n") or 0)
    if before is None or after is None or not n:
        return {"n": n, "cpu_us_per_request": None, "p50_ms": r.get("p50_ms")}
    return {
        "n": n,
        "non_200": r.get("non_200"),
        "cpu_us_per_request": round((after - before) * 1000.0 / n, 1),
        "rps": r.get("rps"),
        "p50_ms": r.get("p50_ms"),
    }


def over_http(
    data: Path, config: Path, jwks: Path, queries: list[str], duration: float, tmp: Path
) -> dict[str, Any]:
    params = tmp / "profile-params.jsonl"
    params.write_text("".join(json.dumps(params_of(q)) + "\n" for q in queries))
    srv = start_server(data, "--governance-jwks", str(jwks), "--config", str(config))
    floor = None
    try:
        wait_healthy(srv.url)
        status, body = discover_once(srv.url, params_of(queries[0]))
        if status != 200:
            raise RuntimeError(f"capture DISCOVER answered {status}")
        ours = cpu_per_request(srv.proc.pid, srv.url, params, duration)
        stop_server(srv)
        srv = None
        floor_body = tmp / "floor-body.json"
        floor_body.write_bytes(body)
        floor, floor_url = start_floor(floor_body, config)
        fl = cpu_per_request(floor.pid, floor_url, params, duration)
    finally:
        if srv is not None:
            stop_server(srv)
        if floor is not None:
            stop_proc(floor)
    out: dict[str, Any] = {"ans": ours, "floor": fl, "answer_bytes": len(body)}
    if ours["cpu_us_per_request"] and fl["cpu_us_per_request"]:
        out["ans_minus_floor_us"] = round(ours["cpu_us_per_request"] - fl["cpu_us_per_request"], 1)
    return out


# -- report --------------------------------------------------------------------------------


def table(label: str, sizes: dict[str, Any]) -> str:
    ns = list(sizes)
    lines = [f"## {label}", ""]
    meta = next(iter(sizes.values()))
    lines.append(f"{meta['queries']} distinct intents ({meta['intent_source']}), `limit` 10, "
                 f"commit `{meta['commit']}`, {meta['when']}.")
    lines.append("")
    head = "| | " + " | ".join(f"{n} agents" for n in ns) + " |"
    lines += [head, "|---|" + "---:|" * len(ns)]

    def row(name: str, get: Callable[[dict[str, Any]], Any]) -> None:
        vals = []
        for n in ns:
            try:
                v = get(sizes[n])
            except (KeyError, TypeError):
                v = None
            vals.append("" if v is None else f"{v:,}" if isinstance(v, (int, float)) else str(v))
        lines.append(f"| {name} | " + " | ".join(vals) + " |")

    row("**server CPU per DISCOVER over HTTP/2, µs** (ans serve, c=1)",
        lambda s: s["http"]["ans"]["cpu_us_per_request"])
    row("floor (hypercorn + HTTP/2, same answer), µs",
        lambda s: s["http"]["floor"]["cpu_us_per_request"])
    row("ANS minus floor, µs", lambda s: s["http"].get("ans_minus_floor_us"))
    row("in process: AnsApp.answer mean, µs", lambda s: s["cpu_us_mean"])
    row("in process: p50 / p90, µs", lambda s: f"{s['cpu_us_p50']:,} / {s['cpu_us_p90']:,}")
    row("cold query embedding (cache miss), µs", lambda s: s["embed_cold_us_mean"])
    row("in process, intents never answered before: mean / p50, µs",
        lambda s: f"{s['first_seen']['cpu_us_mean']:,} / {s['first_seen']['cpu_us_p50']:,}")
    lines += ["", "Stages (with timers; each costs ~1 µs): inclusive / self µs per query, "
              "calls per query.", ""]
    lines += ["| stage | " + " | ".join(f"{n}: incl / self (calls)" for n in ns) + " |",
              "|---|" + "---:|" * len(ns)]
    paths: list[str] = []
    for n in ns:
        for r in sizes[n]["stages"]:
            if r["stage"] not in paths:
                paths.append(r["stage"])
    seen = [n for n in ns if "first_seen" in sizes[n]]
    if seen:  # per size: the repeated intents' cells, then the first-seen ones'
        lines[-2] = ("| stage | " + " | ".join(
            f"{n}: incl / self (calls)" + (f" | {n}, first seen: incl / self" if n in seen else "")
            for n in ns) + " |")
        lines[-1] = "|---|" + "---:|" * (len(ns) + len(seen))
    for p in paths:
        depth = p.count("/")
        cells = []
        for n in ns:
            r = next((x for x in sizes[n]["stages"] if x["stage"] == p), None)
            cells.append("" if r is None else
                         f"{r['incl_us']:,} / {r['self_us']:,} ({r['calls_per_query']:g})")
            if n in seen:
                f = next((x for x in sizes[n]["first_seen"]["stages"] if x["stage"] == p), None)
                cells.append("" if f is None else f"{f['incl_us']:,} / {f['self_us']:,}")
        name = ("&nbsp;&nbsp;" * depth) + p.rsplit("/", 1)[-1]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write_doc(path: Path, label: str, text: str) -> None:
    head = ("# DISCOVER: server CPU per query, stage by stage\n\n"
            "Written by `bench/query_profile.py --doc` (see its docstring for the method). "
            "Each section is one run; the machine has 2 shared cores, so compare the "
            "figures of one run and the ratios, not single microseconds.\n\n")
    doc = path.read_text(encoding="utf-8") if path.is_file() else head
    marker = f"## {label}\n"
    if marker in doc:
        start = doc.index(marker)
        nxt = doc.find("\n## ", start + len(marker))
        doc = doc[:start] + text + ("" if nxt < 0 else doc[nxt:])
    else:
        doc = doc.rstrip("\n") + "\n\n" + text
    path.write_text(doc, encoding="utf-8")


def golden(report: dict[str, Any], old_path: Path) -> list[str]:
    """Compare every answer's top-10 digest with an earlier results file (over
    the queries both ran: the same intents in the same order)."""
    old = json.loads(old_path.read_text())
    problems = []
    for n, s in report["sizes"].items():
        o = old["sizes"].get(n)
        if o is None:
            continue
        pairs = list(zip(o["top10"], s["top10"], strict=False))
        differ = [i for i, (a, b) in enumerate(pairs) if a != b]
        if differ:
            problems.append(f"{n}: {len(pairs) - len(differ)}/{len(pairs)} identical top-10 "
                            f"answers; first difference at query {differ[0]}")
        else:
            log(f"{n}: {len(pairs)}/{len(pairs)} top-10 answers identical to {old_path}")
    return problems


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--agents", default="10000,100000")
    ap.add_argument("--queries", type=int, default=500)
    ap.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "ans-bench")
    ap.add_argument("--label", default="run")
    ap.add_argument("--http-duration", type=float, default=8.0, help="0: no HTTP/2 run")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--golden", type=Path, help="a previous results JSON: every top 10 must match")
    ap.add_argument("--doc", action="store_true", help="write the table to docs/query-profile.md")
    ap.add_argument("--first-seen", action="store_true",
                    help="also profile intents never answered before (2 x --queries more)")
    ap.add_argument("--domains", action="store_true",
                    help="every query names capability_domains (the load's sets, by intent)")
    args = ap.parse_args(argv)
    if args.domains:
        from tools.synth import CAPABILITY_DOMAIN_SETS

        global DOMAIN_SETS
        DOMAIN_SETS = tuple(list(x) for x in CAPABILITY_DOMAIN_SETS)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                            capture_output=True, text=True).stdout.strip()
    report: dict[str, Any] = {"label": args.label, "commit": commit,
                              "machine": f"{platform.machine()} {os.cpu_count()} cores",
                              "sizes": {}}
    for n in [int(x) for x in args.agents.split(",") if x]:
        catalog, data, config = prepare(n, args.cache)
        jwks = catalog / "governance.jwks.json"
        source, qs = intents(catalog, args.queries * (3 if args.first_seen else 1))
        fresh = None
        if args.first_seen:
            k = len(qs) // 3
            qs, fresh = qs[:k], (qs[k : 2 * k], qs[2 * k : 3 * k])
        log(f"N={n}: in process, {len(qs)} intents")
        res = in_process(data, config, jwks, qs, fresh)
        res.update(intent_source=source, commit=commit,
                   when=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
        if args.http_duration > 0:
            log(f"N={n}: over HTTP/2, {args.http_duration:g} s each for ANS and the floor")
            res["http"] = over_http(data, config, jwks, qs, args.http_duration, data.parent)
        report["sizes"][str(n)] = res
        log(f"N={n}: {res['cpu_us_mean']} µs in process; http {res.get('http')}")
    text = table(args.label, report["sizes"])
    print(text)
    out = args.out or ROOT / "bench" / "results" / f"query_profile-{args.label}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n")
    if args.doc:
        write_doc(ROOT / "docs" / "query-profile.md", args.label, text)
    if args.golden is not None:
        problems = golden(report, args.golden)
        for p in problems:
            print(f"GOLDEN: {p}", file=sys.stderr)
        return 1 if problems else 0
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
