"""DISCOVER latency at 10k agents: this tree against a baseline tree (issue 25:
the efficient-discovery profile's fields must not slow DISCOVER by more than
10%), through the real HTTP/2 server, same run.

    OPENBLAS_NUM_THREADS=1 .venv/bin/python bench/profile_latency.py \\
        --baseline-python /work/main/.venv/bin/python

One data dir (the 10k synthetic catalog of ``bench/load.py --quick``, ``ans
import``-ed by this tree; the store and snapshot formats are the same in
both). Rounds alternate baseline/this, this/baseline, ... (drift cancels);
each starts ``ans serve`` from that tree (the baseline through its own
interpreter), warms up, sends every intent once at c=1 over HTTP/2
(``{"intent", "limit": 10}``, as bench/relevance_latency.py), stops. Then,
for information, this tree alone with the profile's fields
(``required_tags`` of a common tag, ``protocols: ["agtp"]``,
``preferred_tags``, ``constraints.max_results_age_seconds``). A sample of
answers is verified (signature and query digest). Exit 1 on an error, never
on timing. Writes bench/results/profile_latency.json.
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
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

from load import ANS, SERVER_CONFIG, ensure_catalog, machine, wait_healthy  # bench/ on sys.path
from relevance_latency import distinct_intents, measure, summary

from ans.client import AgtpClient, verify_discover_result
from tools.launcher import RunningServer, start_server, stop_server

ROOT = Path(__file__).resolve().parent.parent
COMMAND = "OPENBLAS_NUM_THREADS=1 .venv/bin/python bench/profile_latency.py"
TARGET_RATIO = 1.10


def log(msg: str) -> None:
    print(f"[profile] {msg}", file=sys.stderr, flush=True)


def start(data: Path, jwks: Path, config: Path, python: str | None) -> RunningServer:
    wrapper = [python] if python else []
    srv = start_server(data, "--governance-jwks", str(jwks), "--config", str(config),
                       wrapper=wrapper)
    wait_healthy(srv.url)
    return srv


def common_tag(catalog: Path) -> str:
    counts: Counter[str] = Counter()
    with (catalog / "agents.jsonl").open() as f:
        for k, line in enumerate(f):
            if k >= 2000:
                break
            caps = json.loads(line).get("capabilities", {})
            counts.update(t for t in caps.get("tags", []) if isinstance(t, str))
    return counts.most_common(1)[0][0]


def run_round(url: str, params: list[dict[str, Any]], warm: list[dict[str, Any]],
              sample_every: int, problems: list[str], label: str) -> dict[str, Any]:
    with AgtpClient(url, agent_id="agtp://bench.example/agents/p", principal_id="bench",
                    scope="discovery:query") as c:
        jwks = c.jwks()
    m = asyncio.run(measure(url, params, warm, sample_every))
    if m["bad"]:
        problems.append(f"{label}: {len(m['bad'])} non-200, e.g. {m['bad'][0]}")
    verified = 0
    for result, p in m["samples"]:
        try:
            verify_discover_result(result, jwks, p)
            verified += 1
        except Exception as exc:
            problems.append(f"{label}: signature: {type(exc).__name__}: {exc}")
    return {**m, "verified": verified}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline-python", required=True,
                    help="interpreter of the baseline tree's venv (runs its `ans serve`)")
    ap.add_argument("--agents", type=int, default=10_000)
    ap.add_argument("--intents", type=int, default=600)
    ap.add_argument("--warmup", type=int, default=60)
    ap.add_argument("--rounds", type=int, default=4, help="alternating rounds per tree")
    ap.add_argument("--sample-every", type=int, default=40)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "ans-bench")
    ap.add_argument("--out", type=Path, default=ROOT / "bench/results/profile_latency.json")
    args = ap.parse_args(argv)
    args.cache.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()
    problems: list[str] = []

    catalog, _ = ensure_catalog(args.agents, args.seed, args.cache, "tools.synth")
    jwks_path = catalog / "governance.jwks.json"
    run = args.cache / f"profile-{args.agents}"
    data = run / "data"
    if data.exists():
        shutil.rmtree(data)
    run.mkdir(parents=True, exist_ok=True)
    config = run / "ans.toml"
    config.write_text(SERVER_CONFIG)
    log(f"importing {args.agents} agents into {data}")
    r = subprocess.run([ANS, "import", "--data-dir", str(data), "--governance-jwks",
                        str(jwks_path), str(catalog / "agents.jsonl")],
                       stdout=subprocess.PIPE, text=True)
    if r.returncode != 0:
        raise SystemExit(f"ans import failed ({r.returncode}): {r.stdout[-500:]}")

    texts = distinct_intents(args.intents + args.warmup, seed=args.seed + 1000)
    warm = [{"intent": t, "limit": 10} for t in texts[args.intents:]]
    timed = [{"intent": t, "limit": 10} for t in texts[: args.intents]]
    trees = {"baseline": args.baseline_python, "this": None}
    per: dict[str, dict[str, list[int]]] = {t: {"lat": [], "returned": []} for t in trees}
    verified = dict.fromkeys(trees, 0)
    rounds = []
    for rnd in range(args.rounds):
        order = list(trees) if rnd % 2 == 0 else list(trees)[::-1]
        shuffled = timed[:]
        random.Random(f"profile-latency:{rnd}").shuffle(shuffled)
        row: dict[str, Any] = {"round": rnd, "order": order}
        for t in order:
            srv = start(data, jwks_path, config, trees[t])
            try:
                m = run_round(srv.url, shuffled, warm, args.sample_every, problems,
                              f"{t} round {rnd}")
            finally:
                stop_server(srv)
            row[f"{t}_cold_start"] = next(
                (ln.strip()[-400:] for ln in srv.output if "cold start" in ln), None
            )
            per[t]["lat"] += m["lat"]
            per[t]["returned"] += m["returned"]
            verified[t] += m["verified"]
            row[t] = summary(m["lat"], m["returned"])
            log(f"round {rnd} {t}: p50 {row[t]['p50_ms']} ms p99 {row[t]['p99_ms']} ms")
        a, b = row["this"]["p50_ms"], row["baseline"]["p50_ms"]
        row["p50_ratio"] = round(a / b, 4) if a and b else None
        rounds.append(row)

    # For information: this tree with the profile's fields.
    tag = common_tag(catalog)
    profile_params = [
        {**p, "required_tags": [tag], "protocols": ["agtp"], "preferred_tags": [tag],
         "constraints": {"max_results_age_seconds": 10 * 365 * 86400}}
        for p in timed
    ]
    srv = start(data, jwks_path, config, None)
    try:
        m = run_round(srv.url, profile_params, warm, args.sample_every, problems, "profile")
    finally:
        stop_server(srv)
    profile = {**summary(m["lat"], m["returned"]), "signatures_verified": m["verified"],
               "tag": tag}

    trees_out = {t: {**summary(per[t]["lat"], per[t]["returned"]),
                     "signatures_verified": verified[t]} for t in trees}
    for t in trees:
        if verified[t] == 0:
            problems.append(f"{t}: no answer was verified")
    this, base = trees_out["this"]["p50_ms"], trees_out["baseline"]["p50_ms"]
    ratio = round(this / base, 4) if this and base else None
    results = {
        "benchmark": "DISCOVER latency, this tree vs a baseline (bench/profile_latency.py)",
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": COMMAND + " " + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": {**machine(), "loadavg_at_end": os.getloadavg()},
        "sizes": {"agents": args.agents, "distinct_intents": len(timed), "warmup": len(warm),
                  "rounds_per_tree": args.rounds, "limit": 10, "concurrency": 1},
        "baseline_python": args.baseline_python,
        "trees": trees_out,
        "rounds": rounds,
        "p50_ratio_this_over_baseline": ratio,
        "target_ratio": TARGET_RATIO,
        "target_met": None if ratio is None else ratio <= TARGET_RATIO,
        "profile_fields_this_tree": profile,
        "wall_s": round(time.perf_counter() - t_start, 1),
        "problems": problems,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    print(f"{args.agents} agents, {len(timed)} intents x {args.rounds} rounds per tree, c=1")
    print("tree        p50 ms  p90 ms  p99 ms  mean results  verified")
    for t in trees:
        s = trees_out[t]
        print(f"{t:<10} {s['p50_ms']:>7} {s['p90_ms']:>7} {s['p99_ms']:>7} "
              f"{s['mean_results']:>13} {s['signatures_verified']:>9}")
    print(f"p50 this/baseline: {ratio} (target <= {TARGET_RATIO}); per round: "
          f"{[r['p50_ratio'] for r in rounds]}")
    print(f"with profile fields (this tree): p50 {profile['p50_ms']} ms, p99 "
          f"{profile['p99_ms']} ms, mean results {profile['mean_results']} (tag {tag!r})")
    print(f"results: {args.out}")
    if problems:
        print("\nERRORS:", *problems, sep="\n  - ", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
