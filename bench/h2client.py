"""A lean closed-loop HTTP/2 load generator for AGTP methods (its own process).

    python bench/h2client.py --url http://127.0.0.1:4480 --params queries.jsonl \\
        --concurrency 16 [--connections 4] [--warmup 2] [--duration 10] [--post] \\
        [--mode discover|activate|visibility] [--sample 20 --sample-out s.jsonl] [--out r.json]

asyncio, HTTP/2 with prior knowledge (h2c) over ``--connections`` TCP
connections (default min(c, 4)), each one of two engines (``--engine``):
``raw`` (the default, bench/h2raw.py: its own frames, ~35-50 µs of client CPU a
request on this machine kind) or ``h2`` (the sans-IO ``h2`` library's state
machine, ~200-250 µs). On a 2-core machine the client shares the cores with
the server it measures: with ``h2`` it took 0.31 cores while two ANS workers
served 912 DISCOVERs/s, and it bounded the floor's throughput too. No httpx:
it costs more still. Requests follow the AGTP HTTP/2 binding: ``:method DISCOVER
:path /`` (or ``POST /agtp`` + ``agtp-method`` with ``--post``), the identity
headers, a Task-ID and the JSON envelope ``{"method", "task_id",
"parameters"}``.

Modes:

* ``discover``: ``--concurrency`` workers in a closed loop, each request's
  parameter object drawn at random from ``--params`` (JSONL; ``--seed``); a
  warm-up, then a timed period.
  Every completion inside the timed period is recorded (perf_counter_ns).
* ``activate``: each line (ACTIVATE parameters ``{"manifest",
  "capabilities"}``) is sent once at ``--concurrency``; agents/s.
* ``visibility``: for each line ``{"activate": {...}, "intent": str,
  "canonical_id": str}``: ACTIVATE, then DISCOVER the intent until the agent is
  among the results; records the ms from the ACTIVATE 200 to that answer.

When hypercorn ends a connection (GOAWAY after ``keep_alive_max_requests``,
or the socket closes), requests it did not answer are retried on a fresh
connection and counted in ``retries``; latency then includes the retry.

Prints one JSON object on stdout (and writes it to ``--out``): n, rps,
p50/p90/p99/max ms, status counts, non-200 counts, errors, retries,
reconnects.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import random
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlsplit

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings
from h2raw import ClientConn, Pending, RawH2Conn, Retry

WINDOW = 16 * 1024 * 1024
MAX_ATTEMPTS = 8
GOAWAY_GRACE = 0.05  # s to wait for answers to accepted streams after a GOAWAY
AGENT_ID = "agtp://bench.example/agents/loadgen"


class H2Conn(ClientConn):
    """One h2c client connection; ``request`` returns (status, body)."""

    def __init__(self) -> None:
        super().__init__()
        cfg = h2.config.H2Configuration(
            client_side=True,
            header_encoding=None,
            validate_outbound_headers=False,
            normalize_outbound_headers=False,
            validate_inbound_headers=False,
        )
        self.h2 = h2.connection.H2Connection(config=cfg)

    # -- asyncio.Protocol ----------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.h2.local_settings = h2.settings.Settings(
            client=True,
            initial_values={
                h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: WINDOW,
                h2.settings.SettingCodes.ENABLE_PUSH: 0,
            },
        )
        self.h2.initiate_connection()
        self.h2.increment_flow_control_window(WINDOW)
        self._flush()

    def data_received(self, data: bytes) -> None:
        try:
            events = self.h2.receive_data(data)
        except h2.exceptions.ProtocolError:
            self._fail_all()
            if self.transport is not None:
                self.transport.close()
            return
        for ev in events:
            if isinstance(ev, h2.events.ResponseReceived):
                p = self.pending.get(ev.stream_id)
                if p is not None:
                    for k, v in ev.headers:
                        if k == b":status":
                            p.status = int(v)
            elif isinstance(ev, h2.events.DataReceived):
                p = self.pending.get(ev.stream_id)
                if p is not None:
                    p.body.append(ev.data)
                self.h2.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
            elif isinstance(ev, h2.events.StreamEnded):
                p = self.pending.pop(ev.stream_id, None)
                if p is not None and not p.fut.done():
                    p.fut.set_result((p.status, b"".join(p.body)))
            elif isinstance(ev, h2.events.StreamReset):
                p = self.pending.pop(ev.stream_id, None)
                if p is not None and not p.fut.done():
                    p.fut.set_exception(Retry(f"stream reset ({ev.error_code})"))
            elif isinstance(ev, h2.events.WindowUpdated):
                self._send_blocked()
            elif isinstance(ev, h2.events.ConnectionTerminated):
                self.usable = False
                self.goaway = True
                last = ev.last_stream_id if ev.last_stream_id is not None else 0
                for sid in [s for s in self.pending if s > last]:
                    p = self.pending.pop(sid)
                    if not p.fut.done():
                        p.fut.set_exception(Retry("GOAWAY"))
                # hypercorn's h2 state machine is closed once it sent GOAWAY, so
                # the streams it did accept are never answered: give them a
                # short grace, then retry them elsewhere and drop the socket.
                asyncio.get_running_loop().call_later(GOAWAY_GRACE, self.close)
        self._flush()

    # -- requests -------------------------------------------------------------
    def request(self, headers: list[tuple[bytes, bytes]], body: bytes) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[tuple[int, bytes]] = loop.create_future()
        if not self.usable:
            fut.set_exception(Retry("connection not usable"))
            return fut
        try:
            sid = self.h2.get_next_available_stream_id()
            self.h2.send_headers(sid, headers, end_stream=not body)
        except h2.exceptions.ProtocolError as exc:
            self.usable = False
            fut.set_exception(Retry(f"cannot open stream: {exc}"))
            return fut
        p = Pending(fut, out=body)
        self.pending[sid] = p
        if body:
            self._send_body(sid, p)
        self._flush()
        return fut

    def _send_body(self, sid: int, p: Pending) -> None:
        while p.out:
            window = min(self.h2.local_flow_control_window(sid), self.h2.max_outbound_frame_size)
            if window <= 0:
                return
            chunk, p.out = p.out[:window], p.out[window:]
            self.h2.send_data(sid, chunk, end_stream=not p.out)

    def _send_blocked(self) -> None:
        for sid, p in list(self.pending.items()):
            if p.out:
                with contextlib.suppress(h2.exceptions.ProtocolError):
                    self._send_body(sid, p)

    def _flush(self) -> None:
        data = self.h2.data_to_send()
        if data and self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def _goodbye(self) -> None:
        self.h2.close_connection()
        self._flush()


class Pool:
    """``size`` slots, each holding one live connection, reopened on demand."""

    def __init__(self, host: str, port: int, size: int, engine: str = "raw") -> None:
        self.host, self.port = host, port
        self.factory: type[H2Conn] | type[RawH2Conn] = RawH2Conn if engine == "raw" else H2Conn
        self.conns: list[H2Conn | RawH2Conn | None] = [None] * size
        self.locks = [asyncio.Lock() for _ in range(size)]
        self.opened = 0
        self.retries = 0
        self.goaways = 0

    async def get(self, slot: int) -> H2Conn | RawH2Conn:
        conn = self.conns[slot]
        if conn is not None and conn.usable:
            return conn
        async with self.locks[slot]:
            conn = self.conns[slot]
            if conn is not None and conn.usable:
                return conn
            if conn is not None:
                self.goaways += conn.goaway
                conn.close()
            loop = asyncio.get_running_loop()
            _, created = await loop.create_connection(self.factory, self.host, self.port)
            proto = cast(H2Conn | RawH2Conn, created)
            self.conns[slot] = proto
            self.opened += 1
            return proto

    async def send(
        self, slot: int, headers: list[tuple[bytes, bytes]], body: bytes
    ) -> tuple[int, bytes]:
        for _ in range(MAX_ATTEMPTS - 1):
            conn = await self.get(slot)
            try:
                result: tuple[int, bytes] = await conn.request(headers, body)
                return result
            except Retry:
                self.retries += 1
        conn = await self.get(slot)
        final: tuple[int, bytes] = await conn.request(headers, body)
        return final

    def close(self) -> None:
        for c in self.conns:
            if c is not None:
                self.goaways += c.goaway
                c.close()


# -- requests --------------------------------------------------------------------


def scope_for(method: str, params: dict[str, Any]) -> bytes:
    """Authority-Scope: the method's scope, plus the zone token when a query asks a zone."""
    if method == "DISCOVER":
        tokens = ["discovery:query"]
        zone = params.get("governance_zone")
        if isinstance(zone, str) and zone:
            tokens.append(zone)
    else:
        tokens = ["discovery:register"]
    return " ".join(tokens).encode()


