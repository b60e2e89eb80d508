"""AGTP DISCOVER latency at 10k agents before and after the efficient-discovery
profile (issue 25), in one run; and the profile's JSON binding beside it.

    OPENBLAS_NUM_THREADS=1 .venv/bin/python bench/profile_http_latency.py [--baseline REF]

Two code versions serve the same catalog: ``baseline`` (a git worktree of
REF, default ``b1f032d``: main before issue 25, made under the cache
directory with a venv that borrows this venv's dependencies) and ``branch``
(this checkout). One run:

1. catalog: the 10k synthetic catalog of ``bench/load.py --quick`` (seed 1,
   cached under /tmp/ans-bench), ``ans import``-ed by each version into its
   own data directory;
2. intents: distinct intents of ``tools.synth.make_queries``, each sent as
   ``{"intent", "limit": 10}`` over HTTP/2 at c=1 (bench/h2client.py);
3. rounds: ``ans serve`` of one version, warm-up, every intent once, stop;
   then the other. Versions alternate A/B, B/A, ... so drift cancels. On the
   branch server, the same intents are then sent once more as profile
   requests (``POST /discovery/v1/discover`` with ``{"query", "limit": 10}``).
   Besides wall-clock latency, the server's CPU time (user + system, /proc)
   over the timed requests is divided by their number: on a shared, loaded
   machine that figure moves far less than the latency does.

Every answer must be 200; a sample is verified against the server's JWKS
(``ans.client.verify_discover_result``, query_digest included) on both
bindings. Exit 1 on any such error, never on timing. Prints a table; writes
bench/results/profile_http_latency.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

from h2client import AGENT_ID, Pool, RequestMaker, percentiles, scope_for  # bench/ on sys.path
from load import SERVER_CONFIG, ensure_catalog, machine, wait_healthy
from relevance_latency import distinct_intents

from ans.client import AgtpClient, verify_discover_result
from tools.launcher import RunningServer, cpu_ms, start_server, stop_server

ROOT = Path(__file__).resolve().parent.parent
COMMAND = "OPENBLAS_NUM_THREADS=1 .venv/bin/python bench/profile_http_latency.py"
VERSIONS = ("branch", "baseline")
TARGET_RATIO = 1.10
PROFILE_PATH = b"/discovery/v1/discover"


def log(msg: str) -> None:
    print(f"[profile-latency] {msg}", file=sys.stderr, flush=True)


def baseline_checkout(ref: str, cache: Path) -> Path:
    """A worktree of ``ref`` with a venv whose ``ans`` runs that code on this
    venv's dependencies (a .pth file), made once and reused."""
    sha = subprocess.run(["git", "-C", str(ROOT), "rev-parse", ref], check=True,
                         capture_output=True, text=True).stdout.strip()
    tree = cache / f"baseline-{sha[:12]}"
    ans = tree / ".venv/bin/ans"
    if ans.exists():
        return ans
    if tree.exists():
        shutil.rmtree(tree)
    subprocess.run(["git", "-C", str(ROOT), "worktree", "prune"], check=True)
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), sha],
                   check=True, capture_output=True)
    subprocess.run([sys.executable, "-m", "venv", str(tree / ".venv")], check=True)
    site = next((tree / ".venv/lib").glob("python3*/site-packages"))
    ours = next(Path(sys.prefix, "lib").glob("python3*/site-packages"))
    (site / "borrowed-deps.pth").write_text(str(ours) + "\n")
    subprocess.run([str(tree / ".venv/bin/python"), "-m", "pip", "install", "-q", "--no-deps",
                    "-e", str(tree)], check=True)
    return ans


def serve(ans: Path, data: Path, jwks: Path, config: Path) -> RunningServer:
    """``ans serve`` of the given executable (tools.launcher runs this venv's;
    the wrapper swaps in ``ans``)."""
    wrapper = ["/bin/sh", "-c", f'shift; exec "{ans}" "$@"', "sh"]
    srv = start_server(data, "--governance-jwks", str(jwks), "--config", str(config),
                       wrapper=wrapper)
    wait_healthy(srv.url)
    return srv


def profile_headers(authority: str, body: bytes, k: int) -> list[tuple[bytes, bytes]]:
    return [
        (b":method", b"POST"),
        (b":path", PROFILE_PATH),
        (b":scheme", b"http"),
        (b":authority", authority.encode()),
        (b"agent-id", f"{AGENT_ID}-0".encode()),
        (b"principal-id", b"bench-operator"),
        (b"authority-scope", b"discovery:query"),
        (b"task-id", f"t-prof-{k}".encode()),
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
    ]


