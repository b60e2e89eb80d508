"""Index freshness end to end: a real ``ans serve`` (short intervals,
``scheme = "http"``) refreshing agents that are real HTTP/2 servers on
loopback (hypercorn in this process, answering or failing DESCRIBE and
``/status`` on command), and a webhook receiver that is another loopback
server. Every wait is bounded."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import sqlite3
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from ans.governance.keys import SigningKey, TrustedKeys
from ans.governance.signing import verify_document
from hypercorn.asyncio import serve

from ans.client import AgtpClient
from ans.config import Config
from ans.server import hypercorn_config
from tools.launcher import start_server, stop_server

pytestmark = pytest.mark.integration

TRANSLATION = {"supported_methods": ["QUERY"], "modalities": ["text"], "tools": ["translate_text"]}
KUBERNETES = {
    "supported_methods": ["QUERY", "EXECUTE"],
    "modalities": ["text"],
    "tools": [{"name": "node_pool_autoscaler", "description": "Autoscale Kubernetes node pools"}],
    "tags": ["kubernetes", "autoscaling"],
    "examples": [{"id": "k1", "text": "Scale my Kubernetes node pool when pods are pending"}],
}
K8S_INTENT = "autoscale the node pools of a Kubernetes cluster"


def freshness_toml(webhook_port: int, **extra: Any) -> str:
    settings = {
        "interval": 0.3,
        "retry_interval": 0.3,
        "status_interval": 0.3,
        "timeout": 1.0,
        "webhook_timeout": 1.0,
        "webhook_backoff_initial": 0.2,
        "webhook_backoff_max": 0.5,
        **extra,
    }
    lines = ["[freshness]", 'scheme = "http"', f'webhook_url = "http://127.0.0.1:{webhook_port}/hook"']
    lines += [f"{k} = {v}" for k, v in settings.items()]
    return "\n".join(lines) + "\n"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_for(pred: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def audit_events(data_dir: Path, event: str) -> list[dict[str, Any]]:
    path = data_dir / "audit.jsonl"
    if not path.exists():
        return []
    out = []
    for line in path.read_bytes().splitlines():
        try:
            rec = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue  # a line being written
        if rec.get("event") == event:
            out.append(rec)
    return out


def outbox_rows(data_dir: Path) -> list[tuple[str, str, int]]:
    path = data_dir / "outbox.sqlite3"
    if not path.exists():
        return []
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
    try:
        return db.execute("SELECT event_id, state, attempts FROM outbox").fetchall()
    except sqlite3.OperationalError:
        return []
    finally:
        db.close()


class LoopbackServer:
    """An ASGI callable served by hypercorn (h2c and HTTP/1.1) in a thread."""

    def __init__(self, port: int = 0) -> None:
        self.port = port
        self.url = ""
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None

    async def handle(self, scope: Any, body: bytes) -> tuple[int, bytes]:
        raise NotImplementedError

    async def app(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        if scope["type"] != "http":
            return
        body = b""
        while True:
            msg = await receive()
            body += msg.get("body", b"")
            if not msg.get("more_body"):
                break
        status, out = await self.handle(scope, body)
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", b"application/agtp+json")],
            }
        )
        await send({"type": "http.response.body", "body": out})

    def start(self) -> LoopbackServer:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", self.port))
        sock.listen(64)
        self.port = sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        hc = hypercorn_config(Config(listen=f"127.0.0.1:{self.port}"), sock)
        ready = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            self._stop = asyncio.Event()
            ready.set()
            loop.run_until_complete(serve(self.app, hc, shutdown_trigger=self._stop.wait))  # type: ignore[arg-type]
            loop.close()

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()
        assert ready.wait(10)
        return self

    def stop(self) -> None:
        if self._loop is None or self._stop is None or self._thread is None:
            return
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout=10)
        self._loop = None


class FakeAgents(LoopbackServer):
    """Agents under /agents/<label>: DESCRIBE answers from a per-label script
    ("ok" with a capability document, "fail" with a 500; the last entry
    repeats), GET .../status answers a per-label status document."""

    def __init__(self) -> None:
        super().__init__()
        self.script: dict[str, list[str]] = {}
        self.caps: dict[str, dict[str, Any]] = {}
        self.status: dict[str, dict[str, Any] | None] = {}
        self.served: dict[str, list[str]] = {}
        self.describe_headers: list[dict[str, str]] = []
        self.http_versions: set[str] = set()
        self.lock = threading.Lock()

    def manifest_uri(self, label: str) -> str:
        return f"agtp://127.0.0.1:{self.port}/agents/{label}"

    def outcomes(self, label: str) -> Counter[str]:
        with self.lock:
            return Counter(self.served.get(label, []))

    async def handle(self, scope: Any, body: bytes) -> tuple[int, bytes]:
        parts = scope["path"].strip("/").split("/")
        if len(parts) < 2 or parts[0] != "agents":
            return 404, b"{}"
        label = parts[1]
        if scope["method"] == "GET" and parts[2:] == ["status"]:
            doc = self.status.get(label)
            if doc is None:
                return 500, b"{}"
            return 200, orjson.dumps({"document_type": "agtp-status", **doc})
        if scope["method"] != "DESCRIBE" or len(parts) != 2:
            return 405, b"{}"
        with self.lock:
            self.http_versions.add(scope["http_version"])
            self.describe_headers.append(
                {k.decode(): v.decode() for k, v in scope["headers"]}
            )
            steps = self.script.setdefault(label, ["ok"])
            step = steps.pop(0) if len(steps) > 1 else steps[0]
            self.served.setdefault(label, []).append(step)
        if step == "fail":
            return 500, orjson.dumps({"status": 500, "error": {"code": "boom", "message": "x"}})
        task_id = orjson.loads(body).get("task_id")
        caps = self.caps.get(label, TRANSLATION)
        return 200, orjson.dumps({"status": 200, "task_id": task_id, "result": caps})


class WebhookReceiver(LoopbackServer):
    def __init__(self, port: int = 0) -> None:
        super().__init__(port)
        self.received: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []

    async def handle(self, scope: Any, body: bytes) -> tuple[int, bytes]:
        if scope["method"] != "POST" or scope["path"] != "/hook":
            return 404, b""
        self.received.append(orjson.loads(body))
        self.headers.append({k.decode(): v.decode() for k, v in scope["headers"]})
        return 200, b"{}"


@pytest.fixture
def loopback() -> Iterator[Callable[[LoopbackServer], Any]]:
    started: list[LoopbackServer] = []

    def start(srv: LoopbackServer) -> Any:
        started.append(srv)
        return srv.start()

    yield start
    for srv in started:
        srv.stop()


@pytest.fixture
def ans(server_factory: Any, tmp_path: Path, test_gov_key: tuple[SigningKey, Path]) -> Any:
    def start(data: Path, toml: str) -> Any:
        data.mkdir(exist_ok=True)
        (data / "ans.toml").write_text(toml)
        return server_factory(
            data, "--governance-jwks", str(test_gov_key[1]), "--config", str(data / "ans.toml")
        )

    return start


@pytest.fixture
def activate(
    test_gov_key: tuple[SigningKey, Path], make_manifest: Callable[..., dict[str, Any]]
) -> Callable[..., str]:
    def run(url: str, label: str, manifest_uri: str, caps: dict[str, Any] | None = None) -> str:
        manifest = make_manifest(label, key=test_gov_key[0], manifest_uri=manifest_uri)
        with AgtpClient(
            url, agent_id="agtp://gov.example/agents/p", principal_id="gov", scope="discovery:register"
        ) as c:
            resp = c.call("ACTIVATE", {"manifest": manifest, "capabilities": caps or TRANSLATION})
            assert resp.status == 200, resp.body
        return str(manifest["canonical_id"])

    return run


def discover(url: str, **params: Any) -> list[dict[str, Any]]:
    with AgtpClient(
        url, agent_id="agtp://orch.example/agents/o", principal_id="usr-1", scope="discovery:query"
    ) as c:
        resp = c.discover({"limit": 20, **params})
        assert resp.status == 200, resp.body
        results: list[dict[str, Any]] = resp.result["results"]
        return results


def jwks_of(url: str) -> TrustedKeys:
    with AgtpClient(url, agent_id="a://x", principal_id="p", scope="discovery:query") as c:
        return TrustedKeys.from_jwks(c.jwks())


def test_three_strikes_refresh_availability_and_signed_webhook(
    loopback: Any, ans: Any, activate: Any, tmp_path: Path
) -> None:
    agents = loopback(FakeAgents())
    hook = loopback(WebhookReceiver())
    agents.script["wobbly"] = ["fail", "fail", "ok", "fail"]  # then fails for ever
    agents.caps["steady"] = KUBERNETES  # it now describes something new
    agents.status.update(
        wobbly={"lifecycle_state": "Active"},
        steady={"lifecycle_state": "Active", "active_session_count": 4, "max_sessions": 4},
        paused={"lifecycle_state": "Suspended"},
    )
    srv = ans(tmp_path / "ans", freshness_toml(hook.port))
    wobbly = activate(srv.url, "wobbly", agents.manifest_uri("wobbly"))
    steady = activate(srv.url, "steady", agents.manifest_uri("steady"))
    activate(srv.url, "paused", agents.manifest_uri("paused"))

    (removal,) = wait_for(
        lambda: audit_events(srv.data_dir, "freshness_removal"), 30, "the removal of wobbly"
    )
    assert removal["canonical_id"] == wobbly and removal["failures"] == 3
    assert removal["reason"] == "describe_failed" and "500" in removal["last_error"]
    # Two failures did not remove it (it was asked again, and answered), the
    # third consecutive one did, and a removed agent is not asked again.
    assert agents.outcomes("wobbly") == Counter(fail=5, ok=1)
    assert agents.served["wobbly"] == ["fail", "fail", "ok", "fail", "fail", "fail"]
    # Three more rounds (steady is DESCRIBEd on the cadence wobbly was retried on):
    # wobbly would have been asked again by now.
    after_removal = agents.outcomes("steady")["ok"]
    wait_for(
        lambda: agents.outcomes("steady")["ok"] >= after_removal + 3, 30, "three more rounds"
    )
    assert agents.outcomes("wobbly") == Counter(fail=5, ok=1)
    assert agents.outcomes("steady")["ok"] >= 4
    labels = {r["agent_label"] for r in discover(srv.url)}
    assert labels == {"steady", "paused"}

    # The governance platform got the signed notice, once per event id.
    notices = wait_for(lambda: list(hook.received), 10, "the webhook notice")
    assert {n["event_id"] for n in notices} == {removal["event_id"]}
    notice = notices[0]
    assert verify_document(notice, jwks_of(srv.url), "signature") == notice["ans_id"]
    assert notice["event"] == "agent_removed" and notice["canonical_id"] == wobbly
    assert notice["agent_label"] == "wobbly" and notice["failures"] == 3
    assert hook.headers[0]["ans-event-id"] == removal["event_id"]
    wait_for(
        lambda: audit_events(srv.data_dir, "webhook_delivered"), 10, "the delivery audit record"
    )

    # The refresh went over HTTP/2 with this ANS's identity, and re-indexed steady.
    assert agents.http_versions == {"2"}
    h = agents.describe_headers[0]
    assert h["agent-id"] == "agtp://localhost/agents/ans" and h["authority-scope"] == "discovery:refresh"
    top = discover(srv.url, intent=K8S_INTENT)[0]
    assert top["agent_label"] == "steady" and top["canonical_id"] == steady
    # Availability from /status: at capacity and suspended agents are marked, inside the signed result.
    by_label = {r["agent_label"]: r for r in discover(srv.url)}
    assert by_label["steady"]["availability_reason"] == "at_capacity"
    assert by_label["paused"]["available"] is False
    assert by_label["paused"]["availability_reason"] == "suspended"
    agents.status["steady"] = {"lifecycle_state": "Active", "active_session_count": 1, "max_sessions": 4}
    wait_for(
        lambda: "available" not in next(r for r in discover(srv.url) if r["agent_label"] == "steady"),
        10,
        "steady to be available again",
    )


def test_the_notice_survives_a_restart_between_removal_and_delivery(
    loopback: Any, ans: Any, activate: Any, tmp_path: Path
) -> None:
    agents = loopback(FakeAgents())
    hook_port = free_port()  # nobody listens there yet: the platform is down
    agents.script["doomed"] = ["fail"]
    toml = freshness_toml(hook_port, status_interval=0)
    data = tmp_path / "ans"
    srv = ans(data, toml)
    doomed = activate(srv.url, "doomed", agents.manifest_uri("doomed"))
    (removal,) = wait_for(lambda: audit_events(data, "freshness_removal"), 30, "the removal")
    event_id = removal["event_id"]
    assert removal["canonical_id"] == doomed and removal["failures"] == 3
    # Delivery is being retried while the receiver is down.
    wait_for(
        lambda: any(r[0] == event_id and r[2] >= 2 and r[1] == "pending" for r in outbox_rows(data)),
        10,
        "two failed delivery attempts",
    )
    srv.proc.terminate()
    srv.proc.wait(timeout=15)
    assert agents.outcomes("doomed") == Counter(fail=3)

    again = ans(data, toml)
    assert discover(again.url) == []  # still removed after the restart
    hook = loopback(WebhookReceiver(hook_port))
    notices = wait_for(lambda: list(hook.received), 15, "the notice after the restart")
    assert {n["event_id"] for n in notices} == {event_id}
    assert notices[0]["canonical_id"] == doomed
    assert verify_document(notices[0], jwks_of(again.url), "signature") == notices[0]["ans_id"]
    wait_for(
        lambda: (event_id, "delivered") in {(r[0], r[1]) for r in outbox_rows(data)},
        10,
        "the outbox row to be marked delivered",
    )
    assert agents.outcomes("doomed") == Counter(fail=3)  # never asked again



class SilentStatus(FakeAgents):
    """Agents whose ``/status`` reads the request and answers only once released."""

    def __init__(self) -> None:
        super().__init__()
        self.polled = threading.Event()
        self.release = threading.Event()

    async def handle(self, scope: Any, body: bytes) -> tuple[int, bytes]:
        if scope["method"] == "GET" and scope["path"].endswith("/status"):
            self.polled.set()
            while not self.release.is_set():
                await asyncio.sleep(0.05)
        return await super().handle(scope, body)


def stop_and_time(srv: Any, limit: float) -> tuple[float, str]:
    """SIGTERM, then the seconds until the process exited and its output;
    fails unless it exits 0 within ``limit`` without a traceback or warning."""
    started = time.monotonic()
    srv.proc.terminate()
    try:
        rc = srv.proc.wait(timeout=limit)
    except subprocess.TimeoutExpired:
        pytest.fail(f"still running {limit}s after SIGTERM:\n{''.join(srv.output)[-3000:]}")
    took = time.monotonic() - started
    out = "".join(srv.output)
    assert rc == 0, out
    for bad in ("Traceback", "never awaited", "Exception in", "[error"):
        assert bad not in out, out
    return took, out


def test_sigterm_during_a_status_poll_stops_promptly(
    loopback: Any, ans: Any, activate: Any, tmp_path: Path
) -> None:
    """An agent that holds its ``/status`` answer: the poll in flight is
    cancelled at once, the stop does not wait for it."""
    agents = loopback(SilentStatus())
    try:
        toml = '[freshness]\nscheme = "http"\nstatus_interval = 0.2\ntimeout = 30\n'
        srv = ans(tmp_path / "ans", toml)
        activate(srv.url, "mute", agents.manifest_uri("mute"))
        assert agents.polled.wait(30), "the /status poll never arrived"
        took, _ = stop_and_time(srv, 10)
        assert took < 3.0, f"stopping took {took:.1f}s"
    finally:
        agents.release.set()


HOSTS_ON_FIFO = 'mount --bind "$0" /etc/hosts && exec "$@"'


def can_bind_mount_hosts(tmp: Path) -> bool:
    probe = tmp / "hosts-probe"
    probe.write_text("")
    if shutil.which("unshare") is None:
        return False
    run = subprocess.run(
        ["unshare", "-rm", "sh", "-c", HOSTS_ON_FIFO, str(probe), "true"],
        capture_output=True,
        timeout=30,
    )
    return run.returncode == 0


def release_lookups(fifo: Path) -> None:
    """Let the name lookups blocked on opening the FIFO go on (they read
    an empty file: the name is unknown)."""
    with contextlib.suppress(OSError):  # ENXIO: nobody is waiting
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))


def test_sigterm_during_a_name_lookup_stops_promptly(
    activate: Any, test_gov_key: tuple[SigningKey, Path], tmp_path: Path
) -> None:
    """A status poll of an agent whose host name does not resolve yet (the
    lookup blocks, as with an unreachable name server): exit does not wait
    for the lookup thread. It used to (asyncio.run joins its executor), for
    as long as the resolver took (issue 23: 6.6 s)."""
    if not can_bind_mount_hosts(tmp_path):
        pytest.skip("cannot bind-mount /etc/hosts in a user namespace here (unshare -rm)")
    fifo = tmp_path / "hosts"
    os.mkfifo(fifo)
    data = tmp_path / "ans"
    data.mkdir()
    cfg = data / "ans.toml"
    cfg.write_text('[freshness]\nscheme = "http"\nstatus_interval = 0.2\ntimeout = 1\n')
    srv = start_server(
        data,
        "--governance-jwks",
        str(test_gov_key[1]),
        "--config",
        str(cfg),
        wrapper=("unshare", "-rm", "sh", "-c", HOSTS_ON_FIFO, str(fifo)),
    )
    try:
        activate(srv.url, "far", "agtp://far.ans-test.invalid/agents/far")
        # A status poll has timed out: its lookup still waits to open /etc/hosts
        # (no writer has opened the FIFO), on a thread of the server.
        wait_for(lambda: "reason=not_responding" in "".join(srv.output), 30, "a timed-out poll")
        took, _ = stop_and_time(srv, 10)
        assert took < 3.0, f"stopping took {took:.1f}s"
    finally:
        release_lookups(fifo)
        stop_server(srv)
