"""Federation between real ANS servers on loopback ports.

Honest peers are ``ans serve`` subprocesses. Misbehaving peers (slow,
tampering, threshold-ignoring) are real hypercorn HTTP/2 servers in this
process, answering with a real AnsService's signed results and then
misbehaving. A down peer is a port nobody listens on. The last cases run
the same federation over the native AGTP framing (``--native-listen`` peers
named ``agtp+cleartext://``), with a silent raw-TCP peer."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import orjson
import pytest
from ans.governance.keys import SigningKey
from ans.governance.signing import sign_document
from ans.protocol.binding import header_map
from ans.protocol.messages import ActivateRequest, Identity, parse_discover
from ans.protocol.native import NativeParser, NativeRequest
from ans.protocol.scope import parse_authority_scope
from hypercorn.asyncio import serve

from ans.cli import main
from ans.client import AgtpClient, verify_discover_result
from ans.config import Config
from ans.server import hypercorn_config
from ans.wiring import build_service

pytestmark = pytest.mark.integration

INTENT = "audit Solidity smart contracts for reentrancy bugs"
QUERY = {"intent": INTENT, "limit": 5}
FAST_CONFIG = "[federation]\npeer_timeout = 0.6\ndeadline = 1.2\n"


def client(url: str) -> AgtpClient:
    return AgtpClient(
        url, agent_id="agtp://orch.example/agents/o", principal_id="usr-1", scope="discovery:query"
    )


def solidity(label: str, **kw: Any) -> dict[str, Any]:
    return {
        "label": label,
        "org_domain": f"{label}.example",
        "job_description": f"{label}: audits Solidity smart contracts for reentrancy bugs.",
        **kw,
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def kid_of(url: str) -> str:
    with client(url) as c:
        kid: str = c.jwks()["keys"][0]["kid"]
        return kid


@pytest.fixture
def activate(
    test_gov_key: tuple[SigningKey, Path], make_manifest: Callable[..., dict[str, Any]]
) -> Callable[..., None]:
    def run(url: str, *agents: dict[str, Any]) -> None:
        with AgtpClient(
            url,
            agent_id="agtp://gov.example/agents/p",
            principal_id="gov",
            scope="discovery:register",
        ) as c:
            for spec in agents:
                spec = dict(spec)
                manifest = make_manifest(spec.pop("label"), key=test_gov_key[0], **spec)
                resp = c.call("ACTIVATE", {"manifest": manifest, "capabilities": {}})
                assert resp.status == 200, resp.body

    return run


@pytest.fixture
def start(server_factory: Any, tmp_path: Path, test_gov_key: tuple[SigningKey, Path]) -> Any:
    """start(name, *args, config=None) -> RunningServer trusting the test governance key."""
    counter = iter(range(100))

    def run(name: str, *extra: str, config: str | None = None) -> Any:
        data = tmp_path / f"{name}-{next(counter)}"
        data.mkdir()
        args = ["--governance-jwks", str(test_gov_key[1]), *extra]
        if config is not None:
            (data / "ans.toml").write_text(config)
            args += ["--config", str(data / "ans.toml")]
        return server_factory(data, *args)

    return run


def discover(url: str, params: dict[str, Any] = QUERY) -> dict[str, Any]:
    with client(url) as c:
        resp = c.discover(params)
        assert resp.status == 200, resp.body
        verify_discover_result(resp.result, c.jwks(), params)  # our key, our digest
        return resp.result


def warnings_of(result: dict[str, Any]) -> list[tuple[str, str]]:
    return [(w["code"], w["peer"]) for w in result["warnings"]]


def labels(result: dict[str, Any]) -> list[str]:
    return sorted(r["agent_label"] for r in result["results"])


# -- a misbehaving peer: a real hypercorn server in this process ---------------------------


class RoguePeer:
    """A real AnsService behind a real HTTP/2 server that misbehaves on DISCOVER."""

    def __init__(self, tmp: Path, embedder: Any, jwks: Path, key: SigningKey, make: Any) -> None:
        cfg = Config(data_dir=tmp, governance_jwks=(jwks,), listen="127.0.0.1:0")
        self.service = build_service(cfg, embedder=embedder).service
        self.config = cfg
        self.sleep = 0.0
        self.mode = "honest"
        gov = Identity("agtp://gov/agents/p", "gov", parse_authority_scope("discovery:register"))
        self._activate = lambda spec: self.service.activate(
            ActivateRequest(gov, "t", make(spec.pop("label"), key=key, **spec), {})
        )
        self.url = ""
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._release: asyncio.Event | None = None
        self.inflight = 0

    def add(self, *agents: dict[str, Any]) -> None:
        for spec in agents:
            self._activate(dict(spec))

    async def app(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            if scope["type"] == "lifespan":
                while (await receive())["type"] != "lifespan.shutdown":
                    await send({"type": "lifespan.startup.complete"})
                await send({"type": "lifespan.shutdown.complete"})
            return
        body = b""
        while True:
            msg = await receive()
            body += msg.get("body", b"")
            if not msg.get("more_body"):
                break
        if scope["method"] == "GET":
            out = orjson.dumps(self.service.jwks())
        else:
            self.inflight += 1
            try:
                out = await self._discover(header_map(scope["headers"]), body)
            finally:
                self.inflight -= 1
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/agtp+json")],
            }
        )
        await send({"type": "http.response.body", "body": out})

    async def _discover(self, headers: dict[str, str], body: bytes) -> bytes:
        svc = self.service
        req = parse_discover(headers, body, svc.limits)
        if self.sleep:
            assert self._release is not None
            try:  # sleep, but let teardown cut it short so no request is left hanging
                await asyncio.wait_for(self._release.wait(), self.sleep)
            except TimeoutError:
                pass
        if self.mode == "ignore-floor":
            relaxed = {k: v for k, v in req.raw_parameters.items() if k != "behavioral_trust_min"}
            payload = orjson.dumps({"method": "DISCOVER", "parameters": relaxed})
            result = svc.discover(parse_discover(headers, payload, svc.limits))
            result["query_digest"] = req.query_digest  # claim it answers what was asked
            result = sign_document(result, svc.key, "ans_signature")
        else:
            result = svc.discover(req)
        if self.mode == "huge":
            filler = "x" * (2 * 1024 * 1024)
            return orjson.dumps({"status": 200, "result": {**result, "filler": filler}})
        if self.mode == "tamper":
            for r in result["results"]:
                r["trust_tier"] = 1
                r["behavioral_trust_score"] = 1.0
        return orjson.dumps({"status": 200, "task_id": req.task_id, "result": result})

    def __enter__(self) -> RoguePeer:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        hc = hypercorn_config(self.config, sock)
        ready = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            self._stop = asyncio.Event()
            self._release = asyncio.Event()
            ready.set()
            loop.run_until_complete(serve(self.app, hc, shutdown_trigger=self._stop.wait))  # type: ignore[arg-type]
            loop.close()

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()
        assert ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._loop is not None and self._stop is not None and self._thread is not None
        assert self._release is not None
        self._loop.call_soon_threadsafe(self._release.set)
        for _ in range(50):  # let released requests finish before shutting down
            if self.inflight == 0:
                break
            time.sleep(0.05)
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout=10)
        self.service.audit.close()
        self.service.store.close()


@pytest.fixture
def rogue(
    tmp_path: Path,
    embedder: Any,
    test_gov_key: tuple[SigningKey, Path],
    make_manifest: Any,
) -> Iterator[Callable[[], RoguePeer]]:
    made: list[RoguePeer] = []

    def make() -> RoguePeer:
        d = tmp_path / f"rogue-{len(made)}"
        d.mkdir()
        peer = RoguePeer(d, embedder, test_gov_key[1], test_gov_key[0], make_manifest)
        made.append(peer)
        return peer.__enter__()

    yield make
    for peer in made:
        peer.__exit__()


# -- the cases of the issue ------------------------------------------------------------------


def chain_a_b_c(start: Any, activate: Any, *, native: bool) -> tuple[Any, Any, dict[str, Any]]:
    """A -> B -> C (over the native framing when ``native``), one agent on each;
    checks the answer A gives and returns (a, b, that answer)."""
    listen = ("--native-listen", "127.0.0.1:0") if native else ()

    def peer_url(srv: Any) -> str:
        return str(srv.native_url if native else srv.url)

    c = start("c", *listen)
    activate(c.url, solidity("deep-auditor", behavioral_trust_score=0.97))
    b = start("b", *listen, "--peer", f"2@{peer_url(c)}")
    activate(b.url, solidity("middle-auditor"))
    a = start("a", "--peer", f"2@{peer_url(b)}")
    activate(a.url, solidity("near-auditor", behavioral_trust_score=0.7))
    got = discover(a.url)
    ka, kb, kc = kid_of(a.url), kid_of(b.url), kid_of(c.url)
    assert labels(got) == ["deep-auditor", "middle-auditor", "near-auditor"]
    assert got["federation_path"] == [ka, kb, kc]
    assert got["warnings"] == []
    by_label = {r["agent_label"]: r for r in got["results"]}
    deep = by_label["deep-auditor"]["provenance"]
    assert deep["route"] == [kb, kc] and deep["origin_service"] == kc
    assert deep["peer"] == {"ans_id": kb, "url": peer_url(b), "granted_trust_tier": 2}
    assert by_label["middle-auditor"]["provenance"]["route"] == [kb]
    assert "provenance" not in by_label["near-auditor"]
    assert [r["rank"] for r in got["results"]] == [1, 2, 3]
    # Forwards are audit events on every hop.
    for srv in (a, b):
        text = (srv.data_dir / "audit.jsonl").read_text()
        assert '"event":"federation_forward"' in text and '"outcome":"ok"' in text
    return a, b, got


def test_chain_a_b_c(start: Any, activate: Any, capsys: pytest.CaptureFixture[str]) -> None:
    a, b, got = chain_a_b_c(start, activate, native=False)
    ka, kb, kc = got["federation_path"]
    # The CLI shows where each result came from, and verifies the merged signature.
    capsys.readouterr()
    assert main(["discover", INTENT, "--server", a.url, "--limit", "5"]) == 0
    out = capsys.readouterr().out
    assert f"federation path: {ka} -> {kb} -> {kc}" in out
    assert "signature: verified" in out
    deep_row = next(line for line in out.splitlines() if "deep-auditor@" in line)
    assert deep_row.rstrip().endswith(b.url)
    assert next(line for line in out.splitlines() if "near-auditor@" in line).endswith("local")


def test_loop_a_b_terminates(start: Any, activate: Any) -> None:
    pa, pb = free_port(), free_port()
    a = start("a", "--listen", f"127.0.0.1:{pa}", "--peer", f"2@http://127.0.0.1:{pb}")
    b = start("b", "--listen", f"127.0.0.1:{pb}", "--peer", f"2@http://127.0.0.1:{pa}")
    activate(a.url, solidity("alpha-auditor"))
    activate(b.url, solidity("beta-auditor"))
    started = time.monotonic()
    got = discover(a.url)
    assert time.monotonic() - started < 5.0
    assert labels(got) == ["alpha-auditor", "beta-auditor"]
    assert got["federation_path"] == [kid_of(a.url), kid_of(b.url)]
    assert got["warnings"] == []
    got_b = discover(b.url)  # and from the other side
    assert labels(got_b) == ["alpha-auditor", "beta-auditor"]


def test_slow_peer_times_out(start: Any, activate: Any, rogue: Any) -> None:
    slow = rogue()
    slow.add(solidity("slow-auditor"))
    slow.sleep = 3.0
    a = start("a", "--peer", f"2@{slow.url}", config=FAST_CONFIG)
    activate(a.url, solidity("local-auditor"))
    started = time.monotonic()
    got = discover(a.url)
    assert time.monotonic() - started < 2.5
    assert labels(got) == ["local-auditor"]
    assert warnings_of(got) == [("peer_timeout", slow.url)]
    assert got["federation_path"] == [kid_of(a.url)]


def test_down_peer(start: Any, activate: Any, tmp_path: Path) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    # Key from the peer's JWKS URL: the key fetch is what fails.
    a = start("a", "--peer", f"2@{dead}", config=FAST_CONFIG)
    activate(a.url, solidity("local-auditor"))
    got = discover(a.url)
    assert labels(got) == ["local-auditor"]
    assert warnings_of(got) == [("peer_key_unavailable", dead)]
    # Key pinned in a file: the DISCOVER itself cannot connect.
    jwks = tmp_path / "dead.jwks.json"
    jwks.write_bytes(orjson.dumps({"keys": [SigningKey.generate().public.jwk()]}))
    pinned = FAST_CONFIG + f'[[federation.peers]]\nurl = "{dead}"\ntier = 2\njwks_file = "{jwks}"\n'
    b = start("b", config=pinned)
    activate(b.url, solidity("local-auditor"))
    got = discover(b.url)
    assert labels(got) == ["local-auditor"]
    assert warnings_of(got) == [("peer_unreachable", dead)]


def test_tampered_peer_answer(start: Any, activate: Any, rogue: Any) -> None:
    bad = rogue()
    bad.add(solidity("forged-auditor", trust_tier=2, behavioral_trust_score=0.6))
    bad.mode = "tamper"
    a = start("a", "--peer", f"2@{bad.url}", config=FAST_CONFIG)
    activate(a.url, solidity("local-auditor"))
    got = discover(a.url)
    assert labels(got) == ["local-auditor"]
    assert warnings_of(got) == [("peer_signature_invalid", bad.url)]
    audit = (a.data_dir / "audit.jsonl").read_text()
    assert '"event":"federation_drop"' in audit and "peer_signature_invalid" in audit


def test_peer_results_below_the_trust_floor(start: Any, activate: Any, rogue: Any) -> None:
    lax = rogue()
    lax.add(
        solidity("solid-auditor", behavioral_trust_score=0.95),
        solidity("shaky-auditor", behavioral_trust_score=0.4),
    )
    lax.mode = "ignore-floor"
    a = start("a", "--peer", f"2@{lax.url}", config=FAST_CONFIG)
    params = {**QUERY, "behavioral_trust_min": 0.9}
    got = discover(a.url, params)
    assert labels(got) == ["solid-auditor"]
    assert warnings_of(got) == [("peer_threshold_violation", lax.url)]
    assert "shaky" not in str(got["results"])


def test_peer_claiming_tier_1_is_capped_at_2(start: Any, activate: Any) -> None:
    b = start("b")
    activate(b.url, solidity("tier-one-auditor", trust_tier=1, behavioral_trust_score=0.9))
    a = start("a", "--peer", f"2@{b.url}")
    got = discover(a.url)
    (r,) = got["results"]
    assert r["trust_tier"] == 2
    assert r["provenance"]["claimed_trust_tier"] == 1
    cms = r["capability_match_score"]
    assert r["rank_score"] == round(0.3 * 0.5 + 0.4 * 0.9 + 0.3 * cms, 6)
    # The same agent asked of b directly keeps b's tier.
    assert discover(b.url)["results"][0]["trust_tier"] == 1
    # A caller demanding tier 1 gets nothing from a tier-2 peer, and a is not even asked.
    assert discover(a.url, {**QUERY, "trust_tier_min": 1})["results"] == []


def test_oversized_peer_answer_is_cut_off(start: Any, activate: Any, rogue: Any) -> None:
    big = rogue()
    big.add(solidity("bloated-auditor"))
    big.mode = "huge"
    config = FAST_CONFIG + "max_response_bytes = 65536\n"
    a = start("a", "--peer", f"2@{big.url}", config=config)
    activate(a.url, solidity("local-auditor"))
    got = discover(a.url)
    assert labels(got) == ["local-auditor"]
    assert warnings_of(got) == [("peer_bad_response", big.url)]
    assert "65536" in got["warnings"][0]["message"]


def test_peer_connection_recycled_between_requests_is_retried(start: Any, activate: Any) -> None:
    # b closes every HTTP/2 connection after 2 requests; a must reconnect, not warn.
    b = start("b", config="[server]\nkeep_alive_max_requests = 2\n")
    activate(b.url, solidity("remote-auditor"))
    a = start("a", "--peer", f"2@{b.url}")
    for _ in range(6):
        got = discover(a.url)
        assert labels(got) == ["remote-auditor"]
        assert got["warnings"] == []


# -- peers over the native AGTP framing (ans serve --native-listen) ---------------------------


def pinned_peer(url: str, tmp_path: Path) -> str:
    """A [[federation.peers]] entry whose key is pinned in a file (no key fetch)."""
    jwks = tmp_path / f"pinned-{urlsplit(url).port}.jwks.json"
    jwks.write_bytes(orjson.dumps({"keys": [SigningKey.generate().public.jwk()]}))
    return f'[[federation.peers]]\nurl = "{url}"\ntier = 2\njwks_file = "{jwks}"\n'


def test_native_chain_a_b_c(start: Any, activate: Any) -> None:
    a, _, got = chain_a_b_c(start, activate, native=True)
    # The same query again goes over the kept-alive native connections.
    again = discover(a.url)
    assert labels(again) == labels(got) and again["warnings"] == []


def test_native_peer_down(start: Any, activate: Any, tmp_path: Path) -> None:
    dead = f"agtp+cleartext://127.0.0.1:{free_port()}"
    # Key pinned in a file: the DISCOVER itself cannot connect.
    a = start("a", config=FAST_CONFIG + pinned_peer(dead, tmp_path))
    activate(a.url, solidity("local-auditor"))
    got = discover(a.url)
    assert labels(got) == ["local-auditor"]
    assert warnings_of(got) == [("peer_unreachable", dead)]
    assert dead in got["warnings"][0]["message"]
    # Key from the peer's manifest (the default for agtp URLs): the DESCRIBE fails first.
    b = start("b", "--peer", f"2@{dead}", config=FAST_CONFIG)
    activate(b.url, solidity("local-auditor"))
    got = discover(b.url)
    assert labels(got) == ["local-auditor"]
    assert warnings_of(got) == [("peer_key_unavailable", dead)]


class SilentPeer:
    """A TCP server on 127.0.0.1 that accepts and reads native requests but never answers."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.1)
        self.url = f"agtp+cleartext://127.0.0.1:{self.sock.getsockname()[1]}"
        self.requests: list[NativeRequest] = []
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._accept = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            t = threading.Thread(target=self._read, args=(conn,), daemon=True)
            self._threads.append(t)
            t.start()

    def _read(self, conn: socket.socket) -> None:
        parser = NativeParser()
        conn.settimeout(0.1)
        with conn:
            while not self._stop.is_set():
                try:
                    data = conn.recv(65536)
                except TimeoutError:
                    continue
                except OSError:
                    return
                if not data:
                    return
                self.requests += parser.feed(data)

    def __enter__(self) -> SilentPeer:
        self._accept.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in [self._accept, *self._threads]:
            t.join(timeout=5)
        self.sock.close()


