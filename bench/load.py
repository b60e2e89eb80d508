"""The ANS load benchmark (issue 5): the real server against a floor, per catalog size.

    .venv/bin/python bench/load.py --agents 10000,100000 [--quick] [--out bench/results/load.json]

Per catalog size N:

1. catalog: ``python -m tools.synth --agents N --seed S --out DIR``, cached
   under ``--cache`` (default /tmp/ans-bench) by N and seed;
2. load: ``ans import`` into a fresh data dir (or, while that command is
   absent, ACTIVATE over HTTP/2 from the load client at concurrency 16);
   agents/s;
3. cold start: ``ans serve`` (rate limit off, the catalog's governance JWKS
   trusted) from spawn to the first 200 on ``GET /healthz``;
4. for each concurrency level (1, 16, 64; ``--quick``: 1, 16): the load
   client (bench/h2client.py, its own process) against ANS, then against the
   floor (bench/floor_app.py: same hypercorn settings, answers with a real
   signed DISCOVER body captured from ANS at the start); ratio ours/floor;
5. ACTIVATE throughput (fresh agents signed before the clock starts, at
   concurrency 16) and ACTIVATE-to-visibility for 50 unique agents;
6. peak RSS of the server (VmHWM).

Signatures of a sample of DISCOVER answers are verified against the
server's ``/.well-known/jwks.json`` (and their ``query_digest`` against the
parameters sent). Exit status 1 on errors only (non-200 answers, client
errors, a crashed server, a signature that does not verify), never on timing.
Writes the results JSON (``--out``) and prints a table with the issue's
targets next to what was measured.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import httpx
from ans.governance.keys import TrustedKeys
from ans.governance.signing import RESULT_SIGNATURE_FIELD, verify_document
from ans.protocol.messages import query_digest
from report import size_label  # bench/ is on sys.path when run as a script

from tools.launcher import RunningServer, cpu_ms, start_server, stop_server

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
PY = sys.executable
ANS = str(Path(sys.executable).with_name("ans"))
# no rate limit (the client floods on purpose); no index freshness (synthetic agents
# have no endpoints to DESCRIBE)
SERVER_CONFIG = "[rate_limit]\nenabled = false\n\n[freshness]\nenabled = false\n"
VISIBILITY_AGENTS = 50
SAMPLE = 20
TARGETS_DOC = "issue 5 targets (2-core machine, default embedder)"


def log(msg: str) -> None:
    print(f"[load] {msg}", file=sys.stderr, flush=True)


# -- catalog -------------------------------------------------------------------------


def synth_module() -> tuple[Any, str]:
    """The catalog generator: ``tools.synth`` (formats and API in its docstring)."""
    return importlib.import_module("tools.synth"), "tools.synth"


def ensure_catalog(n: int, seed: int, cache: Path, source: str) -> tuple[Path, float | None]:
    out = cache / f"catalog-synth-{n}-s{seed}"
    done = out / ".complete"
    if done.is_file():
        return out, None
    if out.exists():
        shutil.rmtree(out)
    cmd = [PY, "-m", source, "--agents", str(n), "--seed", str(seed), "--out", str(out)]
    log(f"generating catalog: {' '.join(cmd[1:])}")
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, cwd=ROOT)  # tools/ is importable from the project root
    took = time.perf_counter() - t0
    for name in ("agents.jsonl", "queries.jsonl", "governance.jwks.json"):
        if not (out / name).is_file():
            raise SystemExit(f"load: catalog generator did not write {out / name}")
    done.write_text(f"{took:.3f}\n")
    return out, took


def has_import_command() -> bool:
    r = subprocess.run([ANS, "import", "--help"], capture_output=True, text=True)
    return r.returncode == 0


# -- processes -------------------------------------------------------------------------


# bench/h2client.py's connection engine (``--engine``): "raw" (bench/h2raw.py, its own
# frames: ~45 us of client CPU a request) or "h2" (the h2 library: ~200-250 us)
CLIENT_ENGINE = "raw"


def run_client(url: str, params: Path, **opts: Any) -> dict[str, Any]:
    """Run bench/h2client.py in its own process; return its JSON."""
    cmd = [PY, str(BENCH / "h2client.py"), "--url", url, "--params", str(params)]
    opts.setdefault("engine", CLIENT_ENGINE)
    for k, v in opts.items():
        if v is None or v is False:
            continue
        cmd.append("--" + k.replace("_", "-"))
        if v is not True:
            cmd.append(str(v))
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=7200)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        raise RuntimeError(f"h2client failed ({r.returncode}): {r.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def wait_healthy(url: str, timeout: float = 600.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    with httpx.Client(timeout=5.0) as client:
        while time.monotonic() < deadline:
            try:
                r = client.get(f"{url}/healthz")
                if r.status_code == 200:
                    doc: dict[str, Any] = r.json()
                    return doc
            except httpx.HTTPError:
                pass
            time.sleep(0.02)
    raise RuntimeError(f"{url}/healthz never answered 200")


def start_ans(
    data: Path, jwks: Path, config: Path, workers: int = 1
) -> tuple[RunningServer, float, dict[str, Any]]:
    t0 = time.perf_counter()
    srv = start_server(data, "--governance-jwks", str(jwks), "--config", str(config),
                       "--workers", str(workers))
    health = wait_healthy(srv.url)
    return srv, time.perf_counter() - t0, health


def start_floor(
    body: Path, config: Path, workers: int = 1
) -> tuple[subprocess.Popen[str], str]:
    return floor_process(
        [PY, str(BENCH / "floor_app.py"), "--body", str(body), "--config", str(config),
         "--workers", str(workers)]
    )


def floor_process(cmd: list[str]) -> tuple[subprocess.Popen[str], str]:
    """Run a floor command; (the process, its URL) once it answers /healthz."""
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("FLOOR listening on "):
            url = line.split()[-1]
            wait_healthy(url, 30)
            return proc, url
    raise RuntimeError("the floor app did not start")


def stop_proc(proc: subprocess.Popen[str]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)


def process_tree(pid: int) -> list[int]:
    """``pid`` and its children (the workers of ``ans serve --workers N``)."""
    try:
        kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        kids = []
    return [pid, *(int(k) for k in kids)]


def tree_cpu_ms(pid: int) -> float:
    """User + system CPU of ``pid`` and its children so far, in ms."""
    return sum(cpu_ms(p) or 0.0 for p in process_tree(pid))


def process_tree_memory(pid: int) -> dict[str, Any]:
    """RSS, PSS (shared pages split between the processes that map them) and
    peak RSS of ``pid`` and its children (the workers of ``ans serve
    --workers N``), in MB; PSS summed is what the tree really holds."""
    procs = []
    for p in process_tree(pid):
        row: dict[str, Any] = {"pid": p}
        try:
            for line in Path(f"/proc/{p}/smaps_rollup").read_text().splitlines():
                key = line.split(":")[0]
                if key in ("Rss", "Pss"):
                    row[key.lower() + "_mb"] = round(int(line.split()[1]) / 1024, 1)
        except OSError:
            continue
        row["hwm_mb"] = vm_hwm_mb(p)
        procs.append(row)
    return {
        "processes": procs,
        "rss_total_mb": round(sum(r.get("rss_mb", 0) for r in procs), 1),
        "pss_total_mb": round(sum(r.get("pss_mb", 0) for r in procs), 1),
    }


def vm_hwm_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None


# -- verification ----------------------------------------------------------------------------


def discover_once(url: str, params: dict[str, Any]) -> tuple[int, bytes]:
    """One DISCOVER via POST /agtp (HTTP/1.1), for capturing the floor's body."""
    scope = "discovery:query"
    if isinstance(params.get("governance_zone"), str):
        scope += " " + params["governance_zone"]
    body = json.dumps({"method": "DISCOVER", "task_id": "t-capture", "parameters": params})
    with httpx.Client(timeout=600.0) as client:
        r = client.post(
            f"{url}/agtp",
            content=body.encode(),
            headers={
                "agtp-method": "DISCOVER",
                "agtp-version": "AGTP/1.0",
                "agent-id": "agtp://bench.example/agents/capture",
                "principal-id": "bench-operator",
                "authority-scope": scope,
                "task-id": "t-capture",
                "content-type": "application/agtp+json",
            },
        )
    return r.status_code, r.content


