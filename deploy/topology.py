#!/usr/bin/env python3
"""The scale-out topology of ``deploy/compose.yaml`` on one machine, without
Docker: two (``--replicas N``) ``ans serve --workers N`` replicas over one
PostgreSQL registry, and a peer ANS with its own SQLite data directory and a
small catalog, federated from the replicas.

    .venv/bin/python deploy/topology.py [--demo] [--dir DIR] [--json]

What it does, in order: writes the demo keys and signed catalogs
(``deploy/material.py``); makes a fresh schema in the PostgreSQL at ``--pg``
(default 127.0.0.1:5432, database ``test``; or uses ``--store URL`` as it is);
starts the peer on ``--peer-port`` and ACTIVATEs its catalog there; starts the
replicas on ``--port``, ``--port``+1, ... with ``--peer TIER@PEER`` and the
registry's shared signing key in each data directory; with ``--demo``,
ACTIVATEs the 64 demo agents through replica 1 into the shared store; waits
for ``/readyz`` on every node; prints the endpoints (``--json``: also one JSON
line). Then it watches: a node that dies is reported, the others go on.

Ctrl-C, SIGTERM or SIGHUP stop everything: every ``ans serve`` drains (as on
its own SIGTERM), whatever is left of a node's process group after 30 s is
killed, the schema is dropped (unless ``--keep``) and a temporary ``--dir``
removed. Each node runs in a process group of its own, and gets SIGTERM if
this script dies (``PR_SET_PDEATHSIG``), so nothing is left behind. Linux.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
from material import Material, prepare  # deploy/ is this script's folder

DEFAULT_PG = os.environ.get("ANS_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")
GOVERNANCE_AGENT = "agtp://governance.topology.example/agents/platform"
STOP_GRACE = 30.0  # s: ans serve drains in graceful_timeout (10 s) + its workers' margin
IDENTITY = {  # [ans] identity per role, unless --config names one
    "replica": ("agtp://registry.topology.example/agents/ans", "registry.topology.example"),
    "peer": ("agtp://peer.topology.example/agents/ans", "peer.topology.example"),
}


class StartError(RuntimeError):
    """The topology could not start (the message says which node and why)."""


class Stopped(Exception):
    """Told to stop while starting."""


# -- PostgreSQL -------------------------------------------------------------------------
def schema_url(base: str, schema: str) -> str:
    """``base`` with ``search_path`` set to ``schema`` (how ANS picks a schema)."""
    sep = "&" if "?" in base else "?"
    return f"{base}{sep}options={quote(f'-csearch_path={schema}')}"


def create_schema(base: str) -> str:
    import psycopg

    name = f"ans_topology_{secrets.token_hex(4)}"
    try:
        with psycopg.connect(base, autocommit=True, connect_timeout=5) as conn:
            conn.execute(f'CREATE SCHEMA "{name}"')
    except psycopg.Error as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise StartError(f"PostgreSQL at {redact(base)}: {first}") from None
    return name


def drop_schema(base: str, name: str) -> None:
    import psycopg

    with psycopg.connect(base, autocommit=True, connect_timeout=5) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


def redact(url: str) -> str:
    """``url`` without its password."""
    from ans.store_open import redact as _redact

    return str(_redact(url))


# -- processes --------------------------------------------------------------------------
def _die_with_parent() -> None:  # runs in the child, between fork and exec
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of process group ``pgid`` (Linux /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            found.append(int(entry.name))
    return found


@dataclass
class Node:
    """One ``ans serve``: its process (a process group of its own), its log."""

    name: str
    role: str  # "replica" | "peer"
    data_dir: Path
    log: Path
    proc: subprocess.Popen[bytes] | None = None
    url: str = ""
    kid: str = ""
    reported: bool = False
    _listening: threading.Event = field(default_factory=threading.Event)

    def start(self, args: list[str], env: dict[str, str]) -> None:
        """Start ``ans serve ARGS`` (from the main thread: PDEATHSIG follows the
        thread that forked)."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.log.parent.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "ans.cli", "serve", *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            preexec_fn=_die_with_parent,  # forked from the main thread, before any ans code
        )
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        with self.log.open("ab") as out:
            for line in self.proc.stdout:
                out.write(line)
                out.flush()
                text = line.decode("utf-8", "replace")
                if text.startswith("ANS listening on "):
                    self.url = text.split()[-1]
                    self._listening.set()
        self._listening.set()  # the process closed its output: it is gone

    @property
    def pid(self) -> int:
        return self.proc.pid if self.proc is not None else 0

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def wait_listening(self, deadline: float, stop: threading.Event) -> None:
        while not self._listening.wait(0.2):
            if stop.is_set():
                raise Stopped
            if time.monotonic() > deadline:
                raise StartError(f"{self.name} did not start in time\n{self.tail()}")
        if not self.url:
            raise StartError(f"{self.name} exited at start\n{self.tail()}")

    def tail(self, n: int = 25) -> str:
        try:
            lines = self.log.read_text(errors="replace").splitlines()[-n:]
        except OSError:
            return ""
        return "\n".join(f"  {self.name}| {x}" for x in lines)


