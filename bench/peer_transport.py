"""Peer DISCOVER cost on both ends: HttpxTransport, H2PeerTransport, NativePeerTransport.

    .venv/bin/python bench/peer_transport.py   # writes bench/results/peer_transport.json

Starts one ``ans serve --demo --native-listen 127.0.0.1:0`` on loopback (rate
limit off) and sends it DISCOVERs one at a time, exactly as the federator
forwards them (the same headers, ``send(peer, "DISCOVER", url + "/", ...)``),
through three transports in this process: httpx and the lean h2 transport to
its HTTP/2 (h2c) URL, served by hypercorn + h2 + the ASGI app, and the native
transport to its native AGTP/1.0 framing URL (``agtp+cleartext://``), served
by the native listener in the same server process. After a warm-up
(connections open, the server's query-embedding cache hot for every intent),
``--requests`` DISCOVERs per transport are sent in blocks of ``--block``,
rotating the transports and which goes first (each transport takes every
position equally often), so that noise on this shared machine hits all alike.

Per transport it reports:

* the client CPU per request (``time.process_time`` over that transport's
  blocks: user + system time of this process only -- the server is another
  process);
* the server CPU per request (user + system time of the server process over
  that transport's blocks only, from ``/proc/<pid>/stat`` utime + stime, so in
  clock ticks, usually 10 ms, summed over the blocks; None where /proc is
  absent): what a peer pays per forwarded DISCOVER over HTTP/2 against the
  native framing. It includes the DISCOVER itself (the ranking and signing are
  the same for every transport), so the difference between transports is the
  transport's share. The server's idle CPU over one second is reported too, to
  show that background work does not blur it;
* the wall-clock latency per request (p50/p90/mean, which includes the
  server's work: its CPU figure above, ~1-2 ms here).

Every answer must be a 200 with the same result list for the same intent
through all three transports.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from importlib.metadata import version
from pathlib import Path
from typing import Any

import orjson
from ans.federation.h2transport import H2PeerTransport
from ans.federation.native_transport import NativePeerTransport
from ans.federation.peers import Peer
from ans.federation.transport import HttpxTransport, PeerTransport

from tools.launcher import cpu_ms, start_server, stop_server

ROOT = Path(__file__).resolve().parent.parent
MAX_BYTES = 4 * 1024 * 1024
SETTLE_S = 0.005  # after a block, before the CPU counters are read: the tail is that block's
INTENTS = (
    "book a flight to Berlin for next Tuesday",
    "translate a supplier contract into German",
    "summarize the quarterly sales figures",
    "schedule a meeting with the design team",
    "check these invoices for duplicate payments",
    "draft a reply to a customer complaint",
    "find the cheapest hotel near the conference venue",
    "review a pull request for security issues",
)
HEADERS = {  # what the federator sends (the budget and path vary there, not here)
    "agtp-version": "AGTP/1.0",
    "content-type": "application/agtp+json",
    "agent-id": "agtp://bench.example/agents/orchestrator",
    "principal-id": "bench",
    "authority-scope": "discovery:query",
    "agtp-federation-path": "bench-origin-kid",
    "agtp-federation-budget-ms": "2000",
}


def bodies() -> list[bytes]:
    return [
        orjson.dumps({"method": "DISCOVER", "parameters": {"intent": i, "limit": 10}})
        for i in INTENTS
    ]


async def block(
    transport: PeerTransport, peer: Peer, n: int, start: int, walls: list[float], server_pid: int
) -> tuple[float, float | None, list[bytes]]:
    """``n`` sequential DISCOVERs; returns (client CPU s, server CPU ms or None, answer bodies)."""
    payloads = bodies()
    url = peer.url + "/"
    answers: list[bytes] = []
    server0 = cpu_ms(server_pid)
    cpu0 = time.process_time()
    for k in range(start, start + n):
        t0 = time.perf_counter()
        reply = await transport.send(
            peer, "DISCOVER", url, HEADERS, payloads[k % len(payloads)], 10.0
        )
        walls.append(time.perf_counter() - t0)
        if reply.status != 200:
            raise SystemExit(f"peer_transport: DISCOVER answered {reply.status}")
        answers.append(reply.body)
    await asyncio.sleep(SETTLE_S)
    spent = time.process_time() - cpu0
    server1 = cpu_ms(server_pid)
    server = None if server0 is None or server1 is None else server1 - server0
    return spent, server, answers


def results_of(body: bytes) -> Any:
    return orjson.loads(body)["result"]["results"]


def ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else round(a / b, 2)


def saved(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else round(a - b, 3)


async def measure(
    url: str, native_url: str, server_pid: int, requests: int, size: int, warmup: int
) -> dict[str, Any]:
    h2_peer = Peer(url=url, tier=2)
    native_peer = Peer(url=native_url, tier=2)
    transports: dict[str, tuple[PeerTransport, Peer]] = {
        "httpx": (HttpxTransport(MAX_BYTES), h2_peer),
        "h2": (H2PeerTransport(MAX_BYTES), h2_peer),
        "native": (NativePeerTransport(MAX_BYTES), native_peer),
    }
    cpu = {name: 0.0 for name in transports}
    server_cpu: dict[str, float | None] = {name: 0.0 for name in transports}
    walls: dict[str, list[float]] = {name: [] for name in transports}
    reference: dict[int, Any] = {}
    answer_bytes: dict[str, list[int]] = {name: [] for name in transports}
    try:
        for name, (t, peer) in transports.items():  # connections, caches, JIT-free warm-up
            _, _, answers = await block(t, peer, warmup, 0, [], server_pid)
            for k, body in enumerate(answers):
                reference.setdefault(k % len(INTENTS), results_of(body))
                if results_of(body) != reference[k % len(INTENTS)]:
                    raise SystemExit(f"peer_transport: {name} answered differently")
        idle0 = cpu_ms(server_pid)
        await asyncio.sleep(1.0)
        idle1 = cpu_ms(server_pid)
        order = list(transports)
        done = 0
        rounds = 0
        while done < requests:
            n = min(size, requests - done)
            first = rounds % len(order)
            for name in order[first:] + order[:first]:
                t, peer = transports[name]
                spent, server, answers = await block(t, peer, n, done, walls[name], server_pid)
                cpu[name] += spent
                so_far = server_cpu[name]
                server_cpu[name] = None if so_far is None or server is None else so_far + server
                for k, body in enumerate(answers, start=done):
                    if results_of(body) != reference[k % len(INTENTS)]:
                        raise SystemExit(f"peer_transport: {name} answered differently")
                    answer_bytes[name].append(len(body))
            done += n
            rounds += 1
    finally:
        for t, _ in transports.values():
            await t.aclose()

    def summary(name: str) -> dict[str, Any]:
        w = sorted(walls[name])
        server = server_cpu[name]
        return {
            "requests": len(w),
            "client_cpu_ms_per_request": round(cpu[name] / len(w) * 1000, 3),
            "server_cpu_ms_per_request": None if server is None else round(server / len(w), 3),
            "wall_ms": {
                "p50": round(statistics.median(w) * 1000, 3),
                "p90": round(w[int(0.9 * (len(w) - 1))] * 1000, 3),
                "mean": round(statistics.fmean(w) * 1000, 3),
            },
            "mean_answer_bytes": int(statistics.fmean(answer_bytes[name])),
        }

    out: dict[str, Any] = {name: summary(name) for name in transports}
    client = {name: out[name]["client_cpu_ms_per_request"] for name in transports}
    server = {name: out[name]["server_cpu_ms_per_request"] for name in transports}
    out["cpu_ratio_httpx_over_h2"] = ratio(client["httpx"], client["h2"])  # client CPU
    out["cpu_ms_saved_per_request"] = saved(client["httpx"], client["h2"])  # client, h2 vs httpx
    out["client_cpu_ratio_h2_over_native"] = ratio(client["h2"], client["native"])
    out["client_cpu_ms_saved_per_request_native_vs_h2"] = saved(client["h2"], client["native"])
    out["server_cpu_ratio_h2_over_native"] = ratio(server["h2"], server["native"])
    out["server_cpu_ms_saved_per_request_native_vs_h2"] = saved(server["h2"], server["native"])
    out["server_cpu_ratio_httpx_over_h2"] = ratio(server["httpx"], server["h2"])  # same server side
    out["wall_p50_ratio_h2_over_native"] = ratio(
        out["h2"]["wall_ms"]["p50"], out["native"]["wall_ms"]["p50"]
    )
    out["server_idle_cpu_ms_per_s"] = (
        None if idle0 is None or idle1 is None else round(idle1 - idle0, 1)
    )
    out["mean_answer_bytes"] = int(statistics.fmean(b for v in answer_bytes.values() for b in v))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=300, help="timed DISCOVERs per transport")
    ap.add_argument("--block", type=int, default=50, help="requests per interleaved block")
    ap.add_argument("--warmup", type=int, default=40, help="untimed DISCOVERs per transport")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "peer_transport.json")
    args = ap.parse_args(argv)
    os.environ["OPENBLAS_NUM_THREADS"] = "1"  # inherited by the server
    with tempfile.TemporaryDirectory(prefix="ans-peerbench-") as tmp:
        config = Path(tmp) / "bench.toml"
        config.write_text("[rate_limit]\nenabled = false\n", encoding="utf-8")
        server = start_server(
            Path(tmp) / "data",
            "--demo",
            "--log-level",
            "warning",
            "--config",
            str(config),
            "--native-listen",
            "127.0.0.1:0",
        )
        try:
            if server.native_url is None:
                raise SystemExit("peer_transport: the server printed no native listener URL")
            load_before = os.getloadavg()[0]
            result = asyncio.run(
                measure(
                    server.url,
                    server.native_url,
                    server.proc.pid,
                    args.requests,
                    args.block,
                    args.warmup,
                )
            )
            load_after = os.getloadavg()[0]
        finally:
            stop_server(server)
    report = {
        "command": " ".join(
            [".venv/bin/python", "bench/peer_transport.py", *(argv or sys.argv[1:])]
        ),
        "machine": {
            "platform": platform.platform(),
            "machine": platform.machine(),
            "cpu_count": os.cpu_count(),
            "python": platform.python_version(),
            "h2": version("h2"),
            "httpx": version("httpx"),
            "hypercorn": version("hypercorn"),
            "clock_ticks_per_s": os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else None,
            "loadavg_1m_before_after": [round(load_before, 2), round(load_after, 2)],
            "note": "server and client share these cores",
        },
        "server": (
            "ans serve --demo --native-listen 127.0.0.1:0 (rate limit off), loopback;"
            " httpx and h2 to its h2c URL (hypercorn + h2), native to its"
            " agtp+cleartext URL (native AGTP/1.0 framing), one server process"
        ),
        "method": (
            f"{args.warmup} warm-up DISCOVERs per transport, then {args.requests} per transport"
            f" in blocks of {args.block}, rotating the transports and which goes first;"
            " concurrency 1; one kept-alive connection per transport; client CPU from"
            " time.process_time, server CPU from /proc/<pid>/stat utime+stime, both over"
            " that transport's blocks only"
        ),
        **result,
    }
    text = json.dumps(report, indent=2) + "\n"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    print(text, end="")
    for name in ("httpx", "h2", "native"):
        r = result[name]
        print(
            f"{name:>6}: client CPU {r['client_cpu_ms_per_request']} ms/request,"
            f" server CPU {r['server_cpu_ms_per_request']} ms/request,"
            f" wall p50 {r['wall_ms']['p50']} ms, p90 {r['wall_ms']['p90']} ms"
        )
    print(
        f"client CPU httpx/h2 {result['cpu_ratio_httpx_over_h2']}x,"
        f" h2/native {result['client_cpu_ratio_h2_over_native']}x;"
        f" server CPU h2/native {result['server_cpu_ratio_h2_over_native']}x"
        f" ({result['server_cpu_ms_saved_per_request_native_vs_h2']} ms/request saved),"
        f" httpx/h2 {result['server_cpu_ratio_httpx_over_h2']}x;"
        f" server idle {result['server_idle_cpu_ms_per_s']} ms CPU/s"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