async def measure(url: str, params: list[dict[str, Any]], warm: list[dict[str, Any]],
                  binding: str, sample_every: int) -> dict[str, Any]:
    """c=1 over one HTTP/2 connection; latencies of ``params`` only."""
    u = urlsplit(url)
    host, port = u.hostname or "127.0.0.1", u.port or 80
    pool = Pool(host, port, 1)
    maker = RequestMaker(f"{host}:{port}", post=False)
    lat: list[int] = []
    bad: list[str] = []
    samples: list[tuple[dict[str, Any], dict[str, Any]]] = []
    await pool.get(0)
    try:
        for timed, batch in ((False, warm), (True, params)):
            for k, p in enumerate(batch):
                if binding == "agtp":
                    raw = json.dumps(p, separators=(",", ":")).encode()
                    headers, body = maker.make("DISCOVER", raw, scope_for("DISCOVER", p), 0)
                    sent = p
                else:
                    sent = {"query": p["intent"], "limit": p["limit"]}
                    body = json.dumps(sent, separators=(",", ":")).encode()
                    headers = profile_headers(f"{host}:{port}", body, k)
                t0 = time.perf_counter_ns()
                status, resp = await pool.send(0, headers, body)
                t1 = time.perf_counter_ns()
                if status != 200:
                    bad.append(f"{status}: {resp[:200]!r}")
                    continue
                if not timed:
                    continue
                lat.append(t1 - t0)
                if k % sample_every == 0:
                    doc = json.loads(resp)
                    samples.append((doc["result"] if binding == "agtp" else doc, sent))
    finally:
        pool.close()
    return {"lat": lat, "bad": bad, "samples": samples}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", default="b1f032d", help="git ref of the code before")
    ap.add_argument("--agents", type=int, default=10_000)
    ap.add_argument("--intents", type=int, default=1000, help="distinct timed intents per round")
    ap.add_argument("--warmup", type=int, default=60)
    ap.add_argument("--rounds", type=int, default=5, help="alternating rounds per version")
    ap.add_argument("--sample-every", type=int, default=40)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "ans-bench")
    ap.add_argument("--out", type=Path, default=ROOT / "bench/results/profile_http_latency.json")
    args = ap.parse_args(argv)
    args.cache.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()
    problems: list[str] = []

    ans_of = {"branch": Path(sys.executable).with_name("ans"),
              "baseline": baseline_checkout(args.baseline, args.cache)}
    catalog, _ = ensure_catalog(args.agents, args.seed, args.cache, "tools.synth")
    jwks_path = catalog / "governance.jwks.json"
    run = args.cache / f"profile-latency-{args.agents}"
    run.mkdir(parents=True, exist_ok=True)
    config = run / "ans.toml"
    config.write_text(SERVER_CONFIG)
    data = {}
    for v in VERSIONS:
        data[v] = run / f"data-{v}"
        if data[v].exists():
            shutil.rmtree(data[v])
        log(f"{v}: importing {args.agents} agents")
        r = subprocess.run([str(ans_of[v]), "import", "--data-dir", str(data[v]),
                            "--governance-jwks", str(jwks_path), str(catalog / "agents.jsonl")],
                           stdout=subprocess.PIPE, text=True)
        if r.returncode != 0:
            raise SystemExit(f"{v}: ans import failed ({r.returncode}): {r.stdout[-500:]}")

    texts = distinct_intents(args.intents + args.warmup, seed=args.seed + 1000)
    warm = [{"intent": t, "limit": 10} for t in texts[args.intents:]]
    timed = [{"intent": t, "limit": 10} for t in texts[: args.intents]]
    series = ("branch", "baseline", "profile")
    lat: dict[str, list[int]] = {s: [] for s in series}
    verified = {s: 0 for s in series}
    cpu = {s: 0.0 for s in series}  # server CPU (user + system) over the timed requests
    served = {s: 0 for s in series}
    rounds: list[dict[str, Any]] = []
    for rnd in range(args.rounds):
        order = VERSIONS if rnd % 2 == 0 else VERSIONS[::-1]
        shuffled = timed[:]
        random.Random(f"profile-latency:{rnd}").shuffle(shuffled)
        row: dict[str, Any] = {"round": rnd, "order": list(order)}
        for v in order:
            srv = serve(ans_of[v], data[v], jwks_path, config)
            try:
                with AgtpClient(srv.url, agent_id="agtp://bench.example/agents/p",
                                principal_id="bench", scope="discovery:query") as c:
                    jwks = c.jwks()
                runs = [("agtp", v)] + ([("json", "profile")] if v == "branch" else [])
                for binding, name in runs:
                    asyncio.run(measure(srv.url, [], warm, binding, args.sample_every))
                    cpu0 = cpu_ms(srv.proc.pid)
                    m = asyncio.run(measure(srv.url, shuffled, [], binding, args.sample_every))
                    cpu1 = cpu_ms(srv.proc.pid)
                    if cpu0 is not None and cpu1 is not None and m["lat"]:
                        cpu[name] += cpu1 - cpu0
                        served[name] += len(m["lat"])
                    if m["bad"]:
                        problems.append(f"{name} round {rnd}: {len(m['bad'])} non-200, "
                                        f"e.g. {m['bad'][0]}")
                    for result, sent in m["samples"]:
                        try:
                            verify_discover_result(result, jwks, sent)
                            verified[name] += 1
                        except Exception as exc:
                            problems.append(f"{name} round {rnd}: signature: {exc}")
                    lat[name] += m["lat"]
                    row[name] = percentiles(m["lat"])
                    if cpu0 is not None and cpu1 is not None and m["lat"]:
                        row[name]["server_cpu_ms_per_request"] = round(
                            (cpu1 - cpu0) / len(m["lat"]), 3
                        )
                    log(f"round {rnd} {name}: p50 {row[name]['p50_ms']} ms, server CPU "
                        f"{row[name].get('server_cpu_ms_per_request')} ms/request")
            finally:
                stop_server(srv)
        a, b = row["branch"]["p50_ms"], row["baseline"]["p50_ms"]
        row["p50_ratio"] = round(a / b, 4) if a and b else None
        rounds.append(row)

    stats = {s: {"n": len(lat[s]), **percentiles(lat[s]), "signatures_verified": verified[s],
                 "server_cpu_ms_per_request": round(cpu[s] / served[s], 3) if served[s] else None}
             for s in series}
    for s in series:
        if verified[s] == 0:
            problems.append(f"{s}: no answer was verified")
    a, b = stats["branch"]["p50_ms"], stats["baseline"]["p50_ms"]
    ratio = round(a / b, 4) if a and b else None
    ca = stats["branch"]["server_cpu_ms_per_request"]
    cb = stats["baseline"]["server_cpu_ms_per_request"]
    cpu_ratio = round(ca / cb, 4) if ca and cb else None
    round_ratios = sorted(r["p50_ratio"] for r in rounds if r["p50_ratio"] is not None)
    median_round_ratio = round_ratios[len(round_ratios) // 2] if round_ratios else None
    baseline_sha = subprocess.run(["git", "-C", str(ROOT), "rev-parse", args.baseline],
                                  capture_output=True, text=True).stdout.strip()
    branch_sha = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"],
                                capture_output=True, text=True).stdout.strip()
    results = {
        "benchmark": "AGTP DISCOVER latency before/after issue 25 (bench/profile_http_latency.py)",
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": COMMAND + (" " + " ".join(argv if argv is not None else sys.argv[1:])).rstrip(),
        "machine": {**machine(), "loadavg_at_end": os.getloadavg()},
        "versions": {"baseline": baseline_sha, "branch": branch_sha},
        "sizes": {"agents": args.agents, "distinct_intents": len(timed), "warmup": len(warm),
                  "rounds": args.rounds, "limit": 10, "concurrency": 1},
        "settings": {"server_config": SERVER_CONFIG.strip(),
                     "client": "h2client.py Pool, raw engine (h2c, 1 connection, in-process)"},
        "latency": stats,
        "rounds": rounds,
        "p50_ratio_branch_over_baseline": ratio,
        "median_round_p50_ratio": median_round_ratio,
        "server_cpu_ratio_branch_over_baseline": cpu_ratio,
        "target_ratio": TARGET_RATIO,
        "target_met": None if ratio is None else ratio <= TARGET_RATIO,
        "wall_s": round(time.perf_counter() - t_start, 1),
        "problems": problems,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    print(f"{args.agents} agents, {len(timed)} distinct intents x {args.rounds} rounds, c=1, "
          "limit 10, HTTP/2")
    print("series                      p50 ms  p90 ms  p99 ms  verified  server CPU ms/req")
    names = {"baseline": f"AGTP DISCOVER {baseline_sha[:7]}",
             "branch": f"AGTP DISCOVER {branch_sha[:7]}",
             "profile": f"POST profile {branch_sha[:7]}"}
    for s in ("baseline", "branch", "profile"):
        st = stats[s]
        print(f"{names[s]:<26} {st['p50_ms']:>7} {st['p90_ms']:>7} {st['p99_ms']:>7} "
              f"{st['signatures_verified']:>9} {st['server_cpu_ms_per_request']:>18}")
    print(f"p50 branch/baseline: {ratio} (target <= {TARGET_RATIO}); per round: "
          f"{[r['p50_ratio'] for r in rounds]} (median {median_round_ratio}); "
          f"server CPU per request branch/baseline: {cpu_ratio}")
    print(f"results: {args.out}")
    if problems:
        print("\nERRORS:", *problems, sep="\n  - ", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