def wait_ready(node: Node, deadline: float, stop: threading.Event) -> None:
    """Until ``GET /readyz`` answers 200 (index loaded, store answering, audit
    log writable); the node's kid from its JWKS."""
    last = "no answer"
    with httpx.Client(base_url=node.url, timeout=5) as c:
        while time.monotonic() < deadline:
            if stop.is_set():
                raise Stopped
            if not node.alive():
                raise StartError(f"{node.name} exited at start\n{node.tail()}")
            try:
                r = c.get("/readyz")
                if r.status_code == 200:
                    node.kid = c.get("/.well-known/jwks.json").json()["keys"][0]["kid"]
                    return
                last = f"{r.status_code} {r.text[:200]}"
            except httpx.HTTPError as exc:
                last = str(exc)
            time.sleep(0.2)
    raise StartError(f"{node.name} not ready at {node.url}/readyz: {last}")


def activate_file(url: str, catalog: Path, stop: threading.Event) -> tuple[int, int]:
    """ACTIVATE every line of ``catalog`` on ``url`` as the demo governance
    platform (a 429/503 is retried after its Retry-After). (registered or
    unchanged, kept as stored: 409/410 -- a newer manifest or a retired agent)."""
    headers = {
        "agent-id": GOVERNANCE_AGENT,
        "principal-id": "topology-operator",
        "authority-scope": "discovery:register",
        "content-type": "application/agtp+json",
    }
    ok = kept = 0
    with httpx.Client(base_url=url, http1=False, http2=True, timeout=60) as c:
        for n, line in enumerate(catalog.read_text(encoding="utf-8").splitlines(), 1):
            body = {
                "method": "ACTIVATE",
                "task_id": f"topology-{n}",
                "parameters": json.loads(line),
            }
            while True:
                if stop.is_set():
                    raise Stopped
                r = c.request("ACTIVATE", "/", headers=headers, content=json.dumps(body))
                if r.status_code not in (429, 503):
                    break
                time.sleep(min(max(float(r.headers.get("retry-after", "1")), 0.1), 5.0))
            if r.status_code == 200:
                ok += 1
            elif r.status_code in (409, 410):
                kept += 1
            else:
                raise StartError(f"ACTIVATE {catalog.name}:{n} on {url}: {r.status_code} {r.text}")
    return ok, kept


