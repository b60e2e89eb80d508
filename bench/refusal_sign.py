"""What signing a DISCOVER refusal costs, against the same refusal unsigned.

    .venv/bin/python bench/refusal_sign.py [--n 2000] [--rounds 5] [--out FILE]

A real service (``build_service`` on a fresh data directory, its own ES256
key) behind :class:`ans.app.AnsApp`; each refusal goes through
``AnsApp.answer`` exactly as a request from either listener does (gate,
parse, refusal, signature, per-address settle). The unsigned twin is the same
app with :meth:`AnsApp.signed_error` returning the same error object without
``ans_signature``: what a refusal cost before refusals were signed. Kinds:

* ``422_invalid_limit``: the body parsed, a parameter is out of range;
* ``400_malformed_json``: the body does not parse (no ``query_digest``);
* ``451_scope``: refused after parsing, writes an audit record;
* ``429_address``: the client address is out of tokens (refused before parsing).

Then end to end (``e2e_429_h2``): two ``ans serve`` processes on loopback,
one as shipped and one whose refusals are unsigned, each with an address
bucket that is empty after the first request; one HTTP/2 connection asks
``--n`` DISCOVERs (all 429) of each in turn, and the server process's CPU
(``/proc/PID/stat``, user + system) per refusal is compared: what a flood of
refused requests costs the server with and without the signatures.

Per kind, ``--rounds`` rounds alternate signed and unsigned batches of
``--n`` refusals; the median per-refusal CPU time of the serving thread
(``time.thread_time``, so other processes on the machine count less) is
reported, with the ratio signed/unsigned, the signature alone (JCS + ES256),
a served DISCOVER for scale, and the tokens the client address is charged
per refusal (``ans.gate``) against the CPU that one token stands for.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
from ans.governance.audit import rfc3339
from ans.governance.ratelimit import RateLimitSettings
from ans.protocol.errors import AgtpError, InvalidParameter

from ans.app import AnsApp
from ans.config import Config
from ans.gate import (
    ADDRESS_MS_PER_TOKEN,
    REFUSAL_TOKENS,
    SIGNED_REFUSAL_TOKENS,
    Credentials,
    RequestGate,
)
from ans.refusals import refusal_object, sign_refusal
from ans.server import configure_logging
from ans.wiring import build_service

ROOT = Path(__file__).resolve().parent.parent
HEADERS = {
    "agent-id": "agtp://bench.example/agents/orch",
    "principal-id": "usr-bench",
    "authority-scope": "discovery:query",
    "content-type": "application/agtp+json",
    "task-id": "t-bench",
}


SERVER = """
import sys
from ans import app
from ans.governance.audit import rfc3339
from ans.refusals import refusal_object
if sys.argv[1] == "unsigned":
    app.AnsApp.signed_error = lambda self, err, task_id: refusal_object(
        err, task_id, rfc3339(self.service.clock()))
from ans.cli import main
sys.exit(main(["serve", "--listen", "127.0.0.1:0", "--data-dir", sys.argv[2],
               "--config", sys.argv[3], "--log-level", "error"]))