class RequestMaker:
    """Pre-encodes the fixed parts; per request only the Task-ID changes."""

    def __init__(self, authority: str, post: bool, principal: str = "bench-operator") -> None:
        self.authority = authority.encode()
        self.post = post
        self.principal = principal.encode()
        self.seq = itertools.count()

    def make(
        self, method: str, params_json: bytes, scope: bytes, conn_slot: int
    ) -> tuple[list[tuple[bytes, bytes]], bytes]:
        tid = f"t-{method[:3].lower()}-{next(self.seq)}".encode()
        body = (
            b'{"method":"' + method.encode() + b'","task_id":"' + tid + b'","parameters":'
            + params_json + b"}"
        )
        if self.post:
            pseudo = [(b":method", b"POST"), (b":path", b"/agtp")]
            extra = [(b"agtp-method", method.encode())]
        else:
            pseudo = [(b":method", method.encode()), (b":path", b"/")]
            extra = []
        headers = [
            *pseudo,
            (b":scheme", b"http"),
            (b":authority", self.authority),
            (b"agtp-version", b"AGTP/1.0"),
            (b"agent-id", f"{AGENT_ID}-{conn_slot}".encode()),
            (b"principal-id", self.principal),
            (b"authority-scope", scope),
            (b"task-id", tid),
            (b"content-type", b"application/agtp+json"),
            (b"content-length", str(len(body)).encode()),
            *extra,
        ]
        return headers, body