# -- the topology -----------------------------------------------------------------------
@dataclass
class Topology:
    args: argparse.Namespace
    root: Path
    temporary: bool
    material: Material | None = None
    schema: str | None = None
    store: str = ""
    nodes: list[Node] = field(default_factory=list)

    def env(self, role: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
        env["PYTHONUNBUFFERED"] = "1"
        if self.args.config is None:
            agent_id, org = IDENTITY[role]
            env.setdefault("ANS_ANS__AGENT_ID", agent_id)
            env.setdefault("ANS_ANS__ORG_DOMAIN", org)
        return env

    def common(self) -> list[str]:
        assert self.material is not None
        out = ["--governance-jwks", str(self.material.governance_jwks)]
        if self.args.config is not None:
            out += ["--config", str(self.args.config)]
        return [*out, "--log-format", "json"]

    def start(self, stop: threading.Event) -> None:
        a = self.args
        deadline = time.monotonic() + a.timeout
        self.material = m = prepare(self.root)
        if a.store:
            self.store = a.store
        else:
            self.schema = create_schema(a.pg)
            self.store = schema_url(a.pg, self.schema)
        peer = Node("peer", "peer", self.root / "peer", self.root / "logs" / "peer.log")
        self.nodes.append(peer)
        peer.start(
            [
                "--listen",
                f"{a.host}:{a.peer_port}",
                "--data-dir",
                str(peer.data_dir),
                "--workers",
                "1",
                *self.common(),
            ],
            self.env("peer"),
        )
        peer.wait_listening(deadline, stop)
        wait_ready(peer, deadline, stop)
        activate_file(peer.url, m.peer_catalog, stop)
        replicas = []
        for i in range(1, a.replicas + 1):
            node = Node(
                f"replica-{i}",
                "replica",
                self.root / f"replica-{i}",
                self.root / "logs" / f"replica-{i}.log",
            )
            node.data_dir.mkdir(parents=True, exist_ok=True)
            key = node.data_dir / "ans-signing-key.pem"
            if not key.exists():  # one registry identity: the same key on every replica
                shutil.copyfile(m.registry_key, key)
                key.chmod(0o600)
            port = a.port + i - 1 if a.port else 0
            self.nodes.append(node)
            replicas.append(node)
            node.start(
                [
                    "--listen",
                    f"{a.host}:{port}",
                    "--data-dir",
                    str(node.data_dir),
                    "--store",
                    self.store,
                    "--workers",
                    str(a.workers),
                    "--peer",
                    f"{a.peer_tier}@{peer.url}",
                    *self.common(),
                ],
                self.env("replica"),
            )
        for node in replicas:
            node.wait_listening(deadline, stop)
        for node in replicas:
            wait_ready(node, deadline, stop)
        kids = {n.kid for n in replicas}
        if len(kids) != 1:
            print(
                f"warning: the replicas sign with different keys {sorted(kids)} "
                "(a --dir reused with other keys?)",
                file=sys.stderr,
            )
        if a.demo:
            activate_file(replicas[0].url, m.demo_catalog, stop)

    def describe(self) -> dict[str, Any]:
        assert self.material is not None
        m = self.material

        def node(n: Node) -> dict[str, Any]:
            return {
                "name": n.name,
                "url": n.url,
                "pid": n.pid,
                "kid": n.kid,
                "data_dir": str(n.data_dir),
                "log": str(n.log),
            }

        return {
            "event": "ready",
            "dir": str(self.root),
            "store": redact(self.store),
            "schema": self.schema,
            "replicas": [node(n) for n in self.nodes if n.role == "replica"],
            "peer": node(self.nodes[0]),
            "governance_key": str(m.governance_key),
            "governance_jwks": str(m.governance_jwks),
            "governance_agent_id": GOVERNANCE_AGENT,
        }

    def print_ready(self) -> None:
        d = self.describe()
        print(f"ANS topology ready in {d['dir']}")
        print(f"  store      {d['store']}")
        for n in [*d["replicas"], d["peer"]]:
            what = (
                "PostgreSQL, --workers " + str(self.args.workers)
                if n is not d["peer"]
                else "SQLite, its own catalog"
            )
            print(
                f"  {n['name']:<10} {n['url']:<24} pid {n['pid']:<7} kid {n['kid'][:12]}…  "
                f"({what}; log {n['log']})"
            )
        print(f"  governance key {d['governance_key']} (trusted via {d['governance_jwks']})")
        print("Ctrl-C stops everything.")
        if self.args.json:
            print(json.dumps(d))
        sys.stdout.flush()

    def watch(self, stop: threading.Event) -> None:
        while not stop.wait(0.5):
            for n in self.nodes:
                if not n.reported and not n.alive():
                    n.reported = True
                    code = n.proc.returncode if n.proc is not None else None
                    print(
                        f"{n.name} (pid {n.pid}) exited with status {code}; the other nodes go on",
                        flush=True,
                    )

    def shutdown(self) -> list[int]:
        """Stop every node (SIGTERM: each drains), kill what is left of a
        node's process group after STOP_GRACE; drop the schema. The pids that
        could not be ended (none, normally)."""
        for n in self.nodes:
            if n.alive():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(n.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE
        left: list[int] = []
        for n in self.nodes:
            if n.proc is None or n.pid <= 1:
                continue
            try:
                n.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                print(f"{n.name} did not stop in {STOP_GRACE:.0f} s; killing it", file=sys.stderr)
            # the supervisor and whatever is left of its workers
            with contextlib.suppress(ProcessLookupError, PermissionError):
                if group_members(n.pid):
                    os.killpg(n.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                n.proc.wait(timeout=5)
            until = time.monotonic() + 5
            while group_members(n.pid) and time.monotonic() < until:
                time.sleep(0.05)
            left += group_members(n.pid)
        if self.schema is not None and not self.args.keep:
            try:
                drop_schema(self.args.pg, self.schema)
            except Exception as exc:  # report, never hide the stop
                print(f"could not drop schema {self.schema}: {exc}", file=sys.stderr)
        if self.temporary and not self.args.keep:
            shutil.rmtree(self.root, ignore_errors=True)
        return left


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="topology.py",
        description="Two ANS replicas over one PostgreSQL and a federated peer ANS, "
        "on this machine; Ctrl-C stops everything.",
    )
    ap.add_argument("--replicas", type=int, default=2, help="ANS replicas over the shared store")
    ap.add_argument("--workers", type=int, default=2, help="worker processes per replica")
    ap.add_argument("--host", default="127.0.0.1", help="address every node listens on")
    ap.add_argument(
        "--port",
        type=int,
        default=4481,
        help="port of replica 1 (replica i: PORT+i-1); 0 picks free ports",
    )
    ap.add_argument("--peer-port", type=int, default=4490, help="port of the peer ANS; 0: free")
    ap.add_argument(
        "--peer-tier",
        type=int,
        choices=(1, 2, 3),
        default=2,
        help="trust tier the replicas grant the peer",
    )
    ap.add_argument(
        "--pg",
        default=DEFAULT_PG,
        help="PostgreSQL to make a fresh schema in (default: $ANS_TEST_PG_URL "
        "or the local test database)",
    )
    ap.add_argument(
        "--store",
        default="",
        help="use this postgresql:// store as it is instead of a fresh schema",
    )
    ap.add_argument(
        "--dir",
        type=Path,
        default=None,
        help="keys, catalogs, data directories and logs (kept); default: a "
        "temporary directory removed at exit",
    )
    ap.add_argument("--config", type=Path, default=None, help="ans.toml passed to every node")
    ap.add_argument(
        "--demo",
        action="store_true",
        help="ACTIVATE the 64 demo agents into the shared store (via replica 1)",
    )
    ap.add_argument("--json", action="store_true", help="also print the endpoints as one JSON line")
    ap.add_argument(
        "--keep", action="store_true", help="keep the schema and the temporary directory at exit"
    )
    ap.add_argument("--timeout", type=float, default=180.0, help="seconds for the whole start")
    args = ap.parse_args(argv)
    if args.replicas < 1 or args.workers < 1:
        ap.error("--replicas and --workers must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: stop.set())
    temporary = args.dir is None
    root = Path(tempfile.mkdtemp(prefix="ans-topology-")) if temporary else args.dir.resolve()
    root.mkdir(parents=True, exist_ok=True)
    topo = Topology(args, root, temporary)
    rc = 0
    try:
        topo.start(stop)
        topo.print_ready()
        topo.watch(stop)
        print("stopping the topology", flush=True)
    except Stopped:
        print("stopped while starting", flush=True)
    except StartError as exc:
        print(f"topology.py: {exc}", file=sys.stderr)
        rc = 1
    finally:
        left = topo.shutdown()
    if left:
        print(f"topology.py: processes left running: {left}", file=sys.stderr)
        return 1
    print("topology stopped: no process left", flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
