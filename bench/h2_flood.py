"""What a PING flood does to a well-behaved client, with and without the
HTTP/2 control-frame budget (``ans.http2_defences.control_frames``).

    .venv/bin/python bench/h2_flood.py [--seconds 6] [--rounds 2] [--out FILE]

For each phase a fresh ``ans serve --demo`` runs on loopback (rate limit
off, no connection cap), and one client in this process asks DISCOVERs one
at a time on one HTTP/2 connection for ``--seconds``, verifying nothing but
the status. The phases:

* ``quiet``: nobody else; the floor for this run;
* ``flood, budget on``: a second process floods PINGs: it connects, writes
  1,000 PINGs at a time as fast as the socket takes them, reads and drops
  what comes back, and reconnects whenever the server ends the connection;
* ``flood, budget off``: the same against a server whose budget check is
  switched off (``ControlBudget.charge`` always true), i.e. hypercorn as it was.

Phases alternate ``--rounds`` times. Printed and written: p50/p90 of the
well-behaved client per phase, its ratio to the quiet p50, the number of
answers it got, and how many connections the flooder opened.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import h2.config
import h2.connection
import h2.events

ROOT = Path(__file__).resolve().parent.parent
SERVER = """
import sys
from ans.http2_defences.control_frames import ControlBudget
if sys.argv[1] == "off":
    ControlBudget.charge = lambda self, frames, now: True
from ans.cli import main
sys.exit(main(["serve", "--demo", "--listen", "127.0.0.1:0",
               "--data-dir", sys.argv[2], "--config", sys.argv[3]]))