def server_keys(url: str) -> TrustedKeys:
    with httpx.Client(timeout=10.0) as client:
        return TrustedKeys.from_jwks(client.get(f"{url}/.well-known/jwks.json").json())


def scan_batch_totals(url: str) -> tuple[float, float]:
    """(scans, DISCOVERs in them) so far, from ``ans_discover_scan_batch`` on
    /metrics (every worker's, in multiprocess mode); (0, 0) when absent."""
    from prometheus_client.parser import text_string_to_metric_families

    with httpx.Client(timeout=10.0) as client:
        text = client.get(f"{url}/metrics").text
    got = {"count": 0.0, "sum": 0.0}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            for part in got:
                if sample.name == f"ans_discover_scan_batch_{part}":
                    got[part] += sample.value
    return got["count"], got["sum"]


def scan_batch_summary(before: tuple[float, float], after: tuple[float, float]) -> dict[str, Any]:
    """How many DISCOVERs an exhaustive scan served on average over a run."""
    scans, discovers = after[0] - before[0], after[1] - before[1]
    return {"scans": int(scans), "discovers": int(discovers),
            "discovers_per_scan": round(discovers / scans, 2) if scans else None}


def verify_answer(body: bytes, params: dict[str, Any], keys: TrustedKeys) -> str | None:
    """None when the signed result verifies and binds these parameters."""
    try:
        result = json.loads(body)["result"]
        verify_document(result, keys, RESULT_SIGNATURE_FIELD)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    if result.get("query_digest") != query_digest(params):
        return "query_digest does not match the parameters sent"
    return None