def client_cpu(marks: list[float], n: int, elapsed: float) -> dict[str, Any]:
    """The client's own CPU over the timed period (absent when not measured)."""
    if len(marks) != 2 or not n or elapsed <= 0:
        return {}
    used = marks[1] - marks[0]
    return {"client_cpu_us_per_request": round(used * 1e6 / n, 1),
            "client_cores_busy": round(used / elapsed, 3)}


def percentiles(lat_ns: Sequence[int]) -> dict[str, float | None]:
    if not lat_ns:
        return {"p50_ms": None, "p90_ms": None, "p99_ms": None, "max_ms": None, "mean_ms": None}
    s = sorted(lat_ns)

    def pct(q: float) -> float:
        # nearest rank
        idx = max(0, min(len(s) - 1, int(-(-q * len(s) // 1)) - 1))
        return round(s[idx] / 1e6, 3)

    return {
        "p50_ms": pct(0.50),
        "p90_ms": pct(0.90),
        "p99_ms": pct(0.99),
        "max_ms": round(s[-1] / 1e6, 3),
        "mean_ms": round(sum(s) / len(s) / 1e6, 3),
    }


@dataclass
class Recorder:
    start_ns: int = 0
    end_ns: int = 0
    latencies: list[int] = field(default_factory=list)
    statuses: Counter[int] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    samples: list[dict[str, Any]] = field(default_factory=list)
    bad_samples: list[dict[str, Any]] = field(default_factory=list)
    sample_n: int = 0

    def record(self, t0: int, t1: int, status: int, body: bytes, index: int) -> None:
        if not (self.start_ns <= t1 <= self.end_ns):
            return
        self.latencies.append(t1 - t0)
        self.statuses[status] += 1
        if status == 200:
            if len(self.samples) < self.sample_n:
                self.samples.append({"index": index, "body": body.decode("utf-8", "replace")})
        elif len(self.bad_samples) < 5:
            self.bad_samples.append(
                {"index": index, "status": status, "body": body[:600].decode("utf-8", "replace")}
            )


def load_params(path: Path) -> list[bytes]:
    """Each JSONL line re-encoded compactly (the bytes sent as ``parameters``)."""
    out = []
    with path.open("rb") as fh:
        for line in fh:
            if line.strip():
                out.append(json.dumps(json.loads(line), separators=(",", ":")).encode())
    if not out:
        raise SystemExit(f"h2client: no parameter objects in {path}")
    return out


async def run_closed_loop(args: argparse.Namespace, lines: list[bytes]) -> dict[str, Any]:
    u = urlsplit(args.url)
    host, port = u.hostname or "127.0.0.1", u.port or 80
    conns = args.connections or min(args.concurrency, 4)
    pool = Pool(host, port, conns, args.engine)
    maker = RequestMaker(f"{host}:{port}", args.post)
    method = "DISCOVER" if args.mode == "discover" else "ACTIVATE"
    scopes = [scope_for(method, json.loads(p)) for p in lines]
    rec = Recorder(sample_n=args.sample)
    counter = itertools.count()
    once = args.mode == "activate"
    # DISCOVER parameters drawn at random (seeded: the same run draws the same
    # sequence), so no two workers walk the file in step.
    draw = random.Random(args.seed)
    now = time.perf_counter_ns()
    warm = 0 if once else int(args.warmup * 1e9)
    rec.start_ns = now + warm
    rec.end_ns = rec.start_ns + int(args.duration * 1e9)
    stop_at = rec.end_ns
    last_done = [rec.start_ns]

    # Open every connection before the clock matters.
    for slot in range(conns):
        await pool.get(slot)

    async def worker(w: int) -> None:
        slot = w % conns
        while True:
            i = next(counter)
            if once and i >= len(lines):
                return
            t0 = time.perf_counter_ns()
            if t0 >= stop_at:
                return
            k = i if once else draw.randrange(len(lines))
            headers, body = maker.make(method, lines[k], scopes[k], slot)
            try:
                status, resp = await pool.send(slot, headers, body)
            except (OSError, Retry, h2.exceptions.ProtocolError) as exc:
                t1 = time.perf_counter_ns()
                if rec.start_ns <= t1 <= rec.end_ns:
                    rec.errors[f"{type(exc).__name__}: {str(exc)[:80]}"] += 1
                await asyncio.sleep(0.01)
                continue
            t1 = time.perf_counter_ns()
            last_done[0] = max(last_done[0], t1)
            rec.record(t0, t1, status, resp, k)

    # This process's CPU over the timed period: on a small machine the client
    # shares the cores with the server, and its share bounds what the server gets.
    cpu_marks: list[float] = []
    sys_marks: list[float] = []

    async def mark_cpu() -> None:
        for at in (rec.start_ns, rec.end_ns):
            await asyncio.sleep(max(0.0, (at - time.perf_counter_ns()) / 1e9))
            cpu_marks.append(time.process_time())
            sys_marks.append(os.times().system)

    t_begin = time.perf_counter_ns()
    extra = [] if once else [mark_cpu()]
    await asyncio.gather(*(worker(w) for w in range(args.concurrency)), *extra)
    pool.close()
    if once:
        elapsed = (last_done[0] - t_begin) / 1e9
    else:
        elapsed = args.duration
    n = len(rec.latencies)
    result: dict[str, Any] = {
        "mode": args.mode,
        "method": method,
        "transport": "POST /agtp" if args.post else f"{method} /",
        "concurrency": args.concurrency,
        "connections": conns,
        "engine": args.engine,
        "warmup_s": 0 if once else args.warmup,
        "duration_s": round(elapsed, 3),
        "n": n,
        "rps": round(n / elapsed, 1) if elapsed > 0 else None,
        **percentiles(rec.latencies),
        **client_cpu(cpu_marks, n, elapsed),
        **({"client_sys_us_per_request": round((sys_marks[1] - sys_marks[0]) * 1e6 / n, 1)}
           if len(sys_marks) == 2 and n else {}),
        "statuses": {str(k): v for k, v in sorted(rec.statuses.items())},
        "non_200": {str(k): v for k, v in sorted(rec.statuses.items()) if k != 200},
        "errors": dict(rec.errors),
        "retries": pool.retries,
        "reconnects": pool.opened - conns,
        "goaways": pool.goaways,
        "bad_samples": rec.bad_samples,
    }
    if args.sample_out:
        with Path(args.sample_out).open("w", encoding="utf-8") as fh:
            for s in rec.samples:
                fh.write(json.dumps(s) + "\n")
    return result


async def run_visibility(args: argparse.Namespace, path: Path) -> dict[str, Any]:
    """ACTIVATE, then DISCOVER the agent's intent until it is in the results."""
    u = urlsplit(args.url)
    host, port = u.hostname or "127.0.0.1", u.port or 80
    pool = Pool(host, port, 1, args.engine)
    maker = RequestMaker(f"{host}:{port}", args.post)
    deltas: list[int] = []
    polls: list[int] = []
    failures: Counter[str] = Counter()
    items = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    await pool.get(0)
    for item in items:
        act = json.dumps(item["activate"], separators=(",", ":")).encode()
        headers, body = maker.make("ACTIVATE", act, b"discovery:register", 0)
        status, resp = await pool.send(0, headers, body)
        t_ok = time.perf_counter_ns()
        if status != 200:
            failures[f"ACTIVATE {status}"] += 1
            continue
        q = {"intent": item["intent"], "trust_tier_min": 3, "limit": args.visibility_limit}
        qb = json.dumps(q, separators=(",", ":")).encode()
        cid = item["canonical_id"]
        deadline = t_ok + int(args.visibility_timeout * 1e9)
        n_polls = 0
        while True:
            headers, body = maker.make("DISCOVER", qb, b"discovery:query", 0)
            status, resp = await pool.send(0, headers, body)
            t_seen = time.perf_counter_ns()
            n_polls += 1
            if status == 200:
                results = json.loads(resp)["result"]["results"]
                if any(r.get("canonical_id") == cid for r in results):
                    deltas.append(t_seen - t_ok)
                    polls.append(n_polls)
                    break
            else:
                failures[f"DISCOVER {status}"] += 1
            if t_seen > deadline:
                failures["not visible before timeout"] += 1
                break
    pool.close()
    pct = percentiles(deltas)
    return {
        "mode": "visibility",
        "agents": len(items),
        "visible": len(deltas),
        "p50_ms": pct["p50_ms"],
        "p90_ms": pct["p90_ms"],
        "max_ms": pct["max_ms"],
        "max_polls": max(polls) if polls else None,
        "failures": dict(failures),
        "retries": pool.retries,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", required=True, help="http://127.0.0.1:PORT (h2c, prior knowledge)")
    ap.add_argument("--params", type=Path, required=True, help="JSONL of parameter objects")
    ap.add_argument("--mode", choices=["discover", "activate", "visibility"], default="discover")
    ap.add_argument("--concurrency", "-c", type=int, default=1)
    ap.add_argument("--connections", type=int, default=0, help="default min(c, 4)")
    ap.add_argument("--warmup", type=float, default=2.0)
    ap.add_argument("--duration", type=float, default=10.0)
    ap.add_argument("--post", action="store_true", help="POST /agtp + agtp-method header")
    ap.add_argument("--sample", type=int, default=0, help="keep N 200 bodies for verification")
    ap.add_argument("--sample-out", type=Path)
    ap.add_argument("--visibility-limit", type=int, default=10)
    ap.add_argument("--visibility-timeout", type=float, default=5.0)
    ap.add_argument("--seed", type=int, default=1, help="of the random draw of parameters")
    ap.add_argument("--engine", choices=["raw", "h2"], default="raw",
                    help="raw: bench/h2raw.py's frames (default, ~5x less client CPU); "
                         "h2: the h2 library's state machine")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    if args.concurrency < 1:
        ap.error("--concurrency must be >= 1")
    if args.mode == "visibility":
        result = asyncio.run(run_visibility(args, args.params))
    else:
        lines = load_params(args.params)
        if args.mode == "activate" and args.duration == ap.get_default("duration"):
            args.duration = 3600.0  # send every line once
        result = asyncio.run(run_closed_loop(args, lines))
    text = json.dumps(result)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")
    print(text, flush=True)
    failed = sum(result.get("non_200", {}).values()) + sum(result.get("errors", {}).values())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