"""
CONFIG = "[rate_limit]\nenabled = false\n\n[server]\nmax_connections_per_client = 0\n"
HEADERS = [
    (":method", "DISCOVER"),
    (":path", "/"),
    (":scheme", "http"),
    (":authority", "127.0.0.1"),
    ("agent-id", "agtp://bench.example/agents/orch"),
    ("principal-id", "usr-bench"),
    ("authority-scope", "discovery:query"),
    ("content-type", "application/agtp+json"),
]
BODY = json.dumps(
    {"method": "DISCOVER", "task_id": "t", "parameters": {"intent": "audit smart contracts"}}
).encode()
STALL = 10.0  # s without an answer: counted as a stall, and the client moves on


def connect(port: int) -> tuple[socket.socket, h2.connection.H2Connection]:
    sock = socket.create_connection(("127.0.0.1", port), timeout=STALL)
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    sock.sendall(conn.data_to_send())
    return sock, conn


def ask(sock: socket.socket, conn: h2.connection.H2Connection) -> int | None:
    """One DISCOVER; its status, or None after STALL seconds without an answer."""
    sid = conn.get_next_available_stream_id()
    conn.send_headers(sid, HEADERS)
    conn.send_data(sid, BODY, end_stream=True)
    sock.sendall(conn.data_to_send())
    status = None
    while True:
        try:
            data = sock.recv(65536)
        except TimeoutError:
            return None
        if not data:
            raise ConnectionError("server closed the well-behaved client's connection")
        for event in conn.receive_data(data):
            if isinstance(event, h2.events.ResponseReceived) and event.stream_id == sid:
                status = int(dict(event.headers)[b":status"])
            elif isinstance(event, h2.events.DataReceived):
                conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, h2.events.StreamEnded) and event.stream_id == sid:
                sock.sendall(conn.data_to_send())
                return status
        sock.sendall(conn.data_to_send())


def well_behaved(port: int, seconds: float) -> dict[str, Any]:
    sock, conn = connect(port)
    latencies, statuses, stalls = [], [], 0
    end = time.monotonic() + seconds
    try:
        while time.monotonic() < end:
            start = time.perf_counter()
            status = ask(sock, conn)
            if status is None:
                stalls += 1
                continue
            latencies.append(time.perf_counter() - start)
            statuses.append(status)
    finally:
        sock.close()
    return {
        "answers": len(latencies),
        "non_200": sum(s != 200 for s in statuses),
        "stalls": stalls,
        "p50_ms": round(statistics.median(latencies) * 1e3, 3) if latencies else None,
        "p90_ms": round(statistics.quantiles(latencies, n=10)[8] * 1e3, 3)
        if len(latencies) >= 10
        else None,
    }


def flooder(port: int, seconds: float, out: Any) -> None:
    """PINGs, 1,000 per write, reconnecting whenever the server ends it."""
    end = time.monotonic() + seconds
    connections = 0
    while time.monotonic() < end:
        try:
            sock, conn = connect(port)
        except OSError:
            continue
        connections += 1
        for i in range(1000):
            conn.ping(i.to_bytes(8, "big"))
        burst = conn.data_to_send()
        sock.setblocking(False)
        try:
            while time.monotonic() < end:
                try:
                    sock.send(burst)
                except BlockingIOError:
                    pass
                try:
                    if sock.recv(1 << 20) == b"":
                        break
                except BlockingIOError:
                    pass
        except OSError:
            pass
        finally:
            sock.close()
    out.put(connections)


def phase(budget: str, flood: bool, seconds: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        cfg = Path(tmp) / "ans.toml"
        cfg.write_text(CONFIG, encoding="utf-8")
        proc = subprocess.Popen(
            [sys.executable, "-c", SERVER, budget, str(Path(tmp) / "data"), str(cfg)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=ROOT,
        )
        assert proc.stdout is not None
        port = None
        for line in proc.stdout:
            if "ANS listening on" in line:
                port = int(line.strip().rsplit(":", 1)[1])
                break
        if port is None:
            raise SystemExit("the server did not start")
        # Keep reading its output, so that a full pipe never blocks its logging.
        drain = threading.Thread(target=proc.stdout.read, daemon=True)
        drain.start()
        try:
            well_behaved(port, 1.0)  # warm-up
            flooders: list[mp.Process] = []
            counts: Any = mp.Queue()
            if flood:
                flooders.append(mp.Process(target=flooder, args=(port, seconds + 1.0, counts)))
                flooders[0].start()
                time.sleep(0.5)
            result = well_behaved(port, seconds)
            for proc_f in flooders:
                proc_f.join(STALL + seconds)
            result["flood_connections"] = counts.get(timeout=5) if flood else 0
        finally:
            proc.terminate()
            proc.wait(timeout=30)
            drain.join(5)
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "h2_flood.json")
    args = ap.parse_args()
    phases = {
        "quiet": ("on", False),
        "flood, budget on": ("on", True),
        "flood, budget off": ("off", True),
    }
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in phases}
    for r in range(args.rounds):
        for name, (budget, flood) in phases.items():
            res = phase(budget, flood, args.seconds)
            runs[name].append(res)
            print(f"round {r + 1}, {name}: {json.dumps(res)}", flush=True)
    quiet = statistics.median(x["p50_ms"] for x in runs["quiet"] if x["p50_ms"])
    summary = {}
    for name, results in runs.items():
        p50s = [x["p50_ms"] for x in results if x["p50_ms"] is not None]
        summary[name] = {
            "p50_ms": p50s,
            "ratio_to_quiet": [round(p / quiet, 2) for p in p50s],
            "answers": [x["answers"] for x in results],
            "stalls": sum(x["stalls"] for x in results),
            "flood_connections": [x["flood_connections"] for x in results],
        }
        print(
            f"{name}: p50 {p50s} ms, x{summary[name]['ratio_to_quiet']} the quiet p50", flush=True
        )
    doc = {
        "bench": "h2_flood",
        "seconds": args.seconds,
        "rounds": args.rounds,
        "machine": {"cpus": mp.cpu_count(), "python": sys.version.split()[0]},
        "summary": summary,
        "runs": runs,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