def verify_samples(path: Path, queries: list[dict[str, Any]], keys: TrustedKeys) -> dict[str, Any]:
    checked, failures = 0, []
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            s = json.loads(line)
            problem = verify_answer(s["body"].encode(), queries[s["index"]], keys)
            checked += 1
            if problem:
                failures.append(problem)
    return {"checked": checked, "failed": len(failures), "failures": failures[:5]}


# -- h2load cross-check (optional) ------------------------------------------------------------


def run_h2load(url: str, params: dict[str, Any], c: int, duration: float, tmp: Path) -> Any:
    exe = shutil.which("h2load")
    if exe is None:
        return "not run: h2load (Debian nghttp2-client) is not on PATH"
    body = tmp / "h2load-body.json"
    body.write_text(json.dumps({"method": "DISCOVER", "task_id": "t-h2load", "parameters": params}))
    conns = min(c, 4)
    cmd = [
        exe, "-c", str(conns), "-m", str(max(1, c // conns)), "-D", str(int(max(1, duration))),
        "-d", str(body), "-H", "agtp-method: DISCOVER", "-H", "agtp-version: AGTP/1.0",
        "-H", "agent-id: agtp://bench.example/agents/h2load", "-H", "principal-id: bench",
        "-H", "authority-scope: discovery:query", "-H", "content-type: application/agtp+json",
        f"{url}/agtp",
    ]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=duration + 120)
    out: dict[str, Any] = {"command": " ".join(cmd[1:]), "returncode": r.returncode}
    for line in r.stdout.splitlines():
        if line.startswith("finished in"):
            out["summary"] = line.strip()
            try:
                out["rps"] = float(line.split(",")[1].split()[0])
            except (IndexError, ValueError):
                pass
        if line.startswith("status codes:"):
            out["status_codes"] = line.strip()
    return out


# -- one catalog size -------------------------------------------------------------------------


def fresh_agents(
    synth: Any, key: Any, start: int, count: int, path: Path, with_intent: bool
) -> None:
    """Sign ``count`` unique agents (before any clock starts) into JSONL."""
    with path.open("w", encoding="utf-8") as fh:
        for j in range(count):
            params, intent = synth.unique_agent(start + j, key)
            if with_intent:
                row = {"activate": params, "intent": intent,
                       "canonical_id": params["manifest"]["canonical_id"]}
            else:
                row = params
            fh.write(json.dumps(row, separators=(",", ":")) + "\n")


def client_problems(tag: str, r: dict[str, Any]) -> list[str]:
    out = []
    if r.get("non_200"):
        out.append(f"{tag}: non-200 answers {r['non_200']} e.g. {r.get('bad_samples', [])[:1]}")
    if r.get("errors"):
        out.append(f"{tag}: client errors {r['errors']}")
    if not r.get("n"):
        out.append(f"{tag}: no request completed in the timed period")
    return out


# DISCOVER parameter objects of the load: >= 1,000 distinct intents (issue 26),
# each request's drawn at random by bench/h2client.py.
LOAD_QUERIES = 2000


def load_params(catalog: Path, seed: int, synth: Any) -> Path:
    """The load's parameters file beside the catalog: ``LOAD_QUERIES`` queries of
    the catalog generator's mix (written once; the catalog's own 500 stay as
    they are for the other benchmarks)."""
    path = catalog / f"queries-load-{LOAD_QUERIES}.jsonl"
    if not path.is_file():
        rows = synth.make_queries(LOAD_QUERIES, seed)
        tmp = path.with_suffix(".tmp")
        tmp.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        tmp.replace(path)
    return path


def import_catalog(
    run: Path, catalog: Path, n: int, reuse_import: bool
) -> tuple[dict[str, Any], list[str]]:
    """Load the catalog into ``run``/data (``ans import``, or ACTIVATE over HTTP/2
    where that command is absent) and write ``run``/ans.toml; with
    ``reuse_import``, keep a finished import of an earlier run. Returns how the
    import went and its problems."""
    problems: list[str] = []
    jwks = catalog / "governance.jwks.json"
    marker = run / "data" / ".imported.json"
    reuse = reuse_import and marker.is_file()
    if run.exists() and not reuse:
        shutil.rmtree(run)
    run.mkdir(parents=True, exist_ok=True)
    data = run / "data"
    config = run / "ans.toml"
    config.write_text(SERVER_CONFIG)
    info: dict[str, Any]
    if reuse:
        info = json.loads(marker.read_text())
        info["reused"] = True
        log(f"reusing the import in {data} ({info})")
    elif has_import_command():
        cmd = [ANS, "import", "--data-dir", str(data), "--governance-jwks", str(jwks),
               str(catalog / "agents.jsonl")]
        log(f"importing {n} agents: ans {' '.join(cmd[1:])}")
        t0 = time.perf_counter()
        r = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)  # progress bar on stderr
        took = time.perf_counter() - t0
        if r.returncode != 0:
            problems.append(f"ans import failed ({r.returncode}): {r.stdout[-500:]}")
        info = {"method": "ans import", "agents": n, "seconds": round(took, 2),
                "agents_per_s": round(n / took, 1)}
        if r.returncode == 0:
            marker.write_text(json.dumps(info))
    else:
        log(f"'ans import' is absent: ACTIVATE {n} agents over HTTP/2 at c=16")
        srv, _, _ = start_ans(data, jwks, config)
        try:
            r_act = run_client(srv.url, catalog / "agents.jsonl", mode="activate",
                               concurrency=16)
        finally:
            stop_server(srv)
        problems += client_problems("import (HTTP ACTIVATE)", r_act)
        info = {"method": "ACTIVATE over HTTP/2, c=16 ('ans import' absent)",
                "agents": r_act["n"], "seconds": r_act["duration_s"],
                "agents_per_s": r_act["rps"]}
    return info, problems


