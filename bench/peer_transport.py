"""Client cost of one peer DISCOVER: HttpxTransport against H2PeerTransport.

    .venv/bin/python bench/peer_transport.py   # writes bench/results/peer_transport.json

Starts one ``ans serve --demo`` on loopback (rate limit off) and sends it
DISCOVERs one at a time, exactly as the federator forwards them (the same
headers, ``send(peer, "DISCOVER", url + "/", ...)``), through both
transports in this process. After a warm-up (connection open, the server's
query-embedding cache hot for every intent), ``--requests`` DISCOVERs per
transport are sent in blocks of ``--block``, alternating the transports and
which goes first, so that noise on this shared machine hits both alike.

Per transport it reports the client CPU per request (``time.process_time``
over the blocks: user + system time of this process only -- the server is
another process) and the wall-clock latency per request (p50/p90/mean, which
includes the server's ~2-4 ms of work). Every answer must be a 200 with the
same result list for the same intent through both transports.
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
from ans.federation.peers import Peer
from ans.federation.transport import HttpxTransport, PeerTransport

from ans.launcher import start_server, stop_server

ROOT = Path(__file__).resolve().parent.parent
MAX_BYTES = 4 * 1024 * 1024
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
    transport: PeerTransport, peer: Peer, n: int, start: int, walls: list[float]
) -> tuple[float, list[bytes]]:
    """``n`` sequential DISCOVERs; returns (CPU seconds, answer bodies)."""
    payloads = bodies()
    url = peer.url + "/"
    answers: list[bytes] = []
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
    return time.process_time() - cpu0, answers


def results_of(body: bytes) -> Any:
    return orjson.loads(body)["result"]["results"]


async def measure(url: str, requests: int, size: int, warmup: int) -> dict[str, Any]:
    peer = Peer(url=url, tier=2)
    transports: dict[str, PeerTransport] = {
        "httpx": HttpxTransport(MAX_BYTES),
        "h2": H2PeerTransport(MAX_BYTES),
    }
    cpu = {name: 0.0 for name in transports}
    walls: dict[str, list[float]] = {name: [] for name in transports}
    reference: dict[int, Any] = {}
    answer_bytes: list[int] = []
    try:
        for name, t in transports.items():  # connections, caches, JIT-free warm-up
            _, answers = await block(t, peer, warmup, 0, [])
            for k, body in enumerate(answers):
                reference.setdefault(k % len(INTENTS), results_of(body))
                if results_of(body) != reference[k % len(INTENTS)]:
                    raise SystemExit(f"peer_transport: {name} answered differently")
        order = list(transports)
        done = 0
        rounds = 0
        while done < requests:
            n = min(size, requests - done)
            for name in order if rounds % 2 == 0 else order[::-1]:
                spent, answers = await block(transports[name], peer, n, done, walls[name])
                cpu[name] += spent
                for k, body in enumerate(answers, start=done):
                    if results_of(body) != reference[k % len(INTENTS)]:
                        raise SystemExit(f"peer_transport: {name} answered differently")
                    answer_bytes.append(len(body))
            done += n
            rounds += 1
    finally:
        for t in transports.values():
            await t.aclose()

    def summary(name: str) -> dict[str, Any]:
        w = sorted(walls[name])
        return {
            "requests": len(w),
            "cpu_ms_per_request": round(cpu[name] / len(w) * 1000, 3),
            "wall_ms": {
                "p50": round(statistics.median(w) * 1000, 3),
                "p90": round(w[int(0.9 * (len(w) - 1))] * 1000, 3),
                "mean": round(statistics.fmean(w) * 1000, 3),
            },
        }

    out: dict[str, Any] = {name: summary(name) for name in transports}
    out["cpu_ratio_httpx_over_h2"] = round(
        out["httpx"]["cpu_ms_per_request"] / out["h2"]["cpu_ms_per_request"], 2
    )
    out["cpu_ms_saved_per_request"] = round(
        out["httpx"]["cpu_ms_per_request"] - out["h2"]["cpu_ms_per_request"], 3
    )
    out["mean_answer_bytes"] = int(statistics.fmean(answer_bytes))
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
            Path(tmp) / "data", "--demo", "--log-level", "warning", "--config", str(config)
        )
        try:
            load_before = os.getloadavg()[0]
            result = asyncio.run(measure(server.url, args.requests, args.block, args.warmup))
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
            "loadavg_1m_before_after": [round(load_before, 2), round(load_after, 2)],
            "note": "server and client share these cores",
        },
        "server": "ans serve --demo (rate limit off), loopback, h2c",
        "method": (
            f"{args.warmup} warm-up DISCOVERs per transport, then {args.requests} per transport"
            f" in blocks of {args.block}, alternating transports and which goes first;"
            " concurrency 1; one kept-alive HTTP/2 connection per transport"
        ),
        **result,
    }
    text = json.dumps(report, indent=2) + "\n"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    print(text, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