"""
E2E_CONFIG = "[rate_limit]\nper_address_rate = 0.001\nper_address_burst = 1\n"


class UnsignedApp(AnsApp):
    """The same app, its DISCOVER refusals left unsigned (the cost before)."""

    def signed_error(self, err: AgtpError, task_id: str | None) -> dict[str, Any]:
        return refusal_object(err, task_id, rfc3339(self.service.clock()))


def body(params: dict[str, Any]) -> bytes:
    return orjson.dumps({"method": "DISCOVER", "task_id": "t-bench", "parameters": params})


KINDS: dict[str, tuple[dict[str, str], bytes, int]] = {
    "422_invalid_limit": (HEADERS, body({"intent": "audit", "limit": 0}), 422),
    "400_malformed_json": (HEADERS, b'{"method": "DISCOVER", "parameters": {', 400),
    "451_scope": ({**HEADERS, "authority-scope": "documents:read"}, body({"intent": "x"}), 451),
    "429_address": (HEADERS, body({"intent": "audit"}), 429),
    "200_served": (HEADERS, body({"limit": 1}), 200),
}


def batch(app: AnsApp, kind: str, n: int, address: str | None) -> float:
    """CPU seconds of this thread per answer over ``n`` answers."""
    headers, data, status = KINDS[kind]
    creds = Credentials(client_address=address)

    async def run() -> None:
        for _ in range(n):
            answer = await app.answer("DISCOVER", headers, data, creds)
            assert answer.status == status, (kind, answer.status, answer.body[:200])

    loop = asyncio.new_event_loop()
    try:
        t0 = time.thread_time()
        loop.run_until_complete(run())
        return (time.thread_time() - t0) / n
    finally:
        loop.close()


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def end_to_end(n: int, rounds: int) -> dict[str, Any]:
    """Server CPU per 429 over HTTP/2, signed against unsigned (see the docstring)."""
    spec = importlib.util.spec_from_file_location("h2_flood", ROOT / "bench/h2_flood.py")
    assert spec is not None and spec.loader is not None
    h2f = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(h2f)
    with tempfile.TemporaryDirectory() as tmp:
        cfg = Path(tmp) / "ans.toml"
        cfg.write_text(E2E_CONFIG, encoding="utf-8")
        servers: dict[str, tuple[subprocess.Popen[str], int]] = {}
        try:
            for variant in ("signed", "unsigned"):
                proc = subprocess.Popen(
                    [sys.executable, "-c", SERVER, variant, str(Path(tmp) / variant), str(cfg)],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                    text=True,
                    cwd=ROOT,
                )
                assert proc.stdout is not None
                for line in proc.stdout:
                    if "ANS listening on" in line:
                        servers[variant] = (proc, int(line.strip().rsplit(":", 1)[1]))
                        break
                else:
                    raise SystemExit(f"the {variant} server did not start")
            per: dict[str, list[float]] = {"signed": [], "unsigned": []}
            for r in range(rounds + 1):  # round 0 warms up
                for variant, (proc, port) in servers.items():
                    sock, conn = h2f.connect(port)
                    try:
                        t0 = _cpu_seconds(proc.pid)
                        statuses = [h2f.ask(sock, conn) for _ in range(n)]
                        used = _cpu_seconds(proc.pid) - t0
                    finally:
                        sock.close()
                    assert statuses.count(429) >= n - 1, statuses[:5]
                    if r:
                        per[variant].append(used / n)
        finally:
            for proc, _ in servers.values():
                proc.terminate()
                proc.wait(timeout=30)
    s_us = statistics.median(per["signed"]) * 1e6
    u_us = statistics.median(per["unsigned"]) * 1e6
    print(
        f"{'e2e_429_h2':20s} signed {s_us:8.1f} us  unsigned {u_us:8.1f} us  "
        f"ratio {s_us / u_us:.2f}  (server CPU per refusal)"
    )
    return {
        "signed_us": round(s_us, 1),
        "unsigned_us": round(u_us, 1),
        "ratio": round(s_us / u_us, 3),
        "signature_share_us": round(s_us - u_us, 1),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", type=Path, default=ROOT / "bench/results/refusal_sign.json")
    args = ap.parse_args()
    configure_logging("error")  # a log line per refusal would be most of what is measured

    with tempfile.TemporaryDirectory() as tmp:
        # No rate limit for the apps that measure refusals; the 429 apps get
        # an address bucket that is empty after the first request.
        open_cfg = Config(data_dir=Path(tmp), rate_limit=RateLimitSettings(enabled=False))
        built = build_service(open_cfg)
        svc = built.service
        limited = RateLimitSettings(per_address_rate=0.001, per_address_burst=1)

        def apps(kind: str) -> tuple[AnsApp, AnsApp, str | None]:
            if kind != "429_address":
                gate = RequestGate(open_cfg, svc.audit, svc.manifest["canonical_id"])
                return AnsApp(svc, gate), UnsignedApp(svc, gate), None
            cfg = Config(data_dir=Path(tmp), rate_limit=limited)
            pair = []
            for cls in (AnsApp, UnsignedApp):
                gate = RequestGate(cfg, svc.audit, svc.manifest["canonical_id"])
                app = cls(svc, gate)
                batch(app, "200_served", 1, "192.0.2.1")  # empty the bucket
                pair.append(app)
            return pair[0], pair[1], "192.0.2.1"

        report: dict[str, Any] = {}
        for kind in KINDS:
            signed_app, unsigned_app, address = apps(kind)
            batch(signed_app, kind, 200, address)  # warm up
            batch(unsigned_app, kind, 200, address)
            signed, unsigned = [], []
            for _ in range(args.rounds):
                signed.append(batch(signed_app, kind, args.n, address))
                unsigned.append(batch(unsigned_app, kind, args.n, address))
            s_us = statistics.median(signed) * 1e6
            u_us = statistics.median(unsigned) * 1e6
            report[kind] = {
                "signed_us": round(s_us, 1),
                "unsigned_us": round(u_us, 1),
                "ratio": round(s_us / u_us, 3),
                "signature_share_us": round(s_us - u_us, 1),
            }
            print(
                f"{kind:20s} signed {s_us:8.1f} us  unsigned {u_us:8.1f} us  "
                f"ratio {s_us / u_us:.2f}"
            )

        err = InvalidParameter("limit", "must be an integer from 1 to 100")
        err.task_id, err.query_digest = "t-bench", "0" * 64
        obj = refusal_object(err, "t-bench", rfc3339(svc.clock()))
        t0 = time.thread_time()
        for _ in range(args.n):
            sign_refusal(obj, svc.key)
        sign_us = (time.thread_time() - t0) / args.n * 1e6
        print(f"signature alone (JCS + ES256): {sign_us:.1f} us")
        svc.audit.close()
        svc.store.close()
        if built.lock is not None:
            built.lock.release()
    report["e2e_429_h2"] = end_to_end(args.n, args.rounds)

    tokens = {
        "per_request_before_parsing": 1,
        "signed_refusal": SIGNED_REFUSAL_TOKENS,
        "refusal_after_parsing_audit": REFUSAL_TOKENS,
        "cpu_ms_per_token_past_free": ADDRESS_MS_PER_TOKEN,
        "free_cpu_ms_per_request": RateLimitSettings().per_address_free_ms,
    }
    served_us = report["200_served"]["signed_us"]
    doc = {
        "bench": "refusal_sign",
        "command": "python bench/refusal_sign.py " + " ".join(sys.argv[1:]),
        "commit": subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT
        ).stdout.strip(),
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()} {platform.python_implementation()} "
        f"{platform.python_version()}",
        "n": args.n,
        "rounds": args.rounds,
        "kinds": report,
        "signature_alone_us": round(sign_us, 1),
        "served_discover_us": served_us,
        "tokens": tokens,
        # What the address pays for a signature (one token) against what a
        # token stands for in CPU (1 ms past the free 2 ms) and what a
        # signature costs: > 1 means the charge covers it.
        "signature_charge_cover": round(
            SIGNED_REFUSAL_TOKENS * ADDRESS_MS_PER_TOKEN * 1000.0 / sign_us, 1
        ),
        # A signed refusal's tokens against a served DISCOVER's one token,
        # over their CPU: > 1 means refusals use the allowance faster per CPU.
        "signed_422_tokens_per_cpu_vs_served": round(
            (1 + SIGNED_REFUSAL_TOKENS)
            / report["422_invalid_limit"]["signed_us"]
            / (1 / served_us),
            2,
        ),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"written {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