def bench_size(n: int, args: argparse.Namespace, synth: Any, source: str) -> dict[str, Any]:
    res: dict[str, Any] = {"agents": n}
    problems: list[str] = []
    catalog, gen_s = ensure_catalog(n, args.seed, args.cache, source)
    res["catalog"] = {"source": source, "dir": str(catalog), "generate_s": gen_s}
    jwks = catalog / "governance.jwks.json"
    params = load_params(catalog, args.seed, synth)
    queries = [json.loads(x) for x in params.read_text().splitlines() if x]
    intents = {q["intent"] for q in queries if isinstance(q.get("intent"), str)}
    res["params"] = {"file": params.name, "queries": len(queries),
                     "distinct_intents": len(intents), "draw": "random per request"}
    run = args.cache / f"run-{n}"
    data = run / "data"
    config = run / "ans.toml"
    res["import"], import_problems = import_catalog(run, catalog, n, args.reuse_import)
    problems += import_problems
    log(f"import: {res['import']['agents_per_s']} agents/s")

    # -- cold start
    srv, cold, health = start_ans(data, jwks, config, args.workers)
    res["workers"] = args.workers
    res["cold_start_s"] = round(cold, 2)
    res["healthz_agents"] = health.get("agents")
    log(f"cold start {cold:.2f} s, {health.get('agents')} agents")
    served = health.get("agents")
    if res["import"].get("reused") and isinstance(served, int) and served > n:
        # a reused data dir keeps the agents earlier runs ACTIVATEd (--activate-agents
        # plus the visibility agents each time): expected, not an error
        res["activated_by_earlier_runs"] = served - n
        log(f"the reused data dir also holds {served - n} agents earlier runs ACTIVATEd")
    elif served != n:
        problems.append(f"server reports {served} agents after loading {n}")
    floor = None
    try:
        keys = server_keys(srv.url)
        status, body = discover_once(srv.url, queries[0])
        if status != 200:
            raise RuntimeError(f"capture DISCOVER answered {status}: {body[:300]!r}")
        bad = verify_answer(body, queries[0], keys)
        if bad:
            problems.append(f"captured answer does not verify: {bad}")
        floor_body = run / "floor-body.json"
        floor_body.write_bytes(body)
        res["response_bytes"] = len(body)
        floor, floor_url = start_floor(floor_body, config, args.workers)
        levels: dict[str, Any] = {}
        sig: dict[str, Any] = {"checked": 0, "failed": 0, "failures": []}
        for c in args.levels:
            common = {"concurrency": c, "warmup": args.warmup, "duration": args.duration,
                      "connections": args.connections}
            sample = run / f"samples-c{c}.jsonl"
            log(f"N={n} c={c}: ours")
            batches0 = scan_batch_totals(srv.url)
            cpu0, t0 = tree_cpu_ms(srv.proc.pid), time.monotonic()
            ours = run_client(srv.url, params, sample=SAMPLE,
                              sample_out=sample, **common)
            # the server's CPU over the run (warm-up included): how many cores it
            # kept busy, and per request -- what the client left it, and its cost
            busy = (tree_cpu_ms(srv.proc.pid) - cpu0) / 1000.0 / (time.monotonic() - t0)
            ours["server_cores_busy"] = round(busy, 3)
            if ours.get("rps"):
                ours["server_cpu_ms_per_request"] = round(busy / ours["rps"] * 1000.0, 3)
            # warm-up included, as the CPU figure; no scans above exact_max
            ours["scan_batch"] = scan_batch_summary(batches0, scan_batch_totals(srv.url))
            log(f"N={n} c={c}: floor")
            fl = run_client(floor_url, params, **common)
            problems += client_problems(f"N={n} c={c} ours", ours)
            problems += client_problems(f"N={n} c={c} floor", fl)
            v = verify_samples(sample, queries, keys)
            sig["checked"] += v["checked"]
            sig["failed"] += v["failed"]
            sig["failures"] += v["failures"]
            ratio = (round(ours["rps"] / fl["rps"], 4) if ours.get("rps") and fl.get("rps")
                     else None)
            levels[str(c)] = {"ours": ours, "floor": fl, "ratio": ratio}
            if args.h2load and not args.quick:
                levels[str(c)]["h2load_ours"] = run_h2load(srv.url, queries[0], c,
                                                           args.duration, run)
            log(f"N={n} c={c}: ours {ours['rps']} rps p50 {ours['p50_ms']} ms "
                f"(server {ours.get('server_cpu_ms_per_request')} ms CPU a request, "
                f"{ours['server_cores_busy']} cores busy, "
                f"{ours['scan_batch']['discovers_per_scan']} DISCOVERs a scan; client "
                f"{ours.get('client_cores_busy')} cores), floor {fl['rps']} rps "
                f"(client {fl.get('client_cores_busy')} cores), ratio {ratio}")
        res["levels"] = levels
        res["signatures"] = sig
        if sig["failed"]:
            problems.append(f"{sig['failed']} of {sig['checked']} sampled signatures failed: "
                            f"{sig['failures'][:2]}")
        if sig["checked"] == 0:
            problems.append("no DISCOVER answer was sampled for signature verification")

        # -- ACTIVATE throughput and visibility (agents signed before timing)
        key = synth.load_or_create_key(catalog)
        fresh = run / "fresh-agents.jsonl"
        fresh_agents(synth, key, 10_000_000, args.activate_agents, fresh, with_intent=False)
        vis = run / "visibility.jsonl"
        fresh_agents(synth, key, 20_000_000, VISIBILITY_AGENTS, vis, with_intent=True)
        log(f"N={n}: ACTIVATE {args.activate_agents} fresh agents at c=16")
        act = run_client(srv.url, fresh, mode="activate", concurrency=16)
        problems += client_problems(f"N={n} ACTIVATE", act)
        res["activate"] = act
        log(f"N={n}: ACTIVATE -> visibility for {VISIBILITY_AGENTS} agents")
        visr = run_client(srv.url, vis, mode="visibility")
        res["visibility"] = visr
        if visr.get("failures"):
            problems.append(f"N={n} visibility: {visr['failures']}")
        if srv.proc.poll() is not None:
            problems.append(f"N={n}: the server exited ({srv.proc.returncode})")
        res["peak_rss_mb"] = vm_hwm_mb(srv.proc.pid)
        res["memory"] = process_tree_memory(srv.proc.pid)
    finally:
        if floor is not None:
            stop_proc(floor)
        crashed = srv.proc.poll() is not None
        stop_server(srv)
        if crashed:
            problems.append(f"N={n}: server exited early:\n{''.join(srv.output[-20:])}")
    res["problems"] = problems
    return res