def test_native_peer_that_never_answers(start: Any, activate: Any, tmp_path: Path) -> None:
    with SilentPeer() as silent:
        a = start("a", config=FAST_CONFIG + pinned_peer(silent.url, tmp_path))
        activate(a.url, solidity("local-auditor"))
        started = time.monotonic()
        got = discover(a.url)
        assert time.monotonic() - started < 4.0  # the 1.2 s deadline, not a hang
        assert labels(got) == ["local-auditor"]
        assert warnings_of(got) == [("peer_timeout", silent.url)]
        assert got["federation_path"] == [kid_of(a.url)]
        # It was asked, in the native framing, with the caller's identity.
        (req,) = silent.requests
        assert req.method == "DISCOVER" and req.version == "AGTP/1.0"
        assert req.headers["agent-id"] == "agtp://orch.example/agents/o"
        assert orjson.loads(req.body)["parameters"]["intent"] == INTENT


def test_a_peer_that_keeps_hanging_is_skipped(start: Any, activate: Any, tmp_path: Path) -> None:
    skipping = FAST_CONFIG + "failures_before_skip = 2\nskip_seconds = 60\n"
    with SilentPeer() as silent:
        a = start("a", config=skipping + pinned_peer(silent.url, tmp_path))
        activate(a.url, solidity("local-auditor"))
        for _ in range(2):
            assert warnings_of(discover(a.url)) == [("peer_timeout", silent.url)]
        got = discover(a.url)  # not asked: answered without waiting for it
        assert warnings_of(got) == [("peer_skipped", silent.url)]
        assert "after 2 consecutive failures (last: peer_timeout)" in got["warnings"][0]["message"]
        assert labels(got) == ["local-auditor"]
        assert got["federation_path"] == [kid_of(a.url)]
        assert len(silent.requests) == 2
        health = httpx.get(a.url + "/healthz").json()
        assert health["federation"] == {"peers": 1, "skipped": 1}
        assert silent.url not in str(health)  # counts only
        events = [
            orjson.loads(line) for line in (a.data_dir / "audit.jsonl").read_bytes().splitlines()
        ]
        (skipped,) = [e for e in events if e["event"] == "federation_peer_skipped"]
        assert skipped["peer"] == silent.url and skipped["skip_seconds"] == 60.0