# -- report ---------------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    ram_gb = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                ram_gb = round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    versions: dict[str, str | None] = {}
    for dist in ("ans-agtp", "hypercorn", "h2", "faiss-cpu", "wordllama", "numpy", "orjson",
                 "cryptography"):
        try:
            versions[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            versions[dist] = None
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    dirty = bool(subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain"],
                                capture_output=True, text=True).stdout.strip())
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "ram_gb": ram_gb,
        "os": platform.platform(),
        "python": platform.python_version(),
        "packages": versions,
        "git_commit": commit + ("-dirty" if dirty else ""),
        "h2load": shutil.which("h2load"),
    }


def _get(sizes: dict[str, Any], n: int, *path: str) -> Any:
    cur: Any = sizes.get(str(n))
    for p in path:
        if not isinstance(cur, dict):
            return None
        cur = cur.get(p)
    return cur


def targets(sizes: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's targets next to what this run measured (None: not measured here)."""
    largest = max((int(k) for k in sizes), default=None)
    out = []

    def add(name: str, goal: str, value: Any, ok: bool | None, where: str) -> None:
        out.append({"target": name, "goal": goal, "measured": value, "met": ok, "at": where})

    r = _get(sizes, 100_000, "levels", "16", "ratio")
    add("100k c=16 throughput vs floor", ">= 0.5x", r, None if r is None else r >= 0.5, "100k")
    p = _get(sizes, 100_000, "levels", "1", "ours", "p50_ms")
    add("100k c=1 p50", "<= 5 ms", p, None if p is None else p <= 5, "100k")
    p = _get(sizes, 1_000_000, "levels", "1", "ours", "p99_ms")
    add("1M c=1 p99", "<= 50 ms", p, None if p is None else p <= 50, "1M")
    add("1M approximate-index recall@50", ">= 0.98", None, None, "measured by the index bench")
    m = _get(sizes, 1_000_000, "peak_rss_mb")
    add("1M peak RSS", "<= 3072 MB", m, None if m is None else m <= 3072, "1M")
    if largest is not None:
        where = size_label(largest)
        cs = _get(sizes, largest, "cold_start_s")
        add("cold start", "<= 20 s", cs, None if cs is None else cs <= 20, where)
        imp = _get(sizes, largest, "import", "agents_per_s")
        method = _get(sizes, largest, "import", "method")
        add("import" + (" (HTTP ACTIVATE)" if method and "HTTP" in method else ""),
            ">= 2000 agents/s", imp,
            None if imp is None else imp >= 2000, where)
        vis = _get(sizes, largest, "visibility", "max_ms")
        add("ACTIVATE -> visibility (max of 50)", "<= 100 ms", vis,
            None if vis is None else vis <= 100, where)
    return out


def fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"
    return str(v)


def table(results: dict[str, Any]) -> str:
    rows = ["agents   c  | ours rps  p50    p90    p99 ms | floor rps p50   p90   p99 ms | ratio"]
    for n, s in results["sizes"].items():
        for c, lv in s.get("levels", {}).items():
            o, f = lv["ours"], lv["floor"]
            rows.append(
                f"{n:>8} {c:>3} | {fmt(o['rps']):>8} {fmt(o['p50_ms']):>6} {fmt(o['p90_ms']):>6} "
                f"{fmt(o['p99_ms']):>6} | {fmt(f['rps']):>8} {fmt(f['p50_ms']):>5} "
                f"{fmt(f['p90_ms']):>5} {fmt(f['p99_ms']):>5} | {fmt(lv['ratio'])}"
            )
    rows.append("")
    rows.append("agents   import/s  cold s  ACTIVATE/s  visible p50/max ms  peak RSS MB")
    for n, s in results["sizes"].items():
        vis = s.get("visibility", {})
        rows.append(
            f"{n:>8} {fmt(_get(results['sizes'], int(n), 'import', 'agents_per_s')):>9} "
            f"{fmt(s.get('cold_start_s')):>7} {fmt(s.get('activate', {}).get('rps')):>11} "
            f"{fmt(vis.get('p50_ms')):>9}/{fmt(vis.get('max_ms')):<9} "
            f"{fmt(s.get('peak_rss_mb')):>11}"
        )
    rows.append("")
    rows.append(f"{TARGETS_DOC}:")
    for t in results["targets"]:
        met = {True: "met", False: "NOT met", None: "not measured"}[t["met"]]
        rows.append(f"  {t['target']:<44} {t['goal']:<18} measured {fmt(t['measured']):<8} "
                    f"({t['at']}) {met}")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--agents", default=None, help="catalog sizes, comma-separated")
    ap.add_argument("--quick", action="store_true",
                    help="CI: 10k agents, 2 s per level, c=1,16; fails only on errors")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--levels", default=None, help="concurrency levels (default 1,16,64)")
    ap.add_argument("--duration", type=float, default=None, help="timed s per level (10)")
    ap.add_argument("--warmup", type=float, default=None, help="warm-up s per level (2)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--activate-agents", type=int, default=None,
                    help="fresh agents for ACTIVATE throughput (2000; quick 300)")
    ap.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "ans-bench")
    ap.add_argument(
        "--reuse-import",
        action="store_true",
        help="keep a finished import of the same size from an earlier run (1M takes minutes)",
    )
    ap.add_argument(
        "--keep-other-sizes",
        action="store_true",
        help="carry over sizes this run does not measure from the existing --out file "
        "(each marked with the run it came from), so one size can be re-measured alone",
    )
    ap.add_argument("--workers", type=int, default=1,
                    help="ans serve --workers N, and the floor with as many processes (1)")
    ap.add_argument("--connections", type=int, default=None,
                    help="client TCP connections per level (default min(c, 4)); with "
                    "workers > 1 use enough for the kernel to spread them (e.g. 16)")
    ap.add_argument("--no-h2load", dest="h2load", action="store_false",
                    help="skip the h2load cross-check even if h2load is on PATH")
    ap.add_argument("--engine", choices=["raw", "h2"], default="raw",
                    help="the load client's HTTP/2 connections: raw (bench/h2raw.py, default) "
                    "or h2 (the h2 library; ~5x the client's CPU a request)")
    args = ap.parse_args(argv)
    global CLIENT_ENGINE
    CLIENT_ENGINE = args.engine
    q = args.quick
    args.agents = args.agents or "10000"
    sizes = [int(x) for x in args.agents.split(",") if x.strip()]
    args.levels = [int(x) for x in (args.levels or ("1,16" if q else "1,16,64")).split(",")]
    args.duration = args.duration if args.duration is not None else (2.0 if q else 10.0)
    args.warmup = args.warmup if args.warmup is not None else (1.0 if q else 2.0)
    args.activate_agents = args.activate_agents or (300 if q else 2000)
    args.out = args.out or ROOT / "bench" / "results" / ("load-quick.json" if q else "load.json")
    args.cache.mkdir(parents=True, exist_ok=True)
    synth, source = synth_module()
    log(f"catalog source: {source}; sizes {sizes}; levels {args.levels}; "
        f"{args.warmup} s warm-up + {args.duration} s per level")
    results: dict[str, Any] = {
        "benchmark": "ans load (bench/load.py)",
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": "bench/load.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "quick": q,
        "settings": {"levels": args.levels, "duration_s": args.duration,
                     "warmup_s": args.warmup, "seed": args.seed,
                     "activate_agents": args.activate_agents,
                     "visibility_agents": VISIBILITY_AGENTS, "catalog_source": source,
                     "client": f"bench/h2client.py --engine {args.engine} (h2c, "
                               f"{args.connections or 'min(c,4)'} connections)",
                     "workers": args.workers,
                     "server_config": SERVER_CONFIG.strip()},
        "machine": machine(),
        "sizes": {},
    }
    for n in sizes:
        try:
            results["sizes"][str(n)] = bench_size(n, args, synth, source)
        except Exception as exc:
            results["sizes"][str(n)] = {"agents": n, "problems": [f"{type(exc).__name__}: {exc}"]}
    if args.keep_other_sizes and args.out.is_file():
        earlier = json.loads(args.out.read_text(encoding="utf-8"))
        for key, entry in earlier.get("sizes", {}).items():
            if key not in results["sizes"]:
                entry.setdefault("carried_from", {
                    "generated_at": earlier.get("generated_at"),
                    "command": earlier.get("command"),
                })
                results["sizes"][key] = entry
        results["sizes"] = dict(sorted(results["sizes"].items(), key=lambda kv: int(kv[0])))
    results["targets"] = targets(results["sizes"])
    problems = [p for s in results["sizes"].values() for p in s.get("problems", [])]
    results["problems"] = problems
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    print(table(results))
    print(f"\nresults: {args.out}")
    if problems:
        print("\nERRORS:", file=sys.stderr)
        for p in problems:
            print(f"  - {p}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
